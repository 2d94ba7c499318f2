//! Gate 2 tokenizer stress, judged: the generated cases of [`super::stress`] from a declared
//! seed, tokenized by llama.cpp (in the mode the fixed texts matched in) and by HF, counted per
//! class. What each class means for the verdict is declared before measuring, per llama.cpp
//! tokenizer model (`tokenizer.ggml.model`: `bert`, `gpt2`, `llama`, `t5`): a class declared a
//! limitation is reported and listed on the model card with its advice; a mismatch in any
//! other class is a blocker ([`BlockerCode::TokenizerStress`]).
//!
//! The built-in declaration ([`StressDeclaration::default`]) names as limitations only the
//! divergences whose cause is known (docs/tokenizer-stress.md): WordPiece's Hangul/jamo
//! normalization, spacing marks and the 100-character word limit; the UGM normalizer's NFD,
//! jamo, combining-mark, NEL and fullwidth-special differences. A protocol declares its own
//! under `[stress]`.

use std::collections::BTreeMap;

use anyhow::Result;
use serde::{Deserialize, Serialize};

use super::outcome::{Blocker, BlockerCode};
use super::stress::{self, ClassResult, StressClass};
use super::tokenizer::Mode;
use reference::tokenizer::HfTokenizer;

/// `[stress]` of a protocol: the seed, the cases per random class, and per tokenizer model the
/// classes that are limitations (every other class is a blocker).
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct StressDeclaration {
    /// Seed of the generated cases (ChaCha8).
    pub seed: u64,
    /// Cases per random class (1..=10000); the vocabulary class is every entry.
    pub per_class: usize,
    /// `tokenizer.ggml.model` → classes declared limitations.
    #[serde(default)]
    pub limitations: BTreeMap<String, Vec<StressClass>>,
}

impl Default for StressDeclaration {
    /// Seed 29, 100 cases per class; limitations as the module doc says.
    fn default() -> Self {
        use StressClass::*;
        let limitations = BTreeMap::from([
            (
                "bert".into(),
                vec![VocabEntry, Hangul, MixedScripts, LongWord],
            ),
            ("gpt2".into(), vec![]),
            ("llama".into(), vec![]),
            (
                "t5".into(),
                vec![VocabEntry, Nfd, Jamo, LatinCombining, SpecialText],
            ),
        ]);
        StressDeclaration {
            seed: 29,
            per_class: 100,
            limitations,
        }
    }
}

impl StressDeclaration {
    /// Problems that would keep it from binding: a per_class outside 1..=10000.
    pub fn problems(&self) -> Vec<String> {
        if (1..=10_000).contains(&self.per_class) {
            Vec::new()
        } else {
            vec![format!(
                "stress.per_class: {} is not in 1..=10000",
                self.per_class
            )]
        }
    }
}

/// What a class's mismatches mean for the verdict.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Severity {
    /// Any mismatch is NO-GO.
    Blocker,
    /// Reported and listed on the card.
    Limitation,
}

/// One class as judged.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct JudgedClass {
    /// The counts and the first mismatch.
    #[serde(flatten)]
    pub result: ClassResult,
    /// As declared for the file's tokenizer model.
    pub severity: Severity,
}

/// The stress part of Gate 2.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct StressReport {
    /// Seed and cases per class, as declared.
    pub seed: u64,
    pub per_class: usize,
    /// `tokenizer.ggml.model` of the file.
    pub tokenizer_model: String,
    /// The llama.cpp mode the cases ran in (the first mode the fixed texts matched in).
    pub mode: Mode,
    /// Per class, in [`StressClass`] order.
    pub classes: Vec<JudgedClass>,
}

/// Runs the declared cases: HF's ids against llama.cpp's in `mode`.
///
/// Errors: an HF tokenizer failure, naming the text.
pub fn check(
    (hf, tj): (&HfTokenizer, &serde_json::Value),
    specials: &[String],
    model: &llama_runtime::Model,
    mode: Mode,
    decl: &StressDeclaration,
) -> Result<StressReport> {
    let tokenizer_model = model.meta(gguf::keys::tokenizer::MODEL).unwrap_or_default();
    let cases = stress::generate(hf, specials, decl.seed, decl.per_class);
    let tokenize = |t: &str| {
        model
            .tokenize(t, mode.add_special, mode.parse_special)
            .unwrap_or_default()
    };
    let limited = decl
        .limitations
        .get(&tokenizer_model)
        .cloned()
        .unwrap_or_default();
    let explain = |t: &str, h: &[u32], l: &[i32]| {
        use super::tokenizer::{explained_divergence, whole_word_for_merges, Divergence};
        explained_divergence(hf, tj, t)
            .or_else(|| whole_word_for_merges(hf, tj, h, l).then_some(Divergence::IgnoreMerges))
    };
    let classes = stress::run(hf, &cases, &tokenize, &explain)?
        .into_iter()
        .map(|result| JudgedClass {
            severity: if limited.contains(&result.class) {
                Severity::Limitation
            } else {
                Severity::Blocker
            },
            result,
        })
        .collect();
    Ok(StressReport {
        seed: decl.seed,
        per_class: decl.per_class,
        tokenizer_model,
        mode,
        classes,
    })
}

