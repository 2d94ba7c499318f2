//! `quantgate quantize`: llama.cpp's `llama_model_quantize`, then a report of the type each
//! tensor got and of every fallback (a row length that is not a multiple of the requested
//! type's block size, so llama.cpp chose another type).

use std::path::Path;

use anyhow::{anyhow, bail, Result};
use gguf::{Gguf, LlamaFtype};
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
    /// Gate 1: every tensor re-made by our reference quantizers from the input, compared byte
    /// for byte with what llama.cpp wrote.
    pub gate1: crate::verify::requant::RequantReport,
}

/// Quantizes `input` → `output` as `ftype` (e.g. `Q4_K_M`) with `threads`.
pub fn quantize(input: &Path, output: &Path, ftype: &str, threads: i32) -> Result<QuantizeReport> {
    let LlamaFtype { name, id, base, .. } = LlamaFtype::by_name(ftype)
        .filter(|t| t.quantize_target)
        .ok_or_else(|| {
            anyhow!(
                "unknown type {ftype:?}; supported: {}",
                LlamaFtype::quantize_targets()
                    .map(|f| f.name)
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        })?;
    // Validate the input with our reader first: a clear error beats llama.cpp's log.
    Gguf::open(input)?;
    crate::paths::ensure_output_distinct(output, &[input])?;
    let t0 = std::time::Instant::now();
    llama_runtime::quantize_model(input, output, id, threads)?;
    let seconds = t0.elapsed().as_secs_f64();
    let g = Gguf::open(output)?;
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
    if tensors.is_empty() {
        bail!("{}: no tensors written", output.display());
    }
    let gate1 = crate::verify::requant::check(input, output)?;
    Ok(QuantizeReport {
        input: input.display().to_string(),
        output: output.display().to_string(),
        ftype: name.into(),
        tensors,
        fallbacks,
        file_bytes: g.bytes().len() as u64,
        seconds,
        gate1,
    })
}
