//! config.json against the tensors, before anything is written: every hyperparameter the
//! conversion writes must have the right JSON type and range, and agree with the shapes it
//! describes (layer count, head counts, FFN size, vocabulary, context). A disagreement is an
//! error naming config.json and the field, or the tensor — never a file that llama.cpp loads
//! wrongly or not at all.

use std::collections::{BTreeSet, HashMap};

use anyhow::{bail, Result};

use super::PlannedTensor;
use crate::source::arch::Arch;
use crate::source::declared::declared_tensors;
use crate::source::hf::HfDir;
use crate::source::hparams::read_fields;

/// `ne` of the planned tensor `name`, if planned.
fn ne_of<'a>(planned: &'a [(usize, PlannedTensor)], name: &str) -> Option<&'a [u64]> {
    planned
        .iter()
        .find(|(_, p)| p.gguf_name == name)
        .map(|(_, p)| p.ne.as_slice())
}

/// The layer-local tensors every layer must have, with their expected `ne` given
/// (hidden, head_dim, (heads, kv heads), FFN size: one expert's with `n_expert`).
fn layer_shapes(
    a: Arch,
    h: u64,
    hd: u64,
    (n_head, n_kv): (u64, u64),
    (ff, n_expert): (u64, Option<u64>),
) -> Vec<(&'static str, Vec<u64>)> {
    let (q, kv) = (n_head * hd, n_kv * hd);
    if a == Arch::Phi3 {
        // Fused as llama.cpp's phi3 loads them: attn_qkv [h, q + 2·kv], ffn_up [h, 2·ff].
        return vec![
            ("attn_qkv.weight", vec![h, q + 2 * kv]),
            ("attn_output.weight", vec![q, h]),
            ("ffn_up.weight", vec![h, 2 * ff]),
            ("ffn_down.weight", vec![ff, h]),
            ("attn_norm.weight", vec![h]),
            ("ffn_norm.weight", vec![h]),
        ];
    }
    let mut v = vec![
        ("attn_q.weight", vec![h, q]),
        ("attn_k.weight", vec![h, kv]),
        ("attn_v.weight", vec![h, kv]),
        ("attn_output.weight", vec![q, h]),
    ];
    match n_expert {
        // llama.cpp's qwen3moe: the router and the stacked experts.
        Some(e) => v.extend([
            ("ffn_gate_inp.weight", vec![h, e]),
            ("ffn_gate_exps.weight", vec![h, ff, e]),
            ("ffn_up_exps.weight", vec![h, ff, e]),
            ("ffn_down_exps.weight", vec![ff, h, e]),
        ]),
        None => v.extend([
            ("ffn_up.weight", vec![h, ff]),
            ("ffn_down.weight", vec![ff, h]),
        ]),
    }
    match a {
        Arch::Bert => v.extend([
            ("attn_output_norm.weight", vec![h]),
            ("layer_output_norm.weight", vec![h]),
        ]),
        _ => v.extend([("attn_norm.weight", vec![h]), ("ffn_norm.weight", vec![h])]),
    }
    if a != Arch::Bert && n_expert.is_none() {
        v.push(("ffn_gate.weight", vec![h, ff]));
    }
    if a == Arch::Qwen3Moe {
        v.extend([
            ("attn_q_norm.weight", vec![hd]),
            ("attn_k_norm.weight", vec![hd]),
        ]);
    }
    if a == Arch::Gemma3 {
        // Per-head Q/K norms and the norms after attention and after the FFN.
        v.extend([
            ("attn_q_norm.weight", vec![hd]),
            ("attn_k_norm.weight", vec![hd]),
            ("post_attention_norm.weight", vec![h]),
            ("post_ffw_norm.weight", vec![h]),
        ]);
    }
    v
}

/// Layer indices present among the planned `blk.N.` tensors.
fn layers_present(planned: &[(usize, PlannedTensor)]) -> BTreeSet<u64> {
    planned
        .iter()
        .filter_map(|(_, p)| p.gguf_name.strip_prefix("blk."))
        .filter_map(|r| r.split('.').next()?.parse().ok())
        .collect()
}

