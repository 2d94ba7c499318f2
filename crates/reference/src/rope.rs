//! Llama 3 RoPE frequency scaling (`rope_type = "llama3"`, Llama 3.1/3.2/3.3), two ways:
//!
//! - [`Llama3::inv_freq`]: the inverse frequencies transformers rotates with
//!   (`modeling_rope_utils._compute_llama3_parameters`), for the reference forward;
//! - [`Llama3::rope_freqs`]: the `rope_freqs.weight` tensor llama.cpp's converter writes
//!   (`conversion/llama.py`, `LlamaModel.generate_extra_tensors`, llama-cpp-python 0.3.36 sdist):
//!   head_dim/2 F32 divisors of each rotation frequency, 1 for wavelengths under
//!   `original_max_position_embeddings / high_freq_factor`, `factor` over
//!   `original_max_position_embeddings / low_freq_factor`, a smooth blend between. Gate 1
//!   compares the stored tensor with this value bit for bit.
//!
//! Both are computed in f32 with the operation order of their Python sources (torch float32
//! tensors; Python scalars enter as f32; `a / b` is a true division, `2π / x` a reciprocal times
//! 2π). Checked bit for bit against torch 2.14 / transformers 5.17 on the Llama 3.2-1B and 3.1-8B
//! settings and on non-power-of-two factors (tests below).

use serde_json::{Map, Value};

use crate::{hf_config::bad, Result};

/// The `llama3` parameters of a RoPE dict (`rope_scaling` or v5 `rope_parameters`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Llama3 {
    /// `rope_theta`.
    pub theta: f64,
    /// Rotated dimensions per head (`head_dim`).
    pub head_dim: usize,
    /// `factor` (8 for Llama 3.1, 32 for 3.2).
    pub factor: f64,
    /// `low_freq_factor` (1).
    pub low_freq_factor: f64,
    /// `high_freq_factor` (4).
    pub high_freq_factor: f64,
    /// `original_max_position_embeddings` (8192).
    pub original_context: f64,
}

impl Llama3 {
    /// Reads the four llama3 fields of `params` (transformers requires each; so does this),
    /// naming `path.field` in errors.
    ///
    /// Errors: a field missing, not a number, not finite and positive, or
    /// `high_freq_factor <= low_freq_factor` (the blend divides by their difference).
    pub fn from_params(
        params: &Map<String, Value>,
        path: &str,
        theta: f64,
        head_dim: usize,
    ) -> Result<Llama3> {
        let get = |k: &str| -> Result<f64> {
            let at = format!("{path}.{k}");
            match params.get(k) {
                Some(Value::Number(n)) => match n.as_f64() {
                    Some(x) if x.is_finite() && x > 0.0 => Ok(x),
                    _ => Err(bad(&at, format!("{n} is not a positive finite number"))),
                },
                Some(v) => Err(bad(&at, format!("{v} is not a number"))),
                None => Err(bad(&at, "is missing (rope_type llama3 needs it)".into())),
            }
        };
        let l = Llama3 {
            theta,
            head_dim,
            factor: get("factor")?,
            low_freq_factor: get("low_freq_factor")?,
            high_freq_factor: get("high_freq_factor")?,
            original_context: get("original_max_position_embeddings")?,
        };
        if l.high_freq_factor <= l.low_freq_factor {
            return Err(bad(
                &format!("{path}.high_freq_factor"),
                format!(
                    "{} is not above low_freq_factor {}",
                    l.high_freq_factor, l.low_freq_factor
                ),
            ));
        }
        Ok(l)
    }

    /// The unscaled inverse frequencies θ^(−2i/d), i < d/2, as torch computes them in f32.
    fn base_inv_freq(&self) -> Vec<f32> {
        let d = self.head_dim as f32;
        let base = self.theta as f32 as f64;
        (0..self.head_dim / 2)
            .map(|i| {
                let e = (2 * i) as f32 / d;
                1.0f32 / (base.powf(e as f64) as f32)
            })
            .collect()
    }

    /// `2π / x` as torch evaluates a Python scalar over a tensor: reciprocal, then times 2π.
    fn wavelen(inv: f32) -> f32 {
        (1.0f32 / inv) * (2.0 * std::f64::consts::PI) as f32
    }

    /// The wavelength bounds (`old / low_freq_factor`, `old / high_freq_factor`), f32.
    fn bounds(&self) -> (f32, f32) {
        (
            (self.original_context / self.low_freq_factor) as f32,
            (self.original_context / self.high_freq_factor) as f32,
        )
    }

    /// The smooth-blend weight of a wavelength: (old / λ − low) / (high − low).
    fn smooth(&self, wavelen: f32) -> f32 {
        let old = self.original_context as f32;
        ((1.0f32 / wavelen) * old - self.low_freq_factor as f32)
            / (self.high_freq_factor - self.low_freq_factor) as f32
    }

