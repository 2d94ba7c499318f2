//! Gate 2, tokenizer: for each text, the HF ids (with special tokens, as the model is used)
//! against llama.cpp's ids in all four add_special × parse_special modes. The set of modes that
//! matches on every text must be non-empty.

use serde::{Deserialize, Serialize};

use llama_runtime::Model;
use reference::tokenizer::HfTokenizer;

/// One `llama_tokenize` mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mode {
    pub add_special: bool,
    pub parse_special: bool,
}

impl std::fmt::Display for Mode {
    /// `add_special=true parse_special=false`, as llama.cpp's parameters are spelled.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "add_special={} parse_special={}",
            self.add_special, self.parse_special
        )
    }
}

/// The four modes, in a fixed order.
pub const MODES: [Mode; 4] = [
    Mode {
        add_special: true,
        parse_special: true,
    },
    Mode {
        add_special: true,
        parse_special: false,
    },
    Mode {
        add_special: false,
        parse_special: true,
    },
    Mode {
        add_special: false,
        parse_special: false,
    },
];

/// The first text where a mode differs from HF, and how.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Mismatch {
    /// The text (cut to 200 characters).
    pub text: String,
    /// HF ids.
    pub hf: Vec<u32>,
    /// llama.cpp ids.
    pub llama: Vec<i32>,
    /// `special-token offset: …` (one extra/missing id at the start or end, or one at each,
    /// the rest equal; the text names the token and the side) or `scattered` (vocab, merges or
    /// pre-tokenizer differ).
    pub shape: String,
}

/// Per-mode result.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ModeResult {
    pub mode: Mode,
    /// Texts with identical ids.
    pub matched: usize,
    /// Texts compared.
    pub total: usize,
    /// The first mismatch, if any.
    pub first_mismatch: Option<Mismatch>,
}

/// The tokenizer gate's result.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TokenizerReport {
    /// Per mode, over the gated texts.
    pub modes: Vec<ModeResult>,
    /// Modes that match on every gated text (must be non-empty).
    pub matching_modes: Vec<Mode>,
    /// Texts gated.
    pub texts: usize,
    /// Known limitations: texts measured but not gated, with whether they still matched.
    pub limitations: Vec<Limitation>,
}

/// Why a text is measured and reported rather than gated: a difference between HF and
/// llama.cpp that lies outside the conversion ([`known_divergence`], and tokenizer.json's
/// Unicode normalization, which llama.cpp does not apply).
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq, PartialOrd, Ord)]
#[serde(rename_all = "kebab-case")]
pub enum Divergence {
    /// llama.cpp forces an end-of-generation text the vocabulary keeps as ordinary text to a
    /// control token.
    ForcedControl,
    /// WordPiece: llama.cpp drops the Hangul jamo HF keeps after NFD.
    HangulJamo,
    /// WordPiece: llama.cpp strips spacing combining marks (Mc) as accents.
    SpacingMarks,
    /// tokenizer.json normalizes Unicode (NFC …); llama.cpp does not.
    UnicodeNormalization,
    /// An added special token marked `lstrip`/`rstrip` in tokenizer.json, next to whitespace
    /// on that side: HF drops the whitespace; GGUF has no field for it, and llama.cpp strips only
    /// for the tokens it names itself (`llama_vocab::impl::load`: all special tokens of a model
    /// named phi-3, BERT-style `<mask>`/`[MASK]`).
    StrippedSpecial,
    /// WordPiece: a word longer than `max_input_chars_per_word` is one `[UNK]` in HF; llama.cpp
    /// has no such limit (and GGUF no field for it) and splits the word into pieces.
    LongWord,
    /// BPE: llama.cpp's pre-tokenizer type for this model (llama3 and others) takes a word that is
    /// one vocabulary entry whole (`ignore_merges`, no GGUF field), while tokenizer.json sets
    /// `ignore_merges` false and HF builds the word from merges, which split it.
    IgnoreMerges,
}

