//! One task, as every executor runs it (`quantgate sweep task DIR --index I`): the same code
//! on this machine, in an sbatch array task and in a Kubernetes pod, so a task's verdict and
//! figures depend only on its inputs and the pinned settings.
//!
//! An attempt: check the plan's version, that every dependency ended GO, and the hashes of
//! every file it reads; clear its folder; run this binary's subcommand with the pinned CPU
//! variant and threads (stdout and stderr into the folder); hash what it wrote; write the
//! receipt last, atomically.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};

use super::figures;
use super::file::TaskKind;
use super::plan::{Plan, Spec, Task};
use super::receipt::{self, Executor, OutputFile, Receipt, TaskState};
use crate::verify::Verdict;

/// The task folder was removed while the task ran: nothing of the attempt is kept, and the
/// task runs again (exit 3, a runtime failure).
#[derive(Debug)]
pub struct FolderLost(pub PathBuf);

impl std::fmt::Display for FolderLost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: the task folder was deleted while the task ran; nothing of this attempt was kept",
            self.0.display()
        )
    }
}

impl std::error::Error for FolderLost {}

/// How to run one task.
#[derive(Clone, Debug)]
pub struct TaskOptions {
    pub executor: Executor,
    /// Scheduler's id of this attempt, for the receipt.
    pub job: Option<String>,
    /// Wait this long for dependencies to finish instead of refusing at once (Kubernetes
    /// pods, whose Job cannot express an order between its indices).
    pub wait_deps: Option<Duration>,
}

/// What `sweep task` did.
#[derive(Clone, Debug)]
pub enum TaskOutcome {
    /// An attempt ran; its receipt.
    Ran(Receipt),
    /// A receipt with a final state was already there: nothing ran.
    AlreadyFinal(Receipt),
    /// A dependency ended without passing: the task cannot run (final, exit 1).
    Blocked { dep: String, state: TaskState },
}

impl TaskOutcome {
    /// `sweep task`'s exit status.
    pub fn exit_code(&self) -> u8 {
        match self {
            TaskOutcome::Ran(r) | TaskOutcome::AlreadyFinal(r) => r.state.exit_code(),
            TaskOutcome::Blocked { .. } => 1,
        }
    }
}

/// The state of each dependency: `Ok(None)` all passed; `Ok(Some(..))` one ended otherwise
/// for good; `Err` one has not finished.
fn deps_state(dir: &Path, plan: &Plan, t: &Task) -> Result<Option<(String, TaskState)>> {
    for &d in &t.deps {
        let dt = plan.task(d)?;
        match receipt::read_for(dir, dt)? {
            Some(r) if r.state == TaskState::Passed => {}
            Some(r) if r.state.is_final() => return Ok(Some((dt.id.clone(), r.state))),
            _ => bail!("{}: dependency {} has not finished", t.id, dt.id),
        }
    }
    Ok(None)
}

/// Hashes of everything the task reads against the plan's pins and the producers' receipts.
fn check_inputs(dir: &Path, plan: &Plan, t: &Task) -> Result<()> {
    let reads: Vec<&str> = match &t.spec {
        Spec::Convert { hf, .. } | Spec::Verify { hf, .. } | Spec::Release { hf, .. } => vec![hf],
        _ => vec![],
    };
    let mut bad = Vec::new();
    for i in &plan.inputs {
        let used = reads.iter().any(|r| i.path.starts_with(&format!("{r}/")))
            || matches!(&t.spec, Spec::Verify { gguf, .. } if *gguf == i.path)
            || matches!(&t.spec, Spec::Release { ggufs, .. } if ggufs.contains(&i.path))
            || matches!(&t.spec, Spec::Protocol { protocol } if *protocol == i.path)
            || plan.protocol.as_deref() == Some(i.path.as_str());
        if used {
            let h = crate::hash::sha256_file(&dir.join(&i.path))
                .with_context(|| format!("input {}", i.name))?;
            if h != i.sha256 {
                bad.push(format!(
                    "{} ({}): sha256 {h}, the plan pins {}",
                    i.name, i.path, i.sha256
                ));
            }
        }
    }
    for &d in &t.deps {
        let dt = plan.task(d)?;
        let r = receipt::read_for(dir, dt)?.ok_or_else(|| anyhow!("{}: no receipt", dt.id))?;
        if let Err(e) = super::receipt::outputs(dir, &r) {
            bad.push(format!("{e:#}"));
        }
    }
    // A model folder holds exactly its pinned files: one added later (a chat template, say)
    // would be read by convert and verify without a pin.
    let planned: std::collections::BTreeSet<&str> =
        plan.inputs.iter().map(|i| i.path.as_str()).collect();
    for r in &reads {
        let mut files = Vec::new();
        super::file::walk(&dir.join(r), &mut files)
            .with_context(|| format!("{}", dir.join(r).display()))?;
        for f in files {
            let rel = f
                .strip_prefix(dir)
                .unwrap_or(&f)
                .to_string_lossy()
                .into_owned();
            if !planned.contains(rel.as_str()) {
                bad.push(format!("{rel}: not an input of the plan"));
            }
        }
    }
    if bad.is_empty() {
        Ok(())
    } else {
        bail!(
            "{}: input hash check failed, nothing ran: {}",
            t.id,
            bad.join("; ")
        )
    }
}

