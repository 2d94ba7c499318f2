//! `bench ppl`: `eval ppl` next to llama-perplexity on the same file and settings, each run a
//! child process of its own, arms alternated. Both arms' `Final estimate` is kept, so the PPLs
//! are compared in the same run as the speeds.

use std::ffi::OsString;
use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result};

use crate::child::{run_captured, Measured};
use crate::threads::Threads;

/// One run of one arm.
#[derive(Clone, Debug)]
pub struct PplRun {
    /// Wall time, peak RSS.
    pub measured: Measured,
    /// `Final estimate: PPL = …` as printed (without the prefix), e.g. `29.3414 +/- 1.40787`.
    pub estimate: String,
    /// The arm's `system_info:` line (llama-perplexity) or `runtime:` line (quantgate): the
    /// kernels that ran.
    pub kernels: String,
}

/// The runs of both arms.
#[derive(Clone, Debug)]
pub struct PplBench {
    /// `quantgate eval ppl`, one entry per repetition.
    pub ours: Vec<PplRun>,
    /// `llama-perplexity` (empty without a peer).
    pub peer: Vec<PplRun>,
    /// Tokens per run: chunks × 512.
    pub tokens: usize,
}

/// Runs `exe eval ppl MODEL -f TEXT -c 512 --chunks N -t T` and, when given,
/// `peer -m MODEL …` with the same arguments, `reps` times alternated.
///
/// Errors: a child cannot start or fails, or prints no `Final estimate`.
pub fn run(
    exe: &Path,
    peer: Option<&Path>,
    model: &Path,
    text: &Path,
    (chunks, threads): (usize, Threads),
    reps: usize,
) -> Result<PplBench> {
    // The same model, text and settings for both arms (llama-perplexity takes -m MODEL).
    let args: Vec<OsString> = vec![
        model.into(),
        "-f".into(),
        text.into(),
        "-c".into(),
        "512".into(),
        "--chunks".into(),
        chunks.to_string().into(),
        "-t".into(),
        threads.to_string().into(),
    ];
    let tmp = tempfile::tempdir()?;
    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    for _ in 0..reps {
        let mut c = Command::new(exe);
        c.args(["eval", "ppl"]).args(&args);
        ours.push(one(&mut c, tmp.path(), "runtime:")?);
        if let Some(p) = peer {
            let mut c = Command::new(p);
            c.arg("-m").args(&args);
            theirs.push(one(&mut c, tmp.path(), "system_info:")?);
        }
    }
    Ok(PplBench {
        ours,
        peer: theirs,
        tokens: chunks * 512,
    })
}

/// Runs `cmd` measured ([`run_captured`]); reads back the estimate and the line starting
/// with `kernels_tag`.
fn one(cmd: &mut Command, tmp: &Path, kernels_tag: &str) -> Result<PplRun> {
    let c = run_captured(cmd, tmp)?;
    let text = c.stdout + &c.stderr;
    let estimate = text
        .lines()
        // llama-perplexity's log lines may share a line with its progress output.
        .find_map(|l| l.split_once("Final estimate: PPL = ").map(|(_, v)| v))
        .with_context(|| format!("{cmd:?} printed no `Final estimate`"))?
        .trim()
        .to_string();
    let kernels = text
        .lines()
        .find_map(|l| l.find(kernels_tag).map(|i| l[i..].trim().to_string()))
        .unwrap_or_default();
    Ok(PplRun {
        measured: c.measured,
        estimate,
        kernels,
    })
}
