//! phi3's differences (transformers `modeling_phi3.py`, `Phi3ForCausalLM`): fused
//! `qkv_proj` and `gate_up_proj` projections, RoPE on the first `partial_rotary_factor` share
//! of each head (LongRoPE in `crate::longrope`), and the sliding window it masks to.

use candle_core::{Tensor, D};
use candle_nn::{Linear, VarBuilder};

use super::attention::SeqTables;
use crate::{RefError, Result};

/// phi3's rotated dimensions (`int(head_dim · partial_rotary_factor)`, the factor read from
/// the RoPE dict or the top level) and sliding window (`sliding_window`, which transformers'
/// Phi3 applies to every layer when set).
pub(super) fn phi3_rotation(
    v: &serde_json::Value,
    hp: &crate::hf_config::Hparams,
    head_dim: usize,
) -> Result<(usize, Option<usize>)> {
    let partial = hp
        .rope_params
        .get("partial_rotary_factor")
        .or_else(|| crate::hf_config::field(v, "partial_rotary_factor"))
        .and_then(|x| x.as_f64())
        .unwrap_or(1.0);
    let rot = (head_dim as f64 * partial) as usize;
    if rot == 0 || rot % 2 == 1 || rot > head_dim {
        return Err(RefError::Unsupported(format!(
            "config.json: field partial_rotary_factor = {partial}: {rot} rotated dimensions of {head_dim}"
        )));
    }
    let window = crate::hf_config::field(v, "sliding_window")
        .and_then(|x| x.as_u64())
        .map(|w| w as usize);
    Ok((rot, window))
}

/// phi3's fused `qkv_proj.weight` (`[q + 2·kv, h]`, the query rows, then the key rows, then the
/// value rows) as three projections.
pub(super) fn fused_qkv(
    a: &VarBuilder,
    h: usize,
    (nq, nkv): (usize, usize),
) -> Result<(Linear, Linear, Linear)> {
    let w = a.get((nq + 2 * nkv, h), "qkv_proj.weight")?;
    Ok((
        Linear::new(w.narrow(0, 0, nq)?, None),
        Linear::new(w.narrow(0, nq, nkv)?, None),
        Linear::new(w.narrow(0, nq + nkv, nkv)?, None),
    ))
}

/// HF's rotate-half RoPE of `x` (`[1, heads, n, hd]`) on its first `rot` dimensions; the rest
/// pass through (transformers' partial rotary: `cat(rotate(x[..rot]), x[rot..])`).
pub(super) fn rotate(x: &Tensor, t: &SeqTables, rot: usize) -> Result<Tensor> {
    let x = x.contiguous()?;
    let hd = x.dim(D::Minus1)?;
    if rot == hd {
        return Ok(candle_nn::rotary_emb::rope(&x, &t.cos, &t.sin)?);
    }
    let r = x.narrow(D::Minus1, 0, rot)?.contiguous()?;
    let r = candle_nn::rotary_emb::rope(&r, &t.cos, &t.sin)?;
    Ok(Tensor::cat(
        &[r, x.narrow(D::Minus1, rot, hd - rot)?],
        D::Minus1,
    )?)
}
