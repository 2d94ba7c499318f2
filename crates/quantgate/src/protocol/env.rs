//! Environment facts recorded with every run: they explain differences between two runs.

use crate::threads::Threads;
use serde::Serialize;

/// Where and with what a run executed.
#[derive(Clone, Debug, Serialize)]
pub struct Environment {
    /// `quantgate X.Y.Z`.
    pub quantgate: String,
    /// `git describe --always --dirty` of the source tree at build time ("unknown" outside git).
    pub git_rev: String,
    /// The pinned llama.cpp build.
    pub llama_cpp: String,
    /// `/proc/cpuinfo` model name.
    pub cpu_model: String,
    /// Logical CPUs online.
    pub cpus: usize,
    /// Threads the protocol pins.
    pub threads: Threads,
    /// `uname -srm` and the distribution's PRETTY_NAME.
    pub os: String,
    /// Host name (who ran it is `operator`).
    pub hostname: String,
}

fn first_match(text: &str, key: &str) -> Option<String> {
    text.lines()
        .find(|l| l.starts_with(key))
        .and_then(|l| l.split_once([':', '=']).map(|x| x.1))
        .map(|v| v.trim().trim_matches('"').to_string())
}

/// Collects the facts (missing ones read "unknown").
pub fn collect(threads: Threads) -> Environment {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let osr = std::fs::read_to_string("/etc/os-release").unwrap_or_default();
    // SAFETY: zeroed utsname is a valid out-parameter.
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    let uname = if unsafe { libc::uname(&mut u) } == 0 {
        let f = |b: &[libc::c_char]| {
            let bytes: Vec<u8> = b
                .iter()
                .take_while(|c| **c != 0)
                .map(|c| *c as u8)
                .collect();
            String::from_utf8_lossy(&bytes).into_owned()
        };
        (
            format!("{} {} {}", f(&u.sysname), f(&u.release), f(&u.machine)),
            f(&u.nodename),
        )
    } else {
        ("unknown".into(), "unknown".into())
    };
    Environment {
        quantgate: format!("quantgate {}", env!("CARGO_PKG_VERSION")),
        git_rev: env!("QUANTGATE_GIT_REV").to_string(),
        llama_cpp: llama_runtime::build_info().to_string(),
        cpu_model: first_match(&cpuinfo, "model name").unwrap_or_else(|| "unknown".into()),
        cpus: std::thread::available_parallelism().map_or(0, |n| n.get()),
        threads,
        os: format!(
            "{} · {}",
            uname.0,
            first_match(&osr, "PRETTY_NAME").unwrap_or_else(|| "unknown".into())
        ),
        hostname: uname.1,
    }
}
