//! The JSON record every `eval` measurement writes: the result next to everything that changes
//! it (runtime build, threads, batch sizes, KV type, seed) and what it cost (load time, wall
//! time, peak RSS of this process). Run as a child process (as `quantgate run` does), the peak
//! RSS is the measurement's own; the parent reads the same figure from `wait4`'s rusage.

use std::path::Path;

use crate::threads::Threads;
use anyhow::Result;
use serde::{Deserialize, Serialize};

/// Settings that change results, recorded with every measurement.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct RunSettings {
    pub threads: Threads,
    pub n_ctx: u32,
    pub n_batch: u32,
    pub n_ubatch: u32,
    /// KV cache type (ggml type name).
    pub type_kv: String,
    /// Seed of the measurement's random draws (HellaSwag: std::mt19937(1); bench: C rand()
    /// unseeded = srand(1)); `None` where nothing is drawn.
    pub seed: Option<u64>,
}

/// What an [`EvalRecord`] measured: the `quantgate eval` subcommand that wrote it (serialized
/// as its name, `kld-base`, …).
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum EvalKind {
    /// `eval ppl`: perplexity (llama-perplexity's method).
    Ppl,
    /// `eval hellaswag`: acc_norm (llama-perplexity `--hellaswag`).
    Hellaswag,
    /// `eval kld-base`: the base model's logits saved for KLD.
    KldBase,
    /// `eval kld`: KLD against saved base logits.
    Kld,
    /// `eval bench`: pp512/tg128 (llama-bench).
    Bench,
}

impl EvalKind {
    /// The subcommand's name (`kld-base`, …), as serialized.
    pub fn name(self) -> &'static str {
        match self {
            EvalKind::Ppl => "ppl",
            EvalKind::Hellaswag => "hellaswag",
            EvalKind::KldBase => "kld-base",
            EvalKind::Kld => "kld",
            EvalKind::Bench => "bench",
        }
    }
}

impl std::fmt::Display for EvalKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// One measurement.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct EvalRecord<T> {
    /// What was measured.
    pub kind: EvalKind,
    /// Model path(s) as given.
    pub models: Vec<String>,
    /// File size of each model, bytes.
    pub file_bytes: Vec<u64>,
    /// llama.cpp build (`llama-cpp-sys-2 =… (ggml …)`).
    pub runtime: String,
    pub settings: RunSettings,
    /// Model load time(s), ms.
    #[serde(deserialize_with = "crate::serde_nan::vec_f64")]
    pub load_ms: Vec<f64>,
    /// Wall time of the whole measurement in this process, s.
    #[serde(deserialize_with = "crate::serde_nan::f64")]
    pub wall_s: f64,
    /// Peak RSS of this process since it started, KiB ([`peak_rss_self_kib`]).
    pub peak_rss_kib: u64,
    pub result: T,
}

/// Peak RSS of this process since its `exec`, KiB: `VmHWM` of `/proc/self/status`, else
/// `getrusage(RUSAGE_SELF).ru_maxrss`.
///
/// Why not `ru_maxrss` first: Linux carries the replaced memory map's high-water mark into it
/// at `exec`, and a child started by `posix_spawn` (Rust's `Command`, `CLONE_VM`) replaces its
/// parent's map, so a child of a large process reports at least the parent's peak. Measured:
/// `eval ppl` of SmolLM2 F16 at n_ctx 512 is 404 MiB alone and read 526 MiB as a child of
/// `release`. `VmHWM` belongs to the new map only.
pub fn peak_rss_self_kib() -> u64 {
    let hwm = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        });
    if let Some(kib) = hwm {
        return kib;
    }
    // SAFETY: zeroed rusage is a valid out-parameter.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    if rc == 0 {
        u.ru_maxrss.max(0) as u64
    } else {
        0
    }
}

/// File sizes of `paths` (0 where unreadable: the measurement itself reports that error).
pub fn file_sizes(paths: &[&Path]) -> Vec<u64> {
    paths
        .iter()
        .map(|p| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0))
        .collect()
}

/// Writes `record` as pretty JSON to `path` and as Markdown next to it (`path` with the
/// extension `md`), each atomically (temp file + rename).
pub fn write<T: Serialize>(path: &Path, record: &EvalRecord<T>) -> Result<()> {
    let v = serde_json::to_value(record)?;
    crate::paths::write_atomic(path, serde_json::to_string_pretty(&v)?.as_bytes())?;
    crate::paths::write_atomic(&path.with_extension("md"), markdown(&v).as_bytes())
}

fn cell(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Array(a) if a.len() > 8 => format!("[{} values]", a.len()),
        other => other.to_string(),
    }
}

/// The record as Markdown: what was measured, then settings, costs and the result's scalar
/// fields as `| field | value |` tables (long arrays summarised; nested rows as JSON).
pub fn markdown(v: &serde_json::Value) -> String {
    let mut s = format!(
        "# quantgate eval {}\n\nmodels: {} · runtime: {}\n\n| setting | value |\n|---|---|\n",
        cell(&v["kind"]),
        cell(&v["models"]),
        cell(&v["runtime"])
    );
    if let Some(m) = v["settings"].as_object() {
        for (k, x) in m {
            s += &format!("| {k} | {} |\n", cell(x));
        }
    }
    for k in ["file_bytes", "load_ms", "wall_s", "peak_rss_kib"] {
        s += &format!("| {k} | {} |\n", cell(&v[k]));
    }
    s += "\n| result | value |\n|---|---|\n";
    if let Some(m) = v["result"].as_object() {
        for (k, x) in m {
            if k != "params" {
                s += &format!("| {k} | {} |\n", cell(x));
            }
        }
    }
    s
}
