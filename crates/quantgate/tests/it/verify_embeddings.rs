//! Issue 3 acceptance on real inputs: all-MiniLM-L6-v2 (fetched by scripts/fetch-models.sh)
//! converted to F32/F16/Q8_0 and verified (GO, with measured cosines), vocab-only conversions
//! of every tokenizer fixture matching HF ids in llama.cpp on the built-in corpus plus every
//! line of wiki.test.raw, and broken GGUFs that must give NO-GO with the right blocker.

use crate::common;

use std::path::{Path, PathBuf};

use gguf::{Gguf, Value};
use quantgate::convert::OutType;
use quantgate::verify::{self, BlockerCode, Verdict, VerifyReport};

use common::{convert_to, fixtures_hf as fixtures};

fn minilm() -> PathBuf {
    common::hf("all-MiniLM-L6-v2")
}

fn run_verify(hf: &Path, gguf: &Path, protocol: Option<PathBuf>) -> VerifyReport {
    common::verify_with(hf, gguf, protocol)
}

#[test]
fn minilm_f32_f16_q8_0_verify_go() {
    let dir = tempfile::tempdir().unwrap();
    // (outtype, lowest min cosine accepted by this test: the values measured, rounded down)
    for (t, floor) in [
        (OutType::F32, 0.999997),
        (OutType::F16, 0.9999),
        (OutType::Q8_0, 0.995),
    ] {
        let out = dir.path().join(format!("m-{t:?}.gguf"));
        let c = convert_to(&minilm(), &out, t, false);
        assert_eq!(c.tensors.len(), 101);
        let r = run_verify(&minilm(), &out, None);
        assert_eq!(r.verdict, Verdict::Go, "{t:?}: {:?}", r.blockers);
        assert_eq!(r.gate1.bit_identical, 101, "{t:?}");
        assert_eq!(r.gate1.metadata_matching, r.gate1.metadata_keys);
        let v = r.gate2_vectors.as_ref().unwrap();
        assert!(v.min_cosine >= floor, "{t:?}: min cosine {}", v.min_cosine);
        assert_eq!(v.top1_identical, v.queries);
        assert_eq!((v.n_embd, v.llama_pooling), (384, 1));
        let tk = r.gate2_tokenizer.as_ref().unwrap();
        assert!(tk
            .matching_modes
            .iter()
            .any(|m| m.add_special && m.parse_special));
    }
}

#[test]
fn vocab_only_conversions_of_every_fixture_match_hf_ids() {
    let dir = tempfile::tempdir().unwrap();
    let wiki = common::wiki();
    let lines: Vec<String> = std::fs::read_to_string(&wiki)
        .unwrap()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(String::from)
        .collect();
    assert_eq!(lines.len(), 2891, "non-empty lines of wiki.test.raw");
    let mut texts: Vec<String> = verify::corpus::TOKENIZER_CORPUS
        .iter()
        .map(|s| s.to_string())
        .collect();
    texts.extend(lines);
    let names = [
        "Qwen3-Embedding-0.6B",
        "SmolLM2-135M-Instruct",
        "SmolLM2-360M-Instruct",
        "Qwen2.5-0.5B-Instruct",
        "Qwen3-0.6B",
        "bge-small-en-v1.5",
        "e5-small-v2",
    ];
    for name in names {
        let hf = fixtures().join(name);
        let out = dir.path().join(format!("{name}.gguf"));
        let c = convert_to(&hf, &out, OutType::F16, true);
        let g = Gguf::open(&out).unwrap();
        if name == "Qwen3-Embedding-0.6B" {
            // Its template appends <|endoftext|> (151643): add_eos_token must be true.
            assert_eq!(
                g.header.get("tokenizer.ggml.add_eos_token"),
                Some(&Value::Bool(true))
            );
            assert_eq!(
                g.header.get("tokenizer.ggml.eos_token_id"),
                Some(&Value::U32(151643))
            );
            assert_eq!(
                g.header.get("tokenizer.ggml.pre").and_then(Value::as_str),
                Some("qwen2")
            );
            assert!(
                c.notes.iter().any(|n| n.contains("<|im_end|>")),
                "{:?}",
                c.notes
            );
        }
        let tok = quantgate::source::tokenizer::load(&hf).unwrap();
        let model = llama_runtime::Model::load(&out, true).unwrap();
        let r = verify::tokenizer::check(&tok.tokenizer, &tok.json, &model, &texts).unwrap();
        assert!(
            !r.matching_modes.is_empty(),
            "{name}: {:?}",
            r.modes
                .iter()
                .map(|m| (m.matched, m.total, m.first_mismatch.clone()))
                .collect::<Vec<_>>()
        );
        assert!(r.texts >= 2920, "{name}: only {} texts gated", r.texts);
    }
}

