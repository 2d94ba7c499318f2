//! The GGUF vocabulary of a SentencePiece folder (gemma3), as llama.cpp's converter builds it
//! (conversion/base.py `_create_vocab_sentencepiece`, `_set_vocab_sentencepiece`; gemma.py
//! `Gemma3Model.set_vocab`):
//! - tokens, scores and types from `tokenizer.model`'s pieces, padded to config.json's
//!   `vocab_size` with `[PAD{i}]`, score −10000, UNUSED; a piece's type is UNKNOWN, CONTROL,
//!   UNUSED or BYTE as SentencePiece marks it, else NORMAL (USER_DEFINED pieces too);
//! - then `added_tokens.json` (USER_DEFINED, score −1000), then tokenizer_config's
//!   `added_tokens_decoder` (CONTROL when `special` or the name looks special, else
//!   USER_DEFINED with `▁` read as a space; score −1000);
//! - `tokenizer.ggml.model` `llama`, `pre` `default`, no merges, `add_space_prefix` false;
//! - special ids and add flags as for every folder (`vocab::special`, gguf-py `SpecialVocab`).

use std::path::Path;

use anyhow::{anyhow, bail, Context, Result};
use serde_json::Value;

use gguf::keys::token_type;

use super::special::{looks_special, normalizer_lowercase, special_tokens, Vocab};
use crate::source::spm::{self, piece_type};

/// Builds the vocabulary of the SentencePiece folder `dir` (`tj` tokenizer.json, `tc`
/// tokenizer_config.json, `config` config.json).
///
/// Errors: `tokenizer.model` missing or malformed (naming the file and the piece), a
/// non-numeric id in `added_tokens.json` or `added_tokens_decoder`, an unreadable chat template.
pub(super) fn build(dir: &Path, tj: &Value, tc: &Value, config: &Value) -> Result<Vocab> {
    let path = dir.join("tokenizer.model");
    let pieces = spm::read_file(
        &path,
        "a gemma3 vocabulary is read from its SentencePiece model",
    )?
    .pieces;
    let n_vocab = config["vocab_size"]
        .as_u64()
        .map(|n| n as usize)
        .unwrap_or(pieces.len());
    let mut v = Vocab {
        model: "llama".into(),
        pre: "default".into(),
        tokens: (0..n_vocab).map(|i| format!("[PAD{i}]")).collect(),
        token_types: vec![token_type::UNUSED; n_vocab],
        ..Vocab::default()
    };
    let mut scores = vec![-10000.0f32; n_vocab];
    if pieces.len() > n_vocab {
        // Dropping them would change the tokenizer; keeping them outgrows token_embd.weight.
        v.blockers.push(format!(
            "{}: {} pieces, but config.json field vocab_size is {n_vocab}: token_embd.weight has {n_vocab} rows",
            path.display(),
            pieces.len()
        ));
    }
    if pieces.len() < n_vocab {
        v.notes.push(format!(
            "{}: {} pieces, config.json vocab_size {n_vocab}: ids from {} are [PAD{{id}}] unless added tokens fill them",
            path.display(),
            pieces.len(),
            pieces.len()
        ));
    }
    for (i, p) in pieces.iter().enumerate().take(n_vocab) {
        v.tokens[i] = p.piece.clone();
        scores[i] = p.score;
        // The converter asks SentencePiece is-unknown/control/unused/byte only: a
        // USER_DEFINED piece is written NORMAL (added_tokens_decoder may retype it below).
        v.token_types[i] = match p.kind {
            piece_type::USER_DEFINED => token_type::NORMAL,
            k => k,
        };
    }
    added_tokens_json(dir, &mut v, &mut scores)?;
    added_tokens_decoder(tc, &mut v, &mut scores)?;
    v.scores = Some(scores);
    let added: Vec<&Value> = tj["added_tokens"]
        .as_array()
        .map(|a| a.iter().collect())
        .unwrap_or_default();
    special_tokens(&mut v, tj, tc, config, &added, n_vocab as u64)?;
    v.add_space_prefix = Some(false);
    v.normalizer_lowercase = normalizer_lowercase(&tj["normalizer"]);
    v.chat_templates = crate::source::chat_template::load(dir, tc)?;
    v.notes.extend(v.chat_templates.notes.iter().cloned());
    Ok(v)
}

/// `added_tokens.json` (`{content: id}`), if present: USER_DEFINED, score −1000.
fn added_tokens_json(dir: &Path, v: &mut Vocab, scores: &mut [f32]) -> Result<()> {
    let path = dir.join("added_tokens.json");
    let Ok(text) = std::fs::read_to_string(&path) else {
        return Ok(());
    };
    let j: Value = serde_json::from_str(&text).with_context(|| path.display().to_string())?;
    for (content, id) in j.as_object().into_iter().flatten() {
        let id = id
            .as_u64()
            .ok_or_else(|| anyhow!("{}: {content:?} has no numeric id", path.display()))?
            as usize;
        if id < v.tokens.len() {
            v.tokens[id] = content.clone();
            scores[id] = -1000.0;
            v.token_types[id] = token_type::USER_DEFINED;
        } else {
            v.notes.push(format!(
                "{}: id {id} ({content:?}) is outside the vocabulary of {} and is not written",
                path.display(),
                v.tokens.len()
            ));
        }
    }
    Ok(())
}

/// tokenizer_config.json `added_tokens_decoder` (`{"id": {content, special, …}}`).
fn added_tokens_decoder(tc: &Value, v: &mut Vocab, scores: &mut [f32]) -> Result<()> {
    let entries = match &tc["added_tokens_decoder"] {
        Value::Null => return Ok(()),
        Value::Object(m) => m,
        other => bail!(
            "tokenizer_config.json: added_tokens_decoder is {}, not an object of id → token",
            kind_of(other)
        ),
    };
    for (id, d) in entries {
        let at = |what: &str| anyhow!("tokenizer_config.json: added_tokens_decoder[{id:?}] {what}");
        let id: usize = id.parse().map_err(|_| at("is not an id"))?;
        let content = d["content"]
            .as_str()
            .ok_or_else(|| at("has no content string"))?;
        let special = match &d["special"] {
            Value::Null => false,
            Value::Bool(b) => *b,
            other => return Err(at(&format!("special = {other} is not a boolean"))),
        };
        if id >= v.tokens.len() {
            v.notes.push(format!(
                "tokenizer_config.json: added_tokens_decoder id {id} ({content:?}) is outside the vocabulary of {} and is not written",
                v.tokens.len()
            ));
            continue;
        }
        (v.tokens[id], v.token_types[id]) = if special || looks_special(content) {
            (content.to_string(), token_type::CONTROL)
        } else {
            (content.replace('\u{2581}', " "), token_type::USER_DEFINED)
        };
        scores[id] = -1000.0;
    }
    Ok(())
}

/// A JSON value's kind, for messages.
fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Array(_) => "a list",
        Value::String(_) => "a string",
        Value::Number(_) => "a number",
        Value::Bool(_) => "a boolean",
        _ => "not an object",
    }
}
