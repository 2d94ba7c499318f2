//! `bench eval`: pp512 and tg128 of `eval bench` next to llama-bench on the same file and
//! settings. Each round runs both arms as child processes of their own (peak RSS measured),
//! ours first, then the peer; rounds alternate the arms in one time window.

use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result};
use serde_json::Value;

use crate::child::{run_captured, Measured};
use crate::threads::Threads;

/// One arm's figures in one round.
#[derive(Clone, Debug)]
pub struct SpeedRun {
    /// Wall time and peak RSS of the whole child.
    pub measured: Measured,
    /// Mean tokens/s of the pp test (`avg_ts`, over `-r` repetitions).
    pub pp_ts: f64,
    /// Mean tokens/s of the tg test.
    pub tg_ts: f64,
}

/// Both arms, one entry per round.
#[derive(Clone, Debug)]
pub struct SpeedBench {
    /// `quantgate eval bench`.
    pub ours: Vec<SpeedRun>,
    /// `llama-bench -o json`.
    pub peer: Vec<SpeedRun>,
}

/// Runs `rounds` rounds of both arms: pp`n_prompt` and tg`n_gen`, `reps` repetitions per
/// child, `threads` threads.
///
/// Errors: a child cannot start or fails, or its JSON lacks a test.
pub fn run(
    exe: &Path,
    peer: &Path,
    model: &Path,
    (n_prompt, n_gen): (usize, usize),
    (reps, rounds, threads): (usize, usize, Threads),
) -> Result<SpeedBench> {
    let tmp = tempfile::tempdir()?;
    let common = |c: &mut Command| {
        c.arg("-p")
            .arg(n_prompt.to_string())
            .arg("-n")
            .arg(n_gen.to_string())
            .arg("-r")
            .arg(reps.to_string())
            .arg("-t")
            .arg(threads.to_string());
    };
    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        let json = tmp.path().join("ours.json");
        let mut c = Command::new(exe);
        c.args(["eval", "bench"])
            .arg(model)
            .arg("--json")
            .arg(&json);
        common(&mut c);
        let measured = run_captured(&mut c, tmp.path())?.measured;
        let v: Value = serde_json::from_slice(&std::fs::read(&json)?)?;
        let rows = v["result"]["rows"].as_array().cloned().unwrap_or_default();
        let ts = |t: &str| avg_ts(&rows, |r| r["test"] == t);
        ours.push(SpeedRun {
            measured,
            pp_ts: ts(&format!("pp{n_prompt}")).context("eval bench: no pp row")?,
            tg_ts: ts(&format!("tg{n_gen}")).context("eval bench: no tg row")?,
        });
        let mut c = Command::new(peer);
        c.arg("-m").arg(model).args(["-o", "json"]);
        common(&mut c);
        let out = run_captured(&mut c, tmp.path())?;
        let measured = out.measured;
        let rows: Vec<Value> =
            serde_json::from_str(&out.stdout).context("llama-bench -o json: not a JSON array")?;
        let ts = |p: usize, g: usize| avg_ts(&rows, |r| r["n_prompt"] == p && r["n_gen"] == g);
        theirs.push(SpeedRun {
            measured,
            pp_ts: ts(n_prompt, 0).context("llama-bench: no pp row")?,
            tg_ts: ts(0, n_gen).context("llama-bench: no tg row")?,
        });
    }
    Ok(SpeedBench { ours, peer: theirs })
}

fn avg_ts(rows: &[Value], pick: impl Fn(&Value) -> bool) -> Option<f64> {
    rows.iter().find(|r| pick(r))?["avg_ts"].as_f64()
}
