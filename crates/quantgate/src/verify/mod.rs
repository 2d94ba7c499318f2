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
pub mod expand;
pub mod expected;
pub mod expected_vocab;
pub mod file_type;
pub mod gate1;
pub mod gate1_affine;
pub mod gate1_packed;
pub mod gate3;
pub mod logits;
pub mod outcome;
pub mod quality;
pub mod report;
pub mod requant;
pub mod resources;
pub mod source_maps;
mod sources;
pub mod stored;
mod thresholds;
pub mod tokenizer;
pub mod vectors;

use std::path::PathBuf;

use anyhow::{Context as _, Result};
use serde::{Deserialize, Serialize};

use crate::convert::{self, arch::Arch, OutType};
pub use outcome::{Blocker, BlockerCode, Verdict};
use sources::{check_memory, hash_hf_inputs, input_hash, open_sources, Findings, Sources};
use thresholds::judge;
pub use thresholds::{
    logits_checks, rejudge, thresholds_from_protocol, vector_checks, Cmp, ThresholdCheck,
    Thresholds, THRESHOLD_NAMES,
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
    pub threads: i32,
    /// Folder for the F32 expansion of a block-quantized file (a temp folder inside it,
    /// removed afterwards): the report folder, on the disk the user chose. None: the system's
    /// temp folder.
    pub work_dir: Option<PathBuf>,
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
    /// Context settings of every llama.cpp measurement.
    pub llama_context: serde_json::Value,
    /// Inputs with their sha256.
    pub inputs: Vec<InputHash>,
    pub gate1: gate1::Gate1Report,
    /// Gate 1 of tensors converted from already-quantized (MLX affine) sources.
    pub gate1_affine: Option<gate1_affine::AffineGate1Report>,
    pub gate2_tokenizer: Option<tokenizer::TokenizerReport>,
    pub gate2_vectors: Option<vectors::VectorReport>,
    pub gate2_logits: Option<logits::LogitsReport>,
    /// With block-quantized weights: the file as shipped against the reference (reported;
    /// `gate2_logits` then holds the judged F32-expansion measurement).
    pub gate2_logits_as_shipped: Option<logits::LogitsReport>,
    pub gate3: Option<gate3::Gate3Report>,
    /// Wall time and peak RSS of each gate that ran (left out of release folders, whose
    /// reports are a function of their inputs).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub costs: Vec<resources::GateCost>,
    /// Quality against the source (lossy files; reported, judged only against a declared
    /// budget).
    #[serde(default)]
    pub quality: Option<quality::Quality>,
    /// Facts worth knowing that do not block (source disagreements, limitations).
    pub notes: Vec<String>,
}

/// Outtype implied by the stored tensor types (for the expected `general.file_type`).
fn outtype_of(types: &[u32]) -> OutType {
    use gguf::GgmlType as T;
    let has = |t: T| types.contains(&t.id());
    if has(T::Q8_0) {
        OutType::Q8_0
    } else if has(T::BF16) {
        OutType::BF16
    } else if has(T::F16) {
        OutType::F16
    } else {
        OutType::F32
    }
}

/// Gate 1's typed section.
#[derive(Default)]
pub struct Gate1 {
    /// Metadata and plain tensors (and the totals including affine tensors).
    pub report: gate1::Gate1Report,
    /// Tensors converted from already-quantized (MLX affine) sources.
    pub affine: Option<gate1_affine::AffineGate1Report>,
    /// The source's quantization metadata disagrees with its tensors.
    pub source_inconsistent: bool,
}

/// The tensor order Gate 1 expects.
enum Order {
    /// A conversion's: the HF folder's.
    Conversion,
    /// llama.cpp's quantizer's, from its plan; with `true`, a conversion's is accepted too
    /// (a Q8_0 file can come from either writer).
    Quantizer(Vec<String>, bool),
    /// Not known: the quantizer's plan could not be made (the file is refused for another
    /// reason, which has its own blocker).
    Unknown,
}

