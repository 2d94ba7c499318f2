//! `quantgate run` / `quantgate analyze` on the CI protocol (protocols/ci.toml) with the real
//! SmolLM2-135M fixture: two runs reproduce every quality quantity exactly; a changed input
//! hash aborts before any step; SIGTERM mid-step leaves a failed receipt naming the step;
//! analyze flags a missing quantity and a 3% change, and refuses runs of different protocols.

use crate::common;

use std::path::{Path, PathBuf};

use serde_json::Value;

use common::{json, qg, repo as root};

/// The CI protocol rewritten with absolute input paths (so the copy can live in a temp dir),
/// with `edit` applied to its text.
fn protocol_copy(dir: &Path, edit: impl Fn(String) -> String) -> PathBuf {
    let base = root().join("protocols").canonicalize().unwrap();
    let text = std::fs::read_to_string(base.join("ci.toml")).unwrap();
    let text = text
        .replace("path = \"../", &format!("path = \"{}/../", base.display()))
        .replace(
            "hf_dir = \"../",
            &format!("hf_dir = \"{}/../", base.display()),
        );
    let p = dir.join("protocol.toml");
    std::fs::write(&p, edit(text)).unwrap();
    p
}

fn analyze(r1: &Path, r2: &Path, out: &Path) -> (Option<i32>, String, Value) {
    let o = qg()
        .arg("analyze")
        .arg(r1)
        .arg(r2)
        .arg("--out")
        .arg(out)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    let an = if out.join("analysis.json").exists() {
        json(&out.join("analysis.json"))
    } else {
        Value::Null
    };
    (o.status.code(), text, an)
}

fn row<'a>(an: &'a Value, q: &str) -> &'a Value {
    an["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["quantity"] == q)
        .unwrap_or_else(|| panic!("no row {q}"))
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for f in ["run_status.json", "results.json", "protocol.toml"] {
        std::fs::copy(from.join(f), to.join(f)).unwrap();
    }
}

#[test]
fn two_ci_runs_reproduce_and_analyze_follows_the_frozen_rule() {
    let tmp = tempfile::tempdir().unwrap();
    let protocol = root().join("protocols/ci.toml");
    let (r1, r2) = (tmp.path().join("r1"), tmp.path().join("r2"));
    for (r, op) in [(&r1, "first"), (&r2, "second")] {
        let o = qg()
            .arg("run")
            .arg(&protocol)
            .arg("--run-dir")
            .arg(r)
            .args(["--operator", op])
            .output()
            .unwrap();
        assert_eq!(
            o.status.code(),
            Some(0),
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        let st = json(&r.join("run_status.json"));
        assert_eq!(st["state"], "complete");
        assert_eq!(st["operator"], op);
        // results.json names the llama.cpp pin and the CPU backend that ran with its ISA.
        let env = &json(&r.join("results.json"))["environment"];
        let llama = env["llama_cpp"].as_str().unwrap();
        assert!(
            llama.contains("=0.1.161")
                && llama.contains(" · CPU backend ")
                && llama.contains(") [SSE3 "),
            "{llama}"
        );
    }
    // A used run folder is refused.
    let o = qg()
        .arg("run")
        .arg(&protocol)
        .arg("--run-dir")
        .arg(&r1)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("not empty"));

    let (code, text, an) = analyze(&r1, &r2, &tmp.path().join("an"));
    check_analysis(&an, code, &text, &tmp.path().join("an/analysis.md"));
    let rows = an["rows"].as_array().unwrap();
    let r2c = missing_and_changed_quantities_fail(tmp.path(), &r1, &r2, rows);
    other_protocols_copies_and_claims_are_refused(tmp.path(), &r1, &r2, &r2c);
}

