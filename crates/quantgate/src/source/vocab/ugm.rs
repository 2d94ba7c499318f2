//! The GGUF vocabulary of an XLM-RoBERTa SentencePiece-Unigram folder, as llama.cpp's converter
//! builds it from `sentencepiece.bpe.model` (conversion/bert.py `_xlmroberta_set_vocab`, the
//! SentencePiece path; llama.cpp runs it with its UGM tokenizer):
//! - the model must be Unigram (`trainer_spec.model_type` 1);
//! - tokens, scores and types from the pieces, padded to `max(config vocab_size, pieces)` with
//!   `[PAD{i}]`, score −10000, UNUSED; a piece's type is UNKNOWN, CONTROL, UNUSED or BYTE as
//!   SentencePiece marks it, else NORMAL;
//! - then fairseq's realignment, as transformers' `XLMRobertaTokenizer` numbers ids:
//!   `[<s>, <pad>, </s>, <unk>]` (CONTROL, CONTROL, CONTROL, UNKNOWN; score 0) followed by
//!   entries `3 .. n−1` of the padded list, so every piece from id 3 moves up by one and the
//!   last padded entry falls off (XLM-R's `<mask>`, id 250001, is written `[PAD250000]`);
//! - `tokenizer.ggml.model` `t5`, `pre` `default`; `add_space_prefix` and
//!   `remove_extra_whitespaces` from `normalizer_spec`'s `add_dummy_prefix` and
//!   `remove_extra_whitespaces`; `precompiled_charsmap` verbatim when not empty;
//!   `token_type_count` from config.json's `type_vocab_size` (1 when absent);
//! - special ids and add flags as for every folder (`vocab::special`, gguf-py `SpecialVocab`).
//!
//! The converter reads only XLMRobertaModel this way; quantgate also reads a `BertModel` whose
//! tokenizer is this Unigram model (multilingual-e5-small, paraphrase-multilingual-*), which the
//! converter refuses for want of a BPE pre-tokenizer hash.

use std::path::Path;

use anyhow::{bail, Result};
use serde_json::Value;

use gguf::keys::token_type;

use super::special::{normalizer_lowercase, special_tokens, Vocab};
use crate::source::spm::{self, piece_type};

/// The SentencePiece model file of an XLM-R folder.
pub const SPM_FILE: &str = "sentencepiece.bpe.model";

/// The fairseq head that replaces SentencePiece's first three ids: (token, type).
const FAIRSEQ_HEAD: [(&str, i32); 4] = [
    ("<s>", token_type::CONTROL),
    ("<pad>", token_type::CONTROL),
    ("</s>", token_type::CONTROL),
    ("<unk>", token_type::UNKNOWN),
];

/// Builds the vocabulary of the XLM-R folder `dir` (`tj` tokenizer.json, `tc`
/// tokenizer_config.json, `config` config.json).
///
/// Errors: `sentencepiece.bpe.model` missing (the converter's tokenizer.json-only path is not
/// supported), malformed (naming the file and the piece or field), or not Unigram; an
/// unreadable chat template.
pub(super) fn build(dir: &Path, tj: &Value, tc: &Value, config: &Value) -> Result<Vocab> {
    let path = dir.join(SPM_FILE);
    let model = spm::read_file(
        &path,
        "a SentencePiece-Unigram (XLM-R) vocabulary is read from it (a folder with tokenizer.json alone is not supported yet)",
    )?;
    if model.model_type != spm::MODEL_TYPE_UNIGRAM {
        bail!(
            "{}: trainer_spec.model_type is {}, not UNIGRAM (1): llama.cpp's UGM tokenizer runs Unigram models only",
            path.display(),
            model.model_type
        );
    }
    let n_vocab = config["vocab_size"]
        .as_u64()
        .map_or(0, |n| n as usize)
        .max(model.pieces.len());
    let (tokens, scores, token_types) = realigned(&model.pieces, n_vocab);
    let n = &model.normalizer;
    let mut v = Vocab {
        model: "t5".into(),
        pre: "default".into(),
        tokens,
        token_types,
        scores: Some(scores),
        add_space_prefix: Some(n.add_dummy_prefix),
        remove_extra_whitespaces: Some(n.remove_extra_whitespaces),
        precompiled_charsmap: (!n.precompiled_charsmap.is_empty())
            .then(|| n.precompiled_charsmap.clone()),
        token_type_count: Some(config["type_vocab_size"].as_u64().unwrap_or(1) as u32),
        ..Vocab::default()
    };
    let added: Vec<&Value> = tj["added_tokens"]
        .as_array()
        .map(|a| a.iter().collect())
        .unwrap_or_default();
    special_tokens(&mut v, tj, tc, config, &added, n_vocab as u64)?;
    v.normalizer_lowercase = normalizer_lowercase(&tj["normalizer"]);
    v.chat_templates = crate::source::chat_template::load(dir, tc)?;
    v.notes.extend(v.chat_templates.notes.iter().cloned());
    Ok(v)
}

