//! Seed A end to end: a Qwen3-Embedding checkpoint (the real config, tokenizer and
//! sentence-transformers files of Qwen3-Embedding-0.6B: qwen3, last-token pooling, and
//! `<|endoftext|>` appended by tokenizer.json's TemplateProcessing) shrunk to 2 layers with
//! SEEDED weights (scripts/build-qwen3-embedding-fixture.sh; no real weights are reachable).
//! convert → verify GO, and the seed's two failures: `add_eos_token` written false, and
//! measuring with add_special = false.

use crate::common;

use std::path::PathBuf;

use gguf::Value;
use llama_runtime::{Context, ContextParams, Model};
use quantgate::convert::OutType;
use quantgate::verify::outcome::{BlockerCode, Verdict};
use quantgate::verify::tokenizer::Mode;
use quantgate::verify::vectors::{cosine, RefModel};

const EOS: &str = "<|endoftext|> (id 151643)";

fn seed_a() -> PathBuf {
    let p = common::hf("Qwen3-Embedding-0.6B-2L-seeded");
    assert!(
        p.join(".complete").exists(),
        "run scripts/build-qwen3-embedding-fixture.sh"
    );
    p
}

#[test]
fn seed_a_converts_and_verifies_go_in_the_common_mode() {
    let dir = tempfile::tempdir().unwrap();
    let f16 = dir.path().join("f16.gguf");
    common::convert_to(&seed_a(), &f16, OutType::F16, false);
    let r = common::verify_with(&seed_a(), &f16, None);
    assert_eq!(r.verdict, Verdict::Go, "{:?}", r.blockers);
    assert_eq!(r.gate1.bit_identical, r.gate1.tensors);
    assert_eq!(
        r.gate1.tensors, 24,
        "2 layers × 11 + token_embd + output_norm"
    );
    let v = r.gate2_vectors.as_ref().unwrap();
    assert_eq!(v.llama_pooling, 3, "llama.cpp's LLAMA_POOLING_TYPE_LAST");
    assert!(v.min_cosine >= 0.9999, "min cosine {}", v.min_cosine);
    assert_eq!(v.top1_identical, v.queries);

    // The mode table: HF appends <|endoftext|> to every text, so no add_special=false mode
    // matches any text, and the verdict is measured in the common mode.
    let t = r.gate2_tokenizer.as_ref().unwrap();
    let common_mode = Mode {
        add_special: true,
        parse_special: true,
    };
    assert_eq!(t.matching_modes, [common_mode]);
    for m in t.modes.iter().filter(|m| !m.mode.add_special) {
        assert_eq!(m.matched, 0, "{}: {}/{}", m.mode, m.matched, m.total);
        let shape = &m.first_mismatch.as_ref().unwrap().shape;
        assert!(
            shape.contains(&format!("HF appends {EOS}")),
            "{}: {shape}",
            m.mode
        );
    }

    // The call-path trap, measured: llama.cpp's vectors of the same texts tokenized with
    // add_special = false (no EOS, so the pooled token is the text's last) against the
    // reference's on HF's ids.
    let model = Model::load(&f16, false).unwrap();
    let mut ctx = Context::new(&model, ContextParams::embeddings(512, 2)).unwrap();
    let reference = RefModel::load(&seed_a(), quantgate::source::arch::Arch::Qwen3).unwrap();
    let tok = quantgate::source::tokenizer::load(&seed_a()).unwrap();
    for text in [
        "What is the capital of France?",
        "Paris is the capital of France.",
    ] {
        let want = reference
            .embed(&tok.tokenizer.encode(text, true).unwrap())
            .unwrap();
        let common = ctx
            .embed(&model.tokenize(text, true, true).unwrap())
            .unwrap();
        let trap = ctx
            .embed(&model.tokenize(text, false, true).unwrap())
            .unwrap();
        let (good, bad) = (cosine(&common, &want), cosine(&trap, &want));
        assert!(good >= 0.9999, "{text}: add_special=true {good}");
        assert!(bad < 0.9, "{text}: add_special=false {bad}");
    }
}