/// The `general.file_type` these sources imply for the stored types, and the tensor order
/// that goes with it. For a file `convert` writes: its file type, HF folder order. For a
/// block-quantized file: the ftype llama.cpp's quantizer plans exactly these types for
/// ([`file_type`]) and the quantizer's order. The file's own value is taken when its plan
/// matches; otherwise the matching ftype (or, when none matches, the converter's value) is
/// expected, and a note names the first tensor that differs. When no plan can be made (no F32
/// expansion, or llama.cpp refuses the file) a value `convert` would not write is not judged.
fn expected_file_type(s: &Sources, f: &mut Findings) -> Result<(u32, Order)> {
    let stored: Vec<gguf::GgmlType> = s
        .types
        .iter()
        .filter_map(|t| gguf::GgmlType::from_id(*t))
        .collect();
    let by_convert = convert::file_type(outtype_of(&s.types), &stored);
    let quantized = !s.vocab_only && expand::has_block_quantized(&s.types);
    let Some(claimed) = file_type::claimed(&s.c).filter(|_| quantized) else {
        return Ok((by_convert, Order::Conversion));
    };
    let convertible = claimed == by_convert;
    let not_judged = |f: &mut Findings, why: String| {
        if convertible {
            return Ok((by_convert, Order::Conversion));
        }
        f.notes.push(format!(
            "general.file_type {claimed} and tensor order not checked: {why}"
        ));
        Ok((claimed, Order::Unknown))
    };
    let Some(exp) = s.expansion() else {
        return not_judged(f, "no F32 expansion of the stored values".into());
    };
    if gguf::LlamaFtype::by_id(claimed).is_some_and(|t| t.quantize_target) {
        // llama.cpp's loader may refuse the file (a missing key, heads that do not fit); Gate
        // 2's load then names the refusal.
        match file_type::compare(&s.c, exp, claimed) {
            Err(e) => {
                return not_judged(
                    f,
                    format!("llama.cpp's quantizer could not plan the file: {e:#}"),
                )
            }
            Ok((file_type::PlanMatch::Exact, order)) => {
                return Ok((claimed, Order::Quantizer(order, convertible)))
            }
            Ok((file_type::PlanMatch::Differs { .. }, _)) if convertible => {
                return Ok((by_convert, Order::Conversion))
            }
            Ok((file_type::PlanMatch::Differs { n, first: (t, plan, got) }, _)) => {
                f.notes.push(format!(
                    "general.file_type {claimed}: llama.cpp's quantizer plans other types for {n} tensors (first: {t} planned {plan}, stored {got})"
                ))
            }
        }
    }
    Ok(match file_type::matching_ftype(&s.c, exp) {
        Ok(Some((t, order))) => (t.id, Order::Quantizer(order, false)),
        Ok(None) => (by_convert, Order::Conversion),
        Err(e) => {
            f.notes
                .push(format!("no ftype's plan could be made: {e:#}"));
            (by_convert, Order::Conversion)
        }
    })
}

/// Gate 1's tensor-order check for `order`.
fn check_order(s: &Sources, order: Order, f: &mut Findings) -> Result<()> {
    const CONVERSION: &str = "a conversion's order (the HF folder's)";
    match order {
        Order::Unknown => {}
        Order::Conversion => {
            let hf = gate1::expected_order(&s.hf, s.arch)?;
            gate1::check_order(&s.c, &hf, CONVERSION, &mut f.blockers);
        }
        Order::Quantizer(q, also_conversion) => {
            let mut as_conversion = Vec::new();
            if also_conversion {
                let hf = gate1::expected_order(&s.hf, s.arch)?;
                gate1::check_order(&s.c, &hf, CONVERSION, &mut as_conversion);
            }
            if !also_conversion || !as_conversion.is_empty() {
                gate1::check_order(&s.c, &q, "llama.cpp's quantizer order", &mut f.blockers);
            }
        }
    }
    Ok(())
}

