//! What a sweep folder must hold before anything reads it: a plan whose every path stays inside
//! the folder, whose dependencies are in range and acyclic, whose pins are the sweep file's
//! (`DIR/sweep.toml`, hashed to the plan's `sweep_sha256`); and receipts that belong to their
//! task and agree with themselves. A folder edited by hand, or by accident, is refused with the
//! file and field named, never read as a GO.

use std::collections::BTreeMap;
use std::path::{Component, Path};

use anyhow::{bail, Context, Result};

use super::file::TaskKind;
use super::plan::{Plan, Spec, Task};
use super::receipt::{Receipt, TaskState};

/// Whether `p` is relative and has no `..` and no root: it stays inside the sweep folder.
pub fn is_inside(p: &str) -> bool {
    !p.is_empty()
        && Path::new(p)
            .components()
            .all(|c| matches!(c, Component::Normal(_)))
}

fn spec_paths(t: &Task) -> Vec<&str> {
    match &t.spec {
        Spec::Convert { hf, .. } => vec![hf],
        Spec::Quantize { input, .. } => vec![input],
        Spec::Verify { hf, gguf } => vec![hf, gguf],
        Spec::Release { hf, ggufs, .. } => std::iter::once(hf.as_str())
            .chain(ggufs.iter().map(String::as_str))
            .collect(),
        Spec::Protocol { protocol } => vec![protocol],
    }
}

/// Every problem of `plan` (see the module doc), checked against the folder `dir`.
///
/// Errors: the first problems found, each naming `plan.json` and the field.
pub fn plan(dir: &Path, plan: &Plan) -> Result<()> {
    let p = dir.join("plan.json");
    let mut e = Vec::new();
    if plan.tasks.is_empty() {
        e.push("tasks: none".to_string());
    }
    for (i, t) in plan.tasks.iter().enumerate() {
        if t.index != i {
            e.push(format!("tasks[{i}].index: {}", t.index));
        }
        let prefix = format!("tasks/{i:03}-");
        if !t.dir.starts_with(&prefix) || !is_inside(&t.dir) || t.dir.matches('/').count() != 1 {
            e.push(format!("tasks[{i}].dir: {:?} is not {prefix}…", t.dir));
        }
        for s in spec_paths(t) {
            if !is_inside(s) {
                e.push(format!("tasks[{i}].spec: {s:?} leaves the sweep folder"));
            }
        }
        for &d in &t.deps {
            if d >= plan.tasks.len() {
                e.push(format!("tasks[{i}].deps: {d} is out of range"));
            }
        }
    }
    for (i, x) in plan.inputs.iter().enumerate() {
        if !is_inside(&x.path) {
            e.push(format!(
                "inputs[{i}].path: {:?} leaves the sweep folder",
                x.path
            ));
        }
    }
    if plan.protocol.as_deref().is_some_and(|pr| !is_inside(pr)) {
        e.push("protocol: leaves the sweep folder".into());
    }
    if !e.is_empty() {
        bail!("{}: {}", p.display(), e.join("; "));
    }
    super::plan::check_acyclic(&plan.tasks).with_context(|| p.display().to_string())?;
    pins(dir, plan)
}

/// The plan's pins are the sweep file's, and the sweep file is the one planned.
fn pins(dir: &Path, plan: &Plan) -> Result<()> {
    let sp = dir.join("sweep.toml");
    let bytes = crate::paths::read_text_capped(&sp, 1 << 20)?;
    let h = crate::hash::sha256_bytes(bytes.as_bytes());
    if h != plan.sweep_sha256 {
        bail!(
            "{}: sha256 {h}, plan.json's sweep_sha256 is {}",
            sp.display(),
            plan.sweep_sha256
        );
    }
    let file: super::file::SweepFile =
        toml::from_str(&bytes).with_context(|| format!("{}: not a sweep file", sp.display()))?;
    let pinned: BTreeMap<&str, &str> = file
        .inputs
        .iter()
        .map(|i| (i.name.as_str(), i.sha256.as_str()))
        .collect();
    for i in &plan.inputs {
        if pinned.get(i.name.as_str()) != Some(&i.sha256.as_str()) {
            bail!(
                "{}: inputs.{}.sha256 is not the pin of {}",
                dir.join("plan.json").display(),
                i.name,
                sp.display()
            );
        }
    }
    if pinned.len() != plan.inputs.len() {
        bail!(
            "{}: inputs: {} pinned in {}, {} in the plan",
            dir.join("plan.json").display(),
            pinned.len(),
            sp.display(),
            plan.inputs.len()
        );
    }
    if file.settings != plan.settings {
        bail!(
            "{}: settings differ from {}",
            dir.join("plan.json").display(),
            sp.display()
        );
    }
    Ok(())
}

/// A receipt belongs to task `t` and agrees with itself: its index, id and kind are the
/// task's; its state is what its exit code says (a signal: interrupted); a passed convert or
/// quantize lists exactly the file it wrote.
///
/// Errors: the first disagreement, naming the receipt's file and field.
pub fn receipt(task_dir: &Path, t: &Task, r: &Receipt) -> Result<()> {
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
            .all(|o| is_inside(&o.path) && o.path.starts_with(&format!("{}/", t.dir)));
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_inside() {
        assert!(is_inside("tasks/000-convert-m-F16/m-F16.gguf"));
        assert!(!is_inside("/tmp/x"));
        assert!(!is_inside("../escape"));
        assert!(!is_inside("tasks/../../x"));
        assert!(!is_inside("./tasks"));
        assert!(!is_inside(""));
    }
}
