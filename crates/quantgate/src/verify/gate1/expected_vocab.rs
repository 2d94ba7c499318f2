//! Gate 1's tokenizer expectations derived without `source::vocab`: from the `tokenizers`
//! crate's runtime tokenizer (its vocabulary, added-token table, merge ranks and normalizer
//! behaviour) and a second reading of tokenizer_config.json, config.json and the chat template
//! files. [`super::expected::merge`] folds them into the converter's expectation, so a key the
//! converter's JSON walk misreads cannot be missing or wrong in the file and the expectation at
//! once.
//!
//! Rules are gguf-py's (`gguf/vocab.py` `SpecialVocab`) and llama.cpp's converter's
//! (`conversion/base.py` `get_vocab_base`, `BertModel.set_vocab`):
//! * `tokenizer.ggml.model`: `gpt2` for a BPE model, `bert` for WordPiece, `t5` for
//!   SentencePiece Unigram (XLM-R; `super::expected_ugm`).
//! * tokens by id, ids without a token padded to config.json's `vocab_size` as `[PAD{id}]`
//!   (type 5, unused); added tokens are control (3) when special or special-looking, else
//!   user-defined (4); every other token is normal (1). WordPiece tokens take the
//!   phantom-space form (`##x` → `x`, `x` → `▁x`), control tokens as they are.
//! * merges in rank order as `"a b"`.
//! * special ids: tokenizer_config.json's `{kind}_token` contents through the vocabulary; CLS
//!   stands for a missing BOS and SEP for a missing EOS. A token the post-processor appends to
//!   a single text is the EOS, and a different configured EOS the EOT (gguf-py's
//!   TemplateProcessing rule; Qwen3-Embedding appends `<|endoftext|>` while its
//!   tokenizer_config names `<|im_end|>`). The add_bos/add_eos flags stay with the converter
//!   and Gate 2's add_special token checks, which run the post-processor itself.
//! * `tokenizer.ggml.normalizer.lowercase` for WordPiece: whether the normalizer lowercases.
//! * `tokenizer.chat_template`: the default template, the last of tokenizer_config.json,
//!   chat_template.json and chat_template.jinja (transformers' loading order).

use std::collections::HashMap;
use std::path::Path;

use anyhow::{anyhow, Context, Result};
use gguf::keys::tokenizer as k;
use gguf::{Value, ValueType};
use reference::hf_config::field;
use serde_json::Value as Json;
use tokenizers::{ModelWrapper, NormalizedString, Normalizer};

/// gguf-py token types (`gguf.TokenType`).
const NORMAL: i32 = 1;
const CONTROL: i32 = 3;
const USER_DEFINED: i32 = 4;
const UNUSED: i32 = 5;

/// The tokenizer keys of the HF folder `dir`, from `tok` (the folder's tokenizer as the
/// `tokenizers` crate runs it), `tc` (tokenizer_config.json, `Null` when absent) and `config`.
///
/// Errors: a tokenizer model other than BPE or WordPiece; an unreadable chat template file.
pub fn tokenizer_keys(
    dir: &Path,
    tok: &tokenizers::Tokenizer,
    tc: &Json,
    config: &Json,
) -> Result<Vec<(String, Value)>> {
    let wordpiece = match tok.get_model() {
        ModelWrapper::BPE(_) => false,
        ModelWrapper::WordPiece(_) => true,
        ModelWrapper::Unigram(_) => return unigram_keys(dir, tok, tc, config),
        _ => {
            return Err(anyhow!(
                "tokenizer.json: model.type is neither BPE, WordPiece nor Unigram"
            ))
        }
    };
    let model_type = field(config, "model_type").and_then(Json::as_str);
    if model_type == Some(crate::source::arch::GEMMA3_MODEL_TYPE) {
        return sentencepiece_keys(dir, tok, tc, config);
    }
    let mut out = Vec::new();
    let model = if wordpiece { "bert" } else { "gpt2" };
    out.push((k::MODEL.to_string(), Value::string(model)));
    let (tokens, types) = tokens(tok, config, wordpiece);
    let n_vocab = tokens.len() as u32;
    out.push((k::TOKENS.to_string(), strings(tokens)));
    out.push((
        k::TOKEN_TYPE.to_string(),
        Value::Array(ValueType::I32, types.into_iter().map(Value::I32).collect()),
    ));
    if let ModelWrapper::BPE(bpe) = tok.get_model() {
        let merges = merges(bpe)?;
        if !merges.is_empty() {
            out.push((k::MERGES.to_string(), strings(merges)));
        }
    }
    for (kind, id) in special_ids(tok, tc) {
        if id < n_vocab {
            out.push((k::special_id(kind), Value::U32(id)));
        }
    }
    if wordpiece {
        if let Some(n) = tok.get_normalizer() {
            out.push((
                k::NORMALIZER_LOWERCASE.to_string(),
                Value::Bool(lowercases(n)),
            ));
        }
    }
    if let Some(t) = default_chat_template(dir, tc)? {
        out.push((k::CHAT_TEMPLATE.to_string(), Value::string(t)));
    }
    Ok(out)
}

