//! The exit status of every subcommand, decided here and nowhere else:
//!
//! | code | meaning |
//! |---|---|
//! | 0 | success (GO, identical, complete, capability proven) |
//! | 1 | a check failed (NO-GO, a difference, a failed run, a decision short of proven) |
//! | 2 | usage or input error (the message names the file and the field) |
//! | 3 | runtime failure: llama.cpp refused to compute (context, decode, quantize), or the disk is full |
//! | 128 + N | stopped by signal N (SIGINT 130, SIGTERM 143) |

use std::process::ExitCode;

/// What a subcommand that finished reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// Exit 0.
    Success,
    /// Exit 1: the command ran and a check it owns failed.
    CheckFailed,
}

impl Status {
    /// `Success` when `pass`, else `CheckFailed`.
    pub fn from_pass(pass: bool) -> Status {
        if pass {
            Status::Success
        } else {
            Status::CheckFailed
        }
    }
}

/// A usage error (exit status 2).
#[derive(Debug)]
pub struct Usage(pub String);

impl std::fmt::Display for Usage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "usage: {}", self.0)
    }
}

impl std::error::Error for Usage {}

/// Shorthand for an `Err` holding a [`Usage`].
pub fn usage(msg: impl Into<String>) -> anyhow::Error {
    Usage(msg.into()).into()
}

/// Whether `e` is a runtime failure (exit 3) rather than a usage or input error: llama.cpp
/// failed to create a context, decode or quantize, or a write met a full disk or quota.
fn is_runtime_failure(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        matches!(
            c.downcast_ref::<llama_runtime::RuntimeError>(),
            Some(llama_runtime::RuntimeError::Eval { .. })
        ) || c
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.raw_os_error())
            .is_some_and(|n| n == libc::ENOSPC || n == libc::EDQUOT)
    })
}

/// The exit status of a subcommand's outcome; prints the error (with its causes) to stderr.
pub fn code(outcome: anyhow::Result<Status>) -> ExitCode {
    let sig = quantgate::interrupt::received();
    match outcome {
        Ok(Status::Success) => ExitCode::SUCCESS,
        // A command that stopped between units on a signal (`run`) reports the signal.
        Ok(Status::CheckFailed) => sig.map_or(ExitCode::from(1), signal_code),
        Err(e) => {
            eprintln!("error: {e:#}");
            match sig {
                Some(s) => signal_code(s),
                None if is_runtime_failure(&e) => ExitCode::from(3),
                None => ExitCode::from(2),
            }
        }
    }
}

/// 128 + signal, as shells report a command stopped by it.
fn signal_code(sig: i32) -> ExitCode {
    ExitCode::from((128 + sig).clamp(0, 255) as u8)
}
