//! The plan: a sweep file expanded into independent tasks with stable indices, their
//! dependencies and their needs, written into a self-contained sweep folder:
//!
//! ```text
//! DIR/sweep.toml      the sweep file's exact bytes (its sha256 is the plan's sweep_sha256)
//! DIR/plan.json       [`Plan`]
//! DIR/inputs/MODEL/…  every pinned file, hard-linked (or copied) and re-hashed
//! DIR/tasks/NNN-…/    one folder per task: its outputs, logs and receipt.json
//! ```
//!
//! Every path in the plan is relative to DIR, so the folder can move (a PersistentVolumeClaim
//! mounted at another path, a shared file system).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Component, Path, PathBuf};

use anyhow::{anyhow, bail, Context, Result};
use serde::{Deserialize, Serialize};

use super::file::{self, Loaded, Settings, TaskKind};
use super::needs::{self, Needs};
use crate::source::hf::HfDir;

/// The plan's file format version.
pub const PLAN_VERSION: u32 = 1;

/// What a task runs, with paths relative to the sweep folder.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Spec {
    /// `quantgate convert HF -o OUT --outtype OUTTYPE` (`f16`, `bf16`, `f32`).
    Convert { hf: String, outtype: String },
    /// `quantgate quantize INPUT OUT FTYPE` (a llama-quantize name, `Q4_K_M`).
    Quantize { input: String, ftype: String },
    /// `quantgate verify --hf HF --gguf GGUF`.
    Verify { hf: String, gguf: String },
    /// `quantgate release --hf HF --gguf …` of every file of one model.
    Release {
        hf: String,
        ggufs: Vec<String>,
        base_model: Option<String>,
    },
    /// `quantgate run PROTOCOL`.
    Protocol { protocol: String },
}

/// One task.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
pub struct Task {
    /// Stable index: the Slurm array index and the Kubernetes completion index.
    pub index: usize,
    /// `convert/MODEL/F16`, `verify/MODEL/Q8_0`, `release/MODEL`, `protocol/NAME`.
    pub id: String,
    pub kind: TaskKind,
    pub model: String,
    pub ftype: Option<String>,
    /// Indices of the tasks that must end GO (or succeed) first.
    pub deps: Vec<usize>,
    pub needs: Needs,
    /// The task's folder, relative to the sweep folder.
    pub dir: String,
    pub spec: Spec,
}

impl Task {
    /// The GGUF a convert or quantize task writes, relative to the sweep folder:
    /// `MODEL-FTYPE.gguf` (a release ships files under their own names).
    pub fn output(&self) -> Option<String> {
        let ft = self.ftype.as_deref()?;
        matches!(self.kind, TaskKind::Convert | TaskKind::Quantize)
            .then(|| format!("{}/{}-{ft}.gguf", self.dir, self.model))
    }
}

/// A pinned input inside the sweep folder.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
pub struct PlannedInput {
    pub name: String,
    /// Relative to the sweep folder.
    pub path: String,
    pub sha256: String,
}

/// `plan.json`.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
pub struct Plan {
    pub version: u32,
    pub sweep_id: String,
    pub sweep_sha256: String,
    /// quantgate's version that planned it; tasks refuse to run under another.
    pub quantgate: String,
    pub settings: Settings,
    /// The protocol TOML with the thresholds, relative to the sweep folder.
    pub protocol: Option<String>,
    pub inputs: Vec<PlannedInput>,
    pub tasks: Vec<Task>,
}

impl Plan {
    /// Reads `DIR/plan.json`.
    ///
    /// Errors: missing or malformed (naming the file), or a plan from another version.
    pub fn load(dir: &Path) -> Result<Plan> {
        let p = dir.join("plan.json");
        let text = crate::paths::read_text_capped(&p, 64 << 20)
            .with_context(|| format!("{}: not a sweep folder", dir.display()))?;
        let plan: Plan =
            serde_json::from_str(&text).with_context(|| format!("{}: malformed", p.display()))?;
        if plan.version != PLAN_VERSION {
            bail!(
                "{}: version {}; this quantgate reads version {PLAN_VERSION}",
                p.display(),
                plan.version
            );
        }
        check(dir, &plan)?;
        Ok(plan)
    }

