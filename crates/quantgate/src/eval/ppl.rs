//! Perplexity exactly as llama-perplexity computes it (`docs/llamacpp-spec.md` §1.1):
//! the whole text tokenized with add_special = true, parse_special = false; chunks of `n_ctx`
//! tokens with the first token replaced by BOS when the vocab adds BOS; logits of the second
//! half only; tokens at positions first+1 … n_ctx−1 scored; nll = −(l_y − max − ln Σ exp(l − max))
//! with f32 exp and f64 sums; delta-method standard error.

use std::path::Path;
use std::time::Instant;

use crate::threads::Threads;
use anyhow::{bail, Context as _, Result};
use llama_runtime::{Context, ContextParams, Model};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

/// Settings that change the result (all recorded).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PplParams {
    /// Tokens per chunk (`-c`).
    pub n_ctx: u32,
    /// Chunks to score (`--chunks`; `None` = all).
    pub chunks: Option<usize>,
    /// Threads.
    pub threads: Threads,
    /// Physical batch size (`-ub`).
    pub n_ubatch: u32,
}

/// The result.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PplResult {
    /// exp(mean nll).
    #[serde(deserialize_with = "crate::serde_nan::f64")]
    pub ppl: f64,
    /// Delta-method standard error of the PPL.
    #[serde(deserialize_with = "crate::serde_nan::f64")]
    pub ppl_se: f64,
    /// Chunks scored.
    pub chunks: usize,
    /// Tokens scored.
    pub scored_tokens: usize,
    /// Tokens in the whole text.
    pub text_tokens: usize,
    /// Running PPL after each chunk.
    #[serde(deserialize_with = "crate::serde_nan::vec_f64")]
    pub running: Vec<f64>,
    /// Tokens per second over the scored chunks (all chunk tokens evaluated / time).
    #[serde(deserialize_with = "crate::serde_nan::f64")]
    pub tokens_per_second: f64,
    /// Model load time, ms.
    #[serde(deserialize_with = "crate::serde_nan::f64")]
    pub load_ms: f64,
    /// Settings.
    pub params: PplParams,
}

/// The text as llama-perplexity's `-f` reads it: the file with exactly one trailing `\n` removed.
pub fn read_text(path: &Path) -> Result<String> {
    crate::paths::ensure_regular_file(path)?;
    let mut t = std::fs::read_to_string(path)
        .with_context(|| format!("{}: cannot read", path.display()))?;
    if t.ends_with('\n') {
        t.pop();
    }
    Ok(t)
}

/// Errors unless `4 ≤ n_ctx ≤` the model's training context (a chunk scores its second half,
/// so it needs a few tokens; beyond the training length llama.cpp's numbers mean little and a
/// typo such as `-c 1000000000` would allocate gigabytes).
pub fn check_ctx(model: &Model, path: &Path, n_ctx: usize) -> Result<()> {
    let train = model.n_ctx_train();
    if n_ctx < 4 || (train > 0 && n_ctx > train) {
        bail!(
            "{}: context {n_ctx} tokens is outside 4 ..= {train} (the model's training context)",
            path.display()
        );
    }
    Ok(())
}

/// llama-perplexity's chunk loop, shared by `ppl` and `kld`: chunk `i` is
/// `tokens[i·n_ctx .. (i+1)·n_ctx]` with its first token replaced by BOS when the vocab adds BOS,
/// decoded in one context (`n_ctx`, `n_ubatch`, KV F16); `f(i, rows)` gets the logits of the
/// scored positions `n_ctx/2 .. n_ctx−1` (row k predicts token `i·n_ctx + n_ctx/2 + k + 1`),
/// each `n_vocab` floats. Stops between chunks on SIGINT/SIGTERM.
///
/// Errors: a failed context or decode, an interrupt, or whatever `f` returns.
pub fn scored_chunks(
    model: &Model,
    tokens: &[i32],
    n_ctx: usize,
    n_chunk: usize,
    n_ubatch: usize,
    threads: Threads,
    mut f: impl FnMut(usize, &[&[f32]]) -> Result<()>,
) -> Result<()> {
    let mut ctx = Context::new(
        model,
        ContextParams::logits(n_ctx as u32, n_ubatch.min(n_ctx) as u32, threads.get()),
    )?;
    let first = n_ctx / 2;
    for i in 0..n_chunk {
        crate::interrupt::check()?;
        let mut chunk = tokens[i * n_ctx..(i + 1) * n_ctx].to_vec();
        if model.add_bos() {
            chunk[0] = model.bos();
        }
        let logits = ctx.logits_view_from(&chunk, first)?;
        f(i, &logits[..n_ctx - 1 - first])?;
    }
    Ok(())
}

