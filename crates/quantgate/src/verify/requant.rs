//! Gate 1 for quantized files: every tensor llama.cpp's `llama_model_quantize` wrote is
//! re-made from the source GGUF by our own code — source dequantized by our reader
//! (F32/F16/BF16 → f32 is exact), then quantized by `gguf::quant_ref` (ports of ggml-quants.c
//! `quantize_row_*_ref`, which `ggml_quantize_chunk` uses without an imatrix) — and compared
//! byte for byte. Tensors stored in the source's own type must be byte-identical copies.
//!
//! With an importance matrix (`quantize --imatrix`), and for types our reference quantizers do
//! not cover (the IQ types), the tensor is re-made by ggml's `ggml_quantize_chunk` with the
//! weights read by our own imatrix reader ([`gguf::imatrix`]) and sliced per expert as
//! llama-quant.cpp slices them: what is checked is the quantizer's pipeline (which weights
//! reach which tensor, the type plan, the written bytes), not ggml's kernel against itself.

use std::path::Path;

use anyhow::{bail, Context, Result};
use gguf::{GgmlType, Gguf};
use rayon::prelude::*;
use serde::Serialize;

use crate::imatrix::Weights;

/// One tensor's check.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct RequantTensor {
    pub name: String,
    /// Type in the quantized file.
    pub ggml_type: String,
    /// Type in the source file.
    pub source_type: String,
    /// `requantized` (our reference quantizer ran), `ggml` (ggml's quantizer without weights:
    /// a type ours does not cover), `ggml-imatrix` (ggml's quantizer with the tensor's
    /// importance weights) or `copied` (same type as the source).
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

/// The weights llama-quant.cpp passes for tensor `t`: its entry when its length is
/// `ne[0] · ne[2]` (one slice per expert); none without an entry.
///
/// Errors: an entry of another length for a tensor other than token_embd (llama-quant.cpp
/// refuses those; token_embd's is ignored).
fn weights_for<'w>(w: &'w Weights, t: &gguf::TensorInfo) -> Result<Option<&'w [f32]>> {
    let Some(e) = w.get(&t.name) else {
        return Ok(None);
    };
    let ne = t.ne();
    if e.len() as u64 == ne[0] * ne[2] {
        return Ok(Some(e));
    }
    if t.name.starts_with("token_embd") {
        return Ok(None);
    }
    bail!(
        "imatrix entry {} has {} values, the tensor {:?}",
        t.name,
        e.len(),
        t.dims
    )
}

/// ggml's encoding of `x` (the tensor `t`) as `ty` with `weights` (one slice of `ne[0]` per
/// matrix `ne[2]`), or without.
fn ggml_encode(
    t: &gguf::TensorInfo,
    x: &[f32],
    ty: GgmlType,
    weights: Option<&[f32]>,
) -> Result<Vec<u8>> {
    let ne = t.ne();
    let (n0, per_mat) = (ne[0] as usize, (ne[0] * ne[1]) as usize);
    let mut out = Vec::new();
    for (m, mat) in x.chunks(per_mat.max(1)).enumerate() {
        let w = weights.map(|w| &w[m * n0..(m + 1) * n0]);
        let b = llama_runtime::ggml_quantize_weighted(ty.id(), mat, n0, w)
            .with_context(|| format!("tensor {} as {ty}", t.name))?;
        out.extend(b);
    }
    Ok(out)
}

fn check_one(
    src: &Gguf,
    q: &Gguf,
    t: &gguf::TensorInfo,
    imatrix: Option<&Weights>,
) -> Result<RequantTensor> {
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
        let w = imatrix.map(|w| weights_for(w, t)).transpose()?.flatten();
        let ours = gguf::quant_ref::SUPPORTED.contains(&t.ggml_type);
        match w {
            Some(w) => ("ggml-imatrix", ggml_encode(t, &x, t.ggml_type, Some(w))?),
            None if !ours => ("ggml", ggml_encode(t, &x, t.ggml_type, None)?),
            None => {
                let mut out = Vec::with_capacity(got.len());
                gguf::quant_ref::quantize_ref(t.ggml_type, &x, &mut out)
                    .with_context(|| format!("tensor {} as {}", t.name, t.ggml_type))?;
                ("requantized", out)
            }
        }
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

/// Checks every tensor of `quantized` against `source` (the file it was quantized from),
/// with the importance weights it was quantized with, if any.
///
/// Errors: unreadable files, a tensor missing from the source or with another shape, a file
/// with `quantize.imatrix.*` keys checked without weights (or weights for a file without the
/// keys), an imatrix entry of the wrong length, or a type neither quantizer covers.
pub fn check(source: &Path, quantized: &Path, imatrix: Option<&Weights>) -> Result<RequantReport> {
    let src = Gguf::open(source)?;
    let q = Gguf::open(quantized)?;
    let keyed = q
        .header
        .metadata
        .iter()
        .find(|(k, _)| k.starts_with(gguf::keys::quantize::IMATRIX_PREFIX));
    match (keyed, imatrix) {
        (Some(k), None) => bail!(
            "{}: quantized with an importance matrix ({}); re-making it needs that imatrix",
            quantized.display(),
            k.0
        ),
        (None, Some(_)) => bail!(
            "{}: has no quantize.imatrix.* keys, but an imatrix was given",
            quantized.display()
        ),
        _ => {}
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
            let r = check_one(&src, &q, t, imatrix);
            let k = done.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
            crate::progress::report("gate 1 re-quantization: tensors", k, n);
            r
        })
        .collect::<Result<_>>()?;
    let requantized = tensors.iter().filter(|t| t.how != "copied").count();
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
