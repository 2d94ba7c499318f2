//! `quantgate sweep` (issue 31): the CI sweep (MiniLM and SmolLM2 × F16, Q8_0, Q4_K_M →
//! convert, quantize, verify, release) planned, run here and on a real single-node Slurm
//! (`scripts/slurm.sh start`; scripts/test.sh starts and stops it), with one task stopped by
//! `scancel --signal=TERM` mid-run and finishing after its requeue, and a broken input that is
//! NO-GO and not retried; the verdicts and quality fields of the two executors compared; the
//! Kueue manifests validated against Kubernetes 1.37's schemas; bad sweep files, a task folder
//! deleted mid-run and an unreachable scheduler refused with the field named.

use crate::common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use common::*;

/// The repository's CI sweep.
fn ci_sweep() -> PathBuf {
    hf("all-MiniLM-L6-v2");
    hf("SmolLM2-135M-Instruct");
    repo().join("sweeps/ci.toml")
}

/// The `[[inputs]]` of sweeps/ci.toml with absolute paths, for sweep files written elsewhere.
fn ci_inputs() -> String {
    let text = std::fs::read_to_string(ci_sweep()).unwrap();
    let at = text.find("\n[[inputs]]\n").unwrap() + 1;
    let root = repo().canonicalize().unwrap();
    text[at..].replace("path = \"../", &format!("path = \"{}/", root.display()))
}

/// A sweep file in `dir` with the CI inputs: `matrix` and `models` are TOML text.
fn sweep_file(dir: &Path, name: &str, matrix: &str, models: &str, extra: &str) -> PathBuf {
    let root = repo().canonicalize().unwrap();
    let text = format!(
        "[sweep]\nid = \"t\"\n\n[settings]\nthreads = 2\ncpu_variant = \"haswell\"\n\n[matrix]\n{matrix}\n\n{}\n{extra}\n{}",
        models.replace("hf_dir = \"../", &format!("hf_dir = \"{}/", root.display())),
        ci_inputs()
    );
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

const SMOLLM2: &str =
    "[[models]]\nname = \"smollm2\"\nhf_dir = \"../.cache/hf/SmolLM2-135M-Instruct\"\n";
const MINILM: &str = "[[models]]\nname = \"minilm\"\nhf_dir = \"../.cache/hf/all-MiniLM-L6-v2\"\n";

fn out(o: &Output) -> String {
    format!(
        "{}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn sweep(args: &[&str], dir: &Path) -> Output {
    qg().arg("sweep")
        .arg(args[0])
        .arg(dir)
        .args(&args[1..])
        .output()
        .unwrap()
}

fn plan(sweep_toml: &Path, dir: &Path) -> Output {
    qg().args(["sweep", "plan"])
        .arg(sweep_toml)
        .arg("-o")
        .arg(dir)
        .output()
        .unwrap()
}

fn plan_json(dir: &Path) -> serde_json::Value {
    json(&dir.join("plan.json"))
}

fn receipt(dir: &Path, task: &serde_json::Value) -> Option<serde_json::Value> {
    let p = dir.join(task["dir"].as_str().unwrap()).join("receipt.json");
    p.exists().then(|| json(&p))
}

#[test]
fn the_ci_plan_has_stable_indices_dependencies_and_needs() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    for d in [&a, &b] {
        let o = plan(&ci_sweep(), d);
        assert!(o.status.success(), "{}", out(&o));
    }
    assert_eq!(
        std::fs::read(a.join("plan.json")).unwrap(),
        std::fs::read(b.join("plan.json")).unwrap()
    );
    let p = plan_json(&a);
    let ids: Vec<&str> = p["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_str().unwrap())
        .collect();
    let per = |m: &str| {
        vec![
            format!("convert/{m}/F16"),
            format!("quantize/{m}/Q8_0"),
            format!("quantize/{m}/Q4_K_M"),
            format!("verify/{m}/F16"),
            format!("verify/{m}/Q8_0"),
            format!("verify/{m}/Q4_K_M"),
            format!("release/{m}"),
        ]
    };
    assert_eq!(ids, [per("minilm"), per("smollm2")].concat());
    let deps = |i: usize| -> Vec<u64> {
        p["tasks"][i]["deps"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d.as_u64().unwrap())
            .collect()
    };
    assert_eq!((deps(0), deps(1), deps(2)), (vec![], vec![0], vec![0]));
    assert_eq!((deps(3), deps(4), deps(5)), (vec![0], vec![1], vec![2]));
    assert_eq!(deps(6), vec![3, 4, 5]);
    assert_eq!(deps(13), vec![10, 11, 12]);
    let mem = |i: usize| p["tasks"][i]["needs"]["mem_bytes"].as_u64().unwrap();
    for i in 0..14 {
        assert_eq!(p["tasks"][i]["needs"]["cpus"], 2);
        // verify's fixed 512 MiB for activations, KV cache and tokenizers is the floor.
        assert!(mem(i) > 256 << 20, "task {i}: {}", mem(i));
    }
    // SmolLM2's 49152 × 576 embedding in f32 and its logits outweigh all of MiniLM.
    assert!(mem(10) > mem(3), "{} vs {}", mem(10), mem(3));
    // Inputs hashed into the folder, the sweep file's bytes kept.
    assert_eq!(
        std::fs::read(a.join("sweep.toml")).unwrap(),
        std::fs::read(ci_sweep()).unwrap()
    );
    assert!(a.join("inputs/minilm/1_Pooling/config.json").is_file());
    assert!(a.join("inputs/smollm2/model.safetensors").is_file());
}

/// Exit 2, the message naming `field`, no sweep folder and no staging folder left.
fn refused(sweep_toml: &Path, field: &str) {
    let dir = sweep_toml.parent().unwrap().join("plan-out");
    let o = plan(sweep_toml, &dir);
    assert_eq!(o.status.code(), Some(2), "{}", out(&o));
    assert!(out(&o).contains(field), "{field} not in: {}", out(&o));
    assert!(!dir.exists());
    let staged = std::fs::read_dir(sweep_toml.parent().unwrap())
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .starts_with(".sweep-plan-")
        })
        .count();
    assert_eq!(staged, 0, "a staging folder was left behind");
}

