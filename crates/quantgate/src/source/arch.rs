//! Per-architecture conversion tables: HF tensor names → GGUF names, tensors kept in F32,
//! names dropped, and the hyperparameter keys, per `docs/llamacpp-spec.md` §4.3.
//! The verifier reads the same tables, so a mapping is stated once.

use anyhow::{bail, Result};

/// config.json `model_type` of Gemma 3 text models (transformers `Gemma3TextConfig`); the one
/// spelling the converter's and the verifier's vocabulary readers dispatch on.
pub const GEMMA3_MODEL_TYPE: &str = "gemma3_text";

/// config.json `model_type` of XLM-RoBERTa models (XLMRobertaModel: bge-m3,
/// multilingual-e5-base/large); llama.cpp runs them as `bert`.
pub const XLM_ROBERTA_MODEL_TYPE: &str = "xlm-roberta";

/// The position-embedding rows llama.cpp's converter drops from an XLM-RoBERTa model, and
/// subtracts from its context length: `pad_token_id + 1` (conversion/bert.py
/// `_xlmroberta_tokenizer_init`). HF's `XLMRobertaEmbeddings` numbers positions from
/// `pad_token_id + 1` (`create_position_ids_from_input_ids`), llama.cpp from 0, so row
/// `pad_token_id + 1` becomes row 0. `None` for every other model, or without a `pad_token_id`
/// (the converter then keeps every row).
pub fn position_offset(config: &serde_json::Value) -> Option<usize> {
    if config["model_type"].as_str() != Some(XLM_ROBERTA_MODEL_TYPE) {
        return None;
    }
    config["pad_token_id"].as_u64().map(|p| p as usize + 1)
}

/// The GGUF name of BERT's position table.
pub const POSITION_EMBD: &str = "position_embd.weight";

/// Leading source rows the file leaves out of GGUF tensor `gguf_name`: [`position_offset`] for
/// the position table, 0 for every other tensor (convert drops them, verify expects them gone).
pub fn rows_dropped(config: &serde_json::Value, gguf_name: &str) -> usize {
    match gguf_name {
        POSITION_EMBD => position_offset(config).unwrap_or(0),
        _ => 0,
    }
}

/// Architectures `convert` handles.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arch {
    /// BERT encoders (BertModel; sentence-transformers), XLM-RoBERTa's included
    /// ([`XLM_ROBERTA_MODEL_TYPE`]: llama.cpp's `bert` with position rows dropped,
    /// [`position_offset`]).
    Bert,
    /// Qwen3 (Qwen3Model / Qwen3ForCausalLM; Qwen3-Embedding).
    Qwen3,
    /// Qwen2 / Qwen2.5.
    Qwen2,
    /// Llama family (SmolLM2).
    Llama,
    /// Gemma 3 text models (Gemma3ForCausalLM, config `model_type` `gemma3_text`).
    Gemma3,
    /// Qwen3 mixture-of-experts (Qwen3MoeForCausalLM, `model_type` `qwen3_moe`; llama.cpp
    /// `qwen3moe`): Qwen3's attention, every layer's FFN a routed set of experts.
    Qwen3Moe,
    /// Phi-3 family (Phi3ForCausalLM, `model_type` `phi3`: Phi-3/3.5-mini, Phi-4, Phi-4-mini):
    /// fused `qkv_proj` and `gate_up_proj`, LongRoPE, partial rotary dimensions.
    Phi3,
}

impl Arch {
    /// The arch of config.json's `model_type`.
    pub fn from_model_type(t: &str) -> Result<Arch> {
        Ok(match t {
            "bert" | XLM_ROBERTA_MODEL_TYPE => Arch::Bert,
            "qwen3" => Arch::Qwen3,
            "qwen2" => Arch::Qwen2,
            "llama" => Arch::Llama,
            GEMMA3_MODEL_TYPE => Arch::Gemma3,
            "qwen3_moe" => Arch::Qwen3Moe,
            "phi3" => Arch::Phi3,
            other => bail!(
                "config.json model_type {other:?} is not supported (bert, xlm-roberta, qwen3, qwen2, \
                 llama, gemma3_text, qwen3_moe, phi3)"
            ),
        })
    }

