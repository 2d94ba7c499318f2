//! The local executor (`quantgate sweep run DIR --jobs N`): runs each ready task as a child
//! `quantgate sweep task DIR --index I`, at most N at a time, in index order. Resumable: a
//! task with a final receipt is skipped; one without (never run, interrupted, folder lost) or
//! with a runtime failure runs again. Within one run a runtime failure is retried once, as the
//! Slurm script and the Job's `podFailurePolicy` retry it.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{bail, Context, Result};

use super::plan::Plan;
use super::receipt::{self, Receipt, TaskState};

/// Tries of one task within one `sweep run` (the first and one retry).
pub const MAX_TRIES: u32 = 2;

/// What the executor reports as it goes.
#[derive(Clone, Debug)]
pub enum Event {
    Started {
        index: usize,
        id: String,
    },
    Finished {
        index: usize,
        receipt: Option<Box<Receipt>>,
        exit: Option<i32>,
    },
}

/// How the local run ended.
#[derive(Clone, Debug, Default)]
pub struct LocalSummary {
    /// Tasks whose final receipt was already there.
    pub already_final: usize,
    /// Receipts of the attempts this run made, in the order they ended.
    pub ran: Vec<Receipt>,
    /// Tasks that could not run: (task id, the dependency that did not pass).
    pub blocked: Vec<(String, String)>,
    /// Tasks that ended without a final state after every try.
    pub unfinished: Vec<String>,
}

enum Slot {
    Final(TaskState),
    Blocked(String),
    Waiting,
}

fn slot(dir: &Path, plan: &Plan, i: usize, tries: &BTreeMap<usize, u32>) -> Result<Slot> {
    let t = &plan.tasks[i];
    if let Some(r) = receipt::read_for(dir, t)? {
        if r.state.is_final() {
            return Ok(Slot::Final(r.state));
        }
    }
    if tries.get(&i).copied().unwrap_or(0) >= MAX_TRIES {
        return Ok(Slot::Final(TaskState::RuntimeFailure));
    }
    for &d in &t.deps {
        match slot(dir, plan, d, tries)? {
            Slot::Final(TaskState::Passed) => {}
            Slot::Final(_) => return Ok(Slot::Blocked(plan.tasks[d].id.clone())),
            Slot::Blocked(_) => return Ok(Slot::Blocked(plan.tasks[d].id.clone())),
            Slot::Waiting => return Ok(Slot::Waiting),
        }
    }
    Ok(Slot::Waiting)
}

fn deps_passed(dir: &Path, plan: &Plan, i: usize) -> Result<bool> {
    for &d in &plan.tasks[i].deps {
        match receipt::read_for(dir, &plan.tasks[d])? {
            Some(r) if r.state == TaskState::Passed => {}
            _ => return Ok(false),
        }
    }
    Ok(true)
}

/// The exclusive lock of a local run (`DIR/.run.lock`, flock): two `sweep run`s of one folder
/// would clear each other's task folders.
///
/// Errors: another `sweep run` of this folder is running.
fn lock_run(dir: &Path) -> Result<std::fs::File> {
    let p = dir.join(".run.lock");
    crate::paths::try_lock(&p)?.ok_or_else(|| {
        anyhow::anyhow!(
            "{}: another `sweep run` of this folder is running",
            p.display()
        )
    })
}

/// Runs the plan in `dir` with at most `jobs` tasks at once.
///
/// Errors: no plan; a child that cannot be started; a signal (the running tasks get it too,
/// end as interrupted, and run again next time).
pub fn run(dir: &Path, jobs: usize, on_event: &mut dyn FnMut(Event)) -> Result<LocalSummary> {
    let plan = Plan::load(dir)?;
    let _lock = lock_run(dir)?;
    let exe = std::env::current_exe().context("cannot locate the quantgate binary")?;
    let mut sum = LocalSummary::default();
    let mut tries: BTreeMap<usize, u32> = BTreeMap::new();
    let mut running: BTreeMap<usize, Child> = BTreeMap::new();
    let mut forwarded = false;
    for t in &plan.tasks {
        if receipt::read_for(dir, t)?.is_some_and(|r| r.state.is_final()) {
            sum.already_final += 1;
        }
    }
    loop {
        if crate::interrupt::received().is_none() {
            for i in 0..plan.tasks.len() {
                if running.len() >= jobs.max(1) {
                    break;
                }
                if running.contains_key(&i)
                    || !matches!(slot(dir, &plan, i, &tries)?, Slot::Waiting)
                {
                    continue;
                }
                if !deps_passed(dir, &plan, i)? {
                    continue;
                }
                *tries.entry(i).or_default() += 1;
                on_event(Event::Started {
                    index: i,
                    id: plan.tasks[i].id.clone(),
                });
                let child = Command::new(&exe)
                    .args(["sweep", "task"])
                    .arg(dir)
                    .args(["--index", &i.to_string(), "--executor", "local"])
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .spawn()
                    .with_context(|| format!("cannot start task {i}"))?;
                running.insert(i, child);
            }
        }
        if running.is_empty() {
            break;
        }
        if !dir.join("plan.json").is_file() {
            // The sweep folder went away under the run: stop starting tasks (those running
            // find their folders gone and end).
            return Err(super::task::FolderLost(dir.to_path_buf()).into());
        }
        if crate::interrupt::received().is_some() && !forwarded {
            // A signal sent to this process alone (kill PID) reaches the tasks too, so that
            // each records its interruption instead of running on unobserved.
            for c in running.values() {
                // SAFETY: signalling our own unreaped child.
                unsafe { libc::kill(c.id() as libc::pid_t, libc::SIGTERM) };
            }
            forwarded = true;
        }
        std::thread::sleep(Duration::from_millis(100));
        let mut ended = Vec::new();
        for (&i, c) in running.iter_mut() {
            if let Some(st) = c.try_wait()? {
                ended.push((i, st.code()));
            }
        }
        for (i, exit) in ended {
            running.remove(&i);
            let r = receipt::read_for(dir, &plan.tasks[i]).ok().flatten();
            if let Some(r) = &r {
                sum.ran.push(r.clone());
            }
            on_event(Event::Finished {
                index: i,
                receipt: r.map(Box::new),
                exit,
            });
        }
    }
    if let Some(sig) = crate::interrupt::received() {
        bail!(
            "{} received: the running tasks were stopped and run again next time",
            crate::interrupt::signal_name(sig)
        );
    }
    for i in 0..plan.tasks.len() {
        match slot(dir, &plan, i, &tries)? {
            Slot::Blocked(d) => sum.blocked.push((plan.tasks[i].id.clone(), d)),
            Slot::Final(s) if !s.is_final() => sum.unfinished.push(plan.tasks[i].id.clone()),
            Slot::Waiting => sum.unfinished.push(plan.tasks[i].id.clone()),
            Slot::Final(_) => {}
        }
    }
    Ok(sum)
}
