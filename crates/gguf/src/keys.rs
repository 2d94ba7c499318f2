//! Every GGUF metadata key quantgate writes or checks, defined once, spelled as llama.cpp spells
//! them (`src/llama-arch.cpp` `LLM_KV_NAMES`, gguf-py `constants.py` `Keys`). Keys that start
//! with the architecture are templates holding `{arch}`; [`arch_key`] fills them in.

/// `general.*` keys.
pub mod general {
    /// The architecture name, e.g. `llama`, `bert`, `qwen3` (string).
    pub const ARCHITECTURE: &str = "general.architecture";
    /// `model` for models (string).
    pub const TYPE: &str = "general.type";
    /// Human-readable model name (string).
    pub const NAME: &str = "general.name";
    /// llama.h `LLAMA_FTYPE_*` of the file (u32); see [`crate::LlamaFtype`].
    pub const FILE_TYPE: &str = "general.file_type";
    /// ggml's quantization format version, 2 since ggml's 2023 block layouts (u32).
    pub const QUANTIZATION_VERSION: &str = "general.quantization_version";
    /// Tensor data alignment in bytes (u32, power of two; default 32).
    pub const ALIGNMENT: &str = "general.alignment";
}

/// `{arch}.*` hyperparameter keys (templates: pass them through [`arch_key`]).
pub mod llm {
    /// Layers (u32).
    pub const BLOCK_COUNT: &str = "{arch}.block_count";
    /// Training context length (u32).
    pub const CONTEXT_LENGTH: &str = "{arch}.context_length";
    /// Hidden size (u32).
    pub const EMBEDDING_LENGTH: &str = "{arch}.embedding_length";
    /// FFN inner size (u32).
    pub const FEED_FORWARD_LENGTH: &str = "{arch}.feed_forward_length";
    /// Vocabulary size (u32).
    pub const VOCAB_SIZE: &str = "{arch}.vocab_size";
    /// Pooling of embedding models, llama.h `LLAMA_POOLING_TYPE_*` (u32).
    pub const POOLING_TYPE: &str = "{arch}.pooling_type";
    /// Attention heads (u32).
    pub const HEAD_COUNT: &str = "{arch}.attention.head_count";
    /// Key/value heads (u32).
    pub const HEAD_COUNT_KV: &str = "{arch}.attention.head_count_kv";
    /// Per-head key size (u32).
    pub const KEY_LENGTH: &str = "{arch}.attention.key_length";
    /// Per-head value size (u32).
    pub const VALUE_LENGTH: &str = "{arch}.attention.value_length";
    /// Experts per MoE layer (u32; gguf-py `Keys.LLM.EXPERT_COUNT`).
    pub const EXPERT_COUNT: &str = "{arch}.expert_count";
    /// Experts each token is routed to (u32; `Keys.LLM.EXPERT_USED_COUNT`).
    pub const EXPERT_USED_COUNT: &str = "{arch}.expert_used_count";
    /// One expert's FFN inner size (u32; `Keys.LLM.EXPERT_FEED_FORWARD_LENGTH`).
    pub const EXPERT_FEED_FORWARD_LENGTH: &str = "{arch}.expert_feed_forward_length";
    /// LayerNorm epsilon (f32).
    pub const LAYERNORM_EPS: &str = "{arch}.attention.layer_norm_epsilon";
    /// RMSNorm epsilon (f32).
    pub const LAYERNORM_RMS_EPS: &str = "{arch}.attention.layer_norm_rms_epsilon";
    /// Whether attention is causal (bool; `false` for BERT).
    pub const CAUSAL: &str = "{arch}.attention.causal";
    /// RoPE base frequency (f32).
    pub const ROPE_FREQ_BASE: &str = "{arch}.rope.freq_base";
    /// RoPE base frequency of the sliding-window layers (f32; gemma3: `rope_local_base_freq`).
    pub const ROPE_FREQ_BASE_SWA: &str = "{arch}.rope.freq_base_swa";
    /// Sliding-window size in tokens of the SWA layers (u32; gemma3: `sliding_window`).
    pub const SLIDING_WINDOW: &str = "{arch}.attention.sliding_window";
    /// RoPE dimensions (u32).
    pub const ROPE_DIMENSION_COUNT: &str = "{arch}.rope.dimension_count";
    /// RoPE scaling: `none`, `linear`, `yarn`, `longrope` (string; gguf-py `RopeScalingType`).
    pub const ROPE_SCALING_TYPE: &str = "{arch}.rope.scaling.type";
    /// RoPE scaling factor (f32).
    pub const ROPE_SCALING_FACTOR: &str = "{arch}.rope.scaling.factor";
    /// Context length the model was pre-trained with, before scaling (u32).
    pub const ROPE_SCALING_ORIG_CTX_LEN: &str = "{arch}.rope.scaling.original_context_length";
    /// YaRN extrapolation factor (f32).
    pub const ROPE_SCALING_YARN_EXT_FACTOR: &str = "{arch}.rope.scaling.yarn_ext_factor";
    /// YaRN attention factor (f32).
    pub const ROPE_SCALING_YARN_ATTN_FACTOR: &str = "{arch}.rope.scaling.yarn_attn_factor";
    /// LongRoPE's multiplier of cos and sin (phi3; llama.cpp multiplies its yarn attention
    /// factor by it, `llama-context.cpp`).
    pub const ROPE_SCALING_ATTN_FACTOR: &str = "{arch}.rope.scaling.attn_factor";
    /// YaRN beta_fast (f32).
    pub const ROPE_SCALING_YARN_BETA_FAST: &str = "{arch}.rope.scaling.yarn_beta_fast";
    /// YaRN beta_slow (f32).
    pub const ROPE_SCALING_YARN_BETA_SLOW: &str = "{arch}.rope.scaling.yarn_beta_slow";
}

