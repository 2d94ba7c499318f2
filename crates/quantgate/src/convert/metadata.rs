//! The metadata a conversion writes, in llama.cpp's converter's order: `general.*`
//! (architecture, sampling, provenance), hyperparameters, `general.file_type`, arch extras,
//! the quantization version and the tokenizer keys. Gate 1 starts its expectation here
//! (docs/architecture.md says why).

use anyhow::{bail, Result};
use gguf::{GgmlType, Value, ValueType};
use reference::pooling::Pooling;

use super::{card, generation, mlx, rope, vocab, OutType};
use crate::source::arch::Arch;
use crate::source::hf::HfDir;

/// `general.file_type` (llama.h `LLAMA_FTYPE_*`) of a file written as `outtype` whose
/// already-quantized (MLX) tensors were stored as `quantized`: such a file is typed by its
/// quantized tensors (MOSTLY_Q4_1 …), as convert writes it and verify expects it.
pub fn file_type(outtype: OutType, quantized: &[GgmlType]) -> u32 {
    mlx::file_type(quantized).unwrap_or_else(|| outtype.file_type())
}

/// The GGUF metadata in convert_hf_to_gguf.py's order: general (sampling, then the
/// provenance keys of [`card::general_keys`] for a file of `total_params` weights),
/// hyperparameters ending with `general.file_type` (`file_type`, see [`file_type`]), arch
/// extras, quantization version, tokenizer.
///
/// Errors: RoPE settings that cannot be read or mapped ([`rope::read`]); a model card whose
/// front matter is not YAML.
pub fn metadata(
    hf: &HfDir,
    arch: Arch,
    file_type: u32,
    pooling: Option<Pooling>,
    vocab: &vocab::Vocab,
    total_params: u64,
) -> Result<Vec<(String, Value)>> {
    use gguf::keys::{arch_key, general, llm};
    let a = arch.gguf_name();
    let mut kv: Vec<(String, Value)> = Vec::new();
    let mut put = |k: &str, v: Value| kv.push((arch_key(k, a), v));
    put(general::ARCHITECTURE, Value::string(a));
    put(general::TYPE, Value::string("model"));
    for (k, v) in generation::sampling(&hf.dir)? {
        put(&k, v);
    }
    for (k, v) in card::general_keys(&hf.dir, &hf.config, total_params)? {
        put(&k, v);
    }
    let u32_of = |k: &str| hf.config_u64(k).map(|v| Value::U32(v as u32));
    let rows = hparam_rows(hf, arch)?;
    for (k, v) in rows {
        if let Some(v) = v {
            put(k, v.clone());
            if k == llm::KEY_LENGTH {
                put(llm::VALUE_LENGTH, v);
            }
        }
    }
    put(general::FILE_TYPE, Value::U32(file_type));
    match arch {
        Arch::Bert => {
            put(llm::CAUSAL, Value::Bool(false));
            if let Some(p) = pooling {
                put(llm::POOLING_TYPE, Value::U32(p.llama_id()));
            }
        }
        Arch::Qwen2 | Arch::Qwen3 => {
            if let Some(p) = pooling {
                put(llm::POOLING_TYPE, Value::U32(p.llama_id()));
            }
        }
        Arch::Qwen3Moe => {
            if let Some(v) = u32_of("moe_intermediate_size") {
                put(llm::EXPERT_FEED_FORWARD_LENGTH, v);
            }
        }
        Arch::Gemma3 => {
            if let Some(v) = u32_of("sliding_window") {
                put(llm::SLIDING_WINDOW, v);
            }
        }
        Arch::Phi3 => {
            for (k, v) in phi3_keys(hf)? {
                put(k, v);
            }
        }
        Arch::Llama => {
            if let Some(v) = u32_of("vocab_size") {
                put(llm::VOCAB_SIZE, v);
            }
            let heads = hf.config_u64("num_attention_heads").unwrap_or(1).max(1);
            let rope_dim = hf
                .config_u64("head_dim")
                .or_else(|| hf.config_u64("hidden_size").map(|h| h / heads));
            if let Some(d) = rope_dim {
                put(llm::ROPE_DIMENSION_COUNT, Value::U32(d as u32));
            }
        }
    }
    // ggml's block layouts since 2023 (gguf-py GGML_QUANT_VERSION).
    put(general::QUANTIZATION_VERSION, Value::U32(2));
    // llama.cpp's LlamaModel.set_vocab writes add_bos_token=false for every 49152-token
    // vocabulary (its rule for small granite models, which SmolLM2 shares).
    let no_bos = arch == Arch::Llama && hf.config_u64("vocab_size") == Some(49152);
    kv.extend(tokenizer_metadata(vocab, arch, no_bos));
    finite_f32_keys(hf, &kv)?;
    Ok(kv)
}

