//! `quantgate run`: executes a frozen protocol into a fresh run folder.
//!
//! Layout of a run folder: `run_status.json` (written atomically: `running` at start, then one
//! terminal receipt `complete` or `failed` with step, reason and exit code), `results.json`
//! (environment, every quantity, every step's receipt), `logs/NN-step.out|.err` (each
//! command's raw output), `models/MODEL/ARM.gguf`, `verify/MODEL-ARM/`, `steps/NN-step.json`.
//! Every step is a child process of this binary (its peak RSS is its own, from `wait4`).

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use super::env::{self, Environment};
use super::quantities::{Class, Kind, Quantities, Quantity};
use super::{Loaded, Step, Tolerances};
use crate::interrupt;
use crate::verify::report::write_atomic;

/// `run_status.json`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct RunStatus {
    /// `running`, `complete` or `failed`.
    pub state: String,
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
    /// `complete` or `failed` (as the terminal status).
    pub state: String,
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
    pub status: RunStatus,
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

/// Runs the protocol at `protocol` into `run_dir` (created if missing; refused if not empty).
/// Returns the terminal status; `Err` only when the run folder cannot be used at all.
pub fn run(protocol: &Path, run_dir: &Path, operator: &str) -> Result<Outcome> {
    let l = super::load(protocol)?;
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
        .with_context(|| format!("{}: cannot create", run_dir.display()))?;
    interrupt::install();
    let mut status = RunStatus {
        state: "running".into(),
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
    write_atomic(
        &status_path,
        serde_json::to_string_pretty(&status)?.as_bytes(),
    )?;
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
            state: "running".into(),
            models: BTreeMap::new(),
            files: BTreeMap::new(),
            steps: Vec::new(),
        },
    };
    let outcome = r.execute();
    status.finished = Some(utc_now());
    match outcome {
        Ok(()) => status.state = "complete".into(),
        Err(f) => {
            status.state = "failed".into();
            status.step = Some(f.step);
            status.reason = Some(f.reason);
            status.exit_code = f.exit_code;
        }
    }
    r.results.state = status.state.clone();
    let results_path = run_dir.join("results.json");
    write_atomic(
        &results_path,
        serde_json::to_string_pretty(&r.results)?.as_bytes(),
    )?;
    write_atomic(
        &status_path,
        serde_json::to_string_pretty(&status)?.as_bytes(),
    )?;
    Ok(Outcome {
        status,
        results_path,
    })
}

/// CPU seconds (user + system) of a running process from `/proc/PID/stat`.
fn proc_cpu_s(pid: i32) -> f64 {
    let Ok(s) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0.0;
    };
    // Fields after the parenthesised command name; utime and stime are fields 14 and 15.
    let after = s.rsplit_once(')').map_or("", |x| x.1);
    let f: Vec<&str> = after.split_whitespace().collect();
    // SAFETY: sysconf has no preconditions.
    let tck = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    let t = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    (t(11) + t(12)) / tck
}