impl Divergence {
    /// The sentence the reports and the model card print.
    pub fn why(self) -> &'static str {
        match self {
            Divergence::ForcedControl => "llama.cpp forces an end-of-generation text (e.g. \"</s>\") that this vocabulary keeps as ordinary text to a control token",
            Divergence::HangulJamo => "Hangul: llama.cpp's WordPiece normalization drops the jamo HF keeps after NFD",
            Divergence::SpacingMarks => "spacing combining marks (Mc): llama.cpp strips them as accents, HF keeps them",
            Divergence::UnicodeNormalization => "tokenizer.json applies Unicode normalization, llama.cpp does not",
            Divergence::StrippedSpecial => "a special token marked lstrip/rstrip in tokenizer.json next to whitespace: HF drops the whitespace, llama.cpp (no GGUF field for it) keeps it",
            Divergence::LongWord => "WordPiece: a word longer than max_input_chars_per_word (100) is one [UNK] in HF; llama.cpp (no GGUF field for the limit) splits it into pieces",
            Divergence::IgnoreMerges => "BPE: llama.cpp takes a word that is one vocabulary entry whole (its pre-tokenizer type ignores merges), while tokenizer.json's ignore_merges is false and HF's merges split the word",
        }
    }
}

/// One text measured but not gated.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Limitation {
    /// Why it is not gated.
    pub divergence: Divergence,
    /// The text (a corpus text cut to 200 characters; a normalization probe whole).
    pub text: String,
    /// Whether llama.cpp's ids still equal HF's on it.
    pub same_ids: bool,
}

impl std::fmt::Display for Limitation {
    /// `WHY: "TEXT" still matches` or `… gives different ids` (with advice for normalization).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let outcome = match (self.same_ids, self.divergence) {
            (true, _) => "still matches",
            (false, Divergence::UnicodeNormalization) => {
                "gives different ids (feed NFC-normalized text to llama.cpp)"
            }
            (false, _) => "gives different ids",
        };
        write!(f, "{}: {:?} {outcome}", self.divergence.why(), self.text)
    }
}

/// How llama.cpp's ids `ll` differ from HF's `hf`: `special-token offset: …` naming the id one
/// side adds or drops at the start or end (e.g. `HF appends <|endoftext|> (id 151643) at the
/// end; llama.cpp does not`), or `scattered`.
fn shape(tok: &HfTokenizer, hf: &[u32], ll: &[i32]) -> String {
    let h: Vec<i64> = hf.iter().map(|x| *x as i64).collect();
    let l: Vec<i64> = ll.iter().map(|x| *x as i64).collect();
    let name = |id: i64| {
        let t = u32::try_from(id)
            .ok()
            .and_then(|i| tok.inner().id_to_token(i))
            .unwrap_or_else(|| "?".into());
        format!("{t} (id {id})")
    };
    // The ids `long` has beyond `short`: (at the start, at the end).
    let extra = |long: &[i64], short: &[i64]| -> Option<(Option<i64>, Option<i64>)> {
        match long.len().checked_sub(short.len())? {
            1 if long[1..] == *short => Some((Some(long[0]), None)),
            1 if long[..short.len()] == *short => Some((None, Some(long[short.len()]))),
            2 if long[1..long.len() - 1] == *short => {
                Some((Some(long[0]), Some(long[long.len() - 1])))
            }
            _ => None,
        }
    };
    let say = |who: &str, other: &str, (start, end): (Option<i64>, Option<i64>)| {
        let mut parts = Vec::new();
        if let Some(id) = start {
            parts.push(format!("prepends {}", name(id)));
        }
        if let Some(id) = end {
            parts.push(format!("appends {}", name(id)));
        }
        format!(
            "special-token offset: {who} {}; {other} does not",
            parts.join(" and ")
        )
    };
    if let Some(x) = extra(&h, &l) {
        say("HF", "llama.cpp", x)
    } else if let Some(x) = extra(&l, &h) {
        say("llama.cpp", "HF", x)
    } else {
        "scattered".into()
    }
}

fn cut(t: &str) -> String {
    if t.chars().count() > 200 {
        format!("{}…", t.chars().take(200).collect::<String>())
    } else {
        t.to_string()
    }
}

