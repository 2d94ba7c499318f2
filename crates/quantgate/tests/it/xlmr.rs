//! XLM-RoBERTa embedders (issue 29): bge-m3 and multilingual-e5-base seeded with the real
//! tokenizer (XLMRobertaModel, written as llama.cpp's `bert` with a `t5`/UGM vocabulary and the
//! first `pad_token_id + 1` position rows dropped), and multilingual-e5-small with its real
//! weights rounded to Q4_0 (a BertModel with the same tokenizer, which llama.cpp's converter
//! refuses).

use crate::common;

use std::path::{Path, PathBuf};

use gguf::Value;
use quantgate::convert::OutType;
use quantgate::hash::sha256_file;
use quantgate::verify::{self, BlockerCode};

/// Converts `.cache/hf/NAME` as `outtype` into `dir`.
fn converted(name: &str, outtype: OutType, dir: &Path) -> PathBuf {
    let out = dir.join(format!("{name}-{outtype:?}.gguf"));
    common::convert_to(&common::hf(name), &out, outtype, false);
    out
}

/// Verifies and requires GO; returns the vector report.
fn go(name: &str, gguf: &Path) -> verify::vectors::VectorReport {
    let r = common::verify_with(&common::hf(name), gguf, None);
    assert_eq!(r.verdict, verify::Verdict::Go, "{name}: {:?}", r.blockers);
    assert_eq!(
        r.gate1.bit_identical, r.gate1.tensors,
        "{name}: Gate 1 tensors"
    );
    let v = r.gate2_vectors.clone().unwrap();
    eprintln!(
        "{name} {}: min cosine {:.7}, top-1 identical {}/{}, llama.cpp top-1 {:?}",
        gguf.display(),
        v.min_cosine,
        v.top1_identical,
        v.queries,
        v.llama_top1
    );
    assert_eq!(v.top1_identical, v.queries, "{name}: top-1");
    assert!(v.min_cosine >= 0.99, "{name}: min cosine {}", v.min_cosine);
    v
}

/// The F16 files are convert_hf_to_gguf.py's, byte for byte (every key and value in its order,
/// the t5 vocabulary, the charsmap, the cut position table, every tensor and its padding):
/// sha256 recorded by scripts/record-peer-files.sh.
#[test]
fn xlmr_f16_files_equal_convert_hf_to_gguf() {
    let peer =
        common::json(&common::repo().join("crates/quantgate/tests/fixtures/peer-files.json"));
    let tmp = tempfile::tempdir().unwrap();
    for name in ["bge-m3-2L-seeded", "multilingual-e5-base-2L-seeded"] {
        let out = converted(name, OutType::F16, tmp.path());
        let want = &peer["models"][name];
        assert_eq!(
            std::fs::metadata(&out).unwrap().len(),
            want["bytes"].as_u64().unwrap(),
            "{name}: size"
        );
        assert_eq!(
            sha256_file(&out).unwrap(),
            want["sha256"].as_str().unwrap(),
            "{name}: sha256"
        );
        std::fs::remove_file(&out).unwrap();
    }
}

/// What the conversion writes for XLM-R, read back: the t5 keys, the realigned ids, the
/// context less the dropped rows, and the pooling from 1_Pooling.
#[test]
fn bge_m3_keys_are_the_ugm_layout() {
    let tmp = tempfile::tempdir().unwrap();
    let out = dir_vocab_only("bge-m3-2L-seeded", tmp.path());
    let g = gguf::Gguf::open(&out).unwrap();
    let m = |k: &str| g.header.get(k).unwrap_or_else(|| panic!("{k}")).clone();
    assert_eq!(m("tokenizer.ggml.model"), Value::string("t5"));
    assert_eq!(m("tokenizer.ggml.pre"), Value::string("default"));
    assert_eq!(m("bert.context_length"), Value::U32(8192));
    // CLS pooling (llama.cpp LLAMA_POOLING_TYPE_CLS = 2).
    assert_eq!(m("bert.pooling_type"), Value::U32(2));
    assert_eq!(m("tokenizer.ggml.add_space_prefix"), Value::Bool(true));
    assert_eq!(
        m("tokenizer.ggml.remove_extra_whitespaces"),
        Value::Bool(true)
    );
    let tokens = m("tokenizer.ggml.tokens");
    let t = tokens.as_array().unwrap();
    assert_eq!(t.len(), 250002);
    let s = |i: usize| t[i].as_str().unwrap().to_string();
    assert_eq!(
        [s(0), s(1), s(2), s(3), s(4), s(35378), s(250001)],
        [
            "<s>",
            "<pad>",
            "</s>",
            "<unk>",
            ",",
            "▁Hello",
            "[PAD250000]"
        ]
    );
    let charsmap = m("tokenizer.ggml.precompiled_charsmap");
    // sentencepiece 0.2.3's nmt_nfkc, the fixture's (testdata/xlmr/PROVENANCE.md).
    assert_eq!(charsmap.as_array().unwrap().len(), 240007);
    assert_eq!(m("tokenizer.ggml.mask_token_id"), Value::U32(250001));
}

