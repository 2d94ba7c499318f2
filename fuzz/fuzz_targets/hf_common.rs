//! Shared by the HF fuzz targets: a private copy of the tiny base folder (made by
//! `make_hf_seeds.py`), one per process, with one of its files replaced by the fuzz input.

use std::path::PathBuf;
use std::sync::OnceLock;

use quantgate::convert::{convert, ConvertOptions, OutType};

/// The base folder: `$QG_FUZZ_BASE` or `base/tiny-bert`.
fn base() -> PathBuf {
    std::env::var("QG_FUZZ_BASE")
        .unwrap_or_else(|_| "base/tiny-bert".into())
        .into()
}

/// The data section (everything after the header) of the base folder's model.safetensors.
// Each target compiles this module; only hf_safetensors uses this function.
#[allow(dead_code)]
pub fn base_data_section() -> &'static [u8] {
    static DATA: OnceLock<Vec<u8>> = OnceLock::new();
    DATA.get_or_init(|| {
        let b = std::fs::read(base().join("model.safetensors")).expect("base safetensors");
        let n = u64::from_le_bytes(b[..8].try_into().expect("8 bytes")) as usize;
        b[8 + n..].to_vec()
    })
}

/// The per-process work folder, copied once from `base/tiny-bert` (or `$QG_FUZZ_BASE`).
fn work_dir() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let base = base();
        let dir = std::env::temp_dir().join(format!("qg-fuzz-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp folder");
        for e in std::fs::read_dir(&base).expect("base folder: run make_hf_seeds.py first") {
            let e = e.expect("base entry");
            std::fs::copy(e.path(), dir.join(e.file_name())).expect("copy base file");
        }
        dir
    })
}

/// Writes `data` as `file` of the work folder and converts the folder to F16.
/// Any outcome but a panic (or a hang, or a huge allocation, which libFuzzer reports) is fine.
pub fn convert_with(file: &str, data: &[u8]) {
    let dir = work_dir();
    std::fs::write(dir.join(file), data).expect("write fuzz input");
    // Beside the folder, not in it: a file in the folder counts as an input of the next run.
    let out = dir.with_extension("gguf");
    let opts = ConvertOptions {
        outtype: OutType::F16,
        vocab_only: false,
        fallback: None,
        allow_nonfinite: false,
    };
    let r = convert(dir, &out, &opts);
    if std::env::var_os("QG_FUZZ_DEBUG").is_some() {
        eprintln!("{:?}", r.map(|r| r.file_bytes));
    }
}
