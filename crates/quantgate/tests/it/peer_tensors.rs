//! `convert`'s F16 output against llama.cpp's own converter on the real-weight folders: the
//! same tensors (name, ggml type, shape) holding the same bytes. The peer's per-tensor sha256
//! were recorded once by scripts/record-peer-tensors.sh (convert_hf_to_gguf.py of the
//! llama-cpp-python==0.3.36 sdist, --outtype f16) into tests/fixtures/peer-tensors.json, with
//! their provenance.

use crate::common;

use std::collections::BTreeMap;

use quantgate::convert::OutType;
use quantgate::hash::sha256_bytes;

fn peer() -> serde_json::Value {
    common::json(&common::repo().join("crates/quantgate/tests/fixtures/peer-tensors.json"))
}

/// Converts `.cache/hf/NAME` to F16 and compares every tensor with the peer's record.
fn same_tensors_as_peer(name: &str, n_tensors: usize) {
    let want = peer()["models"][name].as_array().unwrap().clone();
    assert_eq!(want.len(), n_tensors, "{name}: the recorded tensor count");
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("f16.gguf");
    common::convert_to(&common::hf(name), &out, OutType::F16, false);
    let g = gguf::Gguf::open(&out).unwrap();
    let ours: BTreeMap<&str, &gguf::TensorInfo> = g
        .header
        .tensors
        .iter()
        .map(|t| (t.name.as_str(), t))
        .collect();
    assert_eq!(ours.len(), want.len(), "{name}: tensor count");
    let mut differ = Vec::new();
    for w in &want {
        let n = w["name"].as_str().unwrap();
        let t = ours
            .get(n)
            .unwrap_or_else(|| panic!("{name}: {n} missing from ours"));
        let shape: Vec<u64> = w["shape"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap())
            .collect();
        assert_eq!(t.dims, shape, "{name}: {n} shape");
        assert_eq!(
            t.ggml_type.to_string(),
            w["type"].as_str().unwrap(),
            "{name}: {n} type"
        );
        if sha256_bytes(g.tensor_data(t)) != w["sha256"].as_str().unwrap() {
            differ.push(n.to_string());
        }
    }
    assert!(
        differ.is_empty(),
        "{name}: bytes differ from the peer's: {differ:?}"
    );
}

#[test]
fn smollm2_f16_tensors_equal_convert_hf_to_gguf() {
    same_tensors_as_peer("SmolLM2-135M-Instruct", 272);
}

#[test]
fn qwen2_f16_tensors_equal_convert_hf_to_gguf() {
    same_tensors_as_peer("Qwen2.5-Coder-0.5B-Instruct", 291);
}

#[test]
fn gemma3_f16_tensors_equal_convert_hf_to_gguf() {
    // The norms are stored as 1 + w, added in f32 after widening the BF16 source.
    same_tensors_as_peer("gemma-3-270m", 236);
}

#[test]
fn llama3_rope_f16_tensors_and_order_equal_convert_hf_to_gguf() {
    // rope_freqs.weight (generated from rope_parameters llama3) included, written first.
    let name = "Llama-3.2-1B-Instruct-2L-seeded";
    same_tensors_as_peer(name, 21);
    same_order_as_peer(name);
}

#[test]
fn qwen3moe_f16_tensors_and_order_equal_convert_hf_to_gguf() {
    // 16 experts stacked into 3-D ffn_{down,gate,up}_exps after each layer's last expert;
    // the router (ffn_gate_inp) kept F32.
    let name = "Qwen3-30B-A3B-2L-seeded";
    same_tensors_as_peer(name, 27);
    same_order_as_peer(name);
}

#[test]
fn phi3_longrope_f16_tensors_and_order_equal_convert_hf_to_gguf() {
    // rope_factors_long/short (generated from the LongRoPE lists) first; qkv_proj and
    // gate_up_proj fused as attn_qkv and ffn_up.
    let name = "Phi-4-mini-2L-seeded";
    same_tensors_as_peer(name, 16);
    same_order_as_peer(name);
}

/// Our F16 conversion of `name` writes its tensors in the peer's order.
fn same_order_as_peer(name: &str) {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("f16.gguf");
    common::convert_to(&common::hf(name), &out, OutType::F16, false);
    let ours: Vec<String> = gguf::Gguf::open(&out)
        .unwrap()
        .header
        .tensors
        .iter()
        .map(|t| t.name.clone())
        .collect();
    let peer: Vec<String> = peer()["models"][name]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(ours, peer);
}
