//! phi3 with LongRoPE on the seeded Phi-4-mini fixture (scripts/build-phi3-fixture.sh: the
//! published config shrunk, Phi-4's tokenizer, transformers' save_pretrained): convert writes
//! `rope_factors_long.weight` and `rope_factors_short.weight` first and
//! `phi3.rope.scaling.attn_factor`, as llama.cpp's converter does, and keeps `qkv_proj` and
//! `gate_up_proj` fused; verify is GO on F16 and Q4_K_M; a wrong factor, a wrong attention
//! factor and a missing factor tensor are NO-GO naming the cause; configs the peer would map
//! differently than transformers runs them are refused naming the field.

use crate::common;

use std::path::PathBuf;

use quantgate::convert::OutType;
use quantgate::verify::{BlockerCode, Verdict};

fn phi3() -> PathBuf {
    let hf = common::hf("Phi-4-mini-2L-seeded");
    assert!(
        hf.join(".complete").exists(),
        "run scripts/build-phi3-fixture.sh first"
    );
    hf
}

/// Phi-4-mini's published `long_factor` (testdata/hf-configs/Phi-4-mini-instruct) as F32 bytes.
fn published_long_factor() -> Vec<u8> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../testdata/hf-configs/Phi-4-mini-instruct/config.json"
    );
    let c: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    c["rope_scaling"]["long_factor"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|x| (x.as_f64().unwrap() as f32).to_le_bytes())
        .collect()
}

fn key(g: &gguf::Gguf, k: &str) -> Option<gguf::Value> {
    g.header
        .metadata
        .iter()
        .find(|(n, _)| n == k)
        .map(|(_, v)| v.clone())
}

#[test]
fn phi3_longrope_f16_and_q4_k_m_verify_go_with_the_peers_factor_tensors() {
    let hf = phi3();
    let dir = tempfile::tempdir().unwrap();
    let f16 = dir.path().join("f16.gguf");
    let c = common::convert_to(&hf, &f16, OutType::F16, false);
    let names: Vec<&str> = c.tensors.iter().map(|t| t.gguf_name.as_str()).collect();
    assert_eq!(
        names[..2],
        ["rope_factors_long.weight", "rope_factors_short.weight"]
    );
    // 2 generated + token_embd + output_norm (tied: no output.weight) + 2 layers × 6.
    assert_eq!(c.tensors.len(), 16);
    let qkv = c
        .tensors
        .iter()
        .find(|t| t.gguf_name == "blk.0.attn_qkv.weight")
        .unwrap();
    assert_eq!(qkv.ne, [1536, 1536 + 2 * 512]);
    let up = c
        .tensors
        .iter()
        .find(|t| t.gguf_name == "blk.1.ffn_up.weight")
        .unwrap();
    assert_eq!(
        (up.hf_name.as_str(), &up.ne[..]),
        (
            "model.layers.1.mlp.gate_up_proj.weight",
            &[1536u64, 8192][..]
        )
    );
    let g = gguf::Gguf::open(&f16).unwrap();
    assert_eq!(
        g.tensor_data(&g.header.tensors[0]),
        &published_long_factor()[..]
    );
    // sqrt(1 + ln 32 / ln 4096) as f32, as the peer wrote it.
    assert_eq!(
        key(&g, "phi3.rope.scaling.attn_factor"),
        Some(gguf::Value::F32(1.1902381))
    );
    assert_eq!(
        key(&g, "phi3.rope.dimension_count"),
        Some(gguf::Value::U32(96))
    );
    assert_eq!(
        key(&g, "phi3.rope.scaling.original_context_length"),
        Some(gguf::Value::U32(4096))
    );
    assert_eq!(
        key(&g, "phi3.attention.sliding_window"),
        Some(gguf::Value::U32(262144))
    );
    assert_eq!(key(&g, "phi3.attention.key_length"), None);
    assert_eq!(
        key(&g, "tokenizer.ggml.pre"),
        Some(gguf::Value::string("dbrx"))
    );

    let r = common::verify_with(&hf, &f16, None);
    assert_eq!(r.verdict, Verdict::Go, "{:?}", r.blockers);
    assert_eq!(r.gate1.bit_identical, 16);
    let l = r.gate2_logits.as_ref().unwrap();
    assert!(l.min_cosine > 0.999, "{}", l.min_cosine);
    assert!(
        r.notes
            .iter()
            .any(|n| n.starts_with("LongRoPE: judged below the original context (4096 tokens)")),
        "{:?}",
        r.notes
    );

    let q4 = dir.path().join("q4_k_m.gguf");
    common::quantize_to(&f16, &q4, "Q4_K_M");
    let r = common::verify_with(&hf, &q4, None);
    assert_eq!(r.verdict, Verdict::Go, "{:?}", r.blockers);
    assert_eq!(r.gate1.bit_identical, 16);
}