    /// The most CPUs and memory (MiB) any task asks for, at least 1 each: what one request for
    /// every task (an sbatch header, a Job's pod template) must hold.
    pub fn largest_needs(&self) -> (u32, u64) {
        let cpus = self.tasks.iter().map(|t| t.needs.cpus).max();
        let mem = self.tasks.iter().map(|t| t.needs.mem_mib()).max();
        (cpus.unwrap_or(1).max(1), mem.unwrap_or(1).max(1))
    }

    /// The task with index `i`.
    ///
    /// Errors: out of range (naming the count).
    pub fn task(&self, i: usize) -> Result<&Task> {
        self.tasks
            .get(i)
            .ok_or_else(|| anyhow!("task index {i}: the plan has {} tasks", self.tasks.len()))
    }
}

/// Builds the plan of a validated sweep file. `avx512`: whether the pinned CPU variant has
/// AVX-512 (verify's estimate counts Q2_K repacks then).
///
/// Errors: an HF folder that cannot be opened, an `after` naming no task, a dependency cycle
/// (named task by task).
pub fn build(l: &Loaded, avx512: bool) -> Result<Plan> {
    let f = &l.file;
    let threads = f.settings.threads.get().max(1) as u32;
    let inputs = planned_inputs(l)?;
    let mut b = Builder {
        placed: inputs
            .iter()
            .map(|i| (i.name.clone(), i.path.clone()))
            .collect(),
        ..Default::default()
    };
    for m in &f.models {
        let hf_rel = format!("inputs/{}", m.name);
        let hf = HfDir::open(&l.resolve(&m.hf_dir), true)
            .with_context(|| format!("models.{}.hf_dir", m.name))?;
        let c = ModelCtx {
            m,
            hf: &hf,
            hf_rel: &hf_rel,
            threads,
            avx512,
        };
        b.model(l, &c)?;
    }
    for r in &f.runs {
        let spec = Spec::Protocol {
            protocol: b.placed(&r.protocol)?,
        };
        let i = b.push(
            TaskKind::Protocol,
            &r.name,
            None,
            vec![],
            needs::protocol(threads),
            spec,
        );
        b.after
            .push((i, r.after.clone(), format!("runs.{}.after", r.name)));
    }
    if b.tasks.is_empty() {
        bail!("matrix.tasks and [[runs]]: the plan has no tasks");
    }
    b.resolve_after()?;
    check_acyclic(&b.tasks)?;
    Ok(Plan {
        version: PLAN_VERSION,
        sweep_id: f.sweep.id.clone(),
        sweep_sha256: l.sha256.clone(),
        quantgate: env!("CARGO_PKG_VERSION").into(),
        settings: f.settings.clone(),
        protocol: f
            .settings
            .protocol
            .as_ref()
            .map(|p| b.placed(p))
            .transpose()?,
        inputs,
        tasks: b.tasks,
    })
}

/// What planning one model needs.
struct ModelCtx<'a> {
    m: &'a file::Model,
    hf: &'a HfDir,
    /// The model folder, relative to the sweep folder.
    hf_rel: &'a str,
    threads: u32,
    avx512: bool,
}

/// A GGUF the model's tasks verify and ship.
struct PlannedFile {
    /// The ftype, or the input's name for a GGUF made elsewhere.
    label: String,
    /// Relative to the sweep folder.
    path: String,
    /// The task that writes it (none for an input).
    producer: Option<usize>,
    /// Its planned tensor table ([`needs::planned_tensors`]).
    table: Vec<gguf::TensorInfo>,
}

#[derive(Default)]
struct Builder {
    tasks: Vec<Task>,
    /// (task, ids it waits for, the field that named them).
    after: Vec<(usize, Vec<String>, String)>,
    /// Where each input lies in the sweep folder, by name.
    placed: BTreeMap<String, String>,
}

impl Builder {
    /// The path in the sweep folder of the input named `name`.
    fn placed(&self, name: &str) -> Result<String> {
        self.placed
            .get(name)
            .cloned()
            .ok_or_else(|| anyhow!("no input named {name:?}"))
    }

