//! `quantgate sweep submit DIR --slurm`: the plan as one sbatch array, one index per task.
//!
//! The array is submitted held (`--hold`); then each index gets its own memory and CPUs
//! (`scontrol update JobId=J_I MinMemoryNode=… NumCPUs=…`) and its dependencies as `afterok` on
//! the indices it waits for (`Dependency=afterok:J_D:…`), and the array is released. A task
//! whose dependency ended otherwise is cancelled by Slurm (`--kill-on-invalid-dep=yes`), and a
//! `collect` job runs after the whole array (`afterany`). Measured on Debian's slurm-wlm 22.05
//! (docs/sweep.md): per-index updates of a held array, `DependencyNeverSatisfied` cancels.
//!
//! The tasks run the binary that submitted them (same path on every node), not an image, so
//! their reports name no image digest.
//!
//! Exit codes: 0 GO, 1 NO-GO and 2 input error are final; 3 (runtime failure, a signal) is
//! requeued once by the script itself (`scontrol requeue` while `SLURM_RESTART_COUNT` is 0).
//! Slurm holds a requeued job back for its fixed delay (about 2 minutes in 22.05) before it
//! runs again.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use serde::{Deserialize, Serialize};

use super::plan::Plan;

/// `DIR/slurm/submitted.json`: what was submitted.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
pub struct Submitted {
    pub array_job: String,
    pub collect_job: String,
    pub partition: Option<String>,
    pub script: String,
}

/// Runs `cmd` with a time limit; its output.
///
/// Errors: it cannot start, or runs past `limit` (killed).
pub fn run_limited(cmd: &mut Command, limit: Duration) -> Result<Output> {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("cannot start {cmd:?}"))?;
    let t0 = Instant::now();
    while child.try_wait()?.is_none() {
        if t0.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            bail!("{cmd:?}: no answer in {} s", limit.as_secs());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(child.wait_with_output()?)
}

