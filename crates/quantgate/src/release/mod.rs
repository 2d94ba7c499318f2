//! `quantgate release`: verify each GGUF against its HF source, assemble a release folder (the
//! GGUFs with a `llama-gguf-hash` manifest each, the source's license/config/tokenizer files, a
//! model card, report.json/.md/.html and `SHA256SUMS`), then Gate 3 on the folder's own bytes. One verdict for the package.
//!
//! Everything `SHA256SUMS` covers is a function of the inputs and of one measurement, each
//! file's RAM ([`ram`]: peak RSS rounded up to 0.1 GiB, which repeats unless a run lands across
//! a step): the same inputs give a byte-identical folder. What differs between runs (timestamps, timings, the folder's own
//! path) goes only into [`RECEIPT`], which the manifest does not cover.
//!
//! Gate 3 ([`gate3`]): the one Gate 3 of `verify::gate3` (`SHA256SUMS` re-checked as
//! `sha256sum -c` would; each released GGUF the bytes `verify` judged; llama.cpp's outputs
//! re-measured from the folder's copy identical to the verified input's), plus what a release
//! folder must hold by its report.json (`structure`, `consistency`).

pub mod card;
pub mod choose;
pub mod consistency;
mod html;
pub mod manifest;
pub mod ram;
pub mod sign;

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use crate::source::shipped;
use crate::threads::Threads;
pub use crate::verify::gate3::sums::{self, RECEIPT};
use crate::verify::gate3::{self, plain_name, Shipped};
pub use crate::verify::gate3::{fingerprint, Gate3, Gate3File};
use crate::verify::{self, Blocker, BlockerCode, Verdict, VerifyOptions, VerifyReport};
use fingerprint::Fingerprint;

/// The machine-readable report of a release folder.
pub const REPORT_JSON: &str = "report.json";
/// Largest report.json `release --check` reads (a three-file release's is ~1 MB).
const REPORT_MAX_BYTES: u64 = 256 << 20;

/// What to release.
#[derive(Clone, Debug)]
pub struct ReleaseOptions {
    /// The HF source folder every GGUF was made from.
    pub hf_dir: PathBuf,
    /// The GGUFs to ship (file names must differ).
    pub ggufs: Vec<PathBuf>,
    /// The release folder to create (must not exist).
    pub out: PathBuf,
    /// Protocol declaring thresholds and quality budgets.
    pub protocol: Option<PathBuf>,
    /// Text for the quality section's PPL (e.g. wiki.test.raw).
    pub ppl_text: Option<PathBuf>,
    /// The source's hub id for the card's `base_model` (e.g. `HuggingFaceTB/SmolLM2-135M-Instruct`).
    pub base_model: Option<String>,
    /// llama.cpp threads (fixed: llama.cpp's outputs are reproducible for one thread count).
    pub threads: Threads,
    /// The importance matrix of the files with `quantize.imatrix.*` keys (verify `--imatrix`
    /// for those files only; the others were made without one).
    pub imatrix: Option<PathBuf>,
    /// ECDSA P-256 private key (PEM): the folder is signed as `model.sig` ([`sign`]).
    pub sign: Option<PathBuf>,
}

/// One shipped GGUF.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ReleasedFile {
    /// File name in the release folder.
    pub name: String,
    /// llama.cpp file type name from `general.file_type` (`Q4_K_M`, `F16`, …).
    pub ftype: String,
    /// File size, bytes.
    pub bytes: u64,
    /// Tensor data bits per weight: 8 × tensor bytes / elements, over every tensor.
    pub bits_per_weight: f64,
    /// sha256 of the bytes `verify` judged (and that ship).
    pub sha256: String,
    /// The gates 1–2 and quality result on those bytes (timings removed).
    pub verify: VerifyReport,
    /// llama.cpp's outputs on the verified file, which Gate 3 re-measures.
    pub fingerprint: Fingerprint,
    /// The RAM it needs at the quality PPL's context ([`ram`]); measured for causal LMs when
    /// a PPL text is given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ram: Option<ram::Ram>,
}

