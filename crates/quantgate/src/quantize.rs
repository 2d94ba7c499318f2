//! `quantgate quantize`: llama.cpp's `llama_model_quantize`, then a report of the type each
//! tensor got and of every fallback (a row length that is not a multiple of the requested
//! type's block size, so llama.cpp chose another type).

use std::path::{Path, PathBuf};

use crate::threads::Threads;
use anyhow::{anyhow, bail, Context, Result};
use gguf::{GgmlType, Gguf, LlamaFtype};
use serde::Serialize;

/// One output tensor.
#[derive(Clone, Debug, Serialize)]
pub struct QuantizedTensor {
    pub name: String,
    pub ggml_type: String,
    pub ne: Vec<u64>,
}

/// What the quantization produced.
#[derive(Clone, Debug, Serialize)]
pub struct QuantizeReport {
    pub input: String,
    pub output: String,
    pub ftype: String,
    pub tensors: Vec<QuantizedTensor>,
    /// Tensors whose row length is not a multiple of the base type's block size, with the type
    /// llama.cpp chose instead.
    pub fallbacks: Vec<String>,
    pub file_bytes: u64,
    pub seconds: f64,
    /// The importance matrix the quantizer was given (`--imatrix`), if any.
    pub imatrix: Option<crate::imatrix::ImatrixUse>,
    /// Gate 1: every tensor re-made by our reference quantizers from the input, compared byte
    /// for byte with what llama.cpp wrote.
    pub gate1: crate::verify::requant::RequantReport,
}

/// The file type named `ftype` (`Q4_K_M` …) when `quantize` accepts it.
fn target(ftype: &str) -> Result<LlamaFtype> {
    LlamaFtype::by_name(ftype)
        .filter(|t| t.quantize_target)
        .ok_or_else(|| {
            anyhow!(
                "unknown type {ftype:?}; supported: {}",
                LlamaFtype::quantize_targets()
                    .map(|f| f.name)
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        })
}

/// Where a file that failed the byte-for-byte check is kept: beside the output, never at it.
pub fn failed_path(output: &Path) -> PathBuf {
    let mut name = output.file_name().unwrap_or_default().to_os_string();
    name.push(".failed-check");
    output.with_file_name(name)
}

/// Why llama.cpp's write may have failed when its log does not say: a full file system.
fn disk_hint(dir: &Path) -> Option<String> {
    let c = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()).ok()?;
    // SAFETY: zeroed statvfs is a valid out-parameter; c is NUL-terminated.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return None;
    }
    (st.f_bavail == 0).then(|| format!("{}: no space left on device (ENOSPC)", dir.display()))
}

/// About what llama.cpp's quantizer will write for `src` as ftype `id`: the tensors at the
/// types its dry run plans (`ggml_row_size` of each, aligned), plus the input's header and
/// 1 MiB for the keys the quantizer adds.
///
/// Errors: llama.cpp's dry run fails, or plans a tensor or type the input does not have.
fn planned_bytes(
    src: &Gguf,
    input: &Path,
    id: u32,
    imatrix: Option<&llama_runtime::QuantizeImatrix>,
) -> Result<u64> {
    let plan = llama_runtime::quantize_plan(input, id, imatrix)?;
    let mut total = src.header.data_offset + (1 << 20);
    for p in &plan {
        let t = src.header.tensors.iter().find(|t| t.name == p.name);
        let ty = GgmlType::from_name(&p.ggml_type);
        let (Some(t), Some(ty)) = (t, ty) else {
            bail!(
                "{}: llama.cpp plans {} as {}",
                input.display(),
                p.name,
                p.ggml_type
            );
        };
        let n =
            gguf::tensor_n_bytes(ty, &t.dims).map_err(|e| anyhow::anyhow!("{}: {e}", p.name))?;
        total += gguf::pad(n, 32).unwrap_or(n);
    }
    Ok(total)
}

/// The tensors of the quantized file, and the fallbacks: rows that are not a multiple of the
/// base type's block size, so llama.cpp chose another type.
fn tensors_and_fallbacks(g: &Gguf, base: GgmlType) -> (Vec<QuantizedTensor>, Vec<String>) {
    let mut tensors = Vec::new();
    let mut fallbacks = Vec::new();
    for t in &g.header.tensors {
        let quantizable = t.dims.len() >= 2 && t.name.ends_with(".weight");
        if quantizable && t.dims[0] % base.block_size() != 0 {
            fallbacks.push(format!(
                "{}: row length {} is not a multiple of {} ({base}); stored as {}",
                t.name,
                t.dims[0],
                base.block_size(),
                t.ggml_type
            ));
        }
        tensors.push(QuantizedTensor {
            name: t.name.clone(),
            ggml_type: t.ggml_type.to_string(),
            ne: t.dims.clone(),
        });
    }
    (tensors, fallbacks)
}

