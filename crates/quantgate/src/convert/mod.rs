//! `quantgate convert`: HF checkpoint folder → GGUF, as llama.cpp's convert_hf_to_gguf.py
//! would write it (keys, names, F32-kept tensors, tokenizer metadata), streaming one tensor at a
//! time. Data flows one way: read (hf) → plan (arch table) → write (gguf writer).

pub mod arch;
pub mod card;
pub mod chat_template;
pub mod consistency;
pub mod fields;
pub mod generation;
pub mod hf;
pub mod mlx;
pub mod packed;
pub mod rope;
pub mod spm;
pub mod stream;
pub mod tokenizer;
pub mod vocab;
pub mod vocab_spm;

use std::cell::RefCell;
use std::path::Path;
use std::rc::Rc;
use std::time::Instant;

use anyhow::{anyhow, bail, Context, Result};
use gguf::{GgmlType, GgufWriter, TensorData, TensorEntry, Value, ValueType};
use serde::Serialize;

use arch::Arch;
use hf::HfDir;
use reference::pooling::Pooling;

/// `--outtype`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum OutType {
    F32,
    F16,
    BF16,
    Q8_0,
    /// First ≥2-D source tensor: BF16 → BF16, F16 → F16, else F16 (convert_hf_to_gguf.py).
    Auto,
}

impl OutType {
    /// Parses `f32|f16|bf16|q8_0|auto`.
    pub fn parse(s: &str) -> Result<OutType> {
        Ok(match s.to_ascii_lowercase().as_str() {
            "f32" => OutType::F32,
            "f16" => OutType::F16,
            "bf16" => OutType::BF16,
            "q8_0" => OutType::Q8_0,
            "auto" => OutType::Auto,
            other => bail!("--outtype {other:?}: expected f32, f16, bf16, q8_0 or auto"),
        })
    }

    fn ggml(self) -> GgmlType {
        match self {
            OutType::F32 => GgmlType::F32,
            OutType::F16 | OutType::Auto => GgmlType::F16,
            OutType::BF16 => GgmlType::BF16,
            OutType::Q8_0 => GgmlType::Q8_0,
        }
    }

    /// `general.file_type` (llama.h `LLAMA_FTYPE_*`, from [`gguf::LlamaFtype`]).
    fn file_type(self) -> u32 {
        gguf::LlamaFtype::mostly(self.ggml())
            .expect("every outtype has a llama.h file type")
            .id
    }
}

/// One planned output tensor.
#[derive(Clone, Debug, Serialize)]
pub struct PlannedTensor {
    /// HF source name.
    pub hf_name: String,
    /// GGUF name.
    pub gguf_name: String,
    /// Stored type.
    pub ggml_type: String,
    /// GGUF `ne` (row length first).
    pub ne: Vec<u64>,
    /// Why the type differs from the outtype, if it does.
    pub rule: String,
    /// llama's Q/K row permutation: the head count to permute with (attn_q: n_head,
    /// attn_k: n_kv_head), or `None`.
    pub permute_heads: Option<usize>,
    /// Added to every source value before storing ([`Arch::norm_shift`]: gemma3 norms, +1);
    /// 0 for every other tensor.
    #[serde(skip_serializing_if = "is_zero")]
    pub shift: f32,
}

fn is_zero(x: &f32) -> bool {
    *x == 0.0
}

/// Options of a conversion.
#[derive(Clone, Debug)]
pub struct ConvertOptions {
    /// Output type.
    pub outtype: OutType,
    /// Write only the tokenizer and hyperparameters (no tensors).
    pub vocab_only: bool,
    /// For already-quantized (MLX) tensors no block type holds exactly: `None` = blocker.
    pub fallback: Option<mlx::Fallback>,
    /// Keep NaN/Inf source values (recorded as `quantgate.nonfinite_source_values` and in the
    /// report) instead of refusing them.
    pub allow_nonfinite: bool,
}

/// What a conversion did.
#[derive(Clone, Debug, Serialize)]
pub struct ConvertReport {
    /// Output file.
    pub output: String,
    /// `general.architecture`.
    pub arch: String,
    /// Resolved output type.
    pub outtype: OutType,
    /// Tensors written, in order.
    pub tensors: Vec<PlannedTensor>,
    /// Tokenizer facts: model, pre, probe hash, special ids, add flags.
    pub tokenizer: serde_json::Value,
    /// Reported disagreements and lossy-but-allowed events (e.g. f16 underflow to zero).
    pub notes: Vec<String>,
    /// Error stats of every lossy fallback (MLX tensors stored as F16 or re-quantized).
    pub fallback_errors: Vec<mlx::FallbackError>,
    /// Per storage rule: tensors, elements, bytes and bits per weight.
    pub rules: Vec<RuleSummary>,
    /// Output size in bytes.
    pub file_bytes: u64,
    /// Wall time in seconds.
    pub seconds: f64,
}

/// Tensors stored under one rule (e.g. `4-bit group 64 → Q4_1 (…; exact)`).
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct RuleSummary {
    pub rule: String,
    pub ggml_type: String,
    pub tensors: usize,
    pub elements: u64,
    pub bytes: u64,
    /// 8 · bytes / elements.
    pub bits_per_weight: f64,
}

