//! `quantgate run`: executes a frozen protocol into a fresh run folder.
//!
//! Layout of a run folder: `run_status.json` (written atomically: `running` at start, then one
//! terminal receipt `complete` or `failed` with step, reason and exit code), `results.json`
//! (environment, every quantity, every step's receipt), `logs/NN-step.out|.err` (each
//! command's raw output), `models/MODEL/ARM.gguf`, `verify/MODEL-ARM/`, `steps/NN-step.json`.
//! Every step is a child process of this binary (its peak RSS is its own, from `wait4`); its
//! JSON is read back by deserializing the types that wrote it ([`EvalRecord`], [`VerifyReport`]).

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, ensure, Context, Result};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::env::{self, Environment};
use super::quantities::{name, quantity, Quantities, Quantity};
use super::{Loaded, ModelSpec, Step, Tolerances};
use crate::eval::hellaswag::HellaswagResult;
use crate::eval::kld::KldResult;
use crate::eval::llama_bench::BenchResult;
use crate::eval::ppl::PplResult;
use crate::eval::record::{EvalKind, EvalRecord};
use crate::interrupt;
use crate::paths::write_atomic;
use crate::verify::{Verdict, VerifyReport};

mod steps;

/// The state of a run, as `run_status.json` and `results.json` carry it.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum RunState {
    /// Started, not finished (or the runner died).
    Running,
    /// Every step ran.
    Complete,
    /// A step failed, a ceiling was exceeded, or a signal stopped it.
    Failed,
}

impl std::fmt::Display for RunState {
    /// `running`, `complete` or `failed` (the serde name).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        crate::verify::outcome::write_serde_name(self, f)
    }
}

/// `run_status.json`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct RunStatus {
    /// The state.
    pub state: RunState,
    pub protocol_id: String,
    pub protocol_sha256: String,
    pub operator: String,
    /// UTC, RFC 3339.
    pub started: String,
    pub finished: Option<String>,
    /// The failing step (`inputs`, `03-ppl-SmolLM2-F16`, …).
    pub step: Option<String>,
    pub reason: Option<String>,
    /// The failing command's exit code (`None`: killed by a signal, or no command ran).
    pub exit_code: Option<i32>,
    /// This runner's process id.
    pub pid: u32,
}

/// One executed command.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct StepReceipt {
    pub name: String,
    pub command: Vec<String>,
    pub exit_code: Option<i32>,
    pub wall_s: f64,
    /// User + system CPU time, s.
    pub cpu_s: f64,
    /// Peak RSS (`wait4` rusage `ru_maxrss`), KiB.
    pub max_rss_kib: u64,
    /// Raw stdout / stderr, relative to the run folder.
    pub stdout: String,
    pub stderr: String,
}

/// One output file of the run.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct FileFact {
    pub bytes: u64,
    pub sha256: String,
}

/// `results.json`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Results {
    pub protocol_id: String,
    pub protocol_sha256: String,
    pub operator: String,
    pub environment: serde_json::Value,
    pub tolerances: Tolerances,
    pub decision_rule: String,
    /// As the terminal status.
    pub state: RunState,
    /// Per model: its quantities.
    pub models: BTreeMap<String, Quantities>,
    /// Per model and arm: the GGUF files made.
    pub files: BTreeMap<String, BTreeMap<String, FileFact>>,
    pub steps: Vec<StepReceipt>,
}

/// Why a run stopped.
#[derive(Debug)]
struct Failure {
    step: String,
    reason: String,
    exit_code: Option<i32>,
}

impl Failure {
    fn new(step: &str, reason: impl Into<String>) -> Self {
        Failure {
            step: step.into(),
            reason: reason.into(),
            exit_code: None,
        }
    }
}

impl From<anyhow::Error> for Failure {
    fn from(e: anyhow::Error) -> Self {
        Failure::new("runner", format!("{e:#}"))
    }
}