/// Quantizes `input` → `output` as `ftype` (e.g. `Q4_K_M`) with `threads`, into a temp file
/// beside `output` that is renamed to `output` only when every tensor passed Gate 1 (the
/// byte-for-byte re-quantization). A file that fails it is kept at [`failed_path`], never at
/// `output`. SIGINT/SIGTERM at any moment leave nothing at `output` (exit 128 + signal).
///
/// Errors: an unknown type, an unreadable or non-regular input, an output that is an input,
/// llama.cpp's refusal (with its log lines and the path), a disk error naming the path, or an
/// interruption.
pub fn quantize(
    input: &Path,
    output: &Path,
    ftype: &str,
    threads: Threads,
) -> Result<QuantizeReport> {
    quantize_with(input, output, ftype, threads, None)
}

/// [`quantize`] with an importance matrix (`llama-quantize --imatrix FILE`): llama.cpp gets its
/// weights and writes the `quantize.imatrix.*` keys; Gate 1 re-makes every tensor with the
/// same weights ([`crate::verify::requant`]) and the report names the file's sha256.
///
/// Errors: as [`quantize`], and an unreadable or malformed imatrix (naming the field).
pub fn quantize_with(
    input: &Path,
    output: &Path,
    ftype: &str,
    threads: Threads,
    imatrix: Option<&Path>,
) -> Result<QuantizeReport> {
    let t = target(ftype)?;
    if t.requires_imatrix() && imatrix.is_none() {
        bail!(
            "{}: needs an importance matrix (llama-quantize refuses it without one): pass --imatrix FILE (quantgate imatrix makes one)",
            t.name
        );
    }
    let LlamaFtype { name, id, base, .. } = t;
    crate::paths::ensure_regular_file(input)?;
    let im = imatrix.map(crate::imatrix::load).transpose()?;
    // Validate the input with our reader first: a clear error beats llama.cpp's log.
    let src = Gguf::open(input)?;
    let mut inputs = vec![input];
    inputs.extend(imatrix);
    crate::paths::ensure_output_distinct(output, &inputs)?;
    // llama.cpp refuses to re-quantize, and Gate 1 re-makes tensors from float sources only.
    if let Some(t) = src
        .header
        .tensors
        .iter()
        .find(|t| !matches!(t.ggml_type, GgmlType::F32 | GgmlType::F16 | GgmlType::BF16))
    {
        bail!(
            "{}: tensor {} is {}; quantize takes an F32, F16 or BF16 GGUF (convert makes one)",
            input.display(),
            t.name,
            t.ggml_type
        );
    }
    crate::interrupt::install();
    let dir = output
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let cim = im.as_ref().map(|m| &m.c);
    crate::disk::ensure_free(dir, planned_bytes(&src, input, id, cim)?, "quantize")?;
    drop(src);
    let tmp = tempfile::Builder::new()
        // As every other output (tempfile's default is 0600).
        .permissions(std::os::unix::fs::PermissionsExt::from_mode(0o644))
        .prefix(".quantgate-quantize-")
        .suffix(".gguf.tmp")
        .tempfile_in(dir)
        .with_context(|| format!("{}: cannot create a temp file", dir.display()))?;
    crate::interrupt::check()?;
    let t0 = std::time::Instant::now();
    let progress = |done, total| crate::progress::report("tensors", done, total);
    llama_runtime::quantize_model(input, tmp.path(), id, threads.get(), cim, progress).map_err(
        |e| match disk_hint(dir) {
            Some(h) => anyhow::Error::from(e).context(h),
            None => e.into(),
        },
    )?;
    let seconds = t0.elapsed().as_secs_f64();
    crate::interrupt::check()?;
    let g = Gguf::open(tmp.path())?;
    let (tensors, fallbacks) = tensors_and_fallbacks(&g, base);
    if tensors.is_empty() {
        bail!("{}: no tensors written", output.display());
    }
    let file_bytes = g.bytes().len() as u64;
    drop(g);
    let weights = im.as_ref().map(|m| &m.weights);
    let mut gate1 = crate::verify::requant::check(input, tmp.path(), weights)?;
    let kept = if gate1.pass {
        output.to_path_buf()
    } else {
        failed_path(output)
    };
    gguf::ensure_replaceable(&kept)?;
    tmp.persist(&kept)
        .map_err(|e| anyhow!("{}: {}", kept.display(), e.error))?;
    gate1.quantized = kept.display().to_string();
    Ok(QuantizeReport {
        input: input.display().to_string(),
        output: kept.display().to_string(),
        ftype: name.into(),
        tensors,
        fallbacks,
        file_bytes,
        seconds,
        imatrix: im.map(|m| m.used),
        gate1,
    })
}