/// Groups planned tensors by (rule, type); an empty rule reads as the plain output type.
pub fn rule_summary(planned: &[PlannedTensor]) -> Vec<RuleSummary> {
    let mut m: std::collections::BTreeMap<(String, String), (usize, u64, u64)> = Default::default();
    for p in planned {
        let ty = GgmlType::from_name(&p.ggml_type).unwrap_or(GgmlType::F32);
        let n: u64 = p.ne.iter().product();
        let bytes = n / ty.block_size() * ty.type_size();
        let rule = if p.rule.is_empty() {
            format!("→ {}", p.ggml_type)
        } else {
            p.rule.clone()
        };
        let e = m.entry((rule, p.ggml_type.clone())).or_default();
        e.0 += 1;
        e.1 += n;
        e.2 += bytes;
    }
    m.into_iter()
        .map(
            |((rule, ggml_type), (tensors, elements, bytes))| RuleSummary {
                rule,
                ggml_type,
                tensors,
                elements,
                bytes,
                bits_per_weight: 8.0 * bytes as f64 / elements.max(1) as f64,
            },
        )
        .collect()
}

/// Reads config.json's `model_type`.
pub fn arch_of(hf: &HfDir) -> Result<Arch> {
    let t = hf.config["model_type"]
        .as_str()
        .ok_or_else(|| anyhow!("{}: config.json has no model_type", hf.dir.display()))?;
    Arch::from_model_type(t).with_context(|| format!("{}", hf.dir.join("config.json").display()))
}

/// Plans the tensors of `hf` for `outtype`: names, types, shapes, in checkpoint order.
///
/// Errors: a source tensor the arch table does not know, or two mapping to one GGUF name.
pub fn plan(
    hf: &HfDir,
    arch: Arch,
    outtype: OutType,
    mlx_plan: Option<&mlx::MlxPlan>,
    packed_plan: Option<&packed::PackedPlan>,
) -> Result<Vec<(usize, PlannedTensor)>> {
    let mut out = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for (i, t) in hf.tensors.iter().enumerate() {
        if mlx_plan.is_some_and(|p| p.skip.contains(&i))
            || packed_plan.is_some_and(|p| p.skip.contains(&i))
        {
            continue;
        }
        if let Some((m, ty, rule)) = packed_plan.and_then(|p| p.by_anchor.get(&i)) {
            let hf_name = format!("{}.weight", m.module);
            let g = arch::map_tensor(arch, &hf_name)?.ok_or_else(|| {
                anyhow!(
                    "{}: quantized module {} has no GGUF name",
                    hf.dir.display(),
                    m.module
                )
            })?;
            let ne = vec![m.inn as u64, m.out as u64];
            let p = planned(&mut seen, hf, arch, &hf_name, g.gguf, *ty, ne, rule.clone())?;
            out.push((i, p));
            continue;
        }
        if let Some((at, ty, rule)) = mlx_plan.and_then(|p| p.by_weight.get(&i)) {
            let m = arch::map_tensor(arch, &t.name)?.ok_or_else(|| {
                anyhow!(
                    "{}: quantized tensor {} has no GGUF name",
                    hf.dir.display(),
                    t.name
                )
            })?;
            let ne = vec![at.inn as u64, at.out as u64];
            let p = planned(&mut seen, hf, arch, &t.name, m.gguf, *ty, ne, rule.clone())?;
            out.push((i, p));
            continue;
        }
        let Some(m) =
            arch::map_tensor(arch, &t.name).with_context(|| hf.file_of(t).display().to_string())?
        else {
            continue;
        };
        if t.dtype == hf::SourceDtype::Other {
            bail!(
                "{}: tensor {:?} has a dtype other than F32, F16 or BF16 and cannot be converted",
                hf.file_of(t).display(),
                t.name
            );
        }
        let ne: Vec<u64> = t.shape.iter().rev().map(|d| *d as u64).collect();
        let (ty, rule) = storage_rule(&m, &ne, outtype);
        out.push((
            i,
            planned(&mut seen, hf, arch, &t.name, m.gguf, ty, ne, rule)?,
        ));
    }
    Ok(out)
}

/// The plan entry of source `hf_name` stored as `gguf_name`; two sources mapping to one GGUF
/// name are an error.
#[allow(clippy::too_many_arguments)]
fn planned(
    seen: &mut std::collections::HashSet<String>,
    hf: &HfDir,
    arch: Arch,
    hf_name: &str,
    gguf_name: String,
    ty: GgmlType,
    ne: Vec<u64>,
    rule: String,
) -> Result<PlannedTensor> {
    if !seen.insert(gguf_name.clone()) {
        bail!("two source tensors map to {gguf_name}");
    }
    Ok(PlannedTensor {
        hf_name: hf_name.to_string(),
        permute_heads: permute_heads(hf, arch, &gguf_name),
        shift: arch.norm_shift(&gguf_name),
        gguf_name,
        ggml_type: ty.to_string(),
        ne,
        rule,
    })
}

/// The stored type of a float tensor and why it differs from `outtype` (empty if it does not).
fn storage_rule(m: &arch::Mapped, ne: &[u64], outtype: OutType) -> (GgmlType, String) {
    if arch::keep_f32(&m.gguf, ne.len(), m.force_f32) {
        (
            GgmlType::F32,
            "kept F32 (1-D, norm, bias or forced)".to_string(),
        )
    } else if outtype == OutType::Q8_0 && !ne[0].is_multiple_of(32) {
        (
            GgmlType::F16,
            format!(
                "Q8_0 fallback to F16: row length {} not a multiple of 32",
                ne[0]
            ),
        )
    } else {
        (outtype.ggml(), String::new())
    }
}