    /// `general.architecture` value.
    pub fn gguf_name(self) -> &'static str {
        match self {
            Arch::Bert => "bert",
            Arch::Qwen3 => "qwen3",
            Arch::Qwen2 => "qwen2",
            Arch::Llama => "llama",
            Arch::Gemma3 => "gemma3",
            Arch::Qwen3Moe => "qwen3moe",
            Arch::Phi3 => "phi3",
        }
    }

    /// What convert_hf_to_gguf.py adds to a source tensor's f32 values before storing them:
    /// gemma3 stores every `*norm.weight` plus 1, because HF's `Gemma3RMSNorm` scales by
    /// `1 + w` while llama.cpp's RMS norm scales by the stored weight (`Gemma3Model.norm_shift`,
    /// conversion/gemma.py; added after widening BF16/F16 to f32).
    pub fn norm_shift(self, gguf_name: &str) -> f32 {
        match self {
            Arch::Gemma3 if gguf_name.ends_with("norm.weight") => 1.0,
            _ => 0.0,
        }
    }
}

/// Where one HF tensor goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mapped {
    /// GGUF tensor name, e.g. `blk.0.attn_q.weight`.
    pub gguf: String,
    /// Kept in F32 whatever the output type (position/token-type embeddings).
    pub force_f32: bool,
    /// For one expert of a MoE layer: its index in the stacked 3-D tensor `gguf` (llama.cpp
    /// `ffn_{gate,up,down}_exps`, ne `[in, out, n_expert]`: expert `e` is the `e`-th slab).
    pub expert: Option<u32>,
}

/// (HF layer-local suffix, GGUF layer-local name) for BERT encoder layers.
const BERT_LAYER: &[(&str, &str)] = &[
    ("attention.self.query", "attn_q"),
    ("attention.self.key", "attn_k"),
    ("attention.self.value", "attn_v"),
    ("attention.output.dense", "attn_output"),
    ("attention.output.LayerNorm", "attn_output_norm"),
    ("intermediate.dense", "ffn_up"),
    ("output.dense", "ffn_down"),
    ("output.LayerNorm", "layer_output_norm"),
];

/// (HF non-layer module, GGUF name, force F32) for BERT.
const BERT_GLOBAL: &[(&str, &str, bool)] = &[
    ("embeddings.word_embeddings", "token_embd", false),
    ("embeddings.position_embeddings", "position_embd", true),
    ("embeddings.token_type_embeddings", "token_types", true),
    ("embeddings.LayerNorm", "token_embd_norm", false),
];

/// BERT tensors the converter drops.
const BERT_DROP: &[&str] = &[
    "embeddings.position_ids",
    "pooler.",
    "cls.predictions",
    "cls.seq_relationship",
];

/// (HF layer-local suffix, GGUF layer-local name) for llama / qwen2 / qwen3 decoder layers.
const DECODER_LAYER: &[(&str, &str)] = &[
    ("input_layernorm", "attn_norm"),
    ("self_attn.q_proj", "attn_q"),
    ("self_attn.k_proj", "attn_k"),
    ("self_attn.v_proj", "attn_v"),
    ("self_attn.o_proj", "attn_output"),
    ("self_attn.q_norm", "attn_q_norm"),
    ("self_attn.k_norm", "attn_k_norm"),
    ("post_attention_layernorm", "ffn_norm"),
    ("mlp.gate_proj", "ffn_gate"),
    ("mlp.up_proj", "ffn_up"),
    ("mlp.down_proj", "ffn_down"),
];

