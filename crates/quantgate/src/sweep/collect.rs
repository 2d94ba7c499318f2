//! `quantgate sweep collect DIR`: one table of every task's standing, verdict, figures and
//! receipt, written as `DIR/collect/sweep.json`, `sweep.md` and `sweep.html` (beside each
//! other, as every report is).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use serde::Serialize;

use super::figures::lookup;
use super::file::TaskKind;
use super::plan::Plan;
use super::receipt::Receipt;
use super::status::{self, Row, Standing};
use crate::verify::Verdict;

/// `sweep.json`.
#[derive(Clone, Debug, Serialize)]
pub struct Collected {
    pub sweep_id: String,
    pub sweep_sha256: String,
    pub cpu_variant: String,
    pub threads: i32,
    /// GO when every task passed; NO-GO otherwise (a task failed, was blocked or has not
    /// finished).
    pub verdict: Verdict,
    pub counts: BTreeMap<String, usize>,
    pub rows: Vec<Row>,
    /// Outputs that are missing or no longer hash as their receipt says (each makes the sweep
    /// NO-GO): a file changed after its task passed is not what was verified.
    pub altered: Vec<String>,
}

/// Whether nothing more will happen to the sweep: every task ended for good, is blocked, or
/// used both its tries.
pub fn settled(rows: &[Row]) -> bool {
    rows.iter().all(|r| match &r.standing {
        Standing::Ended { how } => {
            how.is_final() || r.receipt.as_ref().is_some_and(|x| x.attempt >= 2)
        }
        Standing::Blocked { .. } => true,
        Standing::Ready | Standing::Waiting => false,
    })
}

/// Collects the sweep folder `dir`; with `wait`, first waits up to that long for it to settle
/// (a collect Job started beside the tasks). Returns the table and the folder written.
///
/// Errors: no plan; a receipt that cannot be read; a report that cannot be written.
pub fn collect(
    dir: &Path,
    wait: Option<Duration>,
    sched: &BTreeMap<usize, String>,
) -> Result<(Collected, PathBuf)> {
    let plan = Plan::load(dir)?;
    let t0 = Instant::now();
    let mut rows = status::rows(dir, sched)?;
    while let Some(w) = wait {
        if settled(&rows) || t0.elapsed() >= w || crate::interrupt::received().is_some() {
            break;
        }
        std::thread::sleep(Duration::from_secs(5));
        rows = status::rows(dir, sched)?;
    }
    let all_passed = rows.iter().all(|r| {
        r.standing
            == Standing::Ended {
                how: super::receipt::TaskState::Passed,
            }
    });
    let altered: Vec<String> = rows
        .iter()
        .filter_map(|r| r.receipt.as_ref())
        .filter_map(|r| {
            super::receipt::outputs(dir, r)
                .err()
                .map(|e| format!("{e:#}"))
        })
        .collect();
    let c = Collected {
        sweep_id: plan.sweep_id.clone(),
        sweep_sha256: plan.sweep_sha256.clone(),
        cpu_variant: plan.settings.cpu_variant.clone(),
        threads: plan.settings.threads.get(),
        verdict: if all_passed && altered.is_empty() && !rows.is_empty() {
            Verdict::Go
        } else {
            Verdict::NoGo
        },
        counts: status::summary(&rows),
        rows,
        altered,
    };
    let out = dir.join("collect");
    if out.is_symlink() {
        bail!(
            "{}: a symlink; collect writes only inside the sweep folder",
            out.display()
        );
    }
    crate::paths::write_atomic(&out.join("sweep.json"), &serde_json::to_vec_pretty(&c)?)?;
    crate::paths::write_atomic(&out.join("sweep.md"), markdown(&c).as_bytes())?;
    crate::paths::write_atomic(&out.join("sweep.html"), html(&c).as_bytes())?;
    Ok((c, out))
}

fn num(r: &Receipt, path: &str) -> Option<f64> {
    lookup(&r.quality, path).and_then(|v| v.as_f64())
}

