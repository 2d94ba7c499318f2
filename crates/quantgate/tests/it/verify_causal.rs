//! Causal LMs (issue 4, first part): the SmolLM2-135M-Instruct HF fixture (built by
//! scripts/build-smollm2-fixture.sh from real parts) → F16 GGUF with llama's Q/K permutation →
//! verify GO, with per-position logits compared against the candle reference.

use crate::common;

use std::path::PathBuf;

use quantgate::convert::OutType;
use quantgate::verify::{self, BlockerCode, Verdict, VerifyOptions};

#[test]
fn smollm2_fixture_to_f16_verifies_go_with_logits() {
    let hf = common::hf("SmolLM2-135M-Instruct");
    assert!(
        hf.join(".complete").exists(),
        "run scripts/build-smollm2-fixture.sh first"
    );
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("smollm2-f16.gguf");
    let c = common::convert_to(&hf, &out, OutType::F16, false);
    assert_eq!(c.tensors.len(), 272);
    let q = c
        .tensors
        .iter()
        .filter(|t| t.permute_heads.is_some())
        .count();
    assert_eq!(q, 60, "attn_q and attn_k of 30 layers are permuted");
    let r = verify::verify(&VerifyOptions {
        hf_dir: hf.clone(),
        gguf: out.clone(),
        texts: None,
        protocol: None,
        release: None,
        ppl_text: None,
        threads: quantgate::threads::Threads::DEFAULT,
        work_dir: None,
        imatrix: None,
    })
    .unwrap();
    assert_eq!(r.verdict, Verdict::Go, "{:?}", r.blockers);
    assert_eq!(r.gate1.bit_identical, 272);
    let l = r.gate2_logits.as_ref().unwrap();
    assert!(l.positions > 400, "{l:?}");
    assert!(l.min_cosine > 0.9999, "{l:?}");
    assert!(l.mean_kld < 1e-4, "{l:?}");
    assert!(l.top1_agreement > 0.99, "{l:?}");

    // Without the permutation llama.cpp's RoPE pairs the wrong rows: Gate 1 catches it.
    let g = gguf::Gguf::open(&out).unwrap();
    let mut w = gguf::GgufWriter::new();
    for (k, v) in &g.header.metadata {
        w.add_kv(k.clone(), v.clone());
    }
    let src = quantgate::source::hf::HfDir::open(&hf, true).unwrap();
    for t in &g.header.tensors {
        let data = if t.name == "blk.0.attn_q.weight" {
            // The HF (un-permuted) rows, encoded as F16.
            let s = src
                .tensors
                .iter()
                .find(|s| s.name == "model.layers.0.self_attn.q_proj.weight")
                .unwrap();
            let mut b = Vec::new();
            gguf::quant::encode_f16(&src.to_f32(s).unwrap(), &mut b);
            b
        } else {
            g.tensor_data(t).to_vec()
        };
        w.add_tensor(gguf::TensorEntry {
            name: t.name.clone(),
            ggml_type: t.ggml_type,
            dims: t.dims.clone(),
            data: gguf::TensorData::Owned(data),
        });
    }
    let bad = dir.path().join("unpermuted.gguf");
    w.write_to_path(&bad).unwrap();
    let r = verify::verify(&VerifyOptions {
        hf_dir: hf,
        gguf: bad,
        texts: None,
        protocol: None,
        release: None,
        ppl_text: None,
        threads: quantgate::threads::Threads::DEFAULT,
        work_dir: None,
        imatrix: None,
    })
    .unwrap();
    assert_eq!(r.verdict, Verdict::NoGo);
    assert!(
        r.blockers
            .iter()
            .any(|b| b.code == BlockerCode::TensorBits && b.subject == "blk.0.attn_q.weight"),
        "{:?}",
        r.blockers
    );
}

