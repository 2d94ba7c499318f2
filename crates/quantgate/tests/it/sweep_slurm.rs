//! Issue 31's acceptance sweep run two ways: here (`sweep run`) and as a real Slurm array
//! (single-node slurm-wlm 22.05 + munge: `scripts/slurm.sh start`, which scripts/test.sh runs
//! before the tests and stops after). On Slurm one task is stopped mid-run with
//! `scancel --signal=TERM --full` and finishes after its requeue, and a tampered GGUF is NO-GO,
//! not retried, its release cancelled by Slurm. Local and Slurm give identical verdicts and
//! quality fields (`sweep compare`).

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use common::*;

fn out(o: &Output) -> String {
    format!(
        "{}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn sh(cmd: &str, args: &[&str]) -> String {
    let o = Command::new(cmd)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{cmd}: {e}"));
    assert!(o.status.success(), "{cmd} {args:?}: {}", out(&o));
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

fn slurm_up() {
    let o = Command::new("sinfo").args(["-h", "-o", "%t"]).output();
    let ok = o.as_ref().is_ok_and(|o| o.status.success());
    assert!(ok, "no Slurm controller answers: run `scripts/slurm.sh start` as root first (scripts/test.sh does): {o:?}");
}

fn submitted(dir: &Path) -> (String, String) {
    let s = json(&dir.join("slurm/submitted.json"));
    (
        s["array_job"].as_str().unwrap().into(),
        s["collect_job"].as_str().unwrap().into(),
    )
}

/// Waits until squeue no longer lists `job` (it ended), up to `limit`.
fn wait_gone(job: &str, limit: Duration) {
    let t0 = Instant::now();
    loop {
        let q = sh("squeue", &["-h", "-r", "-j", job, "-o", "%i"]);
        if q.is_empty() {
            return;
        }
        assert!(
            t0.elapsed() < limit,
            "job {job} still queued after {limit:?}: {q}"
        );
        std::thread::sleep(Duration::from_secs(2));
    }
}

fn task_index(dir: &Path, id: &str) -> usize {
    let p = json(&dir.join("plan.json"));
    p["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .position(|t| t["id"] == id)
        .unwrap()
}

fn receipt_of(dir: &Path, id: &str) -> Option<serde_json::Value> {
    let p = json(&dir.join("plan.json"));
    let t = &p["tasks"][task_index(dir, id)];
    let r = dir.join(t["dir"].as_str().unwrap()).join("receipt.json");
    r.exists().then(|| json(&r))
}

/// `scontrol show job J_I` field `key` (`JobState`, `Restarts`, `Reason`).
fn job_field(job: &str, key: &str) -> String {
    let s = sh("scontrol", &["show", "job", job]);
    s.split_whitespace()
        .find_map(|kv| kv.strip_prefix(&format!("{key}=")))
        .unwrap_or("")
        .to_string()
}

/// A sweep of one tampered MiniLM F16 GGUF (a weight byte flipped, pinned by its own hash):
/// verify and release.
fn broken_sweep(dir: &Path) -> PathBuf {
    let f16 = dir.join("minilm-f16.gguf");
    convert_to(
        &hf("all-MiniLM-L6-v2"),
        &f16,
        quantgate::convert::OutType::F16,
        false,
    );
    let bad = dir.join("tampered.gguf");
    tamper_gguf(
        &f16,
        &bad,
        |_, _| {},
        |n, d| {
            if n == "blk.0.attn_q.weight" {
                d[100] ^= 0x40;
            }
        },
        None,
    );
    let sha = quantgate::hash::sha256_file(&bad).unwrap();
    let root = repo().canonicalize().unwrap();
    let text = std::fs::read_to_string(repo().join("sweeps/ci.toml")).unwrap();
    let inputs = text[text.find("\n[[inputs]]\n").unwrap() + 1..]
        .replace("path = \"../", &format!("path = \"{}/", root.display()));
    let toml = format!(
        "[sweep]\nid = \"broken\"\n\n[settings]\nthreads = 2\ncpu_variant = \"haswell\"\n\n[matrix]\nftypes = [\"F16\"]\ntasks = [\"verify\", \"release\"]\n\n[[models]]\nname = \"minilm\"\nhf_dir = \"{}/.cache/hf/all-MiniLM-L6-v2\"\nggufs = [\"tampered\"]\n\n[[inputs]]\nname = \"tampered\"\npath = \"{}\"\nsha256 = \"{sha}\"\nlicense = \"Apache-2.0\"\nrevision = \"MiniLM F16 with one byte of blk.0.attn_q.weight flipped (this test)\"\n\n{inputs}",
        root.display(),
        bad.display()
    );
    let p = dir.join("broken.toml");
    std::fs::write(&p, toml).unwrap();
    p
}

fn plan(sweep: &Path, dir: &Path) {
    let o = qg()
        .args(["sweep", "plan"])
        .arg(sweep)
        .arg("-o")
        .arg(dir)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", out(&o));
}

fn submit(dir: &Path) {
    let o = qg()
        .args(["sweep", "submit"])
        .arg(dir)
        .arg("--slurm")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", out(&o));
}

/// Stops task `index` of `array` with SIGTERM once it has run for a few seconds.
fn scancel_mid_run(dir: &Path, array: &str, index: usize) {
    let p = json(&dir.join("plan.json"));
    let log = dir
        .join(p["tasks"][index]["dir"].as_str().unwrap())
        .join("stderr.log");
    let t0 = Instant::now();
    let job = format!("{array}_{index}");
    loop {
        let state = sh("squeue", &["-h", "-r", "-j", &job, "-o", "%T"]);
        if state == "RUNNING" && log.exists() {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(1200),
            "{job} never ran: {state}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    std::thread::sleep(Duration::from_secs(3));
    sh("scancel", &["--signal=TERM", "--full", &job]);
}

#[test]
fn local_and_slurm_give_the_same_verdicts_with_a_requeue_and_a_final_no_go() {
    slurm_up();
    let tmp = tempfile::tempdir_in(repo().join("out"))
        .or_else(|_| tempfile::tempdir())
        .unwrap();
    let (local, on_slurm, broken) = (
        tmp.path().join("local"),
        tmp.path().join("slurm"),
        tmp.path().join("broken"),
    );
    let ci = repo().join("sweeps/ci.toml");
    plan(&ci, &local);
    plan(&ci, &on_slurm);
    plan(&broken_sweep(tmp.path()), &broken);

    let o = qg().args(["sweep", "run"]).arg(&local).output().unwrap();
    assert!(o.status.success(), "{}", out(&o));
    assert!(
        out(&o).contains("14 ran, 0 already final, 0 blocked, 0 unfinished"),
        "{}",
        out(&o)
    );

    submit(&broken);
    submit(&on_slurm);
    let (array, collect) = submitted(&on_slurm);
    let killed = task_index(&on_slurm, "verify/smollm2/F16");
    scancel_mid_run(&on_slurm, &array, killed);
    // Slurm holds a requeued job back about 2 minutes before it runs again.
    wait_gone(&collect, Duration::from_secs(2400));
    let (b_array, b_collect) = submitted(&broken);
    wait_gone(&b_collect, Duration::from_secs(600));

    // The stopped task: interrupted, requeued by the script, passed on its second attempt.
    let r = receipt_of(&on_slurm, "verify/smollm2/F16").unwrap();
    assert_eq!(
        (
            r["state"].as_str(),
            r["attempt"].as_u64(),
            r["executor"].as_str()
        ),
        (Some("passed"), Some(2), Some("slurm"))
    );
    assert_eq!(job_field(&format!("{array}_{killed}"), "Restarts"), "1");
    let log =
        std::fs::read_to_string(on_slurm.join(format!("slurm/{array}_{killed}.out"))).unwrap();
    assert!(
        log.contains(&format!(
            "quantgate sweep task {killed}: exit 3 (restart 0)"
        )),
        "{log}"
    );
    assert!(
        log.contains(&format!(
            "quantgate sweep task {killed}: exit 0 (restart 1)"
        )),
        "{log}"
    );

    // Same verdicts and quality fields, task by task.
    let o = qg()
        .args(["sweep", "compare"])
        .arg(&local)
        .arg(&on_slurm)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", out(&o));
    assert!(
        out(&o).contains("14 of 14 tasks: same state, verdict and quality fields"),
        "{}",
        out(&o)
    );
    let c = json(&on_slurm.join("collect/sweep.json"));
    assert_eq!(c["verdict"], "GO");
    assert_renders(&on_slurm.join("collect/sweep.html"), "sweep collect");

    assert_broken(&broken, &b_array);
}

/// The tampered file: NO-GO, one attempt, not requeued; its release cancelled by Slurm.
fn assert_broken(broken: &Path, b_array: &str) {
    let v = receipt_of(broken, "verify/minilm/tampered").unwrap();
    assert_eq!(
        (
            v["state"].as_str(),
            v["verdict"].as_str(),
            v["attempt"].as_u64()
        ),
        (Some("failed"), Some("NO-GO"), Some(1))
    );
    assert_eq!(job_field(&format!("{b_array}_0"), "Restarts"), "0");
    assert_eq!(job_field(&format!("{b_array}_0"), "JobState"), "FAILED");
    assert!(receipt_of(broken, "release/minilm").is_none());
    assert_eq!(
        job_field(&format!("{b_array}_1"), "Reason"),
        "DependencyNeverSatisfied"
    );
    let c = json(&broken.join("collect/sweep.json"));
    assert_eq!(c["verdict"], "NO-GO");
    let o = qg().args(["sweep", "status"]).arg(broken).output().unwrap();
    assert!(
        out(&o).contains("blocked by verify/minilm/tampered"),
        "{}",
        out(&o)
    );
}
