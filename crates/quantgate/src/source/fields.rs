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

/// Fields that cannot change inference, for every architecture; `docs/hf-config.md` gives the
/// reason for each group.
pub const INERT: &[&str] = &[
    // Bookkeeping that transformers writes into every save (`PreTrainedConfig.to_dict`).
    "_name_or_path",
    "_commit_hash",
    "_attn_implementation",
    "_attn_implementation_autoset",
    "architectures",
    "auto_map",
    "transformers_version",
    "torch_dtype",
    "dtype",
    "use_bfloat16",
    "torchscript",
    "tf_legacy_loss",
    // transformers' GGUF loader records the file it read (`modeling_gguf_pytorch_utils`).
    "_model_name_or_path",
    // Caching, outputs and training: same logits with or without them.
    "use_cache",
    "output_past",
    "output_attentions",
    "output_hidden_states",
    "output_scores",
    "return_dict",
    "return_dict_in_generate",
    "initializer_range",
    "initializer_factor",
    "attention_dropout",
    "attention_probs_dropout_prob",
    "hidden_dropout_prob",
    "hidden_dropout",
    "embd_pdrop",
    "resid_pdrop",
    "classifier_dropout",
    "gradient_checkpointing",
    // Chunking the feed-forward computes the same values (`apply_chunking_to_forward`).
    "chunk_size_feed_forward",
    // Task heads and labels: an embedding or LM conversion does not include a head.
    "id2label",
    "label2id",
    "num_labels",
    "problem_type",
    "finetuning_task",
    "task_specific_params",
    "prefix",
    // Token ids: the tokenizer files decide the GGUF ids.
    "tokenizer_class",
    "bos_token_id",
    "eos_token_id",
    "pad_token_id",
    "sep_token_id",
    "decoder_start_token_id",
    "forced_bos_token_id",
    "forced_eos_token_id",
    // Legacy generation defaults kept in config.json (transformers moves them to
    // generation_config.json): decoding settings, not the forward; llama.cpp's sampling keys
    // come from generation_config.json.
    "max_length",
    "min_length",
    "do_sample",
    "early_stopping",
    "num_beams",
    "num_beam_groups",
    "diversity_penalty",
    "temperature",
    "top_k",
    "top_p",
    "typical_p",
    "repetition_penalty",
    "length_penalty",
    "no_repeat_ngram_size",
    "encoder_no_repeat_ngram_size",
    "bad_words_ids",
    "num_return_sequences",
    "remove_invalid_values",
    "exponential_decay_length_penalty",
    "suppress_tokens",
    "begin_suppress_tokens",
    // Training-time tensor parallel degree; the forward is the same (LlamaConfig doc).
    "pretraining_tp",
    // Fields of other tools that transformers ignores (no model class reads them).
    "transformers.js_config",
    "is_llama_config",
    "rope_interleaved",
    "activation",
    "base_model_name_or_path",
    "peft_type",
    "task_type",
    "inference_mode",
    "unsloth_version",
    // The original Google BERT release's TF fields, read by no transformers class.
    "directionality",
    "pooler_fc_size",
    "pooler_num_attention_heads",
    "pooler_num_fc_layers",
    "pooler_size_per_head",
    "pooler_type",
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
        Arch::Llama | Arch::Qwen2 | Arch::Qwen3 | Arch::Gemma3 | Arch::Qwen3Moe | Arch::Phi3 => {
            DECODER_READ
        }
    }
}

/// Fields every decoder reads.
const DECODER_READ: &[&str] = &[
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
];

/// What qwen3_moe reads besides the decoder fields: the experts' (`{arch}.expert_count` from
/// `num_experts` or v5's `num_local_experts`, `expert_used_count`,
/// `expert_feed_forward_length`) and two training-only router settings.
const MOE_READ: &[&str] = &[
    "num_experts",
    "num_local_experts",
    "num_experts_per_tok",
    "moe_intermediate_size",
    // Training only: the router's auxiliary loss and returning router logits.
    "router_aux_loss_coef",
    "output_router_logits",
];

