//! `quantgate run P.toml --run-dir DIR`: executes a frozen protocol.

use std::path::PathBuf;

use quantgate::protocol::run::{self, RunState};

use super::Status;

/// Arguments of `run`.
#[derive(clap::Args)]
pub struct Args {
    /// The protocol TOML.
    protocol: PathBuf,
    /// The run folder (created; refused if not empty).
    #[arg(long)]
    run_dir: PathBuf,
    /// Who ran it (default: $USER).
    #[arg(long)]
    operator: Option<String>,
}

/// Exit 0 complete, 1 failed (the receipt says why), 128 + N on signal N, 2 unusable run
/// folder or protocol.
pub fn run(a: Args) -> anyhow::Result<Status> {
    let operator = a
        .operator
        .or_else(|| std::env::var("USER").ok())
        .unwrap_or_else(|| "unknown".into());
    let o = run::run(&a.protocol, &a.run_dir, &operator)?;
    println!("run {} → {}", o.status.state, a.run_dir.display());
    if let (Some(step), Some(reason)) = (&o.status.step, &o.status.reason) {
        println!("failed step: {step}: {reason}");
    }
    println!("results: {}", o.results_path.display());
    Ok(Status::from_pass(o.status.state == RunState::Complete))
}
