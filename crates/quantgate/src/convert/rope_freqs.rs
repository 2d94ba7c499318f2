//! `rope_freqs.weight`, the tensor llama.cpp's converter writes for Llama 3 RoPE scaling
//! (`rope_type = "llama3"`; `conversion/llama.py` `LlamaModel.generate_extra_tensors`,
//! llama-cpp-python 0.3.36 sdist). llama.cpp divides rotation frequency i by element i
//! (`ggml_rope_ext`'s freq_factors; `llama-model.cpp` loads it as `LLM_TENSOR_ROPE_FREQS`).
//!
//! Element i of head_dim/2, for the base frequency f_i = 1 / θ^(2i/d) and its wavelength
//! λ = 2π / f_i: 1 when λ < old / high_freq_factor, `factor` when λ > old / low_freq_factor,
//! else 1 / ((1 − s) / factor + s) with s = (old / λ − low_freq_factor) / (high_freq_factor −
//! low_freq_factor), old = original_max_position_embeddings. The peer evaluates this on torch
//! float32 scalars, so every step here is an f32 operation in the same order (θ^e as the f64
//! power of the f32 operands, rounded once; `2π / x` as torch's reciprocal times 2π).
//! Gate 1 checks the result against the reference's own derivation (`reference::rope`).

use anyhow::{anyhow, bail, Result};
use gguf::GgmlType;

use super::PlannedTensor;
use crate::source::arch::Arch;
use crate::source::hf::HfDir;
use crate::source::longrope::LongRope;
use crate::source::rope::{self, Llama3Rope};

/// GGUF name of the tensor (llama.cpp `LLM_TENSOR_ROPE_FREQS`).
pub const NAME: &str = "rope_freqs.weight";

/// GGUF names of LongRoPE's factor tensors (llama.cpp `LLM_TENSOR_ROPE_FACTORS_LONG`,
/// `_SHORT`), written long first (`Phi3MiniModel.generate_extra_tensors`).
pub const LONG: &str = "rope_factors_long.weight";
/// See [`LONG`].
pub const SHORT: &str = "rope_factors_short.weight";

/// The tensors a conversion generates instead of copying, in the peer's order:
/// `rope_freqs.weight` for Llama 3 RoPE, LongRoPE's two factor tensors for phi3.
///
/// Errors: RoPE fields that cannot be read; llama3 RoPE on another architecture than llama,
/// LongRoPE on another than phi3 (llama.cpp applies them there only); see
/// [`llama3_rope_freqs`].
pub fn generated(hf: &HfDir, arch: Arch) -> Result<Vec<(PlannedTensor, Vec<f32>)>> {
    let r = rope::read(&hf.config)?;
    if r.longrope && arch != Arch::Phi3 {
        bail!(
            "{}: config.json: rope type longrope with architecture {}: llama.cpp reads LongRoPE factors for phi3 only",
            hf.dir.display(),
            arch.gguf_name()
        );
    }
    if arch == Arch::Phi3 {
        let Some(l) = rope::phi3(&hf.config)?.longrope else {
            return Ok(Vec::new());
        };
        return Ok(longrope_tensors(&l));
    }
    Ok(llama3_rope_freqs(hf, arch)?.into_iter().collect())
}

/// LongRoPE's `(long, short)` tensors: each list's values as f32
/// (`torch.tensor(list, dtype=torch.float32)` in the peer).
fn longrope_tensors(l: &LongRope) -> Vec<(PlannedTensor, Vec<f32>)> {
    [
        (LONG, &l.long_factor, "long_factor"),
        (SHORT, &l.short_factor, "short_factor"),
    ]
    .into_iter()
    .map(|(name, v, field)| {
        let values: Vec<f32> = v.iter().map(|x| *x as f32).collect();
        (generated_entry(name, values.len(), field), values)
    })
    .collect()
}

/// The plan entry of a generated F32 tensor of `n` values named `name`, from `field`.
fn generated_entry(name: &str, n: usize, field: &str) -> PlannedTensor {
    PlannedTensor {
        hf_name: format!("(generated from rope {field})"),
        gguf_name: name.into(),
        ggml_type: GgmlType::F32.to_string(),
        ne: vec![n as u64],
        rule: format!("generated: RoPE {field}, F32"),
        permute_heads: None,
        shift: 0.0,
        experts: Vec::new(),
        skip_rows: 0,
    }
}

