//! Regression tests for what an adversarial review found: outputs that would overwrite an
//! input, settings that panicked or allocated without bound, endless reads of devices.
//! Each must be a clear error (exit 2) naming the file, with the input untouched.

use crate::common;

use std::path::Path;

/// Runs quantgate with `args`; returns (exit code, stderr).
fn qg(args: &[&str]) -> (Option<i32>, String) {
    let o = common::qg().args(args).output().unwrap();
    (
        o.status.code(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn outputs_never_overwrite_inputs() {
    let tmp = tempfile::tempdir().unwrap();
    let model = tmp.path().join("m.gguf");
    std::fs::copy(common::smollm2_q4_1(), &model).unwrap();
    let before = quantgate::hash::sha256_file(&model).unwrap();
    let wiki = common::wiki();
    // One chunk of 64 tokens, the output flag pointing at the model itself.
    let one_chunk = |sub: &'static str, out_flag: &'static str| -> Vec<&str> {
        let (m, w) = (s(&model), s(&wiki));
        vec![
            "eval", sub, m, "-f", w, "-c", "64", "--chunks", "1", out_flag, m,
        ]
    };
    let cases: Vec<Vec<&str>> = vec![
        vec!["quantize", s(&model), s(&model), "Q8_0"],
        one_chunk("ppl", "--json"),
        one_chunk("kld-base", "--out"),
    ];
    for args in &cases {
        let (code, err) = qg(args);
        assert_eq!(code, Some(2), "{args:?}: {err}");
        assert!(err.contains("output is the input"), "{args:?}: {err}");
    }
    assert_eq!(quantgate::hash::sha256_file(&model).unwrap(), before);
    // The Markdown twin of --json x.md would be x.md itself.
    let (code, err) = qg(&[
        "eval",
        "ppl",
        s(&model),
        "-f",
        s(&wiki),
        "--json",
        s(&tmp.path().join("r.md")),
    ]);
    assert_eq!(code, Some(2));
    assert!(err.contains("use a .json name"), "{err}");
    // convert -o onto one of the source folder's own files.
    let hf = tmp.path().join("hf");
    std::fs::create_dir(&hf).unwrap();
    let src = common::hf("all-MiniLM-L6-v2");
    for e in std::fs::read_dir(&src).unwrap().flatten() {
        if e.path().is_file() {
            std::fs::copy(e.path(), hf.join(e.file_name())).unwrap();
        }
    }
    let st = hf.join("model.safetensors");
    let before = quantgate::hash::sha256_file(&st).unwrap();
    let (code, err) = qg(&["convert", s(&hf), "-o", s(&st)]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("output is the input"), "{err}");
    assert_eq!(quantgate::hash::sha256_file(&st).unwrap(), before);
}

#[test]
fn degenerate_settings_are_usage_errors_not_panics() {
    let model = common::smollm2_q4_1();
    let wiki = common::wiki();
    let (m, w) = (s(&model), s(&wiki));
    for (args, needle) in [
        (
            vec!["eval", "ppl", m, "-f", w, "-c", "0", "--chunks", "1"],
            "context 0 tokens is outside 4 ..= 8192",
        ),
        (
            vec!["eval", "ppl", m, "-f", w, "-c", "1000000000"],
            "outside 4 ..= 8192",
        ),
        (
            vec!["eval", "ppl", m, "-f", w, "--chunks", "0"],
            "--chunks and --ubatch",
        ),
        (
            vec!["eval", "ppl", m, "-f", w, "-t", "0"],
            "0 threads: expected 1 to 512",
        ),
        (
            vec!["eval", "ppl", m, "-f", w, "-t", "513"],
            "513 threads: expected 1 to 512",
        ),
        (
            vec!["verify", "--hf", w, "--gguf", m, "--threads", "two"],
            "not a whole number of threads",
        ),
        (
            vec![
                "eval",
                "kld-base",
                m,
                "-f",
                w,
                "-c",
                "0",
                "--chunks",
                "1",
                "--out",
                "/tmp/never.logits",
            ],
            "outside 4",
        ),
        (
            vec!["eval", "bench", m, "-p", "0", "-n", "1000000000", "-r", "1"],
            "outside 4",
        ),
        (
            vec!["eval", "hellaswag", m, "-f", w, "--tasks", "0"],
            "--tasks 0",
        ),
        (vec!["protocol", "check", "/dev/zero"], "not a regular file"),
        (
            vec!["eval", "ppl", m, "-f", "/dev/zero"],
            "not a regular file",
        ),
    ] {
        let (code, err) = qg(&args);
        assert_eq!(code, Some(2), "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
    assert!(!Path::new("/tmp/never.logits").exists());
}
