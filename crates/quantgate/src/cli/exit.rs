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
    /// An exit status a task's receipt decided (`sweep task`: 0–3 as above, a signal
    /// reported as 3 so that every executor retries it once).
    Code(u8),
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
/// failed to create a context, decode or quantize, a write met a full disk or quota, or a step
/// refused to start for want of disk space ([`quantgate::disk::NoSpace`]).
fn is_runtime_failure(e: &anyhow::Error) -> bool {
    // tempfile wraps write errors with the path: the kind survives, the raw errno does not.
    let disk_full = |io: &std::io::Error| {
        use std::io::ErrorKind::{QuotaExceeded, StorageFull};
        matches!(io.kind(), StorageFull | QuotaExceeded)
            || io
                .raw_os_error()
                .is_some_and(|n| n == libc::ENOSPC || n == libc::EDQUOT)
    };
    e.chain().any(|c| {
        matches!(
            c.downcast_ref::<llama_runtime::RuntimeError>(),
            Some(llama_runtime::RuntimeError::Eval { .. })
        ) || c.is::<quantgate::disk::NoSpace>()
            || c.is::<quantgate::sweep::task::FolderLost>()
            || c.is::<quantgate::sweep::task::Busy>()
            || c.downcast_ref::<std::io::Error>().is_some_and(disk_full)
            // The GGUF writer's I/O errors carry the path and keep the cause as a field.
            || matches!(c.downcast_ref::<gguf::Error>(), Some(gguf::Error::Io { cause, .. }) if disk_full(cause))
    })
}

/// The exit status of `outcome` when signal `sig` (if any) was received.
fn status_byte(outcome: &anyhow::Result<Status>, sig: Option<i32>) -> u8 {
    // 128 + signal, as shells report a command stopped by it.
    let signal = |s: i32| (128 + s).clamp(0, 255) as u8;
    match (outcome, sig) {
        (Ok(Status::Success), _) => 0,
        (Ok(Status::Code(c)), _) => *c,
        // A command that stopped between units on a signal (`run`) reports the signal.
        (Ok(Status::CheckFailed), Some(s)) | (Err(_), Some(s)) => signal(s),
        (Ok(Status::CheckFailed), None) => 1,
        (Err(e), None) if is_runtime_failure(e) => 3,
        (Err(_), None) => 2,
    }
}

/// The exit status of a subcommand's outcome; prints the error (with its causes) to stderr.
pub fn code(outcome: anyhow::Result<Status>) -> ExitCode {
    if let Err(e) = &outcome {
        eprintln!("error: {e:#}");
    }
    ExitCode::from(status_byte(&outcome, quantgate::interrupt::received()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use llama_runtime::RuntimeError;

    #[test]
    fn each_outcome_has_its_status() {
        let st = |o: anyhow::Result<Status>| status_byte(&o, None);
        assert_eq!(st(Ok(Status::Success)), 0);
        assert_eq!(st(Ok(Status::CheckFailed)), 1);
        assert_eq!(st(Err(usage("--reps 0"))), 2);
        // A file llama.cpp refuses to load is an input error; a refused computation is not.
        let load = RuntimeError::Load {
            path: "m.gguf".into(),
            log: "llama_model_load: error loading model".into(),
        };
        assert_eq!(st(Err(anyhow::Error::from(load).context("eval ppl"))), 2);
        let eval = RuntimeError::Eval {
            call: "llama_decode",
            detail: "returned 1".into(),
        };
        assert_eq!(st(Err(anyhow::Error::from(eval).context("eval ppl"))), 3);
        let full = std::io::Error::from_raw_os_error(libc::ENOSPC);
        assert_eq!(st(Err(anyhow::Error::from(full).context("out.gguf"))), 3);
        let full = gguf::Error::Io {
            path: "out.gguf".into(),
            cause: std::io::Error::from_raw_os_error(libc::ENOSPC),
        };
        assert_eq!(st(Err(full.into())), 3);
        let refused = quantgate::disk::NoSpace {
            what: "quantize".into(),
            dir: "out".into(),
            need: 2,
            free: 1,
        };
        assert_eq!(st(Err(anyhow::Error::from(refused).context("q.gguf"))), 3);
        assert_eq!(status_byte(&Ok(Status::CheckFailed), Some(15)), 143);
        assert_eq!(status_byte(&Err(usage("x")), Some(2)), 130);
        assert_eq!(status_byte(&Ok(Status::Success), Some(15)), 0);
        assert_eq!(status_byte(&Ok(Status::Code(3)), Some(15)), 3);
        let lost = quantgate::sweep::task::FolderLost("tasks/003-verify".into());
        assert_eq!(st(Err(anyhow::Error::from(lost).context("sweep task"))), 3);
    }
}
