//! Issue 31, item 5: the pinned image. `scripts/build-image.sh` builds it with buildah (chroot
//! isolation; its debootstrap base is cached outside the clone), then all-MiniLM-L6-v2's F16
//! conversion is verified on the host and inside the image (`buildah run --isolation chroot`
//! in a network namespace of its own, as the image's non-root user): both GO, the same verdict
//! and quality fields, and the report made in the image names the image's digest.

use crate::common;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

/// The report fields that must not depend on where verify ran (timings, costs and paths may):
/// compared as JSON values, exactly.
const SAME_FIELDS: &[&str] = &[
    "verdict",
    "blockers",
    "gate1",
    "gate2_tokenizer",
    "gate2_stress",
    "gate2_vectors",
    "gate2_logits",
    "gate2_logits_as_shipped",
    "quality",
    "thresholds",
    "thresholds_sha256",
    "llama_cpp",
    "llama_context",
];

/// Timings inside those fields, left out of the comparison (`gate2_vectors`' mean llama.cpp
/// time per text; the logits' `speed` is never serialized).
const TIMING_KEYS: &[&str] = &["llama_ms_per_text"];

/// `v` without the [`TIMING_KEYS`], at any depth.
fn without_timings(v: Option<&Value>) -> Option<Value> {
    fn strip(v: &mut Value) {
        match v {
            Value::Object(m) => {
                m.retain(|k, _| !TIMING_KEYS.contains(&k.as_str()));
                m.values_mut().for_each(strip);
            }
            Value::Array(a) => a.iter_mut().for_each(strip),
            _ => {}
        }
    }
    v.cloned().map(|mut v| {
        strip(&mut v);
        v
    })
}

/// The image's user (Containerfile `USER`).
const IMAGE_UID: u32 = 10001;

/// A buildah working container, removed when dropped (also when the test fails).
struct Container(String);

impl Drop for Container {
    fn drop(&mut self) {
        let _ = Command::new("buildah").args(["rm", &self.0]).output();
    }
}

fn buildah_present() {
    let ok = Command::new("buildah")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        ok,
        "buildah is missing: run scripts/setup.sh (it installs buildah and debootstrap)"
    );
}

/// Runs scripts/build-image.sh on the binary under test; returns the image digest it prints.
fn build_image() -> String {
    let t = std::time::Instant::now();
    let out = Command::new(common::repo().join("scripts/build-image.sh"))
        .env("QUANTGATE_BIN", env!("CARGO_BIN_EXE_quantgate"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "scripts/build-image.sh: {stderr}");
    eprintln!("{stderr}build-image.sh: {:.1} s", t.elapsed().as_secs_f64());
    let stdout = String::from_utf8_lossy(&out.stdout);
    let digest = stdout.lines().last().unwrap_or_default().to_string();
    assert!(
        quantgate::image::is_digest(&digest),
        "last line of build-image.sh is not a digest: {stdout:?}"
    );
    let recorded = std::fs::read_to_string(common::repo().join("out/image/digest")).unwrap();
    assert_eq!(recorded.trim(), digest, "out/image/digest");
    digest
}

/// Copies the HF folder `src` to `dst` (links followed: a link out of the folder would not
/// resolve inside the image), world-readable.
fn copy_readable(src: &Path, dst: &Path) {
    std::fs::create_dir_all(dst).unwrap();
    std::fs::set_permissions(dst, std::fs::Permissions::from_mode(0o755)).unwrap();
    for e in std::fs::read_dir(src).unwrap().flatten() {
        let (p, to) = (e.path(), dst.join(e.file_name()));
        if p.is_dir() {
            copy_readable(&p, &to);
        } else {
            std::fs::copy(&p, &to).unwrap();
            std::fs::set_permissions(&to, std::fs::Permissions::from_mode(0o644)).unwrap();
        }
    }
}

/// Asserts a verify run ended GO (exit 0, last stdout line `GO`).
fn assert_go(o: &Output, where_: &str) {
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success() && stdout.lines().last() == Some("GO"),
        "{where_}: exit {:?}, stdout {stdout}\nstderr {}",
        o.status.code(),
        String::from_utf8_lossy(&o.stderr)
    );
}

