//! phi3's RoPE as llama.cpp's converter maps it (`conversion/phi.py`, `Phi3MiniModel`,
//! llama-cpp-python 0.3.36 sdist): `rope.dimension_count = int(partial_rotary_factor ·
//! hidden_size) // num_attention_heads`, `rope.scaling.original_context_length` from
//! `original_max_position_embeddings`, and for LongRoPE (`rope_type` `longrope` or its old name
//! `su`) two F32 tensors of `dimension_count / 2` factors, `rope_factors_long.weight` and
//! `rope_factors_short.weight`, with `rope.scaling.attn_factor = sqrt(1 + ln s / ln orig)` for
//! `s = max_position_embeddings / orig > 1` (else 1). Each field is read from the RoPE dict
//! first, then the top level (the converter's `rope_parameters` mirroring, `conversion/base.py`).
//!
//! transformers (`_compute_longrope_parameters`) scales by the dict's `factor` and
//! `attention_factor` when given; the converter ignores both, so a value that differs from the
//! converter's would make llama.cpp rotate differently and is refused.

use anyhow::{anyhow, Result};
use serde_json::{Map, Value};

/// LongRoPE's factor lists and attention factor.
#[derive(Clone, Debug, PartialEq)]
pub struct LongRope {
    /// `long_factor` (`dimension_count / 2` values).
    pub long_factor: Vec<f64>,
    /// `short_factor` (`dimension_count / 2` values).
    pub short_factor: Vec<f64>,
    /// `rope.scaling.attn_factor`.
    pub attn_factor: f64,
}

/// phi3's RoPE settings.
#[derive(Clone, Debug, PartialEq)]
pub struct Phi3Rope {
    /// `rope.dimension_count`: rotated dimensions per head.
    pub rope_dims: u64,
    /// `rope.scaling.original_context_length` (`original_max_position_embeddings`).
    pub original_context: u64,
    /// LongRoPE, `None` for plain RoPE.
    pub longrope: Option<LongRope>,
}

fn err(field: &str, what: impl std::fmt::Display) -> anyhow::Error {
    anyhow!("config.json: field {field} {what}")
}

/// A positive integer field of the dict `p` (at `path`) or the top level.
fn count(p: &Map<String, Value>, path: &str, config: &Value, k: &str) -> Result<u64> {
    let (v, at) = match p.get(k).filter(|v| !v.is_null()) {
        Some(v) => (Some(v), format!("{path}.{k}")),
        None => (config.get(k).filter(|v| !v.is_null()), k.to_string()),
    };
    let v = v.ok_or_else(|| err(&at, "is missing (phi3 needs it)"))?;
    v.as_u64()
        .filter(|n| (1..=u32::MAX as u64).contains(n))
        .ok_or_else(|| err(&at, format!("= {v}: not an integer from 1 to 2^32 − 1")))
}

/// One factor list: `n` positive numbers that stay finite as f32 (the tensors are F32).
fn factors(p: &Map<String, Value>, path: &str, k: &str, n: u64) -> Result<Vec<f64>> {
    let at = format!("{path}.{k}");
    let list = p.get(k).and_then(Value::as_array).ok_or_else(|| {
        err(
            &at,
            "is missing or not a list (rope type longrope needs it)",
        )
    })?;
    let v: Vec<f64> = list
        .iter()
        .map(|x| x.as_f64().filter(|f| *f > 0.0 && (*f as f32).is_finite()))
        .collect::<Option<_>>()
        .ok_or_else(|| {
            err(
                &at,
                "holds a value that is not a positive number an f32 holds",
            )
        })?;
    if v.len() as u64 != n {
        return Err(err(
            &at,
            format!(
                "has {} values; rope.dimension_count {} needs {n}",
                v.len(),
                2 * n
            ),
        ));
    }
    Ok(v)
}

/// A dict value transformers would use in place of the converter's `computed` one.
fn same_as(p: &Map<String, Value>, path: &str, k: &str, computed: f64) -> Result<()> {
    match p.get(k).filter(|v| !v.is_null()) {
        None => Ok(()),
        Some(v) if v.as_f64().is_some_and(|x| (x as f32) == (computed as f32)) => Ok(()),
        Some(v) => Err(err(
            &format!("{path}.{k}"),
            format!("= {v}: transformers uses it, llama.cpp's converter writes {computed} (from max_position_embeddings / original_max_position_embeddings); not supported"),
        )),
    }
}

