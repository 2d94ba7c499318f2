//! LongRoPE (`rope_type = "longrope"`, formerly `"su"`: Phi-3-128k, Phi-3.5-mini, Phi-4-mini),
//! two ways:
//!
//! - [`LongRope::inv_freq`] and [`LongRope::attention_factor`]: what transformers rotates with
//!   (`modeling_rope_utils._compute_longrope_parameters`, transformers 5.24): over `dim =
//!   int(head_dim · partial_rotary_factor)` rotated dimensions, `inv_freq[i] = 1 / (ext[i] ·
//!   θ^(2i/dim))` with `ext` the `long_factor` when the sequence is longer than
//!   `original_max_position_embeddings` and the `short_factor` otherwise (Phi3's
//!   `dynamic_rope_update`, decided by the sequence length); cos and sin are multiplied by the
//!   attention factor, `attention_factor` if the dict has one, else `sqrt(1 + ln(f) /
//!   ln(original))` for `f = factor` (or `max_position_embeddings / original`) above 1, else 1.
//! - [`LongRope::rope_factors`]: the `rope_factors_long.weight` / `rope_factors_short.weight`
//!   F32 tensors llama.cpp's converter writes (`conversion/phi.py`,
//!   `Phi3MiniModel.generate_extra_tensors`, llama-cpp-python 0.3.36 sdist): each list's values
//!   as f32. llama.cpp divides rotation frequency i by element i and picks the long or the short
//!   tensor by the *context size* (`llama_model::get_rope_factors`: `n_ctx_seq >
//!   n_ctx_orig_yarn`), not the sequence length.
//!
//! Written apart from quantgate's converter (`source::rope`), which reads the same fields.

use serde_json::{Map, Value};

use crate::hf_config::{bad, field, Hparams};
use crate::Result;

/// The longrope settings of a config.
#[derive(Clone, Debug, PartialEq)]
pub struct LongRope {
    /// `rope_theta`.
    pub theta: f64,
    /// Rotated dimensions per head: `int(head_dim · partial_rotary_factor)`.
    pub rotary_dim: usize,
    /// `long_factor` (rotary_dim/2 values).
    pub long_factor: Vec<f64>,
    /// `short_factor` (rotary_dim/2 values).
    pub short_factor: Vec<f64>,
    /// `original_max_position_embeddings` (tokens).
    pub original_context: usize,
    /// Multiplier of cos and sin.
    pub attention_factor: f64,
}

/// A list of positive finite numbers at `at`.
fn factors(p: &Map<String, Value>, k: &str, at: &str, n: usize) -> Result<Vec<f64>> {
    let path = format!("{at}.{k}");
    let list = p.get(k).and_then(Value::as_array).ok_or_else(|| {
        bad(
            &path,
            "is missing or not a list (rope_type longrope needs it)".into(),
        )
    })?;
    let v: Vec<f64> = list
        .iter()
        .map(|x| x.as_f64().filter(|f| f.is_finite() && *f > 0.0))
        .collect::<Option<_>>()
        .ok_or_else(|| {
            bad(
                &path,
                "holds something other than positive finite numbers".into(),
            )
        })?;
    if v.len() != n {
        return Err(bad(
            &path,
            format!(
                "has {} values; the {} rotated dimensions need {}",
                v.len(),
                2 * n,
                n
            ),
        ));
    }
    Ok(v)
}

