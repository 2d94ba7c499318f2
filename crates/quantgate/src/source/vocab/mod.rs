//! Tokenizer metadata for GGUF, derived from tokenizer.json, tokenizer_config.json and
//! config.json the way convert_hf_to_gguf.py and gguf-py's `SpecialVocab` do
//! (`docs/llamacpp-spec.md` §4.2): tokens by id, token types, merges, the
//! pre-tokenizer name from the probe-hash table, special ids, and add_bos/add_eos derived from
//! the post-processor template — with every disagreement between the sources reported.
//!
//! One builder per tokenizer kind: `bpe` (tokenizer.json: BPE, WordPiece), `sentencepiece`
//! (gemma3's tokenizer.model) and `ugm` (XLM-R's sentencepiece.bpe.model); `special` holds what
//! they share.

mod bpe;
mod sentencepiece;
mod special;
mod ugm;

use anyhow::Result;
use serde_json::Value;

use reference::tokenizer::HfTokenizer;

pub use bpe::{chktxt, pre_name_for_hash, probe_hash};
pub use special::{Vocab, SPECIAL_ORDER};
pub use ugm::SPM_FILE as UGM_SPM_FILE;

/// Whether the folder's vocabulary is XLM-R's SentencePiece Unigram (`t5` in GGUF): every
/// `xlm-roberta` model (llama.cpp's converter reads XLMRobertaModel's vocabulary so whatever its
/// tokenizer.json says), and a `bert` model whose tokenizer.json model is Unigram
/// (multilingual-e5-small, paraphrase-multilingual-*).
pub fn is_ugm(config: &Value, tj: &Value) -> bool {
    match config["model_type"].as_str() {
        Some(super::arch::XLM_ROBERTA_MODEL_TYPE) => true,
        Some("bert") => tj["model"]["type"].as_str() == Some("Unigram"),
        _ => false,
    }
}

/// Builds the vocabulary of the HF folder `dir`. `tj` is tokenizer.json, `tc`
/// tokenizer_config.json (may be empty), `config` config.json; `tok` is the same tokenizer
/// loaded by the `tokenizers` crate. Chat templates come from `dir`'s template files too.
///
/// Errors: a tokenizer model other than BPE/WordPiece (or XLM-R's Unigram, [`is_ugm`]), a probe
/// hash missing from the table, or an unreadable chat template.
pub fn build(
    dir: &std::path::Path,
    tj: &Value,
    tc: &Value,
    config: &Value,
    tok: &HfTokenizer,
) -> Result<Vocab> {
    if config["model_type"].as_str() == Some(super::arch::GEMMA3_MODEL_TYPE) {
        return sentencepiece::build(dir, tj, tc, config);
    }
    if is_ugm(config, tj) {
        return ugm::build(dir, tj, tc, config);
    }
    // llama.cpp's converter reads a phi3 vocabulary from tokenizer.json only for
    // GPT2Tokenizer (Phi-4, Phi-4-mini); otherwise from tokenizer.model as SentencePiece
    // (`Phi3MiniModel.set_vocab`), which quantgate does not build for phi3 yet.
    if config["model_type"].as_str() == Some("phi3") && tc["tokenizer_class"] != "GPT2Tokenizer" {
        anyhow::bail!(
            "{}: tokenizer_config.json: field tokenizer_class = {}: a phi3 model with a SentencePiece vocabulary (Phi-3/3.5-mini) is not supported yet; GPT2Tokenizer (Phi-4, Phi-4-mini) is",
            dir.display(),
            tc["tokenizer_class"]
        );
    }
    bpe::build(dir, tj, tc, config, tok)
}