/// The `{arch}.*` hyperparameter rows in llama.cpp's converter's order (`None`: not written;
/// `key_length` also gives `value_length`).
///
/// Errors: RoPE settings that cannot be read ([`rope::read`], [`rope::freq_base_swa`]).
fn hparam_rows(hf: &HfDir, arch: Arch) -> Result<Vec<(&'static str, Option<Value>)>> {
    use gguf::keys::llm;
    let u32_of = |k: &str| hf.config_u64(k).map(|v| Value::U32(v as u32));
    let f32_of = |k: &str| hf.config_f64(k).map(|v| Value::F32(v as f32));
    let rope = rope::read(&hf.config)?;
    let rope_f32 = |x: Option<f64>| x.map(|v| Value::F32(v as f32));
    let sc = rope.scaling.as_ref();
    let yarn = |i: usize| rope_f32(sc.and_then(|s| s.yarn[i]));
    let swa_base = rope::freq_base_swa(&hf.config)?;
    Ok(vec![
        (llm::BLOCK_COUNT, u32_of("num_hidden_layers")),
        (llm::CONTEXT_LENGTH, context_length(hf)),
        (llm::EMBEDDING_LENGTH, u32_of("hidden_size")),
        (llm::FEED_FORWARD_LENGTH, u32_of("intermediate_size")),
        (llm::HEAD_COUNT, u32_of("num_attention_heads")),
        (llm::HEAD_COUNT_KV, u32_of("num_key_value_heads")),
        // Scaling before the base, as llama.cpp's converter writes them.
        (llm::ROPE_SCALING_TYPE, sc.map(|s| Value::string(s.kind))),
        (llm::ROPE_SCALING_FACTOR, rope_f32(sc.map(|s| s.factor))),
        (
            llm::ROPE_SCALING_ORIG_CTX_LEN,
            sc.and_then(|s| s.original_context)
                .map(|c| Value::U32(c as u32)),
        ),
        (llm::ROPE_SCALING_YARN_EXT_FACTOR, yarn(0)),
        (llm::ROPE_SCALING_YARN_ATTN_FACTOR, yarn(1)),
        (llm::ROPE_SCALING_YARN_BETA_FAST, yarn(2)),
        (llm::ROPE_SCALING_YARN_BETA_SLOW, yarn(3)),
        (llm::ROPE_FREQ_BASE, rope_f32(rope.freq_base)),
        (llm::ROPE_FREQ_BASE_SWA, rope_f32(swa_base)),
        (llm::LAYERNORM_RMS_EPS, f32_of("rms_norm_eps")),
        (llm::LAYERNORM_EPS, f32_of("layer_norm_eps")),
        // The peer's find_hparam order: the v5 spelling first.
        (
            llm::EXPERT_COUNT,
            u32_of("num_local_experts").or_else(|| u32_of("num_experts")),
        ),
        (llm::EXPERT_USED_COUNT, u32_of("num_experts_per_tok")),
        (llm::KEY_LENGTH, key_length(hf, arch)),
    ])
}

