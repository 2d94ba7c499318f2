//! Gate 2: the same token ids as HF tokenizers in all four add_special × parse_special modes
//! ([`super::tokenizer`]), and the same vectors ([`super::vectors`]) or logits
//! ([`super::logits`]) as the independent reference; for block-quantized causal LMs, the
//! quality against the source ([`super::quality`]).

use anyhow::{Context as _, Result};

use super::gate1::{self, Gate1};
use super::outcome::{Blocker, BlockerCode};
use super::sliced::Runner;
use super::sources::{Findings, Sources};
use super::thresholds::{
    judge, logits_checks, long_context_checks, routing_blocker, vector_checks, Thresholds,
};
use super::{
    corpus, logits, long_context, quality, stored, stress, stress_gate, tokenizer, vectors,
    VerifyOptions,
};
use crate::source::arch::Arch;

/// Gate 2's typed section.
#[derive(Default)]
pub struct Gate2 {
    /// Quality against the source, for block-quantized causal LMs.
    pub quality: Option<quality::Quality>,
    /// Token ids in the four add_special × parse_special modes.
    pub tokenizer: Option<tokenizer::TokenizerReport>,
    /// The generated tokenizer cases per class.
    pub stress: Option<stress_gate::StressReport>,
    /// Embedding models: pooled vectors against the reference.
    pub vectors: Option<vectors::VectorReport>,
    /// With block-quantized weights: the file's vectors as shipped against the reference on the
    /// HF weights (reported, not judged).
    pub vectors_as_shipped: Option<vectors::VectorReport>,
    /// Causal LMs: the judged logits measurement.
    pub logits: Option<logits::LogitsReport>,
    /// With block-quantized weights: the file as shipped (reported, not judged).
    pub logits_as_shipped: Option<logits::LogitsReport>,
    /// Causal LMs with long-range RoPE scaling: the judged pair at long context.
    pub long_context: Option<long_context::LongContext>,
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
            BlockerCode::TokenizerNoMode,
            "token ids",
            format!("no mode matches HF on every text: {detail}"),
        ));
    }
    f.notes.extend(tr.limitations.iter().map(|l| l.to_string()));
    Ok(tr)
}

/// Gate 2 tokenizer stress: the declared generated cases in the first mode the fixed texts
/// matched in (none matched: already NO-GO, nothing run), judged per class.
fn gate2_stress(
    opts: &VerifyOptions,
    s: &Sources,
    model: &llama_runtime::Model,
    tr: &tokenizer::TokenizerReport,
    f: &mut Findings,
) -> Result<Option<stress_gate::StressReport>> {
    let Some(mode) = tr.matching_modes.first().copied() else {
        return Ok(None);
    };
    let decl = match &opts.protocol {
        Some(p) => super::declared::Declarations::read(p)?
            .stress
            .unwrap_or_default(),
        None => stress_gate::StressDeclaration::default(),
    };
    let specials = stress::special_texts_of(&s.tok.json);
    crate::progress::report("gate 2 tokenizer stress", 0, 1);
    let hf = (&s.tok.tokenizer, &s.tok.json);
    let r = stress_gate::check(hf, &specials, model, mode, &decl)?;
    stress_gate::judge(&r, &mut f.blockers);
    Ok(Some(r))
}

