//! Gate 1's hyperparameter expectations derived without `convert`: from config.json through
//! the reference's own reading (`reference::hf_config`, the one the reference forward uses)
//! and plain integer fields. The converter's metadata is merged with them and every key both
//! derive must agree, so a field the converter misreads (e.g. a transformers v5 layout it does
//! not know) cannot be missing from the file and from the expectation at once.
//!
//! Which config field gives which GGUF key is llama.cpp's converter's rule
//! (`conversion/base.py` `set_gguf_parameters`; `docs/hf-config.md`).

use anyhow::Result;
use gguf::keys::{arch_key, llm};
use gguf::Value;
use reference::hf_config::field;
use serde_json::Value as Json;

use crate::source::arch::Arch;

/// The hyperparameter keys of architecture `a` that config.json implies.
///
/// Errors: a RoPE or epsilon field of the wrong type (from `reference::hf_config`).
pub fn hparams(config: &Json, a: Arch) -> Result<Vec<(String, Value)>> {
    let arch = a.gguf_name();
    let hp = reference::hf_config::Hparams::from_config(config)?;
    let mut out = Vec::new();
    let mut put = |tpl: &str, v: Value| out.push((arch_key(tpl, arch), v));
    let ints = [
        (llm::BLOCK_COUNT, "num_hidden_layers"),
        (llm::CONTEXT_LENGTH, "max_position_embeddings"),
        (llm::EMBEDDING_LENGTH, "hidden_size"),
        (llm::FEED_FORWARD_LENGTH, "intermediate_size"),
        (llm::HEAD_COUNT, "num_attention_heads"),
        (llm::HEAD_COUNT_KV, "num_key_value_heads"),
        (llm::KEY_LENGTH, "head_dim"),
        (llm::VALUE_LENGTH, "head_dim"),
    ];
    for (key, name) in ints {
        // llama.cpp's converter writes no key_length for phi3.
        if a == Arch::Phi3 && name == "head_dim" {
            continue;
        }
        if let Some(n) = field(config, name).and_then(Json::as_u64) {
            let n = if key == llm::CONTEXT_LENGTH {
                n.saturating_sub(xlmr_position_offset(config))
            } else {
                n
            };
            put(key, Value::U32(n as u32));
        }
    }
    // transformers' LlamaConfig sets head_dim = hidden_size // num_attention_heads when the
    // file has none, and llama.cpp's converter reads the config through it.
    let int = |k: &str| field(config, k).and_then(Json::as_u64);
    if a == Arch::Llama && int("head_dim").is_none() {
        if let (Some(h), Some(n)) = (
            int("hidden_size"),
            int("num_attention_heads").filter(|n| *n > 0),
        ) {
            put(llm::KEY_LENGTH, Value::U32((h / n) as u32));
            put(llm::VALUE_LENGTH, Value::U32((h / n) as u32));
        }
    }
    if a != Arch::Bert {
        // A RoPE model without a base in config.json: llama.cpp's default (10000) applies and
        // no key is written, as in the converter; the reference runs with transformers' own
        // default, which is the same value.
        if hp.rope_theta.1 != "default" {
            put(llm::ROPE_FREQ_BASE, Value::F32(hp.rope_theta.0 as f32));
        }
        if field(config, "rms_norm_eps").is_some() {
            put(llm::LAYERNORM_RMS_EPS, Value::F32(hp.rms_norm_eps as f32));
        }
        if matches!(hp.rope_type.as_str(), "linear" | "yarn") {
            put(llm::ROPE_SCALING_TYPE, Value::string(hp.rope_type.clone()));
            if let Some(f) = hp.rope_params.get("factor").and_then(Json::as_f64) {
                put(llm::ROPE_SCALING_FACTOR, Value::F32(f as f32));
            }
        }
    } else if field(config, "layer_norm_eps").is_some() {
        put(llm::LAYERNORM_EPS, Value::F32(hp.layer_norm_eps as f32));
    }
    if a == Arch::Qwen3Moe {
        // The peer's find_hparam(["num_local_experts", "num_experts"]): the v5 spelling first.
        let experts = int("num_local_experts").or_else(|| int("num_experts"));
        let moe = [
            (llm::EXPERT_COUNT, experts),
            (llm::EXPERT_USED_COUNT, int("num_experts_per_tok")),
            (
                llm::EXPERT_FEED_FORWARD_LENGTH,
                int("moe_intermediate_size"),
            ),
        ];
        for (key, n) in moe {
            if let Some(n) = n {
                put(key, Value::U32(n as u32));
            }
        }
    }
    if a == Arch::Phi3 {
        out.extend(
            phi3(config)?
                .into_iter()
                .map(|(k, v)| (arch_key(k, arch), v)),
        );
    }
    Ok(out)
}

/// XLM-RoBERTa's position offset read from config.json here, apart from the converter's table:
/// HF numbers positions from `pad_token_id + 1` (transformers `XLMRobertaEmbeddings`), and
/// llama.cpp's file starts its table there, so its context is shorter by as many rows.
fn xlmr_position_offset(config: &Json) -> u64 {
    match (
        field(config, "model_type").and_then(Json::as_str),
        field(config, "pad_token_id").and_then(Json::as_u64),
    ) {
        (Some("xlm-roberta"), Some(pad)) => pad + 1,
        _ => 0,
    }
}

