//! A task's receipt (`tasks/NNN-…/receipt.json`): how its last attempt ended, where, with what
//! figures. Written atomically when an attempt ends; a task folder without one was never
//! finished (or was interrupted before it could be written) and runs again.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use super::file::TaskKind;
use super::plan::Task;
use crate::verify::Verdict;

/// How an attempt ended, from the exit status of its command ([`crate`]'s CLI contract: 0
/// success, 1 a check failed, 2 input error, 3 runtime failure, 128 + N signal N).
#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum TaskState {
    /// Exit 0: GO (verify, release), done (convert, quantize), complete (protocol).
    Passed,
    /// Exit 1: NO-GO, a differing re-quantization, a failed protocol run. Final.
    Failed,
    /// Exit 2: an input the command refused, naming the file and field. Final.
    InputError,
    /// Exit 3: llama.cpp refused to compute, the disk was full, the task folder vanished.
    /// Retried once.
    RuntimeFailure,
    /// Stopped by a signal (scancel, a preempted pod, Ctrl-C). Retried as a runtime failure.
    Interrupted,
}

impl TaskState {
    /// The state of a command that exited with `code` (`None`: killed by a signal).
    pub fn from_exit(code: Option<i32>) -> TaskState {
        match code {
            Some(0) => TaskState::Passed,
            Some(1) => TaskState::Failed,
            Some(2) => TaskState::InputError,
            Some(3) => TaskState::RuntimeFailure,
            _ => TaskState::Interrupted,
        }
    }

    /// Whether running again cannot change it (GO, NO-GO, input error).
    pub fn is_final(self) -> bool {
        matches!(
            self,
            TaskState::Passed | TaskState::Failed | TaskState::InputError
        )
    }

    /// `sweep task`'s exit status: the command's, with a signal reported as 3 so that every
    /// executor requeues it once (Slurm's script, the Job's `podFailurePolicy`).
    pub fn exit_code(self) -> u8 {
        match self {
            TaskState::Passed => 0,
            TaskState::Failed => 1,
            TaskState::InputError => 2,
            TaskState::RuntimeFailure | TaskState::Interrupted => 3,
        }
    }
}

/// Which executor ran an attempt.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum Executor {
    /// `quantgate sweep run`.
    Local,
    /// An sbatch array task.
    Slurm,
    /// A Kubernetes Indexed Job's pod.
    Kueue,
    /// `quantgate sweep task` by hand.
    Manual,
}

impl Executor {
    /// The name as receipts spell it.
    pub fn name(self) -> &'static str {
        match self {
            Executor::Local => "local",
            Executor::Slurm => "slurm",
            Executor::Kueue => "kueue",
            Executor::Manual => "manual",
        }
    }
}

impl std::str::FromStr for Executor {
    type Err = String;
    fn from_str(s: &str) -> Result<Executor, String> {
        [
            Executor::Local,
            Executor::Slurm,
            Executor::Kueue,
            Executor::Manual,
        ]
        .into_iter()
        .find(|e| e.name() == s)
        .ok_or_else(|| format!("{s:?}: one of local, slurm, kueue, manual"))
    }
}

/// A file a task wrote, hashed when it ended; dependents check it before reading it.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
pub struct OutputFile {
    /// Relative to the sweep folder.
    pub path: String,
    pub bytes: u64,
    pub sha256: String,
}

/// `receipt.json`.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
pub struct Receipt {
    pub index: usize,
    pub id: String,
    pub kind: TaskKind,
    pub state: TaskState,
    /// The command's exit code (`None` when a signal ended it).
    pub exit_code: Option<i32>,
    /// verify's and release's last line, when it is one.
    pub verdict: Option<Verdict>,
    /// 1 for the first attempt.
    pub attempt: u32,
    pub executor: Executor,
    /// Scheduler's id of the attempt (`SLURM_ARRAY_JOB_ID_SLURM_ARRAY_TASK_ID`, the pod name).
    pub job: Option<String>,
    pub host: String,
    /// The pinned CPU variant and threads the command ran with.
    pub cpu_variant: String,
    pub threads: i32,
    /// The image's digest when run in one.
    pub image_digest: Option<String>,
    pub started: String,
    pub finished: String,
    pub wall_s: f64,
    pub cpu_s: f64,
    pub max_rss_kib: u64,
    /// `quantgate ARGS…`, paths relative to the sweep folder.
    pub command: Vec<String>,
    pub outputs: Vec<OutputFile>,
    /// The figures that must not depend on the executor: verdict, gates, quality, bytes and
    /// hashes of what was written ([`super::figures`]).
    pub quality: BTreeMap<String, serde_json::Value>,
    /// The last line of stderr when the command did not pass.
    pub reason: Option<String>,
}

