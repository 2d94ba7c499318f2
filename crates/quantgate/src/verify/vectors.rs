//! Gate 2, vectors: pooled embeddings from llama.cpp against the reference (candle f32 on the
//! HF safetensors with the model's own pooling). Cosine per text and top-1 retrieval.

use std::path::Path;
use std::time::Instant;

use anyhow::{bail, Result};
use llama_runtime::{Context, ContextParams, Model};
use reference::pooling::Pooling;
use serde::{Deserialize, Serialize};

use super::corpus::{RETRIEVAL_DOCS, RETRIEVAL_QUERIES};
use crate::source::arch::Arch;

/// Cosine similarity with f64 sums (llama.cpp's `common_embd_similarity_cos`): 1 when both are
/// zero, 0 when exactly one is.
pub fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let (mut ab, mut aa, mut bb) = (0f64, 0f64, 0f64);
    for (x, y) in a.iter().zip(b) {
        ab += (*x as f64) * (*y as f64);
        aa += (*x as f64) * (*x as f64);
        bb += (*y as f64) * (*y as f64);
    }
    match (aa == 0.0, bb == 0.0) {
        (true, true) => 1.0,
        (true, false) | (false, true) => 0.0,
        _ => ab / (aa.sqrt() * bb.sqrt()),
    }
}

/// Index of the document with the highest cosine to `q` (first on ties).
pub fn top1(q: &[f32], docs: &[Vec<f32>]) -> usize {
    let mut best = (0, f64::NEG_INFINITY);
    for (i, d) in docs.iter().enumerate() {
        let c = cosine(q, d);
        if c > best.1 {
            best = (i, c);
        }
    }
    best.0
}

/// The retrieval set a vector check compares on: the built-in queries and documents whose
/// texts both sides can tokenize alike.
#[derive(Clone, Debug)]
pub struct Retrieval {
    /// (query, index of its document in [`RETRIEVAL_DOCS`]).
    pub queries: Vec<(String, usize)>,
    /// (index in [`RETRIEVAL_DOCS`], document).
    pub docs: Vec<(usize, String)>,
    /// Texts left out because `comparable` refused them (a known tokenizer divergence): a
    /// document, and every query whose document it is, or a query on its own.
    pub skipped: Vec<String>,
}

impl Retrieval {
    /// The built-in set without the texts `comparable` refuses.
    pub fn built_in(comparable: impl Fn(&str) -> bool) -> Retrieval {
        let mut skipped = Vec::new();
        let docs: Vec<(usize, String)> = RETRIEVAL_DOCS
            .iter()
            .enumerate()
            .filter(|(_, d)| comparable(d) || !skipped_push(&mut skipped, d))
            .map(|(i, d)| (i, d.to_string()))
            .collect();
        let queries = RETRIEVAL_QUERIES
            .iter()
            .filter(|(q, doc)| {
                (comparable(q) && docs.iter().any(|(i, _)| i == doc))
                    || !skipped_push(&mut skipped, q)
            })
            .map(|(q, doc)| (q.to_string(), *doc))
            .collect();
        Retrieval {
            queries,
            docs,
            skipped,
        }
    }
}

/// Records `t` as skipped; always true (so a filter can call it on its way out).
fn skipped_push(skipped: &mut Vec<String>, t: &str) -> bool {
    skipped.push(t.to_string());
    true
}

/// A reference embedder: BERT or a decoder with sentence-transformers pooling.
pub enum RefModel {
    Bert(reference::bert::Bert, Pooling),
    Decoder(reference::decoder::Decoder, Pooling),
}

impl RefModel {
    /// Loads the reference for `dir` (BERT, or qwen3/qwen2/llama with a Pooling module).
    pub fn load(dir: &Path, arch: Arch) -> Result<RefModel> {
        let pooling = Pooling::from_sentence_transformers(dir)?;
        Ok(match (arch, pooling) {
            (Arch::Bert, p) => RefModel::Bert(reference::bert::Bert::load(dir)?, p.unwrap_or(Pooling::Cls)),
            (_, Some(p)) => RefModel::Decoder(reference::decoder::Decoder::load(dir)?, p),
            (a, None) => bail!("{}: {} model without a sentence-transformers Pooling module is not an embedding model", dir.display(), a.gguf_name()),
        })
    }

