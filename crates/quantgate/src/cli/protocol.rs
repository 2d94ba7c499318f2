//! `quantgate protocol check`, `quantgate run`, `quantgate analyze`.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Subcommand;
use quantgate::protocol;

#[derive(Subcommand)]
pub enum ProtocolCommand {
    /// Validate a protocol file and print its sha256 (the freeze id).
    Check {
        /// The protocol TOML.
        file: PathBuf,
    },
}

/// `protocol check`: exit 0 valid, 2 invalid.
pub fn check(cmd: ProtocolCommand) -> anyhow::Result<ExitCode> {
    let ProtocolCommand::Check { file } = cmd;
    let l = protocol::load(&file)?;
    let p = &l.protocol;
    println!("protocol {} (frozen {})", p.protocol.id, p.protocol.frozen);
    println!(
        "inputs {} · models {} · steps {} · threads {} · seed {} · n_ubatch {}",
        p.inputs.len(),
        p.models.len(),
        p.steps
            .iter()
            .map(|s| s.kind())
            .collect::<Vec<_>>()
            .join(" → "),
        p.settings.threads,
        p.settings.seed,
        p.settings.n_ubatch
    );
    println!(
        "tolerances: non-delta {} · delta {} · ratio {} · rule {}",
        p.tolerances.non_delta, p.tolerances.delta, p.tolerances.ratio, p.decision.rule
    );
    println!("sha256 {}", l.sha256);
    Ok(ExitCode::SUCCESS)
}

/// `run`: exit 0 complete, 1 failed (the receipt says why), 2 unusable run folder/protocol.
pub fn run(file: PathBuf, run_dir: PathBuf, operator: Option<String>) -> anyhow::Result<ExitCode> {
    let operator = operator
        .or_else(|| std::env::var("USER").ok())
        .unwrap_or_else(|| "unknown".into());
    let o = protocol::run::run(&file, &run_dir, &operator)?;
    println!("run {} → {}", o.status.state, run_dir.display());
    if let (Some(step), Some(reason)) = (&o.status.step, &o.status.reason) {
        println!("failed step: {step}: {reason}");
    }
    println!("results: {}", o.results_path.display());
    Ok(
        match (o.status.state.as_str(), quantgate::interrupt::received()) {
            ("complete", _) => ExitCode::SUCCESS,
            // 128 + signal, as shells report a command stopped by it.
            (_, Some(sig)) => ExitCode::from((128 + sig).clamp(0, 255) as u8),
            _ => ExitCode::from(1),
        },
    )
}

/// `analyze`: exit 0 capability proven, 1 otherwise, 2 refused.
pub fn analyze(r1: PathBuf, r2: PathBuf, out: Option<PathBuf>) -> anyhow::Result<ExitCode> {
    let an = protocol::analyze::analyze(&r1, &r2)?;
    let out = out.unwrap_or_else(|| r2.join("analysis"));
    protocol::analyze::write(&out, &an)?;
    let judged = an.reproduced.len() + an.not_reproduced.len();
    println!(
        "{} of {} judged quantities reproduced; analysis: {}",
        an.reproduced.len(),
        judged,
        out.display()
    );
    let num = |v: Option<f64>| v.map_or("—".to_string(), |x| format!("{x:.6}"));
    for r in &an.rows {
        if r.verdict == "fail" || r.verdict == "missing" || r.verdict == "unknown" {
            println!(
                "{} {}: run 1 {} · run 2 {} · deviation {} · tolerance {} → {}",
                r.model,
                r.quantity,
                num(r.run1),
                num(r.run2),
                r.deviation
                    .map_or("—".to_string(), |d| format!("{:.4}%", 100.0 * d)),
                r.tolerance
                    .map_or("—".to_string(), |t| format!("{:.2}%", 100.0 * t)),
                r.verdict
            );
        }
    }
    println!("{}", an.decision);
    Ok(if an.decision == "capability proven" {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
