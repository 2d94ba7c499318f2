//! Frozen protocols: a TOML file pinning inputs by sha256, models and arms, steps with their
//! budgets, settings (threads, seed, n_ubatch), resource ceilings, tolerances per quantity kind
//! and the decision rule. `quantgate protocol check` validates one and prints its sha256 (the
//! freeze id); `quantgate run` executes it; `quantgate analyze` compares two runs of it.
//! A commented example: `protocols/ci.toml`.

pub mod analyze;
pub mod env;
pub mod quantities;
pub mod run;

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use crate::threads::Threads;
use crate::verify::declared::{Budgets, DeclaredThresholds};

/// The one decision rule implemented (and the only value `[decision] rule` accepts):
/// "capability proven" when every judged quantity of every model is present in both runs and
/// within tolerance; "capability gap" when any quality quantity (PPL, acc_norm, KLD, same top p,
/// their deltas, file bytes, verify results) fails or is missing; otherwise "partial pass"
/// (quality reproduced, some performance quantity — throughput ratio, load time, peak RSS — not),
/// naming exactly what reproduced and what did not.
pub const DECISION_RULE: &str = "quality-first-v1";

/// Largest context (tokens) a step may ask for; the model's own training context is checked
/// at run time.
const MAX_CTX: usize = 1 << 20;
/// Largest count of chunks or tasks a step may ask for.
const MAX_COUNT: usize = 1 << 20;

/// `[protocol]`.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Header {
    pub id: String,
    /// Freeze date, `YYYY-MM-DD`.
    pub frozen: String,
    #[serde(default)]
    pub description: String,
}

/// `[settings]`: what every llama.cpp measurement uses.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    pub threads: Threads,
    /// Seed of the random draws. llama.cpp's tools fix it (HellaSwag: std::mt19937(1); bench:
    /// C rand() unseeded = srand(1)), so 1 is the only value accepted.
    pub seed: u64,
    /// Physical batch size of the PPL/KLD contexts (`-ub`); n_batch = n_ctx as llama-perplexity.
    pub n_ubatch: u32,
    /// ggml CPU variant every step runs (`x64`, `sse42`, `haswell`, `skylakex`, …: the
    /// `libggml-cpu-VARIANT.so` modules built). Absent: the host's best, recorded.
    #[serde(default)]
    pub cpu_variant: Option<String>,
}

/// `[ceilings]`: the whole run's budget; overrunning one fails the run.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Ceilings {
    /// Wall time, seconds.
    pub wall_s: f64,
    /// CPU time (user + system) of all steps, seconds.
    pub cpu_s: f64,
}

/// `[tolerances]`: largest relative deviation per quantity kind.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Tolerances {
    /// |Q2 − Q1| / |Q1|.
    pub non_delta: f64,
    /// |D2 − D1| / |B1|, B1 the run-1 baseline (F16) value.
    pub delta: f64,
    /// |R2 − R1| / |R1|.
    pub ratio: f64,
}

/// `[decision]`.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Decision {
    /// Must be [`DECISION_RULE`].
    pub rule: String,
}

/// `[[inputs]]`: one pinned file. `path` is relative to the protocol file's folder.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Input {
    pub name: String,
    pub path: String,
    pub sha256: String,
    pub license: String,
    pub revision: String,
}

/// `[[models]]`: an HF folder (every file of it pinned in `[[inputs]]`) and its arms. The first
/// arm is the baseline made by `convert` (F16, BF16 or F32); the others are `quantize` types.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ModelSpec {
    pub name: String,
    pub hf_dir: String,
    pub arms: Vec<String>,
}

/// `[[steps]]`, run in file order for every model.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum Step {
    /// HF → baseline GGUF.
    Convert {},
    /// Baseline → every other arm.
    Quantize {},
    /// The three gates on the named arms, with the protocol's `[thresholds]`.
    Verify { arms: Vec<String> },
    /// `eval ppl` on every arm; `text` names an input.
    Ppl {
        text: String,
        ctx: u32,
        chunks: usize,
    },
    /// `eval hellaswag` on every arm; `tasks_file` names an input.
    Hellaswag {
        tasks_file: String,
        tasks: usize,
        ctx: u32,
    },
    /// `eval kld-base` on the baseline, `eval kld` on every other arm.
    Kld {
        text: String,
        ctx: usize,
        chunks: usize,
    },
    /// `eval bench`, all arms alternated in one window.
    Bench {
        n_prompt: usize,
        n_gen: usize,
        replicates: usize,
    },
}