/// The metadata the sources imply (as `convert` writes it, with [`expected_file_type`], merged
/// with the hyperparameters [`expected`] and the tokenizer keys [`expected_vocab`] derive
/// without `convert`), less the keys that are
/// not model facts (the provenance keys, [`gate1::is_provenance`]; `general.file_type` of a
/// vocab-only file).
fn expected_metadata(s: &Sources, ft: u32, f: &mut Findings) -> Result<Vec<(String, gguf::Value)>> {
    use gguf::keys::general;
    let mut expected = convert::metadata(&s.hf, s.arch, ft, s.pooling, &s.vocab, 0)?;
    let mut independent = expected::hparams(&s.hf.config, s.arch.gguf_name())?;
    independent.extend(expected_vocab::tokenizer_keys(
        &s.hf.dir,
        s.tok.tokenizer.inner(),
        &s.hf.tokenizer_config,
        &s.hf.config,
    )?);
    f.notes.extend(expected::merge(&mut expected, independent));
    if s.vocab_only {
        // A vocab-only file's file_type is whatever the converter was asked; not implied.
        expected.retain(|(k, _)| k != general::FILE_TYPE);
    }
    // Provenance (general.name, basename, size_label, license, …) depends on the folder name
    // and card the file was converted from, not on the model: allowed, not judged.
    expected.retain(|(k, _)| !gate1::is_provenance(k));
    Ok(expected)
}

/// Gate 1: every metadata key and every tensor, read back through ggml's own reader and
/// compared with what the sources imply (bit for bit for tensors).
fn gate1(opts: &VerifyOptions, s: &Sources, f: &mut Findings) -> Result<Gate1> {
    for p in convert::fields::check(&s.hf.config, s.arch) {
        f.blockers
            .push(Blocker::new(1, BlockerCode::ConfigField, "config.json", p));
    }
    for b in &s.vocab.blockers {
        f.blockers.push(Blocker::new(
            1,
            BlockerCode::TokenizerInexpressible,
            "tokenizer",
            b.clone(),
        ));
    }
    if s.vocab_only {
        f.notes.push(
            "vocab-only file: tensors and vectors are not measured; Gate 1 covers metadata only"
                .into(),
        );
    } else {
        let names = gate1::expected_order(&s.hf, s.arch)?;
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        for p in convert::consistency::declared_tensors(&s.hf.config, s.arch, &names) {
            f.blockers
                .push(Blocker::new(1, BlockerCode::ConfigField, "config.json", p));
        }
    }
    let mut g1 = gate1::Gate1Report::default();
    let (ft, order) = expected_file_type(s, f)?;
    let expected = expected_metadata(s, ft, f)?;
    gate1::check_metadata(&s.c, &s.raw_kv, &expected, &mut f.blockers, &mut g1)?;
    // A vocab-only file's file_type is whatever the converter was asked: allowed, not implied.
    let also: &[&str] = if s.vocab_only {
        &[gguf::keys::general::FILE_TYPE]
    } else {
        &[]
    };
    gate1::check_unexpected_keys(&s.c, &s.raw_kv, &expected, also, &mut f.blockers);
    if !s.vocab_only {
        check_order(s, order, f)?;
    }
    let mut out = Gate1 {
        report: g1,
        affine: None,
        source_inconsistent: false,
    };
    if s.vocab_only {
        return Ok(out);
    }
    let n_before = f.blockers.len();
    let (ar, covered) = gate1_affine::check(&opts.gguf, &s.c, &s.hf, s.arch, &mut f.blockers)?;
    out.source_inconsistent = f.blockers[n_before..]
        .iter()
        .any(|b| b.code == BlockerCode::SourceQuantization);
    let g1 = &mut out.report;
    g1.tensors += ar.exact_tensors + ar.fallback_tensors;
    g1.bit_identical += ar.values_identical.min(ar.fields_identical) + ar.fallback_identical;
    for (t, n) in &ar.by_type {
        *g1.by_type.entry(t.clone()).or_default() += n;
    }
    if ar.modules > 0 || !covered.gguf_names.is_empty() {
        if ar.ggml_to_float_agrees < ar.ggml_to_float_checked {
            f.notes.push(format!(
                "ggml to_float differs from the named formula (f32 multiply then add) on {} of {} affine tensors (e.g. FMA contraction); Gate 1 is decided on fields + named formula as declared",
                ar.ggml_to_float_checked - ar.ggml_to_float_agrees,
                ar.ggml_to_float_checked
            ));
        }
        out.affine = Some(ar);
    }
    gate1::check_tensors(
        &opts.gguf,
        &s.c,
        &s.hf,
        s.arch,
        &covered,
        &mut f.blockers,
        g1,
    )?;
    for (t, n) in &g1.via_intermediate {
        f.notes.push(format!(
            "{n} block-quantized tensors are the encoding of the source rounded to {t} (a conversion to {t}, then quantize)"
        ));
    }
    Ok(out)
}

