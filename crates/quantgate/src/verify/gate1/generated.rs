//! Gate 1 for the tensors a conversion generates instead of copying from the source:
//! `rope_freqs.weight` of a Llama 3 RoPE config (`rope_type = "llama3"`), head_dim/2 F32
//! frequency divisors, and phi3's LongRoPE `rope_factors_{long,short}.weight`. The expectation
//! is the reference's own derivation from config.json (`reference::rope::Llama3::rope_freqs`,
//! `reference::longrope::LongRope::rope_factors`, llama.cpp's converter's formulas), never the
//! converter's output: a wrong factor, a missing tensor or a stray one are blockers.

use std::collections::BTreeMap;

use anyhow::Result;
use reference::hf_config::{field, Hparams};
use reference::rope::Llama3;
use serde_json::Value as Json;

use crate::source::arch::Arch;
use crate::source::hf::HfDir;

/// GGUF name of the Llama 3 frequency tensor (llama.cpp `LLM_TENSOR_ROPE_FREQS`).
pub const ROPE_FREQS: &str = "rope_freqs.weight";
/// GGUF names of LongRoPE's factor tensors (llama.cpp `LLM_TENSOR_ROPE_FACTORS_LONG`/`_SHORT`).
pub const ROPE_FACTORS_LONG: &str = "rope_factors_long.weight";
/// See [`ROPE_FACTORS_LONG`].
pub const ROPE_FACTORS_SHORT: &str = "rope_factors_short.weight";

/// One generated tensor as the file must hold it: F32 values, GGUF `ne`.
#[derive(Clone, Debug, PartialEq)]
pub struct Generated {
    /// `ne` (row length first).
    pub ne: Vec<i64>,
    /// The stored bytes (little-endian F32).
    pub bytes: Vec<u8>,
}

/// The generated tensors a conversion of `hf` as `a` must contain, by GGUF name (empty for
/// every config without Llama 3 RoPE, and for other architectures: llama.cpp applies
/// `rope_freqs` to llama only).
///
/// Errors: RoPE fields the reference cannot read (naming config.json and the field).
pub fn expected(hf: &HfDir, a: Arch) -> Result<BTreeMap<String, Generated>> {
    let mut out = BTreeMap::new();
    let hp = Hparams::from_config(&hf.config)?;
    if a == Arch::Phi3 {
        if let Some(l) = reference::longrope::LongRope::from_config(&hf.config)? {
            let (long, short) = l.rope_factors();
            out.insert(ROPE_FACTORS_LONG.to_string(), f32_tensor(&long));
            out.insert(ROPE_FACTORS_SHORT.to_string(), f32_tensor(&short));
        }
        return Ok(out);
    }
    if a != Arch::Llama || hp.rope_type != "llama3" {
        return Ok(out);
    }
    let int = |k: &str| field(&hf.config, k).and_then(Json::as_u64);
    let head_dim = int("head_dim")
        .or_else(|| Some(int("hidden_size")? / int("num_attention_heads").filter(|n| *n > 0)?))
        .unwrap_or(0) as usize;
    let at = match field(&hf.config, "rope_parameters") {
        Some(_) => "rope_parameters",
        None => "rope_scaling",
    };
    let l = Llama3::from_params(&hp.rope_params, at, hp.rope_theta.0, head_dim)?;
    out.insert(ROPE_FREQS.to_string(), f32_tensor(&l.rope_freqs()));
    Ok(out)
}

/// A 1-D F32 tensor of `values`.
fn f32_tensor(values: &[f32]) -> Generated {
    Generated {
        ne: vec![values.len() as i64],
        bytes: values.iter().flat_map(|v| v.to_le_bytes()).collect(),
    }
}