/// The keys of a SentencePiece folder (gemma3) this reading can state: `llama`, the token
/// texts by id (the fast tokenizer's vocabulary holds the same pieces under the same ids), the
/// special ids and the chat template. Scores and token types exist only in `tokenizer.model`;
/// they stay with the converter's reading.
fn sentencepiece_keys(
    dir: &Path,
    tok: &tokenizers::Tokenizer,
    tc: &Json,
    config: &Json,
) -> Result<Vec<(String, Value)>> {
    let mut out = vec![(k::MODEL.to_string(), Value::string("llama"))];
    let (tokens, _) = tokens(tok, config, false);
    let n_vocab = tokens.len() as u32;
    out.push((k::TOKENS.to_string(), strings(tokens)));
    specials_and_template(&mut out, (dir, tok, tc), n_vocab)?;
    Ok(out)
}

/// Appends the special ids below `n_vocab` and the default chat template.
fn specials_and_template(
    out: &mut Vec<(String, Value)>,
    (dir, tok, tc): (&Path, &tokenizers::Tokenizer, &Json),
    n_vocab: u32,
) -> Result<()> {
    for (kind, id) in special_ids(tok, tc) {
        if id < n_vocab {
            out.push((k::special_id(kind), Value::U32(id)));
        }
    }
    if let Some(t) = default_chat_template(dir, tc)? {
        out.push((k::CHAT_TEMPLATE.to_string(), Value::string(t)));
    }
    Ok(())
}

/// The keys of a SentencePiece-Unigram folder (XLM-R, `t5`): [`super::expected_ugm::keys`],
/// the special ids and the chat template.
fn unigram_keys(
    dir: &Path,
    tok: &tokenizers::Tokenizer,
    tc: &Json,
    config: &Json,
) -> Result<Vec<(String, Value)>> {
    let tj = reference::read_json(&dir.join("tokenizer.json"))?;
    let mut out = super::expected_ugm::keys(tok, &tj, config)?;
    let n_vocab = match out.iter().find(|(key, _)| key == k::TOKENS) {
        Some((_, Value::Array(_, t))) => t.len() as u32,
        _ => 0,
    };
    specials_and_template(&mut out, (dir, tok, tc), n_vocab)?;
    Ok(out)
}

fn strings(v: Vec<String>) -> Value {
    Value::Array(
        ValueType::String,
        v.into_iter().map(Value::string).collect(),
    )
}

/// Tokens and token types by id, padded to config.json's `vocab_size`.
fn tokens(tok: &tokenizers::Tokenizer, config: &Json, wordpiece: bool) -> (Vec<String>, Vec<i32>) {
    let by_token = tok.get_vocab(true);
    let mut by_id: HashMap<u32, &str> = HashMap::with_capacity(by_token.len());
    for (t, id) in &by_token {
        by_id.insert(*id, t);
    }
    let added = tok.get_added_tokens_decoder();
    let max_id = by_id.keys().max().map_or(0, |m| *m as u64 + 1);
    let n = field(config, "vocab_size")
        .and_then(Json::as_u64)
        .map_or(max_id, |v| v.max(max_id));
    let mut tokens = Vec::with_capacity(n as usize);
    let mut types = Vec::with_capacity(n as usize);
    for id in 0..n as u32 {
        let (t, ty) = match (by_id.get(&id), added.get(&id)) {
            (None, _) => (format!("[PAD{id}]"), UNUSED),
            (Some(t), Some(a)) if a.special || looks_special(t) => (t.to_string(), CONTROL),
            // gguf-py writes user-defined tokens with SentencePiece's ▁ as a space.
            (Some(t), Some(_)) => (t.replace('\u{2581}', " "), USER_DEFINED),
            (Some(t), None) => (t.to_string(), NORMAL),
        };
        let t = match (wordpiece, ty) {
            (true, CONTROL) | (false, _) => t,
            (true, _) => t
                .strip_prefix("##")
                .map_or_else(|| format!("\u{2581}{t}"), str::to_string),
        };
        tokens.push(t);
        types.push(ty);
    }
    (tokens, types)
}