/// UTC now as `YYYY-MM-DDTHH:MM:SSZ`.
pub fn utc_now() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    let (days, rem) = (secs.div_euclid(86400), secs.rem_euclid(86400));
    // Civil date from days since 1970-01-01 (H. Hinnant's algorithm).
    let z = days + 719468;
    let era = z.div_euclid(146097);
    let doe = z - era * 146097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + (m <= 2) as i64;
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// How the run ended.
#[derive(Clone, Debug)]
pub struct Outcome {
    /// The terminal receipt (as written to `run_status.json`).
    pub status: RunStatus,
    /// Where `results.json` was written.
    pub results_path: PathBuf,
}

struct Runner<'a> {
    l: &'a Loaded,
    dir: PathBuf,
    exe: PathBuf,
    t0: Instant,
    cpu_done_s: f64,
    n_step: usize,
    results: Results,
}

/// Refuses a run folder that is not empty, then creates it.
fn fresh_run_dir(run_dir: &Path) -> Result<()> {
    if run_dir.exists() {
        let mut rd = std::fs::read_dir(run_dir)
            .with_context(|| format!("{}: cannot read run folder", run_dir.display()))?;
        if rd.next().is_some() {
            bail!(
                "{}: run folder is not empty; every run gets a fresh folder",
                run_dir.display()
            );
        }
    }
    std::fs::create_dir_all(run_dir)
        .with_context(|| format!("{}: cannot create", run_dir.display()))
}

fn write_json<T: Serialize>(path: &Path, v: &T) -> Result<()> {
    write_atomic(path, serde_json::to_string_pretty(v)?.as_bytes())
}

/// Applies `settings.cpu_variant` to this process and, through the environment, to every step
/// it starts: the pinned variant, or (no pin) the host's best with any inherited pin removed.
/// Runs before anything loads llama.cpp, so the recorded environment names what the steps run.
///
/// Errors: a pinned variant that was not built or that this host cannot run (naming the
/// protocol file and the field), before any step starts.
fn pin_cpu_variant(protocol: &Path, pin: Option<&str>) -> Result<()> {
    use llama_runtime::CPU_VARIANT_ENV;
    match pin {
        Some(v) => std::env::set_var(CPU_VARIANT_ENV, v),
        None => std::env::remove_var(CPU_VARIANT_ENV),
    }
    let cpu = llama_runtime::cpu_backend()
        .map_err(|e| anyhow::anyhow!("{}: settings.cpu_variant: {e}", protocol.display()))?;
    if let Some(v) = pin {
        ensure!(
            cpu.pinned && cpu.variant == v,
            "{}: settings.cpu_variant = {v:?} but this process already runs {cpu}",
            protocol.display()
        );
    }
    Ok(())
}