    fn push(
        &mut self,
        kind: TaskKind,
        model: &str,
        ftype: Option<&str>,
        deps: Vec<usize>,
        needs: Needs,
        spec: Spec,
    ) -> usize {
        let index = self.tasks.len();
        let id = match ftype {
            Some(ft) => format!("{}/{model}/{ft}", kind.name()),
            None => format!("{}/{model}", kind.name()),
        };
        let dir = format!("tasks/{index:03}-{}", id.replace('/', "-"));
        self.tasks.push(Task {
            index,
            id,
            kind,
            model: model.into(),
            ftype: ftype.map(String::from),
            deps,
            needs,
            dir,
            spec,
        });
        index
    }

    /// The matrix's tasks for one model, in a fixed order: convert, quantize × ftypes,
    /// verify × files, release.
    fn model(&mut self, l: &Loaded, c: &ModelCtx) -> Result<()> {
        let kinds = &l.file.matrix.tasks;
        let first = self.tasks.len();
        let mut files = if kinds.contains(&TaskKind::Convert) {
            self.made_files(l, c)
        } else {
            Vec::new()
        };
        for g in &c.m.ggufs {
            // Its type is not known before it is read: the repacked Q4_K_M bounds the memory.
            let q4km = gguf::LlamaFtype::by_name("Q4_K_M").expect("listed");
            let table = needs::planned_tensors(c.hf, q4km);
            let path = self.placed(g)?;
            files.push(PlannedFile {
                label: g.clone(),
                path,
                producer: None,
                table,
            });
        }
        let mut verified = Vec::new();
        if kinds.contains(&TaskKind::Verify) {
            for f in &files {
                let n = needs::verify(c.threads, &f.table, c.avx512);
                let spec = Spec::Verify {
                    hf: c.hf_rel.into(),
                    gguf: f.path.clone(),
                };
                let deps = f.producer.iter().copied().collect();
                verified.push(self.push(
                    TaskKind::Verify,
                    &c.m.name,
                    Some(&f.label),
                    deps,
                    n,
                    spec,
                ));
            }
        }
        if kinds.contains(&TaskKind::Release) && !files.is_empty() {
            let deps = if verified.is_empty() {
                files.iter().filter_map(|f| f.producer).collect()
            } else {
                verified
            };
            let vneeds: Vec<Needs> = files
                .iter()
                .map(|f| needs::verify(c.threads, &f.table, c.avx512))
                .collect();
            let total: u64 = files.iter().map(|f| needs::file_bytes(&f.table)).sum();
            let spec = Spec::Release {
                hf: c.hf_rel.into(),
                ggufs: files.iter().map(|f| f.path.clone()).collect(),
                base_model: c.m.base_model.clone(),
            };
            let n = needs::release(&vneeds, total, c.threads);
            self.push(TaskKind::Release, &c.m.name, None, deps, n, spec);
        }
        // `after` holds back the model's tasks that wait for nothing else.
        for i in first..self.tasks.len() {
            if self.tasks[i].deps.is_empty() {
                let field = format!("models.{}.after", c.m.name);
                self.after.push((i, c.m.after.clone(), field));
            }
        }
        Ok(())
    }

    /// Convert to the first ftype, then (if asked) quantize it to each other one.
    fn made_files(&mut self, l: &Loaded, c: &ModelCtx) -> Vec<PlannedFile> {
        let ftypes: Vec<String> = l
            .file
            .matrix
            .ftypes
            .iter()
            .map(|f| f.to_ascii_uppercase())
            .collect();
        let table = needs::planned_tensors(
            c.hf,
            gguf::LlamaFtype::by_name(&ftypes[0]).expect("validated"),
        );
        let spec = Spec::Convert {
            hf: c.hf_rel.into(),
            outtype: ftypes[0].to_ascii_lowercase(),
        };
        let n = needs::convert(c.hf, c.threads, &table);
        let conv = self.push(
            TaskKind::Convert,
            &c.m.name,
            Some(&ftypes[0]),
            vec![],
            n,
            spec,
        );
        let base = self.tasks[conv].output().expect("convert writes");
        let mut files = vec![PlannedFile {
            label: ftypes[0].clone(),
            path: base.clone(),
            producer: Some(conv),
            table,
        }];
        if !l.file.matrix.tasks.contains(&TaskKind::Quantize) {
            return files;
        }
        for ft in &ftypes[1..] {
            let table =
                needs::planned_tensors(c.hf, gguf::LlamaFtype::by_name(ft).expect("validated"));
            let spec = Spec::Quantize {
                input: base.clone(),
                ftype: ft.clone(),
            };
            let n = needs::quantize(c.hf, c.threads, &table);
            let q = self.push(TaskKind::Quantize, &c.m.name, Some(ft), vec![conv], n, spec);
            let path = self.tasks[q].output().expect("quantize writes");
            files.push(PlannedFile {
                label: ft.clone(),
                path,
                producer: Some(q),
                table,
            });
        }
        files
    }