/// The head_dim/2 factors for RoPE base `theta` (`rope_theta`) and `head_dim` rotated
/// dimensions.
pub fn factors(l: &Llama3Rope, theta: f64, head_dim: usize) -> Vec<f32> {
    let d = head_dim as f32;
    let base = theta as f32 as f64;
    let factor = l.factor as f32;
    let old = l.original_context as f32;
    let long = (l.original_context / l.low_freq_factor) as f32;
    let short = (l.original_context / l.high_freq_factor) as f32;
    let two_pi = std::f64::consts::TAU as f32;
    (0..head_dim)
        .step_by(2)
        .map(|i| {
            let f = 1.0f32 / (base.powf((i as f32 / d) as f64) as f32);
            let wavelen = (1.0f32 / f) * two_pi;
            if wavelen < short {
                1.0
            } else if wavelen > long {
                factor
            } else {
                let s = ((1.0f32 / wavelen) * old - l.low_freq_factor as f32)
                    / (l.high_freq_factor - l.low_freq_factor) as f32;
                1.0 / ((1.0 - s) / factor + s)
            }
        })
        .collect()
}

/// The `rope_freqs.weight` entry and values of a Llama 3 RoPE config ([`rope_freqs`]), `None`
/// for every other RoPE.
///
/// Errors: RoPE fields that cannot be read ([`rope::read`]); llama3 RoPE on another
/// architecture than llama; no head_dim and no hidden_size / num_attention_heads to derive it
/// from (naming config.json).
pub fn llama3_rope_freqs(hf: &HfDir, arch: Arch) -> Result<Option<(PlannedTensor, Vec<f32>)>> {
    let r = rope::read(&hf.config)?;
    let Some(l) = r.llama3 else {
        return Ok(None);
    };
    // llama.cpp loads rope_freqs for llama (and its converter writes it for llama only).
    if arch != Arch::Llama {
        bail!(
            "{}: config.json: rope type llama3 with architecture {}: llama.cpp applies llama3 RoPE scaling to llama only",
            hf.dir.display(),
            arch.gguf_name()
        );
    }
    let head_dim = hf
        .config_u64("head_dim")
        .or_else(|| {
            let heads = hf.config_u64("num_attention_heads").filter(|h| *h > 0)?;
            Some(hf.config_u64("hidden_size")? / heads)
        })
        .filter(|d| *d >= 2 && d % 2 == 0)
        .ok_or_else(|| {
            anyhow!(
                "{}: config.json: field head_dim (or hidden_size / num_attention_heads) is missing or odd; rope type llama3 needs it",
                hf.dir.display()
            )
        })?;
    // transformers' default base, which the converter also uses (`rope_theta` 10000.0).
    let theta = r.freq_base.unwrap_or(10000.0);
    let values = factors(&l, theta, head_dim as usize);
    let p = PlannedTensor {
        hf_name: "(generated from rope_scaling llama3)".into(),
        gguf_name: NAME.into(),
        ggml_type: GgmlType::F32.to_string(),
        ne: vec![values.len() as u64],
        rule: "generated: llama3 RoPE frequency factors, F32".into(),
        permute_heads: None,
        shift: 0.0,
        experts: Vec::new(),
        skip_rows: 0,
    };
    Ok(Some((p, values)))
}

/// Little-endian F32 bytes of `x`, as the tensor is stored.
pub fn bytes(x: &[f32]) -> Vec<u8> {
    x.iter().flat_map(|v| v.to_le_bytes()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// convert_hf_to_gguf.py's values for Llama 3.2-1B (head_dim 64, θ 500000, factor 32) as
    /// torch 2.14 printed them: 15 × 1, a blend of three, 14 × 32.
    #[test]
    fn llama_3_2_1b_factors_equal_the_peers() {
        let l = Llama3Rope {
            factor: 32.0,
            low_freq_factor: 1.0,
            high_freq_factor: 4.0,
            original_context: 8192.0,
        };
        let f = factors(&l, 500000.0, 64);
        let bits: Vec<u32> = f.iter().map(|x| x.to_bits()).collect();
        let mut want = vec![0x3f800000u32; 15];
        want.extend([0x3fd35ec2, 0x4052b46f, 0x411aaaee]);
        want.extend([0x42000000; 14]);
        assert_eq!(bits, want);
        assert_eq!(bytes(&f[..1]), [0, 0, 0x80, 0x3f]);
    }
}
