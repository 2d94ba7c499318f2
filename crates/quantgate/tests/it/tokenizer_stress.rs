//! Gate 2 tokenizer stress (issue 29, in progress): the generated classes of
//! `verify::stress` on every supported tokenizer kind, llama.cpp against HF, with the counts
//! printed per class. The recorded counts are measurements of the pinned llama.cpp and
//! `tokenizers`; a change in either shows here.

use std::path::Path;

use quantgate::convert::OutType;
use quantgate::verify::stress::{self, ClassResult, StressClass};
use reference::tokenizer::HfTokenizer;

use crate::common;

/// Seed of the stress cases (as a protocol would fix it).
const SEED: u64 = 29;
const PER_CLASS: usize = 100;

fn measure(fixture: &str) -> Vec<ClassResult> {
    let dir = common::hf(fixture);
    let tmp = tempfile::tempdir().unwrap();
    let gguf = tmp.path().join("vocab.gguf");
    common::convert_to(&dir, &gguf, OutType::F16, true);
    let model = llama_runtime::Model::load(&gguf, true).unwrap();
    let hf = HfTokenizer::from_file(&dir.join("tokenizer.json")).unwrap();
    let specials = specials(&dir);
    let cases = stress::generate(&hf, &specials, SEED, PER_CLASS);
    let tokenize = |t: &str| model.tokenize(t, true, true).unwrap_or_default();
    let r = stress::run(&hf, &cases, &tokenize).unwrap();
    for c in &r {
        println!(
            "{fixture}: {:?} {}/{} {}",
            c.class,
            c.matched,
            c.cases,
            c.first_mismatch
                .as_ref()
                .map(|m| format!(
                    "first: {:?} HF {:?} {:?} llama.cpp {:?} {:?}",
                    m.text, m.hf_ids, m.hf_pieces, m.llama_ids, m.llama_pieces
                ))
                .unwrap_or_default()
        );
    }
    r
}

/// The added tokens tokenizer.json marks special.
fn specials(dir: &Path) -> Vec<String> {
    let tj = common::json(&dir.join("tokenizer.json"));
    tj["added_tokens"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|t| t["special"] == true)
        .filter_map(|t| t["content"].as_str().map(str::to_string))
        .take(8)
        .collect()
}

fn counts(r: &[ClassResult]) -> Vec<Count> {
    r.iter().map(|c| (c.class, c.matched, c.cases)).collect()
}

use StressClass::*;

/// (class, matched, cases).
type Count = (StressClass, usize, usize);

/// (class, matched, cases) measured with seed 29, 100 per class, on the haswell variant (an AVX2
/// EPYC; llama.cpp's tokenizers have no CPU-variant code paths).
/// - WordPiece (all-MiniLM-L6-v2): 32 vocabulary entries (spacing marks such as "ा") that
///   llama.cpp strips; Hangul, where HF gives one [UNK] per word and llama.cpp splits the NFD
///   jamo into pieces; every word over 100 characters, which HF's WordPiece makes [UNK]
///   (`max_input_chars_per_word`) and llama.cpp splits.
/// - BPE and SPM: only the vocabulary entry "\0", which `llama_runtime::Model::tokenize`
///   refuses (a C string cannot hold NUL), so it counts as a mismatch.
fn expected() -> Vec<(&'static str, Vec<Count>)> {
    // Every random class matches; the vocabulary and special-text counts vary.
    let all_match = |vocab: (usize, usize), special: usize| {
        let mut v = vec![(VocabEntry, vocab.0, vocab.1), (Nfd, 200, 200)];
        for c in [Hangul, Jamo, Cjk, LatinCombining, EmojiZwj, MixedScripts] {
            v.push((c, 100, 100));
        }
        v.extend([(Whitespace, 100, 100), (LongWord, 100, 100)]);
        v.push((SpecialText, special, special));
        v
    };
    let mut wordpiece = all_match((30490, 30522), 35);
    for (class, matched, _) in wordpiece.iter_mut() {
        match class {
            Hangul => *matched = 17,
            MixedScripts => *matched = 56,
            LongWord => *matched = 0,
            _ => {}
        }
    }
    vec![
        ("all-MiniLM-L6-v2", wordpiece),
        ("SmolLM2-135M-Instruct", all_match((49151, 49152), 56)),
        ("gemma-3-270m", all_match((262143, 262144), 56)),
    ]
}

#[test]
fn stress_counts_on_wordpiece_bpe_and_spm_are_as_measured() {
    for (fixture, want) in expected() {
        let r = measure(fixture);
        assert_eq!(counts(&r), want, "{fixture}");
        // The first mismatch of a class is kept with its ids and pieces.
        let long = r.iter().find(|c| c.class == LongWord).unwrap();
        if let Some(m) = &long.first_mismatch {
            assert_eq!(m.hf_pieces, ["[CLS]", "[UNK]", "[SEP]"]);
            assert!(m.llama_ids.len() > 3);
        }
    }
}

/// The WordPiece long-word difference the stress found is measured on every WordPiece verify
/// and reported as a known limitation (with llama.cpp's ids differing), not gated: the file is
/// still GO, and the card will list it.
#[test]
fn wordpiece_long_word_is_a_reported_limitation_on_a_go_file() {
    use quantgate::verify::tokenizer::Divergence;
    let dir = common::hf("all-MiniLM-L6-v2");
    let tmp = tempfile::tempdir().unwrap();
    let gguf = tmp.path().join("f16.gguf");
    common::convert_to(&dir, &gguf, OutType::F16, false);
    let r = common::verify_with(&dir, &gguf, None);
    assert_eq!(r.verdict, quantgate::verify::Verdict::Go);
    let t = r.gate2_tokenizer.unwrap();
    let long: Vec<_> = t
        .limitations
        .iter()
        .filter(|l| l.divergence == Divergence::LongWord)
        .collect();
    assert_eq!(long.len(), 1);
    assert!(!long[0].same_ids, "{:?}", long[0]);
    assert!(long[0].text.starts_with("sha512 cf83e135"));
}

/// The reference's `tokenizers` reads the XLM-R fixture (Unigram, Precompiled charsmap,
/// Metaspace) as transformers does: XLM-R's published ids for "Hello world", and the ids
/// transformers 5.17 gives for a Korean/English sentence on this fixture.
#[test]
fn xlmr_fixture_tokenizes_as_transformers() {
    let dir = common::hf("multilingual-e5-small-q4w");
    let hf = HfTokenizer::from_file(&dir.join("tokenizer.json")).unwrap();
    assert_eq!(hf.encode("Hello world", true).unwrap(), [0, 35378, 8999, 2]);
    assert_eq!(
        hf.encode("한국어 텍스트입니다. Hello   world", true)
            .unwrap(),
        [0, 193751, 239355, 5826, 5, 35378, 8999, 2]
    );
}
