//! Signed releases (issue 33): `release --sign KEY` writes `model.sig` in the OpenSSF
//! model-signing v1.0 format and `release --check DIR --trust PUBKEY` checks it before
//! anything else. Interop both ways with the `model-signing` library (1.1.1, hash-pinned by
//! scripts/model-signing.sh), and the tamper matrix on MiniLM's F16 + Q8_0 release. Keys are
//! made by `openssl` as a publisher would make them.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::common::*;
use quantgate::convert::OutType;

fn run(c: &mut Command) -> Output {
    c.output().unwrap()
}

fn text(o: &Output) -> String {
    format!(
        "{}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// An ECDSA P-256 key pair (`openssl ecparam -genkey`, SEC1 PEM; public key as SPKI PEM).
fn keypair(dir: &Path, name: &str) -> (PathBuf, PathBuf) {
    let (k, p) = (
        dir.join(format!("{name}.pem")),
        dir.join(format!("{name}.pub")),
    );
    let o = run(Command::new("openssl")
        .args([
            "ecparam",
            "-name",
            "prime256v1",
            "-genkey",
            "-noout",
            "-out",
        ])
        .arg(&k));
    assert!(o.status.success(), "{}", text(&o));
    let o = run(Command::new("openssl")
        .args(["ec", "-pubout", "-in"])
        .arg(&k)
        .arg("-out")
        .arg(&p));
    assert!(o.status.success(), "{}", text(&o));
    (k, p)
}

fn library_verify(dir: &Path, public: &Path) -> Output {
    run(Command::new(model_signing())
        .args(["verify", "key"])
        .arg(dir)
        .arg("--signature")
        .arg(dir.join("model.sig"))
        .arg("--public_key")
        .arg(public))
}

fn check(dir: &Path, trust: Option<&Path>) -> (String, String) {
    let mut c = qg();
    c.args(["release", "--check"]).arg(dir);
    if let Some(t) = trust {
        c.arg("--trust").arg(t);
    }
    let o = run(&mut c);
    let s = text(&o);
    let last = String::from_utf8_lossy(&o.stdout)
        .lines()
        .last()
        .unwrap_or("")
        .to_string();
    (last, s)
}

#[test]
fn signed_release_interops_with_model_signing_and_tampering_is_no_go_naming_it() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let (key, public) = keypair(t, "publisher");
    let (other_key, other_public) = keypair(t, "other");
    let hf = hf("all-MiniLM-L6-v2");
    let mut ggufs = Vec::new();
    for (ty, name) in [(OutType::F16, "f16"), (OutType::Q8_0, "q8_0")] {
        let p = t.join(format!("minilm-{name}.gguf"));
        convert_to(&hf, &p, ty, false);
        ggufs.push(p);
    }
    let out = t.join("release");
    let mut c = qg();
    c.arg("release").arg("--hf").arg(&hf).arg("-o").arg(&out);
    for g in &ggufs {
        c.arg("--gguf").arg(g);
    }
    let o = run(c.arg("--sign").arg(&key));
    assert!(o.status.success(), "{}", text(&o));
    assert!(out.join("model.sig").is_file());
    let sums = std::fs::read_to_string(out.join("SHA256SUMS")).unwrap();
    assert!(!sums.contains("model.sig") && !sums.contains("receipt.json"));
    let card = std::fs::read_to_string(out.join("README.md")).unwrap();
    let fp = quantgate::release::sign::fingerprint(
        &quantgate::release::sign::verifying_key(&public).unwrap(),
    )
    .unwrap()
    .fingerprint;
    assert!(card.contains(&fp), "the card names the key's fingerprint");
    assert!(card.contains("model_signing verify key . --signature model.sig"));

    // Ours, checked by the library and by quantgate.
    let o = library_verify(&out, &public);
    assert!(o.status.success(), "model_signing verify: {}", text(&o));
    let (last, s) = check(&out, Some(&public));
    assert_eq!(last, "GO", "{s}");
    assert!(s.contains("provenance: signed by the trusted key"), "{s}");
    // Without --trust the report says plainly that provenance was not checked.
    let (last, s) = check(&out, None);
    assert_eq!(last, "GO", "{s}");
    assert!(s.contains("provenance: not checked"), "{s}");

    // The library's signature over the same folder, checked by quantgate.
    let lib = copy_tree(&out, &t.join("library-signed"));
    std::fs::remove_file(lib.join("model.sig")).unwrap();
    let o = run(Command::new(model_signing())
        .args(["sign", "key"])
        .arg(&lib)
        .arg("--private_key")
        .arg(&other_key)
        .arg("--signature")
        .arg(lib.join("model.sig"))
        .arg("--ignore-paths")
        .arg(lib.join("SHA256SUMS"))
        .arg("--ignore-paths")
        .arg(lib.join("receipt.json")));
    assert!(o.status.success(), "model_signing sign: {}", text(&o));
    let (last, s) = check(&lib, Some(&other_public));
    assert_eq!(last, "GO", "the library's model.sig: {s}");

    // The tamper matrix: each NO-GO with --trust, naming the cause.
    type Tamper = Box<dyn Fn(&Path)>;
    let resum = |d: &Path| {
        quantgate::release::sums::write(d).unwrap();
    };
    let cases: Vec<(&str, Tamper, &str)> = vec![
        (
            "flipped GGUF byte",
            Box::new(move |d: &Path| {
                let p = d.join("minilm-q8_0.gguf");
                let mut b = std::fs::read(&p).unwrap();
                let n = b.len() - 100;
                b[n] ^= 0x01;
                std::fs::write(&p, b).unwrap();
                resum(d);
            }),
            "minilm-q8_0.gguf: sha256 differs from the signed digest",
        ),
        (
            "zeroed tensors with report.json and SHA256SUMS rewritten",
            Box::new(move |d: &Path| {
                let p = d.join("minilm-q8_0.gguf");
                let mut b = std::fs::read(&p).unwrap();
                let n = b.len();
                b[n / 2..].fill(0);
                std::fs::write(&p, &b).unwrap();
                let h = quantgate::hash::sha256_file(&p).unwrap();
                let r = d.join("report.json");
                let mut v = json(&r);
                v["files"][1]["sha256"] = serde_json::json!(h);
                std::fs::write(&r, v.to_string()).unwrap();
                resum(d);
            }),
            "report.json: sha256 differs from the signed digest",
        ),
        (
            "model.sig removed",
            Box::new(|d: &Path| std::fs::remove_file(d.join("model.sig")).unwrap()),
            "model.sig is missing",
        ),
        (
            "signed by another key",
            Box::new(|d: &Path| {
                std::fs::copy(
                    d.parent().unwrap().join("library-signed/model.sig"),
                    d.join("model.sig"),
                )
                .unwrap();
            }),
            "was made with another key",
        ),
        (
            "file added",
            Box::new(move |d: &Path| {
                std::fs::write(d.join("notes.txt"), "added after signing\n").unwrap();
                resum(d);
            }),
            "notes.txt: present, but the signature does not cover it",
        ),
    ];
    for (i, (what, tamper, names)) in cases.iter().enumerate() {
        let d = copy_tree(&out, &t.join(format!("tampered-{i}")));
        tamper(&d);
        let (last, s) = check(&d, Some(&public));
        assert_eq!(last, "NO-GO", "{what}: {s}");
        assert!(s.contains("release-signature"), "{what}: {s}");
        assert!(s.contains(names), "{what}: must name {names:?}: {s}");
    }
}
