//! Running a measurement as a child process so its peak RSS is its own: `wait4` returns the
//! child's `rusage` (`ru_maxrss`, KiB on Linux; user and system time) together with its exit
//! status. The one place that spawns and reaps measured children (`bench`, `run`).

use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde::Serialize;

/// What a child process used.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Measured {
    /// Exit code (`None` if killed by a signal).
    pub exit_code: Option<i32>,
    /// Wall time, seconds.
    pub wall_s: f64,
    /// Peak resident set size, KiB (`ru_maxrss`). Linux carries the parent's high-water mark
    /// into a spawned child's at `exec` (`eval::record::peak_rss_self_kib` says why), so this
    /// is the child's own peak only when the parent is smaller: the benches and runners that
    /// use it are small processes; `release` reads the child's own record instead.
    pub max_rss_kib: u64,
    /// User + system CPU time, seconds.
    #[serde(skip)]
    pub cpu_s: f64,
}

/// Spawns `cmd`, waits for it with `wait4`, and returns its wall time, exit code and peak RSS.
///
/// Errors: the command cannot be spawned or waited for.
pub fn run_measured(cmd: &mut Command) -> Result<Measured> {
    run(cmd, None)
}

/// As [`run_measured`], polling `should_stop(pid)` every 50 ms while the child runs: once it
/// returns true the child gets SIGTERM, and SIGKILL if it is still running 10 s later. The
/// caller records why it asked (the child's exit status shows the signal).
pub fn run_watched(
    cmd: &mut Command,
    should_stop: &mut dyn FnMut(libc::pid_t) -> bool,
) -> Result<Measured> {
    run(cmd, Some(should_stop))
}

fn run(
    cmd: &mut Command,
    mut watch: Option<&mut dyn FnMut(libc::pid_t) -> bool>,
) -> Result<Measured> {
    let t0 = Instant::now();
    let child = cmd
        .spawn()
        .with_context(|| format!("cannot start {cmd:?}"))?;
    let pid = child.id() as libc::pid_t;
    // Without a watcher, block in wait4; with one, poll.
    let flags = if watch.is_some() { libc::WNOHANG } else { 0 };
    let mut killed_at: Option<Instant> = None;
    let mut stopping = false;
    let (status, usage) = loop {
        let mut status: libc::c_int = 0;
        // SAFETY: zeroed rusage is a valid out-parameter; pid is our own unwaited child. We
        // never call Child::wait, so the pid is reaped exactly once, here.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        let rc = unsafe { libc::wait4(pid, &mut status, flags, &mut usage) };
        if rc == pid {
            break (status, usage);
        }
        if rc < 0 {
            bail!(
                "wait4 on {cmd:?} failed: {}",
                std::io::Error::last_os_error()
            );
        }
        let w = watch.as_mut().expect("WNOHANG only with a watcher");
        if !stopping && w(pid) {
            stopping = true;
            // SAFETY: signalling our own unreaped child.
            unsafe { libc::kill(pid, libc::SIGTERM) };
            killed_at = Some(Instant::now());
        } else if killed_at.is_some_and(|k| k.elapsed() > Duration::from_secs(10)) {
            // SAFETY: as above; it ignored SIGTERM for 10 s.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            killed_at = None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let exit_code = if libc::WIFEXITED(status) {
        Some(libc::WEXITSTATUS(status))
    } else {
        None
    };
    Ok(Measured {
        exit_code,
        wall_s: t0.elapsed().as_secs_f64(),
        max_rss_kib: usage.ru_maxrss.max(0) as u64,
        cpu_s: tv_s(usage.ru_utime) + tv_s(usage.ru_stime),
    })
}

/// A measured child's output.
#[derive(Clone, Debug)]
pub struct Captured {
    /// Wall time, peak RSS, exit code.
    pub measured: Measured,
    /// Its stdout.
    pub stdout: String,
    /// Its stderr.
    pub stderr: String,
}

/// As [`run_measured`], with stdout and stderr captured through files in `dir` (pipes could
/// fill and stall a child that writes more than a pipe holds before exiting).
///
/// Errors: the command cannot be spawned, or it exits other than 0 (the last 5 lines of its
/// stderr and stdout named).
pub fn run_captured(cmd: &mut Command, dir: &std::path::Path) -> Result<Captured> {
    let (o, e) = (dir.join("stdout"), dir.join("stderr"));
    cmd.stdout(std::fs::File::create(&o)?)
        .stderr(std::fs::File::create(&e)?);
    let measured = run_measured(cmd)?;
    let stdout = std::fs::read_to_string(&o).unwrap_or_default();
    let stderr = std::fs::read_to_string(&e).unwrap_or_default();
    if measured.exit_code != Some(0) {
        let both = format!("{stdout}{stderr}");
        let lines: Vec<&str> = both.lines().collect();
        bail!(
            "{cmd:?} failed ({measured:?}): {}",
            lines[lines.len().saturating_sub(5)..].join("\n")
        );
    }
    Ok(Captured {
        measured,
        stdout,
        stderr,
    })
}

fn tv_s(t: libc::timeval) -> f64 {
    t.tv_sec as f64 + t.tv_usec as f64 * 1e-6
}

/// CPU seconds (user + system) of a running process so far, from `/proc/PID/stat` (0 when it
/// cannot be read).
pub fn proc_cpu_s(pid: libc::pid_t) -> f64 {
    let Ok(s) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0.0;
    };
    // Fields after the parenthesised command name; utime and stime are fields 14 and 15.
    let after = s.rsplit_once(')').map_or("", |x| x.1);
    let f: Vec<&str> = after.split_whitespace().collect();
    // SAFETY: sysconf has no preconditions.
    let tck = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    let t = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    (t(11) + t(12)) / tck
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_and_a_stopped_child() {
        let m = run_measured(Command::new("sh").args(["-c", "exit 3"])).unwrap();
        assert_eq!(m.exit_code, Some(3));
        let mut polls = 0;
        let m = run_watched(Command::new("sleep").arg("30"), &mut |_| {
            polls += 1;
            polls > 2
        })
        .unwrap();
        // Killed by SIGTERM: no exit code, and well before 30 s.
        assert_eq!(m.exit_code, None);
        assert!(m.wall_s < 10.0, "{}", m.wall_s);
    }
}