/// `tokenizer.*` keys.
pub mod tokenizer {
    /// `gpt2` (BPE), `bert` (WordPiece), `llama` (SentencePiece) … (string).
    pub const MODEL: &str = "tokenizer.ggml.model";
    /// Pre-tokenizer name llama.cpp dispatches on, e.g. `smollm`, `qwen2` (string).
    pub const PRE: &str = "tokenizer.ggml.pre";
    /// Token texts (array of string).
    pub const TOKENS: &str = "tokenizer.ggml.tokens";
    /// SentencePiece piece scores by id (array of f32; `llama` vocabularies).
    pub const SCORES: &str = "tokenizer.ggml.scores";
    /// llama.h `LLAMA_TOKEN_TYPE_*` per token (array of i32).
    pub const TOKEN_TYPE: &str = "tokenizer.ggml.token_type";
    /// BERT's segment vocabulary size (u32).
    pub const TOKEN_TYPE_COUNT: &str = "tokenizer.ggml.token_type_count";
    /// BPE merges, `"a b"` (array of string).
    pub const MERGES: &str = "tokenizer.ggml.merges";
    /// Unknown-token id (u32).
    pub const UNKNOWN_ID: &str = "tokenizer.ggml.unknown_token_id";
    /// Separator id (u32; llama.cpp's spelling "seperator").
    pub const SEPARATOR_ID: &str = "tokenizer.ggml.seperator_token_id";
    /// Padding id (u32).
    pub const PADDING_ID: &str = "tokenizer.ggml.padding_token_id";
    /// Whether to prepend a space (bool).
    pub const ADD_SPACE_PREFIX: &str = "tokenizer.ggml.add_space_prefix";
    /// Whether the UGM normalizer collapses whitespace runs and trims (bool; SentencePiece's
    /// `normalizer_spec.remove_extra_whitespaces`).
    pub const REMOVE_EXTRA_WHITESPACES: &str = "tokenizer.ggml.remove_extra_whitespaces";
    /// SentencePiece's compiled normalization table for UGM, verbatim (array of u8; llama.cpp
    /// accepts u8 or i8).
    pub const PRECOMPILED_CHARSMAP: &str = "tokenizer.ggml.precompiled_charsmap";
    /// Whether the normalizer lowercases (bool; gguf-py `Keys.Tokenizer.NORMALIZER_LOWERCASE`).
    pub const NORMALIZER_LOWERCASE: &str = "tokenizer.ggml.normalizer.lowercase";
    /// Jinja chat template (string).
    pub const CHAT_TEMPLATE: &str = "tokenizer.chat_template";
    /// Names of the named chat templates (string array; gguf-py `Keys.Tokenizer.CHAT_TEMPLATES`).
    pub const CHAT_TEMPLATES: &str = "tokenizer.chat_templates";

