//! `bench ppl`: `eval ppl` next to llama-perplexity on the same file and settings, each run a
//! child process of its own, arms alternated.

use std::ffi::OsString;
use std::path::Path;
use std::process::{Command, Stdio};

use anyhow::{ensure, Result};

use crate::child::{run_measured, Measured};

/// The runs of both arms.
#[derive(Clone, Debug)]
pub struct PplBench {
    /// `quantgate eval ppl`, one entry per repetition.
    pub ours: Vec<Measured>,
    /// `llama-perplexity` (empty without a peer).
    pub peer: Vec<Measured>,
    /// Tokens per run: chunks × 512.
    pub tokens: usize,
}

/// Runs `exe eval ppl MODEL -f TEXT -c 512 --chunks N -t T` and, when given,
/// `peer -m MODEL …` with the same arguments, `reps` times alternated.
///
/// Errors: a child cannot start or fails.
pub fn run(
    exe: &Path,
    peer: Option<&Path>,
    model: &Path,
    text: &Path,
    chunks: usize,
    threads: i32,
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
    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    for _ in 0..reps {
        let m = run_measured(
            Command::new(exe)
                .args(["eval", "ppl"])
                .args(&args)
                .stdout(Stdio::null()),
        )?;
        ensure!(m.exit_code == Some(0), "eval ppl failed: {m:?}");
        ours.push(m);
        if let Some(p) = peer {
            let m = run_measured(
                Command::new(p)
                    .arg("-m")
                    .args(&args)
                    .stdout(Stdio::null())
                    .stderr(Stdio::null()),
            )?;
            ensure!(m.exit_code == Some(0), "{} failed: {m:?}", p.display());
            theirs.push(m);
        }
    }
    Ok(PplBench {
        ours,
        peer: theirs,
        tokens: chunks * 512,
    })
}