#[test]
fn verify_inside_the_pinned_image_gives_the_hosts_report() {
    buildah_present();
    let digest = build_image();

    let tmp = tempfile::tempdir().unwrap();
    let hf = tmp.path().join("hf");
    copy_readable(&common::hf("all-MiniLM-L6-v2"), &hf);
    let models = tmp.path().join("models");
    std::fs::create_dir(&models).unwrap();
    std::fs::set_permissions(&models, std::fs::Permissions::from_mode(0o755)).unwrap();
    let gguf = models.join("minilm-f16.gguf");
    let o = common::qg()
        .args(["convert", "--outtype", "f16", "-o"])
        .arg(&gguf)
        .arg(&hf)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    std::fs::set_permissions(&gguf, std::fs::Permissions::from_mode(0o644)).unwrap();

    // On the host.
    let t = std::time::Instant::now();
    let host_rep = tmp.path().join("host");
    let o = common::qg()
        .env_remove(quantgate::image::ENV)
        .args(["verify", "--hf"])
        .arg(&hf)
        .arg("--gguf")
        .arg(&gguf)
        .arg("--report")
        .arg(&host_rep)
        .output()
        .unwrap();
    assert_go(&o, "host");
    eprintln!("verify on the host: {:.1} s", t.elapsed().as_secs_f64());

    // In the image: the inputs read-only, the report folder the image's user may write, the
    // digest and the CPU variant passed in as a Job or an sbatch script passes them, and no
    // network (`--network none` is refused with chroot isolation; a namespace of its own is not).
    let out_dir = tmp.path().join("out");
    std::fs::create_dir(&out_dir).unwrap();
    std::os::unix::fs::chown(&out_dir, Some(IMAGE_UID), Some(IMAGE_UID)).unwrap();
    let o = Command::new("buildah")
        .args(["from", "--pull=never", "--quiet", &digest])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let ctr = Container(String::from_utf8_lossy(&o.stdout).trim().to_string());
    let vol =
        |host: &PathBuf, inside: &str, opt: &str| format!("{}:{inside}:{opt}", host.display());
    let t = std::time::Instant::now();
    let o = Command::new("unshare")
        .args(["--net", "--", "buildah", "run", "--isolation", "chroot"])
        .args(["-v", &vol(&hf, "/in/hf", "ro")])
        .args(["-v", &vol(&models, "/in/models", "ro")])
        .args(["-v", &vol(&out_dir, "/out", "rw")])
        .arg("--env")
        .arg(format!("{}={digest}", quantgate::image::ENV))
        .arg("--env")
        .arg(format!(
            "{}={}",
            llama_runtime::CPU_VARIANT_ENV,
            common::TEST_CPU_VARIANT
        ))
        .args([&ctr.0, "--", "quantgate", "verify"])
        .args(["--hf", "/in/hf", "--gguf", "/in/models/minilm-f16.gguf"])
        .args(["--report", "/out/report"])
        .output()
        .unwrap();
    assert_go(&o, "image");
    eprintln!("verify in the image: {:.1} s", t.elapsed().as_secs_f64());

    assert_same_reports(&host_rep, &out_dir.join("report"), &digest);
}

/// The report made in the image names `digest`, belongs to the image's user and has the host
/// report's quality fields and input hashes.
fn assert_same_reports(host_rep: &Path, image_rep: &Path, digest: &str) {
    let host = common::json(&host_rep.join("report.json"));
    let image_json = image_rep.join("report.json");
    let image = common::json(&image_json);
    assert_eq!(
        std::fs::metadata(&image_json).unwrap().uid(),
        IMAGE_UID,
        "the report made in the image is not the image user's"
    );
    assert_eq!(host.get("image_digest"), None, "host report names an image");
    assert_eq!(image["image_digest"], Value::String(digest.to_string()));
    let md = std::fs::read_to_string(image_rep.join("report.md")).unwrap();
    assert!(md.contains(&format!("- image {digest}")), "{md}");
    assert!(
        image["llama_cpp"]
            .as_str()
            .unwrap()
            .contains(common::TEST_CPU_VARIANT),
        "{}",
        image["llama_cpp"]
    );
    for f in SAME_FIELDS {
        assert_eq!(
            without_timings(host.get(*f)),
            without_timings(image.get(*f)),
            "report field {f} differs between the host and the image"
        );
    }
    // The same inputs, by hash (their paths differ).
    let hashes = |r: &Value| -> Vec<Value> {
        r["inputs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["sha256"].clone())
            .collect()
    };
    assert_eq!(hashes(&host), hashes(&image));
    assert_eq!(image["verdict"], "GO");
}
