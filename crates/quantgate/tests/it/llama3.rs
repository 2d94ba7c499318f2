//! Llama 3 RoPE (`rope_type = "llama3"`) on the seeded Llama 3.2 fixture
//! (scripts/build-llama3-fixture.sh: the real config shrunk, the real tokenizer, transformers'
//! save_pretrained): convert writes `rope_freqs.weight` first, as llama.cpp's converter does,
//! with the peer's values; verify is GO on F16 and Q4_K_M; a wrong factor, a missing
//! `rope_freqs` and a config whose scaling differs from the file's are NO-GO naming the cause.

use crate::common;

use std::path::PathBuf;

use quantgate::convert::OutType;
use quantgate::verify::{BlockerCode, Verdict};

fn llama3() -> PathBuf {
    let hf = common::hf("Llama-3.2-1B-Instruct-2L-seeded");
    assert!(
        hf.join(".complete").exists(),
        "run scripts/build-llama3-fixture.sh first"
    );
    hf
}

/// convert_hf_to_gguf.py's rope_freqs for Llama 3.2 (head_dim 64, θ 500000, factor 32,
/// low/high 1/4, original 8192), as torch 2.14 printed them: 15 × 1, three blended, 14 × 32.
fn peer_rope_freqs() -> Vec<u8> {
    let mut bits = vec![0x3f800000u32; 15];
    bits.extend([0x3fd35ec2, 0x4052b46f, 0x411aaaee]);
    bits.extend([0x42000000; 14]);
    bits.iter().flat_map(|b| b.to_le_bytes()).collect()
}

#[test]
fn llama3_rope_f16_and_q4_k_m_verify_go_with_the_peers_rope_freqs() {
    let hf = llama3();
    let dir = tempfile::tempdir().unwrap();
    let f16 = dir.path().join("f16.gguf");
    let c = common::convert_to(&hf, &f16, OutType::F16, false);
    assert_eq!(c.tensors[0].gguf_name, "rope_freqs.weight");
    assert_eq!(
        (c.tensors[0].ggml_type.as_str(), &c.tensors[0].ne[..]),
        ("F32", &[32u64][..])
    );
    // 2 layers × 9 + token_embd + output_norm (tied: no output.weight) + rope_freqs.
    assert_eq!(c.tensors.len(), 21);
    let g = gguf::Gguf::open(&f16).unwrap();
    assert_eq!(g.header.tensors[0].name, "rope_freqs.weight");
    assert_eq!(g.tensor_data(&g.header.tensors[0]), &peer_rope_freqs()[..]);
    assert!(g
        .header
        .metadata
        .iter()
        .all(|(k, _)| !k.contains("rope.scaling")));

    let r = common::verify_with(&hf, &f16, None);
    assert_eq!(r.verdict, Verdict::Go, "{:?}", r.blockers);
    assert_eq!(r.gate1.bit_identical, 21);
    assert!(r.gate2_logits.as_ref().unwrap().min_cosine > 0.999);
    // Judged past the low-frequency wavelength, 8192 / 1 tokens.
    let lc = r.gate2_long_context.as_ref().expect("long-context logits");
    assert_eq!((lc.first_scored, lc.n_tokens), (8192, 8448));
    assert_eq!(lc.logits.positions, 256);
    assert!(lc.logits.min_cosine > 0.999, "{:?}", lc.logits.min_cosine);

    let q4 = dir.path().join("q4_k_m.gguf");
    common::quantize_to(&f16, &q4, "Q4_K_M");
    let r = common::verify_with(&hf, &q4, None);
    assert_eq!(r.verdict, Verdict::Go, "{:?}", r.blockers);
    assert_eq!(r.gate1.bit_identical, 21);
    assert_eq!(r.gate2_long_context.unwrap().logits.positions, 256);
}

/// rope_freqs of Llama 3.2's settings with another `factor`, as a converter with a wrong
/// default would write them.
fn rope_freqs_with_factor(factor: f64) -> Vec<u8> {
    let l = reference::rope::Llama3 {
        theta: 500000.0,
        head_dim: 64,
        factor,
        low_freq_factor: 1.0,
        high_freq_factor: 4.0,
        original_context: 8192.0,
    };
    l.rope_freqs()
        .iter()
        .flat_map(|x| x.to_le_bytes())
        .collect()
}