/// The subcommand's arguments, paths resolved against `dir`.
fn argv(dir: &Path, plan: &Plan, t: &Task) -> Vec<OsString> {
    let p = |rel: &str| dir.join(rel).into_os_string();
    let s = |x: &str| OsString::from(x);
    let tdir = dir.join(&t.dir);
    let threads = plan.settings.threads.get().to_string();
    let protocol = plan
        .protocol
        .as_deref()
        .map(|pr| vec![s("--protocol"), p(pr)])
        .unwrap_or_default();
    let out = t.output().map(|o| p(&o));
    match &t.spec {
        Spec::Convert { hf, outtype } => vec![
            s("convert"),
            p(hf),
            s("-o"),
            out.expect("convert writes"),
            s("--outtype"),
            s(outtype),
            s("--json"),
        ],
        Spec::Quantize { input, ftype } => vec![
            s("quantize"),
            p(input),
            out.expect("quantize writes"),
            s(ftype),
            s("--threads"),
            s(&threads),
            s("--json"),
        ],
        Spec::Verify { hf, gguf } => {
            let mut a = vec![s("verify"), s("--hf"), p(hf), s("--gguf"), p(gguf)];
            a.extend([
                s("--report"),
                tdir.join("report").into_os_string(),
                s("--threads"),
                s(&threads),
            ]);
            a.extend(protocol);
            a
        }
        Spec::Release {
            hf,
            ggufs,
            base_model,
        } => {
            let mut a = vec![s("release"), s("--hf"), p(hf)];
            for g in ggufs {
                a.extend([s("--gguf"), p(g)]);
            }
            a.extend([
                s("-o"),
                tdir.join("release").into_os_string(),
                s("--threads"),
                s(&threads),
            ]);
            if let Some(b) = base_model {
                a.extend([s("--base-model"), s(b)]);
            }
            a.extend(protocol);
            a
        }
        Spec::Protocol { protocol } => vec![
            s("run"),
            p(protocol),
            s("--run-dir"),
            tdir.join("run").into_os_string(),
            s("--operator"),
            s("sweep"),
        ],
    }
}

/// What a passed task wrote, hashed: the GGUF of a convert or quantize; verify's report; every
/// file of a release folder. `collect` and later attempts re-hash them.
fn written(dir: &Path, t: &Task) -> Result<Vec<OutputFile>> {
    let tdir = dir.join(&t.dir);
    let mut files = match t.kind {
        TaskKind::Convert | TaskKind::Quantize => {
            t.output().map(|o| dir.join(o)).into_iter().collect()
        }
        TaskKind::Verify => vec![tdir.join("report").join("report.json")],
        TaskKind::Release => {
            let mut v = Vec::new();
            super::file::walk(&tdir.join("release"), &mut v)?;
            v.sort();
            v
        }
        TaskKind::Protocol => vec![tdir.join("run").join("results.json")],
    };
    files.retain(|f| f.is_file());
    files
        .into_iter()
        .map(|f| {
            let rel = f
                .strip_prefix(dir)
                .unwrap_or(&f)
                .to_string_lossy()
                .into_owned();
            Ok(OutputFile {
                bytes: std::fs::metadata(&f)?.len(),
                sha256: crate::hash::sha256_file(&f)?,
                path: rel,
            })
        })
        .collect()
}