    fn resolve_after(&mut self) -> Result<()> {
        let ids: BTreeMap<String, usize> =
            self.tasks.iter().map(|t| (t.id.clone(), t.index)).collect();
        for (i, names, field) in std::mem::take(&mut self.after) {
            for n in names {
                let d = *ids.get(&n).ok_or_else(|| {
                    anyhow!("{field}: no task {n:?} (ids look like convert/MODEL/F16, verify/MODEL/Q8_0, release/MODEL, protocol/NAME)")
                })?;
                if !self.tasks[i].deps.contains(&d) {
                    self.tasks[i].deps.push(d);
                }
            }
        }
        Ok(())
    }
}

/// Errors with the cycle spelt out (`protocol/a → protocol/b → protocol/a`) if the
/// dependencies have one.
pub fn check_acyclic(tasks: &[Task]) -> Result<()> {
    // 0 unvisited, 1 on the current path, 2 done.
    let mut mark = vec![0u8; tasks.len()];
    let mut path: Vec<usize> = Vec::new();
    fn visit(
        i: usize,
        tasks: &[Task],
        mark: &mut [u8],
        path: &mut Vec<usize>,
    ) -> Option<Vec<usize>> {
        match mark[i] {
            2 => return None,
            1 => {
                let at = path.iter().position(|&p| p == i).unwrap_or(0);
                let mut cycle = path[at..].to_vec();
                cycle.push(i);
                return Some(cycle);
            }
            _ => {}
        }
        mark[i] = 1;
        path.push(i);
        for &d in &tasks[i].deps {
            if let Some(c) = visit(d, tasks, mark, path) {
                return Some(c);
            }
        }
        path.pop();
        mark[i] = 2;
        None
    }
    for i in 0..tasks.len() {
        if let Some(c) = visit(i, tasks, &mut mark, &mut path) {
            // Printed in the order things run: each waits for the one before it.
            let names: Vec<&str> = c.iter().rev().map(|&t| tasks[t].id.as_str()).collect();
            bail!(
                "dependency cycle (each waits for the one before it): {}",
                names.join(" → ")
            );
        }
    }
    Ok(())
}

/// The file name an input gets in `inputs/files/`.
fn input_file_name(l: &Loaded, name: &str) -> Result<String> {
    let i = l
        .input(name)
        .ok_or_else(|| anyhow!("no input named {name:?}"))?;
    let base = Path::new(&i.path)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    Ok(format!("{}-{base}", i.name))
}

/// Where each input goes in the sweep folder: a model folder's files under `inputs/MODEL/`,
/// every other input under `inputs/files/NAME-FILE`.
fn planned_inputs(l: &Loaded) -> Result<Vec<PlannedInput>> {
    let mut placed: BTreeMap<String, String> = BTreeMap::new();
    for m in &l.file.models {
        for (fname, i) in file::model_files(l, m) {
            placed.insert(i.name.clone(), format!("inputs/{}/{fname}", m.name));
        }
    }
    let mut out = Vec::new();
    let mut paths = BTreeSet::new();
    for i in &l.file.inputs {
        let path = match placed.get(&i.name) {
            Some(p) => p.clone(),
            None => format!("inputs/files/{}", input_file_name(l, &i.name)?),
        };
        if !paths.insert(path.clone()) {
            bail!(
                "inputs.{}: {path} is placed twice (an input shared by two models?)",
                i.name
            );
        }
        out.push(PlannedInput {
            name: i.name.clone(),
            path,
            sha256: i.sha256.clone(),
        });
    }
    Ok(out)
}