/// Why llama.cpp's ids may differ from HF's on `text` for a reason outside the file: a
/// [`known_divergence`], or tokenizer.json's Unicode normal form changing the text (HF's own
/// normalizer run on it), which llama.cpp does not apply.
pub fn explained_divergence(
    hf: &HfTokenizer,
    tj: &serde_json::Value,
    text: &str,
) -> Option<Divergence> {
    if let Some(d) = known_divergence(tj, text) {
        return Some(d);
    }
    if !unicode_normalizes(tj) {
        return None;
    }
    let n = hf.inner().get_normalizer()?;
    let mut s = tokenizers::NormalizedString::from(text);
    use tokenizers::Normalizer as _;
    (n.normalize(&mut s).is_ok() && s.get() != text).then_some(Divergence::UnicodeNormalization)
}

/// Whether llama.cpp's `ll` differs from HF's `hf` only where llama.cpp has one token whose text
/// is HF's several pieces joined, in a BPE tokenizer.json whose `ignore_merges` is not true:
/// [`Divergence::IgnoreMerges`].
pub fn whole_word_for_merges(
    hf: &HfTokenizer,
    tj: &serde_json::Value,
    hf_ids: &[u32],
    ll: &[i32],
) -> bool {
    if tj["model"]["type"] != "BPE" || tj["model"]["ignore_merges"] == true {
        return false;
    }
    let h: Vec<i64> = hf_ids.iter().map(|x| i64::from(*x)).collect();
    let l: Vec<i64> = ll.iter().map(|x| i64::from(*x)).collect();
    let pre = h.iter().zip(&l).take_while(|(a, b)| a == b).count();
    let suf = h[pre..]
        .iter()
        .rev()
        .zip(l[pre..].iter().rev())
        .take_while(|(a, b)| a == b)
        .count();
    let (hm, lm) = (&h[pre..h.len() - suf], &l[pre..l.len() - suf]);
    let text = |id: i64| {
        u32::try_from(id)
            .ok()
            .and_then(|i| hf.inner().id_to_token(i))
    };
    match (lm, hm.len()) {
        ([one], n) if n >= 2 => {
            let joined: Option<String> = hm.iter().map(|i| text(*i)).collect();
            joined.is_some() && joined == text(*one)
        }
        _ => false,
    }
}

/// Whether `tok` applies a Unicode normal form (which llama.cpp's BPE does not).
fn unicode_normalizes(tj: &serde_json::Value) -> bool {
    fn walk(n: &serde_json::Value) -> bool {
        match n["type"].as_str() {
            Some("NFC" | "NFD" | "NFKC" | "NFKD") => true,
            Some("Sequence") => n["normalizers"]
                .as_array()
                .is_some_and(|a| a.iter().any(walk)),
            _ => false,
        }
    }
    walk(&tj["normalizer"])
}

/// Token texts llama.cpp's vocab loader always treats as control/EOG tokens
/// (`src/llama-vocab.cpp`, the end-of-generation text list of llama-cpp-sys-2 0.1.161).
const FORCED_CONTROL: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    "<|flush|>",
    "<|calls|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "</s>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "[EOS]",
    "<|end_of_text|>",
    "<end_of_utterance>",
    "<eos>",
    "<turn|>",
    "<|tool_response>",
    "[e~[",
];

/// Whether tokenizer.json's normalizer strips accents the BERT way (NFD, then drop Mn marks).
fn bert_strips_accents(tj: &serde_json::Value) -> bool {
    let n = &tj["normalizer"];
    n["type"] == "BertNormalizer"
        && match &n["strip_accents"] {
            serde_json::Value::Bool(b) => *b,
            // null: follows `lowercase` (HF's BertNormalizer).
            _ => n["lowercase"].as_bool().unwrap_or(false),
        }
}

/// Whether `text` holds an added special token of `tj` marked `lstrip` with whitespace right
/// before it, or `rstrip` with whitespace right after it (what HF's added-token matching
/// removes).
fn strips_next_to_whitespace(tj: &serde_json::Value, text: &str) -> bool {
    let Some(added) = tj["added_tokens"].as_array() else {
        return false;
    };
    added.iter().any(|t| {
        let (Some(s), true) = (t["content"].as_str(), t["special"] == true) else {
            return false;
        };
        let (l, r) = (t["lstrip"] == true, t["rstrip"] == true);
        !s.is_empty()
            && text.match_indices(s).any(|(i, _)| {
                let before = text[..i]
                    .chars()
                    .next_back()
                    .is_some_and(char::is_whitespace);
                let after = text[i + s.len()..]
                    .chars()
                    .next()
                    .is_some_and(char::is_whitespace);
                (l && before) || (r && after)
            })
    })
}