/// The release report (`report.json`): reproducible from the inputs.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ReleaseReport {
    /// GO iff every file's verify is GO (Gate 3 is in the receipt and the command's verdict).
    pub gates_1_2: Verdict,
    /// quantgate version and the llama.cpp pin with its CPU backend.
    pub quantgate: String,
    pub llama_cpp: String,
    /// The container image's digest when built in one ([`crate::image`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_digest: Option<String>,
    /// llama.cpp threads of every measurement.
    pub threads: Threads,
    /// The source folder's name, and its hub id if given.
    pub source: String,
    pub base_model: Option<String>,
    /// The source card's front matter as carried.
    pub card_meta: shipped::CardMeta,
    /// Source files shipped, relative paths.
    pub source_files: Vec<String>,
    /// The shipped GGUFs, in the order given.
    pub files: Vec<ReleasedFile>,
    /// The command that reproduces the folder.
    pub command: String,
    /// The key that signs the folder (`model.sig`), when `--sign` was given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signed_by: Option<sign::KeyId>,
}

/// A release run: the report written into the folder, Gate 3 and the package verdict.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ReleaseRun {
    /// GO iff gates 1–2 are GO for every file and Gate 3 has no blocker.
    pub verdict: Verdict,
    /// Every blocker, the files' prefixed with the file name.
    pub blockers: Vec<Blocker>,
    /// What was written as report.json.
    pub report: ReleaseReport,
    /// Gate 3 on the folder before it was renamed into place.
    pub gate3: Gate3,
    /// The folder written.
    pub out: PathBuf,
}

/// Builds the release folder `opts.out` and runs Gate 3 on it; `on_step` hears each step.
///
/// Errors: `out` exists, no GGUF or two with one name, an input that cannot be read, verify
/// failing to run (not a NO-GO), or a write failure. The folder is assembled beside `out` and
/// renamed only when complete and hashed; on error nothing is left at `out`.
pub fn release(opts: &ReleaseOptions, on_step: &mut dyn FnMut(&str)) -> Result<ReleaseRun> {
    check_options(opts)?;
    // A key that cannot sign is refused before anything is verified.
    if let Some(k) = &opts.sign {
        sign::signing_key(k)?;
    }
    let parent = match opts.out.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    std::fs::create_dir_all(&parent).with_context(|| format!("{}", parent.display()))?;
    let staging = tempfile::Builder::new()
        .prefix(".quantgate-release-")
        .tempdir_in(&parent)
        .with_context(|| format!("{}: cannot create a temp folder", parent.display()))?;
    let mut files = Vec::new();
    let mut timings = serde_json::Map::new();
    for g in &opts.ggufs {
        crate::interrupt::check()?;
        on_step(&format!("verify {}", g.display()));
        let t0 = std::time::Instant::now();
        let (file, ms, rss_kib) = verify_one(opts, g)?;
        timings.insert(
            file.name.clone(),
            serde_json::json!({
                "verify_s": t0.elapsed().as_secs_f64(),
                "llama_ms_per_text": ms,
                "ram_peak_rss_kib": rss_kib,
            }),
        );
        files.push(file);
    }
    crate::interrupt::check()?;
    on_step("assemble");
    let report = assemble(opts, staging.path(), files)?;
    if let Some(key) = &opts.sign {
        on_step("sign");
        let name = opts
            .out
            .file_name()
            .map_or_else(|| "release".into(), |n| n.to_string_lossy().into_owned());
        sign::sign(staging.path(), key, &name)?;
    }
    crate::interrupt::check()?;
    on_step("gate 3");
    let gate3 = gate3(staging.path(), &report, opts.threads)?;
    crate::interrupt::check()?;
    let mut blockers: Vec<Blocker> = report
        .files
        .iter()
        .flat_map(|f| {
            f.verify.blockers.iter().map(|b| Blocker {
                subject: format!("{}: {}", f.name, b.subject),
                ..b.clone()
            })
        })
        .collect();
    blockers.extend(gate3.blockers.iter().cloned());
    let verdict = Verdict::from_blockers(&blockers);
    let receipt = serde_json::json!({
        "created_unix_s": std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0),
        "out": opts.out.display().to_string(),
        "verdict": verdict,
        "gate3": gate3,
        "timings": timings,
    });
    write_file(
        &staging.path().join(RECEIPT),
        &serde_json::to_vec_pretty(&receipt)?,
    )?;
    let dir = staging.keep();
    if let Err(e) = std::fs::rename(&dir, &opts.out) {
        // Nothing half-made is left behind: the assembled folder goes with the error.
        let _ = std::fs::remove_dir_all(&dir);
        bail!(
            "{}: cannot rename the assembled release into place: {e}",
            opts.out.display()
        );
    }
    Ok(ReleaseRun {
        verdict,
        blockers,
        report,
        gate3,
        out: opts.out.clone(),
    })
}