#[test]
fn add_eos_token_written_false_is_no_go_naming_the_token() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.gguf");
    common::convert_to(&seed_a(), &good, OutType::F16, false);
    let bad = dir.path().join("no-eos.gguf");
    common::tamper_gguf(
        &good,
        &bad,
        |k, v| {
            if k == "tokenizer.ggml.add_eos_token" {
                assert_eq!(
                    *v,
                    Value::Bool(true),
                    "the converter writes add_eos_token true"
                );
                *v = Value::Bool(false);
            }
        },
        |_, _| {},
        None,
    );
    let r = common::verify_with(&seed_a(), &bad, None);
    assert_eq!(r.verdict, Verdict::NoGo);
    let has = |code: BlockerCode, subject: &str, detail: &str| {
        r.blockers
            .iter()
            .any(|b| b.code == code && b.subject.contains(subject) && b.detail.contains(detail))
    };
    // Gate 1 names the key; Gate 2's table shows the offset of one on every text and names
    // the token; the vectors collapse.
    assert!(
        has(
            BlockerCode::MetadataMismatch,
            "tokenizer.ggml.add_eos_token",
            ""
        ),
        "{:?}",
        r.blockers
    );
    assert!(
        has(BlockerCode::TokenizerNoMode, "token ids", EOS),
        "{:?}",
        r.blockers
    );
    let t = r.gate2_tokenizer.as_ref().unwrap();
    assert!(t.texts >= 30, "{} texts", t.texts);
    for m in &t.modes {
        assert_eq!(m.matched, 0, "{}: {}/{}", m.mode, m.matched, m.total);
    }
    let m = &t.modes.iter().find(|m| m.mode.add_special).unwrap();
    let x = m.first_mismatch.as_ref().unwrap();
    assert_eq!(x.hf.len(), x.llama.len() + 1);
    assert_eq!(
        x.shape,
        format!("special-token offset: HF appends {EOS}; llama.cpp does not")
    );
    let v = r.gate2_vectors.as_ref().unwrap();
    assert!(v.min_cosine < 0.9, "min cosine {}", v.min_cosine);
    assert!(has(BlockerCode::VectorsCosine, "", ""), "{:?}", r.blockers);
}

/// Seed A quantized by mlx-lm with `--quant-predicate mixed_4_6`
/// (scripts/build-mlx-fixtures.sh): the 4-bit modules go in as Q4_1 exactly, the two 6-bit ones
/// (layer 1's v_proj and down_proj) need the declared fallback, and verify says GO.
#[test]
fn seed_a_mixed_4_6_converts_with_the_declared_fallback_and_verifies_go() {
    use quantgate::convert::{self, mlx::Fallback, ConvertOptions};
    let dir = common::hf("Qwen3-Embedding-0.6B-2L-seeded-mlx-mixed-4-6");
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("mixed.gguf");
    let opts = |fallback| ConvertOptions {
        outtype: OutType::Auto,
        vocab_only: false,
        fallback,
        allow_nonfinite: false,
    };
    let e = format!(
        "{:#}",
        convert::convert(&dir, &out, &opts(None)).unwrap_err()
    );
    assert!(e.contains("2 tensor(s) cannot be stored exactly"), "{e}");
    assert!(
        e.contains("model.layers.1.self_attn.v_proj.weight (6-bit affine")
            && e.contains("model.layers.1.mlp.down_proj.weight (6-bit affine"),
        "{e}"
    );
    assert!(!out.exists());
    let r = convert::convert(&dir, &out, &opts(Some(Fallback::F32))).unwrap();
    let count = |ty: &str| -> usize {
        r.rules
            .iter()
            .filter(|s| s.ggml_type == ty && !s.rule.starts_with("kept"))
            .map(|s| s.tensors)
            .sum()
    };
    assert_eq!((count("Q4_1"), count("F32")), (13, 2));
    let v = common::verify_with(&dir, &out, None);
    assert_eq!(v.verdict, Verdict::Go, "{:?}", v.blockers);
    let a = v.gate1_affine.as_ref().unwrap();
    assert_eq!((a.fields_identical, a.values_identical), (13, 13));
    assert_eq!((a.fallback_tensors, a.fallback_identical), (2, 2));
    assert!(v.gate2_vectors.as_ref().unwrap().min_cosine >= 0.999);
}

/// Seed A released: F16 and Q8_0 of the seeded checkpoint through `quantgate release` (verify
/// each, card, SHA256SUMS, Gate 3 on the released bytes) end in GO, the sums check, and the
/// sentence-transformers pooling files that declare last-token pooling ship with it.
#[test]
fn seed_a_release_is_go() {
    let tmp = tempfile::tempdir().unwrap();
    let f16 = tmp.path().join("seed-a-f16.gguf");
    common::convert_to(&seed_a(), &f16, OutType::F16, false);
    let q8 = tmp.path().join("seed-a-q8_0.gguf");
    common::quantize_to(&f16, &q8, "Q8_0");
    let out = tmp.path().join("release");
    let o = common::qg()
        .arg("release")
        .arg("--hf")
        .arg(seed_a())
        .arg("--gguf")
        .arg(&f16)
        .arg("--gguf")
        .arg(&q8)
        .arg("-o")
        .arg(&out)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        o.status.success() && stdout.lines().last() == Some("GO"),
        "{stdout}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    for f in [
        "seed-a-f16.gguf",
        "seed-a-q8_0.gguf",
        "SHA256SUMS",
        "README.md",
    ] {
        assert!(out.join(f).is_file(), "{f} missing from the release");
    }
    let sums = std::process::Command::new("sha256sum")
        .args(["-c", "SHA256SUMS"])
        .current_dir(&out)
        .output()
        .unwrap();
    assert!(sums.status.success(), "{sums:?}");
    let pooling = common::json(&out.join("1_Pooling/config.json"));
    assert_eq!(pooling["pooling_mode_lasttoken"], true);
}
