//! The tokenizer metadata a conversion writes ([`Vocab`]), and its special tokens: ids,
//! add_bos/add_eos/add_sep from tokenizer_config.json, the post-processor template and
//! config.json, as gguf-py's `SpecialVocab` derives them, with every disagreement reported.

use std::collections::BTreeMap;

use anyhow::Result;
use serde_json::Value;

/// Tokenizer metadata ready to write.
#[derive(Clone, Debug, Default)]
pub struct Vocab {
    /// `tokenizer.ggml.model`: `gpt2` (byte-level BPE), `bert` (WordPiece), `llama`
    /// (SentencePiece) or `t5` (SentencePiece Unigram, llama.cpp's UGM).
    pub model: String,
    /// `tokenizer.ggml.pre`.
    pub pre: String,
    /// The probe hash `pre` was looked up by.
    pub probe_hash: String,
    /// Token strings by id.
    pub tokens: Vec<String>,
    /// Token types by id.
    pub token_types: Vec<i32>,
    /// `tokenizer.ggml.scores` by id (SentencePiece vocabularies only).
    pub scores: Option<Vec<f32>>,
    /// BPE merges (`"a b"`).
    pub merges: Vec<String>,
    /// Special ids by gguf-py name: bos, eos, eot, unk, sep, pad, mask.
    pub special: BTreeMap<&'static str, u32>,
    /// add_bos / add_eos / add_sep flags that were decided (absent ones are not written).
    pub add: BTreeMap<&'static str, bool>,
    /// `tokenizer.ggml.add_space_prefix`, from tokenizer_config `add_prefix_space`.
    pub add_space_prefix: Option<bool>,
    /// `tokenizer.chat_template` (default) and `tokenizer.chat_template.NAME`.
    pub chat_templates: crate::source::chat_template::ChatTemplates,
    /// `tokenizer.ggml.token_type_count` (bert).
    pub token_type_count: Option<u32>,
    /// `tokenizer.ggml.normalizer.lowercase`, from tokenizer.json's normalizer (gguf-py
    /// `SpecialVocab._parse_normalizer`: `Lowercase`, `BertNormalizer.lowercase`, or inside a
    /// `Sequence`).
    pub normalizer_lowercase: Option<bool>,
    /// `tokenizer.ggml.remove_extra_whitespaces` (UGM), from the SentencePiece normalizer.
    pub remove_extra_whitespaces: Option<bool>,
    /// `tokenizer.ggml.precompiled_charsmap` (UGM): the SentencePiece normalizer's compiled
    /// table, verbatim.
    pub precompiled_charsmap: Option<Vec<u8>>,
    /// Disagreements between the sources, reported (not fatal).
    pub notes: Vec<String>,
    /// Cases GGUF cannot express: the conversion must stop.
    pub blockers: Vec<String>,
}

/// Order in which gguf-py writes special ids.
pub const SPECIAL_ORDER: &[&str] = &["bos", "eos", "eot", "unk", "sep", "pad", "mask"];

pub(super) fn looks_special(t: &str) -> bool {
    (t.starts_with("<|") && t.ends_with("|>"))
        || (t.starts_with("<｜") && t.ends_with("｜>"))
        || matches!(t, "<pad>" | "<mask>" | "<2mass>" | "[@BOS@]")
        || (t.starts_with("<unused") && t.ends_with('>'))
}

/// Content of a tokenizer_config special entry (a string or `{content: …}`).
fn entry_content(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Object(o) => o.get("content").and_then(|c| c.as_str()).map(String::from),
        _ => None,
    }
}

/// The lowercase flag of a tokenizers normalizer, as gguf-py reads it.
pub(super) fn normalizer_lowercase(n: &Value) -> Option<bool> {
    match n["type"].as_str()? {
        "Lowercase" => Some(true),
        "BertNormalizer" => n["lowercase"].as_bool(),
        "Sequence" => n["normalizers"]
            .as_array()?
            .iter()
            .rev()
            .find_map(normalizer_lowercase),
        _ => None,
    }
}

/// Special ids, add flags, notes and blockers from tokenizer_config, the post-processor and
/// config.json.
pub(super) fn special_tokens(
    v: &mut Vocab,
    tj: &Value,
    tc: &Value,
    config: &Value,
    added: &[&Value],
    n_vocab: u64,
) -> Result<()> {
    let mut content = config_contents(tc);
    let template_eos = post_processor(v, tj, &mut content);
    apply_template_eos(v, &template_eos, &mut content);
    // Explicit booleans in tokenizer_config override the template.
    add_flag_overrides(v, tc);
    // Ids: a first value wins; ids outside the vocabulary are dropped.
    ids_from_contents(v, &content, added, n_vocab);
    // config.json fills kinds not set yet.
    ids_from_config(v, config, n_vocab);
    if v.model == "bert" {
        wordpiece_specials(v, &content, &template_eos, added);
    }
    Ok(())
}

