//! One module per subcommand: its clap arguments, one call into the library, and the
//! rendering of the typed result. [`exit`] decides the exit status for all of them.

pub mod analyze;
pub mod bench;
pub mod bench_scale;
pub mod convert;
pub mod demo;
pub mod eval;
pub mod exit;
pub mod imatrix;
pub mod inspect;
pub mod progress;
pub mod protocol;
pub mod quantize;
pub mod release;
pub mod run;
pub mod selftest;
pub mod sweep;
pub mod verify;

pub use exit::Status;