/// The analysis of two clean runs: every quantity present, the deterministic ones identical,
/// the values in range, and the decision the frozen rule gives for the rows.
fn check_analysis(an: &Value, code: Option<i32>, text: &str, md: &Path) {
    let rows = an["rows"].as_array().unwrap();
    // Every quantity present in both runs.
    assert!(rows.iter().all(|r| r["verdict"] != "missing"), "{text}");
    for q in [
        "ppl[F16]",
        "ppl[Q4_K_M]",
        "delta_ppl[Q4_K_M]",
        "acc_norm[F16]",
        "acc_norm[Q4_K_M]",
        "delta_acc_norm[Q4_K_M]",
        "mean_kld[Q4_K_M]",
        "same_top_p[Q4_K_M]",
        "file_bytes[F16]",
        "file_bytes[Q4_K_M]",
        "verify_go[F16]",
        "logits_min_cosine[F16]",
    ] {
        let r = row(an, q);
        assert_eq!(r["deviation"], 0.0, "{q}: {r}");
        assert_eq!(r["verdict"], "pass", "{q}");
    }
    // The runs are deterministic down to the files.
    assert_eq!(
        an["identical_files"],
        serde_json::json!(["SmolLM2-135M-Instruct/F16", "SmolLM2-135M-Instruct/Q4_K_M"])
    );
    // Quality values as measured on this fixture (F16 vs Q4_K_M, 4 chunks of 512).
    let ppl = row(an, "ppl[F16]")["run1"].as_f64().unwrap();
    let kld = row(an, "mean_kld[Q4_K_M]")["run1"].as_f64().unwrap();
    assert!(ppl > 15.0 && ppl < 35.0, "{ppl}");
    assert!(kld > 0.02 && kld < 0.2, "{kld}");
    assert_eq!(row(an, "verify_go[F16]")["run1"], 1.0);
    // Throughput: absolute t/s reported with spread, the Q/F16 ratio judged.
    let ts = row(an, "pp512_ts[F16]");
    assert_eq!(ts["verdict"], "reported");
    assert!(ts["spread1"].as_f64().unwrap() >= 0.0);
    assert_eq!(row(an, "tg128_ratio[Q4_K_M/F16]")["kind"], "ratio");
    assert!(row(an, "tg128_ratio[Q4_K_M/F16]")["tolerance"] == 0.02);
    // The decision follows the rule from the rows.
    let failed: Vec<&Value> = rows
        .iter()
        .filter(|r| r["verdict"] == "fail" || r["verdict"] == "missing")
        .collect();
    let expected = if failed.is_empty() {
        "capability proven"
    } else if failed.iter().any(|r| r["class"] == "quality") {
        "capability gap"
    } else {
        "partial pass"
    };
    assert_eq!(an["decision"], expected, "{text}");
    assert_eq!(code, Some(if failed.is_empty() { 0 } else { 1 }));
    assert!(text.trim_end().ends_with(expected), "{text}");
    let md = std::fs::read_to_string(md).unwrap();
    assert!(md.contains(&format!("**Decision: {expected}**")));
    assert!(md.contains("| ppl[F16] | PPL |"));
}

/// A quantity deleted from run 2 fails as missing; one changed by 3% fails alone. Returns the
/// changed run's folder.
fn missing_and_changed_quantities_fail(
    tmp: &Path,
    r1: &Path,
    r2: &Path,
    rows: &[Value],
) -> PathBuf {
    // One quantity deleted from r2 → it fails as missing (a quality one → capability gap).
    let r2m = tmp.join("r2-missing");
    copy_dir(r2, &r2m);
    let mut res = json(&r2m.join("results.json"));
    res["models"]["SmolLM2-135M-Instruct"]
        .as_object_mut()
        .unwrap()
        .remove("acc_norm[Q4_K_M]");
    std::fs::write(r2m.join("results.json"), res.to_string()).unwrap();
    let (code, _, an) = analyze(r1, &r2m, &tmp.join("an-m"));
    assert_eq!(code, Some(1));
    assert_eq!(row(&an, "acc_norm[Q4_K_M]")["verdict"], "missing");
    assert_eq!(row(&an, "acc_norm[Q4_K_M]")["run2"], Value::Null);
    assert_eq!(an["decision"], "capability gap");

    // One value changed by 3% → that quantity fails, every other keeps its verdict.
    let r2c = tmp.join("r2-changed");
    copy_dir(r2, &r2c);
    let mut res = json(&r2c.join("results.json"));
    let v = &mut res["models"]["SmolLM2-135M-Instruct"]["ppl[F16]"]["value"];
    *v = Value::from(v.as_f64().unwrap() * 1.03);
    std::fs::write(r2c.join("results.json"), res.to_string()).unwrap();
    let (_, _, an_c) = analyze(r1, &r2c, &tmp.join("an-c"));
    let r = row(&an_c, "ppl[F16]");
    assert_eq!(r["verdict"], "fail");
    assert!(
        (r["deviation"].as_f64().unwrap() - 0.03).abs() < 1e-9,
        "{r}"
    );
    assert_eq!(an_c["decision"], "capability gap");
    for b in rows {
        let q = b["quantity"].as_str().unwrap();
        if q != "ppl[F16]" {
            assert_eq!(row(&an_c, q)["verdict"], b["verdict"], "{q}");
        }
    }

    r2c
}