/// Tokens, scores and types of `pieces` padded to `n_vocab` and realigned to fairseq's ids
/// (see the module doc). `n_vocab` ≥ the piece count.
fn realigned(pieces: &[spm::Piece], n_vocab: usize) -> (Vec<String>, Vec<f32>, Vec<i32>) {
    let mut tokens: Vec<String> = (0..n_vocab).map(|i| format!("[PAD{i}]")).collect();
    let mut scores = vec![-10000.0f32; n_vocab];
    let mut types = vec![token_type::UNUSED; n_vocab];
    for (i, p) in pieces.iter().enumerate() {
        tokens[i] = p.piece.clone();
        scores[i] = p.score;
        // The converter asks SentencePiece is-unknown/control/unused/byte only.
        types[i] = match p.kind {
            piece_type::USER_DEFINED => token_type::NORMAL,
            k => k,
        };
    }
    // Python's `head + list[3:-1]`: an empty slice when the list is shorter than five.
    let tail = if n_vocab > 4 { 3..n_vocab - 1 } else { 0..0 };
    let mut t: Vec<String> = FAIRSEQ_HEAD.iter().map(|(s, _)| s.to_string()).collect();
    t.extend(tokens[tail.clone()].iter().cloned());
    let mut s = vec![0.0f32; FAIRSEQ_HEAD.len()];
    s.extend(&scores[tail.clone()]);
    let mut k: Vec<i32> = FAIRSEQ_HEAD.iter().map(|(_, k)| *k).collect();
    k.extend(&types[tail]);
    (t, s, k)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(piece: &str, score: f32, kind: i32) -> spm::Piece {
        spm::Piece {
            piece: piece.into(),
            score,
            kind,
        }
    }

    #[test]
    fn realignment_moves_pieces_up_one_and_drops_the_last_padding() {
        // XLM-R's model: <unk>, <s>, </s>, then the pieces.
        let pieces = [
            p("<unk>", 0.0, piece_type::UNKNOWN),
            p("<s>", 0.0, piece_type::CONTROL),
            p("</s>", 0.0, piece_type::CONTROL),
            p(",", -3.5, piece_type::NORMAL),
            p("▁the", -4.0, piece_type::USER_DEFINED),
        ];
        // config vocab_size 7 (XLM-R: 250002 for 250000 pieces).
        let (t, s, k) = realigned(&pieces, 7);
        assert_eq!(t, ["<s>", "<pad>", "</s>", "<unk>", ",", "▁the", "[PAD5]"]);
        assert_eq!(s, [0.0, 0.0, 0.0, 0.0, -3.5, -4.0, -10000.0]);
        assert_eq!(k, [3, 3, 3, 2, 1, 1, 5]);
        // Shorter than the head: the head alone, as Python's slice gives.
        assert_eq!(realigned(&pieces[..2], 2).0.len(), 4);
    }
}
