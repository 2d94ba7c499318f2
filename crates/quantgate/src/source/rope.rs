//! RoPE settings from config.json in both transformers generations (the converter's reading).
//!
//! - transformers v4: top-level `rope_theta` and `rope_scaling` (`{type|rope_type, factor, …}`
//!   or null).
//! - transformers v5 (`RotaryEmbeddingConfigMixin.standardize_rope_params`,
//!   `modeling_rope_utils.py`): `rope_parameters`, either flat (`{rope_type, rope_theta,
//!   factor, …}`) or one dict per layer type when its keys are among `layer_types`
//!   (`{full_attention: {…}, sliding_attention: {…}}`). `rope_theta` moved inside it.
//!
//! Values nested under `text_config` are read the same way. The mapping to GGUF follows
//! llama.cpp's converter (`conversion/base.py`, `set_gguf_parameters`): the full-attention
//! parameters give `rope.freq_base` and, for `linear`/`yarn`, `rope.scaling.*`. See
//! `docs/hf-config.md`.

use anyhow::{anyhow, Result};
use serde_json::{Map, Value};

/// A supported RoPE scaling (`{arch}.rope.scaling.*`).
#[derive(Clone, Debug, PartialEq)]
pub struct RopeScaling {
    /// gguf-py `RopeScalingType` name: `linear` or `yarn`.
    pub kind: &'static str,
    /// `factor`.
    pub factor: f64,
    /// yarn: `original_max_position_embeddings`.
    pub original_context: Option<u64>,
    /// yarn: `extrapolation_factor`, `attention_factor` (or `attn_factor`), `beta_fast`,
    /// `beta_slow`, each when given.
    pub yarn: [Option<f64>; 4],
}

/// Llama 3 frequency scaling (`rope_type = "llama3"`, Llama 3.1/3.2/3.3). GGUF has no keys for
/// it: llama.cpp's converter writes a `rope_freqs.weight` tensor instead
/// (`conversion/llama.py`, `generate_extra_tensors`; `convert::rope_freqs`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Llama3Rope {
    /// `factor`.
    pub factor: f64,
    /// `low_freq_factor`.
    pub low_freq_factor: f64,
    /// `high_freq_factor`.
    pub high_freq_factor: f64,
    /// `original_max_position_embeddings`.
    pub original_context: f64,
}

impl Llama3Rope {
    /// The low-frequency wavelength, `original_context / low_freq_factor` tokens (8192 for
    /// Llama 3.x): frequencies with a longer wavelength are divided by `factor`, so a wrong
    /// factor shows in attention over distances of this order (transformers
    /// `_compute_llama3_parameters`).
    pub fn low_freq_wavelength(&self) -> f64 {
        self.original_context / self.low_freq_factor
    }
}

/// The RoPE settings of a config.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Rope {
    /// `rope.freq_base` (full-attention layers); `None`: llama.cpp's default applies.
    pub freq_base: Option<f64>,
    /// Where `freq_base` was read (e.g. `rope_parameters.rope_theta`).
    pub freq_base_field: Option<String>,
    /// Scaling with GGUF keys, if any.
    pub scaling: Option<RopeScaling>,
    /// Llama 3 scaling (a `rope_freqs.weight` tensor, no keys), if any.
    pub llama3: Option<Llama3Rope>,
    /// The RoPE dict's `longrope`/`su` type (phi3's, read by [`super::longrope::phi3`]).
    pub longrope: bool,
}

/// `key` at the top level or under `text_config`.
fn get<'a>(config: &'a Value, key: &str) -> Option<&'a Value> {
    config
        .get(key)
        .filter(|v| !v.is_null())
        .or_else(|| config.get("text_config")?.get(key).filter(|v| !v.is_null()))
}

/// A number field, naming config.json and `path` when it holds something else.
fn number(v: Option<&Value>, path: &str) -> Result<Option<f64>> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => Ok(n.as_f64()),
        Some(other) => Err(anyhow!(
            "config.json: field {path} is {other}, not a number"
        )),
    }
}

