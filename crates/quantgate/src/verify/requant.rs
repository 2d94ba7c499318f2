//! Gate 1 for quantized files: every tensor llama.cpp's `llama_model_quantize` wrote is
//! re-made from the source GGUF by our own code — source dequantized by our reader
//! (F32/F16/BF16 → f32 is exact), then quantized by `gguf::quant_ref` (ports of ggml-quants.c
//! `quantize_row_*_ref`, which `ggml_quantize_chunk` uses without an imatrix) — and compared
//! byte for byte. Tensors stored in the source's own type must be byte-identical copies.

use std::path::Path;

use anyhow::{bail, Context, Result};
use gguf::{GgmlType, Gguf};
use rayon::prelude::*;
use serde::Serialize;

/// One tensor's check.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct RequantTensor {
    pub name: String,
    /// Type in the quantized file.
    pub ggml_type: String,
    /// Type in the source file.
    pub source_type: String,
    /// `requantized` (our quantizer ran) or `copied` (same type as the source).
    pub how: String,
    pub identical: bool,
    /// Index of the first differing block (`None` if identical).
    pub first_diff_block: Option<u64>,
}

/// The whole check.
#[derive(Clone, Debug, Serialize)]
pub struct RequantReport {
    pub source: String,
    pub quantized: String,
    pub tensors: Vec<RequantTensor>,
    /// Tensors re-quantized by our code / copied, and how many of all were byte-identical.
    pub requantized: usize,
    pub copied: usize,
    pub identical: usize,
    /// True iff every tensor is byte-identical.
    pub pass: bool,
}

fn first_diff(a: &[u8], b: &[u8], block_bytes: usize) -> Option<u64> {
    if a.len() != b.len() {
        return Some(a.len().min(b.len()) as u64 / block_bytes.max(1) as u64);
    }
    a.iter()
        .zip(b)
        .position(|(x, y)| x != y)
        .map(|i| (i / block_bytes.max(1)) as u64)
}

fn check_one(src: &Gguf, q: &Gguf, t: &gguf::TensorInfo) -> Result<RequantTensor> {
    // Between tensors: SIGINT/SIGTERM stop the check (the caller's temp file is removed).
    crate::interrupt::check()?;
    let s = src.header.tensor(&t.name).with_context(|| {
        format!(
            "{}: tensor {} is not in the source {}",
            q.path().display(),
            t.name,
            src.path().display()
        )
    })?;
    if s.dims != t.dims {
        bail!(
            "{}: tensor {} has shape {:?}, the source {:?}",
            q.path().display(),
            t.name,
            t.dims,
            s.dims
        );
    }
    let got = q.tensor_data(t);
    let (how, ours) = if s.ggml_type == t.ggml_type {
        ("copied", src.tensor_data(s).to_vec())
    } else {
        if !matches!(s.ggml_type, GgmlType::F32 | GgmlType::F16 | GgmlType::BF16) {
            bail!(
                "{}: source tensor {} is {}; re-quantization needs F32, F16 or BF16",
                src.path().display(),
                s.name,
                s.ggml_type
            );
        }
        let x = gguf::dequant::dequantize_to_vec(
            s.ggml_type,
            src.tensor_data(s),
            s.n_elements() as usize,
        )?;
        let mut out = Vec::with_capacity(got.len());
        gguf::quant_ref::quantize_ref(t.ggml_type, &x, &mut out)
            .with_context(|| format!("tensor {} as {}", t.name, t.ggml_type))?;
        ("requantized", out)
    };
    let d = first_diff(&ours, got, t.ggml_type.type_size() as usize);
    Ok(RequantTensor {
        name: t.name.clone(),
        ggml_type: t.ggml_type.to_string(),
        source_type: s.ggml_type.to_string(),
        how: how.into(),
        identical: d.is_none(),
        first_diff_block: d,
    })
}

/// Checks every tensor of `quantized` against `source` (the file it was quantized from).
///
/// Errors: unreadable files, a tensor missing from the source or with another shape, a file
/// quantized with an importance matrix (`quantize.imatrix.*` keys: the reference quantizers
/// take no weights, so they cannot re-make it), or a target type without a reference quantizer.
pub fn check(source: &Path, quantized: &Path) -> Result<RequantReport> {
    let src = Gguf::open(source)?;
    let q = Gguf::open(quantized)?;
    if let Some(k) = q
        .header
        .metadata
        .iter()
        .find(|(k, _)| k.starts_with("quantize.imatrix"))
    {
        bail!(
            "{}: quantized with an importance matrix ({}); the reference quantizers (no imatrix) cannot re-make it",
            quantized.display(),
            k.0
        );
    }
    let (n, done) = (
        q.header.tensors.len(),
        std::sync::atomic::AtomicUsize::new(0),
    );
    let tensors: Vec<RequantTensor> = q
        .header
        .tensors
        .par_iter()
        .map(|t| {
            let r = check_one(&src, &q, t);
            let k = done.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
            crate::progress::report("gate 1 re-quantization: tensors", k, n);
            r
        })
        .collect::<Result<_>>()?;
    let requantized = tensors.iter().filter(|t| t.how == "requantized").count();
    let identical = tensors.iter().filter(|t| t.identical).count();
    Ok(RequantReport {
        source: source.display().to_string(),
        quantized: quantized.display().to_string(),
        copied: tensors.len() - requantized,
        requantized,
        identical,
        pass: identical == tensors.len() && !tensors.is_empty(),
        tensors,
    })
}