/// Gate 2's typed section.
#[derive(Default)]
pub struct Gate2 {
    /// Quality against the source, for block-quantized causal LMs.
    pub quality: Option<quality::Quality>,
    /// Token ids in the four add_special × parse_special modes.
    pub tokenizer: Option<tokenizer::TokenizerReport>,
    /// Embedding models: pooled vectors against the reference.
    pub vectors: Option<vectors::VectorReport>,
    /// Causal LMs: the judged logits measurement.
    pub logits: Option<logits::LogitsReport>,
    /// With block-quantized weights: the file as shipped (reported, not judged).
    pub logits_as_shipped: Option<logits::LogitsReport>,
}

/// The corpus of Gate 2: the built-in texts plus `--texts` (one per non-blank line).
fn gate2_texts(opts: &VerifyOptions) -> Result<Vec<String>> {
    let mut texts: Vec<String> = corpus::TOKENIZER_CORPUS
        .iter()
        .map(|s| s.to_string())
        .collect();
    if let Some(p) = &opts.texts {
        crate::paths::ensure_regular_file(p)?;
        let t = std::fs::read_to_string(p)
            .with_context(|| format!("{}: cannot read texts", p.display()))?;
        texts.extend(t.lines().filter(|l| !l.trim().is_empty()).map(String::from));
    }
    Ok(texts)
}

/// Gate 2 tokenizer: a blocker when no mode matches HF on every text.
fn gate2_tokenizer(
    s: &Sources,
    model: &llama_runtime::Model,
    texts: &[String],
    f: &mut Findings,
) -> Result<tokenizer::TokenizerReport> {
    let tr = tokenizer::check(&s.tok.tokenizer, &s.tok.json, model, texts)?;
    if tr.matching_modes.is_empty() {
        let detail = tr
            .modes
            .iter()
            .map(|m| {
                format!(
                    "{}: {}/{} ({})",
                    m.mode,
                    m.matched,
                    m.total,
                    m.first_mismatch
                        .as_ref()
                        .map(|x| x.shape.as_str())
                        .unwrap_or("")
                )
            })
            .collect::<Vec<_>>()
            .join("; ");
        f.blockers.push(Blocker::new(
            2,
            BlockerCode::TokenizerNoMode,
            "token ids",
            format!("no mode matches HF on every text: {detail}"),
        ));
    }
    f.notes.extend(tr.limitations.iter().cloned());
    Ok(tr)
}