/// Runs the protocol at `protocol` into `run_dir` (created if missing; refused if not empty).
/// Returns the terminal status; `Err` only when the run folder cannot be used at all.
pub fn run(protocol: &Path, run_dir: &Path, operator: &str) -> Result<Outcome> {
    let l = super::load(protocol)?;
    pin_cpu_variant(protocol, l.protocol.settings.cpu_variant.as_deref())?;
    fresh_run_dir(run_dir)?;
    interrupt::install();
    let mut status = RunStatus {
        state: RunState::Running,
        protocol_id: l.protocol.protocol.id.clone(),
        protocol_sha256: l.sha256.clone(),
        operator: operator.into(),
        started: utc_now(),
        finished: None,
        step: None,
        reason: None,
        exit_code: None,
        pid: std::process::id(),
    };
    let status_path = run_dir.join("run_status.json");
    write_json(&status_path, &status)?;
    // The exact bytes of the frozen protocol travel with the run: `analyze` takes the
    // tolerances from them (checked against the sha256), never from results.json.
    let bytes = std::fs::read(protocol)?;
    if crate::hash::sha256_bytes(&bytes) != l.sha256 {
        bail!("{}: changed while being read", protocol.display());
    }
    write_atomic(&run_dir.join("protocol.toml"), &bytes)?;
    let env: Environment = env::collect(l.protocol.settings.threads);
    let mut r = Runner {
        l: &l,
        dir: run_dir.to_path_buf(),
        exe: std::env::current_exe().context("cannot locate the quantgate binary")?,
        t0: Instant::now(),
        cpu_done_s: 0.0,
        n_step: 0,
        results: Results {
            protocol_id: status.protocol_id.clone(),
            protocol_sha256: l.sha256.clone(),
            operator: operator.into(),
            environment: serde_json::to_value(&env)?,
            tolerances: l.protocol.tolerances.clone(),
            decision_rule: l.protocol.decision.rule.clone(),
            state: RunState::Running,
            models: BTreeMap::new(),
            files: BTreeMap::new(),
            steps: Vec::new(),
        },
    };
    let outcome = r.execute();
    status.finished = Some(utc_now());
    match outcome {
        Ok(()) => status.state = RunState::Complete,
        Err(f) => {
            status.state = RunState::Failed;
            status.step = Some(f.step);
            status.reason = Some(f.reason);
            status.exit_code = f.exit_code;
        }
    }
    r.results.state = status.state;
    let results_path = run_dir.join("results.json");
    write_json(&results_path, &r.results)?;
    write_json(&status_path, &status)?;
    Ok(Outcome {
        status,
        results_path,
    })
}

fn os(s: &str) -> OsString {
    OsString::from(s)
}