#[test]
fn qk_permutation_moves_rotate_half_rows_to_adjacent_pairs() {
    // One head of 4 rows (hd = 4), 1 column: HF rows [a0, a1, b0, b1] (halves a, b) become
    // llama.cpp's [a0, b0, a1, b1].
    let x = [0.0f32, 1.0, 2.0, 3.0];
    assert_eq!(
        quantgate::source::permute::permute_qk(&x, 4, 1),
        vec![0.0, 2.0, 1.0, 3.0]
    );
    // Two heads of 4 rows, 2 columns each: per head, and whole rows move.
    let x: Vec<f32> = (0..16).map(|v| v as f32).collect();
    let p = quantgate::source::permute::permute_qk(&x, 8, 2);
    assert_eq!(
        p,
        vec![0., 1., 4., 5., 2., 3., 6., 7., 8., 9., 12., 13., 10., 11., 14., 15.]
    );
}

#[test]
fn quantize_q4_k_m_and_q8_0_load_in_llama_cpp_and_report_fallbacks() {
    let hf = common::hf("SmolLM2-135M-Instruct");
    let dir = tempfile::tempdir().unwrap();
    let f16 = convert_f16(&hf, dir.path());
    for (ty, base) in [("Q4_K_M", "Q4_K"), ("Q8_0", "Q8_0")] {
        let out = dir.path().join(format!("{ty}.gguf"));
        let r = quantgate::quantize::quantize(&f16, &out, ty, quantgate::threads::Threads::DEFAULT)
            .unwrap();
        assert_eq!(r.tensors.len(), 272);
        assert!(r.tensors.iter().any(|t| t.ggml_type == base), "{ty}");
        // Gate 1: every quantized tensor re-made by our reference quantizers, byte-identical.
        let g = &r.gate1;
        let bad: Vec<_> = g.tensors.iter().filter(|t| !t.identical).collect();
        assert!(bad.is_empty(), "{ty}: {bad:?}");
        assert!(g.pass);
        // Norms stay F32 (copied); the 2-D weights are re-quantized (SmolLM2: 30 layers × 7 +
        // token_embd; output is tied).
        assert_eq!((g.requantized, g.copied), (211, 61), "{ty}");
        // And the check can fail: one flipped byte of a quantized tensor is found.
        if ty == "Q8_0" {
            let mut bytes = std::fs::read(&out).unwrap();
            let q = gguf::Gguf::open(&out).unwrap();
            let t = q.header.tensor("blk.3.ffn_down.weight").unwrap().clone();
            let off = (q.header.data_offset + t.offset) as usize + 34 * 5 + 7;
            drop(q);
            bytes[off] ^= 1;
            let bad_p = dir.path().join("flipped.gguf");
            std::fs::write(&bad_p, bytes).unwrap();
            let g = quantgate::verify::requant::check(&f16, &bad_p, None).unwrap();
            assert!(!g.pass);
            let d: Vec<_> = g.tensors.iter().filter(|t| !t.identical).collect();
            assert_eq!(d.len(), 1);
            assert_eq!(d[0].name, "blk.3.ffn_down.weight");
            assert_eq!(d[0].first_diff_block, Some(5));
        }
        if ty == "Q4_K_M" {
            // SmolLM2's hidden size 576 is not a multiple of 256: those rows fall back.
            assert!(
                r.fallbacks
                    .iter()
                    .any(|f| f.starts_with("token_embd.weight: row length 576")),
                "{:?}",
                r.fallbacks
            );
            assert!(r.tensors.iter().any(|t| t.ggml_type == "Q6_K"));
        } else {
            assert!(r.fallbacks.is_empty());
        }
        // Loads in llama.cpp and gives finite logits.
        let model = llama_runtime::Model::load(&out, false).unwrap();
        let ids = model
            .tokenize("The capital of France is", true, false)
            .unwrap();
        let mut ctx =
            llama_runtime::Context::new(&model, llama_runtime::ContextParams::logits(64, 64, 2))
                .unwrap();
        let logits = ctx.logits_from(&ids, ids.len() - 1).unwrap();
        assert_eq!(logits[0].len(), 49152);
        assert!(logits[0].iter().all(|v| v.is_finite()));
    }
    // A missing input is a clear error naming the file.
    let e = quantgate::quantize::quantize(
        &dir.path().join("nope.gguf"),
        &dir.path().join("x.gguf"),
        "Q8_0",
        quantgate::threads::Threads::DEFAULT,
    )
    .unwrap_err();
    assert!(e.to_string().contains("nope.gguf"), "{e}");
    let e = quantgate::quantize::quantize(
        &f16,
        &dir.path().join("x.gguf"),
        "Q9_9",
        quantgate::threads::Threads::DEFAULT,
    )
    .unwrap_err();
    assert!(e.to_string().contains("unknown type \"Q9_9\""), "{e}");
}

