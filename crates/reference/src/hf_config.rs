//! The reference's own reading of config.json: the fields that change the forward pass, in both
//! transformers generations, with transformers' defaults where a field is absent. Written apart
//! from quantgate's converter on purpose: a field the converter misreads must not be misread
//! the same way here (verify derives its expected GGUF hyperparameters from this reading).
//!
//! Sources (transformers 5.24): `PreTrainedConfig` merges `text_config`;
//! `RotaryEmbeddingConfigMixin.standardize_rope_params` (`modeling_rope_utils.py`) moves a v4
//! top-level `rope_theta`/`rope_scaling` into `rope_parameters`, one dict, or one per layer type
//! when its keys are among `layer_types`; `LlamaConfig`/`Qwen2Config`/`Qwen3Config` default
//! `rope_theta` to 10000.0 and `rms_norm_eps` to 1e-6; `BertConfig` defaults `layer_norm_eps` to
//! 1e-12.

use serde_json::Value;

use crate::{RefError, Result};

/// What the forward pass reads from config.json.
#[derive(Clone, Debug, PartialEq)]
pub struct Hparams {
    /// RoPE base of full-attention layers: (value, the field it came from or `default`).
    pub rope_theta: (f64, String),
    /// `rope_type` of full-attention layers (`default` when none).
    pub rope_type: String,
    /// The whole full-attention RoPE parameter dict (factor, original context, yarn fields).
    pub rope_params: serde_json::Map<String, Value>,
    /// RMSNorm epsilon (decoders).
    pub rms_norm_eps: f64,
    /// LayerNorm epsilon (BERT).
    pub layer_norm_eps: f64,
}

pub(crate) fn bad(field: &str, what: String) -> RefError {
    RefError::Unsupported(format!("config.json: field {field}: {what}"))
}

/// `key` from the top level or, when absent there, `text_config` (nulls count as absent), as
/// `PreTrainedConfig` merges a nested text config.
pub fn field<'a>(v: &'a Value, key: &str) -> Option<&'a Value> {
    let top = v.get(key).filter(|x| !x.is_null());
    top.or_else(|| v.get("text_config")?.get(key).filter(|x| !x.is_null()))
}

fn float(v: Option<&Value>, name: &str) -> Result<Option<f64>> {
    match v {
        None => Ok(None),
        Some(x) => x
            .as_f64()
            .map(Some)
            .ok_or_else(|| bad(name, format!("{x} is not a number"))),
    }
}

/// The full-attention RoPE dict and the name it is reported under.
fn full_attention(v: &Value) -> Result<(serde_json::Map<String, Value>, String)> {
    let Some((name, d)) = ["rope_parameters", "rope_scaling"]
        .iter()
        .find_map(|k| field(v, k).map(|d| (*k, d)))
    else {
        return Ok((Default::default(), String::new()));
    };
    let d = d
        .as_object()
        .ok_or_else(|| bad(name, format!("{d} is not an object")))?;
    let types: Vec<String> = match field(v, "layer_types").and_then(Value::as_array) {
        Some(a) => a
            .iter()
            .filter_map(|t| t.as_str().map(String::from))
            .collect(),
        None => vec!["full_attention".into(), "sliding_attention".into()],
    };
    if d.is_empty() || !d.keys().all(|k| types.contains(k)) {
        return Ok((d.clone(), name.to_string()));
    }
    let full = d
        .get("full_attention")
        .and_then(Value::as_object)
        .ok_or_else(|| {
            bad(
                name,
                "per-layer-type parameters without full_attention".into(),
            )
        })?;
    Ok((full.clone(), format!("{name}.full_attention")))
}

impl Hparams {
    /// Reads `v` (a parsed config.json).
    ///
    /// Errors: a RoPE or epsilon field that is not a number, a RoPE dict that is not an object.
    pub fn from_config(v: &Value) -> Result<Hparams> {
        let (params, at) = full_attention(v)?;
        let inner = |k: &str| format!("{at}.{k}");
        let rope_theta = match float(params.get("rope_theta"), &inner("rope_theta"))? {
            Some(t) => (t, inner("rope_theta")),
            None => match float(field(v, "rope_theta"), "rope_theta")? {
                Some(t) => (t, "rope_theta".into()),
                None => (10000.0, "default".into()),
            },
        };
        let rope_type = match params.get("rope_type").or_else(|| params.get("type")) {
            None | Some(Value::Null) => "default".to_string(),
            Some(Value::String(s)) => s.clone(),
            Some(x) => return Err(bad(&inner("rope_type"), format!("{x} is not a string"))),
        };
        Ok(Hparams {
            rope_theta,
            rope_type,
            rope_params: params,
            rms_norm_eps: float(field(v, "rms_norm_eps"), "rms_norm_eps")?.unwrap_or(1e-6),
            layer_norm_eps: float(field(v, "layer_norm_eps"), "layer_norm_eps")?.unwrap_or(1e-12),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn v4_v5_and_per_layer_type_layouts() {
        let v4 = json!({"rope_theta": 100000, "rope_scaling": null, "rms_norm_eps": 1e-5});
        let v5 = json!({"rope_parameters": {"rope_theta": 100000, "rope_type": "default"}, "rms_norm_eps": 1e-5});
        let gemma = json!({"layer_types": ["sliding_attention", "full_attention"],
            "rope_parameters": {"full_attention": {"rope_theta": 1e6, "rope_type": "default"},
                                "sliding_attention": {"rope_theta": 1e4, "rope_type": "default"}}});
        assert_eq!(
            Hparams::from_config(&v4).unwrap().rope_theta,
            (1e5, "rope_theta".into())
        );
        let h5 = Hparams::from_config(&v5).unwrap();
        assert_eq!(h5.rope_theta, (1e5, "rope_parameters.rope_theta".into()));
        assert_eq!(h5.rms_norm_eps, 1e-5);
        let g = Hparams::from_config(&gemma).unwrap();
        assert_eq!(g.rope_theta.0, 1e6);
        assert_eq!(
            Hparams::from_config(&json!({})).unwrap().rope_theta,
            (1e4, "default".into())
        );
        let e = Hparams::from_config(&json!({"rope_parameters": {"rope_theta": "x"}})).unwrap_err();
        assert!(e.to_string().contains("rope_parameters.rope_theta"), "{e}");
    }
}