    /// A named chat template: `tokenizer.chat_template.{name}` (gguf-py `CHAT_TEMPLATE_N`).
    pub fn chat_template_named(name: &str) -> String {
        format!("{CHAT_TEMPLATE}.{name}")
    }

    /// The id key of special token `kind` (`bos`, `eos`, `unk`, `sep`, `pad`, `cls`, `mask`,
    /// `eot`, …): `tokenizer.ggml.{kind}_token_id`, with llama.cpp's names for unk/sep/pad.
    pub fn special_id(kind: &str) -> String {
        match kind {
            "unk" => UNKNOWN_ID.into(),
            "sep" => SEPARATOR_ID.into(),
            "pad" => PADDING_ID.into(),
            other => format!("tokenizer.ggml.{other}_token_id"),
        }
    }

    /// `tokenizer.ggml.add_{kind}_token` (bool), e.g. `add_bos_token`.
    pub fn add_token(kind: &str) -> String {
        format!("tokenizer.ggml.add_{kind}_token")
    }
}

/// Fills the `{arch}` of a [`llm`] template.
pub fn arch_key(template: &str, arch: &str) -> String {
    template.replace("{arch}", arch)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_and_specials() {
        assert_eq!(
            arch_key(llm::HEAD_COUNT_KV, "qwen3"),
            "qwen3.attention.head_count_kv"
        );
        assert_eq!(tokenizer::special_id("bos"), "tokenizer.ggml.bos_token_id");
        assert_eq!(
            tokenizer::special_id("sep"),
            "tokenizer.ggml.seperator_token_id"
        );
        assert_eq!(tokenizer::add_token("eos"), "tokenizer.ggml.add_eos_token");
    }
}

/// GGUF token types, the values of `tokenizer.ggml.token_type` (llama.h `llama_token_type`).
pub mod token_type {
    /// An ordinary vocabulary entry.
    pub const NORMAL: i32 = 1;
    /// The unknown token.
    pub const UNKNOWN: i32 = 2;
    /// A control token (BOS, EOS, …): never produced from text unless parse_special.
    pub const CONTROL: i32 = 3;
    /// An added token matched before the model's own splitting.
    pub const USER_DEFINED: i32 = 4;
    /// A placeholder that is never produced.
    pub const UNUSED: i32 = 5;
    /// A byte-fallback token (`<0xAB>`).
    pub const BYTE: i32 = 6;
}

/// Keys of an importance-matrix GGUF (`general.type = imatrix`; llama.cpp
/// `common/imatrix-loader.h` `LLM_KV_IMATRIX_*`).
pub mod imatrix {
    /// The texts the matrix was computed on, as the tool was given them (array of string).
    pub const DATASETS: &str = "imatrix.datasets";
    /// Chunks processed (u32).
    pub const CHUNK_COUNT: &str = "imatrix.chunk_count";
    /// Tokens per chunk (u32).
    pub const CHUNK_SIZE: &str = "imatrix.chunk_size";
}

/// Keys `llama-quantize --imatrix` adds to a quantized file (`tools/quantize/quantize.cpp`
/// `LLM_KV_QUANTIZE_IMATRIX_*`, written as kv overrides: strings truncated to 127 bytes, the
/// counts as u32).
pub mod quantize {
    /// The imatrix path as given on the command line (string).
    pub const IMATRIX_FILE: &str = "quantize.imatrix.file";
    /// The imatrix's first dataset (string).
    pub const IMATRIX_DATASET: &str = "quantize.imatrix.dataset";
    /// Entries in the imatrix (u32).
    pub const IMATRIX_N_ENTRIES: &str = "quantize.imatrix.entries_count";
    /// Chunks the imatrix was computed on (u32; absent when 0).
    pub const IMATRIX_N_CHUNKS: &str = "quantize.imatrix.chunks_count";
    /// The prefix every such key shares.
    pub const IMATRIX_PREFIX: &str = "quantize.imatrix.";
}