/// Names the release writes itself; a GGUF may not take one of them.
const RESERVED: &[&str] = &[
    "README.md",
    "report.md",
    "report.html",
    REPORT_JSON,
    RECEIPT,
    sums::SHA256SUMS,
    sums::SIGNATURE,
];

fn check_options(opts: &ReleaseOptions) -> Result<()> {
    // symlink_metadata: a dangling symlink at the output path counts as existing.
    if std::fs::symlink_metadata(&opts.out).is_ok() {
        bail!(
            "{}: exists; a release is written to a new folder (nothing is overwritten)",
            opts.out.display()
        );
    }
    if opts.ggufs.is_empty() {
        bail!("no --gguf given");
    }
    let mut names: Vec<String> = Vec::new();
    for g in &opts.ggufs {
        crate::paths::ensure_regular_file(g)?;
        let n = file_name(g)?;
        // llama-gguf-hash splits manifest lines on whitespace and takes `-…` as an option.
        if n.starts_with('-') || n.chars().any(|c| c.is_whitespace() || c.is_control()) {
            bail!(
                "--gguf {}: a released file name may not start with '-' or hold whitespace or \
                 control characters (llama-gguf-hash --check could not name it); rename it",
                g.display()
            );
        }
        if names.contains(&n) {
            bail!(
                "{}: a second GGUF named {n}; names in a release must differ",
                g.display()
            );
        }
        names.push(n);
    }
    let source = shipped::files_to_copy(&opts.hf_dir)?;
    for n in &names {
        if RESERVED.contains(&n.as_str()) || source.contains(n) || n.ends_with(manifest::SUFFIX) {
            bail!("--gguf {n}: the release writes a file of that name itself; rename the GGUF");
        }
    }
    Ok(())
}

fn file_name(p: &Path) -> Result<String> {
    p.file_name()
        .and_then(|n| n.to_str())
        .map(String::from)
        .with_context(|| format!("{}: no UTF-8 file name", p.display()))
}

/// Verifies one GGUF and measures its fingerprint and RAM; returns it with the timing removed
/// from the report, and the exact peak RSS (KiB) of the RAM run.
fn verify_one(opts: &ReleaseOptions, g: &Path) -> Result<(ReleasedFile, f64, Option<u64>)> {
    let keyed = gguf::Header::read_infos(g)
        .with_context(|| format!("{}", g.display()))?
        .metadata
        .iter()
        .any(|(k, _)| k.starts_with(gguf::keys::quantize::IMATRIX_PREFIX));
    let mut v = verify::verify(&VerifyOptions {
        hf_dir: opts.hf_dir.clone(),
        gguf: g.to_path_buf(),
        texts: None,
        protocol: opts.protocol.clone(),
        release: None,
        ppl_text: opts.ppl_text.clone(),
        threads: opts.threads,
        work_dir: None,
        imatrix: opts.imatrix.clone().filter(|_| keyed),
    })?;
    // Costs vary by run; the release's reports are a function of their inputs.
    v.costs.clear();
    v.gate2_speed = None;
    let ms = v
        .gate2_vectors
        .as_mut()
        .map_or(0.0, |x| std::mem::take(&mut x.llama_ms_per_text));
    let kind = if v.gate2_vectors.is_some() {
        fingerprint::Kind::Top1
    } else {
        fingerprint::Kind::Argmax
    };
    let fp = fingerprint::measure(g, kind, opts.threads)?;
    let ram = match (&opts.ppl_text, &v.gate2_logits) {
        (Some(text), Some(_)) => Some(ram::measure(g, text, opts.threads)?),
        _ => None,
    };
    let gg = gguf::Gguf::open(g).with_context(|| format!("{}", g.display()))?;
    let ftype = match gg.header.get(gguf::keys::general::FILE_TYPE) {
        Some(gguf::Value::U32(id)) => gguf::LlamaFtype::by_id(*id)
            .map_or_else(|| format!("file type {id}"), |f| f.name.to_string()),
        _ => "unknown".into(),
    };
    let (bytes, elems) = gg
        .header
        .tensors
        .iter()
        .fold((0u64, 0u64), |a, t| (a.0 + t.n_bytes, a.1 + t.n_elements()));
    let file = ReleasedFile {
        name: file_name(g)?,
        ftype,
        bytes: std::fs::metadata(g)?.len(),
        bits_per_weight: 8.0 * bytes as f64 / elems.max(1) as f64,
        sha256: v.inputs[0].sha256.clone(),
        verify: v,
        fingerprint: fp,
        ram: ram.as_ref().map(|r| r.0.clone()),
    };
    Ok((file, ms, ram.map(|r| r.1)))
}