/// The parameter dict that applies to full-attention layers, and its path for messages.
fn full_attention_params(config: &Value) -> Result<(Map<String, Value>, String)> {
    let (name, v) = match (get(config, "rope_parameters"), get(config, "rope_scaling")) {
        (Some(v), _) => ("rope_parameters", v),
        (None, Some(v)) => ("rope_scaling", v),
        (None, None) => return Ok((Map::new(), String::new())),
    };
    let Value::Object(m) = v else {
        return Err(anyhow!("config.json: field {name} is {v}, not an object"));
    };
    // Per layer type when every key is a layer type (standardize_rope_params' test); the
    // layer types transformers uses are full_attention and sliding_attention.
    let layer_types: Vec<&str> = match get(config, "layer_types") {
        Some(Value::Array(a)) => a.iter().filter_map(|t| t.as_str()).collect(),
        _ => vec!["full_attention", "sliding_attention"],
    };
    let per_layer = !m.is_empty() && m.keys().all(|k| layer_types.contains(&k.as_str()));
    if !per_layer {
        return Ok((m.clone(), name.to_string()));
    }
    match m.get("full_attention") {
        Some(Value::Object(f)) => Ok((f.clone(), format!("{name}.full_attention"))),
        Some(other) => Err(anyhow!(
            "config.json: field {name}.full_attention is {other}, not an object"
        )),
        None => Err(anyhow!(
            "config.json: field {name} has per-layer-type parameters without full_attention"
        )),
    }
}

/// `rope.freq_base_swa`, the base frequency of sliding-window layers: the v5
/// `rope_parameters.sliding_attention.rope_theta`, else the first of the v4 fields llama.cpp's
/// converter looks for (`local_rope_theta`, …, `rope_local_base_freq`; conversion/base.py
/// `TextModel.__init__`). `None` when the config has none.
///
/// Errors: such a field that is not a number (naming config.json and the field).
pub fn freq_base_swa(config: &Value) -> Result<Option<f64>> {
    let positive = |v: Option<f64>, path: &str| match v {
        Some(x) if !(x.is_finite() && x > 0.0) => Err(anyhow!(
            "config.json: field {path}: {x} must be a positive finite number"
        )),
        _ => Ok(v),
    };
    let params = get(config, "rope_parameters").or_else(|| get(config, "rope_scaling"));
    if let Some(Value::Object(m)) = params {
        if let Some(sw) = m.get("sliding_attention") {
            let path = "rope_parameters.sliding_attention";
            // GGUF has no scaling keys for the sliding layers: only plain RoPE can be written.
            match sw.get("rope_type").or_else(|| sw.get("type")) {
                None | Some(Value::Null) => {}
                Some(t) if t == "default" => {}
                Some(t) => {
                    return Err(anyhow!(
                        "config.json: field {path}.rope_type = {t}: not supported (GGUF has no RoPE scaling keys for sliding-window layers)"
                    ))
                }
            }
            let theta = number(sw.get("rope_theta"), &format!("{path}.rope_theta"))?;
            return positive(theta, &format!("{path}.rope_theta"));
        }
        if m.contains_key("full_attention") {
            return Ok(None);
        }
    }
    for k in [
        "local_rope_theta",
        "rope_local_theta",
        "rope_theta_local",
        "swa_rope_theta",
        "rope_local_base_freq",
    ] {
        if let Some(v) = number(get(config, k), k)? {
            return positive(Some(v), k);
        }
    }
    Ok(None)
}

