//! How an MLX checkpoint is written: each quantized module's stored type (exact repack, or
//! a declared fallback), the repack itself, the fallback encodings and the Q/K row order.

use std::collections::HashMap;

use anyhow::{bail, Result};
use gguf::GgmlType;
use serde::Serialize;

use super::*;
use crate::source::hf::HfDir;
use crate::source::mlx::{find, QuantConfig};

/// How every quantized module will be written.
#[derive(Clone, Debug, Default)]
pub struct MlxPlan {
    /// `.weight` tensor index → (module, stored type, rule text).
    pub by_weight: HashMap<usize, (AffineTensor, GgmlType, String)>,
    /// `.scales` / `.biases` indices (consumed by their module).
    pub skip: std::collections::HashSet<usize>,
}

/// Decides each quantized module's stored type from its data (f16-exactness of every scale
/// and bias) and the metadata's bits/group.
///
/// Errors: inconsistent metadata/shapes (every tensor named), or tensors no block type holds
/// exactly when no fallback was chosen (every tensor named with its rule).
pub fn plan(hf: &HfDir, qc: &QuantConfig, fallback: Option<Fallback>) -> Result<MlxPlan> {
    let (mods, blockers) = find(hf, qc);
    if !blockers.is_empty() {
        bail!(
            "{}: quantization metadata disagrees with the tensors ({} blocker(s)): {}",
            hf.dir.display(),
            blockers.len(),
            blockers
                .iter()
                .map(|(t, m)| format!("{t}: {m}"))
                .collect::<Vec<_>>()
                .join("; ")
        );
    }
    let mut p = MlxPlan::default();
    let mut need = Vec::new();
    for m in mods {
        let mut nonfinite = None;
        let exact = [m.scales, m.biases].iter().all(|&i| {
            let v = hf.to_f32(&hf.tensors[i]).unwrap_or_default();
            if let Some(x) = v.iter().find(|x| !x.is_finite()) {
                nonfinite = Some((hf.tensors[i].name.clone(), *x));
            }
            !v.is_empty() && v.iter().all(|x| f16_exact(*x))
        });
        if let Some((name, x)) = nonfinite {
            bail!(
                "{}: tensor {name} holds {x}; a scale or bias must be finite",
                hf.dir.display()
            );
        }
        let (ty, rule) = match exact_type(m.affine, exact) {
            (Some(t), rule) => (t, rule),
            (None, rule) => match fallback_type(rule, fallback, m.inn) {
                Ok(x) => x,
                Err(why) => {
                    need.push(format!("{}.weight ({why})", m.module));
                    continue;
                }
            },
        };
        p.skip.insert(m.scales);
        p.skip.insert(m.biases);
        p.by_weight.insert(m.weight, (m, ty, rule));
    }
    no_exact_type(hf, &need)?;
    Ok(p)
}

/// The error listing every module (`need`: "NAME.weight (reason)") that no ggml block type
/// holds exactly and no fallback covers; `Ok` when there is none.
pub fn no_exact_type(hf: &HfDir, need: &[String]) -> Result<()> {
    if need.is_empty() {
        return Ok(());
    }
    bail!(
        "{}: {} tensor(s) cannot be stored exactly by any ggml block type: {}. Choose --fallback f32 (exact, larger), --fallback f16 (max error reported) or --fallback requant:TYPE (error stats reported)",
        hf.dir.display(),
        need.len(),
        need.join(", ")
    )
}

/// The stored type of a module no block type holds exactly, under the user's `fallback`, with
/// the rule extended by it; `Err` with the reason when there is none (no fallback chosen, or a
/// re-quantization whose block does not divide the `inn` inputs of a row).
pub fn fallback_type(
    rule: String,
    fallback: Option<Fallback>,
    inn: usize,
) -> std::result::Result<(GgmlType, String), String> {
    match fallback {
        Some(Fallback::F32) => Ok((GgmlType::F32, format!("{rule} → fallback F32 (exact)"))),
        Some(Fallback::F16) => Ok((
            GgmlType::F16,
            format!("{rule} → fallback F16 (lossy, error reported)"),
        )),
        Some(Fallback::Requant(t)) if !inn.is_multiple_of(t.block_size() as usize) => Err(format!(
            "{rule}; {inn} inputs not a multiple of {t}'s {}",
            t.block_size()
        )),
        Some(Fallback::Requant(t)) => Ok((
            t,
            format!("{rule} → fallback re-quantized to {t} (lossy, error reported)"),
        )),
        None => Err(rule),
    }
}

/// `general.file_type` of a file written from an MLX, GPTQ, AWQ or compressed-tensors
/// checkpoint: llama.h `LLAMA_FTYPE_MOSTLY_Q4_1` (3) if any tensor is Q4_1, else `MOSTLY_Q5_1`
/// (9), `MOSTLY_Q5_0` (8), `MOSTLY_Q4_0` (2), `MOSTLY_Q8_0` (7) in that order; `None` otherwise.
pub fn file_type(types: &[GgmlType]) -> Option<u32> {
    [
        GgmlType::Q4_1,
        GgmlType::Q5_1,
        GgmlType::Q5_0,
        GgmlType::Q4_0,
        GgmlType::Q8_0,
    ]
    .into_iter()
    .find(|t| types.contains(t))
    .and_then(gguf::LlamaFtype::mostly)
    .map(|f| f.id)
}