/// The head count for llama's Q/K permutation of `gguf_name`, if it needs one
/// (`docs/llamacpp-spec.md` §4.3: q with n_head, k with n_kv_head, weights and biases).
pub fn permute_heads(hf: &HfDir, arch: Arch, gguf_name: &str) -> Option<usize> {
    if arch != Arch::Llama {
        return None;
    }
    let n_head = hf.config_u64("num_attention_heads")? as usize;
    let n_kv = hf
        .config_u64("num_key_value_heads")
        .map(|v| v as usize)
        .unwrap_or(n_head);
    let local = gguf_name
        .rsplit_once('.')
        .map(|(m, _)| m)?
        .rsplit('.')
        .next()?;
    match local {
        "attn_q" => Some(n_head),
        "attn_k" => Some(n_kv),
        _ => None,
    }
}

/// Reorders the rows of `x` (`rows × cols`, row-major) from HF's rotate-half layout to
/// llama.cpp's adjacent pairs, per head: `new_row[2i + j] = old_row[j·(hd/2) + i]`.
pub fn permute_qk<T: Copy + Default>(x: &[T], rows: usize, heads: usize) -> Vec<T> {
    let cols = x.len() / rows;
    let hd = rows / heads;
    let mut out = vec![T::default(); x.len()];
    for h in 0..heads {
        for i in 0..hd / 2 {
            for j in 0..2 {
                let src = h * hd + j * (hd / 2) + i;
                let dst = h * hd + 2 * i + j;
                out[dst * cols..(dst + 1) * cols].copy_from_slice(&x[src * cols..(src + 1) * cols]);
            }
        }
    }
    out
}

/// Resolves `auto` from the first source tensor with ≥ 2 dims.
pub fn resolve_outtype(hf: &HfDir, outtype: OutType) -> OutType {
    if outtype != OutType::Auto {
        return outtype;
    }
    match hf
        .tensors
        .iter()
        .find(|t| {
            t.shape.len() >= 2
                && matches!(
                    t.dtype,
                    hf::SourceDtype::F32 | hf::SourceDtype::F16 | hf::SourceDtype::BF16
                )
        })
        .map(|t| t.dtype)
    {
        Some(hf::SourceDtype::BF16) => OutType::BF16,
        _ => OutType::F16,
    }
}

/// Converts the HF folder `dir` to `out` (written atomically).
///
/// Errors: anything that would make the file wrong — unknown architecture or tensor, a
/// tokenizer case GGUF cannot express, f16 overflow — each naming the file and field.
pub fn convert(dir: &Path, out: &Path, opts: &ConvertOptions) -> Result<ConvertReport> {
    let t0 = Instant::now();
    let sources = crate::paths::files_in(dir);
    let refs: Vec<&Path> = sources.iter().map(|p| p.as_path()).collect();
    crate::paths::ensure_output_distinct(out, &refs)?;
    let hf = HfDir::open(dir, !opts.vocab_only)?;
    let arch = arch_of(&hf)?;
    let problems = fields::check(&hf.config, arch);
    if !problems.is_empty() {
        bail!("{}: {}", dir.display(), problems.join("; "));
    }
    let mlx_plan = mlx_plan_of(&hf, opts)?;
    let packed_plan = packed_plan_of(&hf, opts)?;
    let outtype = if opts.vocab_only {
        opts.outtype
    } else {
        resolve_outtype(&hf, opts.outtype)
    };
    let (tok, vocab) = load_vocab(dir, &hf)?;
    let pooling = Pooling::from_sentence_transformers(dir)?;
    let mut notes = vocab.notes.clone();
    notes.extend(tok.notes.iter().cloned());
    if let Some(n) = rope_default_note(&hf, arch)? {
        notes.push(n);
    }

    let mut w = GgufWriter::new();
    let mut quantized: Vec<GgmlType> = mlx_plan
        .as_ref()
        .map(|p| p.by_weight.values().map(|(_, t, _)| *t).collect())
        .unwrap_or_default();
    if let Some(p) = &packed_plan {
        quantized.extend(p.by_anchor.values().map(|(_, t, _)| *t));
    }
    let ft = file_type(outtype, &quantized);
    let planned = if opts.vocab_only {
        Vec::new()
    } else {
        plan(&hf, arch, outtype, mlx_plan.as_ref(), packed_plan.as_ref())?
    };
    let total_params: u64 = planned
        .iter()
        .map(|(_, t)| t.ne.iter().product::<u64>())
        .sum();
    // Fields and tensors first: an error then names the config field, not the GGUF key.
    consistency::check(&hf, arch, &planned)?;
    vocab_fits_embedding(&hf, &vocab, &planned)?;
    for (k, v) in metadata(&hf, arch, ft, pooling, &vocab, total_params)? {
        w.add_kv(k, v);
    }
    if opts.allow_nonfinite {
        let found = nonfinite_sources(&hf, &planned)?;
        let total: u64 = found.iter().map(|(_, n)| *n as u64).sum();
        for (name, n) in &found {
            notes.push(format!(
                "{name}: {n} non-finite source values kept (--allow-nonfinite)"
            ));
        }
        if total > 0 {
            w.add_kv(NONFINITE_KEY, Value::U64(total));
        }
    }
    let affine = affine_by_source(mlx_plan.as_ref());
    let fallback_errors: Rc<RefCell<Vec<mlx::FallbackError>>> = Rc::default();
    let underflow: Rc<RefCell<Vec<(String, usize)>>> = Rc::default();
    let sink = Sinks {
        fallback_errors: fallback_errors.clone(),
        underflow: underflow.clone(),
        allow_nonfinite: opts.allow_nonfinite,
    };
    let packed = packed_by_source(packed_plan.as_ref());
    add_tensors(&mut w, &hf, &planned, (&affine, &packed), &sink);
    let planned_out: Vec<PlannedTensor> = planned.iter().map(|(_, p)| p.clone()).collect();
    let rules = rule_summary(&planned_out);
    let summary = w.write_to_path(out).map_err(|e| match e {
        // Already names the file (and keeps the OS error for the exit status).
        e @ gguf::Error::Io { .. } => anyhow::Error::from(e),
        e => anyhow!("{}: {e}", out.display()),
    })?;
    for (name, n) in underflow.borrow().iter() {
        notes.push(format!(
            "{name}: {n} non-zero values are below the f16 range and became zero"
        ));
    }
    let errors = fallback_errors.borrow().clone();
    Ok(ConvertReport {
        output: out.display().to_string(),
        arch: arch.gguf_name().into(),
        outtype,
        tensors: planned_out,
        tokenizer: tokenizer_facts(&vocab),
        notes,
        fallback_errors: errors,
        rules,
        file_bytes: summary.file_bytes,
        seconds: t0.elapsed().as_secs_f64(),
    })
}

