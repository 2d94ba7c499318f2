//! `quantgate analyze`: every quantity of two runs of one protocol, compared with the frozen
//! rule (`[tolerances]` per kind), and the decision ([`super::DECISION_RULE`]).

mod html;

use std::collections::BTreeSet;
use std::path::Path;

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use super::quantities::{deviation, expected_kind, tolerance, Class, Kind, Quantities, Quantity};
use super::run::{Results, RunState, RunStatus};

/// One quantity's comparison outcome.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum RowVerdict {
    /// Within its kind's tolerance.
    Pass,
    /// Outside it (or NaN).
    Fail,
    /// Present in one run only.
    Missing,
    /// Shown with its spread, not judged (absolute throughput).
    Reported,
    /// A name the runner never writes (a newer or altered results file): never judged as
    /// reproduced, so it cannot make a decision better.
    Unknown,
}

impl std::fmt::Display for RowVerdict {
    /// As written in analysis.json and analysis.md (the serde name).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        crate::verify::outcome::write_serde_name(self, f)
    }
}

/// The decision of [`super::DECISION_RULE`] (`quality-first-v1`).
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub enum Decision {
    /// Every judged quantity reproduced.
    #[serde(rename = "capability proven")]
    CapabilityProven,
    /// Every quality quantity reproduced, some performance quantity did not.
    #[serde(rename = "partial pass")]
    PartialPass,
    /// A quality quantity did not reproduce, or nothing was judged.
    #[serde(rename = "capability gap")]
    CapabilityGap,
}

impl std::fmt::Display for Decision {
    /// As written in analysis.json and analysis.md (the serde name).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        crate::verify::outcome::write_serde_name(self, f)
    }
}

/// One quantity's comparison.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Row {
    pub model: String,
    pub quantity: String,
    pub kind: Kind,
    pub class: Class,
    pub unit: String,
    pub run1: Option<f64>,
    pub run2: Option<f64>,
    pub spread1: Option<f64>,
    pub spread2: Option<f64>,
    /// Relative deviation by the kind's rule (`None` when missing or not judged).
    pub deviation: Option<f64>,
    /// `None` for reported-only quantities.
    pub tolerance: Option<f64>,
    /// The outcome.
    pub verdict: RowVerdict,
}

/// The analysis.
#[derive(Clone, Debug, Serialize)]
pub struct Analysis {
    pub protocol_id: String,
    pub protocol_sha256: String,
    pub decision_rule: String,
    /// The decision.
    pub decision: Decision,
    /// Judged quantities that reproduced / did not (`model: quantity`).
    pub reproduced: Vec<String>,
    pub not_reproduced: Vec<String>,
    pub rows: Vec<Row>,
    /// GGUF files byte-identical across the runs (by sha256), per `model/arm`.
    pub identical_files: Vec<String>,
    pub differing_files: Vec<String>,
    pub run1: serde_json::Value,
    pub run2: serde_json::Value,
}

/// A run folder's receipt, results and frozen protocol (whose sha256 must match both).
fn load(dir: &Path) -> Result<(RunStatus, Results, super::Tolerances)> {
    let read = |name: &str, cap: u64| -> Result<Vec<u8>> {
        let p = dir.join(name);
        crate::paths::ensure_regular_file(&p)?;
        let n = std::fs::metadata(&p)?.len();
        if n > cap {
            bail!(
                "{}: {n} bytes is more than a run writes (≤ {cap})",
                p.display()
            );
        }
        std::fs::read(&p).with_context(|| format!("{}: cannot read", p.display()))
    };
    let status: RunStatus = serde_json::from_slice(&read("run_status.json", 1 << 20)?)
        .with_context(|| format!("{}: invalid run_status.json", dir.display()))?;
    let results: Results = serde_json::from_slice(&read("results.json", 1 << 28)?)
        .with_context(|| format!("{}: invalid results.json", dir.display()))?;
    let proto = read("protocol.toml", 1 << 20)?;
    let sha = crate::hash::sha256_bytes(&proto);
    if sha != status.protocol_sha256 || sha != results.protocol_sha256 {
        bail!(
            "{}: protocol.toml (sha256 {sha}), run_status.json ({}) and results.json ({}) disagree",
            dir.display(),
            status.protocol_sha256,
            results.protocol_sha256
        );
    }
    let p: super::Protocol = std::str::from_utf8(&proto)
        .ok()
        .and_then(|t| toml::from_str(t).ok())
        .with_context(|| format!("{}: protocol.toml does not parse", dir.display()))?;
    if results.state != RunState::Complete && status.state == RunState::Complete {
        bail!(
            "{}: run_status.json says complete, results.json says {}",
            dir.display(),
            results.state
        );
    }
    Ok((status, results, p.tolerances))
}