impl Step {
    /// The step's kind as written in the file.
    pub fn kind(&self) -> &'static str {
        match self {
            Step::Convert {} => "convert",
            Step::Quantize {} => "quantize",
            Step::Verify { .. } => "verify",
            Step::Ppl { .. } => "ppl",
            Step::Hellaswag { .. } => "hellaswag",
            Step::Kld { .. } => "kld",
            Step::Bench { .. } => "bench",
        }
    }
}

/// A whole protocol file.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Protocol {
    pub protocol: Header,
    pub settings: Settings,
    pub ceilings: Ceilings,
    pub tolerances: Tolerances,
    pub decision: Decision,
    /// Thresholds of `verify` (see `verify::THRESHOLD_NAMES`); required with a verify step.
    #[serde(default)]
    pub thresholds: Option<DeclaredThresholds>,
    /// Quality budgets of `verify`, one table per ftype (`[budget.Q4_K_M]`, see
    /// `verify::quality`); files of an ftype without one are reported only.
    #[serde(default)]
    pub budget: Option<Budgets>,
    /// Gate 2's tokenizer stress (`verify::stress_gate`); the built-in declaration when absent.
    #[serde(default)]
    pub stress: Option<crate::verify::stress_gate::StressDeclaration>,
    pub inputs: Vec<Input>,
    pub models: Vec<ModelSpec>,
    pub steps: Vec<Step>,
}

/// A loaded protocol: the parsed file, its sha256 (the freeze id) and where it lives.
#[derive(Clone, Debug)]
pub struct Loaded {
    pub protocol: Protocol,
    pub sha256: String,
    pub path: PathBuf,
    /// The folder relative paths are resolved against.
    pub base: PathBuf,
}

impl Loaded {
    /// `rel` resolved against the protocol's folder.
    pub fn resolve(&self, rel: &str) -> PathBuf {
        self.base.join(rel)
    }

    /// The input named `name`.
    pub fn input(&self, name: &str) -> Option<&Input> {
        self.protocol.inputs.iter().find(|i| i.name == name)
    }
}

/// Reads and parses `path` and checks it with [`validate`].
///
/// Errors: unreadable file, invalid TOML, unknown or missing fields (named by the TOML parser),
/// or every problem [`validate`] finds, listed together.
pub fn load(path: &Path) -> Result<Loaded> {
    crate::paths::ensure_regular_file(path)?;
    let size = std::fs::metadata(path)?.len();
    if size > 1 << 20 {
        bail!(
            "{}: {size} bytes; a protocol is a small TOML file (≤ 1 MiB)",
            path.display()
        );
    }
    let bytes = std::fs::read(path).with_context(|| format!("{}: cannot read", path.display()))?;
    parse(&bytes, path)
}

/// Parses and validates protocol `bytes` as if read from `path` (relative paths resolve
/// against its folder).
///
/// Errors: as [`load`].
pub fn parse(bytes: &[u8], path: &Path) -> Result<Loaded> {
    let text =
        std::str::from_utf8(bytes).with_context(|| format!("{}: not UTF-8", path.display()))?;
    let protocol: Protocol =
        toml::from_str(text).with_context(|| format!("{}: invalid protocol", path.display()))?;
    let base = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
        .to_path_buf();
    let loaded = Loaded {
        protocol,
        sha256: crate::hash::sha256_bytes(bytes),
        path: path.to_path_buf(),
        base,
    };
    let problems = validate(&loaded);
    if !problems.is_empty() {
        bail!(
            "{}: {} problem(s):\n  {}",
            path.display(),
            problems.len(),
            problems.join("\n  ")
        );
    }
    Ok(loaded)
}

/// Whether `s` is 64 lowercase hex digits (a sha256 as the inputs pin it).
pub fn is_hex64(s: &str) -> bool {
    s.len() == 64
        && s.bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
}