#[test]
fn factor_16_for_32_is_invisible_at_512_tokens_and_no_go_past_the_wavelength() {
    let hf = llama3();
    let dir = tempfile::tempdir().unwrap();
    let f16 = dir.path().join("f16.gguf");
    common::convert_to(&hf, &f16, OutType::F16, false);
    assert_eq!(rope_freqs_with_factor(32.0), peer_rope_freqs());
    let wrong = dir.path().join("factor-16.gguf");
    let freqs = rope_freqs_with_factor(16.0);
    common::tamper_gguf(
        &f16,
        &wrong,
        |_, _| {},
        |name, b| {
            if name == "rope_freqs.weight" {
                b.copy_from_slice(&freqs);
            }
        },
        None,
    );
    let r = common::verify_with(&hf, &wrong, None);
    assert_eq!(r.verdict, Verdict::NoGo);
    // Gate 1 names the tensor; Gate 2 sees nothing at ≤ 512 tokens (measured min cosine
    // 0.999996) but the long context fails the same thresholds (measured: min cosine 0.907,
    // argmax agreement 0.707).
    let b = r
        .blockers
        .iter()
        .find(|b| b.code == BlockerCode::TensorBits)
        .unwrap();
    assert_eq!(b.subject, "rope_freqs.weight");
    assert!(r.gate2_logits.as_ref().unwrap().min_cosine > 0.999);
    let long: Vec<_> = r
        .blockers
        .iter()
        .filter(|b| b.subject == "long-context logits")
        .map(|b| b.code)
        .collect();
    assert!(
        long.contains(&BlockerCode::LogitsCosine),
        "{:?}",
        r.blockers
    );
    assert!(long.contains(&BlockerCode::LogitsTop1), "{:?}", r.blockers);
    assert!(r.gate2_long_context.unwrap().logits.min_cosine < 0.95);
}

#[test]
fn a_wrong_factor_a_missing_rope_freqs_and_another_scaling_are_no_go() {
    let hf = llama3();
    let dir = tempfile::tempdir().unwrap();
    let f16 = dir.path().join("f16.gguf");
    common::convert_to(&hf, &f16, OutType::F16, false);
    let blocker = |gguf: &std::path::Path, hf: &std::path::Path, code: BlockerCode| {
        let r = common::verify_with(hf, gguf, None);
        assert_eq!(r.verdict, Verdict::NoGo);
        r.blockers
            .into_iter()
            .find(|b| b.code == code)
            .unwrap_or_else(|| panic!("no {code:?}"))
    };

    // Element 16 (a blended one) nudged by one ulp.
    let wrong = dir.path().join("wrong-factor.gguf");
    common::tamper_gguf(
        &f16,
        &wrong,
        |_, _| {},
        |name, b| {
            if name == "rope_freqs.weight" {
                b[16 * 4] ^= 1;
            }
        },
        None,
    );
    let b = blocker(&wrong, &hf, BlockerCode::TensorBits);
    assert_eq!(b.subject, "rope_freqs.weight");
    assert!(b.detail.starts_with("element 16 is "), "{}", b.detail);

    // The tensor dropped, as a converter that ignores rope_scaling would write the file.
    let missing = dir.path().join("missing.gguf");
    common::without_tensor(&f16, &missing, "rope_freqs.weight");
    let b = blocker(&missing, &hf, BlockerCode::TensorMissing);
    assert_eq!(b.subject, "rope_freqs.weight");

    // The source says factor 8 (Llama 3.1): the file's factors are not the source's.
    let other = dir.path().join("hf-factor-8");
    common::copy_hf(&hf, &other);
    common::edit_config(&other, |c| {
        let p = if c["rope_parameters"].is_object() {
            &mut c["rope_parameters"]
        } else {
            &mut c["rope_scaling"]
        };
        p["factor"] = serde_json::json!(8.0);
    });
    let b = blocker(&f16, &other, BlockerCode::TensorBits);
    assert_eq!(b.subject, "rope_freqs.weight");
}

#[test]
fn llama3_rope_without_one_of_its_fields_is_refused_naming_the_field() {
    let hf = llama3();
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("hf-no-low");
    common::copy_hf(&hf, &bad);
    common::edit_config(&bad, |c| {
        for k in ["rope_parameters", "rope_scaling"] {
            if let Some(p) = c[k].as_object_mut() {
                p.remove("low_freq_factor");
            }
        }
    });
    let e = common::convert_err(&bad);
    assert!(
        e.contains("low_freq_factor is missing for rope type llama3"),
        "{e:#}"
    );
}
