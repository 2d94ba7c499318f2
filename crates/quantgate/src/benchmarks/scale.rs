//! `bench scale`: the whole pipeline once on a big model (7–8B), each step a child process of
//! its own: convert F16 → quantize Q4_K_M → verify F16 → verify Q4_K_M → eval ppl (4 × 512) on
//! both → eval kld. Per step: wall, peak RSS (`ru_maxrss`), peak anonymous memory (RssAnon of
//! /proc/PID/status, sampled every 50 ms), the peak disk use of the work folder's filesystem
//! (free space before the step less its least free space while the step ran, sampled as
//! well) and the size of what the step leaves. Goals are ratios of measured to allowed.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{ensure, Context, Result};
use serde::Serialize;

use crate::child::run_watched;
use crate::threads::Threads;

/// One step's figures.
#[derive(Clone, Debug, Serialize)]
pub struct Step {
    /// `convert F16`, `verify Q4_K_M`, …
    pub name: String,
    /// Wall time, seconds.
    pub wall_s: f64,
    /// Peak resident set, bytes (`ru_maxrss`).
    pub peak_rss: u64,
    /// Peak anonymous resident memory, bytes (RssAnon, sampled).
    pub peak_anon: u64,
    /// Peak disk use on the work folder's filesystem while the step ran, bytes (sampled).
    pub disk_peak: u64,
    /// Size of the files the step leaves, bytes.
    pub written: u64,
    /// Exit code.
    pub exit_code: Option<i32>,
}

/// A goal: `measured ≤ allowed`, as a ratio.
#[derive(Clone, Debug, Serialize)]
pub struct Goal {
    /// What is compared, e.g. `convert wall ≤ 1.3 × cp + fsync floor`.
    pub what: String,
    /// Measured.
    pub measured: f64,
    /// Allowed.
    pub allowed: f64,
    /// Unit of both (`s`, `GiB`).
    pub unit: String,
}

impl Goal {
    /// measured / allowed.
    pub fn ratio(&self) -> f64 {
        self.measured / self.allowed
    }

    /// Whether the goal is met.
    pub fn met(&self) -> bool {
        self.measured <= self.allowed
    }
}

/// The model's sizes the goals are stated against, bytes.
#[derive(Clone, Debug, Serialize)]
pub struct Sizes {
    /// The HF source's safetensors.
    pub source: u64,
    /// 2 bytes per weight.
    pub f16: u64,
    /// The largest tensor of the F16 file.
    pub largest_tensor: u64,
    /// The largest layer (`blk.N.*`) in f32.
    pub largest_layer_f32: u64,
}

/// Everything `bench scale` measured.
#[derive(Clone, Debug, Serialize)]
pub struct ScaleBench {
    /// The model's sizes.
    pub sizes: Sizes,
    /// `cp` + `sync` of the source shards, seconds.
    pub floor_s: f64,
    /// The steps, in order.
    pub steps: Vec<Step>,
    /// The goals.
    pub goals: Vec<Goal>,
    /// Tokens/s of the reference and of llama.cpp in verify's judged logits, per verify step.
    pub forward_speed: Vec<(String, crate::verify::logits::ForwardSpeed)>,
    /// Each verify step's verdict, blockers and per-gate costs.
    pub verdicts: Vec<(
        String,
        crate::verify::Verdict,
        Vec<crate::verify::Blocker>,
        Vec<crate::verify::resources::GateCost>,
    )>,
    /// The JSON record of each eval step (PPL, KLD), by step name.
    pub evals: Vec<(String, serde_json::Value)>,
}

/// The steps run so far, in one work folder.
struct Steps<'a> {
    exe: &'a Path,
    dir: &'a Path,
    threads: String,
    done: Vec<Step>,
}

impl Steps<'_> {
    /// `quantgate ARGS…` with `--threads`/`-t` last where `threads_flag` names it.
    fn cmd(&self, args: &[&dyn AsRef<std::ffi::OsStr>], threads_flag: Option<&str>) -> Command {
        let mut c = Command::new(self.exe);
        for a in args {
            c.arg(a);
        }
        if let Some(f) = threads_flag {
            c.args([f, &self.threads]);
        }
        c
    }

    /// Runs one step; it must exit 0 (or 1, NO-GO, for a verify: the bench measures it and
    /// goes on, the verdict in its table).
    fn run(&mut self, name: &str, mut cmd: Command, leaves: &[&Path]) -> Result<()> {
        let s = measure(name, &mut cmd, self.dir, leaves)?;
        let verdict = name.starts_with("verify") && s.exit_code == Some(1);
        ensure!(
            s.exit_code == Some(0) || verdict,
            "bench scale: {name} failed: {s:?}"
        );
        self.done.push(s);
        crate::progress::report("steps done", self.done.len(), 8);
        Ok(())
    }
}

