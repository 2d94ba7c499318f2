//! Default sampling settings from generation_config.json, as llama.cpp's converter writes them
//! (gguf-py `Metadata.load` / `set_gguf_meta_model`: `general.sampling.*`). llama.cpp's tools
//! use them as defaults when a user gives none, so they are runtime settings, not provenance.

use std::path::Path;

use anyhow::{anyhow, Result};
use gguf::Value;
use serde_json::Value as Json;

/// (generation_config.json field, GGUF key, integer?) in gguf-py's order; `penalty_repeat`
/// falls back to transformers' `repetition_penalty`.
const FIELDS: &[(&str, &str, bool)] = &[
    ("top_k", "general.sampling.top_k", true),
    ("top_p", "general.sampling.top_p", false),
    ("min_p", "general.sampling.min_p", false),
    ("xtc_probability", "general.sampling.xtc_probability", false),
    ("xtc_threshold", "general.sampling.xtc_threshold", false),
    ("temperature", "general.sampling.temp", false),
    ("penalty_last_n", "general.sampling.penalty_last_n", true),
    ("penalty_repeat", "general.sampling.penalty_repeat", false),
    ("mirostat", "general.sampling.mirostat", true),
    ("mirostat_tau", "general.sampling.mirostat_tau", false),
    ("mirostat_eta", "general.sampling.mirostat_eta", false),
];

/// The `general.sampling.*` keys of `dir`'s generation_config.json (none when it is absent).
///
/// Errors: an unreadable file, or a field of the wrong type, naming the file and field.
pub fn sampling(dir: &Path) -> Result<Vec<(String, Value)>> {
    let p = dir.join("generation_config.json");
    if !crate::paths::present(&p)? {
        return Ok(Vec::new());
    }
    let g = super::hf::read_json(&p)?;
    let mut out = Vec::new();
    for (field, key, int) in FIELDS {
        let v = match g.get(*field) {
            None | Some(Json::Null) if *field == "penalty_repeat" => g.get("repetition_penalty"),
            v => v,
        };
        let Some(v) = v.filter(|v| !v.is_null()) else {
            continue;
        };
        let bad = || anyhow!("{}: field {field} is {v}, not a number", p.display());
        let value = if *int {
            Value::I32(
                v.as_i64()
                    .and_then(|x| i32::try_from(x).ok())
                    .ok_or_else(bad)?,
            )
        } else {
            Value::F32(v.as_f64().ok_or_else(bad)? as f32)
        };
        out.push((key.to_string(), value));
    }
    if let Some(seq) = g.get("sequence").and_then(Json::as_str) {
        out.insert(0, ("general.sampling.sequence".into(), Value::string(seq)));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qwen25_generation_config() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(
            d.path().join("generation_config.json"),
            r#"{"do_sample": true, "repetition_penalty": 1.1, "temperature": 0.7, "top_p": 0.8, "top_k": 20}"#,
        )
        .unwrap();
        let s = sampling(d.path()).unwrap();
        assert_eq!(
            s,
            vec![
                ("general.sampling.top_k".to_string(), Value::I32(20)),
                ("general.sampling.top_p".into(), Value::F32(0.8)),
                ("general.sampling.temp".into(), Value::F32(0.7)),
                ("general.sampling.penalty_repeat".into(), Value::F32(1.1)),
            ]
        );
        std::fs::write(
            d.path().join("generation_config.json"),
            r#"{"top_k": "20"}"#,
        )
        .unwrap();
        let e = sampling(d.path()).unwrap_err().to_string();
        assert!(e.contains("generation_config.json: field top_k"), "{e}");
    }
}