/// (HF layer-local suffix, GGUF layer-local name) for gemma3 decoder layers: its four norms per
/// layer and its Q/K norms (llama.cpp `LLM_TENSOR_ATTN_POST_NORM`, `FFN_NORM`, `FFN_POST_NORM`).
const GEMMA3_LAYER: &[(&str, &str)] = &[
    ("input_layernorm", "attn_norm"),
    ("self_attn.q_proj", "attn_q"),
    ("self_attn.k_proj", "attn_k"),
    ("self_attn.v_proj", "attn_v"),
    ("self_attn.o_proj", "attn_output"),
    ("self_attn.q_norm", "attn_q_norm"),
    ("self_attn.k_norm", "attn_k_norm"),
    ("post_attention_layernorm", "post_attention_norm"),
    ("pre_feedforward_layernorm", "ffn_norm"),
    ("post_feedforward_layernorm", "post_ffw_norm"),
    ("mlp.gate_proj", "ffn_gate"),
    ("mlp.up_proj", "ffn_up"),
    ("mlp.down_proj", "ffn_down"),
];

/// (HF layer-local suffix, GGUF layer-local name) for phi3 layers: the fused projections
/// stay fused (llama.cpp `LLM_TENSOR_ATTN_QKV`; `ffn_up` holds gate and up, `2·n_ff` rows,
/// split by its SwiGLU), as convert_hf_to_gguf.py's `Phi3MiniModel` writes them.
const PHI3_LAYER: &[(&str, &str)] = &[
    ("input_layernorm", "attn_norm"),
    ("self_attn.qkv_proj", "attn_qkv"),
    ("self_attn.o_proj", "attn_output"),
    ("post_attention_layernorm", "ffn_norm"),
    ("mlp.gate_up_proj", "ffn_up"),
    ("mlp.down_proj", "ffn_down"),
];

/// (HF non-layer module, GGUF name) for decoders.
const DECODER_GLOBAL: &[(&str, &str)] = &[
    ("embed_tokens", "token_embd"),
    ("norm", "output_norm"),
    ("lm_head", "output"),
];

/// Decoder tensors the converter drops.
const DECODER_DROP: &[&str] = &[
    ".rotary_emb.inv_freq",
    ".attention.masked_bias",
    ".attention.bias",
];

/// Splits `name` into (module, suffix) where suffix is `weight` or `bias` (`gamma`/`beta` are
/// the old LayerNorm spellings).
fn split_param(name: &str) -> Option<(&str, &'static str)> {
    let (module, last) = name.rsplit_once('.')?;
    let suffix = match last {
        "weight" | "gamma" => "weight",
        "bias" | "beta" => "bias",
        _ => return None,
    };
    Some((module, suffix))
}

/// Maps one HF tensor name. `Ok(None)`: dropped on purpose. `Err`: a tensor this table does not
/// know — a blocker, never silently skipped.
pub fn map_tensor(arch: Arch, hf_name: &str) -> Result<Option<Mapped>> {
    match arch {
        Arch::Bert => {
            // XLMRobertaModel's checkpoints may carry `roberta.` (bge-reranker-v2-m3), BERT's
            // `bert.`; the converter strips both.
            let name = hf_name
                .strip_prefix("roberta.")
                .or_else(|| hf_name.strip_prefix("bert."))
                .unwrap_or(hf_name);
            if BERT_DROP.iter().any(|d| name.starts_with(d)) {
                return Ok(None);
            }
            let Some((module, suffix)) = split_param(name) else {
                bail!("tensor {hf_name:?}: not a .weight/.bias parameter");
            };
            if let Some((_, g, f32_)) = BERT_GLOBAL.iter().find(|(h, _, _)| *h == module) {
                return Ok(Some(Mapped {
                    gguf: format!("{g}.{suffix}"),
                    force_f32: *f32_,
                    expert: None,
                }));
            }
            if let Some(rest) = module.strip_prefix("encoder.layer.") {
                if let Some((n, local)) = rest.split_once('.') {
                    if let (Ok(n), Some((_, g))) = (
                        n.parse::<u32>(),
                        BERT_LAYER.iter().find(|(h, _)| *h == local),
                    ) {
                        return Ok(Some(Mapped {
                            gguf: format!("blk.{n}.{g}.{suffix}"),
                            force_f32: false,
                            expert: None,
                        }));
                    }
                }
            }
            bail!("tensor {hf_name:?} has no GGUF name in the bert table")
        }
        Arch::Qwen3 | Arch::Qwen2 | Arch::Llama | Arch::Gemma3 | Arch::Qwen3Moe | Arch::Phi3 => {
            map_decoder(arch, hf_name)
        }
    }
}

