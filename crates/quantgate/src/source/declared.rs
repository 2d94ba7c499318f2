//! The tensors config.json declares by flags (`tie_word_embeddings`, `attention_bias`,
//! `mlp_bias`), against the tensors a checkpoint has. Both convert (before writing) and verify
//! (on the HF folder, so a file made from a folder that disagrees with itself is never GO) ask.

use serde_json::Value;

use super::arch::Arch;
use super::hparams::raw;

/// A decoder declared untied (`tie_word_embeddings` false) must bring its own output matrix:
/// without `lm_head.weight` transformers initialises one at random, while llama.cpp would reuse
/// `token_embd` — two different models.
fn untied_without_output(
    config: &Value,
    a: Arch,
    has: &dyn Fn(&str) -> bool,
    problems: &mut Vec<String>,
) {
    let tied = match raw(config, "tie_word_embeddings") {
        Some(Value::Bool(b)) => *b,
        Some(v) => {
            problems.push(format!(
                "config.json: field tie_word_embeddings: {v} is not a boolean"
            ));
            return;
        }
        None => tied_by_default(a),
    };
    if a != Arch::Bert && !tied && !has("output.weight") {
        let why = if raw(config, "tie_word_embeddings").is_some() {
            "= false"
        } else {
            "is absent, which transformers reads as false for this architecture"
        };
        problems.push(format!(
            "config.json: field tie_word_embeddings {why}, but the checkpoint has no lm_head.weight"
        ));
    }
}

/// transformers' default of `tie_word_embeddings` when config.json omits it: `LlamaConfig`,
/// `Qwen2Config` and `Qwen3Config` default to false, `Gemma3TextConfig` to true.
fn tied_by_default(a: Arch) -> bool {
    matches!(a, Arch::Gemma3 | Arch::Bert)
}

/// The bias tensors each layer has when `attention_bias` / `mlp_bias` are true (llama's
/// `LlamaAttention`/`LlamaMLP`; Qwen3 and Gemma 3 use the attention flag only). Qwen2 has no
/// such fields: its q/k/v biases are always there.
fn declared_biases(a: Arch) -> &'static [(&'static str, &'static [&'static str])] {
    const ATTN: (&str, &[&str]) = (
        "attention_bias",
        &[
            "attn_q.bias",
            "attn_k.bias",
            "attn_v.bias",
            "attn_output.bias",
        ],
    );
    const MLP: (&str, &[&str]) = (
        "mlp_bias",
        &["ffn_gate.bias", "ffn_up.bias", "ffn_down.bias"],
    );
    match a {
        Arch::Llama => &[ATTN, MLP],
        Arch::Qwen3 | Arch::Gemma3 => &[ATTN, (MLP.0, MLP.1)],
        Arch::Qwen3Moe => &[ATTN],
        // Phi-4-mini writes both flags false; a bias tensor is then refused.
        Arch::Phi3 => &[
            ("attention_bias", &["attn_qkv.bias", "attn_output.bias"]),
            ("mlp_bias", &["ffn_up.bias", "ffn_down.bias"]),
        ],
        Arch::Bert | Arch::Qwen2 => &[],
    }
}

/// `attention_bias` / `mlp_bias` against the tensors: true needs every bias in every layer
/// (transformers would initialise a missing one at random); false (the default) allows none
/// (transformers would ignore it, while llama.cpp adds it).
fn biases_as_declared(
    config: &Value,
    a: Arch,
    n_layer: u64,
    has: &dyn Fn(&str) -> bool,
    problems: &mut Vec<String>,
) {
    for (field, names) in declared_biases(a) {
        let declared = match raw(config, field) {
            None => false,
            Some(Value::Bool(b)) => *b && !(a != Arch::Llama && *field == "mlp_bias"),
            Some(v) => {
                problems.push(format!("config.json: field {field}: {v} is not a boolean"));
                continue;
            }
        };
        for l in 0..n_layer {
            for n in names.iter() {
                let name = format!("blk.{l}.{n}");
                let present = has(&name);
                if present != declared {
                    problems.push(if declared {
                        format!("config.json: field {field} = true, but tensor {name} is missing from the checkpoint")
                    } else {
                        format!("the checkpoint has {name}, but config.json field {field} is false or absent: transformers does not use it")
                    });
                    return;
                }
            }
        }
    }
}

/// The tensors config.json declares by flags, against the GGUF names the checkpoint maps to:
/// an untied decoder's output matrix, and the biases `attention_bias`/`mlp_bias` declare.
/// `verify` runs this on the HF folder's tensors too, so a file made from a folder that
/// disagrees with itself is never GO. Each problem names config.json and the field.
pub fn declared_tensors(config: &Value, a: Arch, gguf_names: &[&str]) -> Vec<String> {
    let mut problems = Vec::new();
    let has = |n: &str| gguf_names.contains(&n);
    untied_without_output(config, a, &has, &mut problems);
    if let Some(n) = raw(config, "num_hidden_layers").and_then(Value::as_u64) {
        biases_as_declared(config, a, n.min(u32::MAX as u64), &has, &mut problems);
    }
    problems
}