/// Gate 2 vectors of an embedding model: thresholds, then the pooling llama.cpp applied.
fn gate2_vectors(
    opts: &VerifyOptions,
    s: &Sources,
    model: &llama_runtime::Model,
    params: &llama_runtime::ContextParams,
    gated: &[String],
    t: &Thresholds,
    f: &mut Findings,
) -> Result<Option<vectors::VectorReport>> {
    let model_type = s.hf.config["model_type"].as_str().unwrap_or("");
    // Block-quantized (not MLX): llama.cpp on the F32 expansion against the reference on the
    // same stored values, as for logits; the file as shipped against the source is a note.
    let stored = match s.expansion() {
        Some(p) if !reference::mlx::is_mlx_quantized(&s.hf.config) => Some(p),
        _ => None,
    };
    if stored.is_some() {
        let source_ref = vectors::RefModel::load(&opts.hf_dir, model_type)?;
        if let Ok(q) = vectors::check(model, params, &source_ref, &s.tok.tokenizer, gated) {
            f.notes.push(format!(
                "quality against the source (vectors of the file as shipped vs the reference on the HF weights; reported, not judged): min cosine {:.6}, top-1 identical {}/{}",
                q.min_cosine, q.top1_identical, q.queries
            ));
        }
    }
    let m32;
    let (model, reference) = match stored {
        Some(p) => {
            m32 = llama_runtime::Model::load(p, false)?;
            let tensors = stored::hf_tensors(&opts.gguf, &s.hf, s.arch)?;
            (
                &m32,
                vectors::RefModel::from_stored(&opts.hf_dir, model_type, tensors)?,
            )
        }
        None => (model, vectors::RefModel::load(&opts.hf_dir, model_type)?),
    };
    let v = match vectors::check(model, params, &reference, &s.tok.tokenizer, gated) {
        Ok(v) => v,
        Err(e) if is_no_pooled_embedding(&e) => {
            f.blockers.push(Blocker::new(
                2,
                BlockerCode::VectorsPooling,
                "pooling_type",
                format!(
                    "{}: llama.cpp returns no pooled embedding ({e:#}); the model declares {:?}",
                    opts.gguf.display(),
                    reference.pooling()
                ),
            ));
            return Ok(None);
        }
        Err(e) => return Err(e),
    };
    non_finite_blockers(&v.non_finite, f);
    if model_type == "bert" && s.hf.config["hidden_act"].as_str().unwrap_or("gelu") == "gelu" {
        // Measured on all-MiniLM-L6-v2 F32: min cosine 0.9999979 with erf GELU in the
        // reference, 0.9999996 with the tanh form; the stored bits are identical.
        f.notes.push(
            "llama.cpp's CPU GELU is the tanh approximation read from an f16 table; HF BERT uses exact erf GELU \
             (the reference too): expect cosines a few 1e-6 below 1 even for an F32 file"
                .into(),
        );
    }
    judge(vector_checks(t, &v), &mut f.blockers);
    if v.llama_pooling != reference.pooling().llama_id() as i32 {
        f.blockers.push(Blocker::new(
            2,
            BlockerCode::VectorsPooling,
            "pooling_type",
            format!(
                "llama.cpp pools with type {}, the model declares {:?}",
                v.llama_pooling,
                reference.pooling()
            ),
        ));
    }
    Ok(Some(v))
}

/// Whether `e` is llama.cpp finding no pooled embedding (a pooling the file does not support).
fn is_no_pooled_embedding(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        matches!(
            c.downcast_ref::<llama_runtime::RuntimeError>(),
            Some(llama_runtime::RuntimeError::Eval { call, .. }) if call.contains("embeddings")
        )
    })
}

/// One blocker per place a NaN or infinity appeared (the first 8 named).
fn non_finite_blockers(places: &[String], f: &mut Findings) {
    for p in places.iter().take(8) {
        f.blockers.push(Blocker::new(
            2,
            BlockerCode::NonFinite,
            p,
            format!("{p}: every measured value must be finite"),
        ));
    }
}

