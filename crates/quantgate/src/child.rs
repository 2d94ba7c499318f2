//! Running a measurement as a child process so its peak RSS is its own: `wait4` returns the
//! child's `rusage` (`ru_maxrss`, KiB on Linux) together with its exit status.

use std::process::Command;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use serde::Serialize;

/// What a child process used.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Measured {
    /// Exit code (`None` if killed by a signal).
    pub exit_code: Option<i32>,
    /// Wall time, seconds.
    pub wall_s: f64,
    /// Peak resident set size, KiB (`ru_maxrss`).
    pub max_rss_kib: u64,
}

/// Spawns `cmd`, waits for it with `wait4`, and returns its wall time, exit code and peak RSS.
///
/// Errors: the command cannot be spawned or waited for.
pub fn run_measured(cmd: &mut Command) -> Result<Measured> {
    let t0 = Instant::now();
    let child = cmd
        .spawn()
        .with_context(|| format!("cannot start {cmd:?}"))?;
    let pid = child.id() as libc::pid_t;
    let mut status: libc::c_int = 0;
    // SAFETY: zeroed rusage is a valid out-parameter; pid is our own unwaited child. We never
    // call Child::wait, so the pid is reaped exactly once, here.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    if rc != pid {
        bail!(
            "wait4 on {cmd:?} failed: {}",
            std::io::Error::last_os_error()
        );
    }
    let exit_code = if libc::WIFEXITED(status) {
        Some(libc::WEXITSTATUS(status))
    } else {
        None
    };
    Ok(Measured {
        exit_code,
        wall_s: t0.elapsed().as_secs_f64(),
        max_rss_kib: usage.ru_maxrss.max(0) as u64,
    })
}