/// One blocker per blocker class with a mismatch of no known cause, naming its first such
/// case's ids and pieces.
pub fn judge(r: &StressReport, blockers: &mut Vec<Blocker>) {
    for c in r.classes.iter().filter(|c| c.severity == Severity::Blocker) {
        let Some(m) = &c.result.first_unexplained else {
            continue;
        };
        blockers.push(Blocker::new(
            BlockerCode::TokenizerStress,
            &format!("{:?}", c.result.class),
            format!(
                "{}/{} generated cases give HF's ids, {} differ for no known cause (seed {}); first: {:?}: HF {:?} {:?}, llama.cpp {:?} {:?}",
                c.result.matched, c.result.cases, c.result.unexplained(), r.seed, m.text, m.hf_ids, m.hf_pieces, m.llama_ids, m.llama_pieces
            ),
        ));
    }
}

/// The model card's lines for `r`: each limitation class that mismatched, with its advice,
/// and each known cause behind mismatches in any class, with its count.
pub fn card_lines(r: &StressReport) -> Vec<String> {
    let mut out = Vec::new();
    for c in &r.classes {
        let res = &c.result;
        if c.severity == Severity::Limitation && res.matched < res.cases {
            out.push(format!(
                "{} ({}/{} generated {:?} texts give HF's ids, seed {})",
                advice(res.class, &r.tokenizer_model),
                res.matched,
                res.cases,
                res.class,
                r.seed
            ));
        }
        for (d, n) in &res.explained {
            out.push(format!(
                "{} ({n} of {} generated {:?} texts differ for this reason, seed {})",
                d.why(),
                res.cases,
                res.class,
                r.seed
            ));
        }
    }
    out
}

/// The model card's line for a limitation class that mismatched on tokenizer `model`.
pub fn advice(class: StressClass, model: &str) -> &'static str {
    use StressClass::*;
    match (class, model) {
        (Nfd, _) => "NFD input is tokenized differently by llama.cpp: normalize text to NFC first",
        (Hangul | MixedScripts, "bert") => "Hangul: llama.cpp's WordPiece decomposes syllables and finds jamo pieces where HF gives [UNK]",
        (Jamo, _) => "Hangul jamo typed on their own: llama.cpp gives <unk> for some jamo HF keeps as pieces",
        (LatinCombining, _) => "Latin letters with several combining marks: llama.cpp's UGM normalizer splits differently from HF's; normalize to NFC first",
        (SpecialText, _) => "special tokens typed with lookalike characters (e.g. fullwidth ＜s＞): HF's normalizer turns them into the special token's text and its vocabulary matches it, llama.cpp keeps them as text",
        (LongWord, _) => "a word longer than 100 characters: HF's WordPiece gives one [UNK], llama.cpp splits it into pieces",
        (VocabEntry, "bert") => "a few vocabulary entries on their own (spacing combining marks): llama.cpp strips them as accents, HF keeps them",
        (VocabEntry, _) => "a few vocabulary entries on their own (control characters such as U+0085): llama.cpp and HF treat them differently",
        _ => "llama.cpp's ids differ from HF's on some generated texts of this class",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_builtin_declaration_parses_as_a_protocol_would_write_it() {
        let d: StressDeclaration =
            toml::from_str("seed = 29\nper_class = 100\n[limitations]\nt5 = [\"nfd\", \"jamo\"]\n")
                .unwrap();
        assert_eq!(d.limitations["t5"], [StressClass::Nfd, StressClass::Jamo]);
        assert!(d.problems().is_empty());
        let bad = StressDeclaration {
            per_class: 0,
            ..StressDeclaration::default()
        };
        assert_eq!(bad.problems().len(), 1);
        assert!(toml::from_str::<StressDeclaration>("seed = 1\nper_class = 1\nextra = 2").is_err());
    }
}
