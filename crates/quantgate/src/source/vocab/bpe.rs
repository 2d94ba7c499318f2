//! The GGUF vocabulary of a tokenizer.json folder (byte-level BPE → `gpt2`, WordPiece →
//! `bert`): tokens by id with added tokens, token types, merges, and the pre-tokenizer name
//! from llama.cpp's probe-hash table.

use std::collections::BTreeMap;

use anyhow::{anyhow, bail, Result};
use gguf::keys::token_type;
use serde_json::Value;
use sha2::{Digest, Sha256};

use reference::tokenizer::HfTokenizer;

use super::special::{looks_special, normalizer_lowercase, special_tokens, Vocab};

/// The probe string and hash → name table of `get_vocab_base_pre`, as data
/// (`data/pre_tokenizer_hashes.json`, read from llama.cpp's conversion/base.py).
const PRE_TABLE_JSON: &str = include_str!("../../../data/pre_tokenizer_hashes.json");

/// The pre-tokenizer probe text (`chktxt`).
pub fn chktxt() -> String {
    let v: Value = serde_json::from_str(PRE_TABLE_JSON).expect("embedded table is valid JSON");
    v["chktxt"].as_str().expect("chktxt").to_string()
}

/// `tokenizer.ggml.pre` for a probe hash: the last matching row wins, as in the original chain
/// of independent `if`s.
pub fn pre_name_for_hash(hash: &str) -> Option<String> {
    let v: Value = serde_json::from_str(PRE_TABLE_JSON).expect("embedded table is valid JSON");
    v["table"]
        .as_array()?
        .iter()
        .rfind(|row| row[0].as_str() == Some(hash))
        .and_then(|row| row[1].as_str().map(String::from))
}