#[test]
fn bad_sweep_files_are_refused_naming_the_field() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let m = "ftypes = [\"F16\", \"Q8_0\"]\ntasks = [\"convert\", \"quantize\", \"verify\"]";
    refused(
        &sweep_file(
            d,
            "ftype.toml",
            "ftypes = [\"F16\", \"Q4_K_X\"]\ntasks = [\"convert\"]",
            MINILM,
            "",
        ),
        "matrix.ftypes: \"Q4_K_X\" is not an ftype",
    );
    let ghost = "[[inputs]]\nname = \"ghost\"\npath = \"ghost.gguf\"\nsha256 = \"00000000000000000000000000000000000000000000000000000000000000aa\"\nlicense = \"MIT\"\nrevision = \"none\"\n";
    let with_ghost = format!("[[models]]\nname = \"minilm\"\nhf_dir = \"../.cache/hf/all-MiniLM-L6-v2\"\nggufs = [\"ghost\"]\n\n{ghost}");
    refused(
        &sweep_file(d, "missing.toml", m, &with_ghost, ""),
        "inputs.ghost.path",
    );
    // One pinned hash off by one digit.
    let p = sweep_file(d, "hash.toml", m, MINILM, "");
    let text = std::fs::read_to_string(&p).unwrap();
    let at = text.find("name = \"minilm-config-json\"").unwrap();
    let h = at + text[at..].find("sha256 = \"").unwrap() + 10;
    let flipped = if &text[h..h + 1] == "0" { "1" } else { "0" };
    std::fs::write(&p, format!("{}{flipped}{}", &text[..h], &text[h + 1..])).unwrap();
    refused(&p, "inputs.minilm-config-json.sha256");
    let proto = "[[runs]]\nname = \"a\"\nprotocol = \"ci-protocol\"\nafter = [\"protocol/b\"]\n\n[[runs]]\nname = \"b\"\nprotocol = \"ci-protocol\"\nafter = [\"protocol/a\"]\n";
    refused(
        &sweep_file(d, "cycle.toml", m, MINILM, proto),
        "dependency cycle (each waits for the one before it): protocol/a → protocol/b → protocol/a",
    );
    let after = "[[models]]\nname = \"minilm\"\nhf_dir = \"../.cache/hf/all-MiniLM-L6-v2\"\nafter = [\"release/nobody\"]\n";
    refused(
        &sweep_file(d, "after.toml", m, after, ""),
        "models.minilm.after: no task \"release/nobody\"",
    );
    // A file in the model folder that no input pins.
    let hf_copy = d.join("hf");
    copy_hf(&hf("all-MiniLM-L6-v2"), &hf_copy);
    std::fs::write(hf_copy.join("extra.json"), "{}").unwrap();
    let unpinned = format!(
        "[[models]]\nname = \"minilm\"\nhf_dir = \"{}\"\n",
        hf_copy.display()
    );
    refused(
        &sweep_file(d, "unpinned.toml", m, &unpinned, ""),
        "models.minilm.hf_dir: extra.json is not pinned",
    );
}