/// Copies the GGUFs and source files into `dir`, writes the card and reports, then
/// `SHA256SUMS`.
fn assemble(opts: &ReleaseOptions, dir: &Path, files: Vec<ReleasedFile>) -> Result<ReleaseReport> {
    for (g, f) in opts.ggufs.iter().zip(&files) {
        copy(g, &dir.join(&f.name))?;
        // From the folder's copy: the manifest describes the bytes that ship.
        let m = manifest::render(&dir.join(&f.name), &f.name)?;
        write_file(&dir.join(manifest::file_name(&f.name)), m.as_bytes())?;
    }
    let source_files = shipped::files_to_copy(&opts.hf_dir)?;
    for rel in &source_files {
        copy(&opts.hf_dir.join(rel), &dir.join(rel))?;
    }
    let report = ReleaseReport {
        gates_1_2: if files.iter().all(|f| f.verify.verdict == Verdict::Go) {
            Verdict::Go
        } else {
            Verdict::NoGo
        },
        quantgate: env!("CARGO_PKG_VERSION").into(),
        llama_cpp: llama_runtime::build_info().to_string(),
        image_digest: crate::image::digest()?,
        threads: opts.threads,
        source: opts
            .hf_dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
        base_model: opts.base_model.clone(),
        card_meta: shipped::card_meta(&opts.hf_dir)?,
        source_files,
        command: command_line(opts),
        files,
        signed_by: match &opts.sign {
            Some(k) => Some(sign::fingerprint(sign::signing_key(k)?.verifying_key())?),
            None => None,
        },
    };
    for (name, bytes) in pages(&report)? {
        write_file(&dir.join(name), &bytes)?;
    }
    sums::write(dir)?;
    Ok(report)
}

/// The files a release renders from its report: report.json, report.md, report.html and the
/// card README.md, by name. They are a function of `report` alone.
///
/// Errors: a chart of report.html that cannot be drawn.
pub fn pages(report: &ReleaseReport) -> Result<Vec<(&'static str, Vec<u8>)>> {
    Ok(vec![
        (REPORT_JSON, serde_json::to_vec_pretty(report)?),
        ("report.md", card::report_markdown(report).into_bytes()),
        ("report.html", html::release_page(report)?.into_bytes()),
        ("README.md", card::model_card(report).into_bytes()),
    ])
}

/// The `quantgate release` command line that reproduces the folder (paths as given).
fn command_line(opts: &ReleaseOptions) -> String {
    let mut c = format!("quantgate release --hf {}", opts.hf_dir.display());
    for g in &opts.ggufs {
        c.push_str(&format!(" --gguf {}", g.display()));
    }
    c.push_str(" -o RELEASE_DIR");
    if let Some(p) = &opts.protocol {
        c.push_str(&format!(" --protocol {}", p.display()));
    }
    if let Some(p) = &opts.ppl_text {
        c.push_str(&format!(" --ppl-text {}", p.display()));
    }
    if let Some(b) = &opts.base_model {
        c.push_str(&format!(" --base-model {b}"));
    }
    if let Some(m) = &opts.imatrix {
        c.push_str(&format!(" --imatrix {}", m.display()));
    }
    if opts.sign.is_some() {
        c.push_str(" --sign KEY");
    }
    c.push_str(&format!(" --threads {}", opts.threads));
    c
}

fn copy(from: &Path, to: &Path) -> Result<()> {
    if let Some(p) = to.parent() {
        std::fs::create_dir_all(p).with_context(|| format!("{}", p.display()))?;
    }
    std::fs::copy(from, to)
        .with_context(|| format!("{} → {}: cannot copy", from.display(), to.display()))?;
    Ok(())
}