/// Rewrites `src` into `dst` with `edit` applied to metadata and tensor data.
fn tamper(
    src: &Path,
    dst: &Path,
    edit: impl Fn(&str, &mut Value),
    edit_tensor: impl Fn(&str, &mut Vec<u8>),
    swap: Option<(&str, &str)>,
) {
    common::tamper_gguf(src, dst, edit, edit_tensor, swap)
}

fn has_blocker(r: &VerifyReport, code: BlockerCode, subject: &str) -> bool {
    r.blockers
        .iter()
        .any(|b| b.code == code && b.subject.contains(subject))
}

/// A correct F32 conversion of MiniLM in `dir`.
fn good_f32(dir: &Path) -> PathBuf {
    let good = dir.join("good.gguf");
    convert_to(&minilm(), &good, OutType::F32, false);
    good
}

/// Verifies `good` with the metadata key `key` set to `value`.
fn with_key(good: &Path, key: &'static str, value: Value) -> VerifyReport {
    let p = good.with_file_name(format!("{key}.gguf"));
    tamper(
        good,
        &p,
        |k, v| {
            if k == key {
                *v = value.clone()
            }
        },
        |_, _| {},
        None,
    );
    run_verify(&minilm(), &p, None)
}

#[test]
fn the_verifier_catches_tampered_metadata() {
    let dir = tempfile::tempdir().unwrap();
    let good = good_f32(dir.path());
    // add_eos_token flipped.
    let r = with_key(&good, "tokenizer.ggml.add_eos_token", Value::Bool(false));
    assert_eq!(r.verdict, Verdict::NoGo);
    assert!(
        has_blocker(
            &r,
            BlockerCode::MetadataMismatch,
            "tokenizer.ggml.add_eos_token"
        ),
        "{:?}",
        r.blockers
    );
    // A wrong tokenizer.ggml.pre.
    let r = with_key(&good, "tokenizer.ggml.pre", Value::string("gpt-2"));
    assert!(
        has_blocker(&r, BlockerCode::MetadataMismatch, "tokenizer.ggml.pre"),
        "{:?}",
        r.blockers
    );
    // Pooling type changed (mean → cls).
    let r = with_key(&good, "bert.pooling_type", Value::U32(2));
    assert!(
        has_blocker(&r, BlockerCode::MetadataMismatch, "bert.pooling_type"),
        "{:?}",
        r.blockers
    );
    assert!(
        has_blocker(&r, BlockerCode::VectorsPooling, "pooling_type"),
        "{:?}",
        r.blockers
    );
}