#[test]
fn submit_slurm_without_a_scheduler_is_refused_and_writes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("s");
    let m = "ftypes = [\"F16\"]\ntasks = [\"convert\"]";
    assert!(plan(&sweep_file(tmp.path(), "s.toml", m, MINILM, ""), &dir)
        .status
        .success());
    // No sinfo/sbatch on PATH: as on a machine outside the cluster.
    let o = qg()
        .args(["sweep", "submit"])
        .arg(&dir)
        .arg("--slurm")
        .env("PATH", tmp.path())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", out(&o));
    assert!(
        out(&o).contains("no Slurm scheduler reachable"),
        "{}",
        out(&o)
    );
    assert!(!dir.join("slurm").exists());
}

#[test]
fn a_task_folder_deleted_mid_run_is_a_runtime_failure_and_runs_again() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("s");
    let m = "ftypes = [\"F16\"]\ntasks = [\"convert\", \"verify\"]";
    assert!(
        plan(&sweep_file(tmp.path(), "s.toml", m, SMOLLM2, ""), &dir)
            .status
            .success()
    );
    let o = sweep(&["task", "--index", "0"], &dir);
    assert_eq!(o.status.code(), Some(0), "{}", out(&o));
    let p = plan_json(&dir);
    let tdir = dir.join(p["tasks"][1]["dir"].as_str().unwrap());
    let child = qg()
        .args(["sweep", "task"])
        .arg(&dir)
        .args(["--index", "1"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    while !tdir.join("stderr.log").exists() {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "the verify task never started"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_secs(2));
    std::fs::remove_dir_all(&tdir).unwrap();
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(3), "{}", out(&o));
    assert!(
        out(&o).contains("the task folder was deleted while the task ran"),
        "{}",
        out(&o)
    );
    assert!(!tdir.join("receipt.json").exists());
    // The local executor runs it again; the convert's receipt is kept.
    let o = sweep(&["run"], &dir);
    assert_eq!(o.status.code(), Some(0), "{}", out(&o));
    assert!(out(&o).contains("1 ran, 1 already final"), "{}", out(&o));
    assert_eq!(receipt(&dir, &p["tasks"][1]).unwrap()["verdict"], "GO");
    // The table: GO last (its page is rendered by tests/it/sweep_slurm.rs, on 14 rows).
    let o = sweep(&["collect"], &dir);
    assert_eq!(o.status.code(), Some(0), "{}", out(&o));
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).lines().last(),
        Some("GO")
    );
    let md = std::fs::read_to_string(dir.join("collect/sweep.md")).unwrap();
    assert!(
        md.contains("| 1 | verify/smollm2/F16 | passed | GO | gate 1 272/272"),
        "{md}"
    );
}