/// sha256 of Python's `str(ids)` (`[1, 2, 3]`) for the probe text encoded with
/// add_special_tokens = true.
pub fn probe_hash(tok: &HfTokenizer) -> Result<String> {
    let ids = tok.encode(&chktxt(), true).map_err(|e| anyhow!("{e}"))?;
    let repr = format!(
        "[{}]",
        ids.iter()
            .map(|i| i.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    );
    Ok(Sha256::digest(repr.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect())
}

/// The vocabulary of a tokenizer.json folder (`vocab::build` dispatches here).
pub(super) fn build(
    dir: &std::path::Path,
    tj: &Value,
    tc: &Value,
    config: &Value,
    tok: &HfTokenizer,
) -> Result<Vocab> {
    let mut v = Vocab {
        model: model_name(tj)?,
        ..Vocab::default()
    };

    // Tokens by id: the model vocab plus added tokens.
    let by_id = model_vocab(tj)?;
    let added: Vec<&Value> = tj["added_tokens"]
        .as_array()
        .map(|a| a.iter().collect())
        .unwrap_or_default();
    let (by_id, added_special) = with_added_tokens(by_id, &added)?;
    let n_vocab = fill_tokens(&mut v, &by_id, &added_special, config);
    if v.model == "bert" {
        bert_tokens(&mut v, config);
    } else if let Some(merges) = tj["model"]["merges"].as_array() {
        v.merges = bpe_merges(merges)?;
    }

    // Pre-tokenizer from the probe hash.
    v.probe_hash = probe_hash(tok)?;
    v.pre = pre_name_for_hash(&v.probe_hash).ok_or_else(|| {
        anyhow!(
            "BPE pre-tokenizer was not recognized: probe hash {} is not in llama.cpp's table \
             (tokenizer.ggml.pre cannot be chosen)",
            v.probe_hash
        )
    })?;

    special_tokens(&mut v, tj, tc, config, &added, n_vocab)?;
    v.add_space_prefix = tc["add_prefix_space"].as_bool();
    v.normalizer_lowercase = normalizer_lowercase(&tj["normalizer"]);
    v.chat_templates = crate::source::chat_template::load(dir, tc)?;
    v.notes.extend(v.chat_templates.notes.iter().cloned());
    Ok(v)
}

/// `tokenizer.ggml.model` for tokenizer.json's `model.type`.
fn model_name(tj: &Value) -> Result<String> {
    let model_type = tj["model"]["type"].as_str().unwrap_or("");
    Ok(match model_type {
        "BPE" => "gpt2".into(),
        "WordPiece" => "bert".into(),
        other => bail!("tokenizer.json model.type {other:?} is not supported (BPE, WordPiece)"),
    })
}

/// The model vocab of tokenizer.json by id.
fn model_vocab(tj: &Value) -> Result<BTreeMap<u32, String>> {
    let mut by_id: BTreeMap<u32, String> = BTreeMap::new();
    if let Some(vocab) = tj["model"]["vocab"].as_object() {
        for (t, id) in vocab {
            let id = id
                .as_u64()
                .ok_or_else(|| anyhow!("tokenizer.json model.vocab[{t:?}] is not an id"))?;
            by_id.insert(id as u32, t.clone());
        }
    }
    Ok(by_id)
}

/// Adds the added tokens to `by_id`; also returns each added id's `special` flag.
fn with_added_tokens(
    mut by_id: BTreeMap<u32, String>,
    added: &[&Value],
) -> Result<(BTreeMap<u32, String>, BTreeMap<u32, bool>)> {
    let mut added_special: BTreeMap<u32, bool> = BTreeMap::new();
    for a in added {
        let id = a["id"]
            .as_u64()
            .ok_or_else(|| anyhow!("tokenizer.json added_tokens entry without id"))?
            as u32;
        let content = a["content"].as_str().unwrap_or("").to_string();
        by_id.insert(id, content);
        added_special.insert(id, a["special"].as_bool().unwrap_or(false));
    }
    Ok((by_id, added_special))
}

/// Fills `v.tokens` and `v.token_types` for every id below the vocabulary size; returns that size.
fn fill_tokens(
    v: &mut Vocab,
    by_id: &BTreeMap<u32, String>,
    added_special: &BTreeMap<u32, bool>,
    config: &Value,
) -> u64 {
    let max_id = by_id
        .keys()
        .last()
        .copied()
        .map(|m| m as u64 + 1)
        .unwrap_or(0);
    let n_vocab = config["vocab_size"].as_u64().unwrap_or(max_id).max(max_id);
    if let Some(cv) = config["vocab_size"].as_u64() {
        // token_embd.weight has vocab_size rows: llama.cpp refuses a vocabulary longer than
        // its embedding, and HF would index past it.
        if cv < max_id {
            v.blockers.push(format!(
                "the tokenizer's ids reach {} but config.json field vocab_size is {cv}: token_embd.weight has {cv} rows",
                max_id - 1
            ));
        }
    }
    for i in 0..n_vocab as u32 {
        match by_id.get(&i) {
            None => {
                v.tokens.push(format!("[PAD{i}]"));
                v.token_types.push(token_type::UNUSED);
            }
            Some(t) => {
                let (text, ty) = match added_special.get(&i) {
                    Some(special) if *special || looks_special(t) => {
                        (t.clone(), token_type::CONTROL)
                    }
                    Some(_) => (t.replace('\u{2581}', " "), token_type::USER_DEFINED),
                    None => (t.clone(), token_type::NORMAL),
                };
                v.tokens.push(text);
                v.token_types.push(ty);
            }
        }
    }
    n_vocab
}

/// Rewrites WordPiece tokens to the phantom-space form and sets the token type count.
fn bert_tokens(v: &mut Vocab, config: &Value) {
    // Phantom-space form: CONTROL as is, "##x" → "x", every other x → "▁x".
    for (t, ty) in v.tokens.iter_mut().zip(&v.token_types) {
        if *ty != token_type::CONTROL {
            *t = match t.strip_prefix("##") {
                Some(rest) => rest.to_string(),
                None => format!("\u{2581}{t}"),
            };
        }
    }
    v.token_type_count = Some(config["type_vocab_size"].as_u64().unwrap_or(1) as u32);
}

/// BPE merges as `"a b"` strings, from either tokenizer.json form.
fn bpe_merges(merges: &[Value]) -> Result<Vec<String>> {
    let mut out = Vec::new();
    for m in merges {
        match m {
            Value::String(s) => out.push(s.clone()),
            Value::Array(p) if p.len() == 2 => {
                let part = |x: &Value| x.as_str().unwrap_or("").replace(' ', "\u{0120}");
                out.push(format!("{} {}", part(&p[0]), part(&p[1])));
            }
            other => {
                bail!("tokenizer.json model.merges entry {other} is neither \"a b\" nor [a, b]")
            }
        }
    }
    Ok(out)
}