/// [`map_tensor`] for the decoder architectures.
fn map_decoder(arch: Arch, hf_name: &str) -> Result<Option<Mapped>> {
    if DECODER_DROP.iter().any(|d| hf_name.ends_with(d)) {
        return Ok(None);
    }
    let name = hf_name.strip_prefix("model.").unwrap_or(hf_name);
    let Some((module, suffix)) = split_param(name) else {
        bail!("tensor {hf_name:?}: not a .weight/.bias parameter");
    };
    if let Some((_, g)) = DECODER_GLOBAL.iter().find(|(h, _)| *h == module) {
        return Ok(Some(Mapped {
            gguf: format!("{g}.{suffix}"),
            force_f32: false,
            expert: None,
        }));
    }
    if let Some(rest) = module.strip_prefix("layers.") {
        if let Some((n, local)) = rest.split_once('.') {
            let table = match arch {
                Arch::Gemma3 => GEMMA3_LAYER,
                Arch::Phi3 => PHI3_LAYER,
                _ => DECODER_LAYER,
            };
            let known = table.iter().find(|(h, _)| *h == local);
            if arch == Arch::Qwen3Moe {
                if let Some(m) = map_moe(n, local, suffix) {
                    return Ok(Some(m));
                }
            }
            let qk_norm_ok = matches!(arch, Arch::Qwen3 | Arch::Gemma3 | Arch::Qwen3Moe)
                || !local.ends_with("_norm")
                || !local.starts_with("self_attn");
            if let (Ok(n), Some((_, g)), true) = (n.parse::<u32>(), known, qk_norm_ok) {
                return Ok(Some(Mapped {
                    gguf: format!("blk.{n}.{g}.{suffix}"),
                    force_f32: false,
                    expert: None,
                }));
            }
        }
    }
    bail!(
        "tensor {hf_name:?} has no GGUF name in the {} table",
        arch.gguf_name()
    )
}

/// The MoE tensors of layer `n` (layer-local name `local`): the router `mlp.gate` →
/// `ffn_gate_inp`, expert `e`'s `mlp.experts.e.{gate,up,down}_proj` → slab `e` of
/// `ffn_{gate,up,down}_exps` (convert_hf_to_gguf.py `Qwen2MoeModel.modify_tensors`; llama.cpp
/// `LLM_TENSOR_FFN_GATE_INP`, `FFN_*_EXPS`).
fn map_moe(n: &str, local: &str, suffix: &str) -> Option<Mapped> {
    let n: u32 = n.parse().ok()?;
    if local == "mlp.gate" {
        return Some(Mapped {
            gguf: format!("blk.{n}.ffn_gate_inp.{suffix}"),
            force_f32: false,
            expert: None,
        });
    }
    let (e, proj) = local.strip_prefix("mlp.experts.")?.split_once('.')?;
    // Weights only (no expert has a bias), and the index as transformers writes it ("7", not
    // "07"): anything else has no GGUF name and is refused.
    let index: u32 = e.parse().ok()?;
    if suffix != "weight" || index.to_string() != e {
        return None;
    }
    let g = match proj {
        "gate_proj" => "ffn_gate_exps",
        "up_proj" => "ffn_up_exps",
        "down_proj" => "ffn_down_exps",
        _ => return None,
    };
    Some(Mapped {
        gguf: format!("blk.{n}.{g}.{suffix}"),
        force_f32: false,
        expert: Some(index),
    })
}

