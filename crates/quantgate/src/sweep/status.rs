//! Where each task stands: its receipt if it has one, else what its dependencies allow, and,
//! for a sweep submitted to Slurm, what the scheduler says of it (`squeue`).

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::Result;
use serde::Serialize;

use super::file::TaskKind;
use super::plan::Plan;
use super::receipt::{self, Receipt, TaskState};

/// One task's standing.
#[derive(Clone, Debug, Serialize, PartialEq)]
#[serde(rename_all = "kebab-case", tag = "state")]
pub enum Standing {
    /// Its last attempt ended so; `final` when running again cannot change it.
    Ended { how: TaskState },
    /// A dependency ended without passing: it will not run.
    Blocked { by: String },
    /// Not finished; its dependencies have passed.
    Ready,
    /// Not finished; waiting for a dependency.
    Waiting,
}

/// One row of `sweep status`.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    pub index: usize,
    pub id: String,
    pub kind: TaskKind,
    pub standing: Standing,
    pub receipt: Option<Receipt>,
    /// The scheduler's state and reason (`PENDING (Dependency)`, `RUNNING`), if it knows
    /// the task.
    pub scheduler: Option<String>,
}

/// The standing of every task of the sweep folder `dir`; `scheduler` maps task indices to the
/// scheduler's word on them ([`super::slurm::queue`]).
///
/// Errors: no plan, or a receipt that cannot be read.
pub fn rows(dir: &Path, scheduler: &BTreeMap<usize, String>) -> Result<Vec<Row>> {
    let plan = Plan::load(dir)?;
    let mut receipts = Vec::new();
    for t in &plan.tasks {
        receipts.push(receipt::read_for(dir, t)?);
    }
    let mut standing: Vec<Standing> = Vec::with_capacity(plan.tasks.len());
    // The plan is acyclic, but indices need not be in dependency order: resolve recursively.
    fn resolve(
        i: usize,
        plan: &Plan,
        rec: &[Option<Receipt>],
        memo: &mut BTreeMap<usize, Standing>,
    ) -> Standing {
        if let Some(s) = memo.get(&i) {
            return s.clone();
        }
        let s = match &rec[i] {
            Some(r) if r.state.is_final() => Standing::Ended { how: r.state },
            last => {
                let mut s = Standing::Ready;
                for &d in &plan.tasks[i].deps {
                    match resolve(d, plan, rec, memo) {
                        Standing::Ended {
                            how: TaskState::Passed,
                        } => {}
                        Standing::Ended { how } if how.is_final() => {
                            s = Standing::Blocked {
                                by: plan.tasks[d].id.clone(),
                            };
                            break;
                        }
                        Standing::Blocked { .. } => {
                            s = Standing::Blocked {
                                by: plan.tasks[d].id.clone(),
                            };
                            break;
                        }
                        _ => s = Standing::Waiting,
                    }
                }
                match (s, last) {
                    (Standing::Ready, Some(r)) => Standing::Ended { how: r.state },
                    (s, _) => s,
                }
            }
        };
        memo.insert(i, s.clone());
        s
    }
    let mut memo = BTreeMap::new();
    for i in 0..plan.tasks.len() {
        standing.push(resolve(i, &plan, &receipts, &mut memo));
    }
    Ok(plan
        .tasks
        .iter()
        .zip(receipts)
        .zip(standing)
        .map(|((t, receipt), standing)| Row {
            index: t.index,
            id: t.id.clone(),
            kind: t.kind,
            standing,
            receipt,
            scheduler: scheduler.get(&t.index).cloned(),
        })
        .collect())
}

/// Short text of a standing (`passed`, `blocked by verify/m/Q8_0`, `waiting`).
pub fn text(s: &Standing) -> String {
    match s {
        Standing::Ended { how } => serde_json::to_value(how)
            .ok()
            .and_then(|v| v.as_str().map(String::from))
            .unwrap_or_default(),
        Standing::Blocked { by } => format!("blocked by {by}"),
        Standing::Ready => "ready".into(),
        Standing::Waiting => "waiting".into(),
    }
}

/// Counts per standing text, for a one-line summary.
pub fn summary(rows: &[Row]) -> BTreeMap<String, usize> {
    let mut m = BTreeMap::new();
    for r in rows {
        let k = match &r.standing {
            Standing::Blocked { .. } => "blocked".to_string(),
            s => text(s),
        };
        *m.entry(k).or_default() += 1;
    }
    m
}
