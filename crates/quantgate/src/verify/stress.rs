//! Gate 2 tokenizer stress: generated texts by class, from a seed, in the spirit of llama.cpp's
//! `tests/test-tokenizer-random.py` (every vocabulary word alone, random Unicode, edge cases).
//! The same seed gives the same cases on every machine (ChaCha8, no thread or hash-order
//! dependence). [`run`] measures per class how many cases give HF's ids, and keeps the first
//! mismatch of each class with its ids and pieces; Gate 2 judges them (`stress_gate`, which
//! uses this module).

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use std::collections::BTreeMap;

use reference::tokenizer::HfTokenizer;

use super::tokenizer::Divergence;

/// A class of generated texts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StressClass {
    /// Each vocabulary entry's text (HF's decode of the one id), on its own.
    VocabEntry,
    /// Random Hangul syllables (U+AC00–U+D7A3) in words.
    Hangul,
    /// Compatibility jamo (U+3131–U+318E) and conjoining jamo (U+1100–U+11FF).
    Jamo,
    /// CJK unified ideographs (U+4E00–U+9FFF).
    Cjk,
    /// Latin letters followed by combining marks (U+0300–U+036F).
    LatinCombining,
    /// Emoji joined by ZWJ (U+200D), with VS16 and skin tones.
    EmojiZwj,
    /// Words of several scripts, with and without spaces between them.
    MixedScripts,
    /// The NFD form of Hangul and accented Latin text (its NFC form is in the other classes).
    Nfd,
    /// Runs of spaces, tabs, newlines, CR LF, NBSP and the ideographic space.
    Whitespace,
    /// Special tokens typed as text, and near-misses of them.
    SpecialText,
    /// Words of 100–1000 characters.
    LongWord,
}

/// One generated text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Case {
    /// What the text tries.
    pub class: StressClass,
    /// The text (UTF-8; NFD for [`StressClass::Nfd`], NFC as generated otherwise).
    pub text: String,
}

fn pick(rng: &mut ChaCha8Rng, lo: u32, hi: u32) -> char {
    // Every range used here lies outside the surrogates, so each value is a char.
    char::from_u32(rng.gen_range(lo..=hi)).unwrap_or('?')
}

fn words(rng: &mut ChaCha8Rng, gen: &mut dyn FnMut(&mut ChaCha8Rng) -> String) -> String {
    let n = rng.gen_range(1..=5);
    (0..n).map(|_| gen(rng)).collect::<Vec<_>>().join(" ")
}

fn run_of(rng: &mut ChaCha8Rng, lo: u32, hi: u32, max: usize) -> String {
    let n = rng.gen_range(1..=max);
    (0..n).map(|_| pick(rng, lo, hi)).collect()
}

fn latin_combining(rng: &mut ChaCha8Rng) -> String {
    let n = rng.gen_range(1..=8);
    let mut s = String::new();
    for _ in 0..n {
        s.push(pick(rng, 'a' as u32, 'z' as u32));
        for _ in 0..rng.gen_range(0..=2) {
            s.push(pick(rng, 0x300, 0x36F));
        }
    }
    s
}

fn emoji_zwj(rng: &mut ChaCha8Rng) -> String {
    const BASE: &[char] = &['👩', '👨', '👧', '👦', '❤', '🔥', '🏳', '🌈', '🦙', '🚀'];
    let n = rng.gen_range(1..=4);
    let mut parts = Vec::new();
    for _ in 0..n {
        let mut e = BASE[rng.gen_range(0..BASE.len())].to_string();
        match rng.gen_range(0..3) {
            0 => e.push('\u{FE0F}'),
            1 => e.push(pick(rng, 0x1F3FB, 0x1F3FF)),
            _ => {}
        }
        parts.push(e);
    }
    parts.join("\u{200D}")
}

/// Text in NFD (`tokenizers`' own Unicode normalization).
fn nfd(text: &str) -> String {
    let mut n = tokenizers::NormalizedString::from(text);
    n.nfd();
    n.get().to_string()
}

/// The special-token strings and near-misses of them.
fn special_texts(specials: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    for s in specials {
        out.push(s.clone());
        out.push(format!("text {s} text"));
        out.push(format!("{s}{s}"));
        if s.len() > 2 {
            out.push(s[..s.len() - 1].to_string());
            out.push(format!("{} {}", &s[..1], &s[1..]));
            out.push(s.to_uppercase());
            out.push(s.replace('<', "＜").replace('>', "＞"));
        }
    }
    out
}

/// The texts of tokenizer.json's added tokens marked special (the first 8), for
/// [`StressClass::SpecialText`].
pub fn special_texts_of(tj: &serde_json::Value) -> Vec<String> {
    tj["added_tokens"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|t| t["special"] == true)
        .filter_map(|t| t["content"].as_str().map(str::to_string))
        .take(8)
        .collect()
}