/// Runs the pipeline on `hf` in `work` with `exe` (this quantgate binary), PPL and KLD on
/// `text`.
///
/// Errors: a step that cannot start or fails (its name and exit code), unreadable outputs.
pub fn run(
    exe: &Path,
    hf: &Path,
    work: &Path,
    text: &Path,
    threads: Threads,
) -> Result<ScaleBench> {
    ensure!(text.is_file(), "{}: no such text file (-f)", text.display());
    ensure!(
        hf.join("config.json").is_file(),
        "{}: not an HF folder (no config.json)",
        hf.display()
    );
    std::fs::create_dir_all(work).with_context(|| format!("{}: cannot create", work.display()))?;
    let (f16, q4) = (work.join("model-F16.gguf"), work.join("model-Q4_K_M.gguf"));
    let floor_s = floor(hf, work)?;
    let mut st = Steps {
        exe,
        dir: work,
        threads: threads.to_string(),
        done: Vec::new(),
    };
    let c = st.cmd(&[&"convert", &hf, &"-o", &f16, &"--outtype", &"f16"], None);
    st.run("convert F16", c, &[&f16])?;
    let c = st.cmd(&[&"quantize", &f16, &q4, &"Q4_K_M"], Some("--threads"));
    st.run("quantize Q4_K_M", c, &[&q4])?;
    let (mut forward_speed, mut verdicts) = (Vec::new(), Vec::new());
    for (name, gguf) in [("verify F16", &f16), ("verify Q4_K_M", &q4)] {
        let report = work.join(format!("report-{}", name.replace(' ', "-")));
        let _ = std::fs::remove_dir_all(&report);
        let c = st.cmd(
            &[
                &"verify",
                &"--hf",
                &hf,
                &"--gguf",
                gguf,
                &"--report",
                &report,
            ],
            Some("--threads"),
        );
        st.run(name, c, &[&report])?;
        let r: crate::verify::VerifyReport =
            serde_json::from_slice(&std::fs::read(report.join("report.json"))?)?;
        if let Some(s) = r.gate2_speed {
            forward_speed.push((name.to_string(), s));
        }
        verdicts.push((name.to_string(), r.verdict, r.blockers, r.costs));
    }
    let evals = evals(&mut st, (&f16, &q4), text)?;
    let sizes = sizes(hf, &f16)?;
    let goals = goals(&sizes, floor_s, &st.done);
    Ok(ScaleBench {
        sizes,
        floor_s,
        steps: st.done,
        goals,
        forward_speed,
        verdicts,
        evals,
    })
}

/// eval ppl (4 × 512) of both files, then the KLD of the Q4_K_M against the F16's logits:
/// each step's JSON record, by step name.
fn evals(
    st: &mut Steps,
    (f16, q4): (&Path, &Path),
    text: &Path,
) -> Result<Vec<(String, serde_json::Value)>> {
    let base = st.dir.join("kld-base.logits");
    let on_text = [
        &"-f" as &dyn AsRef<std::ffi::OsStr>,
        &text,
        &"-c",
        &"512",
        &"--chunks",
        &"4",
    ];
    let mut out = Vec::new();
    for (name, kind, model) in [
        ("eval ppl F16", "ppl", f16),
        ("eval ppl Q4_K_M", "ppl", q4),
        ("eval kld-base F16", "kld-base", f16),
        ("eval kld Q4_K_M", "kld", q4),
    ] {
        let json = st.dir.join(format!("{}.json", name.replace(' ', "-")));
        let mut args: Vec<&dyn AsRef<std::ffi::OsStr>> = vec![&"eval", &kind, &model];
        match kind {
            "kld-base" => args.extend([&"--out" as &dyn AsRef<std::ffi::OsStr>, &base]),
            "kld" => args.extend([&"--base" as &dyn AsRef<std::ffi::OsStr>, &base]),
            _ => {}
        }
        if kind != "kld" {
            args.extend(on_text);
        }
        args.extend([&"--json" as &dyn AsRef<std::ffi::OsStr>, &json]);
        let c = st.cmd(&args, Some("-t"));
        st.run(name, c, &[])?;
        out.push((
            name.to_string(),
            serde_json::from_slice(&std::fs::read(&json)?)?,
        ));
    }
    Ok(out)
}

/// The goals of issue 30 against the measured steps.
fn goals(sizes: &Sizes, floor_s: f64, steps: &[Step]) -> Vec<Goal> {
    let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
    let by = |n: &str| steps.iter().find(|s| s.name == n);
    let mut g = Vec::new();
    if let Some(c) = by("convert F16") {
        g.push(Goal {
            what: "convert wall ≤ 1.3 × cp + fsync floor".into(),
            measured: c.wall_s,
            allowed: 1.3 * floor_s,
            unit: "s".into(),
        });
        g.push(Goal {
            what: "convert peak RSS ≤ largest tensor + 64 MiB".into(),
            measured: gib(c.peak_rss),
            allowed: gib(sizes.largest_tensor + (64 << 20)),
            unit: "GiB".into(),
        });
    }
    for n in ["verify F16", "verify Q4_K_M"] {
        if let Some(v) = by(n) {
            g.push(Goal {
                what: format!("{n} anonymous memory ≤ largest layer in f32 + 1 GiB"),
                measured: gib(v.peak_anon),
                allowed: gib(sizes.largest_layer_f32 + (1 << 30)),
                unit: "GiB".into(),
            });
            g.push(Goal {
                what: format!("{n} scratch disk ≤ F16 size"),
                measured: gib(v.disk_peak),
                allowed: gib(sizes.f16),
                unit: "GiB".into(),
            });
        }
    }
    g
}

