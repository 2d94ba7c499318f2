//! The ggml CPU variant: two runs pinned to one variant give identical `eval ppl` output and
//! name the variant; two variants this machine runs are both measured; a variant that was not
//! built is refused, and so is a protocol pinning it, before any step.

mod common;

use std::path::Path;

use common::*;

/// `eval ppl` of the SmolLM2 Q4_1 GGUF on 4 × 128 tokens of wiki.test.raw under `variant`;
/// returns the JSON record.
fn ppl_pinned(variant: &str, dir: &Path) -> serde_json::Value {
    let json = dir.join(format!("ppl-{variant}-{}.json", rand_suffix()));
    let out = qg()
        .env(llama_runtime::CPU_VARIANT_ENV, variant)
        .args(["eval", "ppl"])
        .arg(smollm2_q4_1())
        .arg("-f")
        .arg(wiki())
        .args(["-c", "128", "--chunks", "4", "-t", "2", "--json"])
        .arg(&json)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap()
}

fn rand_suffix() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

#[test]
fn runs_pinned_to_one_variant_are_identical_and_name_it() {
    let tmp = tempfile::tempdir().unwrap();
    let best = llama_runtime::cpu_backend().unwrap();
    assert!(!best.pinned);
    // The baseline every x86-64 host runs, and the host's best.
    let mut ppls = Vec::new();
    for v in ["x64", best.variant.as_str()] {
        let (a, b) = (ppl_pinned(v, tmp.path()), ppl_pinned(v, tmp.path()));
        let runtime = a["runtime"].as_str().unwrap();
        assert!(
            runtime.contains(&format!("CPU backend {v} (pinned) [")),
            "{runtime}"
        );
        assert_eq!(a["result"], b["result"], "{v}: two pinned runs differ");
        ppls.push((v.to_string(), a["result"]["ppl"].as_f64().unwrap()));
    }
    // Both are PPLs of the same model and text; kernels differ only in rounding.
    let (x, y) = (ppls[0].1, ppls[1].1);
    assert!((x - y).abs() / x < 1e-3, "{ppls:?}");
    eprintln!("PPL by variant: {ppls:?}");
}

#[test]
fn a_variant_that_was_not_built_is_refused_naming_it() {
    let out = qg()
        .env(llama_runtime::CPU_VARIANT_ENV, "pentium4")
        .args(["eval", "ppl"])
        .arg(smollm2_q4_1())
        .arg("-f")
        .arg(wiki())
        .args(["-c", "128", "--chunks", "1"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("QUANTGATE_CPU_VARIANT=pentium4: no such CPU variant (built: ["),
        "{err}"
    );
}

#[test]
fn a_protocol_pinning_an_unbuilt_variant_is_refused_before_any_step() {
    let tmp = tempfile::tempdir().unwrap();
    let base = std::fs::read_to_string(protocol("ci.toml")).unwrap();
    let pinned = base.replacen("[settings]\n", "[settings]\ncpu_variant = \"pentium4\"\n", 1);
    assert_ne!(pinned, base, "ci.toml has a [settings] table");
    // One level below the repository root (the ignored out/), so the protocol's relative
    // paths resolve as from protocols/.
    let dir = repo().join("out");
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(format!("pin-test-{}.toml", rand_suffix()));
    std::fs::write(&p, pinned).unwrap();
    let run_dir = tmp.path().join("run");
    let out = qg()
        .arg("run")
        .arg(&p)
        .arg("--run-dir")
        .arg(&run_dir)
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&p);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("settings.cpu_variant"), "{err}");
    assert!(err.contains("pentium4"), "{err}");
    assert!(!run_dir.join("results.json").exists());
}
