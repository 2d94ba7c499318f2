//! The sweep file (`SWEEP.toml`): the inputs pinned by sha256 as a protocol pins them, the
//! models, the ftypes, the task kinds, and the settings every task runs with. A commented
//! example: `sweeps/ci.toml`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use crate::protocol::Input;
use crate::threads::Threads;

/// `[sweep]`.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Header {
    /// Names the sweep's jobs (`qg-ID`); letters, digits, `-`.
    pub id: String,
    #[serde(default)]
    pub description: String,
}

/// `[settings]`: pinned for every task, so that a task's verdict and quality figures do not
/// depend on the executor (llama.cpp's outputs depend on the CPU variant and thread count).
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    /// llama.cpp threads of every task; also the CPUs each task asks the scheduler for.
    pub threads: Threads,
    /// ggml CPU variant of every task (`haswell`, `skylakex`, …): required.
    pub cpu_variant: String,
    /// An input holding a protocol TOML whose `[thresholds]` verify and release use.
    #[serde(default)]
    pub protocol: Option<String>,
}

/// One kind of task.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[serde(rename_all = "kebab-case")]
pub enum TaskKind {
    /// HF folder → the model's first ftype (F16, BF16 or F32).
    Convert,
    /// That file → each other ftype (llama.cpp's quantizer, Gate 1 by re-quantization).
    Quantize,
    /// The three gates on each file.
    Verify,
    /// One release folder per model from all its files, after all of them verified.
    Release,
    /// `quantgate run` of a frozen protocol (`[[runs]]`).
    Protocol,
}

impl TaskKind {
    /// The name as the sweep file spells it.
    pub fn name(self) -> &'static str {
        match self {
            TaskKind::Convert => "convert",
            TaskKind::Quantize => "quantize",
            TaskKind::Verify => "verify",
            TaskKind::Release => "release",
            TaskKind::Protocol => "protocol",
        }
    }
}

/// `[matrix]`: every model × every ftype, for the task kinds named.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Matrix {
    /// The first is made by convert (F16, BF16 or F32); the others by quantize.
    pub ftypes: Vec<String>,
    /// Which of convert, quantize, verify, release to plan.
    pub tasks: Vec<TaskKind>,
}

/// `[[models]]`: an HF folder, every file of it pinned in `[[inputs]]`.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Model {
    /// Letters, digits, `-`, `_`, `.`.
    pub name: String,
    /// Relative to the sweep file.
    pub hf_dir: String,
    /// GGUFs made elsewhere (input names) to verify and ship beside the matrix's files.
    #[serde(default)]
    pub ggufs: Vec<String>,
    /// The hub id for release cards' `base_model`.
    #[serde(default)]
    pub base_model: Option<String>,
    /// Task ids (`release/other-model`) this model's first tasks wait for.
    #[serde(default)]
    pub after: Vec<String>,
}

/// `[[runs]]`: a frozen protocol run as one task.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RunSpec {
    pub name: String,
    /// The input holding the protocol TOML. Its own inputs are read where it names them, so
    /// they must be at the same path on every node.
    pub protocol: String,
    #[serde(default)]
    pub after: Vec<String>,
}

/// A whole sweep file.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct SweepFile {
    pub sweep: Header,
    pub settings: Settings,
    pub matrix: Matrix,
    #[serde(default)]
    pub inputs: Vec<Input>,
    pub models: Vec<Model>,
    #[serde(default)]
    pub runs: Vec<RunSpec>,
}

/// A loaded sweep file: parsed, its sha256, and its folder (relative paths resolve there).
#[derive(Clone, Debug)]
pub struct Loaded {
    pub file: SweepFile,
    pub sha256: String,
    pub path: PathBuf,
    pub bytes: Vec<u8>,
}

impl Loaded {
    /// `rel` resolved against the sweep file's folder.
    pub fn resolve(&self, rel: &str) -> PathBuf {
        self.path.parent().unwrap_or(Path::new(".")).join(rel)
    }