fn checked(cmd: &mut Command) -> Result<String> {
    let o = run_limited(cmd, Duration::from_secs(60))?;
    if !o.status.success() {
        bail!(
            "{cmd:?} failed ({}): {}",
            o.status,
            String::from_utf8_lossy(&o.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&o.stdout).trim().to_string())
}

/// The sbatch script of the array (`DIR` and `exe` absolute).
pub fn script(plan: &Plan, dir: &Path, exe: &Path, partition: Option<&str>) -> String {
    let n = plan.tasks.len();
    let (cpus, mem) = plan.largest_needs();
    let q = |p: &Path| shell_quote(&p.display().to_string());
    let mut s = String::from("#!/bin/bash\n");
    s += &format!("#SBATCH --job-name=qg-{}\n", plan.sweep_id);
    s += &format!("#SBATCH --array=0-{}\n", n.saturating_sub(1));
    s += &format!("#SBATCH --cpus-per-task={cpus}\n#SBATCH --mem={mem}M\n");
    if let Some(p) = partition {
        s += &format!("#SBATCH --partition={p}\n");
    }
    s += &format!("#SBATCH --chdir={}\n", dir.display());
    s += &format!("#SBATCH --output={}/slurm/%A_%a.out\n", dir.display());
    s += "#SBATCH --open-mode=append\n#SBATCH --requeue\n#SBATCH --kill-on-invalid-dep=yes\n";
    s += "# Written by `quantgate sweep submit --slurm`: one index per task of plan.json; each\n";
    s += "# index's memory, CPUs and afterok dependencies are set per index after submission.\n";
    s += "set -u\n";
    s += "# A trapped TERM (scancel --signal=TERM) lets the task stop its command, record the\n";
    s += "# interruption and exit 3 before this shell decides.\n";
    s += "trap 'true' TERM INT\n";
    s += &format!(
        "{} sweep task {} --index \"$SLURM_ARRAY_TASK_ID\" --executor slurm --job \"${{SLURM_ARRAY_JOB_ID}}_${{SLURM_ARRAY_TASK_ID}}\" &\n",
        q(exe),
        q(dir)
    );
    s += "pid=$!\nwhile kill -0 \"$pid\" 2>/dev/null; do wait \"$pid\"; done\nwait \"$pid\"; rc=$?\n";
    s += "echo \"quantgate sweep task $SLURM_ARRAY_TASK_ID: exit $rc (restart ${SLURM_RESTART_COUNT:-0})\"\n";
    s += "# 3: a runtime failure or a signal. Requeued once; 0, 1 and 2 are final.\n";
    s += "if [ \"$rc\" -eq 3 ] && [ \"${SLURM_RESTART_COUNT:-0}\" -lt 1 ]; then\n";
    s += "  scontrol requeue \"$SLURM_JOB_ID\"\nfi\nexit \"$rc\"\n";
    s
}

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// Checks that a Slurm controller answers (`sinfo`).
///
/// Errors: `sinfo` is not installed, or the controller does not answer in 20 s.
pub fn reachable() -> Result<()> {
    let o = run_limited(
        Command::new("sinfo").args(["-h", "-o", "%P"]),
        Duration::from_secs(20),
    )
    .map_err(|e| anyhow!("no Slurm scheduler reachable: {e:#}"))?;
    if !o.status.success() {
        bail!(
            "no Slurm scheduler reachable: sinfo failed ({}): {}",
            o.status,
            String::from_utf8_lossy(&o.stderr).trim()
        );
    }
    Ok(())
}

/// Writes `DIR/slurm/sweep.sbatch`, submits it held, sets each index's needs and
/// dependencies, releases it, and submits the collect job. Returns what was submitted
/// (also written to `DIR/slurm/submitted.json`, last).
///
/// Errors: no scheduler reachable (nothing written); sbatch or scontrol refusing (the array
/// is cancelled again, `submitted.json` is not written).
pub fn submit(dir: &Path, partition: Option<&str>) -> Result<Submitted> {
    let plan = Plan::load(dir)?;
    reachable()?;
    if dir.join("slurm/submitted.json").exists() {
        bail!(
            "{}: already submitted (see slurm/submitted.json); `sweep status` follows it",
            dir.display()
        );
    }
    let dir = dir
        .canonicalize()
        .with_context(|| dir.display().to_string())?;
    let exe = std::env::current_exe().context("cannot locate the quantgate binary")?;
    let path: PathBuf = dir.join("slurm").join("sweep.sbatch");
    crate::paths::write_atomic(&path, script(&plan, &dir, &exe, partition).as_bytes())?;
    let array = checked(
        Command::new("sbatch")
            .args(["--parsable", "--hold"])
            .arg(&path),
    )?;
    let array = array.split(';').next().unwrap_or("").to_string();
    let configure = || -> Result<String> {
        for t in &plan.tasks {
            let mut c = Command::new("scontrol");
            c.args(["update", &format!("JobId={array}_{}", t.index)]);
            c.arg(format!("MinMemoryNode={}", t.needs.mem_mib().max(1)));
            c.arg(format!("NumCPUs={}", t.needs.cpus.max(1)));
            if !t.deps.is_empty() {
                let d: Vec<String> = t.deps.iter().map(|d| format!("{array}_{d}")).collect();
                c.arg(format!("Dependency=afterok:{}", d.join(":")));
            }
            checked(&mut c)?;
        }
        checked(Command::new("scontrol").args(["release", &array]))?;
        let log = dir.join("slurm").join("collect-%j.out");
        let mut c = Command::new("sbatch");
        c.args([
            "--parsable",
            "--job-name",
            &format!("qg-{}-collect", plan.sweep_id),
        ]);
        c.arg(format!("--dependency=afterany:{array}"));
        c.arg(format!("--output={}", log.display()));
        if let Some(p) = partition {
            c.arg(format!("--partition={p}"));
        }
        c.arg("--wrap").arg(format!(
            "{} sweep collect {}",
            shell_quote(&exe.display().to_string()),
            shell_quote(&dir.display().to_string())
        ));
        checked(&mut c)
    };
    let collect = match configure() {
        Ok(c) => c,
        Err(e) => {
            let _ = checked(Command::new("scancel").arg(&array));
            return Err(e.context(format!("array job {array} cancelled again")));
        }
    };
    let s = Submitted {
        array_job: array,
        collect_job: collect.split(';').next().unwrap_or("").to_string(),
        partition: partition.map(String::from),
        script: "slurm/sweep.sbatch".into(),
    };
    crate::paths::write_atomic(
        &dir.join("slurm/submitted.json"),
        &serde_json::to_vec_pretty(&s)?,
    )?;
    Ok(s)
}

/// What the scheduler says of each index of a submitted sweep (`squeue`: pending, running,
/// with the reason); empty when the sweep was not submitted to Slurm or nothing is queued.
///
/// Errors: `submitted.json` unreadable; squeue failing.
pub fn queue(dir: &Path) -> Result<BTreeMap<usize, String>> {
    let p = dir.join("slurm/submitted.json");
    if !crate::paths::present(&p)? {
        return Ok(BTreeMap::new());
    }
    let s: Submitted = serde_json::from_str(&crate::paths::read_text_capped(&p, 1 << 20)?)
        .with_context(|| format!("{}: malformed", p.display()))?;
    let out =
        checked(Command::new("squeue").args(["-h", "-r", "-j", &s.array_job, "-o", "%K|%T|%r"]))?;
    Ok(parse_squeue(&out))
}

/// `squeue -h -r -o '%K|%T|%r'` lines → index → `STATE (reason)`.
pub fn parse_squeue(out: &str) -> BTreeMap<usize, String> {
    out.lines()
        .filter_map(|l| {
            let mut f = l.split('|');
            let i = f.next()?.trim().parse().ok()?;
            let state = f.next()?.trim();
            let reason = f.next().unwrap_or("").trim();
            Some((
                i,
                if reason.is_empty() || reason == "None" {
                    state.to_string()
                } else {
                    format!("{state} ({reason})")
                },
            ))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn squeue_lines() {
        let m = parse_squeue("3|PENDING|Dependency\n0|RUNNING|None\nx|y|z\n");
        assert_eq!(m.get(&3).map(String::as_str), Some("PENDING (Dependency)"));
        assert_eq!(m.get(&0).map(String::as_str), Some("RUNNING"));
        assert_eq!(m.len(), 2);
    }

    #[test]
    fn quoting() {
        assert_eq!(shell_quote("a'b c"), "'a'\\''b c'");
    }
}
