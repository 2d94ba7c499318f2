//! The RAM a card states for each file: the peak resident set of `quantgate eval ppl` on the
//! file, run as a child process at the context and chunk count of verify's quality PPL
//! ([`PPL_CTX`] × [`PPL_CHUNKS`], same text and threads), as the child's own `--json` record
//! states it (`VmHWM`; not `wait4`'s `ru_maxrss`, which would include this process's peak:
//! `eval::record::peak_rss_self_kib`). That
//! covers the mapped weights, the KV cache at that context, the compute buffers and the logits
//! of a scored chunk: what llama.cpp needs to run the file at that context on the CPU.
//!
//! report.json (covered by SHA256SUMS, reproducible) holds the figure rounded *up* to
//! [`STEP_GIB`]; the exact KiB go into the receipt. Repeated runs differ by well under 1 MiB
//! (measured: 6 runs of SmolLM2 within 0.3 MiB), so the rounded figure repeats unless a run
//! falls on a step boundary.

use std::path::Path;
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use crate::threads::Threads;
use crate::verify::quality::{PPL_CHUNKS, PPL_CTX};

/// Granularity of the stated figure, GiB (rounded up).
pub const STEP_GIB: f64 = 0.1;

/// The RAM a file needs at a stated context.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Ram {
    /// llama.cpp context of the measured run, tokens.
    pub n_ctx: usize,
    /// Chunks of `n_ctx` tokens scored.
    pub chunks: usize,
    /// llama.cpp threads.
    pub threads: Threads,
    /// Peak RSS, GiB, rounded up to [`STEP_GIB`].
    pub peak_rss_gib: f64,
}

/// Measures `gguf` with `quantgate eval ppl` on `text`; returns the stated figure and the
/// exact peak RSS in KiB.
///
/// Errors: the quantgate binary cannot be located or started, or `eval ppl` fails (its exit
/// code and the file are named).
pub fn measure(gguf: &Path, text: &Path, threads: Threads) -> Result<(Ram, u64)> {
    let exe = std::env::current_exe().context("cannot locate the quantgate binary")?;
    let tmp = tempfile::tempdir().context("cannot create a temp folder")?;
    let record = tmp.path().join("ram.json");
    let mut cmd = Command::new(exe);
    cmd.args(["eval", "ppl"])
        .arg(gguf)
        .arg("-f")
        .arg(text)
        .args([
            "-c",
            &PPL_CTX.to_string(),
            "--chunks",
            &PPL_CHUNKS.to_string(),
        ])
        .args(["-t", &threads.to_string()])
        .arg("--json")
        .arg(&record)
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let m = crate::child::run_measured(&mut cmd)?;
    if m.exit_code != Some(0) {
        bail!(
            "{}: `quantgate eval ppl` for the RAM figure failed (exit {:?})",
            gguf.display(),
            m.exit_code
        );
    }
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&record)?)
        .with_context(|| format!("{}: the RAM run's record", gguf.display()))?;
    let kib = v["peak_rss_kib"]
        .as_u64()
        .filter(|k| *k > 0)
        .with_context(|| format!("{}: the RAM run recorded no peak RSS", gguf.display()))?;
    let ram = Ram {
        n_ctx: PPL_CTX,
        chunks: PPL_CHUNKS,
        threads,
        peak_rss_gib: round_up_gib(kib),
    };
    Ok((ram, kib))
}

/// `kib` in GiB, rounded up to a multiple of [`STEP_GIB`] (as tenths, so the JSON is exact).
pub fn round_up_gib(kib: u64) -> f64 {
    let step_kib = STEP_GIB * (1u64 << 20) as f64;
    (kib as f64 / step_kib).ceil() / 10.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_up_to_tenths_of_a_gib() {
        assert_eq!(round_up_gib(1), 0.1);
        assert_eq!(round_up_gib(104_857), 0.1);
        assert_eq!(round_up_gib(104_858), 0.2);
        assert_eq!(round_up_gib(733_020), 0.7);
        assert_eq!(round_up_gib(5 << 20), 5.0);
    }
}