    /// transformers' scaled inverse frequencies, head_dim/2 values (rad per position).
    pub fn inv_freq(&self) -> Vec<f32> {
        let (low_wl, high_wl) = self.bounds();
        let factor = self.factor as f32;
        self.base_inv_freq()
            .into_iter()
            .map(|inv| {
                let wl = Self::wavelen(inv);
                let scaled = if wl > low_wl { inv / factor } else { inv };
                // transformers: ~(λ < high) * ~(λ > low); λ is finite and positive here.
                if wl >= high_wl && wl <= low_wl {
                    let s = self.smooth(wl);
                    (1.0 - s) * scaled / factor + s * scaled
                } else {
                    scaled
                }
            })
            .collect()
    }

    /// llama.cpp's converter's `rope_freqs.weight`: head_dim/2 F32 divisors.
    pub fn rope_freqs(&self) -> Vec<f32> {
        let (low_wl, high_wl) = self.bounds();
        let factor = self.factor as f32;
        self.base_inv_freq()
            .into_iter()
            .map(|inv| {
                let wl = Self::wavelen(inv);
                if wl < high_wl {
                    1.0
                } else if wl > low_wl {
                    factor
                } else {
                    let s = self.smooth(wl);
                    1.0 / ((1.0 - s) / factor + s)
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn l3(head_dim: usize, factor: f64, low: f64, high: f64, old: f64) -> Llama3 {
        let p = json!({"rope_type": "llama3", "factor": factor, "low_freq_factor": low,
            "high_freq_factor": high, "original_max_position_embeddings": old});
        Llama3::from_params(p.as_object().unwrap(), "rope_scaling", 500000.0, head_dim).unwrap()
    }

    fn bits(v: &[f32]) -> Vec<u32> {
        v.iter().map(|x| x.to_bits()).collect()
    }

    /// Values printed by torch 2.14: the peer's generate_extra_tensors code and transformers
    /// 5.17's ROPE_INIT_FUNCTIONS["llama3"] on testdata/hf-configs/Llama-3.2-1B-Instruct@4.47.1.
    #[test]
    fn llama_3_2_1b_equals_the_peer_and_transformers_bit_for_bit() {
        let l = l3(64, 32.0, 1.0, 4.0, 8192.0);
        let mut want = vec![0x3f800000u32; 15];
        want.extend([0x3fd35ec2, 0x4052b46f, 0x411aaaee]);
        want.extend([0x42000000; 14]);
        assert_eq!(bits(&l.rope_freqs()), want);
        let hf: [u32; 32] = [
            0x3f800000, 0x3f29e1c6, 0x3ee177bc, 0x3e959ee3, 0x3e4693b0, 0x3e03c6a0, 0x3daee4ad,
            0x3d681e67, 0x3d1a08c8, 0x3ccc6f49, 0x3c87a9c3, 0x3c340d6d, 0x3beef74f, 0x3b9e9402,
            0x3b527720, 0x3aa9279b, 0x39e13620, 0x38cb98f7, 0x37a3418d, 0x3758ac81, 0x370fc8f8,
            0x36bed4f4, 0x367d45c3, 0x3628126b, 0x35df10c4, 0x359406cb, 0x35447610, 0x35025f34,
            0x34ad07a7, 0x3465a54d, 0x341864a7, 0x33ca41b0,
        ];
        assert_eq!(bits(&l.inv_freq()), hf);
    }

    #[test]
    fn llama_3_1_8b_blend_equals_the_peer_bit_for_bit() {
        let f = l3(128, 8.0, 1.0, 4.0, 8192.0).rope_freqs();
        assert_eq!(f.len(), 64);
        assert!(f[..29].iter().all(|x| *x == 1.0) && f[36..].iter().all(|x| *x == 8.0));
        assert_eq!(
            bits(&f[29..36]),
            [0x3f9a8ed5, 0x3fc6d64a, 0x4001af1d, 0x402c732e, 0x406bcace, 0x40a83c06, 0x41000000]
        );
    }

    #[test]
    fn missing_or_inverted_fields_are_errors_naming_them() {
        let p = json!({"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0});
        let e = Llama3::from_params(p.as_object().unwrap(), "rope_scaling", 5e5, 128).unwrap_err();
        assert!(
            e.to_string()
                .contains("rope_scaling.original_max_position_embeddings"),
            "{e}"
        );
        let p = json!({"factor": 8.0, "low_freq_factor": 4.0, "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192});
        let e = Llama3::from_params(p.as_object().unwrap(), "rope_scaling", 5e5, 128).unwrap_err();
        assert!(
            e.to_string().contains("rope_scaling.high_freq_factor"),
            "{e}"
        );
    }
}