    /// The input named `name`.
    pub fn input(&self, name: &str) -> Option<&Input> {
        self.file.inputs.iter().find(|i| i.name == name)
    }
}

/// Reads and parses `path` (at most 1 MiB).
///
/// Errors: unreadable, not TOML, an unknown key or a wrong type (toml names the key and line).
pub fn load(path: &Path) -> Result<Loaded> {
    let bytes = crate::paths::read_text_capped(path, 1 << 20)?.into_bytes();
    let text = std::str::from_utf8(&bytes).expect("read as text");
    let file: SweepFile =
        toml::from_str(text).with_context(|| format!("{}: not a sweep file", path.display()))?;
    Ok(Loaded {
        sha256: crate::hash::sha256_bytes(&bytes),
        file,
        path: path.to_path_buf(),
        bytes,
    })
}

fn is_name(s: &str) -> bool {
    !s.is_empty()
        && !s.chars().all(|c| c == '.')
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
}

/// Every problem of the file itself, each naming its field (empty when valid). The inputs'
/// hashes are checked when the plan is written (by `sweep plan`).
pub fn validate(l: &Loaded) -> Vec<String> {
    let f = &l.file;
    let mut e = Vec::new();
    if f.sweep.id.is_empty()
        || !f
            .sweep
            .id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-')
    {
        e.push(format!(
            "sweep.id {:?}: use letters, digits and -",
            f.sweep.id
        ));
    }
    let built = llama_runtime::variants();
    if !built.contains(&f.settings.cpu_variant) {
        e.push(format!(
            "settings.cpu_variant {:?}: not a ggml CPU variant this build has ({})",
            f.settings.cpu_variant,
            built.join(", ")
        ));
    }
    validate_matrix(&f.matrix, &mut e);
    let mut names = BTreeSet::new();
    for i in &f.inputs {
        if !names.insert(i.name.as_str()) {
            e.push(format!("inputs: name {:?} twice", i.name));
        }
        if !crate::protocol::is_hex64(&i.sha256) {
            e.push(format!(
                "inputs.{}.sha256: not 64 lowercase hex digits",
                i.name
            ));
        }
    }
    if let Some(p) = &f.settings.protocol {
        if l.input(p).is_none() {
            e.push(format!("settings.protocol: no input named {p:?}"));
        }
    }
    if f.models.is_empty() && f.runs.is_empty() {
        e.push("models: none (and no [[runs]])".into());
    }
    let mut model_names = BTreeSet::new();
    for m in &f.models {
        if !is_name(&m.name) {
            e.push(format!(
                "models.name {:?}: use letters, digits, - _ .",
                m.name
            ));
        }
        if !model_names.insert(m.name.as_str()) {
            e.push(format!("models: name {:?} twice", m.name));
        }
        if m.name == "files" {
            e.push("models.name \"files\": reserved (inputs/files/ holds the loose inputs)".into());
        }
        let mut seen = BTreeSet::new();
        for g in &m.ggufs {
            if l.input(g).is_none() {
                e.push(format!("models.{}.ggufs: no input named {g:?}", m.name));
            }
            if !seen.insert(g) {
                e.push(format!("models.{}.ggufs: {g:?} twice", m.name));
            }
        }
        let kinds = &f.matrix.tasks;
        if !kinds.contains(&TaskKind::Convert) && m.ggufs.is_empty() {
            e.push(format!(
                "models.{}: nothing to verify or ship (matrix.tasks has no convert and the model no ggufs)",
                m.name
            ));
        }
        e.extend(unpinned_files(l, m));
    }
    for r in &f.runs {
        if !is_name(&r.name) || !model_names.insert(r.name.as_str()) {
            e.push(format!(
                "runs.name {:?}: empty, badly spelt or taken",
                r.name
            ));
        }
        if l.input(&r.protocol).is_none() {
            e.push(format!(
                "runs.{}.protocol: no input named {:?}",
                r.name, r.protocol
            ));
        }
    }
    e
}