/// Places every input in the staging folder `dir` (hard link, else copy) and re-hashes the
/// placed file; all mismatches and missing files are listed at once.
fn place_inputs(l: &Loaded, plan: &Plan, dir: &Path) -> Result<()> {
    let mut bad = Vec::new();
    for (pi, i) in plan.inputs.iter().zip(&l.file.inputs) {
        let src = l.resolve(&i.path);
        let dst = dir.join(&pi.path);
        if let Some(p) = dst.parent() {
            std::fs::create_dir_all(p)
                .with_context(|| format!("{}: cannot create", p.display()))?;
        }
        if let Err(e) = crate::paths::ensure_regular_file(&src) {
            bad.push(format!("inputs.{}.path: {e:#}", i.name));
            continue;
        }
        // The file itself, not a symlink to it (the HF hub cache is a folder of symlinks).
        let real = src.canonicalize().unwrap_or_else(|_| src.clone());
        if std::fs::hard_link(&real, &dst).is_err() {
            std::fs::copy(&src, &dst)
                .with_context(|| format!("{} → {}: cannot copy", src.display(), dst.display()))?;
        }
        match crate::hash::sha256_file(&dst) {
            Ok(h) if h == i.sha256 => {}
            Ok(h) => bad.push(format!(
                "inputs.{}.sha256: {} has {h}, the sweep file pins {}",
                i.name,
                src.display(),
                i.sha256
            )),
            Err(e) => bad.push(format!("inputs.{}: {e:#}", i.name)),
        }
        if crate::interrupt::received().is_some() {
            bail!("interrupted while placing the inputs; nothing was written");
        }
    }
    if bad.is_empty() {
        Ok(())
    } else {
        bail!("{}", bad.join("; "))
    }
}

/// Writes the sweep folder `out` for the sweep file at `sweep`: validated, planned, inputs
/// placed and hashed in a staging folder beside `out`, renamed to `out` only when complete.
///
/// Errors: `out` exists; the file is invalid (every problem listed, each naming its field);
/// an input is missing or its hash differs; a dependency cycle. Nothing is left behind.
pub fn write(sweep: &Path, out: &Path, avx512: bool) -> Result<Plan> {
    if out.exists() || out.is_symlink() {
        bail!(
            "{}: already exists (a sweep folder is written once; `sweep run` resumes it)",
            out.display()
        );
    }
    let l = file::load(sweep)?;
    let problems = file::validate(&l);
    if !problems.is_empty() {
        bail!("{}: {}", sweep.display(), problems.join("; "));
    }
    let plan = build(&l, avx512).with_context(|| sweep.display().to_string())?;
    let parent = out
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::create_dir_all(parent)
        .with_context(|| format!("{}: cannot create", parent.display()))?;
    let stage = tempfile::Builder::new()
        .prefix(".sweep-plan-")
        .tempdir_in(parent)
        .with_context(|| format!("{}: cannot create a staging folder", parent.display()))?;
    place_inputs(&l, &plan, stage.path()).with_context(|| sweep.display().to_string())?;
    std::fs::create_dir_all(stage.path().join("tasks"))?;
    crate::paths::write_atomic(&stage.path().join("sweep.toml"), &l.bytes)?;
    let json = serde_json::to_vec_pretty(&plan)?;
    crate::paths::write_atomic(&stage.path().join("plan.json"), &json)?;
    let staged: PathBuf = stage.keep();
    if let Err(e) = std::fs::rename(&staged, out) {
        let _ = std::fs::remove_dir_all(&staged);
        bail!(
            "{}: cannot rename the staged plan into place: {e}",
            out.display()
        );
    }
    Ok(plan)
}

// What a sweep folder's plan must hold before anything reads it: every path inside the
// folder, dependencies in range and acyclic, the pins and settings of `DIR/sweep.toml` (hashed
// to `sweep_sha256`). A folder edited by hand, or by accident, is refused with the field named.

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
fn check(dir: &Path, plan: &Plan) -> Result<()> {
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
    check_acyclic(&plan.tasks).with_context(|| p.display().to_string())?;
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
    let file: file::SweepFile =
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