/// More tokens than `token_embd.weight` rows: llama.cpp refuses the file and HF would index
/// past the embedding (config.json's `vocab_size`, when given, is checked by the vocabulary).
///
/// Errors: naming both counts.
fn vocab_fits_embedding(
    hf: &HfDir,
    vocab: &vocab::Vocab,
    planned: &[(usize, PlannedTensor)],
) -> Result<()> {
    let rows = planned
        .iter()
        .find(|(_, p)| p.gguf_name == "token_embd.weight")
        .and_then(|(_, p)| p.ne.get(1).copied());
    match rows {
        Some(r) if (vocab.tokens.len() as u64) > r => bail!(
            "{}: the tokenizer has {} tokens but token_embd.weight has {r} rows",
            hf.dir.display(),
            vocab.tokens.len()
        ),
        _ => Ok(()),
    }
}

/// For a RoPE architecture whose config gives no base frequency: which llama.cpp default
/// applies (`src/llama-model.cpp` `load_hparams`: `rope_freq_base_train = 10000.0f`, then the
/// optional `{arch}.rope.freq_base`).
fn rope_default_note(hf: &HfDir, arch: Arch) -> Result<Option<String>> {
    if arch == Arch::Bert || rope::read(&hf.config)?.freq_base.is_some() {
        return Ok(None);
    }
    Ok(Some(format!(
        "config.json has no rope_theta (v4) or rope_parameters.rope_theta (v5): {} is not written and llama.cpp uses its default freq_base 10000.0",
        gguf::keys::arch_key(gguf::keys::llm::ROPE_FREQ_BASE, arch.gguf_name())
    )))
}

/// The MLX plan of an already-quantized checkpoint (`None` for plain ones and vocab-only runs).
fn mlx_plan_of(hf: &HfDir, opts: &ConvertOptions) -> Result<Option<mlx::MlxPlan>> {
    Ok(
        match mlx::QuantConfig::from_config(&hf.config)
            .with_context(|| hf.dir.join("config.json").display().to_string())?
        {
            Some(qc) if !opts.vocab_only => Some(mlx::plan(hf, &qc, opts.fallback)?),
            _ => None,
        },
    )
}

/// The plan of a GPTQ / AWQ / compressed-tensors checkpoint (`None` for other folders and
/// vocab-only runs).
fn packed_plan_of(hf: &HfDir, opts: &ConvertOptions) -> Result<Option<packed::PackedPlan>> {
    let scheme = packed::Scheme::from_config(&hf.config)
        .with_context(|| hf.dir.join("config.json").display().to_string())?;
    Ok(match scheme {
        Some(s) if !opts.vocab_only => Some(packed::plan(hf, &s, opts.fallback)?),
        _ => None,
    })
}

/// Packed modules by anchor index, with the checkpoint's scheme.
fn packed_by_source(
    p: Option<&packed::PackedPlan>,
) -> std::collections::HashMap<usize, (packed::Module, packed::Scheme)> {
    p.and_then(|p| p.scheme.map(|s| (p, s)))
        .map(|(p, s)| {
            p.by_anchor
                .iter()
                .map(|(i, (m, _, _))| (*i, (m.clone(), s)))
                .collect()
        })
        .unwrap_or_default()
}

/// Loads the tokenizer of `dir` and builds its vocabulary; blockers are an error.
fn load_vocab(dir: &Path, hf: &HfDir) -> Result<(tokenizer::LoadedTokenizer, vocab::Vocab)> {
    let tok = tokenizer::load(dir)?;
    let vocab = vocab::build(
        dir,
        &tok.json,
        &hf.tokenizer_config,
        &hf.config,
        &tok.tokenizer,
    )
    .with_context(|| format!("{}: tokenizer", dir.display()))?;
    if !vocab.blockers.is_empty() {
        bail!(
            "{}: the tokenizer cannot be expressed in GGUF: {}",
            dir.display(),
            vocab.blockers.join("; ")
        );
    }
    Ok((tok, vocab))
}

/// MLX modules, by source index: how each is decoded.
fn affine_by_source(
    mlx_plan: Option<&mlx::MlxPlan>,
) -> std::collections::HashMap<usize, mlx::AffineTensor> {
    mlx_plan
        .map(|p| {
            p.by_weight
                .iter()
                .map(|(i, (a, _, _))| (*i, a.clone()))
                .collect()
        })
        .unwrap_or_default()
}

/// MLX modules by the index of their `.weight`.
type AffineBySource = std::collections::HashMap<usize, mlx::AffineTensor>;
/// GPTQ / AWQ / compressed-tensors modules by the index of their packed codes.
type PackedBySource = std::collections::HashMap<usize, (packed::Module, packed::Scheme)>;