#[test]
fn the_verifier_catches_tampered_tensors() {
    let dir = tempfile::tempdir().unwrap();
    let good = good_f32(dir.path());
    let no_edit = |_: &str, _: &mut Value| {};
    // Two same-shaped tensors swapped.
    let p = dir.path().join("swap.gguf");
    tamper(
        &good,
        &p,
        no_edit,
        |_, _| {},
        Some(("blk.0.attn_q.weight", "blk.0.attn_k.weight")),
    );
    let r = run_verify(&minilm(), &p, None);
    assert!(
        has_blocker(&r, BlockerCode::TensorBits, "blk.0.attn_q.weight")
            && has_blocker(&r, BlockerCode::TensorBits, "blk.0.attn_k.weight"),
        "{:?}",
        r.blockers
    );
    // One value changed by one ulp.
    let p = dir.path().join("ulp.gguf");
    tamper(
        &good,
        &p,
        no_edit,
        |name, d| {
            if name == "blk.3.ffn_up.weight" {
                let v = u32::from_le_bytes([d[400], d[401], d[402], d[403]]) + 1;
                d[400..404].copy_from_slice(&v.to_le_bytes());
            }
        },
        None,
    );
    let r = run_verify(&minilm(), &p, None);
    assert_eq!(r.verdict, Verdict::NoGo);
    let b: Vec<_> = r
        .blockers
        .iter()
        .filter(|b| b.code == BlockerCode::TensorBits)
        .collect();
    assert_eq!(b.len(), 1, "{:?}", r.blockers);
    assert!(
        b[0].subject == "blk.3.ffn_up.weight" && b[0].detail.contains("at byte 400"),
        "{:?}",
        b
    );
}

#[test]
fn an_undeclared_threshold_is_no_go_and_a_complete_protocol_go() {
    let dir = tempfile::tempdir().unwrap();
    let good = good_f32(dir.path());
    let proto = dir.path().join("p.toml");
    std::fs::write(&proto, "[thresholds]\nmin_cosine = 0.99\n").unwrap();
    let r = run_verify(&minilm(), &good, Some(proto.clone()));
    assert_eq!(r.verdict, Verdict::NoGo);
    assert!(
        has_blocker(&r, BlockerCode::ThresholdUndeclared, "min_top1_agreement"),
        "{:?}",
        r.blockers
    );
    // The correct conversion with a complete protocol: GO.
    std::fs::write(
        &proto,
        "[thresholds]\nmin_cosine = 0.99\nmin_top1_agreement = 1.0\nmin_logits_cosine = 0.99\n\
         min_logits_top1_agreement = 0.95\nmax_mean_kld = 0.01\n",
    )
    .unwrap();
    let r = run_verify(&minilm(), &good, Some(proto));
    assert_eq!(r.verdict, Verdict::Go, "{:?}", r.blockers);
}

#[test]
fn gate3_hashes_the_release_and_cli_prints_go_last() {
    let dir = tempfile::tempdir().unwrap();
    let rel = dir.path().join("release");
    std::fs::create_dir_all(&rel).unwrap();
    let out = rel.join("minilm-f16.gguf");
    convert_to(&minilm(), &out, OutType::F16, false);
    std::fs::write(rel.join("README.md"), "release notes\n").unwrap();
    let verify_release = |report: &Path| {
        let o = common::qg()
            .args(["verify", "--hf"])
            .arg(minilm())
            .arg("--gguf")
            .arg(&out)
            .arg("--release")
            .arg(&rel)
            .arg("--report")
            .arg(report)
            .output()
            .unwrap();
        let r: serde_json::Value =
            serde_json::from_slice(&std::fs::read(report.join("report.json")).unwrap()).unwrap();
        (o, r)
    };
    // Without the folder's manifest, Gate 3 cannot say what ships: NO-GO naming SHA256SUMS.
    let (o, r) = verify_release(&dir.path().join("no-sums"));
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).lines().last(),
        Some("NO-GO")
    );
    let b = &r["blockers"][0];
    assert_eq!(
        (b["gate"].as_u64(), b["code"].as_str()),
        (Some(3), Some("release-sha256"))
    );
    assert_eq!(b["subject"], "SHA256SUMS");

    quantgate::release::sums::write(&rel).unwrap();
    let report = dir.path().join("report");
    let (o, r) = verify_release(&report);
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{stdout}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(stdout.lines().last(), Some("GO"));
    assert_eq!(r["gate3"]["files_hashed"], 2);
    let f = &r["gate3"]["files"][0];
    assert_eq!(f["name"], "minilm-f16.gguf");
    assert_eq!(f["same_bytes_as_verified"], true);
    assert_eq!(f["identical"], true);
    // One top-1 document per built-in retrieval query, re-measured on the folder's copy
    // (llama.cpp against llama.cpp: every query). Gate 2 compared 6 with the reference: MiniLM's
    // WordPiece tokenizes the 4 Korean queries and documents differently (Hangul), so they
    // are left out there.
    let n = quantgate::verify::corpus::RETRIEVAL_QUERIES.len() as u64;
    assert_eq!(f["remeasured"].as_u64(), Some(n));
    assert_eq!(
        r["gate2_vectors"]["llama_top1"]
            .as_array()
            .map(|a| a.len() as u64),
        Some(n - 4)
    );
    assert!(std::fs::read_to_string(report.join("report.md"))
        .unwrap()
        .starts_with("# quantgate verify: GO"));
    assert!(r["llama_cpp"]
        .as_str()
        .unwrap()
        .starts_with("llama-cpp-sys-2 =0.1.161"));
}

