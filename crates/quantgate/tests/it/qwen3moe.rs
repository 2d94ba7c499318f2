//! Qwen3-MoE (`qwen3_moe` → llama.cpp `qwen3moe`) on the seeded fixture
//! (scripts/build-qwen3moe-fixture.sh: Qwen3-30B-A3B's published config with 2 layers and 16 of
//! its 128 experts, Qwen3's tokenizer, transformers' save_pretrained): convert stacks the
//! experts as llama.cpp's converter does; verify is GO on F16 and Q4_K_M; a swapped expert and
//! `expert_used_count` off by one are NO-GO naming the cause; configs llama.cpp would run
//! differently are refused naming the field.

use crate::common;

use std::path::PathBuf;

use quantgate::convert::OutType;
use quantgate::verify::{BlockerCode, Verdict};

fn qwen3moe() -> PathBuf {
    let hf = common::hf("Qwen3-30B-A3B-2L-seeded");
    assert!(
        hf.join(".complete").exists(),
        "run scripts/build-qwen3moe-fixture.sh first"
    );
    hf
}

#[test]
fn qwen3moe_f16_and_q4_k_m_verify_go_with_stacked_experts() {
    let hf = qwen3moe();
    let dir = tempfile::tempdir().unwrap();
    let f16 = dir.path().join("f16.gguf");
    let c = common::convert_to(&hf, &f16, OutType::F16, false);
    // token_embd, output_norm, output + 2 layers × 12 (4 attention, 2 Q/K norms, 2 norms,
    // the router and 3 stacks).
    assert_eq!(c.tensors.len(), 27);
    let stack = c
        .tensors
        .iter()
        .find(|t| t.gguf_name == "blk.0.ffn_down_exps.weight")
        .unwrap();
    assert_eq!(stack.ne, [768, 512, 16]);
    assert_eq!(stack.experts.len(), 16);
    assert_eq!(
        stack.hf_name,
        "model.layers.0.mlp.experts.*.down_proj.weight"
    );
    let router = c
        .tensors
        .iter()
        .find(|t| t.gguf_name == "blk.0.ffn_gate_inp.weight")
        .unwrap();
    assert_eq!(
        (router.ggml_type.as_str(), &router.ne[..]),
        ("F32", &[512u64, 16][..])
    );
    let g = gguf::Gguf::open(&f16).unwrap();
    let u32_key = |k: &str| {
        g.header
            .metadata
            .iter()
            .find(|(n, _)| n == k)
            .map(|(_, v)| v.clone())
    };
    assert_eq!(u32_key("qwen3moe.expert_count"), Some(gguf::Value::U32(16)));
    assert_eq!(
        u32_key("qwen3moe.expert_used_count"),
        Some(gguf::Value::U32(8))
    );
    assert_eq!(
        u32_key("qwen3moe.expert_feed_forward_length"),
        Some(gguf::Value::U32(768))
    );

    let r = common::verify_with(&hf, &f16, None);
    assert_eq!(r.verdict, Verdict::Go, "{:?}", r.blockers);
    assert_eq!(r.gate1.bit_identical, 27);
    assert!(r.gate2_logits.as_ref().unwrap().min_cosine > 0.999);
    // llama.cpp's expert choices, read from its graph, against the reference's: measured 2 of
    // 794 (token, layer) sets differ, both at near-ties (reference margin 2e-5); 912 sets since
    // the corpus gained its Korean/English texts.
    let rt = r.gate2_logits.as_ref().unwrap().routing.clone().unwrap();
    assert_eq!(rt.pairs + rt.downstream, 912);
    assert_eq!(rt.differing_clear, 0, "{rt:?}");
    assert!(rt.differing <= 7, "{rt:?}");

    let q4 = dir.path().join("q4_k_m.gguf");
    common::quantize_to(&f16, &q4, "Q4_K_M");
    let r = common::verify_with(&hf, &q4, None);
    assert_eq!(r.verdict, Verdict::Go, "{:?}", r.blockers);
    assert_eq!(r.gate1.bit_identical, 27);
    // llama-quantize's Q4_K_M plan on the stacks (quantize's own check re-made each of them
    // byte for byte): Q4_K, but ffn_down_exps of the last layer Q6_K (its use_more_bits rule
    // for the last eighth of the layers), the router kept F32.
    let g = gguf::Gguf::open(&q4).unwrap();
    let ty = |n: &str| g.header.tensor(n).unwrap().ggml_type.to_string();
    let plan: Vec<String> = [
        "blk.0.ffn_down_exps.weight",
        "blk.1.ffn_down_exps.weight",
        "blk.1.ffn_gate_exps.weight",
        "blk.1.ffn_up_exps.weight",
        "blk.1.ffn_gate_inp.weight",
    ]
    .iter()
    .map(|n| ty(n))
    .collect();
    assert_eq!(plan, ["Q4_K", "Q6_K", "Q4_K", "Q4_K", "F32"]);
    // inspect --check-dequant on the 3-D stacks: our dequantizer against ggml's to_float.
    let c = quantgate::check_dequant::check_dequant(&g, |_, _| {});
    assert_eq!(
        (c.tensors, c.identical),
        (27, 27),
        "{:?}",
        c.first_difference
    );
    assert!(c.passed());
}