/// The generated cases: every vocabulary entry of `hf` (its decode of each id, skipping
/// empty texts), `per_class` texts of each random class from `seed`, the NFD forms of the
/// Hangul and Latin-with-marks texts, and `specials` (special-token texts) with near-misses.
pub fn generate(hf: &HfTokenizer, specials: &[String], seed: u64, per_class: usize) -> Vec<Case> {
    let mut cases = vocab_cases(hf);
    cases.extend(random_cases(seed, per_class));
    cases.extend(special_texts(specials).into_iter().map(|text| Case {
        class: StressClass::SpecialText,
        text,
    }));
    cases
}

/// Each vocabulary entry's text on its own (HF's decode of the one id; empty texts skipped, and
/// texts with a NUL, which `llama_runtime::Model::tokenize` refuses: no user types one).
pub fn vocab_cases(hf: &HfTokenizer) -> Vec<Case> {
    let mut cases = Vec::new();
    let n_vocab = hf.inner().get_vocab_size(true) as u32;
    for id in 0..n_vocab {
        if let Ok(text) = hf.inner().decode(&[id], false) {
            if !text.is_empty() && !text.contains('\0') {
                cases.push(Case {
                    class: StressClass::VocabEntry,
                    text,
                });
            }
        }
    }
    cases
}

/// `per_class` texts of each random class from `seed`, plus the NFD forms of the Hangul and
/// Latin-with-marks texts.
pub fn random_cases(seed: u64, per_class: usize) -> Vec<Case> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut cases = Vec::new();
    let mut add = |class, text: String| cases.push(Case { class, text });
    for _ in 0..per_class {
        let hangul = words(&mut rng, &mut |r| run_of(r, 0xAC00, 0xD7A3, 6));
        add(StressClass::Nfd, nfd(&hangul));
        add(StressClass::Hangul, hangul);
        let jamo = words(&mut rng, &mut |r| {
            if r.gen_bool(0.5) {
                run_of(r, 0x3131, 0x318E, 6)
            } else {
                run_of(r, 0x1100, 0x11FF, 6)
            }
        });
        add(StressClass::Jamo, jamo);
        add(
            StressClass::Cjk,
            words(&mut rng, &mut |r| run_of(r, 0x4E00, 0x9FFF, 6)),
        );
        let latin = words(&mut rng, &mut latin_combining);
        add(StressClass::Nfd, nfd(&latin));
        add(StressClass::LatinCombining, latin);
        add(StressClass::EmojiZwj, words(&mut rng, &mut emoji_zwj));
        add(StressClass::MixedScripts, mixed(&mut rng));
        add(StressClass::Whitespace, whitespace(&mut rng));
        let len = rng.gen_range(100..=1000);
        add(
            StressClass::LongWord,
            run_of(&mut rng, 'a' as u32, 'z' as u32, 1).repeat(len),
        );
    }
    cases
}

fn mixed(rng: &mut ChaCha8Rng) -> String {
    let n = rng.gen_range(2..=6);
    let mut s = String::new();
    for _ in 0..n {
        let w = match rng.gen_range(0..5) {
            0 => run_of(rng, 0xAC00, 0xD7A3, 4),
            1 => run_of(rng, 'a' as u32, 'z' as u32, 8),
            2 => run_of(rng, 0x4E00, 0x9FFF, 3),
            3 => run_of(rng, 0x0430, 0x044F, 6),
            _ => run_of(rng, '0' as u32, '9' as u32, 5),
        };
        s.push_str(&w);
        if rng.gen_bool(0.5) {
            s.push(' ');
        }
    }
    s
}

fn whitespace(rng: &mut ChaCha8Rng) -> String {
    const WS: &[&str] = &[
        " ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", "\u{A0}", "\u{3000}",
    ];
    let n = rng.gen_range(1..=5);
    let mut s = String::new();
    for i in 0..n {
        if i > 0 || rng.gen_bool(0.5) {
            s.push_str(WS[rng.gen_range(0..WS.len())]);
        }
        s.push_str(&run_of(rng, 'a' as u32, 'z' as u32, 6));
    }
    if rng.gen_bool(0.5) {
        s.push_str(WS[rng.gen_range(0..WS.len())]);
    }
    s
}

/// The first case of a class where the ids differ.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct StressMismatch {
    /// The text, cut to 200 characters.
    pub text: String,
    /// HF's ids (`add_special_tokens` true).
    pub hf_ids: Vec<u32>,
    /// llama.cpp's ids (empty when `llama_tokenize` refused the text, e.g. a NUL byte).
    pub llama_ids: Vec<i32>,
    /// Pieces of `hf_ids` and `llama_ids` (the vocabulary's token texts).
    pub hf_pieces: Vec<String>,
    pub llama_pieces: Vec<String>,
}