#[test]
fn a_wrong_factor_a_wrong_attn_factor_and_a_missing_factor_tensor_are_no_go() {
    let hf = phi3();
    let dir = tempfile::tempdir().unwrap();
    let f16 = dir.path().join("f16.gguf");
    common::convert_to(&hf, &f16, OutType::F16, false);

    // Short factor 10 of 48 doubled: llama.cpp rotates with it at every context below 4096.
    let wrong = dir.path().join("wrong-factor.gguf");
    common::tamper_gguf(
        &f16,
        &wrong,
        |_, _| {},
        |name, b| {
            if name == "rope_factors_short.weight" {
                b[40..44].copy_from_slice(&2.0f32.to_le_bytes());
            }
        },
        None,
    );
    let b = common::no_go_blockers(&hf, &wrong);
    assert!(
        b.iter().any(|b| b.0 == BlockerCode::TensorBits
            && b.1 == "rope_factors_short.weight"
            && b.2.starts_with("element 10 is ")),
        "{b:?}"
    );

    // The attention factor a converter without LongRoPE would write.
    let attn = dir.path().join("attn-factor-1.gguf");
    common::tamper_gguf(
        &f16,
        &attn,
        |k, v| {
            if k == "phi3.rope.scaling.attn_factor" {
                *v = gguf::Value::F32(1.0);
            }
        },
        |_, _| {},
        None,
    );
    let b = common::no_go_blockers(&hf, &attn);
    assert!(
        b.iter().any(|b| b.0 == BlockerCode::MetadataMismatch
            && b.1 == "phi3.rope.scaling.attn_factor"),
        "{b:?}"
    );

    let missing = dir.path().join("missing.gguf");
    common::without_tensor(&f16, &missing, "rope_factors_long.weight");
    let b = common::no_go_blockers(&hf, &missing);
    assert!(
        b.iter()
            .any(|b| b.0 == BlockerCode::TensorMissing && b.1 == "rope_factors_long.weight"),
        "{b:?}"
    );
}

#[test]
fn configs_the_peer_would_run_differently_are_refused_naming_the_field() {
    let hf = phi3();
    let dir = tempfile::tempdir().unwrap();
    let case = |name: &str, edit: &dyn Fn(&mut serde_json::Value)| -> String {
        let d = dir.path().join(name);
        common::copy_hf(&hf, &d);
        common::edit_config(&d, |c| edit(c));
        common::convert_err(&d)
    };
    let e = case("attention-factor", &|c| {
        c["rope_scaling"]["attention_factor"] = serde_json::json!(1.0)
    });
    assert!(
        e.contains("field rope_scaling.attention_factor = 1.0"),
        "{e}"
    );
    let e = case("short-list", &|c| {
        c["rope_scaling"]["short_factor"] = serde_json::json!([1.0])
    });
    assert!(
        e.contains("field rope_scaling.short_factor has 1 values"),
        "{e}"
    );
    let e = case("yarn", &|c| {
        c["rope_scaling"]["type"] = serde_json::json!("yarn");
        c["rope_scaling"]["factor"] = serde_json::json!(32.0);
    });
    // yarn has no factor lists: the peer would write them with yarn's attn_factor.
    assert!(
        e.contains("field rope_scaling.long_factor = [") && e.contains("rope type yarn"),
        "{e}"
    );
    // LongRoPE on a llama (the seeded Llama 3.2): llama.cpp reads the factors for phi3 only.
    let d = dir.path().join("llama-longrope");
    common::copy_hf(&common::hf("Llama-3.2-1B-Instruct-2L-seeded"), &d);
    common::edit_config(&d, |c| {
        let ones = serde_json::json!(vec![1.0; 32]);
        let key = if c["rope_parameters"].is_object() {
            "rope_parameters"
        } else {
            "rope_scaling"
        };
        c[key] = serde_json::json!({"rope_type": "longrope", "rope_theta": 500000.0,
            "long_factor": ones, "short_factor": ones, "original_max_position_embeddings": 8192});
    });
    let e = common::convert_err(&d);
    assert!(
        e.contains("rope type longrope with architecture llama: llama.cpp reads LongRoPE factors for phi3 only"),
        "{e}"
    );
    let d = dir.path().join("spm");
    common::copy_hf(&hf, &d);
    let tc = d.join("tokenizer_config.json");
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&tc).unwrap()).unwrap();
    v["tokenizer_class"] = serde_json::json!("LlamaTokenizer");
    std::fs::write(&tc, v.to_string()).unwrap();
    let e = common::convert_err(&d);
    assert!(
        e.contains("field tokenizer_class = \"LlamaTokenizer\""),
        "{e}"
    );
}

#[test]
fn the_model_card_names_the_long_short_switch_and_the_stripped_special_tokens() {
    let hf = phi3();
    let dir = tempfile::tempdir().unwrap();
    let f16 = dir.path().join("f16.gguf");
    common::convert_to(&hf, &f16, OutType::F16, false);
    let rel = dir.path().join("release");
    let out = common::qg()
        .args(["release", "--hf"])
        .arg(&hf)
        .arg("--gguf")
        .arg(&f16)
        .arg("-o")
        .arg(&rel)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let card = std::fs::read_to_string(rel.join("README.md")).unwrap();
    let not_verified = &card[card.find("## What was not verified").unwrap()..];
    assert!(
        not_verified.contains("- LongRoPE: judged below the original context (4096 tokens)"),
        "{not_verified}"
    );
    let limits = &card[card.find("## Tokenizer limitations").unwrap()..];
    assert!(
        limits.contains("lstrip/rstrip")
            && limits.contains("\"<|endoftext|> inside text\" gives different ids"),
        "{limits}"
    );
}