/// Every problem of a parsed protocol (empty = valid): field values, references between
/// sections, HF folders whose files are not all pinned, step order.
pub fn validate(l: &Loaded) -> Vec<String> {
    let p = &l.protocol;
    let mut e = Vec::new();
    if p.protocol.id.trim().is_empty() {
        e.push("protocol.id: empty".into());
    }
    let f = &p.protocol.frozen;
    let date_ok = f.len() == 10
        && f.bytes().enumerate().all(|(i, b)| {
            if i == 4 || i == 7 {
                b == b'-'
            } else {
                b.is_ascii_digit()
            }
        });
    let month = f.get(5..7).and_then(|m| m.parse::<u32>().ok()).unwrap_or(0);
    let day = f
        .get(8..10)
        .and_then(|d| d.parse::<u32>().ok())
        .unwrap_or(0);
    if !date_ok || !(1..=12).contains(&month) || !(1..=31).contains(&day) {
        e.push(format!("protocol.frozen: {f:?} is not YYYY-MM-DD"));
    }
    if p.settings.seed != 1 {
        e.push(format!(
            "settings.seed: {} — llama.cpp's HellaSwag (std::mt19937(1)) and bench (C rand(), srand(1)) fix the seed at 1",
            p.settings.seed
        ));
    }
    if p.settings.n_ubatch == 0 || p.settings.n_ubatch > MAX_CTX as u32 {
        e.push("settings.n_ubatch: 0".into());
    }
    for (k, v) in [("wall_s", p.ceilings.wall_s), ("cpu_s", p.ceilings.cpu_s)] {
        if !(v.is_finite() && v > 0.0) {
            e.push(format!(
                "ceilings.{k}: {v} is not a positive number of seconds"
            ));
        }
    }
    let t = &p.tolerances;
    for (k, v) in [
        ("non_delta", t.non_delta),
        ("delta", t.delta),
        ("ratio", t.ratio),
    ] {
        if !(v.is_finite() && (0.0..1.0).contains(&v)) {
            e.push(format!("tolerances.{k}: {v} is not in [0, 1)"));
        }
    }
    if p.decision.rule != DECISION_RULE {
        e.push(format!(
            "decision.rule: {:?}; the implemented rule is {DECISION_RULE:?}",
            p.decision.rule
        ));
    }
    let mut names = std::collections::HashSet::new();
    for i in &p.inputs {
        if !names.insert(i.name.as_str()) {
            e.push(format!("inputs: name {:?} twice", i.name));
        }
        if !is_hex64(&i.sha256) {
            e.push(format!(
                "inputs.{}.sha256: not 64 lowercase hex digits",
                i.name
            ));
        }
        if i.license.trim().is_empty() || i.revision.trim().is_empty() {
            e.push(format!(
                "inputs.{}: license and revision must be stated",
                i.name
            ));
        }
    }
    if p.models.is_empty() {
        e.push("models: none".into());
    }
    let mut model_names = std::collections::HashSet::new();
    for m in &p.models {
        if !model_names.insert(m.name.as_str()) {
            e.push(format!(
                "models: name {:?} twice (their files would collide)",
                m.name
            ));
        }
        validate_model(l, m, &mut e);
    }
    validate_thresholds(p, &mut e);
    if let Some(b) = &p.budget {
        e.extend(
            crate::verify::declared::check_budgets(b)
                .err()
                .unwrap_or_default(),
        );
    }
    validate_steps(l, &mut e);
    e
}

fn validate_model(l: &Loaded, m: &ModelSpec, e: &mut Vec<String>) {
    let p = &l.protocol;
    if m.name.chars().all(|c| c == '.')
        || m.name.is_empty()
        || !m
            .name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
    {
        e.push(format!(
            "models.name {:?}: use letters, digits, - _ .",
            m.name
        ));
    }
    match m.arms.first().map(|a| a.to_ascii_uppercase()) {
        Some(a) if ["F16", "BF16", "F32"].contains(&a.as_str()) => {}
        other => e.push(format!(
            "models.{}.arms[0]: {other:?}; the baseline arm is made by convert: F16, BF16 or F32",
            m.name
        )),
    }
    for a in m.arms.iter().skip(1) {
        if !gguf::LlamaFtype::by_name(a).is_some_and(|f| f.quantize_target) {
            e.push(format!(
                "models.{}.arms: {a:?} is not a quantize type",
                m.name
            ));
        }
    }
    // Every file of the HF folder must be pinned: an unpinned file could change the result.
    let dir = l.resolve(&m.hf_dir);
    let dir_norm = normalize(&dir);
    let pinned: Vec<PathBuf> = p
        .inputs
        .iter()
        .map(|i| normalize(&l.resolve(&i.path)))
        .collect();
    // A missing folder is reported by the input hash check at run time (with the file names);
    // `check` only validates the file itself.
    if let Ok(rd) = std::fs::read_dir(&dir) {
        // Dot files (build markers such as `.complete`) are not read by convert.
        for ent in rd
            .flatten()
            .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
        {
            let f = normalize(&dir_norm.join(ent.file_name()));
            if f.is_file() && !pinned.contains(&f) {
                e.push(format!(
                    "models.{}.hf_dir: {} is not pinned in [[inputs]]",
                    m.name,
                    ent.file_name().to_string_lossy()
                ));
            }
        }
    }
}