/// One class's counts.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ClassResult {
    /// The class.
    pub class: StressClass,
    /// Cases of the class.
    pub cases: usize,
    /// Cases where llama.cpp's ids equal HF's.
    pub matched: usize,
    /// The first case where they differ.
    pub first_mismatch: Option<StressMismatch>,
    /// Differing cases with a known cause outside the file, by cause
    /// ([`super::tokenizer::explained_divergence`]: tokenizer.json's NFC that llama.cpp does not
    /// apply, a forced control token, …).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub explained: BTreeMap<Divergence, usize>,
    /// The first differing case without such a cause.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_unexplained: Option<StressMismatch>,
}

impl ClassResult {
    /// Differing cases without a known cause.
    pub fn unexplained(&self) -> usize {
        self.cases - self.matched - self.explained.values().sum::<usize>()
    }
}

/// A differing case's known cause from its text, HF's ids and llama.cpp's ids.
pub type Explain<'a> = dyn Fn(&str, &[u32], &[i32]) -> Option<Divergence> + 'a;

/// Tokenizes every case with HF (`add_special_tokens` true, as the model is used) and with
/// `tokenize` (llama.cpp in the mode the fixed texts matched in), per class in
/// [`StressClass`] order; `explain` gives a differing case's known cause, if any, from its text,
/// HF's ids and llama.cpp's.
///
/// Errors: an HF tokenizer failure, naming the text.
pub fn run(
    hf: &HfTokenizer,
    cases: &[Case],
    tokenize: &dyn Fn(&str) -> Vec<i32>,
    explain: &Explain,
) -> anyhow::Result<Vec<ClassResult>> {
    let mut out: Vec<ClassResult> = Vec::new();
    let piece = |id: i64| {
        u32::try_from(id)
            .ok()
            .and_then(|i| hf.inner().id_to_token(i))
            .unwrap_or_else(|| "?".into())
    };
    // HF's side on every core first (the vocabulary class alone is up to 262144 texts).
    use rayon::prelude::*;
    let hf_ids: Vec<_> = cases.par_iter().map(|c| hf.encode(&c.text, true)).collect();
    for (case, want) in cases.iter().zip(hf_ids) {
        let want = want.map_err(|e| anyhow::anyhow!("HF tokenizer on {:?}: {e}", case.text))?;
        let got = tokenize(&case.text);
        let same = super::tokenizer::same_ids(&want, &got);
        let r = match out.iter_mut().find(|r| r.class == case.class) {
            Some(r) => r,
            None => {
                out.push(ClassResult {
                    class: case.class,
                    cases: 0,
                    matched: 0,
                    first_mismatch: None,
                    explained: BTreeMap::new(),
                    first_unexplained: None,
                });
                out.last_mut().expect("just pushed")
            }
        };
        r.cases += 1;
        if same {
            r.matched += 1;
            continue;
        }
        let cause = explain(&case.text, &want, &got);
        let m = StressMismatch {
            text: case.text.chars().take(200).collect(),
            hf_pieces: want.iter().map(|i| piece(i64::from(*i))).collect(),
            llama_pieces: got.iter().map(|i| piece(i64::from(*i))).collect(),
            hf_ids: want,
            llama_ids: got,
        };
        match cause {
            Some(d) => *r.explained.entry(d).or_default() += 1,
            None if r.first_unexplained.is_none() => r.first_unexplained = Some(m.clone()),
            None => {}
        }
        if r.first_mismatch.is_none() {
            r.first_mismatch = Some(m);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_gives_the_same_cases_and_another_seed_others() {
        let a = random_cases(29, 20);
        assert_eq!(a, random_cases(29, 20));
        assert_ne!(a, random_cases(30, 20));
        // Per round: 8 random classes and 2 NFD forms.
        assert_eq!(a.len(), 20 * 10);
    }

    #[test]
    fn nfd_cases_decompose_what_their_nfc_twins_hold() {
        let cases = random_cases(7, 5);
        let hangul: Vec<&Case> = cases
            .iter()
            .filter(|c| c.class == StressClass::Hangul)
            .collect();
        let nfd_: Vec<&Case> = cases
            .iter()
            .filter(|c| c.class == StressClass::Nfd)
            .collect();
        // A syllable is 2 or 3 jamo in NFD: the NFD text is longer.
        assert!(
            nfd_[0].text.chars().count() >= 2 * hangul[0].text.replace(' ', "").chars().count()
        );
        assert!(nfd_[0]
            .text
            .chars()
            .all(|c| c == ' ' || (0x1100..=0x11FF).contains(&(c as u32))));
    }

    #[test]
    fn special_texts_include_the_token_and_near_misses() {
        let t = special_texts(&["<s>".to_string()]);
        assert!(t.contains(&"<s>".to_string()));
        assert!(t.contains(&"<s".to_string()));
        assert!(t.contains(&"＜s＞".to_string()));
        assert!(t.contains(&"text <s> text".to_string()));
    }
}