/// Gate 2 logits of a causal LM: (judged, as shipped).
///
/// A file of plain float tensors is judged as it runs. For block-quantized weights llama.cpp's
/// CPU matmuls also quantize activations (Q8_0/Q8_1/Q8_K), and the stored values are lossy:
/// the judged run is llama.cpp on the F32 expansion of the stored values (ggml's own
/// to_float) against the reference on the same stored values ([`stored`]; an MLX source's
/// reference already dequantizes the same codes). The file as shipped against the reference on
/// the HF source weights is the quality figure, reported beside it.
fn gate2_logits(
    opts: &VerifyOptions,
    s: &Sources,
    model: llama_runtime::Model,
    gated: &[String],
    f: &mut Findings,
) -> Result<(logits::LogitsReport, Option<logits::LogitsReport>)> {
    let source_ref = reference::decoder::Decoder::load(&opts.hf_dir)?;
    let direct = logits::check(&model, &source_ref, &s.tok.tokenizer, gated, opts.threads)?;
    let Some(p) = s.expansion() else {
        return Ok((direct, None));
    };
    // The file's own mapping is not needed beside the expansion's.
    drop(model);
    let m32 = llama_runtime::Model::load(p, false)?;
    let l = if reference::mlx::is_mlx_quantized(&s.hf.config) {
        logits::check(&m32, &source_ref, &s.tok.tokenizer, gated, opts.threads)?
    } else {
        drop(source_ref);
        // Dequantized layer by layer while the reference runs, never all at once.
        let vb = stored::var_builder(&opts.gguf, &s.hf, s.arch)?;
        let stored_ref = reference::decoder::Decoder::from_var_builder(&opts.hf_dir, vb)?;
        logits::check(&m32, &stored_ref, &s.tok.tokenizer, gated, opts.threads)?
    };
    f.notes.push(format!(
        "block-quantized weights: logits judged on llama.cpp running the F32 expansion of the stored values against the reference on the same values \
         (min cosine {:.6}, argmax {:.4}, mean KLD {:.6}); quality, the file as shipped (llama.cpp's quantized-activation matmuls) against the reference on the HF weights: \
         min cosine {:.6}, argmax {:.4}, mean KLD {:.6}",
        l.min_cosine, l.top1_agreement, l.mean_kld,
        direct.min_cosine, direct.top1_agreement, direct.mean_kld
    ));
    Ok((l, Some(direct)))
}

/// Gate 2: token ids, then vectors (embedding models) or logits (causal LMs) against the
/// independent reference, judged by the threshold table.
fn gate2(
    opts: &VerifyOptions,
    s: &Sources,
    g1: &Gate1,
    params: &llama_runtime::ContextParams,
    t: &Thresholds,
    f: &mut Findings,
) -> Result<Gate2> {
    if let Some(d) = &s.arch_mismatch {
        f.blockers.push(Blocker::new(
            2,
            BlockerCode::ArchitectureMismatch,
            gguf::keys::general::ARCHITECTURE,
            format!("{d}: token ids, vectors and logits cannot be compared"),
        ));
        return Ok(Gate2::default());
    }
    let model = match llama_runtime::Model::load(&opts.gguf, s.vocab_only) {
        Ok(m) => m,
        Err(e @ llama_runtime::RuntimeError::Load { .. }) => {
            f.blockers.push(Blocker::new(
                2,
                BlockerCode::LlamaLoad,
                &opts.gguf.display().to_string(),
                e.to_string(),
            ));
            return Ok(Gate2::default());
        }
        Err(e) => return Err(e.into()),
    };
    let texts = gate2_texts(opts)?;
    let mut g2 = Gate2 {
        tokenizer: Some(gate2_tokenizer(s, &model, &texts, f)?),
        ..Gate2::default()
    };
    if s.vocab_only {
        return Ok(g2);
    }
    // Vectors and logits are compared on the texts whose ids both sides can agree on.
    let gated: Vec<String> = texts
        .iter()
        .filter(|x| tokenizer::known_divergence(&s.tok.json, x).is_none())
        .cloned()
        .collect();
    if s.arch == Arch::Bert || s.pooling.is_some() {
        g2.vectors = gate2_vectors(opts, s, &model, params, &gated, t, f)?;
    } else if g1.source_inconsistent {
        f.blockers.push(Blocker::new(
            2,
            BlockerCode::LogitsNotMeasured,
            "logits",
            "the source's quantization metadata disagrees with its tensors (Gate 1); the reference cannot load it".into(),
        ));
    } else {
        let (l, shipped) = gate2_logits(opts, s, model, &gated, f)?;
        non_finite_blockers(&l.non_finite, f);
        if l.positions == 0 {
            f.blockers.push(Blocker::new(
                2,
                BlockerCode::LogitsNotMeasured,
                "logits",
                "no position was compared".into(),
            ));
        }
        judge(logits_checks(t, &l), &mut f.blockers);
        if let Some(shipped) = &shipped {
            let q = quality_section(opts, s, shipped)?;
            quality::judge(&q, &mut f.blockers);
            g2.quality = Some(q);
        }
        g2.logits = Some(l);
        g2.logits_as_shipped = shipped;
    }
    Ok(g2)
}

