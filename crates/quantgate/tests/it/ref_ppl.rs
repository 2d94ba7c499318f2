//! Reference perplexity (candle decoder on the HF folder, `eval::ref_ppl`) agrees with
//! llama.cpp's perplexity of an F16 GGUF converted from the same folder, over the same chunks.

use crate::common;

use quantgate::convert::OutType;
use quantgate::eval::ppl::{self, PplParams};
use quantgate::eval::ref_ppl::reference_perplexity;

/// The reference's PPL of `name` and llama.cpp's of its F16 conversion: 2 chunks of 128
/// tokens; returns the relative difference.
fn relative_difference(name: &str) -> f64 {
    relative_difference_at(name, 128, 2)
}

/// As [`relative_difference`], over `chunks` chunks of `n_ctx` tokens.
fn relative_difference_at(name: &str, n_ctx: usize, chunks: usize) -> f64 {
    let hf = common::hf(name);
    assert!(hf.join(".complete").exists(), "run scripts/test.sh first");
    let text = ppl::read_text(&common::wiki()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let gguf = dir.path().join("smollm2-f16.gguf");
    common::convert_to(&hf, &gguf, OutType::F16, false);
    let l = ppl::perplexity(
        &gguf,
        &text,
        &PplParams {
            n_ctx: n_ctx as u32,
            chunks: Some(chunks),
            threads: quantgate::threads::Threads::DEFAULT,
            n_ubatch: 512,
        },
        |_, _, _| {},
    )
    .unwrap();
    // The same BOS rule as llama-perplexity, read from the converted vocab.
    let model = llama_runtime::Model::load(&gguf, true).unwrap();
    let add_bos = model.add_bos().then(|| model.bos() as u32);
    drop(model);
    let r = reference_perplexity(&hf, &text, n_ctx, chunks, add_bos, |_, _| {}).unwrap();
    let rel = (r.ppl / l.ppl - 1.0).abs();
    eprintln!(
        "add_bos {add_bos:?}; reference PPL {:.6} ± {:.6} ({} tokens of {}, {:.1} s); \
         llama.cpp F16 PPL {:.6} ± {:.6} ({} tokens of {}); relative difference {rel:.2e}",
        r.ppl,
        r.ppl_se,
        r.scored_tokens,
        r.text_tokens,
        r.seconds,
        l.ppl,
        l.ppl_se,
        l.scored_tokens,
        l.text_tokens
    );
    assert_eq!(
        r.text_tokens, l.text_tokens,
        "tokenizers disagree on the text"
    );
    assert_eq!((r.chunks, r.scored_tokens), (l.chunks, l.scored_tokens));
    assert!(r.ppl.is_finite() && r.ppl_se > 0.0);
    rel
}

#[test]
fn reference_ppl_matches_llama_cpp_on_f16() {
    // Measured: 22.820379 vs 22.815551 (2.1e-4; F16 weights and llama.cpp's kernels).
    let rel = relative_difference("SmolLM2-135M-Instruct");
    assert!(rel < 2e-3, "relative difference {rel}");
}

#[test]
fn reference_ppl_matches_llama_cpp_on_qwen2_f16() {
    // The same bound as SmolLM2's, fixed before the first qwen2 measurement.
    let rel = relative_difference("Qwen2.5-Coder-0.5B-Instruct");
    assert!(rel < 2e-3, "relative difference {rel}");
}

#[test]
fn reference_ppl_matches_llama_cpp_on_gemma3_f16_past_the_sliding_window() {
    // One chunk of 1024 tokens: the sliding-window layers (window 512) mask half the context.
    // The same bound as SmolLM2's, fixed before the first gemma3 measurement.
    let rel = relative_difference_at("gemma-3-270m", 1024, 1);
    assert!(rel < 2e-3, "relative difference {rel}");
}

#[test]
fn reference_ppl_matches_llama_cpp_on_llama3_f16() {
    // The same bound as SmolLM2's, fixed before the first llama3 measurement.
    let rel = relative_difference("Llama-3.2-1B-Instruct-2L-seeded");
    assert!(rel < 2e-3, "relative difference {rel}");
}

#[test]
fn reference_ppl_matches_llama_cpp_on_qwen3moe_f16() {
    // The same bound as SmolLM2's, fixed before the first qwen3moe measurement; the reference
    // routes every token itself.
    let rel = relative_difference("Qwen3-30B-A3B-2L-seeded");
    assert!(rel < 2e-3, "relative difference {rel}");
}

#[test]
fn reference_ppl_matches_llama_cpp_on_phi3_longrope_f16() {
    // The same bound as SmolLM2's, fixed before the first phi3 measurement: chunks of 128
    // tokens, below the original context, so both sides rotate with the short factors.
    let rel = relative_difference("Phi-4-mini-2L-seeded");
    assert!(rel < 2e-3, "relative difference {rel}");
}
