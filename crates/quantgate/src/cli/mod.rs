//! Subcommand groups of the `quantgate` binary that have grown beyond a few lines.

pub mod bench;
pub mod eval;
pub mod protocol;
