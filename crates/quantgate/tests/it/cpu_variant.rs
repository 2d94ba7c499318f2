//! The ggml CPU variant: two runs pinned to one variant give identical `eval ppl` output and
//! name the variant; two variants this machine runs are both measured; a variant that was not
//! built is refused, and so is a protocol pinning it, before any step.

use crate::common;

use std::path::Path;

use common::*;
use serde_json::Value;

/// Runs `quantgate eval MODE SmolLM2-Q4_1 ARGS… --json J` under `variant`; returns the JSON
/// record's `result`.
fn eval_pinned(variant: &str, mode: &str, args: &[&std::ffi::OsStr], dir: &Path) -> Value {
    let json = dir.join(format!("{mode}-{variant}-{}.json", rand_suffix()));
    let out = qg()
        .env(llama_runtime::CPU_VARIANT_ENV, variant)
        .args(["eval", mode])
        .arg(smollm2_q4_1())
        .args(args)
        .args(["-t", "2", "--json"])
        .arg(&json)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let runtime = v["runtime"].as_str().unwrap();
    assert!(
        runtime.contains(&format!("CPU backend {variant} (pinned) [")),
        "{runtime}"
    );
    v["result"].clone()
}

/// PPL (4 × 128 of wiki.test.raw), HellaSwag (20 tasks, c = 512) and KLD against `base`, the
/// measured figures only (no timings).
fn measure(variant: &str, base: &Path, dir: &Path) -> [(String, Value); 3] {
    let (wiki, hs) = (wiki(), hellaswag_tasks());
    let ppl = eval_pinned(
        variant,
        "ppl",
        &[
            "-f".as_ref(),
            wiki.as_os_str(),
            "-c".as_ref(),
            "128".as_ref(),
            "--chunks".as_ref(),
            "4".as_ref(),
        ],
        dir,
    );
    let hsw = eval_pinned(
        variant,
        "hellaswag",
        &[
            "-f".as_ref(),
            hs.as_os_str(),
            "--tasks".as_ref(),
            "20".as_ref(),
            "-c".as_ref(),
            "512".as_ref(),
        ],
        dir,
    );
    let kld = eval_pinned(variant, "kld", &["--base".as_ref(), base.as_os_str()], dir);
    let pick = |v: &Value, keys: &[&str]| -> Value {
        keys.iter()
            .map(|k| (k.to_string(), v[*k].clone()))
            .collect::<serde_json::Map<_, _>>()
            .into()
    };
    [
        (
            "ppl".into(),
            pick(&ppl, &["ppl", "ppl_se", "running", "scored_tokens"]),
        ),
        (
            "hellaswag".into(),
            pick(&hsw, &["acc_norm", "correct", "tasks", "ci_low", "ci_high"]),
        ),
        (
            "kld".into(),
            pick(
                &kld,
                &[
                    "ppl_q",
                    "mean_kld",
                    "max_kld",
                    "same_top_p",
                    "rms_dp",
                    "positions",
                ],
            ),
        ),
    ]
}

/// The widest SIMD the variant's kernels use (ggml/src/CMakeLists.txt `ggml_add_cpu_backend_variant`
/// feature lists): 3 AVX-512, 2 AVX2, 1 AVX, 0 SSE4.2 or none. Variants of one tier run the same
/// kernel code paths; across tiers the quantized dot products are different algorithms
/// (measured 2026-12-02 on an AVX2-only AMD EPYC: haswell against piledriver, SmolLM2 Q4_1,
/// 2 × 128 tokens: PPL 23.0173 vs 22.9721, mean KLD 0.0028, same top 95.2%).
fn simd_tier(v: &str) -> u8 {
    match v {
        "skylakex" | "cannonlake" | "cascadelake" | "icelake" | "cooperlake" | "zen4"
        | "sapphirerapids" => 3,
        "haswell" | "alderlake" => 2,
        "sandybridge" | "ivybridge" | "piledriver" => 1,
        _ => 0,
    }
}