/// Runs of different protocols, a results.json disagreeing with its protocol, the same run
/// twice, and tolerances claimed by a results.json are all refused or ignored.
fn other_protocols_copies_and_claims_are_refused(tmp: &Path, r1: &Path, r2: &Path, r2c: &Path) {
    // Runs of different protocols are never compared: r2's protocol edited (a comment) and
    // both receipts updated to its sha256.
    let r2p = tmp.join("r2-other");
    copy_dir(r2, &r2p);
    let mut proto = std::fs::read(r2p.join("protocol.toml")).unwrap();
    proto.extend_from_slice(b"# edited\n");
    std::fs::write(r2p.join("protocol.toml"), &proto).unwrap();
    let sha = quantgate::hash::sha256_bytes(&proto);
    for f in ["results.json", "run_status.json"] {
        let mut v = json(&r2p.join(f));
        v["protocol_sha256"] = Value::from(sha.clone());
        std::fs::write(r2p.join(f), v.to_string()).unwrap();
    }
    let (code, text, _) = analyze(r1, &r2p, &tmp.join("an-p"));
    assert_eq!(code, Some(2));
    assert!(text.contains("runs of different protocols"), "{text}");
    // A results.json whose protocol hash disagrees with its protocol.toml is refused.
    let r2h = tmp.join("r2-hash");
    copy_dir(r2, &r2h);
    let mut v = json(&r2h.join("results.json"));
    v["protocol_sha256"] = Value::from("0".repeat(64));
    std::fs::write(r2h.join("results.json"), v.to_string()).unwrap();
    let (code, text, _) = analyze(r1, &r2h, &tmp.join("an-h"));
    assert_eq!(code, Some(2));
    assert!(text.contains("disagree"), "{text}");
    // The same run twice, or a copy of it, is not a reproduction.
    for other in [r1.to_path_buf(), tmp.join("r1-copy")] {
        if other != r1 {
            copy_dir(r1, &other);
        }
        let (code, text, _) = analyze(r1, &other, &tmp.join("an-same"));
        assert_eq!(code, Some(2));
        assert!(text.contains("same run"), "{text}");
    }
    // Tolerances and kinds come from the frozen protocol and the quantity names, not from
    // results.json: a run 1 claiming a huge tolerance and PPL "reported" changes nothing.
    let r1t = tmp.join("r1-tampered");
    copy_dir(r1, &r1t);
    let mut v = json(&r1t.join("results.json"));
    v["tolerances"]["non_delta"] = Value::from(1e9);
    v["models"]["SmolLM2-135M-Instruct"]["ppl[F16]"]["kind"] = Value::from("reported");
    std::fs::write(r1t.join("results.json"), v.to_string()).unwrap();
    let (_, _, an_t) = analyze(&r1t, r2c, &tmp.join("an-t"));
    assert_eq!(row(&an_t, "ppl[F16]")["verdict"], "fail");
    assert_eq!(row(&an_t, "ppl[F16]")["tolerance"], 0.02);
}

#[test]
fn altered_input_hash_aborts_before_any_step() {
    let tmp = tempfile::tempdir().unwrap();
    let p = protocol_copy(tmp.path(), |t| {
        t.replace(
            "173c87a53759e0201f33e0ccf978e510c2042d7f2cb78229d9a50d79b9e7dd08",
            "173c87a53759e0201f33e0ccf978e510c2042d7f2cb78229d9a50d79b9e7dd09",
        )
    });
    let run = tmp.path().join("run");
    let o = qg()
        .arg("run")
        .arg(&p)
        .arg("--run-dir")
        .arg(&run)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    let st = json(&run.join("run_status.json"));
    assert_eq!(st["state"], "failed");
    assert_eq!(st["step"], "inputs");
    let reason = st["reason"].as_str().unwrap();
    assert!(
        reason.contains("wiki") && reason.contains("dd09"),
        "{reason}"
    );
    // Nothing computed: no step ran, no model or log folder exists.
    assert_eq!(
        json(&run.join("results.json"))["steps"],
        serde_json::json!([])
    );
    assert!(!run.join("models").exists() && !run.join("logs").exists());
}

#[test]
fn sigterm_mid_step_leaves_a_failed_receipt_naming_the_step() {
    let tmp = tempfile::tempdir().unwrap();
    let p = protocol_copy(tmp.path(), |t| t);
    let run = tmp.path().join("run");
    let mut child = qg()
        .arg("run")
        .arg(&p)
        .arg("--run-dir")
        .arg(&run)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Wait for the third step (verify, the longest) to start.
    let t0 = std::time::Instant::now();
    while !run
        .join("logs/03-verify-SmolLM2-135M-Instruct-F16.err")
        .exists()
    {
        assert!(t0.elapsed().as_secs() < 300, "step 3 never started");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    std::thread::sleep(std::time::Duration::from_millis(500));
    // SAFETY: plain kill(2) on our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let status = child.wait().unwrap();
    // 128 + SIGTERM, as a shell reports a command stopped by it.
    assert_eq!(status.code(), Some(143));
    let st = json(&run.join("run_status.json"));
    assert_eq!(st["state"], "failed");
    assert_eq!(st["step"], "03-verify-SmolLM2-135M-Instruct-F16");
    assert!(st["reason"].as_str().unwrap().contains("SIGTERM"), "{st}");
    assert!(st["finished"].is_string());
    let res = json(&run.join("results.json"));
    assert_eq!(res["state"], "failed");
    assert_eq!(res["steps"].as_array().unwrap().len(), 3);
    // The failed run is refused by analyze.
    let (code, text, _) = analyze(&run, &run, &tmp.path().join("an"));
    assert_eq!(code, Some(2));
    assert!(text.contains("only complete runs are compared"), "{text}");
}
