//! Gate 1 for files converted from already-quantized (MLX affine) checkpoints. Declared rule,
//! fixed before measuring: the gate is decided on (a) the stored fields read back through
//! ggml's own GGUF reader — codes, and d/m bit patterns — equal to the source's codes and
//! f16-exact scales/biases, and (b) the values under the named formula
//! `f32(scale) · f32(q) + f32(bias)` (an f32 multiply, then an f32 add) bit-identical (u32 view)
//! between source and file. Whether ggml's `to_float` agrees bit for bit with that formula is
//! measured and reported, not gated (a build contracting to FMA could differ by an ulp).
//! Fallback tensors (F32/F16/re-quantized) must equal the declared encoding of the
//! named-formula values byte for byte. Source values are read with candle's safetensors
//! loader and dequantized by the reference (`reference::mlx`), not by the converter.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

use anyhow::{Context, Result};
use gguf::GgmlType;
use llama_runtime::CGguf;
use serde::{Deserialize, Serialize};

use super::{Blocker, BlockerCode};
use crate::convert::{arch, hf::HfDir, mlx};

/// What the affine Gate 1 measured.
#[derive(Clone, Debug, Serialize, Deserialize, Default)]
pub struct AffineGate1Report {
    /// The declared decision rule.
    pub rule: String,
    /// Quantized source modules found.
    pub modules: usize,
    /// Stored exactly (Q4_1/Q5_1): fields identical / values identical under the named formula.
    pub exact_tensors: usize,
    pub fields_identical: usize,
    pub values_identical: usize,
    /// Fallback tensors and how many equal their declared encoding byte for byte.
    pub fallback_tensors: usize,
    pub fallback_identical: usize,
    /// Tensors where ggml's `to_float` equals the named formula bit for bit / tensors checked.
    pub ggml_to_float_agrees: usize,
    pub ggml_to_float_checked: usize,
    /// Per stored type: tensors.
    pub by_type: BTreeMap<String, usize>,
}

/// GGUF names and source indices the affine check covers (so the plain check skips them).
#[derive(Default)]
pub struct Covered {
    pub gguf_names: HashSet<String>,
    pub source_indices: HashSet<usize>,
}

/// Codes of each row's little-endian U32 bit stream (MLX packing), `bits` wide.
fn source_codes(words: &[u32], rows: usize, inn: usize, bits: u32) -> Vec<u8> {
    let wpr = words.len() / rows.max(1);
    let mask = (1u64 << bits) - 1;
    let mut out = Vec::with_capacity(rows * inn);
    for r in 0..rows {
        for i in 0..inn {
            let k = i * bits as usize;
            let (w, s) = (r * wpr + k / 32, k % 32);
            let mut v = words[w] as u64 >> s;
            if s + bits as usize > 32 {
                v |= (words[w + 1] as u64) << (32 - s);
            }
            out.push((v & mask) as u8);
        }
    }
    out
}

/// Fields of stored Q4_1/Q5_1 blocks (ggml-common.h `block_q4_1` / `block_q5_1`):
/// (d bits, m bits) per block and 32 codes per block.
fn stored_fields(ty: GgmlType, bytes: &[u8]) -> (Vec<(u16, u16)>, Vec<u8>) {
    let bs = ty.type_size() as usize;
    let mut dm = Vec::new();
    let mut codes = Vec::new();
    for b in bytes.chunks_exact(bs) {
        dm.push((
            u16::from_le_bytes([b[0], b[1]]),
            u16::from_le_bytes([b[2], b[3]]),
        ));
        let (qh, qs) = if ty == GgmlType::Q5_1 {
            (u32::from_le_bytes([b[4], b[5], b[6], b[7]]), &b[8..24])
        } else {
            (0, &b[4..20])
        };
        let mut c = [0u8; 32];
        for j in 0..16 {
            c[j] = (qs[j] & 0x0f) | (((qh >> j) & 1) << 4) as u8;
            c[j + 16] = (qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4) as u8;
        }
        codes.extend_from_slice(&c);
    }
    (dm, codes)
}

fn bits_of(x: &[f32]) -> Vec<u32> {
    x.iter().map(|v| v.to_bits()).collect()
}