/// Whether `tj` is a WordPiece tokenizer and `text` holds a word (split at whitespace and
/// punctuation, as BERT's pre-tokenizer splits) longer than its `max_input_chars_per_word`
/// (default 100, HF `WordPiece`).
fn has_overlong_word(tj: &serde_json::Value, text: &str) -> bool {
    use unicode_categories::UnicodeCategories;
    if tj["model"]["type"] != "WordPiece" {
        return false;
    }
    let max = tj["model"]["max_input_chars_per_word"]
        .as_u64()
        .unwrap_or(100) as usize;
    text.split(|c: char| c.is_whitespace() || c.is_ascii_punctuation() || c.is_punctuation())
        .any(|w| w.chars().count() > max)
}

/// Why `text` cannot match for a reason outside the conversion, if it cannot: llama.cpp's
/// WordPiece accent stripping removes more than HF's (HF drops only non-spacing marks after NFD;
/// llama.cpp also drops spacing vowel signs such as Devanagari ि and the Hangul jamo that NFD
/// makes of Korean syllables). Such texts are reported as limitations, not gated.
///
/// Also: llama.cpp's vocab loader forces tokens whose text is on its hard-coded end-of-generation
/// list (`</s>`, `<|im_end|>`, `<eos>` …, `src/llama-vocab.cpp`) to CONTROL even when the model
/// says they are ordinary vocabulary, so with parse_special it splits such text out as one token
/// where HF tokenizes it as text.
///
/// Also: a special token tokenizer.json marks `lstrip`/`rstrip`, next to whitespace
/// ([`Divergence::StrippedSpecial`]).
pub fn known_divergence(tj: &serde_json::Value, text: &str) -> Option<Divergence> {
    use unicode_categories::UnicodeCategories;
    let added_special = |s: &str| {
        tj["added_tokens"].as_array().is_some_and(|a| {
            a.iter()
                .any(|t| t["content"] == s && t["special"].as_bool().unwrap_or(false))
        })
    };
    let in_vocab = |s: &str| tj["model"]["vocab"].get(s).is_some();
    if FORCED_CONTROL
        .iter()
        .any(|s| text.contains(s) && in_vocab(s) && !added_special(s))
    {
        return Some(Divergence::ForcedControl);
    }
    if strips_next_to_whitespace(tj, text) {
        return Some(Divergence::StrippedSpecial);
    }
    if has_overlong_word(tj, text) {
        return Some(Divergence::LongWord);
    }
    if !bert_strips_accents(tj) {
        return None;
    }
    if text
        .chars()
        .any(|c| matches!(c as u32, 0xAC00..=0xD7A3 | 0x1100..=0x11FF | 0x3130..=0x318F))
    {
        return Some(Divergence::HangulJamo);
    }
    if text.chars().any(|c| c.is_mark_spacing_combining()) {
        return Some(Divergence::SpacingMarks);
    }
    None
}

/// Whether llama.cpp's ids `ll` (i32, `llama_token`) equal HF's `hf` (u32), in order.
pub fn same_ids(hf: &[u32], ll: &[i32]) -> bool {
    hf.len() == ll.len()
        && hf
            .iter()
            .zip(ll)
            .all(|(a, b)| i64::from(*a) == i64::from(*b))
}

/// Measures `texts` (probes of a known divergence) in `mode`: limitations, not gated.
fn probe(
    hf: &HfTokenizer,
    model: &Model,
    mode: Mode,
    texts: &[&str],
    divergence: Divergence,
) -> anyhow::Result<Vec<Limitation>> {
    let mut out = Vec::new();
    for text in texts {
        let want = hf.encode(text, true).map_err(|e| anyhow::anyhow!("{e}"))?;
        let got = model
            .tokenize(text, mode.add_special, mode.parse_special)
            .unwrap_or_default();
        let same = same_ids(&want, &got);
        out.push(Limitation {
            divergence,
            text: text.to_string(),
            same_ids: same,
        });
    }
    Ok(out)
}