/// The quality section of a block-quantized file: the as-shipped logits, PPL of both sides when
/// `--ppl-text` was given, and the protocol's budget for the file's ftype.
fn quality_section(
    opts: &VerifyOptions,
    s: &Sources,
    shipped: &logits::LogitsReport,
) -> Result<quality::Quality> {
    let ftype = file_type::claimed(&s.c)
        .and_then(gguf::LlamaFtype::by_id)
        .map_or_else(|| "unknown".to_string(), |t| t.name.to_string());
    let budget = match &opts.protocol {
        Some(p) => quality::budget_from_protocol(p, &ftype)?,
        None => None,
    };
    let ppl = match &opts.ppl_text {
        Some(t) => Some(quality::ppl_pair(
            &opts.gguf,
            &opts.hf_dir,
            t,
            opts.threads,
        )?),
        None => None,
    };
    Ok(quality::Quality {
        ftype,
        logits: shipped.clone(),
        ppl,
        budget,
    })
}

/// Gate 3 (`--release`): the sha256 manifest and a re-measurement of the shipped GGUF.
fn gate3(
    opts: &VerifyOptions,
    params: &llama_runtime::ContextParams,
    g2: &Gate2,
    f: &mut Findings,
) -> Result<Option<gate3::Gate3Report>> {
    match &opts.release {
        Some(dir) => Ok(Some(gate3::check(
            dir,
            params,
            g2.vectors.as_ref(),
            &mut f.blockers,
        )?)),
        None => Ok(None),
    }
}

/// Gates 1–3 on opened sources, each measured for its wall time and peak RSS.
fn run_gates(
    opts: &VerifyOptions,
    s: &Sources,
    params: &llama_runtime::ContextParams,
    thresholds: &Thresholds,
    costs: &mut Vec<resources::GateCost>,
    f: &mut Findings,
) -> Result<(Gate1, Gate2, Option<gate3::Gate3Report>)> {
    // A file of another architecture than the HF folder: nothing can be compared (Gate 2
    // names the mismatch as the one blocker, instead of hundreds of Gate 1 differences).
    crate::progress::report("gate 1", 0, 0);
    let g1 = resources::measure(1, costs, || -> Result<Gate1> {
        if s.arch_mismatch.is_none() {
            gate1(opts, s, f)
        } else {
            Ok(Gate1::default())
        }
    })?;
    crate::interrupt::check()?;
    crate::progress::report("gate 2", 0, 0);
    let g2 = resources::measure(2, costs, || gate2(opts, s, &g1, params, thresholds, f))?;
    crate::interrupt::check()?;
    let g3 = resources::measure(3, costs, || gate3(opts, params, &g2, f))?;
    Ok((g1, g2, g3))
}

/// Runs all gates. Errors only for unusable inputs (the caller prints them, exit 2); every
/// measured failure is a blocker in the report instead.
pub fn verify(opts: &VerifyOptions) -> Result<VerifyReport> {
    let mut f = Findings::default();
    let thresholds = match &opts.protocol {
        Some(p) => thresholds_from_protocol(p, &mut f.blockers)?,
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
    inputs.extend(hash_hf_inputs(opts)?);
    let params = llama_runtime::ContextParams::embeddings(512, opts.threads);
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
        llama_context: serde_json::json!({
            "n_ctx": params.n_ctx, "n_batch": params.n_batch, "n_ubatch": params.n_ubatch,
            "threads": params.n_threads, "kv_type": "F16", "pooling": "model default",
            "tokenize": "add_special=true, parse_special=true",
        }),
        inputs,
        gate1: g1.report,
        gate1_affine: g1.affine,
        gate2_tokenizer: g2.tokenizer,
        gate2_vectors: g2.vectors,
        gate2_logits: g2.logits,
        gate2_logits_as_shipped: g2.logits_as_shipped,
        quality: g2.quality,
        gate3: g3,
        costs,
        notes: f.notes,
    })
}
