//! Every config.json field accounted for, per architecture: nothing that could change
//! inference is dropped silently. A field is one of
//! - **read**: mapped to a GGUF key or cross-checked against the tensors (`metadata`,
//!   `consistency`, `rope`);
//! - **constrained**: llama.cpp runs the model the same way only for some values (e.g.
//!   `hidden_act` `silu` for llama); another value is an error;
//! - **inert**: cannot affect inference: training settings (dropout, initializer range),
//!   bookkeeping (versions, dtype of the checkpoint, label maps), and token ids that the
//!   tokenizer files decide;
//!
//! and any other field is an error naming config.json and the field. The lists are from
//! transformers 5.24's `PreTrainedConfig` and `LlamaConfig`/`Qwen2Config`/`Qwen3Config`/
//! `BertConfig`; see `docs/hf-config.md`.

use serde_json::Value;

use super::arch::Arch;

/// Fields that cannot change inference, for every architecture.
pub const INERT: &[&str] = &[
    "_name_or_path",
    "architectures",
    "auto_map",
    "transformers_version",
    "torch_dtype",
    "dtype",
    "use_cache",
    "initializer_range",
    "attention_dropout",
    "attention_probs_dropout_prob",
    "hidden_dropout_prob",
    "classifier_dropout",
    "gradient_checkpointing",
    "id2label",
    "label2id",
    "problem_type",
    "output_attentions",
    "output_hidden_states",
    "return_dict",
    "tokenizer_class",
    "bos_token_id",
    "eos_token_id",
    "pad_token_id",
    "sep_token_id",
    // Training-time tensor parallel degree; the forward is the same (LlamaConfig doc).
    "pretraining_tp",
    // Fields of other tools that transformers ignores.
    "transformers.js_config",
    "is_llama_config",
    "rope_interleaved",
];

/// Fields each architecture reads (mapped or checked against tensors).
fn read(a: Arch) -> &'static [&'static str] {
    match a {
        Arch::Bert => &[
            "model_type",
            "hidden_size",
            "num_hidden_layers",
            "num_attention_heads",
            "intermediate_size",
            "max_position_embeddings",
            "layer_norm_eps",
            "vocab_size",
            "type_vocab_size",
            // Ties the masked-LM head, which an embedding conversion does not include.
            "tie_word_embeddings",
        ],
        Arch::Llama | Arch::Qwen2 | Arch::Qwen3 => &[
            "model_type",
            "hidden_size",
            "num_hidden_layers",
            "num_attention_heads",
            "num_key_value_heads",
            "intermediate_size",
            "max_position_embeddings",
            "rms_norm_eps",
            "rope_theta",
            "rope_scaling",
            "rope_parameters",
            "head_dim",
            "vocab_size",
            "tie_word_embeddings",
            // The tensors decide: a bias present is converted, an absent one is not.
            "attention_bias",
            "mlp_bias",
            // Already-quantized checkpoints (convert::mlx).
            "quantization",
            "quantization_config",
            // Only used with use_sliding_window, which is constrained to false.
            "sliding_window",
            "max_window_layers",
        ],
    }
}

/// A constrained field's check: `None` when the value is one llama.cpp runs the same way.
fn constrained(a: Arch, key: &str, v: &Value) -> Option<Option<String>> {
    let want = |ok: bool, what: &str| Some((!ok).then(|| format!("{v} ({what})")));
    match (a, key) {
        (Arch::Bert, "hidden_act") => want(v == "gelu", "llama.cpp's BERT uses erf GELU"),
        (Arch::Bert, "is_decoder" | "add_cross_attention") => {
            want(v == false, "an encoder without cross-attention")
        }
        (Arch::Bert, "position_embedding_type") => want(
            v == "absolute",
            "llama.cpp's BERT has absolute positions only",
        ),
        (_, "hidden_act") => want(v == "silu", "llama.cpp's llama/qwen2/qwen3 use SiLU"),
        (_, "use_sliding_window") => want(
            v == false,
            "llama.cpp runs qwen2/qwen3 with full attention in every layer",
        ),
        (_, "layer_types") => want(
            v.as_array()
                .is_some_and(|l| l.iter().all(|t| t == "full_attention")),
            "every layer must be full_attention",
        ),
        _ => None,
    }
}

/// The problems with `config`'s fields for architecture `a` (top level and `text_config`):
/// each names the field. Empty when every field is read, inert or an allowed value.
pub fn check(config: &Value, a: Arch) -> Vec<String> {
    let mut problems = Vec::new();
    let levels = [
        ("", config.as_object()),
        ("text_config.", config["text_config"].as_object()),
    ];
    for (prefix, obj) in levels {
        for (k, v) in obj.into_iter().flatten() {
            if k == "text_config" || INERT.contains(&k.as_str()) || read(a).contains(&k.as_str()) {
                continue;
            }
            match constrained(a, k, v) {
                Some(None) => {}
                Some(Some(why)) => problems.push(format!(
                    "config.json: field {prefix}{k} = {why}: not supported"
                )),
                None if v.is_null() => {}
                None => problems.push(format!(
                    "config.json: field {prefix}{k} is not known for {} and may change inference (docs/hf-config.md lists the fields quantgate accounts for)",
                    a.gguf_name()
                )),
            }
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_fixture_field_is_accounted_for_and_others_are_named() {
        let smol = json!({"architectures": ["LlamaForCausalLM"], "hidden_act": "silu",
            "rope_interleaved": false, "pretraining_tp": 1, "rope_scaling": null,
            "transformers.js_config": {}, "dtype": "bfloat16"});
        assert!(check(&smol, Arch::Llama).is_empty());
        let bad = json!({"hidden_act": "gelu_pytorch_tanh", "use_sliding_window": true,
            "attn_logit_softcapping": 50.0, "final_logit_softcapping": null});
        let p = check(&bad, Arch::Qwen2);
        assert_eq!(p.len(), 3, "{p:?}");
        assert!(p
            .iter()
            .any(|m| m.contains("field attn_logit_softcapping is not known")));
        assert!(p
            .iter()
            .any(|m| m.contains("field hidden_act = \"gelu_pytorch_tanh\"")));
        let v5 = json!({"layer_types": ["full_attention", "sliding_attention"]});
        assert!(check(&v5, Arch::Qwen3)[0].contains("layer_types"));
    }
}
