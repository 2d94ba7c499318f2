//! `quantgate convert`: HF checkpoint folder → GGUF, as llama.cpp's convert_hf_to_gguf.py
//! would write it (keys, names, F32-kept tensors, tokenizer metadata), streaming one tensor at a
//! time. Data flows one way: read (hf) → plan (arch table) → write (gguf writer).

pub mod consistency;
mod experts;
mod metadata;
pub mod mlx;
pub mod packed;
pub mod rope_freqs;
pub mod stream;
mod tensor_data;

use std::cell::RefCell;
use std::path::Path;
use std::rc::Rc;
use std::time::Instant;

use anyhow::{anyhow, bail, Context, Result};
use gguf::{GgmlType, GgufWriter, Value};
use serde::Serialize;

use crate::source::arch::{self, Arch};
use crate::source::hf::{self, HfDir};
use crate::source::permute::permute_heads;
use crate::source::{arch_of, card, fields, generation, rope, tokenizer, vocab};
use reference::pooling::Pooling;

pub use metadata::{file_type, metadata};
use tensor_data::{add_tensors, nonfinite_sources, Sinks};

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
    /// A stacked MoE tensor's members: the source index of each expert, in expert order
    /// ([`experts`]); empty for every other tensor.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub experts: Vec<usize>,
    /// Leading source rows not stored (XLM-R's position table,
    /// [`crate::source::arch::position_offset`]); 0 for every other tensor.
    #[serde(skip_serializing_if = "is_zero_usize")]
    pub skip_rows: usize,
}

fn is_zero(x: &f32) -> bool {
    *x == 0.0
}

fn is_zero_usize(x: &usize) -> bool {
    *x == 0
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
    let mut stacker = experts::Stacker::new(hf);
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
            unstacked_only(hf, &g, &hf_name)?;
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
            unstacked_only(hf, &m, &t.name)?;
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
        if m.expert.is_some() {
            out.extend(stacker.add(hf, (arch, outtype), i, &m, &mut seen)?);
            continue;
        }
        let mut ne: Vec<u64> = t.shape.iter().rev().map(|d| *d as u64).collect();
        let skip_rows = skipped_rows(hf, &m.gguf, &ne)?;
        if skip_rows > 0 {
            ne[1] -= skip_rows as u64;
        }
        let (ty, rule) = storage_rule(&m, &ne, outtype);
        let mut p = planned(&mut seen, hf, arch, &t.name, m.gguf, ty, ne, rule)?;
        p.skip_rows = skip_rows;
        out.push((i, p));
    }
    stacker.finish(hf)?;
    Ok(out)
}

/// The leading rows of `gguf_name` (source `ne`) the file leaves out
/// ([`crate::source::arch::rows_dropped`]: XLM-R's position table).
///
/// Errors: a table with no more rows than that, naming config.json's field.
fn skipped_rows(hf: &HfDir, gguf_name: &str, ne: &[u64]) -> Result<usize> {
    let drop = crate::source::arch::rows_dropped(&hf.config, gguf_name);
    match ne {
        _ if drop == 0 => Ok(0),
        [_, rows] if *rows > drop as u64 => Ok(drop),
        _ => bail!(
            "{}: config.json pad_token_id + 1 = {drop} position rows to drop, but {gguf_name} has ne {ne:?}",
            hf.dir.display()
        ),
    }
}

/// Already-quantized (MLX, GPTQ, AWQ, compressed-tensors) experts are not stacked yet.
///
/// Errors: `m` is one expert of a stacked MoE tensor, naming the tensor.
fn unstacked_only(hf: &HfDir, m: &arch::Mapped, hf_name: &str) -> Result<()> {
    if m.expert.is_some() {
        bail!(
            "{}: tensor {hf_name} is an already-quantized MoE expert; stacking quantized experts into {} is not supported yet",
            hf.dir.display(),
            m.gguf
        );
    }
    Ok(())
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
        experts: Vec::new(),
        skip_rows: 0,
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
    let generated = if opts.vocab_only {
        Vec::new()
    } else {
        rope_freqs::generated(&hf, arch)?
    };
    let total_params = total_params(&planned, &generated);
    // Fields and tensors first: an error then names the config field, not the GGUF key.
    consistency::check(&hf, arch, &planned)?;
    vocab_fits_embedding(&hf, &vocab, &planned)?;
    for (k, v) in metadata(&hf, arch, ft, pooling, &vocab, total_params)? {
        w.add_kv(k, v);
    }
    if opts.allow_nonfinite {
        record_nonfinite(&mut w, &hf, &planned, &mut notes)?;
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
    add_generated(&mut w, &generated);
    add_tensors(&mut w, &hf, &planned, (&affine, &packed), &sink);
    let planned_out: Vec<PlannedTensor> = generated
        .iter()
        .map(|(p, _)| p.clone())
        .chain(planned.iter().map(|(_, p)| p.clone()))
        .collect();
    let rules = rule_summary(&planned_out);
    let size = w
        .file_bytes()
        .map_err(|e| anyhow!("{}: {e}", out.display()))?;
    crate::disk::ensure_free(output_dir(out), size, "convert")?;
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

/// With `--allow-nonfinite`: a note per tensor with NaN/Inf source values, and their total
/// as `quantgate.nonfinite_source_values`.
fn record_nonfinite(
    w: &mut GgufWriter<'_>,
    hf: &HfDir,
    planned: &[(usize, PlannedTensor)],
    notes: &mut Vec<String>,
) -> Result<()> {
    let found = nonfinite_sources(hf, planned)?;
    let total: u64 = found.iter().map(|(_, n)| *n as u64).sum();
    for (name, n) in &found {
        notes.push(format!(
            "{name}: {n} non-finite source values kept (--allow-nonfinite)"
        ));
    }
    if total > 0 {
        w.add_kv(NONFINITE_KEY, Value::U64(total));
    }
    Ok(())
}

/// Parameters of every planned and generated tensor (gguf-py counts both for the size label).
fn total_params(
    planned: &[(usize, PlannedTensor)],
    generated: &[(PlannedTensor, Vec<f32>)],
) -> u64 {
    planned
        .iter()
        .map(|(_, t)| t.ne.iter().product::<u64>())
        .chain(generated.iter().map(|(p, _)| p.ne[0]))
        .sum()
}

/// Adds the generated F32 tensors, before the source's, as the peer orders them
/// (`generate_extra_tensors`).
fn add_generated(w: &mut GgufWriter<'_>, generated: &[(PlannedTensor, Vec<f32>)]) {
    for (p, data) in generated {
        w.add_tensor(gguf::TensorEntry {
            name: p.gguf_name.clone(),
            ggml_type: GgmlType::F32,
            dims: p.ne.clone(),
            data: gguf::TensorData::Owned(rope_freqs::bytes(data)),
        });
    }
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
        match crate::source::mlx::QuantConfig::from_config(&hf.config)
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
) -> std::collections::HashMap<usize, crate::source::mlx::AffineTensor> {
    mlx_plan
        .map(|p| {
            p.by_weight
                .iter()
                .map(|(i, (a, _, _))| (*i, a.clone()))
                .collect()
        })
        .unwrap_or_default()
}

/// Adds every planned tensor to `w`, its bytes encoded when the writer reaches it.
/// The metadata key that records NaN/Inf source values kept by `--allow-nonfinite` (u64
/// count). The verifier treats it as unexpected: such a file is never GO.
pub const NONFINITE_KEY: &str = "quantgate.nonfinite_source_values";

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

/// The folder an output file is written in (its temp file goes there too).
pub(crate) fn output_dir(out: &Path) -> &Path {
    match out.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
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