/// The figures a row shows, by task kind.
pub fn figures_text(r: &Receipt) -> String {
    let mut parts = Vec::new();
    match r.kind {
        TaskKind::Convert | TaskKind::Quantize => {
            if let Some(o) = r.outputs.first() {
                parts.push(format!(
                    "{} B, sha256 {}",
                    o.bytes,
                    &o.sha256[..12.min(o.sha256.len())]
                ));
            }
            if let (Some(i), Some(n)) = (
                num(r, "gate1.identical"),
                lookup(&r.quality, "gate1.tensors").and_then(|v| v.as_array()),
            ) {
                parts.push(format!("gate 1 {i}/{} re-quantized identical", n.len()));
            }
        }
        TaskKind::Verify => {
            if let (Some(b), Some(n)) = (num(r, "gate1.bit_identical"), num(r, "gate1.tensors")) {
                parts.push(format!("gate 1 {b}/{n}"));
            }
            if let Some(c) = num(r, "gate2_vectors.min_cosine") {
                parts.push(format!("min cosine {c:.6}"));
            }
            if let Some(k) = num(r, "gate2_logits.mean_kld") {
                parts.push(format!("KLD {k:.6}"));
            }
            if let Some(k) = num(r, "quality.logits.mean_kld") {
                parts.push(format!("KLD vs source {k:.6}"));
            }
        }
        TaskKind::Release => {
            if let Some(f) = lookup(&r.quality, "files").and_then(|v| v.as_array()) {
                parts.push(format!("{} files", f.len()));
            }
        }
        TaskKind::Protocol => {
            if let Some(s) = lookup(&r.quality, "state").and_then(|v| v.as_str()) {
                parts.push(s.to_string());
            }
        }
    }
    parts.join(" · ")
}

fn cells(row: &Row) -> [String; 8] {
    let r = row.receipt.as_ref();
    [
        row.index.to_string(),
        row.id.clone(),
        status::text(&row.standing),
        r.and_then(|r| r.verdict)
            .map_or(String::new(), |v| v.to_string()),
        r.map_or(String::new(), figures_text),
        r.map_or(String::new(), |r| format!("{:.1}", r.wall_s)),
        r.map_or(String::new(), |r| {
            format!("{:.0}", r.max_rss_kib as f64 / 1024.0)
        }),
        r.map_or(String::new(), |r| {
            format!(
                "{} #{} {}",
                r.executor.name(),
                r.attempt,
                r.job.clone().unwrap_or_default()
            )
        }),
    ]
}

const HEADS: [&str; 8] = [
    "#",
    "task",
    "state",
    "verdict",
    "figures",
    "wall s",
    "peak RSS MiB",
    "executor, attempt, job",
];

fn markdown(c: &Collected) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "# Sweep {}\n", c.sweep_id);
    let _ = writeln!(s, "- sweep file sha256 {}", c.sweep_sha256);
    let _ = writeln!(
        s,
        "- pinned: CPU variant {}, {} threads",
        c.cpu_variant, c.threads
    );
    let counts: Vec<String> = c.counts.iter().map(|(k, v)| format!("{k} {v}")).collect();
    let _ = writeln!(s, "- tasks: {}\n", counts.join(", "));
    let _ = writeln!(s, "| {} |", HEADS.join(" | "));
    let _ = writeln!(s, "|{}", "---|".repeat(HEADS.len()));
    for row in &c.rows {
        let _ = writeln!(
            s,
            "| {} |",
            cells(row).map(|x| x.replace('|', "\\|")).join(" | ")
        );
    }
    for a in &c.altered {
        let _ = writeln!(s, "\n**Altered after its task passed:** {a}");
    }
    let _ = writeln!(
        s,
        "\nReceipts: `tasks/NNN-…/receipt.json`.\n\n{}",
        c.verdict
    );
    s
}

fn html(c: &Collected) -> String {
    use crate::html::{badge, escape, page};
    let mut b = String::new();
    let _ = write!(
        b,
        "<h1>Sweep {} {}</h1><p>sweep file sha256 <code>{}</code> · CPU variant {} · {} threads</p>",
        escape(&c.sweep_id),
        badge(c.verdict),
        escape(&c.sweep_sha256),
        escape(&c.cpu_variant),
        c.threads
    );
    b += "<table><thead><tr>";
    for h in HEADS {
        let _ = write!(b, "<th>{}</th>", escape(h));
    }
    b += "</tr></thead><tbody>";
    for row in &c.rows {
        b += "<tr>";
        for x in cells(row) {
            let _ = write!(b, "<td>{}</td>", escape(&x));
        }
        b += "</tr>";
    }
    b += "</tbody></table>";
    for a in &c.altered {
        let _ = write!(
            b,
            "<p><strong>Altered after its task passed:</strong> {}</p>",
            escape(a)
        );
    }
    page(&format!("Sweep {}", c.sweep_id), &b)
}
