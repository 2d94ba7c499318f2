//! Ctrl-C / SIGTERM as an orderly stop: the handler only records the signal; long loops call
//! [`check`] between units of work and return an error, so temp files are dropped (removed) and
//! no final output is ever half written.

use std::sync::atomic::{AtomicI32, Ordering};

static SIGNAL: AtomicI32 = AtomicI32::new(0);

extern "C" fn record(sig: libc::c_int) {
    // Only an atomic store: async-signal-safe.
    SIGNAL.store(sig, Ordering::SeqCst);
}

/// Installs the recording handler for SIGINT and SIGTERM (idempotent).
pub fn install() {
    // SAFETY: `record` is async-signal-safe (one atomic store) and has the C signature.
    unsafe {
        libc::signal(
            libc::SIGINT,
            record as extern "C" fn(libc::c_int) as libc::sighandler_t,
        );
        libc::signal(
            libc::SIGTERM,
            record as extern "C" fn(libc::c_int) as libc::sighandler_t,
        );
    }
}

/// The signal received since [`install`], if any (SIGINT = 2, SIGTERM = 15).
pub fn received() -> Option<i32> {
    match SIGNAL.load(Ordering::SeqCst) {
        0 => None,
        s => Some(s),
    }
}

/// Error returned by [`check`] once a signal has arrived.
#[derive(Debug, thiserror::Error)]
#[error("interrupted by {}", signal_name(*.0))]
pub struct Interrupted(pub i32);

/// `SIGINT`/`SIGTERM`/`signal N`.
pub fn signal_name(sig: i32) -> String {
    match sig {
        libc::SIGINT => "SIGINT".into(),
        libc::SIGTERM => "SIGTERM".into(),
        s => format!("signal {s}"),
    }
}

/// Errors with [`Interrupted`] if a signal has arrived.
pub fn check() -> Result<(), Interrupted> {
    match received() {
        Some(s) => Err(Interrupted(s)),
        None => Ok(()),
    }
}