/// llama.cpp's converter's `does_token_look_special`.
fn looks_special(t: &str) -> bool {
    let wrapped = |l: &str, r: &str| t.starts_with(l) && t.ends_with(r);
    wrapped("<|", "|>")
        || wrapped("<｜", "｜>")
        || wrapped("<unused", ">")
        || matches!(t, "<pad>" | "<mask>" | "<2mass>" | "[@BOS@]")
}

/// The merges in rank order, from the `tokenizers` crate's own serialization of the model.
fn merges(bpe: &tokenizers::models::bpe::BPE) -> Result<Vec<String>> {
    let v = serde_json::to_value(bpe).context("serializing the BPE model")?;
    let list = v["merges"].as_array().cloned().unwrap_or_default();
    list.iter()
        .map(|m| match (m[0].as_str(), m[1].as_str()) {
            (Some(a), Some(b)) => Ok(format!("{a} {b}")),
            _ => Err(anyhow!("tokenizers serialized a merge as {m}")),
        })
        .collect()
}

/// Special ids: tokenizer_config.json's contents through the vocabulary, and the token the
/// post-processor appends to a single text (seen by running it), which gguf-py makes the EOS,
/// a different configured EOS becoming the EOT.
fn special_ids(tok: &tokenizers::Tokenizer, tc: &Json) -> Vec<(&'static str, u32)> {
    let content = |kind: &str| match &tc[format!("{kind}_token")] {
        Json::String(s) => Some(s.clone()),
        Json::Object(o) => o.get("content").and_then(Json::as_str).map(String::from),
        _ => None,
    };
    let mut ids: Vec<(&'static str, u32)> = Vec::new();
    for kind in ["bos", "eos", "unk", "sep", "pad", "mask"] {
        let stand_in = match kind {
            "bos" => content("cls"),
            "eos" => content("sep"),
            _ => None,
        };
        if let Some(id) = content(kind).or(stand_in).and_then(|c| tok.token_to_id(&c)) {
            ids.push((kind, id));
        }
    }
    if let Some(last) = appended_last(tok) {
        let eos = ids.iter().position(|(k, _)| *k == "eos");
        match eos.map(|i| ids[i].1) {
            Some(configured) if configured != last => {
                ids[eos.unwrap_or(0)].1 = last;
                ids.push(("eot", configured));
            }
            Some(_) => {}
            None => ids.push(("eos", last)),
        }
    }
    ids
}

/// The id the post-processor appends after a single text, if any.
fn appended_last(tok: &tokenizers::Tokenizer) -> Option<u32> {
    let ids = |special: bool| tok.encode("a", special).ok().map(|e| e.get_ids().to_vec());
    let (plain, with) = (ids(false)?, ids(true)?);
    (with.len() > plain.len() && !with.ends_with(&plain))
        .then(|| with.last().copied())
        .flatten()
}

/// Whether `n` lowercases (checked on a text, not read from the normalizer's type).
fn lowercases(n: &impl Normalizer) -> bool {
    let mut s = NormalizedString::from("AZ");
    n.normalize(&mut s).is_ok() && s.get() == "az"
}

/// The default chat template: chat_template.jinja over chat_template.json over
/// tokenizer_config.json.
fn default_chat_template(dir: &Path, tc: &Json) -> Result<Option<String>> {
    let jinja = dir.join("chat_template.jinja");
    if reference::present(&jinja)? {
        let t = std::fs::read_to_string(&jinja)
            .with_context(|| format!("{}: not readable as UTF-8", jinja.display()))?;
        return Ok(Some(t));
    }
    let json = dir.join("chat_template.json");
    if reference::present(&json)? {
        let v = reference::read_json(&json)?;
        if let Some(t) = default_of(&v["chat_template"]) {
            return Ok(Some(t));
        }
    }
    Ok(default_of(&tc["chat_template"]))
}

/// The default template of a `chat_template` field: the string, or the `default` entry of a
/// `{name, template}` list.
fn default_of(v: &Json) -> Option<String> {
    match v {
        Json::String(s) => Some(s.clone()),
        Json::Array(list) => list
            .iter()
            .find(|e| e["name"] == "default")
            .and_then(|e| e["template"].as_str())
            .map(String::from),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_special_looking_rule_matches_the_converters() {
        assert!(looks_special("<|im_end|>"));
        assert!(looks_special("<unused12>"));
        assert!(!looks_special("<s>"));
        assert!(!looks_special("<|im_end"));
    }

    #[test]
    fn a_named_list_gives_its_default_template() {
        let v = serde_json::json!([{"name": "tool_use", "template": "T"},
                                   {"name": "default", "template": "D"}]);
        assert_eq!(default_of(&v).as_deref(), Some("D"));
        assert_eq!(default_of(&Json::Null), None);
    }
}