/// kubernetes-validate (hash-pinned, Kubernetes 1.37 schemas) on `files`: its output.
fn kubernetes_validate(files: &[PathBuf]) -> Output {
    let o = Command::new(repo().join("scripts/kubernetes-validate.sh"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", out(&o));
    let exe = String::from_utf8_lossy(&o.stdout).trim().to_string();
    Command::new(exe)
        .args(["--strict", "--kubernetes-version", "1.37"])
        .args(files)
        .output()
        .unwrap()
}

#[test]
fn kueue_manifests_are_valid_kubernetes_1_37_objects() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("s");
    assert!(plan(&ci_sweep(), &dir).status.success());
    // A tag is not a pin.
    let id = format!("sha256:{}", "1d".repeat(32));
    let o = sweep(
        &[
            "submit",
            "--kueue",
            "team-cpu",
            "--image",
            "quantgate:latest",
            "--image-id",
            &id,
        ],
        &dir,
    );
    assert_eq!(o.status.code(), Some(2), "{}", out(&o));
    assert!(out(&o).contains("name the image by digest"), "{}", out(&o));
    let digest = format!("sha256:{}", "5e".repeat(32));
    let image = format!("localhost/quantgate@{digest}");
    let o = sweep(
        &[
            "submit",
            "--kueue",
            "team-cpu",
            "--image",
            &image,
            "--image-id",
            &id,
        ],
        &dir,
    );
    assert!(o.status.success(), "{}", out(&o));
    let files: Vec<PathBuf> = ["pvc", "network-policy", "job", "collect-job"]
        .iter()
        .map(|n| dir.join(format!("kueue/{n}.json")))
        .collect();
    let v = kubernetes_validate(&files);
    assert!(v.status.success(), "{}", out(&v));
    let job = json(&files[2]);
    assert_job(&job, &image, &id, &plan_json(&dir));
    // The validator is live: a wrongly typed field is refused.
    let mut bad = job.clone();
    bad["spec"]["backoffLimitPerIndex"] = serde_json::json!("one");
    let bad_p = tmp.path().join("bad-job.json");
    std::fs::write(&bad_p, serde_json::to_vec(&bad).unwrap()).unwrap();
    let v = kubernetes_validate(&[bad_p]);
    assert!(!v.status.success(), "{}", out(&v));
}

/// The Indexed Job's queue label, suspension, completions, failure policy, image, environment
/// and requests.
fn assert_job(job: &serde_json::Value, image: &str, id: &str, plan: &serde_json::Value) {
    assert_eq!(
        job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"],
        "team-cpu"
    );
    let spec = &job["spec"];
    assert_eq!(
        (spec["suspend"].as_bool(), spec["completionMode"].as_str()),
        (Some(true), Some("Indexed"))
    );
    assert_eq!(
        (
            spec["completions"].as_i64(),
            spec["backoffLimitPerIndex"].as_i64()
        ),
        (Some(14), Some(1))
    );
    let rules = spec["podFailurePolicy"]["rules"].as_array().unwrap();
    let actions: Vec<(&str, String)> = rules
        .iter()
        .map(|r| {
            (
                r["action"].as_str().unwrap(),
                format!(
                    "{}{}",
                    r["onExitCodes"]["values"], r["onPodConditions"][0]["type"]
                ),
            )
        })
        .collect();
    assert_eq!(
        actions,
        [
            ("FailIndex", "[1,2]null".to_string()),
            ("Count", "[3]null".into()),
            ("Ignore", "null\"DisruptionTarget\"".into())
        ]
    );
    let c = &spec["template"]["spec"]["containers"][0];
    assert_eq!(c["image"], image);
    assert_eq!(c["terminationMessagePolicy"], "FallbackToLogsOnError");
    let env: BTreeMap<&str, &str> = c["env"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| Some((e["name"].as_str()?, e["value"].as_str()?)))
        .collect();
    // Reports name the image ID, which survives a push; the pull uses the registry digest.
    assert_eq!(env["QUANTGATE_IMAGE_DIGEST"], id);
    assert_eq!(env["QUANTGATE_CPU_VARIANT"], "haswell");
    let max_mem = plan["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["needs"]["mem_bytes"].as_u64().unwrap().div_ceil(1 << 20))
        .max()
        .unwrap();
    assert_eq!(c["resources"]["requests"]["memory"], format!("{max_mem}Mi"));
    assert_eq!(c["resources"]["limits"]["cpu"], "2");
}

/// `f(plan.json)` written back.
fn edit_plan(dir: &Path, f: impl Fn(&mut serde_json::Value)) {
    let mut p = plan_json(dir);
    f(&mut p);
    std::fs::write(
        dir.join("plan.json"),
        serde_json::to_vec_pretty(&p).unwrap(),
    )
    .unwrap();
}

/// Exit 2 naming `what`.
fn refused_with(o: &Output, what: &str) {
    assert_eq!(o.status.code(), Some(2), "{}", out(o));
    assert!(out(o).contains(what), "{what} not in: {}", out(o));
}

/// The attacks of stop 43's review, each of which once gave GO, a panic or lost data: a sweep
/// folder changed after planning or after a task passed is refused or NO-GO, never GO.
#[test]
fn a_tampered_sweep_folder_is_never_go() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let m = "ftypes = [\"F16\", \"Q8_0\"]\ntasks = [\"convert\", \"quantize\", \"verify\"]";
    let toml = sweep_file(d, "s.toml", m, MINILM, "");
    let (good, unrun) = (d.join("good"), d.join("unrun"));
    assert!(plan(&toml, &good).status.success());
    assert!(plan(&toml, &unrun).status.success());
    let o = sweep(&["run"], &good);
    assert!(o.status.success(), "{}", out(&o));
    // A quantized file changed after its task passed: collect is NO-GO, the task refuses.
    let t1 = d.join("t1");
    copy_tree(&good, &t1);
    let q = t1.join("tasks/001-quantize-minilm-Q8_0/minilm-Q8_0.gguf");
    let mut bytes = std::fs::read(&q).unwrap();
    let n = bytes.len();
    bytes[n - 100] ^= 1;
    std::fs::write(&q, bytes).unwrap();
    let o = sweep(&["collect"], &t1);
    assert_eq!(o.status.code(), Some(1), "{}", out(&o));
    assert!(out(&o).ends_with("NO-GO\n\n"), "{}", out(&o));
    let md = std::fs::read_to_string(t1.join("collect/sweep.md")).unwrap();
    assert!(
        md.contains("**Altered after its task passed:**") && md.contains("minilm-Q8_0.gguf"),
        "{md}"
    );
    refused_with(
        &sweep(&["task", "--index", "1"], &t1),
        "the receipt of quantize/minilm/Q8_0 says",
    );
    // collect writes only inside the sweep folder.
    let elsewhere = d.join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    std::fs::remove_dir_all(t1.join("collect")).unwrap();
    std::os::unix::fs::symlink(&elsewhere, t1.join("collect")).unwrap();
    refused_with(
        &sweep(&["collect"], &t1),
        "a symlink; collect writes only inside",
    );
    assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0);
    // Another task's receipt in a task folder.
    let t2 = d.join("t2");
    copy_tree(&good, &t2);
    std::fs::copy(
        t2.join("tasks/000-convert-minilm-F16/receipt.json"),
        t2.join("tasks/003-verify-minilm-Q8_0/receipt.json"),
    )
    .unwrap();
    refused_with(&sweep(&["status"], &t2), "index/id/kind");
    // plan.json edited by hand: a dependency out of range, a cycle, a task folder outside.
    for (name, edit, what) in [
        (
            "deps",
            serde_json::json!([[1, "deps"], [99]]),
            "deps: 99 is out of range",
        ),
        (
            "cycle",
            serde_json::json!([[0, "deps"], [1]]),
            "dependency cycle",
        ),
        (
            "dir",
            serde_json::json!([[0, "dir"], "../escape"]),
            "is not tasks/000-",
        ),
    ] {
        let t = d.join(name);
        copy_tree(&unrun, &t);
        edit_plan(&t, |p| {
            let i = edit[0][0].as_u64().unwrap() as usize;
            p["tasks"][i][edit[0][1].as_str().unwrap()] = edit[1].clone();
        });
        refused_with(&sweep(&["status"], &t), what);
        refused_with(&sweep(&["run"], &t), what);
    }
    // A file no input pins, added to a model folder after planning: convert refuses it.
    let t3 = d.join("t3");
    copy_tree(&unrun, &t3);
    std::fs::write(
        t3.join("inputs/minilm/chat_template.jinja"),
        "{{ \"INJECTED\" }}",
    )
    .unwrap();
    let o = sweep(&["run"], &t3);
    assert_eq!(o.status.code(), Some(1), "{}", out(&o));
    let r = receipt(&t3, &plan_json(&t3)["tasks"][0]).unwrap();
    assert_eq!(r["state"], "input-error");
    assert!(
        r["reason"]
            .as_str()
            .unwrap()
            .contains("inputs/minilm/chat_template.jinja: not an input of the plan"),
        "{r}"
    );
    // Nothing ran in either: not "the same".
    let o = sweep(&["compare", unrun.to_str().unwrap()], &unrun);
    assert_eq!(o.status.code(), Some(1), "{}", out(&o));
    // A matrix that plans nothing to verify is refused, not an empty GO.
    let bad = sweep_file(
        d,
        "q.toml",
        "ftypes = [\"F16\", \"Q8_0\"]\ntasks = [\"quantize\", \"verify\"]",
        MINILM,
        "",
    );
    refused_with(
        &plan(&bad, &d.join("q")),
        "matrix.tasks: quantize needs convert",
    );
}