#[cfg(test)]
mod swa_tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn sliding_layer_rope_is_plain_and_positive_or_an_error_naming_the_field() {
        assert_eq!(
            freq_base_swa(&json!({"rope_local_base_freq": 10000.0})).unwrap(),
            Some(10000.0)
        );
        let v5 = |sw: Value| json!({"rope_parameters": {"full_attention": {"rope_theta": 1e6}, "sliding_attention": sw}});
        assert_eq!(
            freq_base_swa(&v5(json!({"rope_type": "default", "rope_theta": 1e4}))).unwrap(),
            Some(1e4)
        );
        // Found by an attack on the converter: these converted silently.
        let e = freq_base_swa(&v5(
            json!({"rope_type": "linear", "factor": 4.0, "rope_theta": 1e4}),
        ))
        .unwrap_err();
        assert!(e.to_string().contains("sliding_attention.rope_type"), "{e}");
        for bad in [
            json!({"rope_local_base_freq": -10000.0}),
            json!({"rope_local_base_freq": 0}),
        ] {
            let e = freq_base_swa(&bad).unwrap_err();
            assert!(e.to_string().contains("field rope_local_base_freq"), "{e}");
        }
    }
}

/// Reads the RoPE settings of `config`.
///
/// Errors (naming config.json and the field): a field of the wrong type, a scaling type
/// llama.cpp's converter does not map to GGUF keys (`dynamic`), or one quantgate does not
/// convert (`longrope` needs its two factor tensors).
pub fn read(config: &Value) -> Result<Rope> {
    let (p, path) = full_attention_params(config)?;
    let at = |k: &str| format!("{path}.{k}");
    let mut rope = Rope::default();
    if let Some(t) = number(p.get("rope_theta"), &at("rope_theta"))? {
        rope.freq_base = Some(t);
        rope.freq_base_field = Some(at("rope_theta"));
    } else if let Some(t) = number(get(config, "rope_theta"), "rope_theta")? {
        rope.freq_base = Some(t);
        rope.freq_base_field = Some("rope_theta".into());
    }
    let kind = match p.get("rope_type").or_else(|| p.get("type")) {
        None | Some(Value::Null) => "default".to_string(),
        Some(Value::String(s)) => s.clone(),
        Some(other) => {
            return Err(anyhow!(
                "config.json: field {} is {other}, not a string",
                at("rope_type")
            ))
        }
    };
    if let (Some(t), Some(f)) = (rope.freq_base, &rope.freq_base_field) {
        positive_f32(t, f)?;
    }
    let factor = || -> Result<f64> {
        let f = number(p.get("factor"), &at("factor"))?.ok_or_else(|| {
            anyhow!(
                "config.json: field {} is missing for rope type {kind}",
                at("factor")
            )
        })?;
        positive_f32(f, &at("factor"))
    };
    rope.scaling = match kind.as_str() {
        "default" => None,
        "linear" => Some(RopeScaling {
            kind: "linear",
            factor: factor()?,
            original_context: None,
            yarn: [None; 4],
        }),
        "yarn" => {
            let orig = p
                .get("original_max_position_embeddings")
                .or_else(|| get(config, "original_max_position_embeddings"))
                .and_then(Value::as_u64)
                .ok_or_else(|| {
                    anyhow!(
                        "config.json: field {} is missing or not an integer for rope type yarn",
                        at("original_max_position_embeddings")
                    )
                })?;
            let attn = p.get("attention_factor").or_else(|| p.get("attn_factor"));
            Some(RopeScaling {
                kind: "yarn",
                factor: factor()?,
                original_context: Some(orig),
                yarn: [
                    finite_f32(p.get("extrapolation_factor"), &at("extrapolation_factor"))?,
                    finite_f32(attn, &at("attention_factor"))?,
                    finite_f32(p.get("beta_fast"), &at("beta_fast"))?,
                    finite_f32(p.get("beta_slow"), &at("beta_slow"))?,
                ],
            })
        }
        "llama3" => {
            rope.llama3 = Some(llama3(&p, &path)?);
            None
        }
        // Two factor tensors and attn_factor, for phi3 only (source::longrope).
        "longrope" | "su" => {
            rope.longrope = true;
            None
        }
        other => {
            return Err(anyhow!(
                "config.json: field {} is {other:?}: not supported (quantgate converts default, linear, yarn and llama3 RoPE)",
                at("rope_type")
            ))
        }
    };
    known_keys(&p, &kind, &path)?;
    Ok(rope)
}