/// Adds every planned tensor to `w`, its bytes encoded when the writer reaches it.
/// The metadata key that records NaN/Inf source values kept by `--allow-nonfinite` (u64
/// count). The verifier treats it as unexpected: such a file is never GO.
pub const NONFINITE_KEY: &str = "quantgate.nonfinite_source_values";

/// What the deferred tensor writers report back, and how they treat non-finite values.
struct Sinks {
    fallback_errors: Rc<RefCell<Vec<mlx::FallbackError>>>,
    underflow: Rc<RefCell<Vec<(String, usize)>>>,
    allow_nonfinite: bool,
}

/// Every planned plain tensor's count of NaN/Inf source values (tensors with none omitted).
fn nonfinite_sources(
    hf: &HfDir,
    planned: &[(usize, PlannedTensor)],
) -> Result<Vec<(String, usize)>> {
    let mut out = Vec::new();
    for (i, p) in planned {
        let src = &hf.tensors[*i];
        if src.dtype == hf::SourceDtype::U32 {
            continue;
        }
        let n = hf.to_f32(src)?.iter().filter(|v| !v.is_finite()).count();
        if n > 0 {
            out.push((p.gguf_name.clone(), n));
        }
    }
    Ok(out)
}

fn add_tensors<'a>(
    w: &mut GgufWriter<'a>,
    hf: &'a HfDir,
    planned: &[(usize, PlannedTensor)],
    (affine, packed): (&AffineBySource, &PackedBySource),
    sink: &Sinks,
) {
    for (i, p) in planned {
        let src = &hf.tensors[*i];
        let ty = GgmlType::from_name(&p.ggml_type).expect("planned type");
        let name = p.gguf_name.clone();
        let uf = sink.underflow.clone();
        let permute = p.permute_heads;
        let rows = p.ne.get(1).copied().unwrap_or(p.ne[0]) as usize;
        let data = match (affine.get(i).cloned(), packed.get(i).cloned()) {
            (Some(at), _) => {
                let fe = (sink.fallback_errors.clone(), sink.allow_nonfinite);
                affine_data(hf, at, ty, permute, name, fe)
            }
            (None, Some(m)) => {
                let fe = (sink.fallback_errors.clone(), sink.allow_nonfinite);
                packed_data(hf, m, ty, permute, name, fe)
            }
            (None, None) if p.shift != 0.0 => {
                shifted_data(hf, src, (ty, p.shift), name, sink.allow_nonfinite)
            }
            (None, None) => {
                let allow = sink.allow_nonfinite;
                plain_data(hf, src, ty, (permute, rows), name, uf, allow)
            }
        };
        w.add_tensor(TensorEntry {
            name: p.gguf_name.clone(),
            ggml_type: ty,
            dims: p.ne.clone(),
            data,
        });
    }
}

/// The deferred bytes of an MLX module: repacked exactly, or decoded and stored as a fallback.
fn affine_data<'a>(
    hf_ref: &'a HfDir,
    at: mlx::AffineTensor,
    ty: GgmlType,
    permute: Option<usize>,
    name: String,
    (fe, allow): (Rc<RefCell<Vec<mlx::FallbackError>>>, bool),
) -> TensorData<'a> {
    TensorData::Deferred(Box::new(move |out| {
        crate::interrupt::check().map_err(std::io::Error::other)?;
        for i in [at.scales, at.biases] {
            let src = &hf_ref.tensors[i];
            let bad = count_nonfinite(&hf_ref.to_f32(src)?);
            nonfinite_guard(hf_ref, src, &name, bad, allow)?;
        }
        let g = at.affine.group;
        let buf = if matches!(ty, GgmlType::Q4_1 | GgmlType::Q5_1) {
            let raw = hf_ref.bytes(&hf_ref.tensors[at.weight])?;
            let words: Vec<u32> = raw
                .chunks_exact(4)
                .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect();
            let s = hf_ref.to_f32(&hf_ref.tensors[at.scales])?;
            let b = hf_ref.to_f32(&hf_ref.tensors[at.biases])?;
            let order = mlx::row_order(at.out, permute);
            mlx::repack_exact(ty, &words, at.affine.bits, &s, &b, at.inn, g, &order)
        } else {
            let d = mlx::decode(hf_ref, &at, permute)?;
            let x = mlx::named_formula(&d.codes, &d.scales, &d.biases, at.inn, g);
            let (buf, err) = mlx::encode_fallback(ty, &x, &name)?;
            if ty != GgmlType::F32 {
                fe.borrow_mut().push(err);
            }
            buf
        };
        out.write_all(&buf)
    }))
}

/// The deferred bytes of a GPTQ / AWQ / compressed-tensors module: encoded exactly, or the
/// named-formula values stored as a fallback.
fn packed_data<'a>(
    hf_ref: &'a HfDir,
    (m, s): (packed::Module, packed::Scheme),
    ty: GgmlType,
    permute: Option<usize>,
    name: String,
    (fe, allow): (Rc<RefCell<Vec<mlx::FallbackError>>>, bool),
) -> TensorData<'a> {
    TensorData::Deferred(Box::new(move |out| {
        crate::interrupt::check().map_err(std::io::Error::other)?;
        let d = packed::decode(hf_ref, &m, &s)?;
        let scales = &hf_ref.tensors[m.scales];
        nonfinite_guard(hf_ref, scales, &name, count_nonfinite(&d.scales), allow)?;
        let order = mlx::row_order(m.out, permute);
        let buf = if matches!(
            ty,
            GgmlType::Q4_0 | GgmlType::Q4_1 | GgmlType::Q5_0 | GgmlType::Q8_0
        ) && packed::exact_type(&m, &s, &d).0 == Some(ty)
        {
            packed::encode_exact(ty, &d, m.inn, &order)
        } else {
            let x = packed::named_formula(&d, m.inn, &order);
            let (buf, err) = mlx::encode_fallback(ty, &x, &name)?;
            if ty != GgmlType::F32 {
                fe.borrow_mut().push(err);
            }
            buf
        };
        out.write_all(&buf)
    }))
}