#[test]
fn a_swapped_expert_and_expert_used_count_off_by_one_are_no_go() {
    let hf = qwen3moe();
    let dir = tempfile::tempdir().unwrap();
    let f16 = dir.path().join("f16.gguf");
    common::convert_to(&hf, &f16, OutType::F16, false);

    // Experts 3 and 5 of layer 0 trade places in all three stacks: the router still sends
    // tokens by the old numbering.
    let swapped = dir.path().join("swapped.gguf");
    common::tamper_gguf(
        &f16,
        &swapped,
        |_, _| {},
        |name, b| {
            if name.starts_with("blk.0.ffn_") && name.contains("_exps") {
                let slab = b.len() / 16;
                let (lo, hi) = b.split_at_mut(5 * slab);
                lo[3 * slab..4 * slab].swap_with_slice(&mut hi[..slab]);
            }
        },
        None,
    );
    let b = common::no_go_blockers(&hf, &swapped);
    let bits: Vec<_> = b
        .iter()
        .filter(|b| b.0 == BlockerCode::TensorBits)
        .collect();
    assert_eq!(bits.len(), 3, "{b:?}");
    assert!(
        bits.iter()
            .all(|b| b.2.contains("expert 3 (model.layers.0.mlp.experts.3.")),
        "{bits:?}"
    );

    for used in [7u32, 9] {
        let off = dir.path().join(format!("used-{used}.gguf"));
        common::tamper_gguf(
            &f16,
            &off,
            |k, v| {
                if k == "qwen3moe.expert_used_count" {
                    *v = gguf::Value::U32(used);
                }
            },
            |_, _| {},
            None,
        );
        let b = common::no_go_blockers(&hf, &off);
        assert!(
            b.iter().any(
                |b| b.0 == BlockerCode::MetadataMismatch && b.1 == "qwen3moe.expert_used_count"
            ),
            "{b:?}"
        );
        // The logits barely move (measured for 7: min cosine 0.99989, argmax agreement
        // 0.975), but every token's set of experts differs from the reference's in layer 0
        // (layer 1 is then downstream of those differences and not judged).
        let routing = b
            .iter()
            .find(|b| b.0 == BlockerCode::ExpertRouting)
            .expect("routing blocker");
        assert!(
            routing
                .2
                .starts_with("456 of 456 (token, layer) routings differ"),
            "{}",
            routing.2
        );
    }
}

#[test]
fn configs_llama_cpp_would_route_differently_are_refused_naming_the_field() {
    let hf = qwen3moe();
    let dir = tempfile::tempdir().unwrap();
    let cases: [(&str, serde_json::Value, &str); 4] = [
        (
            "norm_topk_prob",
            serde_json::json!(false),
            "field norm_topk_prob = false",
        ),
        (
            "decoder_sparse_step",
            serde_json::json!(2),
            "field decoder_sparse_step = 2",
        ),
        (
            "mlp_only_layers",
            serde_json::json!([0]),
            "field mlp_only_layers = [0]",
        ),
        (
            "num_experts_per_tok",
            serde_json::json!(17),
            "num_experts_per_tok: 17 exceeds the 16 experts",
        ),
    ];
    for (field, value, want) in cases {
        let bad = dir.path().join(format!("hf-{field}"));
        common::copy_hf(&hf, &bad);
        common::edit_config(&bad, |c| c[field] = value.clone());
        let e = common::convert_err(&bad);
        assert!(e.contains(want), "{field}: {e:#}");
    }
    // Absent, transformers' Qwen3MoeConfig default (false) applies: refused as well.
    let bad = dir.path().join("hf-no-norm_topk_prob");
    common::copy_hf(&hf, &bad);
    common::edit_config(&bad, |c| {
        c.as_object_mut().unwrap().remove("norm_topk_prob");
    });
    let e = common::convert_err(&bad);
    assert!(e.contains("field norm_topk_prob is missing"), "{e:#}");
}

#[test]
fn key_length_comes_from_head_dim_and_the_quotient_is_no_go() {
    let hf = qwen3moe();
    let dir = tempfile::tempdir().unwrap();
    let f16 = dir.path().join("f16.gguf");
    common::convert_to(&hf, &f16, OutType::F16, false);
    // head_dim 128 ≠ hidden / heads (512 / 32 = 16): key_length and value_length come from
    // head_dim, and a file with the quotient instead is NO-GO naming the key.
    let g = gguf::Gguf::open(&f16).unwrap();
    for k in [
        "qwen3moe.attention.key_length",
        "qwen3moe.attention.value_length",
    ] {
        let v = g
            .header
            .metadata
            .iter()
            .find(|(n, _)| n == k)
            .map(|(_, v)| v.clone());
        assert_eq!(v, Some(gguf::Value::U32(128)), "{k}");
    }
    let quotient = dir.path().join("key-length-16.gguf");
    common::tamper_gguf(
        &f16,
        &quotient,
        |k, v| {
            if k == "qwen3moe.attention.key_length" {
                *v = gguf::Value::U32(16);
            }
        },
        |_, _| {},
        None,
    );
    let b = common::no_go_blockers(&hf, &quotient);
    assert!(
        b.iter().any(
            |b| b.0 == BlockerCode::MetadataMismatch && b.1 == "qwen3moe.attention.key_length"
        ),
        "{b:?}"
    );
}
