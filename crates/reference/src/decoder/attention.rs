//! Per-sequence attention pieces of the decoder forward: RoPE tables, the causal (and
//! sliding-window) mask, and softmax attention in blocks of query rows.

use candle_core::{DType, Device, Tensor, D};

use super::DecoderConfig;
use crate::Result;

/// Per-sequence constants of a forward: RoPE tables and the causal mask, and gemma3's
/// sliding-window layers' own.
pub(crate) struct SeqTables {
    pub(crate) cos: Tensor,
    pub(crate) sin: Tensor,
    /// Sliding window (positions seen back from each query), or none.
    window: Option<usize>,
    pub(crate) local: Option<Box<SeqTables>>,
}

/// Query rows per attention block: longer sequences (long-context checks, thousands of
/// positions) are attended in blocks so the score matrix stays `heads × 1024 × n`; a sequence
/// of up to this many positions is one block, computed exactly as it always was.
pub(crate) const ATTN_ROWS: usize = 1024;

/// Causal softmax attention of `q`, `k`, `v` (`[heads, n, hd]` each) → `[heads, n, hd]`, in
/// blocks of [`ATTN_ROWS`] query rows; block `r0..r1` sees keys `0..r1` (later ones are masked
/// anyway).
pub(crate) fn attend(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    scale: f64,
    t: &SeqTables,
) -> Result<Tensor> {
    let n = q.dim(1)?;
    if n <= ATTN_ROWS {
        let scores = (q.matmul(&k.t()?)? * scale)?.broadcast_add(&t.mask_rows(0, n)?)?;
        let probs = candle_nn::ops::softmax(&scores, D::Minus1)?;
        return Ok(probs.matmul(v)?);
    }
    let mut blocks = Vec::with_capacity(n.div_ceil(ATTN_ROWS));
    for r0 in (0..n).step_by(ATTN_ROWS) {
        let r1 = (r0 + ATTN_ROWS).min(n);
        let qb = q.narrow(1, r0, r1 - r0)?.contiguous()?;
        let kb = k.narrow(1, 0, r1)?.contiguous()?;
        let vb = v.narrow(1, 0, r1)?.contiguous()?;
        let scores = (qb.matmul(&kb.t()?)? * scale)?.broadcast_add(&t.mask_rows(r0, r1)?)?;
        let probs = candle_nn::ops::softmax(&scores, D::Minus1)?;
        blocks.push(probs.matmul(&vb)?);
    }
    Ok(Tensor::cat(&blocks, 1)?)
}

/// Plain RoPE's inverse frequencies θ^(−2i/hd), i < hd/2.
fn plain_inv_freq(hd: usize, theta: f64) -> Vec<f32> {
    (0..hd / 2)
        .map(|i| (1.0 / theta.powf(2.0 * i as f64 / hd as f64)) as f32)
        .collect()
}

impl SeqTables {
    /// RoPE tables (angle[p, i] = p · θ^(−2i/hd), i < hd/2: HF's rotate-half layout) and the
    /// causal mask for positions 0..n; for gemma3 also those of its sliding-window layers.
    pub(crate) fn new(n: usize, cfg: &DecoderConfig) -> Result<SeqTables> {
        let inv = match (&cfg.rope_llama3, &cfg.longrope) {
            (Some(l), _) => l.inv_freq(),
            (None, Some(l)) => l.inv_freq(n),
            (None, None) => plain_inv_freq(cfg.rotary_dim, cfg.rope_theta),
        };
        let mut t = Self::with(n, &inv, cfg.window)?;
        if let Some(l) = &cfg.longrope {
            // transformers multiplies cos and sin by the attention factor (an f32 constant).
            let f = l.attention_factor as f32 as f64;
            (t.cos, t.sin) = ((&t.cos * f)?, (&t.sin * f)?);
        }
        if let Some(g) = &cfg.gemma {
            let inv = plain_inv_freq(cfg.head_dim, g.local_rope_theta);
            let local = Self::with(n, &inv, Some(g.window))?;
            t.local = Some(Box::new(local));
        }
        Ok(t)
    }

    /// The tables for inverse frequencies `inv` (head_dim/2 values); with `window`, position
    /// i sees only positions j with i − j < window (transformers' sliding-window causal mask).
    pub(crate) fn with(n: usize, inv: &[f32], window: Option<usize>) -> Result<SeqTables> {
        let dev = Device::Cpu;
        let inv = Tensor::new(inv, &dev)?.reshape((1, inv.len()))?;
        let pos = Tensor::arange(0u32, n as u32, &dev)?
            .to_dtype(DType::F32)?
            .reshape((n, 1))?;
        let angles = pos.broadcast_mul(&inv)?;
        Ok(SeqTables {
            cos: angles.cos()?,
            sin: angles.sin()?,
            window,
            local: None,
        })
    }

    /// The causal (and sliding-window) mask of query rows `r0..r1` over keys `0..r1`: 0 where
    /// the query sees the key, −∞ elsewhere.
    pub(crate) fn mask_rows(&self, r0: usize, r1: usize) -> Result<Tensor> {
        let w = self.window.unwrap_or(usize::MAX);
        let mask: Vec<f32> = (r0..r1)
            .flat_map(|i| {
                (0..r1).map(move |j| {
                    if j > i || i - j >= w {
                        f32::NEG_INFINITY
                    } else {
                        0.0
                    }
                })
            })
            .collect();
        Ok(Tensor::from_vec(mask, (r1 - r0, r1), &Device::Cpu)?)
    }
}