/// phi3's RoPE settings ([`super::longrope::phi3`]) from `config`.
///
/// Errors: as [`super::longrope::phi3`], and a RoPE dict that is not an object.
pub fn phi3(config: &Value) -> Result<super::longrope::Phi3Rope> {
    let (p, path) = full_attention_params(config)?;
    let path = if path.is_empty() {
        "rope_scaling".to_string()
    } else {
        path
    };
    let kind = match p.get("rope_type").or_else(|| p.get("type")) {
        Some(Value::String(s)) => s.clone(),
        _ => "default".to_string(),
    };
    super::longrope::phi3(config, &p, &path, &kind)
}

/// The llama3 fields of parameter dict `p` (at `path`). transformers requires all four
/// (`_validate_llama3_parameters`), and so does this: llama.cpp's converter would silently
/// default a missing one (8, 1, 4, 8192) where transformers refuses the config.
///
/// Errors: a field missing or not a positive number an f32 holds, or
/// `high_freq_factor <= low_freq_factor` (the blend divides by their difference); each naming
/// config.json and the field.
fn llama3(p: &Map<String, Value>, path: &str) -> Result<Llama3Rope> {
    let field = |k: &str| -> Result<f64> {
        let at = format!("{path}.{k}");
        let x = number(p.get(k), &at)?
            .ok_or_else(|| anyhow!("config.json: field {at} is missing for rope type llama3"))?;
        positive_f32(x, &at)
    };
    let l = Llama3Rope {
        factor: field("factor")?,
        low_freq_factor: field("low_freq_factor")?,
        high_freq_factor: field("high_freq_factor")?,
        original_context: field("original_max_position_embeddings")?,
    };
    if l.high_freq_factor <= l.low_freq_factor {
        return Err(anyhow!(
            "config.json: field {path}.high_freq_factor: {} must be above low_freq_factor {}",
            l.high_freq_factor,
            l.low_freq_factor
        ));
    }
    Ok(l)
}

/// `x` if it is positive and stays finite and positive as the f32 the GGUF key holds.
///
/// Errors: naming config.json and `path`.
fn positive_f32(x: f64, path: &str) -> Result<f64> {
    if x > 0.0 && (x as f32).is_finite() && (x as f32) > 0.0 {
        Ok(x)
    } else {
        Err(anyhow!(
            "config.json: field {path}: {x} must be a positive number that an f32 holds (the GGUF key is f32)"
        ))
    }
}

/// A number field that must stay finite as an f32.
fn finite_f32(v: Option<&Value>, path: &str) -> Result<Option<f64>> {
    match number(v, path)? {
        Some(x) if !(x as f32).is_finite() => Err(anyhow!(
            "config.json: field {path}: {x} is not finite as the f32 the GGUF key holds"
        )),
        x => Ok(x),
    }
}