/// Refuses runs that cannot be compared: incomplete, the same run (or a copy of it), or runs
/// of different protocols.
fn refuse_incomparable(
    (r1, s1, a): (&Path, &RunStatus, &Results),
    (r2, s2, b): (&Path, &RunStatus, &Results),
) -> Result<()> {
    for (s, d) in [(s1, r1), (s2, r2)] {
        if s.state != RunState::Complete {
            bail!(
                "{}: run is {} (step {}, {}); only complete runs are compared",
                d.display(),
                s.state,
                s.step.as_deref().unwrap_or("-"),
                s.reason.as_deref().unwrap_or("-")
            );
        }
    }
    let same_dir = r1
        .canonicalize()
        .ok()
        .is_some_and(|x| Some(x) == r2.canonicalize().ok());
    if same_dir || (s1.started == s2.started && s1.pid == s2.pid && s1.operator == s2.operator) {
        bail!(
            "{} and {} are the same run (or copies of it: started {}, pid {}); reproduction needs two runs",
            r1.display(),
            r2.display(),
            s1.started,
            s1.pid
        );
    }
    if a.protocol_sha256 != b.protocol_sha256 || s1.protocol_sha256 != a.protocol_sha256 {
        bail!(
            "runs of different protocols: {} has {}, {} has {}",
            r1.display(),
            a.protocol_sha256,
            r2.display(),
            b.protocol_sha256
        );
    }
    Ok(())
}

/// The rows of one model: every quantity either run reports, judged by its kind's rule.
fn compare_model(
    m: &str,
    qa: Option<&Quantities>,
    qb: Option<&Quantities>,
    tol: &super::Tolerances,
) -> Vec<Row> {
    let names: BTreeSet<&String> = qa
        .into_iter()
        .flat_map(|q| q.keys())
        .chain(qb.into_iter().flat_map(|q| q.keys()))
        .collect();
    let mut rows = Vec::new();
    for n in names {
        let x = qa.and_then(|q| q.get(n));
        let y = qb.and_then(|q| q.get(n));
        let meta = x.or(y).expect("name comes from one of the runs");
        // Kind and class from the name (the runner's naming), never from the file.
        let known = expected_kind(n);
        let (kind, class) = known.unwrap_or((Kind::NonDelta, Class::Quality));
        let tolerance = tolerance(tol, kind);
        let (deviation, verdict) = match (x, y) {
            _ if known.is_none() => (None, RowVerdict::Unknown),
            (Some(_), Some(_)) if kind == Kind::Reported => (None, RowVerdict::Reported),
            (Some(x), Some(y)) => {
                let b1 = delta_baseline(n, x, qa);
                let d = deviation(kind, x.value, y.value, b1);
                let v = if tolerance.is_some_and(|t| d <= t) {
                    RowVerdict::Pass
                } else {
                    RowVerdict::Fail
                };
                (Some(d), v)
            }
            _ => (None, RowVerdict::Missing),
        };
        rows.push(Row {
            model: m.to_string(),
            quantity: n.clone(),
            kind,
            class,
            unit: meta.unit.clone(),
            run1: x.map(|q| q.value),
            run2: y.map(|q| q.value),
            spread1: x.and_then(|q| q.spread),
            spread2: y.and_then(|q| q.spread),
            deviation,
            tolerance,
            verdict,
        });
    }
    rows
}

/// A delta's baseline: the same measurement's baseline arm in run 1 (a baseline naming another
/// measurement is ignored, so a results file cannot pick its own denominator).
fn delta_baseline(name: &str, x: &Quantity, qa: Option<&Quantities>) -> Option<f64> {
    let stem = name.split('[').next().unwrap_or("");
    let want = format!("{}[", stem.trim_start_matches("delta_"));
    x.baseline
        .as_ref()
        .filter(|bn| bn.starts_with(&want))
        .and_then(|bn| qa.and_then(|q| q.get(bn)))
        .map(|q| q.value)
}

/// (reproduced, not reproduced, decision) of the rows under `quality-first-v1`.
fn decide(rows: &[Row]) -> (Vec<String>, Vec<String>, Decision) {
    let judged = || rows.iter().filter(|r| r.verdict != RowVerdict::Reported);
    let reproduced: Vec<String> = judged()
        .filter(|r| r.verdict == RowVerdict::Pass)
        .map(|r| format!("{}: {}", r.model, r.quantity))
        .collect();
    let not_reproduced: Vec<String> = judged()
        .filter(|r| r.verdict != RowVerdict::Pass)
        .map(|r| format!("{}: {} ({})", r.model, r.quantity, r.verdict))
        .collect();
    let quality_failed =
        judged().any(|r| r.verdict != RowVerdict::Pass && r.class == Class::Quality);
    let decision = if not_reproduced.is_empty() && !reproduced.is_empty() {
        Decision::CapabilityProven
    } else if quality_failed || reproduced.is_empty() {
        Decision::CapabilityGap
    } else {
        Decision::PartialPass
    };
    (reproduced, not_reproduced, decision)
}

