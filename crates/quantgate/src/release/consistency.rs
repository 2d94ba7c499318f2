//! `release --check`'s reading of report.json against itself and against the folder: without
//! a signature a folder can be edited along with its `SHA256SUMS`, but not so that report.json
//! stays consistent with what it records. Checked here:
//! - every hash report.json records (each verify report's inputs) against the shipped copy of
//!   that file;
//! - only the files a release writes or copies, under their known names;
//! - each GGUF's `llama-gguf-hash` manifest against the GGUF's tensors ([`manifest`]);
//! - each verify report's `thresholds_sha256` against its thresholds, and each recorded verdict
//!   against its recorded figures (thresholds, budgets, Gate 1 counts, blockers).

use std::path::Path;

use anyhow::Result;

use super::{manifest, sums, ReleaseReport, RECEIPT, REPORT_JSON};
use crate::source::shipped;
use crate::verify::{self, Blocker, BlockerCode, Verdict, VerifyReport};

/// The files a release writes itself (besides the GGUFs and the copied source files).
pub const WRITTEN: &[&str] = &[
    "README.md",
    "report.md",
    "report.html",
    REPORT_JSON,
    sums::SHA256SUMS,
    RECEIPT,
    // `release --sign`, or a signature added later (checked with `--trust`).
    sums::SIGNATURE,
];

/// Every check of this module; each failure is a Gate 3 blocker naming the file or field.
///
/// Errors: the folder cannot be listed or a shipped file cannot be read.
pub fn check(dir: &Path, report: &ReleaseReport, blockers: &mut Vec<Blocker>) -> Result<()> {
    known_files_only(dir, report, blockers)?;
    recorded_hashes(dir, report, blockers)?;
    for f in &report.files {
        // Names outside the folder and missing GGUFs are Gate 3's file checks' blockers.
        if !crate::verify::gate3::plain_name(&f.name) || !dir.join(&f.name).is_file() {
            continue;
        }
        if let Some(why) = manifest::mismatch(dir, &f.name) {
            let subject = manifest::file_name(&f.name);
            blockers.push(Blocker::new(BlockerCode::ReleaseManifest, &subject, why));
        }
    }
    for f in &report.files {
        for why in inconsistencies(&f.verify, &f.sha256) {
            blockers.push(Blocker::new(
                BlockerCode::ReleaseReport,
                &format!("{REPORT_JSON}: {}", f.name),
                why,
            ));
        }
    }
    Ok(())
}

/// A file of the folder that the release neither writes nor copies is a blocker naming it
/// (an added `chat_template.jinja` changes what a loader of the folder runs).
fn known_files_only(dir: &Path, report: &ReleaseReport, blockers: &mut Vec<Blocker>) -> Result<()> {
    let copied_ok = |rel: &str| shipped::COPIED.contains(&rel) || shipped::is_license_file(rel);
    for rel in &report.source_files {
        if !copied_ok(rel) {
            blockers.push(Blocker::new(
                BlockerCode::ReleaseFiles,
                rel,
                "report.json lists a source file a release never copies".into(),
            ));
        }
    }
    let mut present = sums::covered_files(dir)?;
    present.extend(
        sums::UNCOVERED
            .iter()
            .filter(|n| dir.join(n).exists())
            .map(|n| n.to_string()),
    );
    for rel in present {
        let known = WRITTEN.contains(&rel.as_str())
            || report
                .files
                .iter()
                .any(|f| f.name == rel || manifest::file_name(&f.name) == rel)
            || (report.source_files.contains(&rel) && copied_ok(&rel));
        if !known {
            blockers.push(Blocker::new(
                BlockerCode::ReleaseFiles,
                &rel,
                "not a file the release writes or copies".into(),
            ));
        }
    }
    Ok(())
}

/// Each shipped source file whose hash a verify report recorded (its inputs, by path relative
/// to the HF folder) must still have that hash; an HF input recorded without that path is
/// itself a blocker (deleting it would hide a change).
fn recorded_hashes(dir: &Path, report: &ReleaseReport, blockers: &mut Vec<Blocker>) -> Result<()> {
    for f in &report.files {
        if f.verify
            .inputs
            .iter()
            .skip(1)
            .any(|i| i.source_file.is_none())
        {
            blockers.push(Blocker::new(
                BlockerCode::ReleaseReport,
                &format!("{REPORT_JSON}: {}", f.name),
                "an HF input is recorded without its source_file".into(),
            ));
        }
    }
    for rel in &report.source_files {
        let p = dir.join(rel);
        if !p.is_file() {
            continue; // named by the structure check
        }
        let mut shipped = None;
        for f in &report.files {
            for i in f.verify.inputs.iter().skip(1) {
                if i.source_file.as_deref() != Some(rel.as_str()) {
                    continue;
                }
                let have = match &shipped {
                    Some(h) => h,
                    None => shipped.insert(crate::hash::sha256_file(&p)?),
                };
                if *have != i.sha256 {
                    blockers.push(Blocker::new(
                        BlockerCode::ReleaseSha256,
                        rel,
                        format!(
                            "sha256 {have}; {} records {} for the file verify judged ({})",
                            REPORT_JSON, i.sha256, f.name
                        ),
                    ));
                }
            }
        }
    }
    Ok(())
}

/// Why one recorded verify report disagrees with itself (empty when it does not): its
/// thresholds hash, its verdict against its blockers, and a GO against its own figures.
pub fn inconsistencies(v: &VerifyReport, gguf_sha256: &str) -> Vec<String> {
    let mut out = Vec::new();
    let sha = serde_json::to_string(&v.thresholds)
        .map(|t| crate::hash::sha256_bytes(t.as_bytes()))
        .unwrap_or_default();
    if sha != v.thresholds_sha256 {
        out.push(format!(
            "thresholds hash to {sha}, but thresholds_sha256 records {}",
            v.thresholds_sha256
        ));
    }
    if v.inputs.first().map(|i| i.sha256.as_str()) != Some(gguf_sha256) {
        out.push("the GGUF's sha256 differs from the input verify hashed".into());
    }
    if v.verdict != Verdict::from_blockers(&v.blockers) {
        out.push(format!(
            "verdict {} with {} blockers",
            v.verdict,
            v.blockers.len()
        ));
    }
    if v.verdict == Verdict::Go {
        let mut again = Vec::new();
        verify::rejudge(v, &mut again);
        out.extend(
            again
                .iter()
                .map(|b| format!("GO, but its figures fail: {}: {}", b.subject, b.detail)),
        );
    }
    out
}