/// Runs the tokenizer gate on `texts` plus the normalization probes. Texts with a
/// [`known_divergence`] are measured and reported as limitations, not gated.
///
/// Errors: a tokenizer failure on some text (reported by the caller as a blocker).
pub fn check(
    hf: &HfTokenizer,
    tj: &serde_json::Value,
    model: &Model,
    texts: &[String],
) -> anyhow::Result<TokenizerReport> {
    let mut modes: Vec<ModeResult> = MODES
        .iter()
        .map(|m| ModeResult {
            mode: *m,
            matched: 0,
            total: 0,
            first_mismatch: None,
        })
        .collect();
    let mut limitations = Vec::new();
    let mut gated = Vec::new();
    for text in texts {
        match known_divergence(tj, text) {
            Some(divergence) => {
                let want = hf.encode(text, true).map_err(|e| anyhow::anyhow!("{e}"))?;
                let got = model.tokenize(text, true, true).unwrap_or_default();
                let same = same_ids(&want, &got);
                limitations.push(Limitation {
                    divergence,
                    text: cut(text),
                    same_ids: same,
                });
            }
            None => gated.push(text),
        }
    }
    let n = gated.len();
    for (i, text) in gated.into_iter().enumerate() {
        crate::progress::report("gate 2 token ids", i, n);
        let want = hf.encode(text, true).map_err(|e| anyhow::anyhow!("{e}"))?;
        for r in modes.iter_mut() {
            let got = model
                .tokenize(text, r.mode.add_special, r.mode.parse_special)
                .map_err(|e| anyhow::anyhow!("llama_tokenize on {:?}: {e}", cut(text)))?;
            r.total += 1;
            let same = same_ids(&want, &got);
            if same {
                r.matched += 1;
            } else if r.first_mismatch.is_none() {
                r.first_mismatch = Some(Mismatch {
                    text: cut(text),
                    shape: shape(hf, &want, &got),
                    hf: want.clone(),
                    llama: got,
                });
            }
        }
    }
    let matching_modes: Vec<Mode> = modes
        .iter()
        .filter(|r| r.matched == r.total)
        .map(|r| r.mode)
        .collect();
    let mode = matching_modes.first().copied().unwrap_or(MODES[0]);
    if unicode_normalizes(tj) {
        let probes = super::corpus::NORMALIZATION_PROBES;
        let d = Divergence::UnicodeNormalization;
        limitations.extend(probe(hf, model, mode, probes, d)?);
    }
    if tj["model"]["type"] == "WordPiece" {
        let probes = super::corpus::LONG_WORD_PROBES;
        limitations.extend(probe(hf, model, mode, probes, Divergence::LongWord)?);
    }
    Ok(TokenizerReport {
        texts: modes[0].total,
        modes,
        matching_modes,
        limitations,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn lstrip_rstrip_special_tokens_next_to_whitespace_are_a_known_divergence() {
        // Phi-4's tokenizer.json marks its added special tokens lstrip and rstrip.
        let tj = json!({"added_tokens": [
            {"content": "<|endoftext|>", "special": true, "lstrip": true, "rstrip": true},
            {"content": "<|plain|>", "special": true, "lstrip": false, "rstrip": false}
        ], "model": {"vocab": {}}});
        let d = |t: &str| known_divergence(&tj, t);
        assert_eq!(
            d("<|endoftext|> inside text"),
            Some(Divergence::StrippedSpecial)
        );
        assert_eq!(d("text <|endoftext|>"), Some(Divergence::StrippedSpecial));
        assert_eq!(d("a<|endoftext|>b"), None);
        assert_eq!(d("<|plain|> inside text"), None);
        assert_eq!(d("no special token"), None);
    }

    #[test]
    fn wordpiece_words_over_the_limit_are_a_known_divergence() {
        let tj =
            json!({"model": {"type": "WordPiece", "max_input_chars_per_word": 100, "vocab": {}}});
        let d = |t: &str| known_divergence(&tj, t);
        let long = "x".repeat(101);
        assert_eq!(d(&format!("hash {long} end")), Some(Divergence::LongWord));
        assert_eq!(d(&"x".repeat(100)), None);
        // Punctuation splits words, as BERT's pre-tokenizer does.
        assert_eq!(d(&format!("{}.{}", "x".repeat(60), "y".repeat(60))), None);
        // Other tokenizer kinds have no such limit.
        let bpe = json!({"model": {"type": "BPE", "vocab": {}}});
        assert_eq!(known_divergence(&bpe, &long), None);
    }
}
