//! Loading the HF tokenizer of a folder: `tokenizer.json`, or — for folders that ship only
//! `vocab.json` + `merges.txt` with a Qwen2 tokenizer class (Qwen2.5) — the byte-level BPE
//! that transformers' `Qwen2TokenizerFast` builds from them (NFC, Qwen2 split regex,
//! byte-level, added tokens from tokenizer_config's `added_tokens_decoder`).

use std::path::Path;

use anyhow::{anyhow, bail, Context, Result};
use serde_json::{json, Value};

use reference::tokenizer::HfTokenizer;

use super::hf::read_json;

/// A tokenizer with its tokenizer.json form.
pub struct LoadedTokenizer {
    /// tokenizer.json (as loaded, or as built).
    pub json: Value,
    /// The `tokenizers` crate instance.
    pub tokenizer: HfTokenizer,
    /// How it was obtained, if not from tokenizer.json.
    pub notes: Vec<String>,
}

/// The Qwen2 pre-tokenizer split pattern (transformers `Qwen2TokenizerFast` / tokenizer.json of
/// Qwen2.5 and Qwen3, which ship it verbatim).
const QWEN2_SPLIT: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// Loads the tokenizer of `dir`.
pub fn load(dir: &Path) -> Result<LoadedTokenizer> {
    let tj_path = dir.join("tokenizer.json");
    if crate::paths::present(&tj_path)? {
        let json = read_json(&tj_path)?;
        let tokenizer = HfTokenizer::from_file(&tj_path).map_err(|e| anyhow!("{e}"))?;
        return Ok(LoadedTokenizer {
            json,
            tokenizer,
            notes: Vec::new(),
        });
    }
    let tc = read_json(&dir.join("tokenizer_config.json"))
        .context("no tokenizer.json, and no tokenizer_config.json")?;
    let class = tc["tokenizer_class"].as_str().unwrap_or("");
    if !class.starts_with("Qwen2Tokenizer") {
        bail!(
            "{}: no tokenizer.json, and tokenizer_class {class:?} cannot be rebuilt from vocab files (only Qwen2Tokenizer)",
            dir.display()
        );
    }
    let vocab = read_json(&dir.join("vocab.json"))?;
    crate::paths::ensure_regular_file(&dir.join("merges.txt"))?;
    let merges_text = std::fs::read_to_string(dir.join("merges.txt"))
        .with_context(|| format!("{}: cannot read merges.txt", dir.display()))?;
    let merges: Vec<Value> = merges_text
        .lines()
        .filter(|l| !l.starts_with("#version") && !l.trim().is_empty())
        .map(|l| Value::String(l.to_string()))
        .collect();
    let mut added = Vec::new();
    if let Some(map) = tc["added_tokens_decoder"].as_object() {
        let mut entries: Vec<(u64, &Value)> = map
            .iter()
            .filter_map(|(k, v)| k.parse::<u64>().ok().map(|id| (id, v)))
            .collect();
        entries.sort_by_key(|e| e.0);
        for (id, v) in entries {
            added.push(json!({
                "id": id,
                "content": v["content"],
                "single_word": v["single_word"].as_bool().unwrap_or(false),
                "lstrip": v["lstrip"].as_bool().unwrap_or(false),
                "rstrip": v["rstrip"].as_bool().unwrap_or(false),
                "normalized": v["normalized"].as_bool().unwrap_or(false),
                "special": v["special"].as_bool().unwrap_or(false),
            }));
        }
    }
    let json = json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": added,
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": QWEN2_SPLIT}, "behavior": "Isolated", "invert": false},
            {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false}
        ]},
        "post_processor": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false},
        "decoder": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false},
        "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
                  "vocab": vocab, "merges": merges}
    });
    let tokenizer: tokenizers::Tokenizer =
        serde_json::from_value::<tokenizers::Tokenizer>(json.clone()).map_err(|e| {
            anyhow!(
                "{}: building the Qwen2 tokenizer from vocab.json/merges.txt: {e}",
                dir.display()
            )
        })?;
    Ok(LoadedTokenizer {
        json,
        tokenizer: HfTokenizer::from_tokenizer(tokenizer).map_err(|e| anyhow!("{e}"))?,
        notes: vec!["no tokenizer.json: rebuilt from vocab.json + merges.txt as transformers' Qwen2TokenizerFast does".into()],
    })
}
