//! Gate 3: the exact files that ship. A sha256 manifest of every file in the release folder,
//! then a re-measurement on those bytes: dimension, finiteness, non-zero norm, the same top-1
//! retrieval as Gate 2, and timings.

use std::path::Path;
use std::time::Instant;

use anyhow::{Context, Result};
use llama_runtime::{ContextParams, Model};
use serde::{Deserialize, Serialize};

use super::{vectors, Blocker, BlockerCode, InputHash};
use crate::hash::sha256_file;

/// Gate 3's measurements.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Gate3Report {
    /// Every file of the release folder with its sha256 (sorted by path).
    pub manifest: Vec<InputHash>,
    /// The GGUF re-measured.
    pub gguf: String,
    /// Embedding width found.
    pub n_embd: usize,
    /// Model load time, ms.
    #[serde(deserialize_with = "crate::serde_nan::f64")]
    pub load_ms: f64,
    /// Time to embed the retrieval set, ms.
    #[serde(deserialize_with = "crate::serde_nan::f64")]
    pub embed_ms: f64,
    /// llama.cpp top-1 per query on the shipped bytes.
    pub top1: Vec<usize>,
}

fn walk(dir: &Path, out: &mut Vec<std::path::PathBuf>) -> Result<()> {
    for e in std::fs::read_dir(dir).with_context(|| format!("{}: cannot list", dir.display()))? {
        let e = e?;
        let p = e.path();
        // Not following symlinks: a symlinked folder (even a loop) is an entry, not a subtree.
        if e.file_type()?.is_dir() {
            walk(&p, out)?;
        } else {
            out.push(p);
        }
    }
    Ok(())
}

/// Every file of `dir` with its sha256, sorted by path.
fn manifest(dir: &Path) -> Result<(Vec<std::path::PathBuf>, Vec<InputHash>)> {
    let mut files = Vec::new();
    walk(dir, &mut files)?;
    files.sort();
    let manifest = files
        .iter()
        .map(|f| {
            Ok(InputHash {
                path: f.display().to_string(),
                sha256: sha256_file(f)?,
                source_file: None,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    Ok((files, manifest))
}

/// A blocker for every re-measured vector that has the wrong width, a non-finite element or
/// no length.
fn check_vectors<'a>(
    vs: impl Iterator<Item = &'a Vec<f32>>,
    n_embd: usize,
    blockers: &mut Vec<Blocker>,
) {
    for (i, v) in vs.enumerate() {
        let norm: f64 = v
            .iter()
            .map(|x| (*x as f64) * (*x as f64))
            .sum::<f64>()
            .sqrt();
        if v.len() != n_embd || !v.iter().all(|x| x.is_finite()) || norm.is_nan() || norm <= 0.0 {
            blockers.push(Blocker::new(
                3,
                BlockerCode::ReleaseVector,
                &format!("text {i}"),
                format!(
                    "dim {}, L2 norm {norm}, finite {}",
                    v.len(),
                    v.iter().all(|x| x.is_finite())
                ),
            ));
        }
    }
}

/// Hashes the release folder and re-measures its single GGUF file.
pub fn check(
    dir: &Path,
    params: &ContextParams,
    gate2: Option<&vectors::VectorReport>,
    blockers: &mut Vec<Blocker>,
) -> Result<Gate3Report> {
    let (files, manifest) = manifest(dir)?;
    let ggufs: Vec<&std::path::PathBuf> = files
        .iter()
        .filter(|f| f.extension().is_some_and(|e| e == "gguf"))
        .collect();
    let unmeasured = |manifest| Gate3Report {
        manifest,
        gguf: String::new(),
        n_embd: 0,
        load_ms: 0.0,
        embed_ms: 0.0,
        top1: Vec::new(),
    };
    let [gguf] = ggufs.as_slice() else {
        blockers.push(Blocker::new(
            3,
            BlockerCode::ReleaseFiles,
            &dir.display().to_string(),
            format!("expected one .gguf, found {}", ggufs.len()),
        ));
        return Ok(unmeasured(manifest));
    };
    let t0 = Instant::now();
    let model = match Model::load(gguf, false) {
        Ok(m) => m,
        Err(e @ llama_runtime::RuntimeError::Load { .. }) => {
            blockers.push(Blocker::new(
                3,
                BlockerCode::LlamaLoad,
                &gguf.display().to_string(),
                e.to_string(),
            ));
            return Ok(unmeasured(manifest));
        }
        Err(e) => return Err(e.into()),
    };
    let load_ms = t0.elapsed().as_secs_f64() * 1e3;
    let t1 = Instant::now();
    let (q, d) = vectors::embed_retrieval(&model, params)?;
    let embed_ms = t1.elapsed().as_secs_f64() * 1e3;
    let n_embd = model.n_embd();
    check_vectors(q.iter().chain(&d), n_embd, blockers);
    let top1: Vec<usize> = q.iter().map(|x| vectors::top1(x, &d)).collect();
    match gate2 {
        Some(g2) if g2.llama_top1 != top1 => blockers.push(Blocker::new(
            3,
            BlockerCode::ReleaseTop1,
            "retrieval",
            format!(
                "top-1 on the shipped file {top1:?} differs from Gate 2's {:?}",
                g2.llama_top1
            ),
        )),
        None => blockers.push(Blocker::new(
            3,
            BlockerCode::ReleaseNoBaseline,
            "retrieval",
            "Gate 2 measured no vectors to compare with".into(),
        )),
        _ => {}
    }
    Ok(Gate3Report {
        manifest,
        gguf: gguf.display().to_string(),
        n_embd,
        load_ms,
        embed_ms,
        top1,
    })
}