/// The JSON document holding the task's figures.
fn figures_file(tdir: &Path, kind: TaskKind) -> PathBuf {
    match kind {
        TaskKind::Convert | TaskKind::Quantize => tdir.join("stdout.log"),
        TaskKind::Verify => tdir.join("report").join("report.json"),
        TaskKind::Release => tdir.join("release").join("report.json"),
        TaskKind::Protocol => tdir.join("run").join("results.json"),
    }
}

fn host() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_default()
}

fn last_line(p: &Path) -> String {
    std::fs::read_to_string(p)
        .unwrap_or_default()
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim()
        .to_string()
}

/// Runs task `index` of the sweep folder `dir` (see the module doc).
///
/// Errors: no plan, an index out of range, a plan from another quantgate, an unfinished
/// dependency (after `wait_deps`), a hash mismatch (input errors, exit 2); the task folder
/// deleted while it ran ([`FolderLost`], exit 3).
pub fn run(dir: &Path, index: usize, o: &TaskOptions) -> Result<TaskOutcome> {
    let plan = Plan::load(dir)?;
    // Absolute, so that what the command records (quantize's report names its files) does not
    // depend on the working folder; figures cut such paths to file names.
    let dir = &dir
        .canonicalize()
        .with_context(|| format!("{}: cannot resolve", dir.display()))?;
    let t = plan.task(index)?.clone();
    if plan.quantgate != env!("CARGO_PKG_VERSION") {
        bail!(
            "{}: planned by quantgate {}, this is {}: plan again",
            dir.join("plan.json").display(),
            plan.quantgate,
            env!("CARGO_PKG_VERSION")
        );
    }
    let tdir = dir.join(&t.dir);
    // One attempt of a task at a time, whatever started it (two `sweep run`s, an orphan).
    let _lock = lock(dir, &t)?;
    let previous = receipt::read_for(dir, &t)?;
    if let Some(r) = previous.as_ref().filter(|r| r.state.is_final()) {
        // A passed task's files must still be the ones its receipt hashed.
        super::receipt::outputs(dir, r)?;
        return Ok(TaskOutcome::AlreadyFinal(r.clone()));
    }
    let t0 = Instant::now();
    let blocked = loop {
        match deps_state(dir, &plan, &t) {
            Ok(b) => break b,
            Err(e) => match o.wait_deps {
                Some(w) if t0.elapsed() < w && crate::interrupt::received().is_none() => {
                    std::thread::sleep(Duration::from_secs(5))
                }
                _ => return Err(e),
            },
        }
    };
    if let Some((dep, state)) = blocked {
        return Ok(TaskOutcome::Blocked { dep, state });
    }
    let checked = check_inputs(dir, &plan, &t);
    if tdir.exists() {
        std::fs::remove_dir_all(&tdir)
            .with_context(|| format!("{}: cannot clear", tdir.display()))?;
    }
    std::fs::create_dir_all(&tdir).with_context(|| format!("{}: cannot create", tdir.display()))?;
    let attempt = previous.map_or(1, |r| r.attempt + 1);
    if let Err(e) = checked {
        // Final: the same inputs would fail again. The receipt says why.
        let r = refused(&plan, &t, o, attempt, format!("{e:#}"))?;
        receipt::write(&tdir, &r)?;
        return Ok(TaskOutcome::Ran(r));
    }
    let r = attempt_once(dir, &plan, &t, o, attempt)?;
    Ok(TaskOutcome::Ran(r))
}

/// The exclusive lock of task `t` (`tasks/NNN-….lock`, flock), held while it runs.
///
/// Errors: another process holds it (a runtime failure: retried later).
fn lock(dir: &Path, t: &Task) -> Result<std::fs::File> {
    let p = dir.join(format!("{}.lock", t.dir));
    crate::paths::try_lock(&p)?.ok_or_else(|| Busy(p).into())
}

/// Another process runs this task now (its lock is held): try again later (exit 3).
#[derive(Debug)]
pub struct Busy(pub PathBuf);

impl std::fmt::Display for Busy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: the task is running in another process",
            self.0.display()
        )
    }
}

impl std::error::Error for Busy {}

