//! `quantgate verify`: three gates with thresholds fixed before measuring, ending in `GO` or
//! `NO-GO`. The verdict is GO iff there is no blocker; every failed check is a blocker, and
//! nothing else decides.
//!
//! * Gate 1 ([`gate1`]): stored bits and metadata, read back through ggml's own reader.
//! * Gate 2 ([`tokenizer`], [`vectors`], [`logits`]): token ids in all four add_special ×
//!   parse_special modes, and embeddings (min cosine, top-1 retrieval) or logits (cosine,
//!   argmax agreement, mean KLD) against the independent reference.
//! * Gate 3 ([`gate3`]): sha256 manifest of the release folder and a re-measurement on exactly
//!   those bytes.

pub mod corpus;
pub mod declared;
pub mod expand;
pub mod gate1;
mod gate2;
pub mod gate3;
pub mod html;
pub mod imatrix;
pub mod logits;
pub mod long_context;
pub mod outcome;
pub mod quality;
pub mod report;
pub mod requant;
pub mod resources;
pub mod routing;
pub mod sliced;
mod sources;
pub mod stored;
pub mod stress;
pub mod stress_gate;
mod thresholds;
pub mod tokenizer;
pub mod vectors;

use std::path::PathBuf;

use anyhow::{Context as _, Result};
use serde::{Deserialize, Serialize};

use crate::threads::Threads;
use gate1::Gate1;
use gate2::Gate2;
pub use outcome::{Blocker, BlockerCode, Verdict};
use sources::{check_memory, hash_hf_inputs, input_hash, open_sources, Findings, Sources};
pub use thresholds::{
    logits_checks, rejudge, vector_checks, Cmp, ThresholdCheck, Thresholds, THRESHOLD_NAMES,
};

/// What to verify.
#[derive(Clone, Debug)]
pub struct VerifyOptions {
    /// The HF source folder.
    pub hf_dir: PathBuf,
    /// The GGUF to verify.
    pub gguf: PathBuf,
    /// Extra texts, one per line (added to the built-in corpus).
    pub texts: Option<PathBuf>,
    /// Protocol file declaring the thresholds.
    pub protocol: Option<PathBuf>,
    /// Release folder for Gate 3.
    pub release: Option<PathBuf>,
    /// Text for the quality section's PPL of both sides (e.g. wiki.test.raw); none: not measured.
    pub ppl_text: Option<PathBuf>,
    /// Threads for llama.cpp.
    pub threads: Threads,
    /// Folder for the F32 expansion of a block-quantized file (a temp folder inside it,
    /// removed afterwards): the report folder, on the disk the user chose. None: the system's
    /// temp folder.
    pub work_dir: Option<PathBuf>,
    /// The importance matrix the file was quantized with (`--imatrix`): Gate 1 then re-makes
    /// every tensor with its weights ([`imatrix`]).
    pub imatrix: Option<PathBuf>,
}

/// An input file and its hash.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct InputHash {
    pub path: String,
    pub sha256: String,
    /// For a file of the HF folder: its path relative to the folder (`1_Pooling/config.json`),
    /// which `release --check` holds the shipped copy's hash against.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_file: Option<String>,
}