/// `[thresholds]`: every one of verify's names declared, cosines/agreements in [0, 1],
/// KLD ≥ 0 (unknown names are refused when the protocol is read).
fn validate_thresholds(p: &Protocol, e: &mut Vec<String>) {
    if let Some(t) = &p.thresholds {
        e.extend(t.problems(true));
    }
}

fn validate_steps(l: &Loaded, e: &mut Vec<String>) {
    let p = &l.protocol;
    let pos = |k: &str| p.steps.iter().position(|s| s.kind() == k);
    let Some(conv) = pos("convert") else {
        e.push("steps: no convert step (every arm derives from it)".into());
        return;
    };
    if conv != 0 {
        e.push("steps: convert must be the first step".into());
    }
    let needs_q = p.models.iter().any(|m| m.arms.len() > 1);
    match pos("quantize") {
        Some(q) if q != 1 => e.push("steps: quantize must follow convert".into()),
        None if needs_q => e.push("steps: arms beyond the baseline need a quantize step".into()),
        _ => {}
    }
    let mut seen = std::collections::HashSet::new();
    for s in &p.steps {
        if !seen.insert(s.kind()) {
            e.push(format!("steps: {} twice", s.kind()));
        }
        match s {
            Step::Verify { arms } => {
                if p.thresholds.is_none() {
                    e.push("thresholds: a verify step needs [thresholds]".into());
                }
                for a in arms {
                    if !p.models.iter().all(|m| m.arms.iter().any(|x| x == a)) {
                        e.push(format!(
                            "steps.verify.arms: {a:?} is not an arm of every model"
                        ));
                    }
                }
            }
            Step::Ppl { text, ctx, chunks } => {
                need_input(l, "ppl.text", text, e);
                if *ctx < 16 || *ctx as usize > MAX_CTX || *chunks == 0 || *chunks > MAX_COUNT {
                    e.push("steps.ppl: 16 ≤ ctx ≤ 2^20 and 1 ≤ chunks ≤ 2^20".into());
                }
            }
            Step::Kld { text, ctx, chunks } => {
                need_input(l, "kld.text", text, e);
                if *ctx < 16 || *ctx > MAX_CTX || *chunks == 0 || *chunks > MAX_COUNT {
                    e.push("steps.kld: 16 ≤ ctx ≤ 2^20 and 1 ≤ chunks ≤ 2^20".into());
                }
                if !p.models.iter().any(|m| m.arms.len() > 1) {
                    e.push("steps.kld: needs a quantized arm to compare".into());
                }
            }
            Step::Hellaswag {
                tasks_file,
                tasks,
                ctx,
            } => {
                need_input(l, "hellaswag.tasks_file", tasks_file, e);
                if *tasks == 0 || *tasks > MAX_COUNT || *ctx < 64 || *ctx as usize > MAX_CTX {
                    e.push("steps.hellaswag: 1 ≤ tasks ≤ 2^20 and 64 ≤ ctx ≤ 2^20".into());
                }
            }
            Step::Bench {
                n_prompt,
                n_gen,
                replicates,
            } => {
                if *replicates == 0
                    || *replicates > 1000
                    || (*n_prompt == 0 && *n_gen == 0)
                    || *n_prompt > MAX_CTX
                    || *n_gen > MAX_CTX
                {
                    e.push(
                        "steps.bench: 1 ≤ replicates ≤ 1000, n_prompt or n_gen ≥ 1, each ≤ 2^20"
                            .into(),
                    );
                }
            }
            Step::Convert {} | Step::Quantize {} => {}
        }
    }
}

fn need_input(l: &Loaded, field: &str, name: &str, e: &mut Vec<String>) {
    if l.input(name).is_none() {
        e.push(format!("steps.{field}: no input named {name:?}"));
    }
}

/// `a/b/../c` → `a/c` without touching the file system (so a missing file still compares).
/// `p` with `.` dropped and `dir/..` folded, lexically (symlinks are not resolved).
pub fn normalize(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            std::path::Component::CurDir => {}
            std::path::Component::ParentDir
                if out
                    .components()
                    .next_back()
                    .is_some_and(|l| matches!(l, std::path::Component::Normal(_))) =>
            {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}