/// phi3's RoPE settings from `config`, whose full-attention RoPE dict is `p` (at `path`) and
/// type `kind`.
///
/// Errors (naming config.json and the field): `original_max_position_embeddings`,
/// `max_position_embeddings`, `hidden_size` or `num_attention_heads` missing; an odd or zero
/// `dimension_count`; factor lists missing, of the wrong length or with a non-positive value; a
/// `factor` or `attention_factor` other than the converter's.
pub fn phi3(config: &Value, p: &Map<String, Value>, path: &str, kind: &str) -> Result<Phi3Rope> {
    let hidden = count(p, path, config, "hidden_size")?;
    let heads = count(p, path, config, "num_attention_heads")?;
    let partial = match p
        .get("partial_rotary_factor")
        .or_else(|| config.get("partial_rotary_factor"))
    {
        None | Some(Value::Null) => 1.0,
        Some(v) => v
            .as_f64()
            .filter(|x| *x > 0.0 && *x <= 1.0)
            .ok_or_else(|| {
                err(
                    "partial_rotary_factor",
                    format!("= {v}: not a number in (0, 1]"),
                )
            })?,
    };
    let rope_dims = (partial * hidden as f64) as u64 / heads;
    if rope_dims == 0 || rope_dims % 2 == 1 {
        return Err(err(
            "partial_rotary_factor",
            format!(
                "= {partial}: gives {rope_dims} rotated dimensions, not a positive even number"
            ),
        ));
    }
    let original = count(p, path, config, "original_max_position_embeddings")?;
    let longrope = match kind {
        "default" => None,
        "longrope" | "su" => {
            let scale = count(p, path, config, "max_position_embeddings")? as f64 / original as f64;
            let attn_factor = match scale > 1.0 {
                true => (1.0 + scale.ln() / (original as f64).ln()).sqrt(),
                false => 1.0,
            };
            same_as(p, path, "factor", scale)?;
            same_as(p, path, "attention_factor", attn_factor)?;
            Some(LongRope {
                long_factor: factors(p, path, "long_factor", rope_dims / 2)?,
                short_factor: factors(p, path, "short_factor", rope_dims / 2)?,
                attn_factor,
            })
        }
        other => {
            return Err(err(
                &format!("{path}.rope_type"),
                format!("is {other:?}: not supported for phi3 (default and longrope)"),
            ))
        }
    };
    Ok(Phi3Rope {
        rope_dims,
        original_context: original,
        longrope,
    })
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

    fn read(c: &Value) -> Result<Phi3Rope> {
        let p = c["rope_scaling"].as_object().cloned().unwrap_or_default();
        let kind = p.get("type").and_then(Value::as_str).unwrap_or("default");
        phi3(c, &p, "rope_scaling", kind)
    }

    #[test]
    fn phi_4_mini_maps_as_the_converter_writes_it() {
        let r = read(&phi4_mini()).unwrap();
        assert_eq!((r.rope_dims, r.original_context), (96, 4096));
        let l = r.longrope.unwrap();
        assert_eq!((l.long_factor.len(), l.short_factor[0]), (48, 1.0));
        // sqrt(1 + ln 32 / ln 4096) = sqrt(17/12); the peer wrote 1.1902381 (f32).
        assert_eq!(l.attn_factor as f32, 1.1902381f32);
    }

    #[test]
    fn fields_the_peer_would_ignore_or_reject_are_named() {
        let mut c = phi4_mini();
        c["rope_scaling"]["attention_factor"] = json!(1.0);
        let e = read(&c).unwrap_err().to_string();
        assert!(
            e.contains("field rope_scaling.attention_factor = 1.0"),
            "{e}"
        );
        let mut c = phi4_mini();
        c["rope_scaling"]["long_factor"] = json!([1.0, 2.0]);
        let e = read(&c).unwrap_err().to_string();
        assert!(e.contains("rope_scaling.long_factor has 2 values"), "{e}");
        let mut c = phi4_mini();
        c.as_object_mut()
            .unwrap()
            .remove("original_max_position_embeddings");
        let e = read(&c).unwrap_err().to_string();
        assert!(
            e.contains("field original_max_position_embeddings is missing"),
            "{e}"
        );
        let mut c = phi4_mini();
        c["partial_rotary_factor"] = json!(0.31);
        let e = read(&c).unwrap_err().to_string();
        assert!(
            e.contains("field partial_rotary_factor = 0.31: gives 39"),
            "{e}"
        );
    }
}
