//! Gate 3: the exact bytes that ship. One gate for `verify --release DIR` and `release` /
//! `release --check DIR`:
//! - the folder's `SHA256SUMS` re-checked as `sha256sum -c` would, every other file reported
//!   ([`sums`]): the manifest of what ships;
//! - every GGUF in the folder is one that was verified, with the verified bytes (sha256 and
//!   size);
//! - llama.cpp's outputs re-measured on the folder's copy identical to those of the verified
//!   input ([`fingerprint`]).

pub mod fingerprint;
pub mod sums;

use std::path::Path;

use anyhow::Result;
use serde::{Deserialize, Serialize};

use super::outcome::{Blocker, BlockerCode};
use crate::threads::Threads;
use fingerprint::Fingerprint;

/// A GGUF that was verified and is meant to ship in the folder.
#[derive(Clone, Debug)]
pub struct Shipped {
    /// File name in the folder (a bare name).
    pub name: String,
    /// sha256 and size of the bytes `verify` judged.
    pub sha256: String,
    pub bytes: u64,
    /// llama.cpp's outputs on the verified file.
    pub fingerprint: Fingerprint,
}

/// Gate 3 on one released GGUF.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Gate3File {
    /// File name in the release folder.
    pub name: String,
    /// sha256 of the released copy.
    pub sha256: String,
    /// Whether it equals the sha256 of the verified input.
    pub same_bytes_as_verified: bool,
    /// Outputs re-measured and whether all are identical to the verified file's.
    pub remeasured: usize,
    pub identical: bool,
}

/// Gate 3 on a release folder.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Gate3 {
    /// Files `SHA256SUMS` lists and were re-hashed.
    pub files_hashed: usize,
    /// Each GGUF report.json names, checked.
    pub files: Vec<Gate3File>,
    /// Every Gate 3 failure (empty: Gate 3 passes).
    pub blockers: Vec<Blocker>,
}

/// A bare file name: no folder part, not `.`/`..`, not empty.
pub fn plain_name(n: &str) -> bool {
    !n.is_empty() && n != "." && n != ".." && !n.contains('/') && !n.contains('\0')
}

/// Re-measures one released GGUF; a blocker when llama.cpp refuses it or its outputs differ.
fn remeasure(
    path: &Path,
    f: &Shipped,
    threads: Threads,
    blockers: &mut Vec<Blocker>,
) -> Result<(usize, bool)> {
    let again = match fingerprint::measure(path, f.fingerprint.kind, threads) {
        Ok(x) => x,
        Err(e) => {
            blockers.push(Blocker::new(
                BlockerCode::ReleaseRemeasure,
                &f.name,
                format!("llama.cpp cannot run the released file: {e:#}"),
            ));
            return Ok((0, false));
        }
    };
    let diff = fingerprint::first_difference(&f.fingerprint, &again);
    if let Some(i) = diff {
        blockers.push(Blocker::new(
            BlockerCode::ReleaseRemeasure,
            &f.name,
            format!(
                "re-measured {:?} differs from the verified file's at output {i} of {}",
                f.fingerprint.kind,
                f.fingerprint.values.len()
            ),
        ));
    }
    Ok((again.values.len(), diff.is_none()))
}

/// Gate 3 on folder `dir`: its `SHA256SUMS`, then each of `shipped` against the folder's copy.
/// A GGUF in the folder that is not in `shipped` was never verified: a blocker.
///
/// Errors: a file that exists but cannot be read.
pub fn check(dir: &Path, shipped: &[Shipped], threads: Threads) -> Result<Gate3> {
    let mut blockers = Vec::new();
    let (files_hashed, problems) = sums::check(dir)?;
    for p in &problems {
        blockers.push(Blocker::new(
            BlockerCode::ReleaseSha256,
            p.file(),
            p.to_string(),
        ));
    }
    for rel in sums::covered_files(dir)? {
        if rel.ends_with(".gguf") && !shipped.iter().any(|s| s.name == rel) {
            blockers.push(Blocker::new(
                BlockerCode::ReleaseFiles,
                &rel,
                "a GGUF in the folder that was not verified".into(),
            ));
        }
    }
    let mut files = Vec::new();
    for f in shipped.iter().filter(|f| plain_name(&f.name)) {
        if let Some(file) = check_file(dir, f, threads, &mut blockers)? {
            files.push(file);
        }
    }
    Ok(Gate3 {
        files_hashed,
        files,
        blockers,
    })
}

/// One shipped GGUF: present, the verified bytes, the verified outputs.
fn check_file(
    dir: &Path,
    f: &Shipped,
    threads: Threads,
    blockers: &mut Vec<Blocker>,
) -> Result<Option<Gate3File>> {
    let path = dir.join(&f.name);
    if !path.is_file() {
        blockers.push(Blocker::new(
            BlockerCode::ReleaseFiles,
            &f.name,
            "absent from the release folder".into(),
        ));
        return Ok(None);
    }
    let sha256 = crate::hash::sha256_file(&path)?;
    let same = sha256 == f.sha256;
    let bytes = std::fs::metadata(&path)?.len();
    if bytes != f.bytes {
        blockers.push(Blocker::new(
            BlockerCode::ReleaseNotVerified,
            &f.name,
            format!("{bytes} bytes; the verified file has {}", f.bytes),
        ));
    }
    if !same {
        blockers.push(Blocker::new(
            BlockerCode::ReleaseNotVerified,
            &f.name,
            format!("sha256 {sha256}; the verified file's was {}", f.sha256),
        ));
    }
    let (remeasured, identical) = remeasure(&path, f, threads, blockers)?;
    Ok(Some(Gate3File {
        name: f.name.clone(),
        sha256,
        same_bytes_as_verified: same,
        remeasured,
        identical,
    }))
}