/// The sizes of the model: source shards, F16 file, largest tensor and layer.
fn sizes(hf: &Path, f16: &Path) -> Result<Sizes> {
    let source = shards(hf)?
        .iter()
        .map(|p| p.metadata().map_or(0, |m| m.len()))
        .sum();
    let g = gguf::Gguf::open(f16)?;
    let mut layers: std::collections::BTreeMap<usize, u64> = Default::default();
    for t in &g.header.tensors {
        if let Some(l) = crate::verify::expand::layer_of(&t.name) {
            *layers.entry(l).or_default() += 4 * t.n_elements();
        }
    }
    Ok(Sizes {
        source,
        f16: g.header.tensors.iter().map(|t| 2 * t.n_elements()).sum(),
        largest_tensor: g
            .header
            .tensors
            .iter()
            .map(|t| t.n_bytes)
            .max()
            .unwrap_or(0),
        largest_layer_f32: layers.values().copied().max().unwrap_or(0),
    })
}

fn shards(hf: &Path) -> Result<Vec<PathBuf>> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(hf)
        .with_context(|| format!("{}: cannot list", hf.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "safetensors"))
        .collect();
    v.sort();
    ensure!(!v.is_empty(), "{}: no .safetensors files", hf.display());
    Ok(v)
}

/// `cp` of the source shards into `dir` and `sync` of the copies, seconds; the copies are
/// removed afterwards.
fn floor(hf: &Path, dir: &Path) -> Result<f64> {
    let src = shards(hf)?;
    let need: u64 = src
        .iter()
        .map(|p| p.metadata().map_or(0, |m| m.len()))
        .sum();
    crate::disk::ensure_free(dir, need, "bench scale's cp + fsync floor")?;
    let copy = dir.join("floor-copy");
    let _ = std::fs::remove_dir_all(&copy);
    std::fs::create_dir_all(&copy)?;
    let mut c = Command::new("sh");
    c.arg("-c")
        .arg(r#"d=$1; shift; cp -- "$@" "$d"/ && sync -- "$d"/*"#)
        .arg("sh")
        .arg(&copy)
        .args(&src);
    let s = measure("cp + sync", &mut c, dir, &[])?;
    std::fs::remove_dir_all(&copy)?;
    ensure!(s.exit_code == Some(0), "cp + sync failed: {s:?}");
    Ok(s.wall_s)
}

/// Runs `cmd` (stdout and stderr to `dir/NAME.log`), sampling the child's RssAnon and the
/// free space of `dir`'s filesystem every 50 ms.
fn measure(name: &str, cmd: &mut Command, dir: &Path, leaves: &[&Path]) -> Result<Step> {
    let log = std::fs::File::create(dir.join(format!("{}.log", name.replace([' ', '+'], "-"))))?;
    cmd.stdout(log.try_clone()?).stderr(Stdio::from(log));
    let free0 = crate::disk::free_bytes(dir)?;
    let (mut anon, mut least_free) = (0u64, free0);
    let m = run_watched(cmd, &mut |pid| {
        anon = anon.max(rss_anon(pid).unwrap_or(0));
        least_free = least_free.min(crate::disk::free_bytes(dir).unwrap_or(free0));
        false
    })?;
    Ok(Step {
        name: name.into(),
        wall_s: m.wall_s,
        peak_rss: m.max_rss_kib * 1024,
        peak_anon: anon,
        disk_peak: free0.saturating_sub(least_free),
        written: leaves.iter().map(|p| du(p)).sum(),
        exit_code: m.exit_code,
    })
}

/// RssAnon of process `pid`, bytes (/proc/PID/status).
fn rss_anon(pid: libc::pid_t) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kb: u64 = s
        .lines()
        .find_map(|l| l.strip_prefix("RssAnon:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    Some(kb * 1024)
}

/// Bytes of a file, or of every file under a folder.
fn du(p: &Path) -> u64 {
    match std::fs::metadata(p) {
        Ok(m) if m.is_dir() => std::fs::read_dir(p)
            .map(|d| d.filter_map(|e| e.ok()).map(|e| du(&e.path())).sum())
            .unwrap_or(0),
        Ok(m) => m.len(),
        Err(_) => 0,
    }
}
