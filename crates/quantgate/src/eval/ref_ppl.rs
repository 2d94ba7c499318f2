//! Perplexity of an HF (or MLX affine-quantized) folder under the reference decoder
//! (`reference::decoder::Decoder`, candle f32), over exactly llama-perplexity's chunking
//! (see [`super::ppl`]): the whole text tokenized with special tokens added; chunk `i` =
//! `tokens[i·n_ctx .. (i+1)·n_ctx]` with its first token replaced by BOS when the vocab adds
//! BOS; positions `n_ctx/2 .. n_ctx−1` scored against the next token with the same nll (f32
//! exp, f64 sums) and the same delta-method standard error.

use std::path::Path;
use std::time::Instant;

use anyhow::{bail, Context as _, Result};
use reference::decoder::Decoder;
use reference::tokenizer::HfTokenizer;
use serde::Serialize;

use super::ppl::nll;

/// The result.
#[derive(Clone, Debug, Serialize)]
pub struct RefPplResult {
    /// exp(mean nll).
    pub ppl: f64,
    /// Delta-method standard error of the PPL.
    pub ppl_se: f64,
    /// Chunks scored.
    pub chunks: usize,
    /// Tokens scored.
    pub scored_tokens: usize,
    /// Tokens in the whole text.
    pub text_tokens: usize,
    /// Wall time of tokenization, load and forwards, seconds.
    pub seconds: f64,
}

/// PPL of the model in `hf_dir` on `text` with chunks of `n_ctx` tokens; at most `chunks`
/// chunks (capped at `tokens / n_ctx`). `add_bos = Some(id)` replaces each chunk's first token
/// by `id` (what llama-perplexity does when the vocab adds BOS). `progress(done, total)` is
/// called after each chunk.
///
/// Errors: unreadable tokenizer or model, fewer than `2·n_ctx` tokens, `n_ctx < 4`, or a
/// degenerate nll variance.
pub fn reference_perplexity(
    hf_dir: &Path,
    text: &str,
    n_ctx: usize,
    chunks: usize,
    add_bos: Option<u32>,
    progress: impl FnMut(usize, usize),
) -> Result<RefPplResult> {
    let t0 = Instant::now();
    if n_ctx < 4 {
        bail!("n_ctx {n_ctx} is too small");
    }
    // tokenizer.json, or the tokenizer rebuilt from vocab.json + merges.txt (Qwen2.5 folders
    // without tokenizer.json), as verify's Gate 2 loads it.
    let tok = crate::source::tokenizer::load(hf_dir)?.tokenizer;
    let model = Decoder::load(hf_dir)
        .with_context(|| format!("{}: loading the reference decoder", hf_dir.display()))?;
    let r = reference_perplexity_of(&tok, &model, hf_dir, text, n_ctx, chunks, add_bos, progress)?;
    Ok(RefPplResult {
        seconds: t0.elapsed().as_secs_f64(),
        ..r
    })
}

/// [`reference_perplexity`] with the tokenizer and decoder of `hf_dir` (named in errors)
/// already loaded; `seconds` counts tokenization and forwards only.
///
/// Errors: as [`reference_perplexity`].
#[allow(clippy::too_many_arguments)]
pub fn reference_perplexity_of(
    tok: &HfTokenizer,
    model: &Decoder,
    hf_dir: &Path,
    text: &str,
    n_ctx: usize,
    chunks: usize,
    add_bos: Option<u32>,
    mut progress: impl FnMut(usize, usize),
) -> Result<RefPplResult> {
    let t0 = Instant::now();
    if n_ctx < 4 {
        bail!("n_ctx {n_ctx} is too small");
    }
    // llama-perplexity tokenizes with add_special = true.
    let tokens = tok
        .encode(text, true)
        .with_context(|| format!("{}: tokenizing the text", hf_dir.display()))?;
    if tokens.len() < 2 * n_ctx {
        bail!(
            "you need at least {} tokens to evaluate perplexity with a context of {n_ctx}; the text has {}",
            2 * n_ctx,
            tokens.len()
        );
    }
    let n_chunk = chunks.min(tokens.len() / n_ctx);
    if n_chunk == 0 {
        bail!("no chunks to score");
    }
    let first = n_ctx / 2;
    let (mut count, mut sum, mut sum2) = (0usize, 0f64, 0f64);
    for i in 0..n_chunk {
        crate::interrupt::check()?;
        let mut chunk = tokens[i * n_ctx..(i + 1) * n_ctx].to_vec();
        if let Some(bos) = add_bos {
            chunk[0] = bos;
        }
        let logits = model
            .forward(&chunk)?
            .logits
            .narrow(0, first, n_ctx - 1 - first)?
            .to_vec2::<f32>()?;
        for j in first..n_ctx - 1 {
            let y = tokens[i * n_ctx + j + 1] as usize;
            let v = nll(&logits[j - first], y);
            sum += v;
            sum2 += v * v;
            count += 1;
        }
        progress(i + 1, n_chunk);
    }
    let (ppl, ppl_se) = super::ppl::ppl_and_se(sum, sum2, count)?;
    Ok(RefPplResult {
        ppl,
        ppl_se,
        chunks: n_chunk,
        scored_tokens: count,
        text_tokens: tokens.len(),
        seconds: t0.elapsed().as_secs_f64(),
    })
}
