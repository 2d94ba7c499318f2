//! `quantgate analyze RUN1 RUN2`: compares two runs of one protocol.

use std::path::PathBuf;

use quantgate::protocol::analyze::{self, Decision, RowVerdict};

use super::Status;

/// Arguments of `analyze`.
#[derive(clap::Args)]
pub struct Args {
    /// Run 1 folder (its F16 values are the delta baselines).
    run1: PathBuf,
    /// Run 2 folder.
    run2: PathBuf,
    /// Output folder for analysis.json and analysis.md (default: RUN2/analysis).
    #[arg(long)]
    out: Option<PathBuf>,
}

/// Exit 0 capability proven, 1 otherwise, 2 refused.
pub fn run(a: Args) -> anyhow::Result<Status> {
    let an = analyze::analyze(&a.run1, &a.run2)?;
    let out = a.out.unwrap_or_else(|| a.run2.join("analysis"));
    analyze::write(&out, &an)?;
    let judged = an.reproduced.len() + an.not_reproduced.len();
    println!(
        "{} of {} judged quantities reproduced; analysis: {}",
        an.reproduced.len(),
        judged,
        out.display()
    );
    let num = |v: Option<f64>| v.map_or("—".to_string(), |x| format!("{x:.6}"));
    let pct =
        |v: Option<f64>, p: usize| v.map_or("—".to_string(), |d| format!("{:.p$}%", 100.0 * d));
    for r in &an.rows {
        if matches!(
            r.verdict,
            RowVerdict::Fail | RowVerdict::Missing | RowVerdict::Unknown
        ) {
            println!(
                "{} {}: run 1 {} · run 2 {} · deviation {} · tolerance {} → {}",
                r.model,
                r.quantity,
                num(r.run1),
                num(r.run2),
                pct(r.deviation, 4),
                pct(r.tolerance, 2),
                r.verdict
            );
        }
    }
    println!("{}", an.decision);
    Ok(Status::from_pass(an.decision == Decision::CapabilityProven))
}