/// What phi3 reads besides the decoder fields: the LongRoPE context lengths and the rotated
/// share of each head (`rope.scaling.original_context_length`, `rope.dimension_count`;
/// `source::longrope`).
const PHI3_READ: &[&str] = &["original_max_position_embeddings", "partial_rotary_factor"];

/// gemma3's layout as llama.cpp runs it (src/models/gemma3.cpp): sliding-window attention in
/// every layer but each 6th (`load_swa_pattern(ml, 6)`), queries scaled by 1/√head_dim (every
/// size but 27B). Fields that would say otherwise, each named.
fn gemma3_layout(config: &Value) -> Vec<String> {
    let mut problems = Vec::new();
    // A layer count of the wrong type is named by the consistency checks, not here.
    if let (Some(n), Some(l)) = (
        config["num_hidden_layers"].as_u64(),
        config.get("layer_types").filter(|v| !v.is_null()),
    ) {
        let want: Vec<Value> = (0..n)
            .map(|i| {
                Value::from(if i % 6 == 5 {
                    "full_attention"
                } else {
                    "sliding_attention"
                })
            })
            .collect();
        if l.as_array() != Some(&want) {
            problems.push(format!(
                "config.json: field layer_types = {l}: not supported (for num_hidden_layers {n}, llama.cpp's gemma3 makes every 6th layer full_attention, the others sliding_attention)"
            ));
        }
    }
    let sw = &config["sliding_window"];
    if !sw
        .as_u64()
        .is_some_and(|w| (1..=u32::MAX as u64).contains(&w))
    {
        problems.push(format!(
            "config.json: field sliding_window = {sw}: gemma3 needs the window of its sliding-window layers, an integer from 1 to 2^32 − 1 (gemma3.attention.sliding_window, u32)"
        ));
    }
    let q = &config["query_pre_attn_scalar"];
    match (q.as_f64(), config["head_dim"].as_f64()) {
        _ if q.is_null() => {}
        (None, _) => problems.push(format!(
            "config.json: field query_pre_attn_scalar = {q}: not a number"
        )),
        (Some(q), Some(hd)) if q != hd => problems.push(format!(
            "config.json: field query_pre_attn_scalar = {q} differs from head_dim {hd}: not supported (llama.cpp's gemma3 scales queries by 1/sqrt(head_dim))"
        )),
        // A head_dim of the wrong type is named by the consistency checks.
        _ => {}
    }
    problems
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
        (Arch::Gemma3, "hidden_act" | "hidden_activation") => want(
            v == "gelu_pytorch_tanh",
            "llama.cpp's gemma3 uses tanh-approximated GELU",
        ),
        (Arch::Gemma3, "_sliding_window_pattern" | "sliding_window_pattern") => {
            want(v == 6, "llama.cpp's gemma3 pattern is 6")
        }
        // rope.freq_base_swa.
        (Arch::Gemma3, "rope_local_base_freq") => Some(None),
        // Checked against num_hidden_layers / head_dim by gemma3_layout.
        (Arch::Gemma3, "layer_types" | "query_pre_attn_scalar") => Some(None),
        (Arch::Gemma3, "attn_logit_softcapping" | "final_logit_softcapping") => {
            want(v.is_null(), "no logit soft-capping in Gemma 3")
        }
        (Arch::Gemma3, "use_bidirectional_attention") => want(v == false, "a causal decoder"),
        (_, "is_encoder_decoder" | "tie_encoder_decoder") => want(v == false, "a single stack"),
        (_, "pruned_heads") => want(
            v.as_object().is_some_and(|m| m.is_empty()),
            "no attention heads pruned",
        ),
        (_, "cross_attention_hidden_size") => want(v.is_null(), "no cross-attention"),
        // llama.cpp's qwen3moe: every layer routed (no dense layers), the top-k weights
        // always renormalised (src/models/qwen3moe.cpp, build_moe_ffn norm_w = true).
        (Arch::Qwen3Moe, "norm_topk_prob") => want(
            v == true,
            "llama.cpp's qwen3moe always renormalises the top-k routing weights",
        ),
        (Arch::Qwen3Moe, "decoder_sparse_step") => {
            want(v == 1, "llama.cpp's qwen3moe routes every layer")
        }
        (Arch::Qwen3Moe, "mlp_only_layers") => want(
            v.as_array().is_some_and(|l| l.is_empty()),
            "llama.cpp's qwen3moe has no dense layers",
        ),
        // Phi-4-mini's remote-code fields, which transformers' Phi3 does not read; at their
        // published values only.
        (Arch::Phi3, "full_attn_mod" | "interpolate_factor") => want(
            v == 1,
            "Phi-4-mini's published value; transformers' Phi3 ignores it",
        ),
        (Arch::Phi3, "lm_head_bias") => want(v == false, "transformers' Phi3 has no lm_head bias"),
        (Arch::Qwen2 | Arch::Qwen3, "use_mrope") => want(
            v == false,
            "multimodal RoPE is Qwen2-VL's, not a text model's",
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
            let moe = (a == Arch::Qwen3Moe && MOE_READ.contains(&k.as_str()))
                || (a == Arch::Phi3 && PHI3_READ.contains(&k.as_str()));
            if k == "text_config"
                || INERT.contains(&k.as_str())
                || read(a).contains(&k.as_str())
                || moe
            {
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
    if a == Arch::Gemma3 {
        problems.extend(gemma3_layout(config));
    }
    if a == Arch::Qwen3Moe && config.get("norm_topk_prob").is_none_or(Value::is_null) {
        // transformers' Qwen3MoeConfig defaults it to false; llama.cpp always renormalises.
        problems.push(
            "config.json: field norm_topk_prob is missing: transformers then does not renormalise the top-k routing weights (default false), llama.cpp's qwen3moe always does".into(),
        );
    }
    problems
}

/// Every problem of a config.json read on its own, before any tensor is looked at: the
/// architecture, every field accounted for ([`check`]), the hyperparameters' types and ranges
/// and the RoPE settings. What `convert` refuses a real config for; empty for one it accepts
/// (its tensors are then still checked against it).
pub fn config_problems(config: &Value) -> Vec<String> {
    let model_type = config["model_type"].as_str().unwrap_or("");
    let a = match Arch::from_model_type(model_type) {
        Ok(a) => a,
        Err(e) => return vec![e.to_string()],
    };
    let mut problems = check(config, a);
    problems.extend(super::hparams::read_fields(config, a).1);
    if let Err(e) = super::rope::read(config) {
        problems.push(e.to_string());
    }
    if let Err(e) = super::rope::freq_base_swa(config) {
        problems.push(e.to_string());
    }
    if a == Arch::Phi3 {
        problems.extend(super::rope::phi3(config).err().map(|e| e.to_string()));
        problems.extend(phi3_window(config));
    }
    problems
}

/// phi3's `sliding_window` (`phi3.attention.sliding_window`, u32; null writes 0): transformers
/// masks to it, llama.cpp's phi3 runs without it (`llama_model_phi3::load_arch_hparams`).
fn phi3_window(config: &Value) -> Option<String> {
    let sw = config.get("sliding_window").filter(|v| !v.is_null())?;
    match sw.as_u64() {
        Some(w) if w <= u32::MAX as u64 => None,
        _ => Some(format!(
            "config.json: field sliding_window = {sw}: not an integer from 0 to 2^32 − 1 (phi3.attention.sliding_window, u32)"
        )),
    }
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

    #[test]
    fn gemma3_layout_fields_are_checked_against_the_layer_count_and_head_dim() {
        let types = |full_every: usize| {
            (0..12)
                .map(|i| {
                    if i % full_every == full_every - 1 {
                        "full_attention"
                    } else {
                        "sliding_attention"
                    }
                })
                .collect::<Vec<_>>()
        };
        let cfg = |lt: Vec<&str>, q: u64, act: &str| {
            json!({"num_hidden_layers": 12, "head_dim": 256, "layer_types": lt, "sliding_window": 512,
                "query_pre_attn_scalar": q, "hidden_activation": act,
                "_sliding_window_pattern": 6, "attn_logit_softcapping": null,
                "rope_local_base_freq": 10000.0, "use_bidirectional_attention": false})
        };
        assert!(check(&cfg(types(6), 256, "gelu_pytorch_tanh"), Arch::Gemma3).is_empty());
        let p = check(&cfg(types(4), 256, "gelu_pytorch_tanh"), Arch::Gemma3);
        assert_eq!(p.len(), 1, "{p:?}");
        assert!(p[0].contains("field layer_types"), "{p:?}");
        let p = check(&cfg(types(6), 144, "gelu_pytorch_tanh"), Arch::Gemma3);
        assert!(p[0].contains("query_pre_attn_scalar = 144"), "{p:?}");
        let p = check(&cfg(types(6), 256, "silu"), Arch::Gemma3);
        assert!(p[0].contains("field hidden_activation = \"silu\""), "{p:?}");
        let mut c = cfg(types(6), 256, "gelu_pytorch_tanh");
        c.as_object_mut().unwrap().remove("sliding_window");
        let p = check(&c, Arch::Gemma3);
        assert!(p[0].contains("field sliding_window = null"), "{p:?}");
        // Found by an attack on the converter: values that converted silently.
        for (k, v) in [
            ("sliding_window", json!(4294967301u64)),
            ("sliding_window", json!(0)),
            ("query_pre_attn_scalar", json!("256")),
            ("layer_types", json!([1, 2])),
        ] {
            let mut c = cfg(types(6), 256, "gelu_pytorch_tanh");
            c[k] = v;
            let p = check(&c, Arch::Gemma3);
            assert!(
                p.len() == 1 && p[0].contains(&format!("field {k}")),
                "{k}: {p:?}"
            );
        }
        let mut c = cfg(types(6), 256, "gelu_pytorch_tanh");
        c["num_hidden_layers"] = json!("12");
        assert!(
            check(&c, Arch::Gemma3).is_empty(),
            "named by consistency instead"
        );
    }

    /// The real-config corpus (`testdata/hf-configs`, PROVENANCE.md there): how many of the
    /// supported families' configs are refused, and why. Each refusal here is one a user would
    /// meet; the list changes only with a reason in docs/hf-config.md.
    #[test]
    fn real_config_corpus_refusals_are_exactly_the_known_ones() {
        let root =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/hf-configs");
        let mut names: Vec<_> = std::fs::read_dir(&root)
            .unwrap()
            .flatten()
            .filter(|e| e.path().join("config.json").is_file())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        let mut refused = Vec::new();
        for n in &names {
            let text = std::fs::read_to_string(root.join(n).join("config.json")).unwrap();
            let c: Value = serde_json::from_str(&text).unwrap();
            let p = config_problems(&c);
            if !p.is_empty() {
                eprintln!("refused {n}: {}", p.join("; "));
                refused.push(n.as_str());
            } else {
                eprintln!("accepted {n}");
            }
        }
        eprintln!("{} of {} configs refused", refused.len(), names.len());
        assert!(names.len() >= 40, "corpus has {} configs", names.len());
        assert_eq!(refused, KNOWN_REFUSALS, "refused configs changed");
    }

    /// Configs of the corpus convert refuses, each for a field that changes inference (see
    /// docs/hf-config.md, "Refused real configs").
    const KNOWN_REFUSALS: &[&str] = &[
        // use_bidirectional_attention: EmbeddingGemma is an encoder; llama.cpp's gemma3 is causal.
        "embeddinggemma-300m@4.57.6",
    ];
}
