//! Gate 1's expectations for a SentencePiece-Unigram (XLM-R, GGUF `t5`) vocabulary, derived
//! without `source::vocab` or `source::spm`: tokens and scores from the `tokenizers` crate's own
//! Unigram model (tokenizer.json, which transformers numbers in fairseq order), the charsmap
//! from tokenizer.json's `Precompiled` normalizer. The converter reads `sentencepiece.bpe.model`
//! instead, so the two source files are held against each other as well.
//!
//! The converter's layout (conversion/bert.py `_xlmroberta_set_vocab`) in terms of those ids:
//! - ids 0–3 are `<s> <pad> </s> <unk>` with score 0, types CONTROL except the unknown token
//!   (UNKNOWN);
//! - from id 4, a piece of the Unigram model keeps its text and score, type NORMAL;
//! - every other id from 4 (added tokens such as `<mask>`, ids past the model up to
//!   config.json's `vocab_size`) is `[PAD{id − 1}]`, score −10000, UNUSED: the converter pads
//!   SentencePiece's list and shifts it by one, and never reads added tokens.

use std::collections::HashSet;

use anyhow::{anyhow, bail, Result};
use gguf::keys::tokenizer as k;
use gguf::{Value, ValueType};
use reference::hf_config::field;
use serde_json::Value as Json;
use tokenizers::ModelWrapper;

/// gguf-py token types (`gguf.TokenType`).
const NORMAL: i32 = 1;
const UNKNOWN: i32 = 2;
const CONTROL: i32 = 3;
const UNUSED: i32 = 5;

/// The `t5` keys of a folder whose tokenizer is `tok` (a Unigram model), `tj` its
/// tokenizer.json, `config` config.json: model, tokens, scores, token types and the charsmap.
///
/// Errors: a model other than Unigram; a `Precompiled` normalizer whose charsmap is not base64.
pub fn keys(tok: &tokenizers::Tokenizer, tj: &Json, config: &Json) -> Result<Vec<(String, Value)>> {
    let ModelWrapper::Unigram(u) = tok.get_model() else {
        bail!("tokenizer.json: model.type is not Unigram");
    };
    let model =
        serde_json::to_value(u).map_err(|e| anyhow!("serializing the Unigram model: {e}"))?;
    let vocab = model["vocab"].as_array().cloned().unwrap_or_default();
    let unk = model["unk_id"].as_u64();
    let added: HashSet<u32> = tok.get_added_tokens_decoder().into_keys().collect();
    let n = field(config, "vocab_size")
        .and_then(Json::as_u64)
        .unwrap_or(0)
        .max(vocab.len() as u64) as usize;
    let (mut tokens, mut scores, mut types) = (Vec::new(), Vec::new(), Vec::new());
    for id in 0..n {
        let entry = vocab
            .get(id)
            .and_then(|e| Some((e[0].as_str()?, e[1].as_f64()?)));
        let (t, s, ty) = match entry {
            Some((t, _)) if id < 4 => {
                let ty = if unk == Some(id as u64) {
                    UNKNOWN
                } else {
                    CONTROL
                };
                (t.to_string(), 0.0, ty)
            }
            Some((t, s)) if !added.contains(&(id as u32)) => (t.to_string(), s as f32, NORMAL),
            _ => (format!("[PAD{}]", id.saturating_sub(1)), -10000.0, UNUSED),
        };
        tokens.push(Value::string(t));
        scores.push(Value::F32(s));
        types.push(Value::I32(ty));
    }
    let mut out = vec![
        (k::MODEL.to_string(), Value::string("t5")),
        (
            k::TOKENS.to_string(),
            Value::Array(ValueType::String, tokens),
        ),
        (k::SCORES.to_string(), Value::Array(ValueType::F32, scores)),
        (
            k::TOKEN_TYPE.to_string(),
            Value::Array(ValueType::I32, types),
        ),
    ];
    if let Some(m) = charsmap(&tj["normalizer"])? {
        out.push((
            k::PRECOMPILED_CHARSMAP.to_string(),
            Value::Array(ValueType::U8, m.into_iter().map(Value::U8).collect()),
        ));
    }
    Ok(out)
}

/// The bytes of the first `Precompiled` normalizer in `n` (itself or inside a `Sequence`).
fn charsmap(n: &Json) -> Result<Option<Vec<u8>>> {
    match n["type"].as_str() {
        Some("Precompiled") => {
            let b64 = n["precompiled_charsmap"].as_str().unwrap_or_default();
            base64(b64).map(Some).ok_or_else(|| {
                anyhow!("tokenizer.json: normalizer.precompiled_charsmap is not base64")
            })
        }
        Some("Sequence") => {
            for m in n["normalizers"].as_array().into_iter().flatten() {
                if let Some(b) = charsmap(m)? {
                    return Ok(Some(b));
                }
            }
            Ok(None)
        }
        _ => Ok(None),
    }
}

/// Standard base64 (RFC 4648 §4, `=` padding) as tokenizers writes the charsmap; `None` for
/// any other character or a bad length.
fn base64(s: &str) -> Option<Vec<u8>> {
    let val = |c: u8| -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        } as u32)
    };
    let body = s.trim_end_matches('=');
    if !s.len().is_multiple_of(4) || s.len() - body.len() > 2 {
        return None;
    }
    let mut out = Vec::with_capacity(body.len() * 3 / 4);
    for chunk in body.as_bytes().chunks(4) {
        let mut acc = 0u32;
        for (i, c) in chunk.iter().enumerate() {
            acc |= val(*c)? << (18 - 6 * i);
        }
        let bytes = acc.to_be_bytes();
        out.extend(&bytes[1..chunk.len()]);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_decodes_rfc4648_vectors() {
        assert_eq!(base64("").unwrap(), b"");
        assert_eq!(base64("Zg==").unwrap(), b"f");
        assert_eq!(base64("Zm8=").unwrap(), b"fo");
        assert_eq!(base64("Zm9vYmFy").unwrap(), b"foobar");
        assert_eq!(base64("AP8/+w==").unwrap(), [0x00, 0xff, 0x3f, 0xfb]);
        assert!(base64("Zm9").is_none());
        assert!(base64("Zm9v!A==").is_none());
    }
}