/// The receipt in `task_dir`, if one was written.
///
/// Errors: present but unreadable or malformed (naming the file).
pub fn read(task_dir: &Path) -> Result<Option<Receipt>> {
    let p = task_dir.join("receipt.json");
    if !crate::paths::present(&p)? {
        return Ok(None);
    }
    let text = crate::paths::read_text_capped(&p, 16 << 20)?;
    let r = serde_json::from_str(&text).with_context(|| format!("{}: malformed", p.display()))?;
    Ok(Some(r))
}

/// The receipt of task `t` in the sweep folder `dir`, checked to belong to it and to agree with
/// itself ([`check`]).
///
/// Errors: unreadable, malformed, or another task's or self-contradictory (naming the field).
pub fn read_for(dir: &Path, t: &Task) -> Result<Option<Receipt>> {
    let tdir = dir.join(&t.dir);
    let r = read(&tdir)?;
    if let Some(r) = &r {
        check(&tdir, t, r)?;
    }
    Ok(r)
}

/// Writes `r` into `task_dir` atomically.
pub fn write(task_dir: &Path, r: &Receipt) -> Result<()> {
    crate::paths::write_atomic(
        &task_dir.join("receipt.json"),
        &serde_json::to_vec_pretty(r)?,
    )
}

/// A receipt belongs to task `t` and agrees with itself: its index, id and kind are the
/// task's; its state is what its exit code says (a signal: interrupted); a passed convert or
/// quantize lists exactly the file it wrote.
///
/// Errors: the first disagreement, naming the receipt's file and field.
pub fn check(task_dir: &Path, t: &Task, r: &Receipt) -> Result<()> {
    let p = task_dir.join("receipt.json");
    let bad = |field: &str, what: String| anyhow::anyhow!("{}: {field}: {what}", p.display());
    if r.index != t.index || r.id != t.id || r.kind != t.kind {
        return Err(bad(
            "index/id/kind",
            format!("{} {} is not task {} {}", r.index, r.id, t.index, t.id),
        ));
    }
    let from_exit = TaskState::from_exit(r.exit_code);
    let consistent = r.state == from_exit
        || r.state == TaskState::Interrupted
        || (r.state == TaskState::InputError && r.exit_code.is_none());
    if !consistent {
        return Err(bad(
            "state",
            format!("{:?} with exit code {:?}", r.state, r.exit_code),
        ));
    }
    let verdict_ok = match (r.kind, r.state, r.verdict) {
        (TaskKind::Verify | TaskKind::Release, TaskState::Passed, v) => {
            v == Some(crate::verify::Verdict::Go)
        }
        (_, TaskState::Passed, Some(v)) => v == crate::verify::Verdict::Go,
        _ => true,
    };
    if !verdict_ok {
        return Err(bad(
            "verdict",
            format!("{:?} with state {:?}", r.verdict, r.state),
        ));
    }
    if r.state == TaskState::Passed {
        let want: Vec<String> = t.output().into_iter().collect();
        let have: Vec<&str> = r.outputs.iter().map(|o| o.path.as_str()).collect();
        let inside = r
            .outputs
            .iter()
            .all(|o| super::plan::is_inside(&o.path) && o.path.starts_with(&format!("{}/", t.dir)));
        if !inside || (!want.is_empty() && have != want) || (want.is_empty() && have.is_empty()) {
            return Err(bad(
                "outputs",
                format!("{have:?}, the task writes {want:?}"),
            ));
        }
    }
    Ok(())
}

/// Re-hashes every output a receipt lists. `Err` names the first that is missing or differs.
pub fn outputs(dir: &Path, r: &Receipt) -> Result<()> {
    for o in &r.outputs {
        let h = crate::hash::sha256_file(&dir.join(&o.path))
            .with_context(|| format!("output of {}", r.id))?;
        if h != o.sha256 {
            bail!(
                "{}: sha256 {h}, the receipt of {} says {}",
                dir.join(&o.path).display(),
                r.id,
                o.sha256
            );
        }
    }
    Ok(())
}
