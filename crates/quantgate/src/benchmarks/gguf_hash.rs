//! The release manifests (`release::manifest`) against llama.cpp's `llama-gguf-hash` from the
//! default-CMake peer build ([`super::peer`]): for each `NAME.gguf` of a folder, the peer's
//! `--sha256` output beside our manifest (byte-identical or not), the peer's `--check` exit
//! code on our manifest, and both wall times. Both run in the folder, so the names they print
//! are the bare file names.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, Result};
use serde::Serialize;

use crate::release::manifest;

/// One GGUF's figures.
#[derive(Clone, Debug, Serialize)]
pub struct HashRow {
    /// The GGUF's file name.
    pub name: String,
    /// Tensor lines of our manifest (the model line apart).
    pub tensors: usize,
    /// Our manifest equals the peer's `--sha256` output byte for byte.
    pub identical: bool,
    /// The peer's `--check NAME.manifest NAME` exit code on the manifest in the folder
    /// (0 ok, 1 mismatch, 3 no entry); `None` when the folder has no manifest for the file.
    pub peer_check_exit: Option<i32>,
    /// Wall time of our manifest, seconds.
    pub ours_s: f64,
    /// Wall time of the peer's `--sha256` run, seconds.
    pub peer_s: f64,
}

/// Every `*.gguf` of `dir`, in name order, hashed by both and checked by the peer.
///
/// Errors: the folder cannot be listed, a GGUF cannot be read, or the peer cannot be started.
pub fn run(dir: &Path, peer: &Path) -> Result<Vec<HashRow>> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .with_context(|| format!("{}", dir.display()))?
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.ends_with(".gguf"))
        .collect();
    names.sort();
    let mut rows = Vec::new();
    for name in names {
        let t0 = Instant::now();
        let ours = manifest::render(&dir.join(&name), &name)?;
        let ours_s = t0.elapsed().as_secs_f64();
        let t0 = Instant::now();
        let o = peer_cmd(peer, dir).arg("--sha256").arg(&name).output()?;
        let peer_s = t0.elapsed().as_secs_f64();
        let m = manifest::file_name(&name);
        let peer_check_exit = if dir.join(&m).is_file() {
            let c = peer_cmd(peer, dir).args(["--check", &m, &name]).output()?;
            Some(c.status.code().unwrap_or(-1))
        } else {
            None
        };
        rows.push(HashRow {
            tensors: ours.lines().count().saturating_sub(1),
            identical: o.status.success() && o.stdout == ours.as_bytes(),
            peer_check_exit,
            ours_s,
            peer_s,
            name,
        });
    }
    Ok(rows)
}

fn peer_cmd(peer: &Path, dir: &Path) -> Command {
    let mut c = Command::new(PathBuf::from(peer));
    c.current_dir(dir);
    c
}
