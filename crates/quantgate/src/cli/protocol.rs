//! `quantgate protocol check P.toml`: validates a protocol and prints its freeze id.

use std::path::PathBuf;

use clap::Subcommand;
use quantgate::protocol;

use super::Status;

/// `protocol` subcommands.
#[derive(Subcommand)]
pub enum ProtocolCommand {
    /// Validate a protocol file and print its sha256 (the freeze id).
    Check {
        /// The protocol TOML.
        file: PathBuf,
    },
}

/// `protocol check`: exit 0 valid, 2 invalid.
pub fn run(cmd: ProtocolCommand) -> anyhow::Result<Status> {
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
    Ok(Status::Success)
}
