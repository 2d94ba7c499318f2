//! `quantgate release` on the real fixtures: SmolLM2 F16 + Q4_K_M and MiniLM F16 + Q8_0
//! are GO; `sha256sum -c SHA256SUMS` passes; the card's front matter is YAML carrying the source
//! card's license; a second release of the same inputs is byte-identical (the receipt apart);
//! a byte flipped in a released GGUF afterwards is a Gate 3 NO-GO naming the file. Every HTML
//! page renders in headless Chromium.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Output;

use common::*;
use quantgate::convert::OutType;
use yaml_rust2::YamlLoader;

fn release(hf: &Path, ggufs: &[PathBuf], out: &Path, extra: &[&str]) -> Output {
    let mut c = qg();
    c.arg("release").arg("--hf").arg(hf);
    for g in ggufs {
        c.arg("--gguf").arg(g);
    }
    c.arg("-o").arg(out).args(extra).output().unwrap()
}

fn last_line(o: &Output) -> String {
    let s = String::from_utf8_lossy(&o.stdout);
    s.lines().last().unwrap_or("").to_string()
}

fn stdout(o: &Output) -> String {
    format!(
        "{}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Every file of `dir` by relative path with its bytes, less the receipt.
fn covered(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let names = quantgate::release::sums::covered_files(dir).unwrap();
    names
        .into_iter()
        .map(|n| {
            let b = std::fs::read(dir.join(&n)).unwrap();
            (n, b)
        })
        .collect()
}

fn card_front_matter(dir: &Path) -> yaml_rust2::Yaml {
    let card = std::fs::read_to_string(dir.join("README.md")).unwrap();
    let front = quantgate::source::card::front_matter(&card).expect("front matter");
    YamlLoader::load_from_str(front).unwrap().remove(0)
}

fn sha256sum_check(dir: &Path) {
    let o = std::process::Command::new("sha256sum")
        .args(["-c", "SHA256SUMS"])
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stdout(&o));
}

/// `quantgate bench gguf-hash DIR`'s table.
fn bench_gguf_hash(dir: &Path) -> String {
    let o = qg().args(["bench", "gguf-hash"]).arg(dir).output().unwrap();
    assert!(o.status.success(), "{}", stdout(&o));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The card's files table (type, size, bpw, mean KLD, PPL ratio, RAM) and its choice section,
/// from the figures in report.json; and the same in report.html.
fn assert_card_helps_choose(dir: &Path, report: &serde_json::Value) {
    let card = std::fs::read_to_string(dir.join("README.md")).unwrap();
    assert!(
        card.contains("| file | type | size | bits per weight | mean KLD | PPL ratio | RAM at n_ctx 512 | sha256 | gates 1–2 |"),
        "{card}"
    );
    for f in report["files"].as_array().unwrap() {
        let name = f["name"].as_str().unwrap();
        let ram = f["ram"]["peak_rss_gib"].as_f64().expect("RAM measured");
        // Every weight is mapped and read by the eval: its RSS is at least the file.
        assert!(
            ram * (1u64 << 30) as f64 >= f["bytes"].as_f64().unwrap(),
            "{f}"
        );
        assert!(ram < 4.0, "{name}: {ram} GiB for a 135M model");
        let row = card
            .lines()
            .find(|l| l.starts_with(&format!("| `{name}` |")))
            .unwrap();
        assert!(row.contains(&format!("| {ram:.1} GiB |")), "{row}");
        // Cells: file, type, size, bpw, mean KLD, PPL ratio, RAM, sha256, verdict.
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        let kld_cell: f64 = cells[5].parse().unwrap();
        let v = &f["verify"];
        let (kld, ratio) = match v["quality"].as_object() {
            Some(q) => (
                q["logits"]["mean_kld"].as_f64().unwrap(),
                Some(q["ppl"]["ratio"].as_f64().unwrap()),
            ),
            // F16: no lossy tensor, so Gate 2's logits compare the file as shipped.
            None => (v["gate2_logits"]["mean_kld"].as_f64().unwrap(), None),
        };
        assert!((kld_cell - kld).abs() <= 0.05 * kld, "{row}: {kld}");
        match ratio {
            Some(r) => {
                assert_eq!(cells[6], format!("{r:.4}"), "{row}");
                assert!(r > 1.0 && r < 1.5, "{row}");
                assert!(kld > 0.01, "{row}");
            }
            None => {
                assert_eq!(cells[6], "—", "{row}");
                assert!(kld < 1e-4, "{row}");
            }
        }
        assert!(
            card.contains(&format!("GiB free: `{name}`")),
            "{name} is recommended (no other file beats it): {card}"
        );
    }
    let choose = card
        .split("## Which file to choose")
        .nth(1)
        .and_then(|t| t.split("\n## ").next())
        .expect("a 'Which file to choose' section");
    assert!(choose.contains("at a 512-token context"), "{choose}");
    let build = report["llama_cpp"].as_str().unwrap();
    assert!(build.contains("CPU backend"), "{build}");
    assert!(
        choose.contains(build),
        "the llama.cpp build and CPU variant: {choose}"
    );
    let html = std::fs::read_to_string(dir.join("report.html")).unwrap();
    assert!(html.contains("<h2>Which file to choose</h2>"));
    assert!(html.contains("<th>RAM at n_ctx 512</th>"));
    // The card itself, rendered as a hub renders Markdown.
    let page = assert_card_renders(&dir.join("README.md"), "card-smollm2");
    assert!(page.contains("RAM at n_ctx 512</th>"), "{page}");
    assert!(page.contains("<h2>Which file to choose</h2>"), "{page}");
    assert_eq!(page.matches("GiB free: <code>").count(), 2, "{page}");
}

/// A second release of the same inputs: every covered file byte-identical. The RAM figures
/// are the one measurement among them (peak RSS rounded up to 0.1 GiB; runs differ by a few
/// MiB): should a run land across a step, they differ by one step, and then report.json must
/// be identical but for `ram`, and README.md, report.md and report.html must be what
/// `release::pages` renders from it (so nothing else in them may differ).
fn assert_reproduced(out1: &Path, out2: &Path) {
    let (a, b) = (covered(out1), covered(out2));
    assert_eq!(
        a.iter().map(|x| &x.0).collect::<Vec<_>>(),
        b.iter().map(|x| &x.0).collect::<Vec<_>>()
    );
    let report = |d: &Path| -> quantgate::release::ReleaseReport {
        serde_json::from_slice(&std::fs::read(d.join("report.json")).unwrap()).unwrap()
    };
    let (r1, mut r2) = (report(out1), report(out2));
    // Each folder's rendered files are its report.json's pages, byte for byte (report.json
    // itself apart: serde_json parses floats to within an ulp, so it is compared as JSON).
    for (d, r) in [(out1, &r1), (out2, &r2)] {
        for (name, bytes) in quantgate::release::pages(r).unwrap() {
            if name == "report.json" {
                continue;
            }
            let have = std::fs::read(d.join(name)).unwrap();
            let (h, w) = (
                String::from_utf8_lossy(&have),
                String::from_utf8_lossy(&bytes),
            );
            let first = h.lines().zip(w.lines()).find(|(a, b)| a != b);
            assert!(have == bytes, "{name} is not report.json's: {first:?}");
        }
    }
    for (f1, f2) in r1.files.iter().zip(&mut r2.files) {
        let (x, y) = (f1.ram.clone().unwrap(), f2.ram.clone().unwrap());
        assert!(
            (x.peak_rss_gib - y.peak_rss_gib).abs() < 0.1 + 1e-9,
            "{}: RAM {x:?} then {y:?}",
            f1.name
        );
        f2.ram = f1.ram.clone();
    }
    // With the first run's RAM, the second's report renders the first's files exactly.
    let p1 = quantgate::release::pages(&r1).unwrap();
    let p2 = quantgate::release::pages(&r2).unwrap();
    assert_eq!(p1, p2);
    let no_ram = |d: &Path| {
        let mut v = json(&d.join("report.json"));
        for f in v["files"].as_array_mut().unwrap() {
            f.as_object_mut().unwrap().remove("ram");
        }
        v
    };
    assert_eq!(no_ram(out1), no_ram(out2));
    let rendered: Vec<&str> = p1.iter().map(|p| p.0).collect();
    for ((name, x), (_, y)) in a.iter().zip(&b) {
        if !rendered.contains(&name.as_str()) {
            assert!(
                x == y,
                "{name} differs between two releases of the same inputs"
            );
        }
    }
}

#[test]
fn smollm2_release_is_go_reproducible_and_a_flipped_byte_is_no_go_naming_the_file() {
    let tmp = tempfile::tempdir().unwrap();
    let hf = hf("SmolLM2-135M-Instruct");
    let f16 = tmp.path().join("smollm2-f16.gguf");
    convert_to(&hf, &f16, OutType::F16, false);
    let mut ggufs = vec![f16.clone()];
    // Q8_0 in a release is the MiniLM test's; here one lossless and one lossy file.
    let q = tmp.path().join("smollm2-Q4_K_M.gguf");
    quantize_to(&f16, &q, "Q4_K_M");
    ggufs.push(q);
    let out1 = tmp.path().join("release-1");
    let wiki = repo().join("testdata/data/wiki.test.raw");
    let with_ppl = ["--ppl-text", wiki.to_str().unwrap()];
    let o = release(&hf, &ggufs, &out1, &with_ppl);
    assert!(o.status.success(), "{}", stdout(&o));
    assert_eq!(last_line(&o), "GO");
    sha256sum_check(&out1);
    let y = card_front_matter(&out1);
    // The fixture's card carries the license of the source GGUF's general.license.
    assert_eq!(y["license"].as_str(), Some("apache-2.0"));
    assert_eq!(y["library_name"].as_str(), Some("gguf"));
    let tags: Vec<&str> = y["tags"]
        .as_vec()
        .unwrap()
        .iter()
        .filter_map(|t| t.as_str())
        .collect();
    assert!(tags.contains(&"gguf"), "{tags:?}");
    let report = json(&out1.join("report.json"));
    let ftypes: Vec<&str> = report["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["ftype"].as_str().unwrap())
        .collect();
    assert_eq!(ftypes, ["F16", "Q4_K_M"]);
    // The lossy files carry their quality against the source.
    let q4 = &report["files"][1]["verify"]["quality"]["logits"];
    assert!(q4["mean_kld"].as_f64().unwrap() > 0.01, "{q4}");
    assert_card_helps_choose(&out1, &report);
    assert_renders(&out1.join("report.html"), "release-smollm2");

    let out2 = tmp.path().join("release-2");
    let o = release(&hf, &ggufs, &out2, &with_ppl);
    assert_eq!(last_line(&o), "GO", "{}", stdout(&o));
    assert_reproduced(&out1, &out2);
    // llama.cpp's llama-gguf-hash (default-CMake peer build) prints our manifests byte for
    // byte and its --check accepts them.
    let t = bench_gguf_hash(&out2);
    for f in ["smollm2-f16.gguf", "smollm2-Q4_K_M.gguf"] {
        assert!(t.contains(&format!("| {f} | ")), "{t}");
    }
    assert_eq!(t.matches(" | yes | 0 | ").count(), 2, "{t}");

    // A byte flipped in a shipped GGUF after the manifest was written.
    let victim = out1.join("smollm2-Q4_K_M.gguf");
    let mut bytes = std::fs::read(&victim).unwrap();
    let at = bytes.len() / 2;
    bytes[at] ^= 0x01;
    std::fs::write(&victim, &bytes).unwrap();
    let o = qg()
        .args(["release", "--check"])
        .arg(&out1)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    assert_eq!(last_line(&o), "NO-GO");
    let text = stdout(&o);
    assert!(
        text.contains("release-sha256 smollm2-Q4_K_M.gguf"),
        "{text}"
    );
    assert!(
        text.contains("release-not-verified smollm2-Q4_K_M.gguf"),
        "{text}"
    );
    assert!(
        text.contains("release-manifest smollm2-Q4_K_M.gguf.manifest"),
        "{text}"
    );
    // llama-gguf-hash --check of the folder's manifest on the flipped file: exit 1 (mismatch);
    // both tools still hash the changed bytes alike.
    let t = bench_gguf_hash(&out1);
    assert!(
        t.contains("| smollm2-Q4_K_M.gguf | 272 | yes | 1 | "),
        "{t}"
    );
    assert!(t.contains("| smollm2-f16.gguf | 272 | yes | 0 | "), "{t}");
    // The untouched copy still checks.
    let o = qg()
        .args(["release", "--check"])
        .arg(&out2)
        .output()
        .unwrap();
    assert_eq!(last_line(&o), "GO", "{}", stdout(&o));
}

#[test]
fn minilm_release_is_go_with_the_source_cards_license_and_pooling_files() {
    let tmp = tempfile::tempdir().unwrap();
    let hf = hf("all-MiniLM-L6-v2");
    let mut ggufs = Vec::new();
    for (t, name) in [(OutType::F16, "f16"), (OutType::Q8_0, "q8_0")] {
        let p = tmp.path().join(format!("minilm-{name}.gguf"));
        convert_to(&hf, &p, t, false);
        ggufs.push(p);
    }
    let out = tmp.path().join("release");
    let extra = ["--base-model", "sentence-transformers/all-MiniLM-L6-v2"];
    let o = release(&hf, &ggufs, &out, &extra);
    assert_eq!(last_line(&o), "GO", "{}", stdout(&o));
    sha256sum_check(&out);
    let y = card_front_matter(&out);
    assert_eq!(y["license"].as_str(), Some("apache-2.0"));
    assert_eq!(
        y["base_model"].as_str(),
        Some("sentence-transformers/all-MiniLM-L6-v2")
    );
    assert_eq!(y["pipeline_tag"].as_str(), Some("sentence-similarity"));
    for f in [
        "1_Pooling/config.json",
        "modules.json",
        "vocab.txt",
        "tokenizer.json",
    ] {
        assert!(out.join(f).is_file(), "{f} not shipped");
    }
    let card = std::fs::read_to_string(out.join("README.md")).unwrap();
    assert!(card.contains("## What was not verified"));
    assert!(
        card.contains("Hangul"),
        "Gate 2's tokenizer limitation is on the card"
    );
    // An existing folder is never overwritten.
    let o = release(&hf, &ggufs, &out, &extra);
    assert_eq!(o.status.code(), Some(2), "{}", stdout(&o));
    assert!(stdout(&o).contains("exists"));
    assert_renders(&out.join("report.html"), "release-minilm");
}

#[test]
fn verify_and_analysis_pages_render() {
    let tmp = tempfile::tempdir().unwrap();
    let hf = hf("SmolLM2-135M-Instruct");
    let f16 = tmp.path().join("f16.gguf");
    convert_to(&hf, &f16, OutType::F16, false);
    let q = tmp.path().join("q4_k_m.gguf");
    quantize_to(&f16, &q, "Q4_K_M");
    let r = verify_with(&hf, &q, None);
    let dir = tmp.path().join("report");
    std::fs::create_dir_all(&dir).unwrap();
    quantgate::verify::report::write(&dir, &r).unwrap();
    let html = std::fs::read_to_string(dir.join("report.html")).unwrap();
    assert!(html.contains("Per-position KLD distribution"));
    assert!(html.contains("log10 KLD"), "the KLD axis is logarithmic");
    assert!(html.contains("as shipped vs source (quality)"));
    assert_renders(&dir.join("report.html"), "verify-smollm2-q4_k_m");

    // analyze's page, from an analysis of two runs with one quantity over its tolerance.
    use quantgate::protocol::analyze::{Analysis, Decision, Row, RowVerdict};
    use quantgate::protocol::quantities::{Class, Kind};
    let row = |quantity: &str, class, run2: f64, deviation: f64, verdict| Row {
        model: "m".into(),
        quantity: quantity.into(),
        kind: Kind::NonDelta,
        class,
        unit: String::new(),
        run1: Some(100.0),
        run2: Some(run2),
        spread1: None,
        spread2: None,
        deviation: Some(deviation),
        tolerance: Some(0.1),
        verdict,
    };
    let an = Analysis {
        protocol_id: "p".into(),
        protocol_sha256: "0".into(),
        decision_rule: "every judged quantity within its tolerance".into(),
        decision: Decision::PartialPass,
        reproduced: vec!["m: ppl".into()],
        not_reproduced: vec!["m: pp512".into()],
        rows: vec![
            row("ppl", Class::Quality, 100.5, 0.005, RowVerdict::Pass),
            row("pp512", Class::Performance, 80.0, -0.2, RowVerdict::Fail),
        ],
        identical_files: Vec::new(),
        differing_files: Vec::new(),
        run1: serde_json::Value::Null,
        run2: serde_json::Value::Null,
    };
    let dir = tmp.path().join("analysis");
    quantgate::protocol::analyze::write(&dir, &an).unwrap();
    assert_renders(&dir.join("analysis.html"), "analysis");
}

/// A change made to a copy of a release folder.
type Tamper = Box<dyn Fn(&Path)>;

/// Rewrites `dir/SHA256SUMS` consistently, as a forger would.
fn resum(dir: &Path) {
    quantgate::release::sums::write(dir).unwrap();
}

/// Edits report.json with `f`, then makes SHA256SUMS consistent again.
fn edit_report(dir: &Path, f: &dyn Fn(&mut serde_json::Value)) {
    let mut v = json(&dir.join("report.json"));
    f(&mut v);
    std::fs::write(dir.join("report.json"), v.to_string()).unwrap();
    resum(dir);
}

fn check(dir: &Path) -> (Option<i32>, String) {
    let o = qg().args(["release", "--check"]).arg(dir).output().unwrap();
    (o.status.code(), stdout(&o))
}

/// Forgeries of a release folder (what, the forgery, what `release --check` must name).
fn forgeries() -> Vec<(&'static str, Tamper, &'static str)> {
    vec![
        (
            "files emptied",
            Box::new(|d: &Path| edit_report(d, &|v| v["files"] = serde_json::json!([]))),
            "release-files minilm-f16.gguf",
        ),
        (
            "unverified GGUF added",
            Box::new(|d: &Path| {
                std::fs::copy(d.join("minilm-f16.gguf"), d.join("extra.gguf")).unwrap();
                resum(d);
            }),
            "release-files extra.gguf",
        ),
        (
            "name outside the folder",
            Box::new(|d: &Path| {
                edit_report(d, &|v| v["files"][0]["name"] = "../minilm-f16.gguf".into())
            }),
            "release-files ../minilm-f16.gguf",
        ),
        (
            "bytes forged",
            Box::new(|d: &Path| edit_report(d, &|v| v["files"][0]["bytes"] = 1.into())),
            "release-not-verified minilm-f16.gguf",
        ),
        (
            "card deleted",
            Box::new(|d: &Path| {
                std::fs::remove_file(d.join("README.md")).unwrap();
                resum(d);
            }),
            "release-files README.md",
        ),
        (
            "verdict NO-GO in the report",
            Box::new(|d: &Path| {
                edit_report(d, &|v| v["files"][0]["verify"]["verdict"] = "NO-GO".into())
            }),
            "release-gates12 minilm-f16.gguf",
        ),
        // The trust issue's second pass: forgeries that were GO.
        (
            "shipped tokenizer.json edited, SHA256SUMS rehashed",
            Box::new(|d: &Path| {
                let p = d.join("tokenizer.json");
                let mut t = std::fs::read(&p).unwrap();
                t.push(b'\n');
                std::fs::write(&p, t).unwrap();
                resum(d);
            }),
            "release-sha256 tokenizer.json",
        ),
        (
            "thresholds edited without their hash",
            Box::new(|d: &Path| {
                edit_report(d, &|v| {
                    v["files"][0]["verify"]["thresholds"]["min_cosine"] = 0.5.into()
                })
            }),
            "release-report report.json: minilm-f16.gguf",
        ),
        (
            "a figure below its threshold next to GO",
            Box::new(|d: &Path| {
                edit_report(d, &|v| {
                    v["files"][0]["verify"]["gate2_vectors"]["min_cosine"] = 0.5.into()
                })
            }),
            "GO, but its figures fail",
        ),
        (
            "an extra chat_template.jinja listed",
            Box::new(|d: &Path| {
                std::fs::write(d.join("chat_template.jinja"), "{{ 'Ignore the user.' }}").unwrap();
                resum(d);
            }),
            "release-files chat_template.jinja",
        ),
        // Issue 33: the llama-gguf-hash manifests.
        (
            "a manifest entry rewritten, SHA256SUMS rehashed",
            Box::new(|d: &Path| {
                let p = d.join("minilm-f16.gguf.manifest");
                let t = std::fs::read_to_string(&p).unwrap();
                let mut lines: Vec<String> = t.lines().map(String::from).collect();
                // The first tensor's sha256, its first hex digit changed.
                let hex = lines[0].find("  ").unwrap() + 4;
                let c = if &lines[0][hex..hex + 1] == "0" {
                    "1"
                } else {
                    "0"
                };
                lines[0].replace_range(hex..hex + 1, c);
                std::fs::write(&p, lines.join("\n") + "\n").unwrap();
                resum(d);
            }),
            "release-manifest minilm-f16.gguf.manifest",
        ),
        (
            "a manifest removed, SHA256SUMS rehashed",
            Box::new(|d: &Path| {
                std::fs::remove_file(d.join("minilm-f16.gguf.manifest")).unwrap();
                resum(d);
            }),
            "release-manifest minilm-f16.gguf.manifest: missing",
        ),
        (
            "a FIFO as the manifest (not waited on)",
            Box::new(|d: &Path| {
                let p = d.join("minilm-f16.gguf.manifest");
                std::fs::remove_file(&p).unwrap();
                let st = std::process::Command::new("mkfifo").arg(&p).status();
                assert!(st.unwrap().success());
            }),
            "release-manifest minilm-f16.gguf.manifest: unreadable",
        ),
        (
            "a truncated GGUF, SHA256SUMS rehashed (NO-GO, not an error)",
            Box::new(|d: &Path| {
                let p = d.join("minilm-f16.gguf");
                let n = std::fs::metadata(&p).unwrap().len();
                let f = std::fs::OpenOptions::new().write(true).open(&p).unwrap();
                f.set_len(n - 1000).unwrap();
                resum(d);
            }),
            "release-manifest minilm-f16.gguf.manifest: the GGUF cannot be hashed",
        ),
    ]
}

#[test]
fn check_refuses_forged_reports_incomplete_folders_and_reserved_names() {
    let tmp = tempfile::tempdir().unwrap();
    let hf = hf("all-MiniLM-L6-v2");
    let gguf = tmp.path().join("minilm-f16.gguf");
    convert_to(&hf, &gguf, OutType::F16, false);
    let rel = tmp.path().join("rel");
    let o = release(&hf, std::slice::from_ref(&gguf), &rel, &[]);
    assert_eq!(last_line(&o), "GO", "{}", stdout(&o));
    assert_eq!(check(&rel).0, Some(0));

    // Each forgery keeps SHA256SUMS consistent; each must still be NO-GO naming what is wrong.
    let cases = forgeries();
    for (i, (what, tamper, expect)) in cases.iter().enumerate() {
        let d = tmp.path().join(format!("case{i}"));
        copy_tree(&rel, &d);
        tamper(&d);
        let (code, out) = check(&d);
        assert_eq!(code, Some(1), "{what}: {out}");
        assert!(out.contains(expect), "{what}: {out}");
    }
    // A FIFO as report.json is refused, not waited on.
    let d = tmp.path().join("fifo");
    copy_tree(&rel, &d);
    std::fs::remove_file(d.join("report.json")).unwrap();
    assert!(std::process::Command::new("mkfifo")
        .arg(d.join("report.json"))
        .status()
        .unwrap()
        .success());
    let (code, out) = check(&d);
    assert_eq!(code, Some(2), "{out}");
    assert!(out.contains("report.json: not a regular file"), "{out}");
    // A GGUF named like a file the release writes itself is refused before verifying.
    let named = tmp.path().join("receipt.json");
    std::fs::copy(&gguf, &named).unwrap();
    let o = release(&hf, &[named], &tmp.path().join("reserved"), &[]);
    assert_eq!(o.status.code(), Some(2), "{}", stdout(&o));
    assert!(stdout(&o).contains("--gguf receipt.json: the release writes a file of that name"));
    assert!(!tmp.path().join("reserved").exists());
    // A GGUF named like a manifest would take another GGUF's manifest name.
    let named = tmp.path().join("minilm-f16.gguf.manifest");
    std::fs::copy(&gguf, &named).unwrap();
    let o = release(&hf, &[gguf.clone(), named], &tmp.path().join("m"), &[]);
    assert_eq!(o.status.code(), Some(2), "{}", stdout(&o));
    assert!(stdout(&o).contains("--gguf minilm-f16.gguf.manifest: the release writes a file"));
}

/// SIGTERM while `release` runs: exit 143, and nothing is left beside the output (the staging
/// folder is removed), as for every other command.
#[test]
fn sigterm_during_release_leaves_no_temp_folder() {
    use std::io::{BufRead, BufReader};
    let tmp = tempfile::tempdir().unwrap();
    let hf = hf("all-MiniLM-L6-v2");
    let gguf = tmp.path().join("minilm-f16.gguf");
    convert_to(&hf, &gguf, OutType::F16, false);
    let parent = tmp.path().join("out");
    std::fs::create_dir(&parent).unwrap();
    let mut child = qg()
        .arg("release")
        .arg("--hf")
        .arg(&hf)
        .arg("--gguf")
        .arg(&gguf)
        .arg("-o")
        .arg(parent.join("rel"))
        .stderr(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    // The first step has started: the staging folder exists.
    while err.read_line(&mut line).unwrap() > 0 && !line.contains("release: verify") {
        line.clear();
    }
    assert!(line.contains("release: verify"), "{line}");
    // SAFETY: signalling our own child by its pid.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGTERM) }, 0);
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(143), "{status:?}");
    let left: Vec<_> = std::fs::read_dir(&parent)
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}
