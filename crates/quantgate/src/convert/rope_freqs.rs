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

use crate::source::rope::Llama3Rope;

/// GGUF name of the tensor (llama.cpp `LLM_TENSOR_ROPE_FREQS`).
pub const NAME: &str = "rope_freqs.weight";

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