/// Shapes against the config: every layer's tensors, the embeddings and the context.
fn check_shapes(
    a: Arch,
    v: &HashMap<&'static str, u64>,
    planned: &[(usize, PlannedTensor)],
    problems: &mut Vec<String>,
) {
    let Some(ffn) = ffn_shape(a, v, problems) else {
        return;
    };
    let (Some(&n_layer), Some(&h), Some(&n_head)) = (
        v.get("num_hidden_layers"),
        v.get("hidden_size"),
        v.get("num_attention_heads"),
    ) else {
        return;
    };
    let head_dim = match v.get("head_dim") {
        Some(&d) => d,
        None if h % n_head == 0 => h / n_head,
        None => {
            problems.push(format!(
                "config.json: field num_attention_heads: {n_head} does not divide hidden_size {h}"
            ));
            return;
        }
    };
    let n_kv = v.get("num_key_value_heads").copied().unwrap_or(n_head);
    let present = layers_present(planned);
    let want: BTreeSet<u64> = (0..n_layer).collect();
    if present != want {
        problems.push(format!(
            "config.json: field num_hidden_layers: {n_layer}, but the tensors hold layers {}",
            describe(&present)
        ));
    }
    for l in 0..n_layer.min(present.len() as u64) {
        for (local, ne) in layer_shapes(a, h, head_dim, (n_head, n_kv), ffn) {
            expect(planned, &format!("blk.{l}.{local}"), &ne, problems);
        }
    }
    if let Some(&vocab) = v.get("vocab_size") {
        expect(planned, "token_embd.weight", &[h, vocab], problems);
    }
    if a == Arch::Bert {
        if let Some(&ctx) = v.get("max_position_embeddings") {
            expect(
                planned,
                crate::source::arch::POSITION_EMBD,
                &[h, ctx],
                problems,
            );
        }
        if let Some(&types) = v.get("type_vocab_size") {
            expect(planned, "token_types.weight", &[h, types], problems);
        }
    }
    one_d_norms_and_biases(planned, problems);
}

/// The FFN width and, for MoE, the expert count (`num_local_experts`, else `num_experts`),
/// with `num_experts_per_tok` at most that count; `None` when a field is missing (a problem
/// for the experts' fields; `intermediate_size` is named by the field checks).
fn ffn_shape(
    a: Arch,
    v: &HashMap<&'static str, u64>,
    problems: &mut Vec<String>,
) -> Option<(u64, Option<u64>)> {
    if a != Arch::Qwen3Moe {
        return v.get("intermediate_size").map(|ff| (*ff, None));
    }
    let Some(&e) = v.get("num_local_experts").or_else(|| v.get("num_experts")) else {
        problems.push(
            "config.json: field num_experts is missing (a qwen3_moe model has experts)".into(),
        );
        return None;
    };
    let (ff, used) = (
        v.get("moe_intermediate_size")?,
        v.get("num_experts_per_tok")?,
    );
    if *used > e {
        problems.push(format!(
            "config.json: field num_experts_per_tok: {used} exceeds the {e} experts"
        ));
    }
    Some((*ff, Some(e)))
}

/// Every norm weight and every bias is a vector: llama.cpp creates them 1-D, and a 2-D one
/// (`[1, hidden]`) is refused at load or broadcast differently than transformers does.
fn one_d_norms_and_biases(planned: &[(usize, PlannedTensor)], problems: &mut Vec<String>) {
    for (_, p) in planned {
        let n = &p.gguf_name;
        if (n.ends_with("norm.weight") || n.ends_with(".bias")) && p.ne.len() != 1 {
            problems.push(format!(
                "tensor {} ({n}) has ne {:?}; a norm weight or bias must be 1-D",
                p.hf_name, p.ne
            ));
        }
    }
}

/// A problem unless the planned tensor `name` exists with exactly `ne`.
fn expect(planned: &[(usize, PlannedTensor)], name: &str, ne: &[u64], problems: &mut Vec<String>) {
    match ne_of(planned, name) {
        None => problems.push(format!("tensor {name} is missing from the checkpoint")),
        Some(got) if got != ne => problems.push(format!(
            "tensor {name} has ne {got:?}, config.json implies {ne:?}"
        )),
        Some(_) => {}
    }
}

/// `0..=5` or the list of indices.
fn describe(layers: &BTreeSet<u64>) -> String {
    match (layers.first(), layers.last()) {
        (Some(a), Some(b)) if (b - a + 1) as usize == layers.len() => format!("{a}..={b}"),
        (None, _) => "none".into(),
        _ => format!("{layers:?}"),
    }
}

/// Checks config.json of `hf` against the planned tensors.
///
/// Errors: every problem found, each naming config.json and the field or the tensor.
pub fn check(hf: &HfDir, a: Arch, planned: &[(usize, PlannedTensor)]) -> Result<()> {
    let (mut values, mut problems) = read_fields(&hf.config, a);
    // The file's position table is XLM-R's without its dropped rows (`plan` dropped them).
    if let (Some(ctx), Some(drop)) = (
        values.get_mut("max_position_embeddings"),
        crate::source::arch::position_offset(&hf.config),
    ) {
        *ctx = ctx.saturating_sub(drop as u64);
    }
    if !planned.is_empty() {
        check_shapes(a, &values, planned, &mut problems);
        let names: Vec<&str> = planned.iter().map(|(_, p)| p.gguf_name.as_str()).collect();
        problems.extend(declared_tensors(&hf.config, a, &names));
    }
    if problems.is_empty() {
        return Ok(());
    }
    bail!(
        "{}: config.json and the tensors disagree: {}",
        hf.dir.display(),
        problems.join("; ")
    )
}
