//! `protocol check`: the shipped protocols are valid, and each kind of defect is refused with
//! the field named.

use crate::common;

use std::path::PathBuf;

fn protocols() -> PathBuf {
    common::repo().join("protocols")
}

/// Loads protocols/ci.toml with `edit` applied, written next to the original (so relative
/// paths still resolve) under a unique temp name.
fn load_edited(edit: impl Fn(String) -> String) -> anyhow::Result<quantgate::protocol::Loaded> {
    let text = std::fs::read_to_string(protocols().join("ci.toml")).unwrap();
    let f = tempfile::Builder::new()
        .suffix(".toml")
        .tempfile_in(std::env::temp_dir())
        .unwrap();
    // Absolute paths, because the copy lives elsewhere.
    let base = protocols().canonicalize().unwrap();
    let text = text
        .replace("path = \"../", &format!("path = \"{}/../", base.display()))
        .replace(
            "hf_dir = \"../",
            &format!("hf_dir = \"{}/../", base.display()),
        );
    std::fs::write(f.path(), edit(text)).unwrap();
    quantgate::protocol::load(f.path())
}

fn err(edit: impl Fn(String) -> String) -> String {
    format!("{:#}", load_edited(edit).unwrap_err())
}

#[test]
fn shipped_protocols_are_valid_and_differ_only_in_budget() {
    let ci = quantgate::protocol::load(&protocols().join("ci.toml")).unwrap();
    let full = quantgate::protocol::load(&protocols().join("full.toml")).unwrap();
    assert_eq!(ci.sha256.len(), 64);
    assert_ne!(ci.sha256, full.sha256);
    // Every file of the SmolLM2 folder (config, generation config, card, weights, special
    // tokens map, tokenizer, tokenizer config) and the two pinned data files.
    assert_eq!(ci.protocol.inputs.len(), 9);
    assert_eq!(ci.protocol.models[0].arms, vec!["F16", "Q4_K_M"]);
    assert_eq!(ci.protocol.tolerances, full.protocol.tolerances);
    use quantgate::protocol::Step;
    assert!(full.protocol.steps.contains(&Step::Ppl {
        text: "wiki".into(),
        ctx: 512,
        chunks: 128
    }));
    assert!(full.protocol.steps.contains(&Step::Hellaswag {
        tasks_file: "hellaswag".into(),
        tasks: 200,
        ctx: 1024
    }));
    assert!(full.protocol.steps.contains(&Step::Bench {
        n_prompt: 512,
        n_gen: 128,
        replicates: 5
    }));
    // The CLI prints the freeze id.
    let o = common::qg()
        .args(["protocol", "check"])
        .arg(protocols().join("ci.toml"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&o.stdout).contains(&format!("sha256 {}", ci.sha256)));
}

#[test]
fn the_reduced_7b_protocol_has_every_step_of_the_full_one_at_its_budget() {
    use quantgate::protocol::Step;
    let full = quantgate::protocol::load(&protocols().join("full.toml")).unwrap();
    let r = quantgate::protocol::load(&protocols().join("reduced-7b.toml")).unwrap();
    let kinds = |p: &quantgate::protocol::Loaded| -> Vec<&'static str> {
        p.protocol.steps.iter().map(Step::kind).collect()
    };
    assert_eq!(kinds(&r), kinds(&full));
    assert_eq!(r.protocol.models[0].arms, full.protocol.models[0].arms);
    assert_eq!(r.protocol.tolerances, full.protocol.tolerances);
    assert_eq!(r.protocol.thresholds, full.protocol.thresholds);
    for step in [
        Step::Ppl {
            text: "wiki".into(),
            ctx: 512,
            chunks: 8,
        },
        Step::Hellaswag {
            tasks_file: "hellaswag".into(),
            tasks: 20,
            ctx: 1024,
        },
        Step::Kld {
            text: "wiki".into(),
            ctx: 512,
            chunks: 8,
        },
        Step::Bench {
            n_prompt: 512,
            n_gen: 128,
            replicates: 3,
        },
    ] {
        assert!(r.protocol.steps.contains(&step), "{step:?}");
    }
    // The 7B folder's 11 files (4 shards, index, config, generation config, tokenizer files,
    // card) and the two data files.
    assert_eq!(r.protocol.inputs.len(), 13);
}