impl LongRope {
    /// The longrope settings of config `v` (`None` unless its RoPE type is `longrope` or `su`).
    /// Fields are read from the RoPE dict first, then the top level (transformers v5 moves
    /// `partial_rotary_factor` and `original_max_position_embeddings` into `rope_parameters`).
    ///
    /// Errors: a factor list missing, of the wrong length or with a non-positive value;
    /// `original_max_position_embeddings` or `max_position_embeddings` missing; each naming
    /// config.json and the field.
    pub fn from_config(v: &Value) -> Result<Option<LongRope>> {
        let hp = Hparams::from_config(v)?;
        if !matches!(hp.rope_type.as_str(), "longrope" | "su") {
            return Ok(None);
        }
        let p = &hp.rope_params;
        let at = match field(v, "rope_parameters") {
            Some(_) => "rope_parameters",
            None => "rope_scaling",
        };
        let num = |k: &str| p.get(k).or_else(|| field(v, k)).and_then(Value::as_f64);
        let int = |k: &str| {
            num(k)
                .filter(|x| *x >= 1.0 && x.fract() == 0.0)
                .ok_or_else(|| {
                    bad(
                        k,
                        "is missing or not a positive integer (rope_type longrope)".into(),
                    )
                })
        };
        let heads = int("num_attention_heads")?;
        let head_dim = match field(v, "head_dim").and_then(Value::as_f64) {
            Some(d) => d,
            None => (int("hidden_size")? / heads).floor(),
        };
        let partial = num("partial_rotary_factor").unwrap_or(1.0);
        let rotary_dim = (head_dim * partial) as usize;
        let original = int("original_max_position_embeddings")?;
        let factor = match p.get("factor").and_then(Value::as_f64) {
            Some(f) => f,
            None => int("max_position_embeddings")? / original,
        };
        let attention_factor = match p.get("attention_factor").and_then(Value::as_f64) {
            Some(a) => a,
            None if factor <= 1.0 => 1.0,
            None => (1.0 + factor.ln() / original.ln()).sqrt(),
        };
        Ok(Some(LongRope {
            theta: hp.rope_theta.0,
            rotary_dim,
            long_factor: factors(p, "long_factor", at, rotary_dim / 2)?,
            short_factor: factors(p, "short_factor", at, rotary_dim / 2)?,
            original_context: original as usize,
            attention_factor,
        }))
    }

    /// The inverse frequencies transformers rotates a sequence of `seq_len` tokens with
    /// (rotary_dim/2 values, f32 as torch computes them).
    pub fn inv_freq(&self, seq_len: usize) -> Vec<f32> {
        let ext = match seq_len > self.original_context {
            true => &self.long_factor,
            false => &self.short_factor,
        };
        let dim = self.rotary_dim as f32;
        let base = self.theta as f32;
        ext.iter()
            .enumerate()
            .map(|(i, e)| 1.0 / (*e as f32 * base.powf((2 * i) as f32 / dim)))
            .collect()
    }

    /// `(rope_factors_long, rope_factors_short)` as the converter stores them: each list's
    /// values rounded to f32 (`torch.tensor(list, dtype=torch.float32)`).
    pub fn rope_factors(&self) -> (Vec<f32>, Vec<f32>) {
        let f32s = |v: &[f64]| v.iter().map(|x| *x as f32).collect();
        (f32s(&self.long_factor), f32s(&self.short_factor))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn phi4_mini() -> Value {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../testdata/hf-configs/Phi-4-mini-instruct/config.json"
        );
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
    }

    #[test]
    fn phi_4_mini_settings_as_transformers_reads_them() {
        let l = LongRope::from_config(&phi4_mini()).unwrap().unwrap();
        assert_eq!((l.rotary_dim, l.original_context), (96, 4096));
        assert_eq!((l.long_factor.len(), l.long_factor[47]), (48, 47.77));
        // sqrt(1 + ln 32 / ln 4096) = sqrt(1 + 5/12).
        assert!((l.attention_factor - (17.0f64 / 12.0).sqrt()).abs() < 1e-15);
        let inv = l.inv_freq(4096);
        assert_eq!(inv[0], 1.0);
        assert!((inv[1] - 10000f32.powf(-2.0 / 96.0)).abs() < 1e-7);
        // One token past the original context switches to the long factors.
        assert!((l.inv_freq(4097)[47] * 47.77 - inv[47]).abs() < 1e-9);
        let (long, short) = l.rope_factors();
        assert_eq!((long[1], short[1]), (1.118_320_672_f64 as f32, 1.0));
    }

    #[test]
    fn bad_lists_and_other_types_are_named() {
        let mut c = phi4_mini();
        c["rope_scaling"]["short_factor"] = json!([1.0, 2.0]);
        let e = LongRope::from_config(&c).unwrap_err().to_string();
        assert!(e.contains("rope_scaling.short_factor: has 2 values"), "{e}");
        c["rope_scaling"]["short_factor"] = json!(null);
        let e = LongRope::from_config(&c).unwrap_err().to_string();
        assert!(e.contains("rope_scaling.short_factor"), "{e}");
        let plain = json!({"rope_theta": 10000.0});
        assert_eq!(LongRope::from_config(&plain).unwrap(), None);
    }
}