#[test]
fn kld_of_f16_against_itself_is_zero_and_q4_k_m_is_not() {
    let hf = common::hf("SmolLM2-135M-Instruct");
    let wiki = common::wiki();
    let dir = tempfile::tempdir().unwrap();
    let f16 = convert_f16(&hf, dir.path());
    let q4 = dir.path().join("q4_k_m.gguf");
    quantgate::quantize::quantize(&f16, &q4, "Q4_K_M", quantgate::threads::Threads::DEFAULT)
        .unwrap();
    let base = dir.path().join("f16.logits");
    let text = quantgate::eval::ppl::read_text(&wiki).unwrap();
    let b = quantgate::eval::kld::write_base(
        &f16,
        &text,
        512,
        Some(2),
        quantgate::threads::Threads::DEFAULT,
        &base,
        |_, _| {},
    )
    .unwrap();
    let n_vocab = b.n_vocab;
    assert_eq!((b.chunks, b.n_ctx, n_vocab), (2, 512, 49152));
    // llama-perplexity's file size: 20 + 4·n_chunk·n_ctx + 2·nv·n_chunk·(n_ctx − 1 − n_ctx/2).
    let nv = 2 * n_vocab.div_ceil(2) + 4;
    assert_eq!(
        std::fs::metadata(&base).unwrap().len() as usize,
        20 + 4 * 2 * 512 + 2 * nv * 2 * 255
    );
    assert_eq!(b.bytes as usize, 20 + 4 * 2 * 512 + 2 * nv * 2 * 255);
    let same =
        quantgate::eval::kld::compare(&f16, &base, quantgate::threads::Threads::DEFAULT, |_, _| {})
            .unwrap();
    assert_eq!(same.positions, 510);
    assert!(same.mean_kld.abs() < 1e-6, "{same:?}");
    assert_eq!(same.same_top_p, 1.0);
    let q =
        quantgate::eval::kld::compare(&q4, &base, quantgate::threads::Threads::DEFAULT, |_, _| {})
            .unwrap();
    assert!(q.mean_kld > 0.01 && q.mean_kld < 0.5, "{q:?}");
    assert!(q.same_top_p < 1.0 && q.same_top_p > 0.7, "{q:?}");
    assert!(q.ppl_q > same.ppl_q);
}

#[test]
fn kld_records_round_trip_within_half_a_step() {
    let l: Vec<f32> = (0..101)
        .map(|i| ((i * 37) % 101) as f32 * 0.3 - 20.0)
        .collect();
    let mut rec = Vec::new();
    quantgate::eval::kld::encode_record(&l, &mut rec);
    assert_eq!(rec.len(), 2 * 101usize.div_ceil(2) + 4);
    let logp = quantgate::eval::kld::decode_record(&rec, 101);
    let max = l.iter().cloned().fold(f32::MIN, f32::max);
    let lse = l.iter().map(|v| ((v - max) as f64).exp()).sum::<f64>().ln();
    let scale = 16.0 / 65535.0;
    for (v, lp) in l.iter().zip(&logp) {
        if *v > max - 16.0 {
            let exact = (*v - max) as f64 - lse;
            assert!(
                (exact - *lp as f64).abs() <= scale * 0.51 + 1e-5,
                "{v}: {exact} vs {lp}"
            );
        }
    }
}

/// Converts `hf` to `DIR/f16.gguf` (F16) and returns the path.
fn convert_f16(hf: &std::path::Path, dir: &std::path::Path) -> PathBuf {
    let f16 = dir.join("f16.gguf");
    common::convert_to(hf, &f16, OutType::F16, false);
    f16
}
