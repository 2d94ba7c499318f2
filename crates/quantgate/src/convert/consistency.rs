//! config.json against the tensors, before anything is written: every hyperparameter the
//! conversion writes must have the right JSON type and range, and agree with the shapes it
//! describes (layer count, head counts, FFN size, vocabulary, context). A disagreement is an
//! error naming config.json and the field, or the tensor — never a file that llama.cpp loads
//! wrongly or not at all.

use std::collections::{BTreeSet, HashMap};

use anyhow::{bail, Result};
use serde_json::Value;

use super::arch::Arch;
use super::hf::HfDir;
use super::PlannedTensor;

/// A config.json field and what it must be.
#[derive(Clone, Copy)]
enum Field {
    /// A count: an integer ≥ 1 that fits the u32 GGUF key.
    Count(&'static str),
    /// A positive finite number.
    Positive(&'static str),
}

/// The fields each architecture's conversion reads (required ones first).
fn fields(a: Arch) -> (&'static [Field], &'static [Field]) {
    use Field::*;
    match a {
        Arch::Bert => (
            &[
                Count("num_hidden_layers"),
                Count("hidden_size"),
                Count("num_attention_heads"),
                Count("intermediate_size"),
                // llama.cpp requires {arch}.attention.layer_norm_epsilon (no default).
                Positive("layer_norm_eps"),
            ],
            &[
                Count("max_position_embeddings"),
                Count("vocab_size"),
                Count("type_vocab_size"),
            ],
        ),
        Arch::Llama | Arch::Qwen2 | Arch::Qwen3 | Arch::Gemma3 => (
            &[
                Count("num_hidden_layers"),
                Count("hidden_size"),
                Count("num_attention_heads"),
                Count("intermediate_size"),
                // llama.cpp requires {arch}.attention.layer_norm_rms_epsilon (no default).
                Positive("rms_norm_eps"),
            ],
            &[
                Count("num_key_value_heads"),
                Count("max_position_embeddings"),
                Count("vocab_size"),
                Count("head_dim"),
                Positive("rope_theta"),
            ],
        ),
    }
}

/// The value of `key` (top level, or under `text_config` as `HfDir::config_u64` reads it).
fn raw<'a>(config: &'a Value, key: &str) -> Option<&'a Value> {
    config
        .get(key)
        .filter(|v| !v.is_null())
        .or_else(|| config["text_config"].get(key).filter(|v| !v.is_null()))
}

/// Checks one field's type and range; `None` when it is absent.
fn read(config: &Value, f: Field) -> Result<Option<f64>, String> {
    let (key, v) = match f {
        Field::Count(k) | Field::Positive(k) => (k, raw(config, k)),
    };
    let Some(v) = v else { return Ok(None) };
    let bad = |what: &str| Err(format!("config.json: field {key}: {v} {what}"));
    match f {
        Field::Count(_) => match v.as_u64() {
            Some(0) => bad("must be at least 1"),
            Some(n) if n > u32::MAX as u64 => bad("does not fit the u32 GGUF key"),
            Some(n) => Ok(Some(n as f64)),
            None => bad("is not a non-negative integer"),
        },
        Field::Positive(_) => match v.as_f64() {
            // Stored as f32: 1e300 would become inf and 1e-50 zero.
            Some(x) if x > 0.0 && (x as f32).is_finite() && (x as f32) > 0.0 => Ok(Some(x)),
            Some(_) => bad("must be a positive number that an f32 holds (the GGUF key is f32)"),
            None => bad("is not a number"),
        },
    }
}

/// Every problem of config.json's fields, and their values.
pub(crate) fn read_fields(config: &Value, a: Arch) -> (HashMap<&'static str, u64>, Vec<String>) {
    let (required, optional) = fields(a);
    let mut values = HashMap::new();
    let mut problems = Vec::new();
    for (f, needed) in required
        .iter()
        .map(|f| (f, true))
        .chain(optional.iter().map(|f| (f, false)))
    {
        let (Field::Count(key) | Field::Positive(key)) = *f;
        match read(config, *f) {
            Ok(Some(x)) => {
                if matches!(f, Field::Count(_)) {
                    values.insert(key, x as u64);
                }
            }
            Ok(None) if needed => problems.push(format!("config.json: field {key} is missing")),
            Ok(None) => {}
            Err(e) => problems.push(e),
        }
    }
    (values, problems)
}

/// `ne` of the planned tensor `name`, if planned.
fn ne_of<'a>(planned: &'a [(usize, PlannedTensor)], name: &str) -> Option<&'a [u64]> {
    planned
        .iter()
        .find(|(_, p)| p.gguf_name == name)
        .map(|(_, p)| p.ne.as_slice())
}