/// Gate 2 vectors of an embedding model: thresholds, then the pooling llama.cpp applied.
fn gate2_vectors(
    opts: &VerifyOptions,
    s: &Sources,
    model: &llama_runtime::Model,
    params: &llama_runtime::ContextParams,
    gated: &[String],
    t: &Thresholds,
    (f, as_shipped): (&mut Findings, &mut Option<vectors::VectorReport>),
) -> Result<Option<vectors::VectorReport>> {
    // Retrieval texts with a known tokenizer divergence are left out, as corpus texts are.
    let retrieval =
        vectors::Retrieval::built_in(|t| tokenizer::known_divergence(&s.tok.json, t).is_none());
    if !retrieval.skipped.is_empty() {
        f.notes.push(format!(
            "retrieval: {} of the built-in queries and documents left out for a known tokenizer divergence (Hangul on a WordPiece vocabulary, …): {:?}",
            retrieval.skipped.len(),
            retrieval.skipped
        ));
    }
    // Block-quantized (not MLX): llama.cpp on the F32 expansion against the reference on the
    // same stored values, as for logits; the file as shipped against the source is a note.
    let stored = match s.whole_expansion() {
        Some(p) if !reference::mlx::is_mlx_quantized(&s.hf.config) => Some(p),
        _ => None,
    };
    if stored.is_some() {
        let source_ref = vectors::RefModel::load(&opts.hf_dir, s.arch)?;
        if let Ok(q) = vectors::check(
            model,
            params,
            &source_ref,
            &s.tok.tokenizer,
            (gated, &retrieval),
        ) {
            f.notes.push(format!(
                "quality against the source (vectors of the file as shipped vs the reference on the HF weights; reported, not judged): min cosine {:.6}, top-1 identical {}/{}",
                q.min_cosine, q.top1_identical, q.queries
            ));
            *as_shipped = Some(q);
        }
    }
    let m32;
    let (model, reference) = match stored {
        Some(p) => {
            m32 = llama_runtime::Model::load(p, false)?;
            let tensors = stored::hf_tensors(&opts.gguf, &s.hf, s.arch)?;
            (
                &m32,
                vectors::RefModel::from_stored(&opts.hf_dir, s.arch, tensors)?,
            )
        }
        None => (model, vectors::RefModel::load(&opts.hf_dir, s.arch)?),
    };
    let v = match vectors::check(
        model,
        params,
        &reference,
        &s.tok.tokenizer,
        (gated, &retrieval),
    ) {
        Ok(v) => v,
        Err(e) if is_no_pooled_embedding(&e) => {
            f.blockers.push(Blocker::new(
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
    if s.arch == Arch::Bert && s.hf.config["hidden_act"].as_str().unwrap_or("gelu") == "gelu" {
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
            Some(llama_runtime::RuntimeError::NoPooledEmbedding { .. })
        )
    })
}

/// One blocker per place a NaN or infinity appeared (the first 8 named).
fn non_finite_blockers(places: &[String], f: &mut Findings) {
    for p in places.iter().take(8) {
        f.blockers.push(Blocker::new(
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
) -> Result<Logits> {
    if let Some(n) = longrope_note(&s.hf.config)? {
        f.notes.push(n);
    }
    let source_ref = reference::decoder::Decoder::load(&opts.hf_dir)?;
    let direct = logits::check(
        Runner::Model(&model),
        &source_ref,
        &s.tok.tokenizer,
        gated,
        opts.threads,
    )?;
    let long = |m: Runner, r: &reference::decoder::Decoder| {
        long_context::check(&s.hf.config, m, r, &s.tok.tokenizer, opts.threads)
    };
    if s.expansion.is_none() {
        return Ok(Logits {
            long: long(Runner::Model(&model), &source_ref)?,
            judged: direct,
            as_shipped: None,
            ppl: None,
        });
    }
    // The quality section's PPL, while the file and the source's reference are loaded.
    let ppl = match &opts.ppl_text {
        Some(t) => Some(quality::ppl_pair(
            &model,
            &opts.gguf,
            &s.tok.tokenizer,
            &source_ref,
            &opts.hf_dir,
            t,
            opts.threads,
        )?),
        None => None,
    };
    // The file's own mapping is not needed beside the expansion's.
    drop(model);
    let m32;
    let stored = match (s.sliced(), s.whole_expansion()) {
        (Some(run), _) => Runner::Sliced(run),
        (None, Some(p)) => {
            m32 = llama_runtime::Model::load(p, false)?;
            Runner::Model(&m32)
        }
        (None, None) => unreachable!("an expansion is whole or sliced"),
    };
    let (l, long) = if reference::mlx::is_mlx_quantized(&s.hf.config) {
        (
            logits::check(stored, &source_ref, &s.tok.tokenizer, gated, opts.threads)?,
            long(stored, &source_ref)?,
        )
    } else {
        drop(source_ref);
        // Dequantized layer by layer while the reference runs, never all at once.
        let vb = stored::var_builder(&opts.gguf, &s.hf, s.arch)?;
        let stored_ref = reference::decoder::Decoder::from_var_builder(&opts.hf_dir, vb)?;
        (
            logits::check(stored, &stored_ref, &s.tok.tokenizer, gated, opts.threads)?,
            long(stored, &stored_ref)?,
        )
    };
    f.notes.push(format!(
        "block-quantized weights: logits judged on llama.cpp running the F32 expansion of the stored values against the reference on the same values \
         (min cosine {:.6}, argmax {:.4}, mean KLD {:.6}); quality, the file as shipped (llama.cpp's quantized-activation matmuls) against the reference on the HF weights: \
         min cosine {:.6}, argmax {:.4}, mean KLD {:.6}",
        l.min_cosine, l.top1_agreement, l.mean_kld,
        direct.min_cosine, direct.top1_agreement, direct.mean_kld
    ));
    Ok(Logits {
        judged: l,
        as_shipped: Some(direct),
        ppl,
        long,
    })
}

/// LongRoPE's limitation, for the card: llama.cpp picks the long or short factors by the
/// context it is created with (`n_ctx > original_max_position_embeddings`:
/// `llama_model::get_rope_factors`), transformers by the sequence's length. Gate 2 judges
/// sequences below the original length, with contexts below it, where both use the short
/// factors; `None` without LongRoPE.
///
/// Errors: RoPE fields the reference cannot read.
fn longrope_note(config: &serde_json::Value) -> Result<Option<String>> {
    let Some(l) = reference::longrope::LongRope::from_config(config)? else {
        return Ok(None);
    };
    Ok(Some(format!(
        "{note} judged below the original context ({orig} tokens), where llama.cpp and transformers both rotate with the short factors; \
         llama.cpp switches to the long factors when its context (n_ctx) exceeds {orig}, transformers when a sequence does: with n_ctx above {orig}, \
         sequences shorter than {orig} tokens are rotated differently than in transformers (a limitation for the model card, not checked here)",
        note = long_context::LONGROPE_NOTE,
        orig = l.original_context
    )))
}

/// What [`gate2_logits`] measured.
struct Logits {
    /// The judged measurement.
    judged: logits::LogitsReport,
    /// With block-quantized weights: the file as shipped against the source.
    as_shipped: Option<logits::LogitsReport>,
    /// With block-quantized weights and `--ppl-text`: PPL of the file and of the source.
    ppl: Option<quality::QualityPpl>,
    /// The judged pair at long context, for long-range RoPE scaling.
    long: Option<long_context::LongContext>,
}

/// Gate 2: token ids, then vectors (embedding models) or logits (causal LMs) against the
/// independent reference, judged by the threshold table.
pub(super) fn run(
    opts: &VerifyOptions,
    s: &Sources,
    g1: &Gate1,
    params: &llama_runtime::ContextParams,
    t: &Thresholds,
    f: &mut Findings,
) -> Result<Gate2> {
    if let Some(d) = &s.arch_mismatch {
        f.blockers.push(Blocker::new(
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
                BlockerCode::LlamaLoad,
                &opts.gguf.display().to_string(),
                e.to_string(),
            ));
            return Ok(Gate2::default());
        }
        Err(e) => return Err(e.into()),
    };
    let texts = gate2_texts(opts)?;
    let tr = gate2_tokenizer(s, &model, &texts, f)?;
    let mut g2 = Gate2 {
        stress: gate2_stress(opts, s, &model, &tr, f)?,
        tokenizer: Some(tr),
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
        let shipped = &mut g2.vectors_as_shipped;
        g2.vectors = gate2_vectors(opts, s, &model, params, &gated, t, (f, shipped))?;
    } else if g1.source_inconsistent {
        f.blockers.push(Blocker::new(BlockerCode::LogitsNotMeasured,
            "logits",
            "the source's quantization metadata disagrees with its tensors (Gate 1); the reference cannot load it".into(),
        ));
    } else {
        let Logits {
            judged: l,
            as_shipped: shipped,
            ppl,
            long,
        } = gate2_logits(opts, s, model, &gated, f)?;
        non_finite_blockers(&l.non_finite, f);
        if let Some(lc) = &long {
            non_finite_blockers(&lc.logits.non_finite, f);
            judge(long_context_checks(t, lc), &mut f.blockers);
        }
        g2.long_context = long;
        if l.positions == 0 {
            f.blockers.push(Blocker::new(
                BlockerCode::LogitsNotMeasured,
                "logits",
                "no position was compared".into(),
            ));
        }
        judge(logits_checks(t, &l), &mut f.blockers);
        f.blockers.extend(routing_blocker(&l));
        if let Some(shipped) = &shipped {
            let q = quality_section(opts, s, shipped, ppl)?;
            quality::judge(&q, &mut f.blockers);
            g2.quality = Some(q);
        }
        g2.logits = Some(l);
        g2.logits_as_shipped = shipped;
    }
    Ok(g2)
}

/// The quality section of a block-quantized file: the as-shipped logits, PPL of both sides when
/// `--ppl-text` was given (measured by [`gate2_logits`]), and the protocol's budget for the
/// file's ftype.
fn quality_section(
    opts: &VerifyOptions,
    s: &Sources,
    shipped: &logits::LogitsReport,
    ppl: Option<quality::QualityPpl>,
) -> Result<quality::Quality> {
    let ftype = gate1::file_type::claimed(&s.c)
        .and_then(gguf::LlamaFtype::by_id)
        .map_or_else(|| "unknown".to_string(), |t| t.name.to_string());
    let budget = match &opts.protocol {
        Some(p) => super::declared::Declarations::read(p)?.budget_for(&ftype),
        None => None,
    };
    Ok(quality::Quality {
        ftype,
        logits: shipped.clone(),
        ppl,
        budget,
    })
}