/// The id of the added token whose content is `content`.
fn added_id(added: &[&Value], content: &str) -> Option<u32> {
    added
        .iter()
        .find(|a| a["content"].as_str() == Some(content))
        .and_then(|a| a["id"].as_u64())
        .map(|i| i as u32)
}

/// Special token contents by kind from tokenizer_config, with CLS/SEP standing in for BOS/EOS.
fn config_contents(tc: &Value) -> BTreeMap<&'static str, String> {
    let mut content: BTreeMap<&'static str, String> = BTreeMap::new();
    for kind in ["bos", "eos", "unk", "sep", "pad", "cls", "mask"] {
        if let Some(c) = entry_content(&tc[format!("{kind}_token")]) {
            content.insert(kind, c);
        }
    }
    if !content.contains_key("bos") {
        if let Some(c) = content.get("cls").cloned() {
            content.insert("bos", c);
        }
    }
    if !content.contains_key("eos") {
        if let Some(c) = content.get("sep").cloned() {
            content.insert("eos", c);
        }
    }
    content
}

/// Applies the post-processor's templates; returns the token the single template appends.
fn post_processor(
    v: &mut Vocab,
    tj: &Value,
    content: &mut BTreeMap<&'static str, String>,
) -> Option<String> {
    // Post-processor templates (also inside a Sequence).
    let pp = &tj["post_processor"];
    let processors: Vec<&Value> = match pp["processors"].as_array() {
        Some(list) => list.iter().collect(),
        None => vec![pp],
    };
    let mut template_eos: Option<String> = None;
    for p in processors {
        match p["type"].as_str() {
            Some("RobertaProcessing") | Some("BertProcessing") => {
                v.add.insert("bos", true);
                v.add.insert("eos", true);
                if p["type"] == "RobertaProcessing" {
                    v.add.insert("sep", true);
                }
            }
            Some("TemplateProcessing") => {
                single_template(v, p, content, &mut template_eos);
                pair_template(v, p, content, &template_eos);
            }
            _ => {}
        }
    }
    template_eos
}

/// add_bos / add_eos and the appended token from a TemplateProcessing `single` template.
fn single_template(
    v: &mut Vocab,
    p: &Value,
    content: &mut BTreeMap<&'static str, String>,
    template_eos: &mut Option<String>,
) {
    let single: Vec<&Value> = p["single"]
        .as_array()
        .map(|a| a.iter().collect())
        .unwrap_or_default();
    let special_at = |i: usize| {
        single
            .get(i)
            .and_then(|x| x["SpecialToken"]["id"].as_str())
            .map(String::from)
    };
    let n_special = single
        .iter()
        .filter(|x| x.get("SpecialToken").is_some())
        .count();
    if single.len() > 1 {
        let first = special_at(0);
        let last = special_at(single.len() - 1);
        if let Some(f) = &first {
            let is_bos = content.get("bos") == Some(f) || content.get("cls") == Some(f);
            if !is_bos && content.contains_key("bos") {
                v.blockers.push(format!(
                    "the template prepends {f:?}, which is neither the BOS {:?} nor CLS: llama.cpp can only prepend BOS",
                    content.get("bos").cloned().unwrap_or_default()
                ));
            }
            content.entry("bos").or_insert_with(|| f.clone());
            v.add.insert("bos", true);
        }
        if let Some(l) = &last {
            v.add.insert("eos", true);
            *template_eos = Some(l.clone());
        }
        let ends = first.is_some() as usize + last.is_some() as usize;
        if n_special > ends {
            v.blockers.push(format!(
                "the single-sequence template adds {n_special} special tokens; GGUF can express at most a BOS and an EOS"
            ));
        }
    }
}

/// add_sep from a TemplateProcessing `pair` template.
fn pair_template(
    v: &mut Vocab,
    p: &Value,
    content: &BTreeMap<&'static str, String>,
    template_eos: &Option<String>,
) {
    // add_sep from the pair template: a separator between A and B that is sep/eos,
    // with no trailing special in `single`, or two middle specials.
    let pair: Vec<&Value> = p["pair"]
        .as_array()
        .map(|a| a.iter().collect())
        .unwrap_or_default();
    if !pair.is_empty() {
        let pos_a = pair.iter().position(|x| x["Sequence"]["id"] == "A");
        let pos_b = pair.iter().position(|x| x["Sequence"]["id"] == "B");
        if let (Some(a), Some(b)) = (pos_a, pos_b) {
            // gguf-py decides add_sep only when something stands between A and B; a bare
            // `[A, B]` pair (transformers v5's default template) leaves it unset.
            if b <= a + 1 {
                return;
            }
            let middle: Vec<String> = pair[a + 1..b]
                .iter()
                .filter_map(|x| x["SpecialToken"]["id"].as_str().map(String::from))
                .collect();
            let trailing_single = template_eos.is_some();
            let sep_like = middle.len() == 1
                && (content.get("sep") == Some(&middle[0])
                    || content.get("eos") == Some(&middle[0]));
            v.add
                .insert("sep", (sep_like && !trailing_single) || middle.len() == 2);
        }
    }
}