#[test]
fn gate3_refuses_a_release_whose_gguf_is_not_the_verified_file() {
    // The verified file is outside the folder; the folder ships other bytes (its last byte,
    // tensor data, flipped; SHA256SUMS written to match): listed and hashed, not verified.
    let dir = tempfile::tempdir().unwrap();
    let verified = dir.path().join("minilm-f16.gguf");
    convert_to(&minilm(), &verified, OutType::F16, false);
    let rel = dir.path().join("release");
    std::fs::create_dir_all(&rel).unwrap();
    let mut bytes = std::fs::read(&verified).unwrap();
    let at = bytes.len() - 1;
    bytes[at] ^= 1;
    std::fs::write(rel.join("minilm-f16.gguf"), &bytes).unwrap();
    quantgate::release::sums::write(&rel).unwrap();
    let r = verify::verify(&verify::VerifyOptions {
        hf_dir: minilm(),
        gguf: verified.clone(),
        texts: None,
        protocol: None,
        release: Some(rel.clone()),
        ppl_text: None,
        threads: quantgate::threads::Threads::DEFAULT,
        work_dir: None,
        imatrix: None,
    })
    .unwrap();
    assert_eq!(r.verdict, Verdict::NoGo);
    let codes: Vec<_> = r
        .blockers
        .iter()
        .map(|b| (b.gate, b.code.to_string()))
        .collect();
    assert!(
        codes.contains(&(3, "release-not-verified".to_string())),
        "{codes:?}"
    );
    assert!(r.blockers.iter().all(|b| b.gate == 3), "{:?}", r.blockers);
}

#[test]
fn convert_peak_rss_is_bounded_by_the_largest_tensor_not_the_model() {
    // Each conversion in a child process of its own: its peak RSS is its own (wait4).
    let dir = tempfile::tempdir().unwrap();
    let run = |extra: &[&str]| {
        let mut cmd = common::qg();
        cmd.arg("convert")
            .arg(minilm())
            .arg("-o")
            .arg(dir.path().join("m.gguf"))
            .args(extra);
        cmd.stdout(std::process::Stdio::null());
        let m = quantgate::child::run_measured(&mut cmd).unwrap();
        assert_eq!(m.exit_code, Some(0));
        m.max_rss_kib as f64 * 1024.0
    };
    let baseline = run(&["--vocab-only"]);
    let full = run(&["--outtype", "f32"]);
    let hf = quantgate::source::hf::HfDir::open(&minilm(), true).unwrap();
    let largest_f32 = hf.tensors.iter().map(|t| t.n_elements() * 4).max().unwrap() as f64;
    let model_bytes: f64 = hf.tensors.iter().map(|t| t.n_elements() as f64 * 4.0).sum();
    let delta = full - baseline;
    // The source bytes, their f32 values and the encoded output of one tensor at a time.
    assert!(
        delta <= 2.5 * largest_f32,
        "peak RSS grew by {delta} bytes; largest tensor {largest_f32}, model {model_bytes}"
    );
}