#[test]
fn defects_are_refused_with_the_field_named() {
    assert!(load_edited(|t| t).is_ok());
    assert!(err(|t| t.replace("seed = 1 ", "seed = 7 ")).contains("settings.seed: 7"));
    assert!(err(|t| t.replace("ratio = 0.02 ", "")).contains("ratio"));
    assert!(
        err(|t| t.replace("non_delta = 0.02", "non_delta = 2.0")).contains("tolerances.non_delta")
    );
    assert!(err(|t| t.replace("[ceilings]", "[ceilings]\nmemory = 1")).contains("memory"));
    assert!(err(|t| t.replace("quality-first-v1", "anything-goes")).contains("decision.rule"));
    assert!(err(|t| t.replace("2026-11-30", "yesterday")).contains("protocol.frozen"));
    assert!(err(|t| t.replace("2026-11-30", "9999-99-99")).contains("protocol.frozen"));
    assert!(
        err(|t| t.replace("replicates = 2", "replicates = 1000000000")).contains("steps.bench")
    );
    assert!(err(|t| t.replace("tasks = 20", "tasks = 1000000000000")).contains("steps.hellaswag"));
    assert!(err(|t| t.replace(
        "kind = \"convert\"",
        "kind = \"convert\"\narms = [\"BF16\"]"
    ))
    .contains("unknown field `arms`"));
    assert!(
        err(|t| t.replace("arms = [\"F16\"]", "arms = [\"f16\"]")).contains("steps.verify.arms")
    );
    assert!(err(|t| t.replace("min_cosine = 0.99", "min_cosine = -1.0"))
        .contains("thresholds.min_cosine"));
    assert!(
        err(|t| t.replace("min_cosine = 0.99", "min_cosine = 0.99\nmin_cosinex = 0.5"))
            .contains("unknown field `min_cosinex`")
    );
    assert!(err(|t| t.replace(
        "sha256 = \"173c87a53759e0201f33e0ccf978e510c2042d7f2cb78229d9a50d79b9e7dd08\"",
        "sha256 = \"173C87\""
    ))
    .contains("inputs.wiki.sha256"));
    assert!(err(|t| t.replace(
        "text = \"wiki\"\nctx = 512\nchunks = 4\n\n[[steps]]\nkind = \"hellaswag\"",
        "text = \"wikipedia\"\nctx = 512\nchunks = 4\n\n[[steps]]\nkind = \"hellaswag\""
    ))
    .contains("steps.ppl.text: no input named \"wikipedia\""));
    assert!(err(|t| t.replace("\"F16\", \"Q4_K_M\"", "\"F16\", \"Q4_K_X\"")).contains("Q4_K_X"));
    assert!(err(|t| t.replace("\"F16\", \"Q4_K_M\"", "\"Q4_K_M\", \"F16\"")).contains("arms[0]"));
    assert!(
        err(|t| t.replace("kind = \"convert\"", "kind = \"convert-fast\""))
            .contains("convert-fast")
    );
    // An unpinned file in the HF folder: drop the tokenizer.json input.
    let e = err(|t| {
        let a = t.find("name = \"smollm2-tokenizer\"").unwrap();
        let b = t[a..].find("[[inputs]]").unwrap() + a;
        format!("{}{}", &t[..a - "[[inputs]]\n".len()], &t[b..])
    });
    assert!(e.contains("tokenizer.json is not pinned"), "{e}");
    // No threshold table with a verify step.
    let e = err(|t| {
        let a = t.find("[thresholds]").unwrap();
        let b = t.find("# Every file of a model").unwrap();
        format!("{}{}", &t[..a], &t[b..])
    });
    assert!(e.contains("a verify step needs [thresholds]"), "{e}");
}