/// PPL = exp(mean nll) and its delta-method standard error from the sums of nll and nll² over
/// `count` scored tokens, as llama-perplexity prints them.
///
/// Errors: a non-positive variance (llama-perplexity's "Unexpected negative standard
/// deviation"), e.g. from NaN logits or a single scored token.
pub fn ppl_and_se(sum: f64, sum2: f64, count: usize) -> Result<(f64, f64)> {
    let mean = sum / count as f64;
    let var = sum2 / count as f64 - mean * mean;
    if var.is_nan() || var <= 0.0 {
        bail!("Unexpected negative standard deviation of log(prob)");
    }
    let se = (var / (count as f64 - 1.0)).sqrt();
    Ok((mean.exp(), se * mean.exp()))
}

/// Negative log-likelihood of token `y` under `logits` (llama-perplexity's `log_softmax`).
pub fn nll(logits: &[f32], y: usize) -> f64 {
    let max = logits.iter().fold(f32::NEG_INFINITY, |m, v| m.max(*v));
    let sum: f64 = logits.iter().map(|v| (v - max).exp() as f64).sum();
    -((logits[y] - max) as f64 - sum.ln())
}

/// Computes PPL of `model_path` on `text`, calling `progress(chunks_done, n_chunk, running_ppl)`
/// per chunk.
///
/// Errors: a model that adds EOS (llama-perplexity asserts on it), too few tokens
/// (`2·n_ctx` needed), or a failed decode.
pub fn perplexity(
    model_path: &Path,
    text: &str,
    p: &PplParams,
    progress: impl FnMut(usize, usize, f64),
) -> Result<PplResult> {
    let t0 = Instant::now();
    let model = Model::load(model_path, false)?;
    let load_ms = t0.elapsed().as_secs_f64() * 1e3;
    perplexity_of(&model, model_path, load_ms, text, p, progress)
}

/// [`perplexity`] of a model already loaded from `model_path` (named in errors) in
/// `load_ms`.
///
/// Errors: as [`perplexity`].
pub fn perplexity_of(
    model: &Model,
    model_path: &Path,
    load_ms: f64,
    text: &str,
    p: &PplParams,
    mut progress: impl FnMut(usize, usize, f64),
) -> Result<PplResult> {
    if model.add_eos() {
        bail!(
            "{}: the vocabulary adds EOS; llama-perplexity refuses such models",
            model_path.display()
        );
    }
    let n_ctx = p.n_ctx as usize;
    check_ctx(model, model_path, n_ctx)?;
    let tokens = model.tokenize(text, true, false)?;
    if tokens.len() < 2 * n_ctx {
        bail!(
            "you need at least {} tokens to evaluate perplexity with a context of {n_ctx}; the text has {}",
            2 * n_ctx,
            tokens.len()
        );
    }
    let n_chunk_max = tokens.len() / n_ctx;
    let n_chunk = p.chunks.map_or(n_chunk_max, |c| c.min(n_chunk_max));
    let first = n_ctx / 2;
    let (mut count, mut sum, mut sum2) = (0usize, 0f64, 0f64);
    let mut running = Vec::with_capacity(n_chunk);
    let t1 = Instant::now();
    let n_ubatch = p.n_ubatch as usize;
    scored_chunks(
        model,
        &tokens,
        n_ctx,
        n_chunk,
        n_ubatch,
        p.threads,
        |i, rows| {
            // Each position on its own core (llama-perplexity's process_logits also splits
            // them over threads); summed afterwards in position order, so the sums are those
            // of a sequential loop.
            let nlls: Vec<f64> = rows
                .par_iter()
                .enumerate()
                .map(|(k, l)| nll(l, tokens[i * n_ctx + first + k + 1] as usize))
                .collect();
            for v in nlls {
                sum += v;
                sum2 += v * v;
                count += 1;
            }
            let ppl = (sum / count as f64).exp();
            running.push(ppl);
            progress(i + 1, n_chunk, ppl);
            Ok(())
        },
    )?;
    let secs = t1.elapsed().as_secs_f64();
    let (ppl, ppl_se) = ppl_and_se(sum, sum2, count)?;
    Ok(PplResult {
        ppl,
        ppl_se,
        chunks: n_chunk,
        scored_tokens: count,
        text_tokens: tokens.len(),
        running,
        tokens_per_second: (n_chunk * n_ctx) as f64 / secs,
        load_ms,
        params: p.clone(),
    })
}