    /// The reference for `dir`'s config and pooling, running the given f32 weights (HF names):
    /// the values a quantized file stores ([`super::stored`]).
    pub fn from_stored(
        dir: &Path,
        arch: Arch,
        tensors: std::collections::HashMap<String, candle_core::Tensor>,
    ) -> Result<RefModel> {
        let pooling = Pooling::from_sentence_transformers(dir)?;
        Ok(match (arch, pooling) {
            (Arch::Bert, p) => RefModel::Bert(
                reference::bert::Bert::from_tensors(dir, tensors)?,
                p.unwrap_or(Pooling::Cls),
            ),
            (_, Some(p)) => RefModel::Decoder(reference::decoder::Decoder::from_tensors(dir, tensors)?, p),
            (a, None) => bail!("{}: {} model without a sentence-transformers Pooling module is not an embedding model", dir.display(), a.gguf_name()),
        })
    }

    /// The pooled embedding of `ids`.
    pub fn embed(&self, ids: &[u32]) -> Result<Vec<f32>> {
        Ok(self.embed_many(&[ids])?.remove(0))
    }

    /// The pooled embeddings of several id sequences, each computed on its own; a decoder
    /// reads its weights once, layer by layer, for all of them
    /// ([`reference::decoder::Decoder::forward_many`]).
    pub fn embed_many(&self, seqs: &[&[u32]]) -> Result<Vec<Vec<f32>>> {
        match self {
            RefModel::Bert(m, p) => seqs
                .iter()
                .map(|ids| Ok(p.apply(&m.forward(ids)?)?))
                .collect(),
            RefModel::Decoder(m, p) => m
                .forward_many(seqs)?
                .iter()
                .map(|o| Ok(p.apply(&o.hidden)?))
                .collect(),
        }
    }

    /// The pooling in use.
    pub fn pooling(&self) -> Pooling {
        match self {
            RefModel::Bert(_, p) | RefModel::Decoder(_, p) => *p,
        }
    }
}

/// Gate 2 vectors' measurements.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct VectorReport {
    /// Texts embedded on both sides.
    pub texts: usize,
    /// Lowest cosine over the texts.
    #[serde(deserialize_with = "crate::serde_nan::f64")]
    pub min_cosine: f64,
    /// Mean cosine.
    #[serde(deserialize_with = "crate::serde_nan::f64")]
    pub mean_cosine: f64,
    /// The text with the lowest cosine.
    pub worst_text: String,
    /// Queries whose top-1 document is the same on both sides.
    pub top1_identical: usize,
    /// Queries.
    pub queries: usize,
    /// llama.cpp's top-1 per query (Gate 3 re-measures against these).
    pub llama_top1: Vec<usize>,
    /// Embedding width.
    pub n_embd: usize,
    /// Pooling type llama.cpp used (llama_pooling_type).
    pub llama_pooling: i32,
    /// Mean llama.cpp time per text, ms (a timing: not part of a release's reproducible
    /// report).
    #[serde(deserialize_with = "crate::serde_nan::f64")]
    pub llama_ms_per_text: f64,
    /// Cosine per embedded text, in corpus order (texts, then queries, then documents).
    #[serde(default, deserialize_with = "crate::serde_nan::vec_f64")]
    pub per_text_cosine: Vec<f64>,
    /// Retrieval texts left out for a known tokenizer divergence ([`Retrieval::skipped`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub retrieval_skipped: Vec<String>,
    /// Where a NaN or infinite value appeared (`llama.cpp embedding of "TEXT"`, `reference
    /// embedding of …`): each is a blocker. Absent from the JSON when empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub non_finite: Vec<String>,
}

/// `"SIDE embedding of TEXT: N non-finite of M"` when `v` holds a NaN or infinity.
pub fn non_finite(side: &str, what: &str, v: &[f32]) -> Option<String> {
    let n = v.iter().filter(|x| !x.is_finite()).count();
    (n > 0).then(|| format!("{side} {what}: {n} non-finite of {}", v.len()))
}