/// Whether a tensor is stored in F32 whatever the output type (convert_hf_to_gguf.py's
/// `prepare_tensors` rule): 1-D tensors, `*_norm.weight`, forced tensors, the MoE router
/// `ffn_gate_inp`, and every name not ending in `.weight` (so all biases).
pub fn keep_f32(gguf_name: &str, n_dims: usize, force_f32: bool) -> bool {
    n_dims <= 1
        || force_f32
        // The MoE router (`MODEL_TENSOR.FFN_GATE_INP` in the converter's F32 list).
        || gguf_name.ends_with("ffn_gate_inp.weight")
        || gguf_name.ends_with("_norm.weight")
        || !gguf_name.ends_with(".weight")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bert_and_decoder_names_follow_the_spec_table() {
        let m = |a, n| map_tensor(a, n).unwrap().map(|m| (m.gguf, m.force_f32));
        assert_eq!(
            m(Arch::Bert, "embeddings.word_embeddings.weight"),
            Some(("token_embd.weight".into(), false))
        );
        assert_eq!(
            m(Arch::Bert, "bert.embeddings.position_embeddings.weight"),
            Some(("position_embd.weight".into(), true))
        );
        assert_eq!(
            m(Arch::Bert, "embeddings.LayerNorm.gamma"),
            Some(("token_embd_norm.weight".into(), false))
        );
        assert_eq!(
            m(
                Arch::Bert,
                "encoder.layer.5.attention.output.LayerNorm.bias"
            ),
            Some(("blk.5.attn_output_norm.bias".into(), false))
        );
        assert_eq!(
            m(Arch::Bert, "encoder.layer.0.output.dense.weight"),
            Some(("blk.0.ffn_down.weight".into(), false))
        );
        assert_eq!(m(Arch::Bert, "pooler.dense.weight"), None);
        assert_eq!(m(Arch::Bert, "embeddings.position_ids"), None);
        assert!(map_tensor(Arch::Bert, "encoder.layer.0.mystery.weight").is_err());
        assert_eq!(
            m(Arch::Qwen3, "model.layers.3.self_attn.k_norm.weight"),
            Some(("blk.3.attn_k_norm.weight".into(), false))
        );
        assert_eq!(
            m(Arch::Qwen3, "layers.0.mlp.gate_proj.weight"),
            Some(("blk.0.ffn_gate.weight".into(), false))
        );
        assert_eq!(
            m(Arch::Llama, "lm_head.weight"),
            Some(("output.weight".into(), false))
        );
        assert!(map_tensor(Arch::Llama, "model.layers.0.self_attn.q_norm.weight").is_err());
        assert_eq!(
            m(
                Arch::Gemma3,
                "model.layers.2.post_attention_layernorm.weight"
            ),
            Some(("blk.2.post_attention_norm.weight".into(), false))
        );
        assert_eq!(
            m(
                Arch::Gemma3,
                "model.layers.2.pre_feedforward_layernorm.weight"
            ),
            Some(("blk.2.ffn_norm.weight".into(), false))
        );
        assert_eq!(
            m(
                Arch::Gemma3,
                "model.layers.0.post_feedforward_layernorm.weight"
            ),
            Some(("blk.0.post_ffw_norm.weight".into(), false))
        );
        assert!(map_tensor(
            Arch::Llama,
            "model.layers.0.pre_feedforward_layernorm.weight"
        )
        .is_err());
        assert_eq!(Arch::Gemma3.norm_shift("blk.0.attn_q_norm.weight"), 1.0);
        assert_eq!(Arch::Gemma3.norm_shift("output_norm.weight"), 1.0);
        assert_eq!(Arch::Gemma3.norm_shift("blk.0.attn_q.weight"), 0.0);
        assert_eq!(Arch::Qwen3.norm_shift("blk.0.attn_q_norm.weight"), 0.0);
        assert_eq!(
            m(Arch::Phi3, "model.layers.1.self_attn.qkv_proj.weight"),
            Some(("blk.1.attn_qkv.weight".into(), false))
        );
        assert_eq!(
            m(Arch::Phi3, "model.layers.0.mlp.gate_up_proj.weight"),
            Some(("blk.0.ffn_up.weight".into(), false))
        );
        assert!(map_tensor(Arch::Phi3, "model.layers.0.self_attn.q_proj.weight").is_err());
        assert!(keep_f32("blk.0.attn_q.bias", 1, false));
        assert!(keep_f32("blk.0.attn_norm.weight", 1, false));
        assert!(keep_f32("position_embd.weight", 2, true));
        assert!(!keep_f32("blk.0.attn_q.weight", 2, false));
    }
}