fn dir_vocab_only(name: &str, dir: &Path) -> PathBuf {
    let out = dir.join(format!("{name}.vocab.gguf"));
    common::convert_to(&common::hf(name), &out, OutType::F16, true);
    out
}

/// verify GO on F16 and Q8_0 for the three embedders, with the vectors recorded; the real
/// multilingual-e5-small finds 9 of the 10 built-in queries' documents (the Korean subway
/// query lands on the Korean Seoul document rather than the English fare one) on both sides.
#[test]
fn xlmr_embedders_verify_go_on_f16_and_q8_0() {
    let tmp = tempfile::tempdir().unwrap();
    for name in [
        "multilingual-e5-small-q4w",
        "bge-m3-2L-seeded",
        "multilingual-e5-base-2L-seeded",
    ] {
        for outtype in [OutType::F16, OutType::Q8_0] {
            let f = converted(name, outtype, tmp.path());
            let v = go(name, &f);
            if name == "multilingual-e5-small-q4w" {
                assert_eq!(v.llama_top1, [0, 1, 2, 3, 4, 5, 6, 7, 8, 6]);
                // Mean pooling (LLAMA_POOLING_TYPE_MEAN = 1).
                assert_eq!(v.llama_pooling, 1);
            }
            std::fs::remove_file(&f).unwrap();
        }
    }
}

/// Tampered XLM-R files are NO-GO, each for its own reason: a charsmap byte, a piece score,
/// the pooling type, and the position offset (a file written without dropping the rows, as a
/// converter that ignores pad_token_id would).
#[test]
fn xlmr_tampers_are_no_go() {
    let name = "bge-m3-2L-seeded";
    let hf = common::hf(name);
    let tmp = tempfile::tempdir().unwrap();
    let good = converted(name, OutType::F16, tmp.path());
    let codes = |f: &Path| -> Vec<(BlockerCode, String)> {
        common::no_go_blockers(&hf, f)
            .into_iter()
            .map(|(c, s, _)| (c, s))
            .collect()
    };
    let bad = tmp.path().join("bad.gguf");
    let flip = |key: &'static str, i: usize| {
        move |k: &str, v: &mut Value| {
            if k != key {
                return;
            }
            let Value::Array(_, items) = v else {
                panic!("{k}")
            };
            items[i] = match &items[i] {
                Value::U8(b) => Value::U8(b ^ 1),
                Value::F32(x) => Value::F32(x - 0.5),
                other => panic!("{other:?}"),
            };
        }
    };
    for (key, i) in [
        ("tokenizer.ggml.precompiled_charsmap", 1000),
        ("tokenizer.ggml.scores", 35378),
    ] {
        common::tamper_gguf(&good, &bad, flip(key, i), |_, _| {}, None);
        let c = codes(&bad);
        assert!(
            c.contains(&(BlockerCode::MetadataMismatch, key.to_string())),
            "{key}: {c:?}"
        );
    }
    common::with_keys(&good, &bad, &[("bert.pooling_type", Value::U32(1))], &[]);
    let c = codes(&bad);
    assert!(
        c.contains(&(BlockerCode::MetadataMismatch, "bert.pooling_type".into())),
        "{c:?}"
    );
    // Every position row kept: the converter's output for the folder without pad_token_id.
    let no_pad = tmp.path().join("no-pad");
    common::copy_hf(&hf, &no_pad);
    common::edit_config(&no_pad, |c| {
        c.as_object_mut().unwrap().remove("pad_token_id");
    });
    common::convert_to(&no_pad, &bad, OutType::F16, false);
    let c = codes(&bad);
    for want in [
        (BlockerCode::TensorShape, "position_embd.weight".to_string()),
        (BlockerCode::MetadataMismatch, "bert.context_length".into()),
    ] {
        assert!(c.contains(&want), "{want:?}: {c:?}");
    }
}