/// The receipt of an attempt refused before its command ran (an input hash check).
fn refused(
    plan: &Plan,
    t: &Task,
    o: &TaskOptions,
    attempt: u32,
    reason: String,
) -> Result<Receipt> {
    let now = crate::protocol::run::utc_now();
    Ok(Receipt {
        index: t.index,
        id: t.id.clone(),
        kind: t.kind,
        state: TaskState::InputError,
        exit_code: None,
        verdict: None,
        attempt,
        executor: o.executor,
        job: o.job.clone(),
        host: host(),
        cpu_variant: plan.settings.cpu_variant.clone(),
        threads: plan.settings.threads.get(),
        image_digest: crate::image::digest()?,
        started: now.clone(),
        finished: now,
        wall_s: 0.0,
        cpu_s: 0.0,
        max_rss_kib: 0,
        command: Vec::new(),
        outputs: Vec::new(),
        quality: Default::default(),
        reason: Some(reason),
    })
}

fn attempt_once(
    dir: &Path,
    plan: &Plan,
    t: &Task,
    o: &TaskOptions,
    attempt: u32,
) -> Result<Receipt> {
    let tdir = dir.join(&t.dir);
    let args = argv(dir, plan, t);
    let open = |n: &str| {
        let p = tdir.join(n);
        std::fs::File::create(&p).with_context(|| format!("{}: cannot create", p.display()))
    };
    let exe = std::env::current_exe().context("cannot locate the quantgate binary")?;
    let mut cmd = std::process::Command::new(exe);
    cmd.args(&args)
        .stdout(open("stdout.log")?)
        .stderr(open("stderr.log")?)
        .env(llama_runtime::CPU_VARIANT_ENV, &plan.settings.cpu_variant);
    let started = crate::protocol::run::utc_now();
    // The folder is the attempt's only if this marker is still in it afterwards: a command
    // that writes into it (verify's report) would re-create a deleted folder.
    let marker = tdir.join(".attempt");
    let token = format!("{} {started} {attempt}\n", std::process::id());
    std::fs::write(&marker, &token)
        .with_context(|| format!("{}: cannot write", marker.display()))?;
    let ours = || std::fs::read_to_string(&marker).is_ok_and(|t| t == token);
    // A signal to this process reaches the child too (same process group); the watcher
    // makes sure of it when only this process was signalled.
    let m = crate::child::run_watched(&mut cmd, &mut |_| crate::interrupt::received().is_some())?;
    if !ours() {
        return Err(FolderLost(tdir).into());
    }
    let state = if crate::interrupt::received().is_some() {
        TaskState::Interrupted
    } else {
        TaskState::from_exit(m.exit_code)
    };
    let outputs = if state == TaskState::Passed {
        written(dir, t).map_err(|_| FolderLost(tdir.clone()))?
    } else {
        Vec::new()
    };
    let last = last_line(&tdir.join("stdout.log"));
    let verdict = match last.as_str() {
        "GO" => Some(Verdict::Go),
        "NO-GO" => Some(Verdict::NoGo),
        _ => None,
    };
    let rel = |a: &OsString| {
        let s = a.to_string_lossy();
        s.strip_prefix(&format!("{}/", dir.display()))
            .map_or(s.to_string(), String::from)
    };
    let r = Receipt {
        index: t.index,
        id: t.id.clone(),
        kind: t.kind,
        state,
        exit_code: m.exit_code,
        verdict,
        attempt,
        executor: o.executor,
        job: o.job.clone(),
        host: host(),
        cpu_variant: plan.settings.cpu_variant.clone(),
        threads: plan.settings.threads.get(),
        image_digest: crate::image::digest()?,
        started,
        finished: crate::protocol::run::utc_now(),
        wall_s: m.wall_s,
        cpu_s: m.cpu_s,
        max_rss_kib: m.max_rss_kib,
        command: std::iter::once("quantgate".to_string())
            .chain(args.iter().map(rel))
            .collect(),
        outputs,
        quality: figures::from_json(t.kind, &figures_file(&tdir, t.kind)),
        reason: (state != TaskState::Passed).then(|| last_line(&tdir.join("stderr.log"))),
    };
    if !ours() {
        return Err(FolderLost(tdir).into());
    }
    receipt::write(&tdir, &r)?;
    Ok(r)
}