/// The deferred bytes of a float source tensor: read, Q/K-permuted if needed, encoded as `ty`.
fn plain_data<'a>(
    hf_ref: &'a HfDir,
    src: &'a hf::SourceTensor,
    ty: GgmlType,
    (permute, rows): (Option<usize>, usize),
    name: String,
    uf: Rc<RefCell<Vec<(String, usize)>>>,
    allow_nonfinite: bool,
) -> TensorData<'a> {
    TensorData::Deferred(Box::new(move |out| {
        // Ctrl-C: stop between tensors; the writer's temp file is removed on error.
        crate::interrupt::check().map_err(std::io::Error::other)?;
        if ty == GgmlType::Q8_0 {
            let mut x = hf_ref.to_f32(src)?;
            nonfinite_guard(hf_ref, src, &name, count_nonfinite(&x), allow_nonfinite)?;
            if let Some(heads) = permute {
                x = permute_qk(&x, rows, heads);
            }
            // Q8_0 needs whole 32-value blocks of the (permuted) rows: whole tensor at once.
            let mut buf = Vec::new();
            gguf::quant_ref::quantize_q8_0(&x, &mut buf);
            return out.write_all(&buf);
        }
        let perm = permute.map(|h| (rows, h));
        let c = stream::convert(hf_ref, src, ty, (rows, perm), out, &mut |c| {
            nonfinite_guard(hf_ref, src, &name, c.nonfinite, allow_nonfinite)?;
            overflow_guard(&name, c.overflow)
        })?;
        if c.underflow > 0 {
            uf.borrow_mut().push((name.clone(), c.underflow));
        }
        Ok(())
    }))
}

/// The deferred bytes of a source tensor stored as F32 values plus `shift` (gemma3 norms):
/// widened to f32 first, then shifted, as convert_hf_to_gguf.py does.
fn shifted_data<'a>(
    hf_ref: &'a HfDir,
    src: &'a hf::SourceTensor,
    (ty, shift): (GgmlType, f32),
    name: String,
    allow_nonfinite: bool,
) -> TensorData<'a> {
    TensorData::Deferred(Box::new(move |out| {
        crate::interrupt::check().map_err(std::io::Error::other)?;
        if ty != GgmlType::F32 {
            return Err(std::io::Error::other(format!(
                "tensor {name}: a shifted norm must be stored as F32, not {ty}"
            )));
        }
        let x = hf_ref.to_f32(src)?;
        nonfinite_guard(hf_ref, src, &name, count_nonfinite(&x), allow_nonfinite)?;
        let buf: Vec<u8> = x.iter().flat_map(|v| (v + shift).to_le_bytes()).collect();
        out.write_all(&buf)
    }))
}

fn count_nonfinite(x: &[f32]) -> usize {
    x.iter().filter(|v| !v.is_finite()).count()
}

/// Refuses `bad` non-finite source values unless `--allow-nonfinite`.
fn nonfinite_guard(
    hf: &HfDir,
    src: &hf::SourceTensor,
    name: &str,
    bad: usize,
    allow: bool,
) -> std::io::Result<()> {
    if bad > 0 && !allow {
        return Err(std::io::Error::other(format!(
            "{}: tensor {} ({name}): {bad} non-finite source values (NaN/Inf); refusing to \
             write them (--allow-nonfinite keeps them, recorded in the file)",
            hf.file_of(src).display(),
            src.name
        )));
    }
    Ok(())
}

/// Refuses finite values beyond the f16 range (they would be written as inf).
fn overflow_guard(name: &str, overflow: usize) -> std::io::Result<()> {
    if overflow > 0 {
        return Err(std::io::Error::other(format!(
            "tensor {name}: {overflow} finite values exceed the f16 range (|x| > 65504); \
             refusing to write inf — use --outtype f32 or bf16"
        )));
    }
    Ok(())
}

/// The report's tokenizer facts: model, pre, probe hash, special ids, add flags, token count.
fn tokenizer_facts(vocab: &vocab::Vocab) -> serde_json::Value {
    serde_json::json!({
        "model": vocab.model,
        "pre": vocab.pre,
        "probe_hash": vocab.probe_hash,
        "special": vocab.special,
        "add": vocab.add,
        "n_tokens": vocab.tokens.len(),
    })
}

/// (overflow, underflow) counts of an f32 → f16 conversion: finite values that would become
/// ±inf, and non-zero values that would become ±0.
pub fn f16_range(x: &[f32]) -> (usize, usize) {
    let mut overflow = 0;
    let mut zeroed = 0;
    for v in x {
        let h = gguf::quant::f32_to_f16_bits(*v) & 0x7fff;
        if v.is_finite() && h == 0x7c00 {
            overflow += 1;
        } else if *v != 0.0 && h == 0 {
            zeroed += 1;
        }
    }
    (overflow, zeroed)
}