fn validate_matrix(m: &Matrix, e: &mut Vec<String>) {
    match m.ftypes.first().map(|a| a.to_ascii_uppercase()) {
        Some(a) if ["F16", "BF16", "F32"].contains(&a.as_str()) => {}
        Some(a) => e.push(format!(
            "matrix.ftypes[0]: {a:?}; the first ftype is made by convert: F16, BF16 or F32"
        )),
        None => e.push("matrix.ftypes: empty".into()),
    }
    let mut seen = BTreeSet::new();
    for a in &m.ftypes {
        if !seen.insert(a.to_ascii_uppercase()) {
            e.push(format!("matrix.ftypes: {a:?} twice"));
        }
    }
    for a in m.ftypes.iter().skip(1) {
        if !gguf::LlamaFtype::by_name(a).is_some_and(|f| f.quantize_target) {
            e.push(format!(
                "matrix.ftypes: {a:?} is not an ftype llama.cpp's quantizer makes (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K_S/M/L, Q4_K_S/M, Q5_K_S/M, Q6_K)"
            ));
        }
    }
    if m.tasks.is_empty() {
        e.push("matrix.tasks: empty".into());
    }
    if m.tasks.contains(&TaskKind::Quantize) && !m.tasks.contains(&TaskKind::Convert) {
        e.push("matrix.tasks: quantize needs convert (it quantizes the converted file)".into());
    }
    if m.tasks.contains(&TaskKind::Protocol) {
        e.push("matrix.tasks: protocol runs are declared as [[runs]]".into());
    }
}

/// Every regular file under `dir`, depth first, dot files left out (build markers such as
/// `.complete` are not read by convert).
pub fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for ent in std::fs::read_dir(dir)? {
        let ent = ent?;
        if ent.file_name().to_string_lossy().starts_with('.') {
            continue;
        }
        let p = ent.path();
        if p.is_dir() {
            walk(&p, out)?;
        } else if p.is_file() {
            out.push(p);
        }
    }
    Ok(())
}

/// Files of the model's folder (subfolders such as `1_Pooling/` included) not pinned in
/// `[[inputs]]` (an unpinned file could change the result), and a folder that cannot be read.
fn unpinned_files(l: &Loaded, m: &Model) -> Vec<String> {
    let dir = l.resolve(&m.hf_dir);
    let pinned: Vec<PathBuf> = l
        .file
        .inputs
        .iter()
        .map(|i| crate::protocol::normalize(&l.resolve(&i.path)))
        .collect();
    let mut files = Vec::new();
    if let Err(err) = walk(&dir, &mut files) {
        return vec![format!(
            "models.{}.hf_dir: {}: {err}",
            m.name,
            dir.display()
        )];
    }
    files
        .iter()
        .filter(|p| !pinned.contains(&crate::protocol::normalize(p)))
        .map(|p| {
            let rel = p.strip_prefix(&dir).unwrap_or(p);
            format!(
                "models.{}.hf_dir: {} is not pinned in [[inputs]]",
                m.name,
                rel.display()
            )
        })
        .collect()
}

/// The pinned inputs that lie in the model's folder, as (path relative to it, input).
pub fn model_files<'a>(l: &'a Loaded, m: &Model) -> Vec<(String, &'a Input)> {
    // Lexically, not through canonicalize: a folder of symlinks (the HF hub cache) keeps its
    // files' names.
    let dir = crate::protocol::normalize(&l.resolve(&m.hf_dir));
    l.file
        .inputs
        .iter()
        .filter_map(|i| {
            let p = crate::protocol::normalize(&l.resolve(&i.path));
            let rel = p.strip_prefix(&dir).ok()?;
            Some((rel.to_string_lossy().into_owned(), i))
        })
        .collect()
}
