//! `bench verify`: `verify` on each (HF folder, GGUF) pair as a child process of its own (wall
//! time and peak RSS from `wait4`), optionally alternated with another quantgate binary (an
//! earlier build: "today's" figures in the same run), with peak RSS against the file's size.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{ensure, Result};

use crate::child::{run_measured, Measured};
use crate::threads::Threads;

/// One model's runs.
#[derive(Clone, Debug)]
pub struct VerifyBench {
    /// The HF folder.
    pub hf: PathBuf,
    /// The GGUF.
    pub gguf: PathBuf,
    /// GGUF size, bytes.
    pub file_bytes: u64,
    /// The model's size in F16: 2 bytes per weight of the file's tensor table (the size the
    /// memory goal is stated against, whatever the file's types).
    pub f16_bytes: u64,
    /// This binary's runs.
    pub ours: Vec<Measured>,
    /// The other binary's runs (empty without one).
    pub baseline: Vec<Measured>,
    /// Exit code of our last run (0 GO, 1 NO-GO).
    pub exit_code: Option<i32>,
}

/// Runs `exe verify --hf HF --gguf F --report TMP` `reps` times per pair, alternated with
/// `baseline` when given.
///
/// Errors: a child cannot start, or exits with neither GO (0) nor NO-GO (1).
pub fn run(
    exe: &Path,
    baseline: Option<&Path>,
    pairs: &[(PathBuf, PathBuf)],
    reps: usize,
    threads: Threads,
) -> Result<Vec<VerifyBench>> {
    let tmp = tempfile::tempdir()?;
    let mut out = Vec::new();
    for (hf, gguf) in pairs {
        let mut b = VerifyBench {
            hf: hf.clone(),
            gguf: gguf.clone(),
            file_bytes: std::fs::metadata(gguf)?.len(),
            f16_bytes: f16_bytes(gguf)?,
            ours: Vec::new(),
            baseline: Vec::new(),
            exit_code: None,
        };
        for _ in 0..reps {
            let m = one(exe, hf, gguf, &tmp.path().join("ours"), threads)?;
            b.exit_code = m.exit_code;
            b.ours.push(m);
            if let Some(base) = baseline {
                b.baseline
                    .push(one(base, hf, gguf, &tmp.path().join("base"), threads)?);
            }
        }
        out.push(b);
    }
    Ok(out)
}

/// 2 bytes per element of every tensor of `gguf`.
///
/// Errors: the file cannot be read as GGUF.
pub fn f16_bytes(gguf: &Path) -> Result<u64> {
    let g = gguf::Gguf::open(gguf)?;
    Ok(g.header.tensors.iter().map(|t| 2 * t.n_elements()).sum())
}

fn one(exe: &Path, hf: &Path, gguf: &Path, report: &Path, threads: Threads) -> Result<Measured> {
    let _ = std::fs::remove_dir_all(report);
    let m = run_measured(
        Command::new(exe)
            .arg("verify")
            .arg("--hf")
            .arg(hf)
            .arg("--gguf")
            .arg(gguf)
            .arg("--report")
            .arg(report)
            .args(["--threads", &threads.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
    )?;
    ensure!(
        matches!(m.exit_code, Some(0) | Some(1)),
        "{} verify {} failed: {m:?}",
        exe.display(),
        gguf.display()
    );
    Ok(m)
}