fn write_file(p: &Path, bytes: &[u8]) -> Result<()> {
    std::fs::write(p, bytes).with_context(|| format!("{}: cannot write", p.display()))
}

/// Gate 3 on the release folder `dir` against `report`: `SHA256SUMS`, the verified bytes, and
/// the re-measured outputs.
///
/// Errors: a file that exists but cannot be read; llama.cpp failing to run a file it loaded.
pub fn gate3(dir: &Path, report: &ReleaseReport, threads: Threads) -> Result<Gate3> {
    let shipped: Vec<Shipped> = report
        .files
        .iter()
        .map(|f| Shipped {
            name: f.name.clone(),
            sha256: f.sha256.clone(),
            bytes: f.bytes,
            fingerprint: f.fingerprint.clone(),
        })
        .collect();
    let mut g3 = gate3::check(dir, &shipped, threads)?;
    structure(dir, report, &mut g3.blockers)?;
    consistency::check(dir, report, &mut g3.blockers)?;
    Ok(g3)
}

/// What the folder must hold by report.json: every GGUF it names (bare names) and no other,
/// the card and reports, every source file; and gates 1–2 GO for every file.
fn structure(dir: &Path, report: &ReleaseReport, blockers: &mut Vec<Blocker>) -> Result<()> {
    let mut b = |code, subject: &str, detail: String| {
        blockers.push(Blocker::new(code, subject, detail));
    };
    let named: Vec<&str> = report.files.iter().map(|f| f.name.as_str()).collect();
    for n in &named {
        if !plain_name(n) {
            b(
                BlockerCode::ReleaseFiles,
                n,
                "report.json names a file outside the folder".into(),
            );
        }
    }
    let required = ["README.md", "report.md", "report.html"];
    for rel in required
        .iter()
        .copied()
        .chain(report.source_files.iter().map(String::as_str))
    {
        let inside = !rel.split('/').any(|c| c == ".." || c.is_empty());
        if !inside || !dir.join(rel).is_file() {
            b(
                BlockerCode::ReleaseFiles,
                rel,
                "missing from the release folder".into(),
            );
        }
    }
    for f in &report.files {
        if f.verify.verdict != Verdict::Go {
            b(
                BlockerCode::ReleaseGates12,
                &f.name,
                "verify's verdict in report.json is NO-GO".into(),
            );
        }
    }
    if report.gates_1_2 != Verdict::Go || report.files.is_empty() {
        b(
            BlockerCode::ReleaseGates12,
            REPORT_JSON,
            format!(
                "gates 1–2: {} for {} files",
                report.gates_1_2,
                report.files.len()
            ),
        );
    }
    Ok(())
}

/// `release --check DIR`: Gate 3 on an existing release folder, against its own report.json.
///
/// Errors: report.json missing or not a release report (naming the file).
pub fn check(
    dir: &Path,
    threads: Threads,
    trust: Option<&Path>,
) -> Result<(Verdict, Gate3, sign::Provenance)> {
    // The signature first: until it holds, report.json and SHA256SUMS are anyone's words.
    if let Some(key) = trust {
        let mut blockers = Vec::new();
        let p = sign::provenance(dir, key, &mut blockers)?;
        if !blockers.is_empty() {
            let g3 = Gate3 {
                files_hashed: 0,
                files: Vec::new(),
                blockers,
            };
            return Ok((Verdict::NoGo, g3, p));
        }
        let (v, g3) = check_unsigned(dir, threads)?;
        return Ok((v, g3, p));
    }
    let (v, g3) = check_unsigned(dir, threads)?;
    Ok((v, g3, sign::Provenance::NotChecked))
}

/// Gate 3 of `dir` against its own report.json, without the signature.
fn check_unsigned(dir: &Path, threads: Threads) -> Result<(Verdict, Gate3)> {
    let p = dir.join(REPORT_JSON);
    let text = crate::paths::read_text_capped(&p, REPORT_MAX_BYTES)?;
    let report: ReleaseReport = serde_json::from_str(&text)
        .with_context(|| format!("{}: not a quantgate release report", p.display()))?;
    let g3 = gate3(dir, &report, threads)?;
    Ok((Verdict::from_blockers(&g3.blockers), g3))
}