/// The keys a RoPE parameter dict of type `kind` may hold (transformers'
/// `modeling_rope_utils` `_validate_*_rope_parameters`, less those llama.cpp has no key for):
/// any other key (`mscale`, `truncate`, `low_freq_factor`, a typo) could change the rotation
/// and is an error naming it. `partial_rotary_factor` is accepted at 1.0 only.
fn known_keys(p: &Map<String, Value>, kind: &str, path: &str) -> Result<()> {
    let allowed: &[&str] = match kind {
        "linear" => &["factor"],
        "llama3" => &[
            "factor",
            "low_freq_factor",
            "high_freq_factor",
            "original_max_position_embeddings",
        ],
        "longrope" | "su" => &[
            "long_factor",
            "short_factor",
            "factor",
            "attention_factor",
            "original_max_position_embeddings",
            "partial_rotary_factor",
        ],
        "yarn" => &[
            "factor",
            "original_max_position_embeddings",
            "extrapolation_factor",
            "attention_factor",
            "attn_factor",
            "beta_fast",
            "beta_slow",
        ],
        _ => &[],
    };
    for (k, v) in p {
        let common = matches!(k.as_str(), "rope_type" | "type" | "rope_theta");
        let full_rotation = k == "partial_rotary_factor" && v.as_f64() == Some(1.0);
        if common || full_rotation || allowed.contains(&k.as_str()) || v.is_null() {
            continue;
        }
        return Err(anyhow!(
            "config.json: field {path}.{k} = {v}: not known for rope type {kind} and may change the rotation (docs/hf-config.md)"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn factors_must_be_positive_and_unknown_keys_are_named() {
        for f in [0.0, -2.0, 1e39] {
            let c = json!({"rope_scaling": {"type": "linear", "factor": f}});
            let e = read(&c).unwrap_err().to_string();
            assert!(e.contains("field rope_scaling.factor"), "{f}: {e}");
        }
        let c = json!({"rope_theta": 1e4, "rope_scaling": {"type": "linear", "factor": 2.0, "mscale": 0.7}});
        let e = read(&c).unwrap_err().to_string();
        assert!(e.contains("field rope_scaling.mscale = 0.7"), "{e}");
        let c = json!({"rope_parameters": {"rope_type": "default", "rope_theta": 1e39}});
        let e = read(&c).unwrap_err().to_string();
        assert!(e.contains("field rope_parameters.rope_theta"), "{e}");
        let c = json!({"rope_parameters": {"rope_type": "default", "rope_theta": 1e4, "partial_rotary_factor": 1.0}});
        assert_eq!(read(&c).unwrap().freq_base, Some(1e4));
        let c = json!({"rope_parameters": {"rope_type": "default", "rope_theta": 1e4, "partial_rotary_factor": 0.5}});
        assert!(read(&c).is_err());
    }

    #[test]
    fn both_generations_give_the_same_rope() {
        let v4 = json!({"rope_theta": 1000000.0, "rope_scaling": null});
        let v5 = json!({"rope_parameters": {"rope_theta": 1000000.0, "rope_type": "default"}});
        let per_layer = json!({"layer_types": ["sliding_attention", "full_attention"],
            "rope_parameters": {"full_attention": {"rope_theta": 1000000.0, "rope_type": "default"},
                                "sliding_attention": {"rope_theta": 10000.0, "rope_type": "default"}}});
        for c in [&v4, &v5, &per_layer] {
            assert_eq!(read(c).unwrap().freq_base, Some(1e6), "{c}");
        }
        assert_eq!(
            read(&v5).unwrap().freq_base_field.as_deref(),
            Some("rope_parameters.rope_theta")
        );
        assert_eq!(read(&json!({})).unwrap(), Rope::default());
    }

    #[test]
    fn scaling_types_map_or_are_refused_by_name() {
        let yarn = json!({"rope_parameters": {"rope_type": "yarn", "rope_theta": 1e6, "factor": 4.0,
            "original_max_position_embeddings": 32768, "beta_fast": 32.0}});
        let s = read(&yarn).unwrap().scaling.unwrap();
        assert_eq!(
            (s.kind, s.factor, s.original_context),
            ("yarn", 4.0, Some(32768))
        );
        assert_eq!(s.yarn, [None, None, Some(32.0), None]);
        let v4_linear =
            json!({"rope_theta": 1e4, "rope_scaling": {"type": "linear", "factor": 2.0}});
        assert_eq!(read(&v4_linear).unwrap().scaling.unwrap().kind, "linear");
        let e = read(&json!({"rope_scaling": {"rope_type": "llama3", "factor": 8.0}})).unwrap_err();
        assert!(
            e.to_string()
                .contains("field rope_scaling.low_freq_factor is missing for rope type llama3"),
            "{e}"
        );
        let e =
            read(&json!({"rope_scaling": {"rope_type": "dynamic", "factor": 8.0}})).unwrap_err();
        assert!(
            e.to_string()
                .contains("rope_scaling.rope_type is \"dynamic\""),
            "{e}"
        );
        let e = read(&json!({"rope_theta": "1e6"})).unwrap_err();
        assert!(
            e.to_string().contains("config.json: field rope_theta"),
            "{e}"
        );
    }
}