fn tv_s(t: libc::timeval) -> f64 {
    t.tv_sec as f64 + t.tv_usec as f64 * 1e-6
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
        let child = cmd.spawn().map_err(|e| {
            Failure::new(&name, format!("cannot start {}: {e}", self.exe.display()))
        })?;
        let pid = child.id() as libc::pid_t;
        let t0 = Instant::now();
        let ceil = self.l.protocol.ceilings.clone();
        let mut stop: Option<String> = None;
        let mut killed_at: Option<Instant> = None;
        let (status, usage) = loop {
            let mut st: libc::c_int = 0;
            // SAFETY: our own child, reaped only here; zeroed rusage is a valid out-param.
            let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
            let rc = unsafe { libc::wait4(pid, &mut st, libc::WNOHANG, &mut ru) };
            if rc == pid {
                break (st, ru);
            }
            if rc < 0 {
                return Err(Failure::new(
                    &name,
                    format!("wait4: {}", std::io::Error::last_os_error()),
                ));
            }
            if stop.is_none() {
                if interrupt::received().is_some() {
                    stop = Some(String::new());
                } else if self.t0.elapsed().as_secs_f64() > ceil.wall_s {
                    stop = Some(format!("wall-time ceiling of {} s exceeded", ceil.wall_s));
                } else if self.cpu_done_s + proc_cpu_s(pid) > ceil.cpu_s {
                    stop = Some(format!("CPU-time ceiling of {} s exceeded", ceil.cpu_s));
                }
                if stop.is_some() {
                    // SAFETY: signalling our own unreaped child.
                    unsafe { libc::kill(pid, libc::SIGTERM) };
                    killed_at = Some(Instant::now());
                }
            } else if killed_at.is_some_and(|k| k.elapsed() > Duration::from_secs(10)) {
                // SAFETY: as above; it ignored SIGTERM for 10 s.
                unsafe { libc::kill(pid, libc::SIGKILL) };
                killed_at = None;
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let code = if libc::WIFEXITED(status) {
            Some(libc::WEXITSTATUS(status))
        } else {
            None
        };
        let cpu_s = tv_s(usage.ru_utime) + tv_s(usage.ru_stime);
        self.cpu_done_s += cpu_s;
        let receipt = StepReceipt {
            name: name.clone(),
            command: std::iter::once(OsString::from("quantgate"))
                .chain(args.iter().cloned())
                .map(|a| a.to_string_lossy().into_owned())
                .collect(),
            exit_code: code,
            wall_s: t0.elapsed().as_secs_f64(),
            cpu_s,
            max_rss_kib: usage.ru_maxrss.max(0) as u64,
            stdout: self.rel(&out_p),
            stderr: self.rel(&err_p),
        };
        self.results.steps.push(receipt.clone());
        match stop {
            Some(r) if r.is_empty() => return Err(self.interrupted(&name, code)),
            Some(r) => {
                return Err(Failure {
                    step: name,
                    reason: r,
                    exit_code: code,
                })
            }
            None => {}
        }
        match code {
            Some(c) if ok.contains(&c) => Ok(receipt),
            _ => {
                let tail = std::fs::read_to_string(&err_p).unwrap_or_default();
                let last = tail
                    .lines()
                    .rev()
                    .find(|l| !l.trim().is_empty())
                    .unwrap_or("");
                Err(Failure {
                    step: name,
                    reason: format!("command failed: {last}"),
                    exit_code: code,
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
    /// returns its receipt and JSON record.
    fn eval_step(
        &mut self,
        label: &str,
        sub: &str,
        args: Vec<OsString>,
    ) -> Result<(StepReceipt, serde_json::Value), Failure> {
        let json = self.dir.join("steps").join(format!("{label}.json"));
        let mut all = vec![OsString::from("eval"), OsString::from(sub)];
        all.extend(args);
        all.extend([
            OsString::from("-t"),
            OsString::from(self.l.protocol.settings.threads.to_string()),
            OsString::from("--json"),
            json.clone().into(),
        ]);
        let rc = self.exec(label, all, &[0])?;
        let v = self.read_json(label, &json)?;
        Ok((rc, v))
    }

    fn put(&mut self, model: &str, name: String, q: Quantity) {
        self.results
            .models
            .entry(model.into())
            .or_default()
            .insert(name, q);
    }

    fn value(&self, model: &str, name: &str) -> Option<f64> {
        self.results.models.get(model)?.get(name).map(|q| q.value)
    }

    fn read_json(&self, step: &str, p: &Path) -> Result<serde_json::Value, Failure> {
        let b =
            std::fs::read(p).map_err(|e| Failure::new(step, format!("{}: {e}", p.display())))?;
        serde_json::from_slice(&b)
            .map_err(|e| Failure::new(step, format!("{}: invalid JSON: {e}", p.display())))
    }

    fn num(step: &str, v: &serde_json::Value, ptr: &str) -> Result<f64, Failure> {
        v.pointer(ptr)
            .and_then(|x| x.as_f64())
            .ok_or_else(|| Failure::new(step, format!("output has no number at {ptr}")))
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
        let q = Quantity::new(bytes as f64, Kind::NonDelta, Class::Quality, "bytes");
        self.put(model, format!("file_bytes[{arm}]"), q);
        Ok(())
    }

    /// Adds `delta_NAME[arm]` = NAME[arm] − NAME[base], judged against run 1's NAME[base].
    fn put_delta(&mut self, model: &str, name: &str, arm: &str, base: &str, unit: &str) {
        if let (Some(a), Some(b)) = (
            self.value(model, &format!("{name}[{arm}]")),
            self.value(model, &format!("{name}[{base}]")),
        ) {
            let mut q = Quantity::new(a - b, Kind::Delta, Class::Quality, unit);
            q.baseline = Some(format!("{name}[{base}]"));
            self.put(model, format!("delta_{name}[{arm}]"), q);
        }
    }

    fn perf(&mut self, model: &str, name: String, v: f64, unit: &str) {
        self.put(
            model,
            name,
            Quantity::new(v, Kind::NonDelta, Class::Performance, unit),
        );
    }

    fn step(&mut self, m: &super::ModelSpec, s: &Step) -> Result<(), Failure> {
        let set = self.l.protocol.settings.clone();
        let t = set.threads.to_string();
        let base = m.arms[0].clone();
        let model = m.name.as_str();
        let os = |s: &str| OsString::from(s);
        match s {
            Step::Convert {} => {
                std::fs::create_dir_all(self.dir.join("models").join(model))
                    .map_err(|e| Failure::new("convert", e.to_string()))?;
                let out = self.arm_path(model, &base);
                let args = vec![
                    os("convert"),
                    self.l.resolve(&m.hf_dir).into(),
                    os("-o"),
                    out.into(),
                    os("--outtype"),
                    os(&base.to_ascii_lowercase()),
                ];
                self.exec(&format!("convert-{model}-{base}"), args, &[0])?;
                self.record_file(model, &base)?;
            }
            Step::Quantize {} => {
                for arm in m.arms.iter().skip(1) {
                    let args = vec![
                        os("quantize"),
                        self.arm_path(model, &base).into(),
                        self.arm_path(model, arm).into(),
                        os(arm),
                        os("--threads"),
                        os(&t),
                    ];
                    self.exec(&format!("quantize-{model}-{arm}"), args, &[0])?;
                    self.record_file(model, arm)?;
                }
            }
            Step::Verify { arms } => {
                for arm in arms {
                    let rep = self.dir.join("verify").join(format!("{model}-{arm}"));
                    let args = vec![
                        os("verify"),
                        os("--hf"),
                        self.l.resolve(&m.hf_dir).into(),
                        os("--gguf"),
                        self.arm_path(model, arm).into(),
                        os("--protocol"),
                        self.l.path.clone().into(),
                        os("--report"),
                        rep.clone().into(),
                        os("--threads"),
                        os(&t),
                    ];
                    // Exit 1 is a measured NO-GO, not a failed step.
                    let label = format!("verify-{model}-{arm}");
                    self.exec(&label, args, &[0, 1])?;
                    let v = self.read_json(&label, &rep.join("report.json"))?;
                    let go = (v["verdict"] == "GO") as u8 as f64;
                    self.put(
                        model,
                        format!("verify_go[{arm}]"),
                        Quantity::new(go, Kind::NonDelta, Class::Quality, "1 = GO"),
                    );
                    for (key, ptr, unit) in [
                        ("logits_min_cosine", "/gate2_logits/min_cosine", "cosine"),
                        (
                            "logits_top1_agreement",
                            "/gate2_logits/top1_agreement",
                            "fraction",
                        ),
                        ("logits_mean_kld", "/gate2_logits/mean_kld", "nats"),
                        ("vectors_min_cosine", "/gate2_vectors/min_cosine", "cosine"),
                    ] {
                        if let Some(x) = v.pointer(ptr).and_then(|x| x.as_f64()) {
                            self.put(
                                model,
                                format!("{key}[{arm}]"),
                                Quantity::new(x, Kind::NonDelta, Class::Quality, unit),
                            );
                        }
                    }
                }
            }
            Step::Ppl { text, ctx, chunks } => {
                let text_p = self.input_path(text);
                for arm in &m.arms {
                    let label = format!("ppl-{model}-{arm}");
                    let args = vec![
                        self.arm_path(model, arm).into(),
                        os("-f"),
                        text_p.clone().into(),
                        os("-c"),
                        os(&ctx.to_string()),
                        os("--chunks"),
                        os(&chunks.to_string()),
                        os("--ubatch"),
                        os(&set.n_ubatch.to_string()),
                    ];
                    let (rc, v) = self.eval_step(&label, "ppl", args)?;
                    let mut q = Quantity::new(
                        Self::num(&label, &v, "/result/ppl")?,
                        Kind::NonDelta,
                        Class::Quality,
                        "PPL",
                    );
                    q.spread = Some(Self::num(&label, &v, "/result/ppl_se")?);
                    self.put(model, format!("ppl[{arm}]"), q);
                    self.perf(
                        model,
                        format!("load_ms[{arm}]"),
                        Self::num(&label, &v, "/load_ms/0")?,
                        "ms",
                    );
                    self.perf(
                        model,
                        format!("peak_rss_kib[ppl,{arm}]"),
                        rc.max_rss_kib as f64,
                        "KiB",
                    );
                    if arm != &base {
                        self.put_delta(model, "ppl", arm, &base, "PPL");
                    }
                }
            }
            Step::Hellaswag {
                tasks_file,
                tasks,
                ctx,
            } => {
                let f = self.input_path(tasks_file);
                for arm in &m.arms {
                    let label = format!("hellaswag-{model}-{arm}");
                    let args = vec![
                        self.arm_path(model, arm).into(),
                        os("-f"),
                        f.clone().into(),
                        os("--tasks"),
                        os(&tasks.to_string()),
                        os("-c"),
                        os(&ctx.to_string()),
                    ];
                    let (rc, v) = self.eval_step(&label, "hellaswag", args)?;
                    self.put(
                        model,
                        format!("acc_norm[{arm}]"),
                        Quantity::new(
                            Self::num(&label, &v, "/result/acc_norm")?,
                            Kind::NonDelta,
                            Class::Quality,
                            "%",
                        ),
                    );
                    self.perf(
                        model,
                        format!("peak_rss_kib[hellaswag,{arm}]"),
                        rc.max_rss_kib as f64,
                        "KiB",
                    );
                    if arm != &base {
                        self.put_delta(model, "acc_norm", arm, &base, "%");
                    }
                }
            }
            Step::Kld { text, ctx, chunks } => {
                let text_p = self.input_path(text);
                let logits = self
                    .dir
                    .join("models")
                    .join(model)
                    .join(format!("{base}.logits"));
                let label = format!("kld-base-{model}-{base}");
                let args = vec![
                    self.arm_path(model, &base).into(),
                    os("-f"),
                    text_p.into(),
                    os("--out"),
                    logits.clone().into(),
                    os("-c"),
                    os(&ctx.to_string()),
                    os("--chunks"),
                    os(&chunks.to_string()),
                ];
                let (rc, _) = self.eval_step(&label, "kld-base", args)?;
                self.perf(
                    model,
                    format!("peak_rss_kib[kld-base,{base}]"),
                    rc.max_rss_kib as f64,
                    "KiB",
                );
                for arm in m.arms.iter().skip(1) {
                    let label = format!("kld-{model}-{arm}");
                    let args = vec![
                        self.arm_path(model, arm).into(),
                        os("--base"),
                        logits.clone().into(),
                    ];
                    let (rc, v) = self.eval_step(&label, "kld", args)?;
                    let mut q = Quantity::new(
                        Self::num(&label, &v, "/result/mean_kld")?,
                        Kind::NonDelta,
                        Class::Quality,
                        "nats",
                    );
                    q.spread = Some(Self::num(&label, &v, "/result/mean_kld_unc")?);
                    self.put(model, format!("mean_kld[{arm}]"), q);
                    let p = 100.0 * Self::num(&label, &v, "/result/same_top_p")?;
                    self.put(
                        model,
                        format!("same_top_p[{arm}]"),
                        Quantity::new(p, Kind::NonDelta, Class::Quality, "%"),
                    );
                    self.perf(
                        model,
                        format!("peak_rss_kib[kld,{arm}]"),
                        rc.max_rss_kib as f64,
                        "KiB",
                    );
                }
                // The base logits are an intermediate (25 MB per 512-token chunk of a 49k vocab).
                let _ = std::fs::remove_file(&logits);
            }
            Step::Bench {
                n_prompt,
                n_gen,
                replicates,
            } => {
                let label = format!("bench-{model}");
                let mut args: Vec<OsString> = m
                    .arms
                    .iter()
                    .map(|a| self.arm_path(model, a).into_os_string())
                    .collect();
                args.extend([
                    os("-p"),
                    os(&n_prompt.to_string()),
                    os("-n"),
                    os(&n_gen.to_string()),
                    os("-r"),
                    os(&replicates.to_string()),
                ]);
                let (rc, v) = self.eval_step(&label, "bench", args)?;
                let arm_of = |path: &str| {
                    m.arms
                        .iter()
                        .find(|a| path.ends_with(&format!("{a}.gguf")))
                        .cloned()
                        .unwrap_or_default()
                };
                for row in v["result"]["rows"].as_array().cloned().unwrap_or_default() {
                    let arm = arm_of(row["model"].as_str().unwrap_or(""));
                    let test = row["test"].as_str().unwrap_or("?").to_string();
                    let mut q = Quantity::new(
                        Self::num(&label, &row, "/avg_ts")?,
                        Kind::Reported,
                        Class::Performance,
                        "t/s",
                    );
                    q.spread = Some(Self::num(&label, &row, "/stddev_ts")?);
                    self.put(model, format!("{test}_ts[{arm}]"), q);
                }
                for row in v["result"]["ratios"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default()
                {
                    let arm = arm_of(row["model"].as_str().unwrap_or(""));
                    let test = row["test"].as_str().unwrap_or("?").to_string();
                    let mut q = Quantity::new(
                        Self::num(&label, &row, "/mean")?,
                        Kind::Ratio,
                        Class::Performance,
                        "ratio",
                    );
                    q.spread = Some(Self::num(&label, &row, "/sd")?);
                    self.put(model, format!("{test}_ratio[{arm}/{base}]"), q);
                }
                self.perf(
                    model,
                    "peak_rss_kib[bench]".into(),
                    rc.max_rss_kib as f64,
                    "KiB",
                );
            }
        }
        Ok(())
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