/// Embeds every text with llama.cpp (tokenized with add_special = parse_special = true, as the
/// embedding example does) and with the reference (HF ids), then compares.
pub fn check(
    model: &Model,
    params: &ContextParams,
    reference: &RefModel,
    hf: &reference::tokenizer::HfTokenizer,
    (texts, retrieval): (&[String], &Retrieval),
) -> Result<VectorReport> {
    let mut ctx = Context::new(model, params.clone())?;
    let all: Vec<String> = texts
        .iter()
        .cloned()
        .chain(retrieval.queries.iter().map(|q| q.0.clone()))
        .chain(retrieval.docs.iter().map(|d| d.1.clone()))
        .collect();
    // The reference embeds every text in one pass over its weights.
    let hf_ids = all
        .iter()
        .map(|t| hf.encode(t, true))
        .collect::<Result<Vec<_>, _>>()?;
    // Longer than the context, llama.cpp cannot embed it and the reference indexes past its
    // position table: an input error naming the text, never a backtrace.
    let limit = params.n_ctx as usize;
    if let Some((t, ids)) = all.iter().zip(&hf_ids).find(|(_, ids)| ids.len() > limit) {
        let cut: String = t.chars().take(60).collect();
        anyhow::bail!(
            "text {cut:?}…: {} tokens with special tokens, more than the {limit}-token context the vectors are compared at; split it into shorter texts",
            ids.len()
        );
    }
    crate::progress::report("gate 2 vectors: reference", 0, all.len());
    let refs = reference.embed_many(&hf_ids.iter().map(Vec::as_slice).collect::<Vec<_>>())?;
    let mut refs = refs.into_iter();
    let mut embed_both = |t: &str| -> Result<(Vec<f32>, Vec<f32>, f64)> {
        let ids = model.tokenize(t, true, true)?;
        let t0 = Instant::now();
        let l = ctx.embed(&ids)?;
        let ms = t0.elapsed().as_secs_f64() * 1e3;
        let r = refs.next().expect("one reference embedding per text");
        Ok((l, r, ms))
    };
    let (mut min, mut sum, mut worst, mut ms) = (f64::INFINITY, 0f64, String::new(), 0f64);
    let mut n = 0;
    let mut vecs = Vec::new();
    let mut bad = Vec::new();
    let mut per_text = Vec::with_capacity(all.len());
    for (i, t) in all.iter().enumerate() {
        crate::progress::report("gate 2 vectors: llama.cpp", i, all.len());
        let (l, r, dt) = embed_both(t)?;
        let what = format!("embedding of {t:?}");
        bad.extend(non_finite("llama.cpp", &what, &l));
        bad.extend(non_finite("reference", &what, &r));
        let c = cosine(&l, &r);
        per_text.push(c);
        // A NaN cosine is the minimum: it never passes a threshold.
        if !min.is_nan() && (c.is_nan() || c < min) {
            min = c;
            worst = t.clone();
        }
        sum += c;
        ms += dt;
        n += 1;
        vecs.push((l, r));
    }
    let nq = retrieval.queries.len();
    let base = texts.len();
    let docs_l: Vec<Vec<f32>> = (0..retrieval.docs.len())
        .map(|i| vecs[base + nq + i].0.clone())
        .collect();
    let docs_r: Vec<Vec<f32>> = (0..retrieval.docs.len())
        .map(|i| vecs[base + nq + i].1.clone())
        .collect();
    let mut same = 0;
    let mut llama_top1 = Vec::new();
    for qi in 0..nq {
        let tl = top1(&vecs[base + qi].0, &docs_l);
        let tr = top1(&vecs[base + qi].1, &docs_r);
        // As an index of the built-in documents.
        llama_top1.push(retrieval.docs[tl].0);
        same += (tl == tr) as usize;
    }
    Ok(VectorReport {
        texts: n,
        min_cosine: min,
        mean_cosine: sum / n as f64,
        worst_text: worst,
        top1_identical: same,
        queries: nq,
        llama_top1,
        n_embd: model.n_embd(),
        llama_pooling: ctx.pooling_type(),
        per_text_cosine: per_text,
        llama_ms_per_text: ms / n as f64,
        retrieval_skipped: retrieval.skipped.clone(),
        non_finite: bad,
    })
}

/// Query vectors and document vectors of the retrieval set.
pub type RetrievalVectors = (Vec<Vec<f32>>, Vec<Vec<f32>>);

/// Embeds the retrieval set with llama.cpp only (Gate 3), returning the vectors.
pub fn embed_retrieval(model: &Model, params: &ContextParams) -> Result<RetrievalVectors> {
    let mut ctx = Context::new(model, params.clone())?;
    let mut e = |t: &str| -> Result<Vec<f32>> { Ok(ctx.embed(&model.tokenize(t, true, true)?)?) };
    let q = RETRIEVAL_QUERIES
        .iter()
        .map(|(t, _)| e(t))
        .collect::<Result<Vec<_>>>()?;
    let d = RETRIEVAL_DOCS
        .iter()
        .map(|t| e(t))
        .collect::<Result<Vec<_>>>()?;
    Ok((q, d))
}
