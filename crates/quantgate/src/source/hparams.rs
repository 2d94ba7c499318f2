//! The hyperparameters each architecture's conversion reads from config.json, with their JSON
//! types and ranges: counts fit the u32 GGUF keys, epsilons and bases are positive finite f32.
//! A field may sit at the top level or under `text_config` (gemma3's nested config).

use std::collections::HashMap;

use serde_json::Value;

use super::arch::Arch;

/// The value of config.json's `key`: top level, or under `text_config` (gemma3's nested
/// config), as `HfDir::config_u64` reads it; `None` when absent or null.
pub fn raw<'a>(config: &'a Value, key: &str) -> Option<&'a Value> {
    config
        .get(key)
        .filter(|v| !v.is_null())
        .or_else(|| config["text_config"].get(key).filter(|v| !v.is_null()))
}

/// A config.json field and what it must be.
#[derive(Clone, Copy)]
enum Field {
    /// A count: an integer ≥ 1 that fits the u32 GGUF key.
    Count(&'static str),
    /// A positive finite number.
    Positive(&'static str),
}

/// The fields each architecture's conversion reads (required ones first).
fn fields(a: Arch) -> (&'static [Field], &'static [Field]) {
    use Field::*;
    match a {
        Arch::Bert => (
            &[
                Count("num_hidden_layers"),
                Count("hidden_size"),
                Count("num_attention_heads"),
                Count("intermediate_size"),
                // llama.cpp requires {arch}.attention.layer_norm_epsilon (no default).
                Positive("layer_norm_eps"),
            ],
            &[
                Count("max_position_embeddings"),
                Count("vocab_size"),
                Count("type_vocab_size"),
            ],
        ),
        Arch::Qwen3Moe => (
            &[
                Count("num_hidden_layers"),
                Count("hidden_size"),
                Count("num_attention_heads"),
                Count("num_experts_per_tok"),
                Count("moe_intermediate_size"),
                Positive("rms_norm_eps"),
            ],
            &[
                Count("num_key_value_heads"),
                Count("max_position_embeddings"),
                Count("vocab_size"),
                Count("head_dim"),
                Count("intermediate_size"),
                Count("num_experts"),
                Count("num_local_experts"),
                Positive("rope_theta"),
            ],
        ),
        Arch::Phi3 => (
            &[
                Count("num_hidden_layers"),
                Count("hidden_size"),
                Count("num_attention_heads"),
                Count("intermediate_size"),
                Positive("rms_norm_eps"),
                // The converter's find_hparam raises without it (phi3.context_length).
                Count("max_position_embeddings"),
            ],
            &[
                Count("num_key_value_heads"),
                Count("vocab_size"),
                Count("head_dim"),
                Count("original_max_position_embeddings"),
                Positive("rope_theta"),
                Positive("partial_rotary_factor"),
            ],
        ),
        Arch::Llama | Arch::Qwen2 | Arch::Qwen3 | Arch::Gemma3 => (
            &[
                Count("num_hidden_layers"),
                Count("hidden_size"),
                Count("num_attention_heads"),
                Count("intermediate_size"),
                // llama.cpp requires {arch}.attention.layer_norm_rms_epsilon (no default).
                Positive("rms_norm_eps"),
            ],
            &[
                Count("num_key_value_heads"),
                Count("max_position_embeddings"),
                Count("vocab_size"),
                Count("head_dim"),
                Positive("rope_theta"),
            ],
        ),
    }
}

/// Checks one field's type and range; `None` when it is absent.
fn read(config: &Value, f: Field) -> Result<Option<f64>, String> {
    let (key, v) = match f {
        Field::Count(k) | Field::Positive(k) => (k, raw(config, k)),
    };
    let Some(v) = v else { return Ok(None) };
    let bad = |what: &str| Err(format!("config.json: field {key}: {v} {what}"));
    match f {
        Field::Count(_) => match v.as_u64() {
            Some(0) => bad("must be at least 1"),
            Some(n) if n > u32::MAX as u64 => bad("does not fit the u32 GGUF key"),
            Some(n) => Ok(Some(n as f64)),
            None => bad("is not a non-negative integer"),
        },
        Field::Positive(_) => match v.as_f64() {
            // Stored as f32: 1e300 would become inf and 1e-50 zero.
            Some(x) if x > 0.0 && (x as f32).is_finite() && (x as f32) > 0.0 => Ok(Some(x)),
            Some(_) => bad("must be a positive number that an f32 holds (the GGUF key is f32)"),
            None => bad("is not a number"),
        },
    }
}

/// Every problem of config.json's fields, and their values.
pub(crate) fn read_fields(config: &Value, a: Arch) -> (HashMap<&'static str, u64>, Vec<String>) {
    let (required, optional) = fields(a);
    let mut values = HashMap::new();
    let mut problems = Vec::new();
    for (f, needed) in required
        .iter()
        .map(|f| (f, true))
        .chain(optional.iter().map(|f| (f, false)))
    {
        let (Field::Count(key) | Field::Positive(key)) = *f;
        match read(config, *f) {
            Ok(Some(x)) => {
                if matches!(f, Field::Count(_)) {
                    values.insert(key, x as u64);
                }
            }
            Ok(None) if needed => problems.push(format!("config.json: field {key} is missing")),
            Ok(None) => {}
            Err(e) => problems.push(e),
        }
    }
    (values, problems)
}