/// `{arch}.context_length`: config.json's `max_position_embeddings`, less the position rows an
/// XLM-R model drops ([`crate::source::arch::position_offset`]).
fn context_length(hf: &HfDir) -> Option<Value> {
    let n = hf.config_u64("max_position_embeddings")?;
    let drop = crate::source::arch::position_offset(&hf.config).unwrap_or(0) as u64;
    Some(Value::U32(n.saturating_sub(drop) as u32))
}

/// phi3's own keys (`Phi3MiniModel.set_gguf_parameters` and `generate_extra_tensors`):
/// the original context, the rotated dimensions, the sliding window (0 when null: llama.cpp
/// runs phi3 without one either way) and, for LongRoPE, the attention factor.
///
/// Errors: RoPE fields that cannot be read ([`crate::source::rope::phi3`]).
fn phi3_keys(hf: &HfDir) -> Result<Vec<(&'static str, Value)>> {
    use gguf::keys::llm;
    let r = crate::source::rope::phi3(&hf.config)?;
    let window = hf.config_u64("sliding_window").unwrap_or(0);
    let mut kv = vec![
        (
            llm::ROPE_SCALING_ORIG_CTX_LEN,
            Value::U32(r.original_context as u32),
        ),
        (llm::ROPE_DIMENSION_COUNT, Value::U32(r.rope_dims as u32)),
        (llm::SLIDING_WINDOW, Value::U32(window as u32)),
    ];
    if let Some(l) = r.longrope {
        kv.push((
            llm::ROPE_SCALING_ATTN_FACTOR,
            Value::F32(l.attn_factor as f32),
        ));
    }
    Ok(kv)
}

/// The backstop of every field check: no key is written as an f32 that is not finite (1e300
/// or 1e39 become inf as f32; llama.cpp would then run a degenerate model).
///
/// Errors: the first such key, naming config.json and the GGUF key.
fn finite_f32_keys(hf: &HfDir, kv: &[(String, Value)]) -> Result<()> {
    match kv
        .iter()
        .find(|(_, v)| matches!(v, Value::F32(x) if !x.is_finite()))
    {
        Some((k, v)) => bail!(
            "{}: config.json: the value for GGUF key {k} is {v} as f32: not finite (the config field does not fit an f32)",
            hf.dir.display()
        ),
        None => Ok(()),
    }
}

/// `{arch}.attention.key_length` (and value_length): config.json's `head_dim`; for llama also
/// hidden / heads when absent, because llama.cpp's converter reads the config through
/// transformers, whose `LlamaConfig` always sets `head_dim` (5.x: `hidden_size //
/// num_attention_heads`), while `Qwen2Config` has none.
fn key_length(hf: &HfDir, arch: Arch) -> Option<Value> {
    // llama.cpp's converter writes none for phi3 (Phi3MiniModel sets its keys itself).
    if arch == Arch::Phi3 {
        return None;
    }
    let hd = hf.config_u64("head_dim").or_else(|| {
        let heads = hf.config_u64("num_attention_heads").filter(|h| *h > 0)?;
        (arch == Arch::Llama).then_some(hf.config_u64("hidden_size")? / heads)
    })?;
    Some(Value::U32(hd as u32))
}