/// Runs the affine Gate 1 over every GGUF tensor whose source is a quantized module.
/// Source metadata/shape disagreements are blockers naming the tensor.
pub fn check(
    gguf_path: &Path,
    c: &CGguf,
    hf: &HfDir,
    a: arch::Arch,
    blockers: &mut Vec<Blocker>,
) -> Result<(AffineGate1Report, Covered)> {
    let mut r = AffineGate1Report {
        rule: "fields (codes, d/m bits) + named formula f32(scale)·f32(q) + f32(bias), u32 view; ggml to_float agreement reported".into(),
        ..Default::default()
    };
    let mut cov = Covered::default();
    let packed = hf.tensors.iter().any(|t| {
        t.dtype == crate::convert::hf::SourceDtype::U32
            || t.name.ends_with(".scales")
            || t.name.ends_with(".biases")
    });
    let mut config_error = false;
    let qc = match mlx::QuantConfig::from_config(&hf.config) {
        Ok(Some(q)) => q,
        Ok(None) if !packed => return Ok((r, cov)),
        // Packed tensors without a quantization table: find() reports every module.
        Ok(None) => mlx::QuantConfig::default(),
        Err(e) => {
            config_error = true;
            blockers.push(Blocker::new(
                1,
                BlockerCode::SourceQuantization,
                "config.json",
                format!("{e:#}"),
            ));
            mlx::QuantConfig::default()
        }
    };
    let (mods, bad) = if config_error {
        (Vec::new(), Vec::new())
    } else {
        mlx::find(hf, &qc)
    };
    for (t, m) in &bad {
        blockers.push(Blocker::new(1, BlockerCode::SourceQuantization, t, m.clone()));
    }
    // Every tensor of a module (good or bad) is covered here, not by the plain check.
    for t in hf.tensors.iter().enumerate() {
        let n = &t.1.name;
        if n.ends_with(".scales")
            || n.ends_with(".biases")
            || t.1.dtype == crate::convert::hf::SourceDtype::U32
        {
            cov.source_indices.insert(t.0);
        }
    }
    // … and so are their GGUF tensors.
    for &i in &cov.source_indices {
        let n = &hf.tensors[i].name;
        let module = n.rsplit_once('.').map_or(n.as_str(), |x| x.0);
        if let Some(m) = arch::map_tensor(a, &format!("{module}.weight"))
            .ok()
            .flatten()
        {
            cov.gguf_names.insert(m.gguf);
        }
    }
    if config_error {
        return Ok((r, cov));
    }
    r.modules = mods.len();
    let infos: HashMap<String, llama_runtime::CTensorInfo> = c
        .tensors()
        .into_iter()
        .map(|i| (i.name.clone(), i))
        .collect();
    let mut file =
        std::fs::File::open(gguf_path).with_context(|| gguf_path.display().to_string())?;
    let mut maps: BTreeMap<std::path::PathBuf, candle_core::safetensors::MmapedSafetensors> =
        BTreeMap::new();
    for m in &mods {
        let w = &hf.tensors[m.weight];
        let Some(mapped) = arch::map_tensor(a, &w.name)? else {
            continue;
        };
        let name = mapped.gguf;
        cov.gguf_names.insert(name.clone());
        let Some(info) = infos.get(&name) else {
            blockers.push(Blocker::new(
                1,
                BlockerCode::TensorMissing,
                &name,
                format!("quantized module {} is absent from the file", m.module),
            ));
            continue;
        };
        let Some(ty) = GgmlType::from_id(info.type_id) else {
            blockers.push(Blocker::new(
                1,
                BlockerCode::TensorType,
                &name,
                format!("type id {}", info.type_id),
            ));
            continue;
        };
        if info.ne[0] != m.inn as i64 || info.ne[1] != m.out as i64 {
            blockers.push(Blocker::new(
                1,
                BlockerCode::TensorShape,
                &name,
                format!(
                    "file ne {:?}, source module [{} × {}]",
                    info.ne, m.out, m.inn
                ),
            ));
            continue;
        }
        *r.by_type.entry(ty.to_string()).or_default() += 1;
        // Source fields through candle (independent of the converter's reader).
        let load = |maps: &mut BTreeMap<_, candle_core::safetensors::MmapedSafetensors>,
                    ti: usize|
         -> Result<candle_core::Tensor> {
            let t = &hf.tensors[ti];
            let path = hf.file_of(t).to_path_buf();
            if !maps.contains_key(&path) {
                // SAFETY: read-only map of a source nobody writes during verification.
                let st = unsafe { candle_core::safetensors::MmapedSafetensors::new(&path) }
                    .with_context(|| path.display().to_string())?;
                maps.insert(path.clone(), st);
            }
            Ok(maps[&path].load(&t.name, &candle_core::Device::Cpu)?)
        };
        let words = load(&mut maps, m.weight)?.flatten_all()?.to_vec1::<u32>()?;
        let f32v = |t: candle_core::Tensor| -> Result<Vec<f32>> {
            Ok(t.to_dtype(candle_core::DType::F32)?
                .flatten_all()?
                .to_vec1::<f32>()?)
        };
        let mut scales = f32v(load(&mut maps, m.scales)?)?;
        let mut biases = f32v(load(&mut maps, m.biases)?)?;
        let mut codes = source_codes(&words, m.out, m.inn, m.affine.bits);
        let mut values = reference::mlx::dequantize_affine(
            &words,
            &scales,
            &biases,
            m.out,
            m.inn,
            m.affine.bits,
            m.affine.group,
        );
        if let Some(heads) = crate::convert::permute_heads(hf, a, &name) {
            // llama.cpp's Q/K row order (spec §4.3), applied to the source's rows.
            codes = crate::convert::permute_qk(&codes, m.out, heads);
            scales = crate::convert::permute_qk(&scales, m.out, heads);
            biases = crate::convert::permute_qk(&biases, m.out, heads);
            values = crate::convert::permute_qk(&values, m.out, heads);
        }
        let mut stored = vec![0u8; info.size as usize];
        file.seek(SeekFrom::Start(info.file_offset))?;
        file.read_exact(&mut stored)
            .with_context(|| format!("reading {name}"))?;
        // ggml's own dequantization of what is stored, against the named formula.
        if ty != GgmlType::F32 {
            let mut ggml_vals = vec![0f32; m.out * m.inn];
            llama_runtime::ggml_to_float(ty.id(), &stored, &mut ggml_vals)
                .map_err(|e| anyhow::anyhow!("Gate 1: ggml to_float of {name}: {e}"))?;
            r.ggml_to_float_checked += 1;
            if bits_of(&ggml_vals) == bits_of(&values) {
                r.ggml_to_float_agrees += 1;
            }
        }
        match ty {
            GgmlType::Q4_1 | GgmlType::Q5_1 => {
                r.exact_tensors += 1;
                let (dm, got_codes) = stored_fields(ty, &stored);
                let gpr = m.inn / m.affine.group;
                let mut field_err = None;
                if got_codes != codes {
                    let i = got_codes
                        .iter()
                        .zip(&codes)
                        .position(|(x, y)| x != y)
                        .unwrap_or(0);
                    field_err = Some(format!(
                        "code {i} (row {}, column {}) stored {}, source {}",
                        i / m.inn,
                        i % m.inn,
                        got_codes.get(i).copied().unwrap_or(0),
                        codes.get(i).copied().unwrap_or(0)
                    ));
                }
                for (b, (d, mm)) in dm.iter().enumerate() {
                    if field_err.is_some() {
                        break;
                    }
                    let i0 = b * 32;
                    let g = (i0 / m.inn) * gpr + (i0 % m.inn) / m.affine.group;
                    let d_ok = gguf::dequant::f16_to_f32(*d).to_bits() == scales[g].to_bits();
                    let m_ok = gguf::dequant::f16_to_f32(*mm).to_bits() == biases[g].to_bits();
                    if !(d_ok && m_ok) {
                        field_err = Some(format!(
                            "block {b}: d {d:#06x} / m {mm:#06x} vs source scale {} / bias {}",
                            scales[g], biases[g]
                        ));
                    }
                }
                match field_err {
                    None => r.fields_identical += 1,
                    Some(e) => blockers.push(Blocker::new(1, BlockerCode::AffineFields, &name, e)),
                }
                // The named formula on the stored fields.
                let mut from_file = Vec::with_capacity(got_codes.len());
                for (i, q) in got_codes.iter().enumerate() {
                    let (d, mm) = dm[i / 32];
                    from_file.push(
                        gguf::dequant::f16_to_f32(d) * *q as f32 + gguf::dequant::f16_to_f32(mm),
                    );
                }
                if bits_of(&from_file) == bits_of(&values) {
                    r.values_identical += 1;
                } else {
                    let i = from_file
                        .iter()
                        .zip(&values)
                        .position(|(x, y)| x.to_bits() != y.to_bits())
                        .unwrap_or(0);
                    blockers.push(Blocker::new(
                        1,
                        BlockerCode::AffineValues,
                        &name,
                        format!(
                            "value {i}: file {:e}, source {:e} (named formula, u32 view)",
                            from_file.get(i).copied().unwrap_or(0.0),
                            values.get(i).copied().unwrap_or(0.0)
                        ),
                    ));
                }
            }
            other => {
                r.fallback_tensors += 1;
                let (want, _) = mlx::encode_fallback(other, &values, &name)?;
                if want == stored {
                    r.fallback_identical += 1;
                } else {
                    let i = want
                        .iter()
                        .zip(&stored)
                        .position(|(x, y)| x != y)
                        .unwrap_or(0);
                    blockers.push(Blocker::new(1, BlockerCode::FallbackBits, &name, format!("stored {other} bytes differ from the declared encoding of the source's named-formula values at byte {i}")));
                }
            }
        }
    }
    Ok((r, cov))
}