/// Error of a lossy fallback: max |stored − named formula| and RMS over the tensor.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct FallbackError {
    pub tensor: String,
    pub stored_as: String,
    pub max_abs: f64,
    pub rms: f64,
}

/// Encodes the named-formula values `x` (`inn` per row) as `ty` and returns the bytes with the
/// error stats of a lossy type (F16 or a re-quantization; exact F32 gives 0).
pub fn encode_fallback(
    ty: GgmlType,
    x: &[f32],
    name: &str,
) -> std::io::Result<(Vec<u8>, FallbackError)> {
    let mut buf = Vec::new();
    match ty {
        GgmlType::F32 => buf.extend(x.iter().flat_map(|v| v.to_le_bytes())),
        GgmlType::F16 => gguf::quant::encode_f16(x, &mut buf),
        t => gguf::quant_ref::quantize_ref(t, x, &mut buf)
            .map_err(|e| std::io::Error::other(format!("{name}: {e}")))?,
    }
    let back = gguf::dequant::dequantize_to_vec(ty, &buf, x.len())
        .map_err(|e| std::io::Error::other(format!("{name}: {e}")))?;
    let (mut max, mut sq) = (0f64, 0f64);
    for (a, b) in x.iter().zip(&back) {
        let d = (*a as f64 - *b as f64).abs();
        max = max.max(d);
        sq += d * d;
    }
    Ok((
        buf,
        FallbackError {
            tensor: name.into(),
            stored_as: ty.to_string(),
            max_abs: max,
            rms: (sq / x.len().max(1) as f64).sqrt(),
        },
    ))
}

/// [`encode_exact`] straight from the packed words, rows taken in `order` (the fast path of
/// `convert`: no intermediate code array; 4-bit blocks are re-nibbled word by word).
#[allow(clippy::too_many_arguments)]
pub fn repack_exact(
    ty: GgmlType,
    words: &[u32],
    bits: u32,
    scales: &[f32],
    biases: &[f32],
    inn: usize,
    group: usize,
    order: &[usize],
) -> Vec<u8> {
    let wpr = inn * bits as usize / 32;
    let gpr = inn / group;
    let bpr = inn / 32;
    let mut out = Vec::with_capacity(order.len() * bpr * ty.type_size() as usize);
    let mut codes = [0u8; 32];
    for &r in order {
        let row = &words[r * wpr..(r + 1) * wpr];
        for b in 0..bpr {
            let g = r * gpr + b * 32 / group;
            out.extend_from_slice(&gguf::quant::f32_to_f16_bits(scales[g]).to_le_bytes());
            out.extend_from_slice(&gguf::quant::f32_to_f16_bits(biases[g]).to_le_bytes());
            if bits == 4 && ty == GgmlType::Q4_1 {
                // Codes 0–7 in word 0, 8–15 in word 1, 16–23 in word 2, 24–31 in word 3.
                // qs[j] = code j | code j+16 << 4: spread each word's 8 nibbles into the low
                // halves of 8 bytes, then merge words 0/2 and 1/3.
                let w = &row[b * 4..b * 4 + 4];
                let spread = |x: u32| {
                    let mut x = x as u64;
                    x = (x | (x << 16)) & 0x0000_ffff_0000_ffff;
                    x = (x | (x << 8)) & 0x00ff_00ff_00ff_00ff;
                    (x | (x << 4)) & 0x0f0f_0f0f_0f0f_0f0f
                };
                out.extend_from_slice(&(spread(w[0]) | (spread(w[2]) << 4)).to_le_bytes());
                out.extend_from_slice(&(spread(w[1]) | (spread(w[3]) << 4)).to_le_bytes());
                continue;
            }
            let mask = (1u64 << bits) - 1;
            for (i, c) in codes.iter_mut().enumerate() {
                let bit = (b * 32 + i) * bits as usize;
                let (k, s) = (bit / 32, bit % 32);
                let mut v = (row[k] as u64) >> s;
                if s + bits as usize > 32 {
                    v |= (row[k + 1] as u64) << (32 - s);
                }
                *c = (v & mask) as u8;
            }
            if ty == GgmlType::Q5_1 {
                let qh = codes
                    .iter()
                    .enumerate()
                    .fold(0u32, |h, (j, &c)| h | (((c as u32 >> 4) & 1) << j));
                out.extend_from_slice(&qh.to_le_bytes());
            }
            out.extend((0..16).map(|j| (codes[j] & 0x0f) | ((codes[j + 16] & 0x0f) << 4)));
        }
    }
    out
}