fn broken(v: &str) -> bool {
    llama_runtime::BROKEN_VARIANTS.iter().any(|(b, _)| *b == v)
}

fn rand_suffix() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

#[test]
fn the_same_variant_gives_identical_ppl_hellaswag_and_kld_and_is_named() {
    let tmp = tempfile::tempdir().unwrap();
    // The host's best (by ggml's scores: this process itself is pinned by scripts/test.sh),
    // and the next best it runs (x64, the baseline, is ~5× slower: a test of minutes under a
    // busy CI).
    let runs = |v: &String, s: i32| s > 0 && !broken(v);
    let best = llama_runtime::scores()
        .into_iter()
        .filter(|(v, s)| runs(v, *s))
        .max_by_key(|(_, s)| *s)
        .map(|(v, _)| v)
        .expect("a variant this host runs");
    let second = llama_runtime::scores()
        .into_iter()
        .filter(|(v, s)| runs(v, *s) && *v != best)
        .max_by_key(|(_, s)| *s)
        .map(|(v, _)| v)
        .expect("a second variant this host runs");
    // The KLD base: logits of the model under the second variant, 2 × 128 tokens.
    let base = tmp.path().join("base.bin");
    let out = qg()
        .env(llama_runtime::CPU_VARIANT_ENV, &second)
        .args(["eval", "kld-base"])
        .arg(smollm2_q4_1())
        .arg("-f")
        .arg(wiki())
        .args(["-c", "128", "--chunks", "2", "-t", "2", "--out"])
        .arg(&base)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Two pinned runs of the second variant; the best variant once (two unpinned runs, which
    // load the best, are compared exactly by protocol_runs).
    let (a, b) = (
        measure(&second, &base, tmp.path()),
        measure(&second, &base, tmp.path()),
    );
    for ((name, x), (_, y)) in a.iter().zip(&b) {
        assert_eq!(x, y, "{second}: two pinned runs differ in {name}");
    }
    let mut by_variant = vec![(second.clone(), a)];
    by_variant.push((best.clone(), measure(&best, &base, tmp.path())));
    for (v, m) in &by_variant {
        for (name, x) in m {
            assert!(
                !x.as_object().unwrap().values().any(Value::is_null),
                "{v} {name}: {x}"
            );
        }
    }
    let num = |i: usize, k: usize, f: &str| by_variant[i].1[k].1[f].as_f64().unwrap();
    // The second variant against its own base: KLD 0 up to the base file's 16-bit log-prob
    // encoding (llama-perplexity's format), and the same top token everywhere.
    assert!(num(0, 2, "mean_kld").abs() < 1e-5, "{by_variant:?}");
    assert_eq!(num(0, 2, "same_top_p"), 1.0);
    // Within one SIMD tier the kernels differ only in rounding: the same PPL to 1e-3
    // relative, a tiny KLD. Across tiers they are other algorithms, and only the naming (each
    // record's variant, checked in `eval_pinned`) and each variant's own reproducibility hold.
    if simd_tier(&second) == simd_tier(&best) {
        assert!((num(0, 0, "ppl") - num(1, 0, "ppl")).abs() / num(0, 0, "ppl") < 1e-3);
        assert!(num(1, 2, "mean_kld") < 1e-3, "{by_variant:?}");
    } else {
        eprintln!(
            "{second} (SIMD tier {}) and {} (tier {}) run different kernels: PPL {} vs {}, \
             mean KLD {}; not compared",
            simd_tier(&second),
            best,
            simd_tier(&best),
            num(0, 0, "ppl"),
            num(1, 0, "ppl"),
            num(1, 2, "mean_kld")
        );
    }
    for (v, m) in &by_variant {
        eprintln!(
            "{v}: {}",
            serde_json::to_string(&m.iter().cloned().collect::<serde_json::Map<_, _>>()).unwrap()
        );
    }
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
    let pinned = base.replacen(
        "[settings]\n",
        "[settings]\ncpu_variant = \"pentium4\"\n",
        1,
    );
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