/// The full verification result.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct VerifyReport {
    /// `GO` or `NO-GO`.
    pub verdict: Verdict,
    /// Every blocker (empty iff GO).
    pub blockers: Vec<Blocker>,
    /// Thresholds used and their sha256.
    pub thresholds: Thresholds,
    pub thresholds_sha256: String,
    /// quantgate version and the pinned llama.cpp build.
    pub quantgate: String,
    pub llama_cpp: String,
    /// The container image's digest when run in one ([`crate::image`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_digest: Option<String>,
    /// Context settings of every llama.cpp measurement.
    pub llama_context: serde_json::Value,
    /// Inputs with their sha256.
    pub inputs: Vec<InputHash>,
    pub gate1: gate1::Gate1Report,
    /// Gate 1 of an importance-matrix quant: its keys, the imatrix given, and the tensors
    /// that could not be decided without one ([`imatrix`]).
    #[serde(default)]
    pub gate1_imatrix: imatrix::ImatrixSection,
    /// Gate 1 of tensors converted from already-quantized (MLX affine) sources.
    pub gate1_affine: Option<gate1::AffineGate1Report>,
    pub gate2_tokenizer: Option<tokenizer::TokenizerReport>,
    /// Gate 2's generated tokenizer cases ([`stress_gate`]); absent when no mode matched the
    /// fixed texts (or in reports written before it existed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gate2_stress: Option<stress_gate::StressReport>,
    pub gate2_vectors: Option<vectors::VectorReport>,
    /// Embedding models with block-quantized weights: the file's vectors as shipped against the
    /// reference on the HF weights (reported; `gate2_vectors` holds the judged measurement).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gate2_vectors_as_shipped: Option<vectors::VectorReport>,
    pub gate2_logits: Option<logits::LogitsReport>,
    /// With block-quantized weights: the file as shipped against the reference (reported;
    /// `gate2_logits` then holds the judged F32-expansion measurement).
    pub gate2_logits_as_shipped: Option<logits::LogitsReport>,
    /// Causal LMs with long-range RoPE scaling (Llama 3): the judged logits past the
    /// low-frequency wavelength ([`long_context`]). Absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gate2_long_context: Option<long_context::LongContext>,
    pub gate3: Option<gate3::Gate3>,
    /// Wall time and peak RSS of each gate that ran (left out of release folders, whose
    /// reports are a function of their inputs).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub costs: Vec<resources::GateCost>,
    /// Tokens/s of the reference and of llama.cpp in the judged logits comparison (left out
    /// of release folders, as `costs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gate2_speed: Option<logits::ForwardSpeed>,
    /// Quality against the source (lossy files; reported, judged only against a declared
    /// budget).
    #[serde(default)]
    pub quality: Option<quality::Quality>,
    /// Facts worth knowing that do not block (source disagreements, limitations).
    pub notes: Vec<String>,
}

/// Gate 3 (`--release DIR`): the folder's `SHA256SUMS`, and its one GGUF the bytes verified
/// here with the same llama.cpp outputs ([`gate3`]).
fn gate3(opts: &VerifyOptions, g2: &Gate2, f: &mut Findings) -> Result<Option<gate3::Gate3>> {
    let Some(dir) = &opts.release else {
        return Ok(None);
    };
    let ggufs: Vec<String> = gate3::sums::covered_files(dir)?
        .into_iter()
        .filter(|r| r.ends_with(".gguf"))
        .collect();
    let [name] = ggufs.as_slice() else {
        f.blockers.push(Blocker::new(
            BlockerCode::ReleaseFiles,
            &dir.display().to_string(),
            format!("expected one .gguf, found {}", ggufs.len()),
        ));
        return Ok(None);
    };
    let kind = if g2.vectors.is_some() {
        gate3::fingerprint::Kind::Top1
    } else {
        gate3::fingerprint::Kind::Argmax
    };
    let shipped = gate3::Shipped {
        name: name.clone(),
        sha256: crate::hash::sha256_file(&opts.gguf)?,
        bytes: std::fs::metadata(&opts.gguf)
            .with_context(|| opts.gguf.display().to_string())?
            .len(),
        fingerprint: gate3::fingerprint::measure(&opts.gguf, kind, opts.threads)?,
    };
    let g3 = gate3::check(dir, &[shipped], opts.threads)?;
    f.blockers.extend(g3.blockers.iter().cloned());
    Ok(Some(g3))
}