/// phi3's own keys from config.json (`conversion/phi.py`): `rope.dimension_count =
/// int(partial_rotary_factor · hidden) // heads`, the original context, the sliding window (0
/// when null) and, for LongRoPE, transformers' attention factor (`reference::longrope`, which
/// convert refuses to differ from the converter's).
///
/// Errors: LongRoPE fields the reference cannot read.
fn phi3(config: &Json) -> Result<Vec<(&'static str, Value)>> {
    let int = |k: &str| field(config, k).and_then(Json::as_u64);
    let mut out = Vec::new();
    let rope = reference::longrope::LongRope::from_config(config)?;
    let params = reference::hf_config::Hparams::from_config(config)?.rope_params;
    let num = |k: &str| {
        params
            .get(k)
            .or_else(|| field(config, k))
            .and_then(Json::as_f64)
    };
    if let (Some(h), Some(n)) = (
        int("hidden_size"),
        int("num_attention_heads").filter(|n| *n > 0),
    ) {
        let dims = (num("partial_rotary_factor").unwrap_or(1.0) * h as f64) as u64 / n;
        out.push((llm::ROPE_DIMENSION_COUNT, Value::U32(dims as u32)));
    }
    if let Some(o) = num("original_max_position_embeddings") {
        out.push((llm::ROPE_SCALING_ORIG_CTX_LEN, Value::U32(o as u32)));
    }
    let window = int("sliding_window").unwrap_or(0);
    out.push((llm::SLIDING_WINDOW, Value::U32(window as u32)));
    if let Some(l) = rope {
        out.push((
            llm::ROPE_SCALING_ATTN_FACTOR,
            Value::F32(l.attention_factor as f32),
        ));
    }
    Ok(out)
}

/// Merges the independent expectations into the converter's: a key only the independent
/// reading gives is added, and where both give a key with different values the independent
/// value is expected. Returns a note for each disagreement.
pub fn merge(
    expected: &mut Vec<(String, Value)>,
    independent: Vec<(String, Value)>,
) -> Vec<String> {
    let mut notes = Vec::new();
    for (k, v) in independent {
        match expected.iter_mut().find(|(ek, _)| *ek == k) {
            Some((_, ev)) if *ev == v => {}
            Some((_, ev)) => {
                let (a, b) = brief_pair(ev, &v);
                notes.push(format!(
                    "{k}: convert's reading of the HF folder gives {a}, verify's own reading {b}; the file is compared with the latter"
                ));
                *ev = v;
            }
            None => {
                let (_, b) = brief_pair(&v, &v);
                notes.push(format!(
                    "{k}: implied by the HF folder (verify's own reading: {b}) but not by convert's reading"
                ));
                expected.push((k, v));
            }
        }
    }
    notes
}

/// Two values for a note: as they are, or for arrays their length and first difference
/// (a vocabulary would fill pages).
fn brief_pair(a: &Value, b: &Value) -> (String, String) {
    match (a, b) {
        (Value::Array(_, x), Value::Array(_, y)) => {
            let at = x.iter().zip(y).position(|(p, q)| p != q);
            let show = |v: &[Value]| match at.and_then(|i| v.get(i)) {
                Some(e) => format!("{} items, [{}] = {e:?}", v.len(), at.unwrap_or(0)),
                None => format!("{} items", v.len()),
            };
            (show(x), show(y))
        }
        _ => (format!("{a:?}"), format!("{b:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_key_the_converter_misses_is_still_expected() {
        // transformers v5 layout of a qwen2 config.
        let config = json!({"hidden_size": 896, "num_hidden_layers": 24, "rms_norm_eps": 1e-6,
            "rope_parameters": {"rope_theta": 1000000.0, "rope_type": "default"},
            "layer_types": ["full_attention"]});
        let ind = hparams(&config, Arch::Qwen2).unwrap();
        assert!(ind.contains(&("qwen2.rope.freq_base".into(), Value::F32(1e6))));
        // A converter that reads only v4's top-level rope_theta gives no freq_base.
        let mut from_converter: Vec<(String, Value)> = ind
            .iter()
            .filter(|(k, _)| k != "qwen2.rope.freq_base")
            .cloned()
            .collect();
        let notes = merge(&mut from_converter, ind);
        assert!(from_converter.contains(&("qwen2.rope.freq_base".into(), Value::F32(1e6))));
        assert_eq!(notes.len(), 1);
        assert!(notes[0].starts_with("qwen2.rope.freq_base"), "{notes:?}");
    }

    #[test]
    fn a_value_the_converter_misreads_is_replaced() {
        let config = json!({"rope_theta": 100000, "rms_norm_eps": 1e-5});
        let mut conv = vec![("llama.rope.freq_base".to_string(), Value::F32(10000.0))];
        let notes = merge(&mut conv, hparams(&config, Arch::Llama).unwrap());
        assert_eq!(conv[0].1, Value::F32(100000.0));
        assert!(notes[0].contains("the file is compared with the latter"));
    }

    #[test]
    fn array_notes_name_the_first_difference() {
        let a = Value::Array(gguf::ValueType::I32, vec![Value::I32(1), Value::I32(3)]);
        let b = Value::Array(gguf::ValueType::I32, vec![Value::I32(1), Value::I32(4)]);
        assert_eq!(
            brief_pair(&a, &b),
            (
                "2 items, [1] = I32(3)".to_string(),
                "2 items, [1] = I32(4)".to_string()
            )
        );
    }
}