/// `general.file_type` (llama.h `LLAMA_FTYPE_*`) of a file written as `outtype` whose
/// already-quantized (MLX) tensors were stored as `quantized`: such a file is typed by its
/// quantized tensors (MOSTLY_Q4_1 …), as convert writes it and verify expects it.
pub fn file_type(outtype: OutType, quantized: &[GgmlType]) -> u32 {
    mlx::file_type(quantized).unwrap_or_else(|| outtype.file_type())
}

/// The GGUF metadata in convert_hf_to_gguf.py's order: general (sampling, then the
/// provenance keys of [`card::general_keys`] for a file of `total_params` weights),
/// hyperparameters ending with `general.file_type` (`file_type`, see [`file_type`]), arch
/// extras, quantization version, tokenizer.
///
/// Errors: RoPE settings that cannot be read or mapped ([`rope::read`]); a model card whose
/// front matter is not YAML.
pub fn metadata(
    hf: &HfDir,
    arch: Arch,
    file_type: u32,
    pooling: Option<Pooling>,
    vocab: &vocab::Vocab,
    total_params: u64,
) -> Result<Vec<(String, Value)>> {
    use gguf::keys::{arch_key, general, llm};
    let a = arch.gguf_name();
    let mut kv: Vec<(String, Value)> = Vec::new();
    let mut put = |k: &str, v: Value| kv.push((arch_key(k, a), v));
    put(general::ARCHITECTURE, Value::string(a));
    put(general::TYPE, Value::string("model"));
    for (k, v) in generation::sampling(&hf.dir)? {
        put(&k, v);
    }
    for (k, v) in card::general_keys(&hf.dir, &hf.config, total_params)? {
        put(&k, v);
    }
    let u32_of = |k: &str| hf.config_u64(k).map(|v| Value::U32(v as u32));
    let f32_of = |k: &str| hf.config_f64(k).map(|v| Value::F32(v as f32));
    let rope = rope::read(&hf.config)?;
    let rope_f32 = |x: Option<f64>| x.map(|v| Value::F32(v as f32));
    let sc = rope.scaling.as_ref();
    let yarn = |i: usize| rope_f32(sc.and_then(|s| s.yarn[i]));
    let swa_base = rope::freq_base_swa(&hf.config)?;
    let rows: [(&str, Option<Value>); 18] = [
        (llm::BLOCK_COUNT, u32_of("num_hidden_layers")),
        (llm::CONTEXT_LENGTH, u32_of("max_position_embeddings")),
        (llm::EMBEDDING_LENGTH, u32_of("hidden_size")),
        (llm::FEED_FORWARD_LENGTH, u32_of("intermediate_size")),
        (llm::HEAD_COUNT, u32_of("num_attention_heads")),
        (llm::HEAD_COUNT_KV, u32_of("num_key_value_heads")),
        // Scaling before the base, as llama.cpp's converter writes them.
        (llm::ROPE_SCALING_TYPE, sc.map(|s| Value::string(s.kind))),
        (llm::ROPE_SCALING_FACTOR, rope_f32(sc.map(|s| s.factor))),
        (
            llm::ROPE_SCALING_ORIG_CTX_LEN,
            sc.and_then(|s| s.original_context)
                .map(|c| Value::U32(c as u32)),
        ),
        (llm::ROPE_SCALING_YARN_EXT_FACTOR, yarn(0)),
        (llm::ROPE_SCALING_YARN_ATTN_FACTOR, yarn(1)),
        (llm::ROPE_SCALING_YARN_BETA_FAST, yarn(2)),
        (llm::ROPE_SCALING_YARN_BETA_SLOW, yarn(3)),
        (llm::ROPE_FREQ_BASE, rope_f32(rope.freq_base)),
        (llm::ROPE_FREQ_BASE_SWA, rope_f32(swa_base)),
        (llm::LAYERNORM_RMS_EPS, f32_of("rms_norm_eps")),
        (llm::LAYERNORM_EPS, f32_of("layer_norm_eps")),
        (llm::KEY_LENGTH, key_length(hf, arch)),
    ];
    for (k, v) in rows {
        if let Some(v) = v {
            put(k, v.clone());
            if k == llm::KEY_LENGTH {
                put(llm::VALUE_LENGTH, v);
            }
        }
    }
    put(general::FILE_TYPE, Value::U32(file_type));
    match arch {
        Arch::Bert => {
            put(llm::CAUSAL, Value::Bool(false));
            if let Some(p) = pooling {
                put(llm::POOLING_TYPE, Value::U32(p.llama_id()));
            }
        }
        Arch::Qwen2 | Arch::Qwen3 => {
            if let Some(p) = pooling {
                put(llm::POOLING_TYPE, Value::U32(p.llama_id()));
            }
        }
        Arch::Gemma3 => {
            if let Some(v) = u32_of("sliding_window") {
                put(llm::SLIDING_WINDOW, v);
            }
        }
        Arch::Llama => {
            if let Some(v) = u32_of("vocab_size") {
                put(llm::VOCAB_SIZE, v);
            }
            let heads = hf.config_u64("num_attention_heads").unwrap_or(1).max(1);
            let rope_dim = hf
                .config_u64("head_dim")
                .or_else(|| hf.config_u64("hidden_size").map(|h| h / heads));
            if let Some(d) = rope_dim {
                put(llm::ROPE_DIMENSION_COUNT, Value::U32(d as u32));
            }
        }
    }
    // ggml's block layouts since 2023 (gguf-py GGML_QUANT_VERSION).
    put(general::QUANTIZATION_VERSION, Value::U32(2));
    // llama.cpp's LlamaModel.set_vocab writes add_bos_token=false for every 49152-token
    // vocabulary (its rule for small granite models, which SmolLM2 shares).
    let no_bos = arch == Arch::Llama && hf.config_u64("vocab_size") == Some(49152);
    kv.extend(tokenizer_metadata(vocab, arch, no_bos));
    // The backstop of every field check: no key is written as an f32 that is not finite
    // (1e300 or 1e39 become inf as f32; llama.cpp would then run a degenerate model).
    if let Some((k, v)) = kv
        .iter()
        .find(|(_, v)| matches!(v, Value::F32(x) if !x.is_finite()))
    {
        bail!(
            "{}: config.json: the value for GGUF key {k} is {v} as f32: not finite (the config field does not fit an f32)",
            hf.dir.display()
        );
    }
    Ok(kv)
}

