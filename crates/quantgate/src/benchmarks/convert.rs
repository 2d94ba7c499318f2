//! `bench convert`: our `convert` next to llama.cpp's `convert_hf_to_gguf.py`, each run a child
//! process of its own (wall time and peak RSS from `wait4`), arms alternated.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{ensure, Result};

use crate::child::{run_measured, Measured};

/// Why the peer did not run, or that it did.
#[derive(Clone, Debug, PartialEq)]
pub enum Peer {
    /// `convert_hf_to_gguf.py` ran with this path.
    Ran(PathBuf),
    /// No `--peer-script` was given.
    NotGiven,
    /// The script path does not exist.
    NotFound(PathBuf),
    /// Python with torch and numpy is not available.
    NoTorch,
}

/// The runs of both arms.
#[derive(Clone, Debug)]
pub struct ConvertBench {
    /// Our `convert`, one entry per repetition.
    pub ours: Vec<Measured>,
    /// The peer's runs (empty unless [`Peer::Ran`]).
    pub peer_runs: Vec<Measured>,
    /// What happened to the peer.
    pub peer: Peer,
}

fn python_has_torch() -> bool {
    Command::new("python3")
        .args(["-c", "import torch, numpy"])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

/// Converts `hf` to `--outtype outtype` `reps` times with `exe convert` and, where it can run,
/// with `python3 peer_script`, alternated, into a temp folder.
///
/// Errors: `reps` is 0 (usage), a child cannot start, or either arm fails.
pub fn run(
    exe: &Path,
    hf: &Path,
    outtype: &str,
    peer_script: Option<&Path>,
    reps: usize,
) -> Result<ConvertBench> {
    let peer = match peer_script {
        None => Peer::NotGiven,
        Some(p) if !p.exists() => Peer::NotFound(p.to_path_buf()),
        Some(_) if !python_has_torch() => Peer::NoTorch,
        Some(p) => Peer::Ran(p.to_path_buf()),
    };
    let tmp = tempfile::tempdir()?;
    let (mut ours, mut peer_runs) = (Vec::new(), Vec::new());
    for _ in 0..reps {
        let m = run_measured(
            Command::new(exe)
                .arg("convert")
                .arg(hf)
                .arg("-o")
                .arg(tmp.path().join("ours.gguf"))
                .args(["--outtype", outtype])
                .stdout(Stdio::null()),
        )?;
        ensure!(m.exit_code == Some(0), "our convert failed: {m:?}");
        ours.push(m);
        if let Peer::Ran(script) = &peer {
            let m = run_measured(
                Command::new("python3")
                    .arg(script)
                    .arg(hf)
                    .arg("--outfile")
                    .arg(tmp.path().join("peer.gguf"))
                    .args(["--outtype", outtype])
                    .stdout(Stdio::null())
                    .stderr(Stdio::null()),
            )?;
            ensure!(
                m.exit_code == Some(0),
                "convert_hf_to_gguf.py failed: {m:?}"
            );
            peer_runs.push(m);
        }
    }
    Ok(ConvertBench {
        ours,
        peer_runs,
        peer,
    })
}