/// Makes the template's appended token the EOS; a different configured EOS becomes EOT.
fn apply_template_eos(
    v: &mut Vocab,
    template_eos: &Option<String>,
    content: &mut BTreeMap<&'static str, String>,
) {
    if let Some(t) = template_eos {
        match content.get("eos").cloned() {
            Some(e) if &e != t => {
                v.notes.push(format!(
                    "the post-processor template appends {t:?} but tokenizer_config eos_token is {e:?}: \
                     EOS is set to the appended token and {e:?} becomes EOT"
                ));
                content.insert("eot", e);
                content.insert("eos", t.clone());
            }
            None => {
                content.insert("eos", t.clone());
            }
            _ => {}
        }
    }
}

/// Applies tokenizer_config's explicit add_bos/add_eos/add_sep booleans.
fn add_flag_overrides(v: &mut Vocab, tc: &Value) {
    for kind in ["bos", "eos", "sep"] {
        if let Some(b) = tc[format!("add_{kind}_token")].as_bool() {
            if let Some(t) = v.add.get(kind).copied().filter(|t| *t != b) {
                v.notes.push(format!(
                    "tokenizer_config add_{kind}_token = {b} overrides the template ({t}); HF's fast tokenizer follows the template"
                ));
            }
            v.add.insert(kind, b);
        }
    }
}

/// Sets special ids from the token contents via the added tokens.
fn ids_from_contents(
    v: &mut Vocab,
    content: &BTreeMap<&'static str, String>,
    added: &[&Value],
    n_vocab: u64,
) {
    for (kind, c) in content {
        let Some(kind) = SPECIAL_ORDER.iter().find(|k| *k == kind) else {
            continue;
        };
        match added_id(added, c) {
            Some(id) if (id as u64) < n_vocab => {
                v.special.entry(kind).or_insert(id);
            }
            _ => v.notes.push(format!(
                "{kind}_token {c:?} is not an added token; id not set from tokenizer_config"
            )),
        }
    }
}

/// Sets special ids not set yet from config.json's `*_token_id`, noting disagreements.
fn ids_from_config(v: &mut Vocab, config: &Value, n_vocab: u64) {
    for kind in ["bos", "eos", "unk", "sep", "pad", "mask"] {
        let key = format!("{kind}_token_id");
        let cv = config[&key]
            .as_u64()
            .or_else(|| config["text_config"][&key].as_u64());
        let Some(id) = cv.filter(|i| *i < n_vocab) else {
            continue;
        };
        let kind: &'static str = SPECIAL_ORDER
            .iter()
            .find(|k| **k == kind)
            .expect("known kind");
        match v.special.get(kind) {
            None => {
                v.special.insert(kind, id as u32);
            }
            Some(have) if *have as u64 != id => v.notes.push(format!(
                "config.json {key} = {id} disagrees with the tokenizer's {kind} id {have}; keeping {have}"
            )),
            _ => {}
        }
    }
}

/// The SEP id and the blockers of a WordPiece vocabulary.
fn wordpiece_specials(
    v: &mut Vocab,
    content: &BTreeMap<&'static str, String>,
    template_eos: &Option<String>,
    added: &[&Value],
) {
    let id_of = |c: &str| added_id(added, c);
    // llama.cpp's WPM tokenizer always adds [CLS] (the BOS id) … [SEP] (the SEP id) and
    // ignores the flags; without tokenizer_config the template names them.
    let cls = content
        .get("cls")
        .and_then(|c| id_of(c))
        .or_else(|| v.special.get("bos").copied());
    let sep = content
        .get("sep")
        .and_then(|c| id_of(c))
        .or_else(|| template_eos.as_deref().and_then(id_of));
    if let Some(sep) = sep {
        v.special.entry("sep").or_insert(sep);
    }
    if v.add.get("bos") != Some(&true) || v.add.get("eos") != Some(&true) {
        v.blockers.push(
            "WordPiece: llama.cpp always adds CLS and SEP, but the HF template does not add both"
                .into(),
        );
    }
    if cls.is_none() || sep.is_none() {
        v.blockers
            .push("WordPiece: tokenizer_config lacks cls_token or sep_token".into());
    }
}