/// `{arch}.attention.key_length` (and value_length): config.json's `head_dim`; for llama also
/// hidden / heads when absent, because llama.cpp's converter reads the config through
/// transformers, whose `LlamaConfig` always sets `head_dim` (5.x: `hidden_size //
/// num_attention_heads`), while `Qwen2Config` has none.
fn key_length(hf: &HfDir, arch: Arch) -> Option<Value> {
    let hd = hf.config_u64("head_dim").or_else(|| {
        let heads = hf.config_u64("num_attention_heads").filter(|h| *h > 0)?;
        (arch == Arch::Llama).then_some(hf.config_u64("hidden_size")? / heads)
    })?;
    Some(Value::U32(hd as u32))
}

/// The `tokenizer.*` keys of `vocab`, in gguf-py's order; `no_bos` writes add_bos_token=false
/// when the vocabulary decided nothing.
fn tokenizer_metadata(vocab: &vocab::Vocab, arch: Arch, no_bos: bool) -> Vec<(String, Value)> {
    use gguf::keys::tokenizer as k;
    let strings = |v: &[String]| {
        Value::Array(
            ValueType::String,
            v.iter().map(|t| Value::string(t.clone())).collect(),
        )
    };
    let mut kv: Vec<(String, Value)> = Vec::new();
    let mut put = |k: &str, v: Value| kv.push((k.to_string(), v));
    if let Some(n) = vocab.token_type_count {
        put(k::TOKEN_TYPE_COUNT, Value::U32(n));
    }
    put(k::MODEL, Value::string(vocab.model.clone()));
    put(k::PRE, Value::string(vocab.pre.clone()));
    put(k::TOKENS, strings(&vocab.tokens));
    if let Some(scores) = &vocab.scores {
        put(
            k::SCORES,
            Value::Array(
                ValueType::F32,
                scores.iter().map(|s| Value::F32(*s)).collect(),
            ),
        );
    }
    put(
        k::TOKEN_TYPE,
        Value::Array(
            ValueType::I32,
            vocab.token_types.iter().map(|t| Value::I32(*t)).collect(),
        ),
    );
    if !vocab.merges.is_empty() {
        put(k::MERGES, strings(&vocab.merges));
    }
    for kind in vocab::SPECIAL_ORDER {
        if let Some(id) = vocab.special.get(kind) {
            put(&k::special_id(kind), Value::U32(*id));
        }
    }
    for kind in ["bos", "eos", "sep"] {
        let forced = (kind == "bos" && no_bos).then_some(false);
        if let Some(b) = vocab.add.get(kind).copied().or(forced) {
            put(&k::add_token(kind), Value::Bool(b));
        }
    }
    // llama.cpp's converter copies tokenizer_config's add_prefix_space for llama only
    // (LlamaModel.set_vocab); qwen2/qwen3 never write it; gemma3's SentencePiece vocabulary
    // sets its own (Gemma3Model.set_vocab: false).
    if let Some(b) = vocab
        .add_space_prefix
        .filter(|_| matches!(arch, Arch::Llama | Arch::Gemma3))
    {
        put(k::ADD_SPACE_PREFIX, Value::Bool(b));
    }
    if let Some(b) = vocab.normalizer_lowercase {
        put(k::NORMALIZER_LOWERCASE, Value::Bool(b));
    }
    let templates = &vocab.chat_templates;
    if let Some(t) = templates.default_template() {
        put(k::CHAT_TEMPLATE, Value::string(t));
    }
    // gguf-py's order: each named template, then the list of names (sorted here; gguf-py
    // writes a Python set, whose order is not defined).
    let named: Vec<(&str, &str)> = templates.named().collect();
    for (name, t) in &named {
        put(&k::chat_template_named(name), Value::string(*t));
    }
    if !named.is_empty() {
        put(
            k::CHAT_TEMPLATES,
            strings(&named.iter().map(|(n, _)| n.to_string()).collect::<Vec<_>>()),
        );
    }
    kv
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f16_range_counts_overflow_and_underflow_but_not_exact_zeros() {
        // 65504 is the largest f16; 65520 rounds to inf; 1e-8 is below the smallest subnormal.
        let x = [
            0.0f32,
            -0.0,
            1.0,
            65504.0,
            65519.0,
            65520.0,
            -1e6,
            1e-8,
            -1e-9,
            6e-8,
            f32::INFINITY,
        ];
        assert_eq!(f16_range(&x), (2, 2));
    }

    #[test]
    fn outtype_names_and_file_types() {
        assert_eq!(OutType::parse("Q8_0").unwrap(), OutType::Q8_0);
        assert_eq!(OutType::parse("auto").unwrap().file_type(), 1);
        assert_eq!(OutType::BF16.file_type(), 32);
        assert!(OutType::parse("q4_k")
            .unwrap_err()
            .to_string()
            .contains("expected f32, f16, bf16, q8_0 or auto"));
    }
}