/// The layer-local tensors every layer must have, with their expected `ne` given
/// (hidden, head_dim, (heads, kv heads), FFN size).
fn layer_shapes(
    a: Arch,
    h: u64,
    hd: u64,
    (n_head, n_kv): (u64, u64),
    ff: u64,
) -> Vec<(&'static str, Vec<u64>)> {
    let (q, kv) = (n_head * hd, n_kv * hd);
    let mut v = vec![
        ("attn_q.weight", vec![h, q]),
        ("attn_k.weight", vec![h, kv]),
        ("attn_v.weight", vec![h, kv]),
        ("attn_output.weight", vec![q, h]),
        ("ffn_up.weight", vec![h, ff]),
        ("ffn_down.weight", vec![ff, h]),
    ];
    match a {
        Arch::Bert => v.extend([
            ("attn_output_norm.weight", vec![h]),
            ("layer_output_norm.weight", vec![h]),
        ]),
        _ => v.extend([
            ("attn_norm.weight", vec![h]),
            ("ffn_norm.weight", vec![h]),
            ("ffn_gate.weight", vec![h, ff]),
        ]),
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
    let (Some(&n_layer), Some(&h), Some(&n_head), Some(&ff)) = (
        v.get("num_hidden_layers"),
        v.get("hidden_size"),
        v.get("num_attention_heads"),
        v.get("intermediate_size"),
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
        for (local, ne) in layer_shapes(a, h, head_dim, (n_head, n_kv), ff) {
            expect(planned, &format!("blk.{l}.{local}"), &ne, problems);
        }
    }
    if let Some(&vocab) = v.get("vocab_size") {
        expect(planned, "token_embd.weight", &[h, vocab], problems);
    }
    if a == Arch::Bert {
        if let Some(&ctx) = v.get("max_position_embeddings") {
            expect(planned, "position_embd.weight", &[h, ctx], problems);
        }
        if let Some(&types) = v.get("type_vocab_size") {
            expect(planned, "token_types.weight", &[h, types], problems);
        }
    }
    one_d_norms_and_biases(planned, problems);
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

/// A decoder declared untied (`tie_word_embeddings` false) must bring its own output matrix:
/// without `lm_head.weight` transformers initialises one at random, while llama.cpp would reuse
/// `token_embd` — two different models.
fn untied_without_output(
    config: &Value,
    a: Arch,
    has: &dyn Fn(&str) -> bool,
    problems: &mut Vec<String>,
) {
    let tied = match raw(config, "tie_word_embeddings") {
        Some(Value::Bool(b)) => *b,
        Some(v) => {
            problems.push(format!(
                "config.json: field tie_word_embeddings: {v} is not a boolean"
            ));
            return;
        }
        None => tied_by_default(a),
    };
    if a != Arch::Bert && !tied && !has("output.weight") {
        let why = if raw(config, "tie_word_embeddings").is_some() {
            "= false"
        } else {
            "is absent, which transformers reads as false for this architecture"
        };
        problems.push(format!(
            "config.json: field tie_word_embeddings {why}, but the checkpoint has no lm_head.weight"
        ));
    }
}

/// transformers' default of `tie_word_embeddings` when config.json omits it: `LlamaConfig`,
/// `Qwen2Config` and `Qwen3Config` default to false, `Gemma3TextConfig` to true.
fn tied_by_default(a: Arch) -> bool {
    matches!(a, Arch::Gemma3 | Arch::Bert)
}

/// The bias tensors each layer has when `attention_bias` / `mlp_bias` are true (llama's
/// `LlamaAttention`/`LlamaMLP`; Qwen3 and Gemma 3 use the attention flag only). Qwen2 has no
/// such fields: its q/k/v biases are always there.
fn declared_biases(a: Arch) -> &'static [(&'static str, &'static [&'static str])] {
    const ATTN: (&str, &[&str]) = (
        "attention_bias",
        &[
            "attn_q.bias",
            "attn_k.bias",
            "attn_v.bias",
            "attn_output.bias",
        ],
    );
    const MLP: (&str, &[&str]) = (
        "mlp_bias",
        &["ffn_gate.bias", "ffn_up.bias", "ffn_down.bias"],
    );
    match a {
        Arch::Llama => &[ATTN, MLP],
        Arch::Qwen3 | Arch::Gemma3 => &[ATTN, (MLP.0, MLP.1)],
        Arch::Bert | Arch::Qwen2 => &[],
    }
}

/// `attention_bias` / `mlp_bias` against the tensors: true needs every bias in every layer
/// (transformers would initialise a missing one at random); false (the default) allows none
/// (transformers would ignore it, while llama.cpp adds it).
fn biases_as_declared(
    config: &Value,
    a: Arch,
    n_layer: u64,
    has: &dyn Fn(&str) -> bool,
    problems: &mut Vec<String>,
) {
    for (field, names) in declared_biases(a) {
        let declared = match raw(config, field) {
            None => false,
            Some(Value::Bool(b)) => *b && !(a != Arch::Llama && *field == "mlp_bias"),
            Some(v) => {
                problems.push(format!("config.json: field {field}: {v} is not a boolean"));
                continue;
            }
        };
        for l in 0..n_layer {
            for n in names.iter() {
                let name = format!("blk.{l}.{n}");
                let present = has(&name);
                if present != declared {
                    problems.push(if declared {
                        format!("config.json: field {field} = true, but tensor {name} is missing from the checkpoint")
                    } else {
                        format!("the checkpoint has {name}, but config.json field {field} is false or absent: transformers does not use it")
                    });
                    return;
                }
            }
        }
    }
}

/// The tensors config.json declares by flags, against the GGUF names the checkpoint maps to:
/// an untied decoder's output matrix, and the biases `attention_bias`/`mlp_bias` declare.
/// `verify` runs this on the HF folder's tensors too, so a file made from a folder that
/// disagrees with itself is never GO. Each problem names config.json and the field.
pub fn declared_tensors(config: &Value, a: Arch, gguf_names: &[&str]) -> Vec<String> {
    let mut problems = Vec::new();
    let has = |n: &str| gguf_names.contains(&n);
    untied_without_output(config, a, &has, &mut problems);
    if let Some(n) = raw(config, "num_hidden_layers").and_then(Value::as_u64) {
        biases_as_declared(config, a, n.min(u32::MAX as u64), &has, &mut problems);
    }
    problems
}

/// Checks config.json of `hf` against the planned tensors.
///
/// Errors: every problem found, each naming config.json and the field or the tensor.
pub fn check(hf: &HfDir, a: Arch, planned: &[(usize, PlannedTensor)]) -> Result<()> {
    let (values, mut problems) = read_fields(&hf.config, a);
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