/// The `tokenizer.*` keys of `vocab`, in gguf-py's order; `no_bos` writes add_bos_token=false
/// when the vocabulary decided nothing.
fn tokenizer_metadata(vocab: &vocab::Vocab, arch: Arch, no_bos: bool) -> Vec<(String, Value)> {
    use gguf::keys::tokenizer as k;
    let strings = |v: &[String]| {
        Value::Array(
            ValueType::String,
            v.iter().map(|t| Value::string(t.clone())).collect(),
        )
    };
    let mut kv: Vec<(String, Value)> = Vec::new();
    let mut put = |k: &str, v: Value| kv.push((k.to_string(), v));
    // BertModel.set_vocab writes the segment count first; _xlmroberta_set_vocab (t5) after
    // the tokens, with its normalizer keys.
    let ugm = vocab.model == "t5";
    if let Some(n) = vocab.token_type_count.filter(|_| !ugm) {
        put(k::TOKEN_TYPE_COUNT, Value::U32(n));
    }
    put(k::MODEL, Value::string(vocab.model.clone()));
    put(k::PRE, Value::string(vocab.pre.clone()));
    put(k::TOKENS, strings(&vocab.tokens));
    if let Some(scores) = &vocab.scores {
        put(
            k::SCORES,
            Value::Array(
                ValueType::F32,
                scores.iter().map(|s| Value::F32(*s)).collect(),
            ),
        );
    }
    put(
        k::TOKEN_TYPE,
        Value::Array(
            ValueType::I32,
            vocab.token_types.iter().map(|t| Value::I32(*t)).collect(),
        ),
    );
    if ugm {
        ugm_keys(vocab, &mut put);
    }
    if !vocab.merges.is_empty() {
        put(k::MERGES, strings(&vocab.merges));
    }
    for kind in vocab::SPECIAL_ORDER {
        if let Some(id) = vocab.special.get(kind) {
            put(&k::special_id(kind), Value::U32(*id));
        }
    }
    for kind in ["bos", "eos", "sep"] {
        let forced = (kind == "bos" && no_bos).then_some(false);
        if let Some(b) = vocab.add.get(kind).copied().or(forced) {
            put(&k::add_token(kind), Value::Bool(b));
        }
    }
    // llama.cpp's converter copies tokenizer_config's add_prefix_space for llama only
    // (LlamaModel.set_vocab); qwen2/qwen3 never write it; gemma3's SentencePiece vocabulary
    // sets its own (Gemma3Model.set_vocab: false).
    if let Some(b) = vocab
        .add_space_prefix
        .filter(|_| matches!(arch, Arch::Llama | Arch::Gemma3))
    {
        put(k::ADD_SPACE_PREFIX, Value::Bool(b));
    }
    if let Some(b) = vocab.normalizer_lowercase {
        put(k::NORMALIZER_LOWERCASE, Value::Bool(b));
    }
    let templates = &vocab.chat_templates;
    if let Some(t) = templates.default_template() {
        put(k::CHAT_TEMPLATE, Value::string(t));
    }
    // gguf-py's order: each named template, then the list of names (sorted here; gguf-py
    // writes a Python set, whose order is not defined).
    let named: Vec<(&str, &str)> = templates.named().collect();
    for (name, t) in &named {
        put(&k::chat_template_named(name), Value::string(*t));
    }
    if !named.is_empty() {
        put(
            k::CHAT_TEMPLATES,
            strings(&named.iter().map(|(n, _)| n.to_string()).collect::<Vec<_>>()),
        );
    }
    kv
}

/// The UGM (`t5`) keys after the token types, in `_xlmroberta_set_vocab`'s order:
/// add_space_prefix, token_type_count, remove_extra_whitespaces, precompiled_charsmap (u8
/// array, as gguf-py writes `bytes`).
fn ugm_keys(vocab: &vocab::Vocab, put: &mut impl FnMut(&str, Value)) {
    use gguf::keys::tokenizer as k;
    if let Some(b) = vocab.add_space_prefix {
        put(k::ADD_SPACE_PREFIX, Value::Bool(b));
    }
    if let Some(n) = vocab.token_type_count {
        put(k::TOKEN_TYPE_COUNT, Value::U32(n));
    }
    if let Some(b) = vocab.remove_extra_whitespaces {
        put(k::REMOVE_EXTRA_WHITESPACES, Value::Bool(b));
    }
    if let Some(m) = &vocab.precompiled_charsmap {
        put(
            k::PRECOMPILED_CHARSMAP,
            Value::Array(ValueType::U8, m.iter().map(|b| Value::U8(*b)).collect()),
        );
    }
}