/// Gates 1–3 on opened sources, each measured for its wall time and peak RSS.
fn run_gates(
    opts: &VerifyOptions,
    s: &Sources,
    params: &llama_runtime::ContextParams,
    thresholds: &Thresholds,
    costs: &mut Vec<resources::GateCost>,
    f: &mut Findings,
) -> Result<(Gate1, Gate2, Option<gate3::Gate3>)> {
    // A file of another architecture than the HF folder: nothing can be compared (Gate 2
    // names the mismatch as the one blocker, instead of hundreds of Gate 1 differences).
    crate::progress::report("gate 1", 0, 0);
    let g1 = resources::measure(1, costs, || -> Result<Gate1> {
        if s.arch_mismatch.is_none() {
            gate1::run(opts, s, f)
        } else {
            Ok(Gate1::default())
        }
    })?;
    crate::interrupt::check()?;
    crate::progress::report("gate 2", 0, 0);
    let g2 = resources::measure(2, costs, || gate2::run(opts, s, &g1, params, thresholds, f))?;
    crate::interrupt::check()?;
    let g3 = resources::measure(3, costs, || gate3(opts, &g2, f))?;
    Ok((g1, g2, g3))
}

/// Runs all gates. Errors only for unusable inputs (the caller prints them, exit 2); every
/// measured failure is a blocker in the report instead.
pub fn verify(opts: &VerifyOptions) -> Result<VerifyReport> {
    let mut f = Findings::default();
    let thresholds = match &opts.protocol {
        Some(p) => declared::Declarations::read(p)?
            .thresholds
            .unwrap_or_default()
            .resolve(p, &mut f.blockers),
        None => Thresholds::default(),
    };
    let thresholds_sha256 =
        crate::hash::sha256_bytes(serde_json::to_string(&thresholds)?.as_bytes());
    // A missing or non-regular GGUF is an input error (exit 2); one ggml refuses is NO-GO.
    crate::paths::ensure_regular_file(&opts.gguf)?;
    check_memory(&opts.gguf)?;
    let mut costs = Vec::new();
    let mut inputs = vec![input_hash(&opts.gguf)?];
    let opened = open_sources(opts, &mut f)?;
    // The imatrix's sha256 is recorded in `gate1_imatrix.given`, not here: `inputs` is the
    // GGUF and the HF folder's files, which `release --check` holds the shipped copies against.
    inputs.extend(hash_hf_inputs(opts)?);
    let params = llama_runtime::ContextParams::embeddings(512, opts.threads.get());
    let (g1, g2, g3) = match opened {
        Some(s) => run_gates(opts, &s, &params, &thresholds, &mut costs, &mut f)?,
        None => (Gate1::default(), Gate2::default(), None),
    };
    Ok(VerifyReport {
        verdict: Verdict::from_blockers(&f.blockers),
        blockers: f.blockers,
        thresholds,
        thresholds_sha256,
        quantgate: env!("CARGO_PKG_VERSION").into(),
        llama_cpp: llama_runtime::build_info().to_string(),
        image_digest: crate::image::digest()?,
        llama_context: serde_json::json!({
            "n_ctx": params.n_ctx, "n_batch": params.n_batch, "n_ubatch": params.n_ubatch,
            "threads": params.n_threads, "kv_type": "F16", "pooling": "model default",
            "tokenize": "add_special=true, parse_special=true",
        }),
        inputs,
        gate1: g1.report,
        gate1_imatrix: g1.imatrix,
        gate1_affine: g1.affine,
        gate2_tokenizer: g2.tokenizer,
        gate2_stress: g2.stress,
        gate2_vectors: g2.vectors,
        gate2_vectors_as_shipped: g2.vectors_as_shipped,
        gate2_speed: g2.logits.as_ref().and_then(|l| l.speed.clone()),
        gate2_logits: g2.logits,
        gate2_logits_as_shipped: g2.logits_as_shipped,
        gate2_long_context: g2.long_context,
        quality: g2.quality,
        gate3: g3,
        costs,
        notes: f.notes,
    })
}