/// (identical, differing) GGUF files of the two runs, by sha256, as `model/arm`.
fn compare_files(a: &Results, b: &Results) -> (Vec<String>, Vec<String>) {
    let mut identical_files = Vec::new();
    let mut differing_files = Vec::new();
    for (m, arms) in &a.files {
        for (arm, f) in arms {
            let key = format!("{m}/{arm}");
            match b.files.get(m).and_then(|x| x.get(arm)) {
                Some(g) if g == f => identical_files.push(key),
                _ => differing_files.push(key),
            }
        }
    }
    (identical_files, differing_files)
}

/// Compares the runs in `r1` and `r2`.
///
/// Errors: unreadable folders, a run that did not complete, or runs of different protocols
/// (sha256 differs) — those are never compared.
pub fn analyze(r1: &Path, r2: &Path) -> Result<Analysis> {
    let (s1, a, tol1) = load(r1)?;
    let (s2, b, _) = load(r2)?;
    refuse_incomparable((r1, &s1, &a), (r2, &s2, &b))?;
    // Tolerances from the frozen protocol's bytes (sha256-checked), not from results.json.
    let mut rows = Vec::new();
    let models: BTreeSet<&String> = a.models.keys().chain(b.models.keys()).collect();
    for m in models {
        rows.extend(compare_model(m, a.models.get(m), b.models.get(m), &tol1));
    }
    let (reproduced, not_reproduced, decision) = decide(&rows);
    let (identical_files, differing_files) = compare_files(&a, &b);
    Ok(Analysis {
        protocol_id: a.protocol_id.clone(),
        protocol_sha256: a.protocol_sha256.clone(),
        decision_rule: a.decision_rule.clone(),
        decision,
        reproduced,
        not_reproduced,
        rows,
        identical_files,
        differing_files,
        run1: serde_json::json!({"dir": r1.display().to_string(), "operator": a.operator, "started": s1.started, "environment": a.environment}),
        run2: serde_json::json!({"dir": r2.display().to_string(), "operator": b.operator, "started": s2.started, "environment": b.environment}),
    })
}

fn fmt_v(v: Option<f64>, s: Option<f64>) -> String {
    match (v, s) {
        (None, _) => "—".into(),
        (Some(v), Some(s)) => format!("{v:.6} ± {s:.4}"),
        (Some(v), None) => format!("{v:.6}"),
    }
}

/// `analysis.md`: the decision, then a table per model.
pub fn markdown(an: &Analysis) -> String {
    let mut s = format!(
        "# Reproducibility analysis — {}\n\nprotocol sha256 `{}` · rule `{}`\n\n**Decision: {}**\n\n",
        an.protocol_id, an.protocol_sha256, an.decision_rule, an.decision
    );
    if !an.not_reproduced.is_empty() {
        s += &format!("Not reproduced: {}\n\n", an.not_reproduced.join(", "));
    }
    s += &format!(
        "GGUF files byte-identical across runs: {} · differing: {}\n",
        if an.identical_files.is_empty() {
            "none".into()
        } else {
            an.identical_files.join(", ")
        },
        if an.differing_files.is_empty() {
            "none".into()
        } else {
            an.differing_files.join(", ")
        },
    );
    let models: BTreeSet<&String> = an.rows.iter().map(|r| &r.model).collect();
    for m in models {
        s += &format!(
            "\n## {m}\n\n| quantity | unit | run 1 | run 2 | deviation | tolerance | verdict |\n|---|---|---:|---:|---:|---:|---|\n"
        );
        for r in an.rows.iter().filter(|r| &r.model == m) {
            s += &format!(
                "| {} | {} | {} | {} | {} | {} | {} |\n",
                r.quantity,
                r.unit,
                fmt_v(r.run1, r.spread1),
                fmt_v(r.run2, r.spread2),
                r.deviation
                    .map_or("—".into(), |d| format!("{:.4}%", 100.0 * d)),
                r.tolerance
                    .map_or("—".into(), |t| format!("{:.2}%", 100.0 * t)),
                r.verdict
            );
        }
    }
    s
}

/// Writes `analysis.json`, `analysis.md` and `analysis.html` into `dir` (atomically each).
pub fn write(dir: &Path, an: &Analysis) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("{}: cannot create", dir.display()))?;
    crate::paths::write_atomic(
        &dir.join("analysis.json"),
        serde_json::to_string_pretty(an)?.as_bytes(),
    )?;
    crate::paths::write_atomic(&dir.join("analysis.md"), markdown(an).as_bytes())?;
    crate::paths::write_atomic(
        &dir.join("analysis.html"),
        html::analysis_page(an)?.as_bytes(),
    )
}