impl Runner<'_> {
    fn execute(&mut self) -> Result<(), Failure> {
        self.check_inputs()?;
        for sub in ["logs", "models", "verify", "steps"] {
            std::fs::create_dir_all(self.dir.join(sub))
                .map_err(|e| Failure::new("runner", format!("{sub}: {e}")))?;
        }
        let steps = self.l.protocol.steps.clone();
        for m in &self.l.protocol.models.clone() {
            self.results.models.entry(m.name.clone()).or_default();
            for s in &steps {
                self.step(m, s)?;
            }
        }
        Ok(())
    }

    /// Every input's sha256 before anything runs; all mismatches listed at once.
    fn check_inputs(&mut self) -> Result<(), Failure> {
        let mut bad = Vec::new();
        for i in &self.l.protocol.inputs {
            let p = self.l.resolve(&i.path);
            match crate::hash::sha256_file(&p) {
                Ok(h) if h == i.sha256 => {}
                Ok(h) => bad.push(format!(
                    "{} ({}): sha256 {h}, protocol pins {}",
                    i.name,
                    p.display(),
                    i.sha256
                )),
                Err(e) => bad.push(format!("{}: {e:#}", i.name)),
            }
            if interrupt::received().is_some() {
                return Err(self.interrupted("inputs", None));
            }
        }
        if bad.is_empty() {
            Ok(())
        } else {
            Err(Failure::new(
                "inputs",
                format!(
                    "input hash check failed, nothing computed: {}",
                    bad.join("; ")
                ),
            ))
        }
    }

    fn interrupted(&self, step: &str, code: Option<i32>) -> Failure {
        let sig = interrupt::received().unwrap_or(0);
        Failure {
            step: step.into(),
            reason: format!(
                "{} received; the step was stopped",
                interrupt::signal_name(sig)
            ),
            exit_code: code,
        }
    }

    fn arm_path(&self, model: &str, arm: &str) -> PathBuf {
        self.dir
            .join("models")
            .join(model)
            .join(format!("{arm}.gguf"))
    }

    fn rel(&self, p: &Path) -> String {
        p.strip_prefix(&self.dir).unwrap_or(p).display().to_string()
    }

    /// Why a running child must stop, if it must: a signal (empty reason), or a ceiling.
    fn ceiling_exceeded(&self, pid: libc::pid_t) -> Option<String> {
        let ceil = &self.l.protocol.ceilings;
        if interrupt::received().is_some() {
            Some(String::new())
        } else if self.t0.elapsed().as_secs_f64() > ceil.wall_s {
            Some(format!("wall-time ceiling of {} s exceeded", ceil.wall_s))
        } else if self.cpu_done_s + crate::child::proc_cpu_s(pid) > ceil.cpu_s {
            Some(format!("CPU-time ceiling of {} s exceeded", ceil.cpu_s))
        } else {
            None
        }
    }

    /// Runs this binary with `args` as step `label`; exit codes in `ok` count as success.
    fn exec(
        &mut self,
        label: &str,
        args: Vec<OsString>,
        ok: &[i32],
    ) -> Result<StepReceipt, Failure> {
        self.n_step += 1;
        let name = format!("{:02}-{label}", self.n_step);
        let out_p = self.dir.join("logs").join(format!("{name}.out"));
        let err_p = self.dir.join("logs").join(format!("{name}.err"));
        let open = |p: &Path| {
            std::fs::File::create(p)
                .map_err(|e| Failure::new(&name, format!("{}: {e}", p.display())))
        };
        let (out_f, err_f) = (open(&out_p)?, open(&err_p)?);
        let mut cmd = std::process::Command::new(&self.exe);
        cmd.args(&args).stdout(out_f).stderr(err_f);
        let mut stop: Option<String> = None;
        let m = crate::child::run_watched(&mut cmd, &mut |pid| {
            stop = self.ceiling_exceeded(pid);
            stop.is_some()
        })
        .map_err(|e| Failure::new(&name, format!("{e:#}")))?;
        self.cpu_done_s += m.cpu_s;
        let receipt = StepReceipt {
            name: name.clone(),
            command: std::iter::once(OsString::from("quantgate"))
                .chain(args.iter().cloned())
                .map(|a| a.to_string_lossy().into_owned())
                .collect(),
            exit_code: m.exit_code,
            wall_s: m.wall_s,
            cpu_s: m.cpu_s,
            max_rss_kib: m.max_rss_kib,
            stdout: self.rel(&out_p),
            stderr: self.rel(&err_p),
        };
        self.results.steps.push(receipt.clone());
        match (stop, m.exit_code) {
            (Some(r), code) if r.is_empty() => Err(self.interrupted(&name, code)),
            (Some(reason), exit_code) => Err(Failure {
                step: name,
                reason,
                exit_code,
            }),
            (None, Some(c)) if ok.contains(&c) => Ok(receipt),
            (None, exit_code) => {
                let tail = std::fs::read_to_string(&err_p).unwrap_or_default();
                let last = tail
                    .lines()
                    .rev()
                    .find(|l| !l.trim().is_empty())
                    .unwrap_or("");
                Err(Failure {
                    step: name,
                    reason: format!("command failed: {last}"),
                    exit_code,
                })
            }
        }
    }

    /// The resolved path of the input named `name` (validated by `protocol check`).
    fn input_path(&self, name: &str) -> PathBuf {
        self.l.resolve(
            &self
                .l
                .input(name)
                .map(|i| i.path.clone())
                .unwrap_or_default(),
        )
    }

    /// Runs `quantgate eval SUB ARGS… -t THREADS --json steps/LABEL.json` as step `label` and
    /// returns its receipt and the record it wrote.
    fn eval_step<T: DeserializeOwned>(
        &mut self,
        label: &str,
        kind: EvalKind,
        args: Vec<OsString>,
    ) -> Result<(StepReceipt, EvalRecord<T>), Failure> {
        let json = self.dir.join("steps").join(format!("{label}.json"));
        let mut all = vec![os("eval"), os(kind.name())];
        all.extend(args);
        all.extend([
            os("-t"),
            os(&self.l.protocol.settings.threads.to_string()),
            os("--json"),
            json.clone().into(),
        ]);
        let rc = self.exec(label, all, &[0])?;
        let rec: EvalRecord<T> = self.read_json(label, &json)?;
        if rec.kind != kind {
            return Err(Failure::new(
                label,
                format!(
                    "{}: a {} record where {kind} was run",
                    json.display(),
                    rec.kind
                ),
            ));
        }
        Ok((rc, rec))
    }

    /// Deserializes what a step wrote into the type that wrote it.
    fn read_json<T: DeserializeOwned>(&self, step: &str, p: &Path) -> Result<T, Failure> {
        let b =
            std::fs::read(p).map_err(|e| Failure::new(step, format!("{}: {e}", p.display())))?;
        serde_json::from_slice(&b)
            .map_err(|e| Failure::new(step, format!("{}: invalid JSON: {e}", p.display())))
    }

    /// `x` when finite; a NaN or infinite measurement (JSON `null`) fails the step, as a
    /// number the run cannot compare.
    fn finite(step: &str, what: &str, x: f64) -> Result<f64, Failure> {
        if x.is_finite() {
            Ok(x)
        } else {
            Err(Failure::new(
                step,
                format!("output has no number for {what}"),
            ))
        }
    }

    /// Records `stem[label]` = `value` for `model`.
    fn put(&mut self, model: &str, stem: &str, label: &str, value: f64) -> &mut Quantity {
        let key = name(stem, label);
        let qs = self.results.models.entry(model.into()).or_default();
        qs.insert(key.clone(), quantity(stem, value));
        qs.get_mut(&key).expect("just inserted")
    }

    fn value(&self, model: &str, stem: &str, arm: &str) -> Option<f64> {
        self.results
            .models
            .get(model)?
            .get(&name(stem, arm))
            .map(|q| q.value)
    }

    fn record_file(&mut self, model: &str, arm: &str) -> Result<(), Failure> {
        let p = self.arm_path(model, arm);
        let bytes = std::fs::metadata(&p)
            .map_err(|e| Failure::new("runner", format!("{}: {e}", p.display())))?
            .len();
        let sha256 = crate::hash::sha256_file(&p)?;
        self.results
            .files
            .entry(model.into())
            .or_default()
            .insert(arm.into(), FileFact { bytes, sha256 });
        self.put(model, "file_bytes", arm, bytes as f64);
        Ok(())
    }

    /// Adds `delta_STEM[arm]` = STEM[arm] − STEM[base], judged against run 1's STEM[base].
    fn put_delta(&mut self, model: &str, stem: &str, arm: &str, base: &str) {
        if let (Some(a), Some(b)) = (self.value(model, stem, arm), self.value(model, stem, base)) {
            let q = self.put(model, &format!("delta_{stem}"), arm, a - b);
            q.baseline = Some(name(stem, base));
        }
    }

    fn step(&mut self, m: &ModelSpec, s: &Step) -> Result<(), Failure> {
        match s {
            Step::Convert {} => self.step_convert(m),
            Step::Quantize {} => self.step_quantize(m),
            Step::Verify { arms } => self.step_verify(m, arms),
            Step::Ppl { text, ctx, chunks } => self.step_ppl(m, text, *ctx, *chunks),
            Step::Hellaswag {
                tasks_file,
                tasks,
                ctx,
            } => self.step_hellaswag(m, tasks_file, *tasks, *ctx),
            Step::Kld { text, ctx, chunks } => self.step_kld(m, text, *ctx, *chunks),
            Step::Bench {
                n_prompt,
                n_gen,
                replicates,
            } => self.step_bench(m, *n_prompt, *n_gen, *replicates),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_format() {
        let s = utc_now();
        assert_eq!(s.len(), 20, "{s}");
        assert!(
            s.starts_with("20") && s.ends_with('Z') && &s[10..11] == "T",
            "{s}"
        );
    }
}
