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

use std::collections::HashMap;
use std::path::Path;

use anyhow::{Context, Result};
use gguf::GgmlType;
use llama_runtime::CGguf;

use super::common::{read_stored, AffineGate1Report, Covered};
use super::source_maps::SourceMaps;
use crate::source::{arch, hf::HfDir, mlx};
use crate::verify::outcome::{Blocker, BlockerCode};

/// Codes of each row's little-endian U32 bit stream (MLX packing), `bits` wide.
///
/// Deliberately a second unpacker: `convert::mlx::unpack_codes` is the writer's path, and the
/// verifier never reuses the converter's encoding path, so a bug there cannot hide here.
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

/// The quantization table of config.json; an unreadable one is a blocker (`Err(())`), a
/// folder without one and without packed tensors is `Ok(None)`.
fn quant_config(hf: &HfDir, blockers: &mut Vec<Blocker>) -> Result<Option<mlx::QuantConfig>, ()> {
    let packed = hf.tensors.iter().any(|t| {
        t.dtype == crate::source::hf::SourceDtype::U32
            || t.name.ends_with(".scales")
            || t.name.ends_with(".biases")
    });
    match mlx::QuantConfig::from_config(&hf.config) {
        Ok(Some(q)) => Ok(Some(q)),
        Ok(None) if !packed => Ok(None),
        // Packed tensors without a quantization table: find() reports every module.
        Ok(None) => Ok(Some(mlx::QuantConfig::default())),
        Err(e) => {
            blockers.push(Blocker::new(
                BlockerCode::SourceQuantization,
                "config.json",
                format!("{e:#}"),
            ));
            Err(())
        }
    }
}

/// Every tensor of a quantized module (good or bad) and its GGUF tensor: covered here, not by
/// the plain check.
fn covered(hf: &HfDir, a: arch::Arch) -> Covered {
    let mut cov = Covered::default();
    for (i, t) in hf.tensors.iter().enumerate() {
        let n = &t.name;
        if n.ends_with(".scales")
            || n.ends_with(".biases")
            || t.dtype == crate::source::hf::SourceDtype::U32
        {
            cov.source_indices.insert(i);
        }
    }
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
    cov
}

/// One module as the source holds it, in the file's row order.
struct SourceModule {
    codes: Vec<u8>,
    scales: Vec<f32>,
    biases: Vec<f32>,
    /// The named formula's values (the reference's dequantization).
    values: Vec<f32>,
}

fn source_module(
    src: &mut SourceMaps,
    m: &mlx::AffineTensor,
    a: arch::Arch,
    name: &str,
) -> Result<SourceModule> {
    let words = src.load(m.weight)?.flatten_all()?.to_vec1::<u32>()?;
    let scales = src.load_f32(m.scales)?;
    let biases = src.load_f32(m.biases)?;
    let (bits, group) = (m.affine.bits, m.affine.group);
    let codes = source_codes(&words, m.out, m.inn, bits);
    let values =
        reference::mlx::dequantize_affine(&words, &scales, &biases, m.out, m.inn, bits, group);
    let mut s = SourceModule {
        codes,
        scales,
        biases,
        values,
    };
    if let Some(heads) = crate::source::permute::permute_heads(src.hf(), a, name) {
        // llama.cpp's Q/K row order (spec §4.3), applied to the source's rows.
        let p = |x: &[f32]| crate::source::permute::permute_qk(x, m.out, heads);
        s.codes = crate::source::permute::permute_qk(&s.codes, m.out, heads);
        s.scales = p(&s.scales);
        s.biases = p(&s.biases);
        s.values = p(&s.values);
    }
    Ok(s)
}

/// The file's tensor for module `m`, when it exists with a known type and the module's shape
/// (otherwise a blocker naming it).
fn stored_tensor<'i>(
    infos: &'i HashMap<String, llama_runtime::CTensorInfo>,
    m: &mlx::AffineTensor,
    name: &str,
    blockers: &mut Vec<Blocker>,
) -> Option<(&'i llama_runtime::CTensorInfo, GgmlType)> {
    let Some(info) = infos.get(name) else {
        blockers.push(Blocker::new(
            BlockerCode::TensorMissing,
            name,
            format!("quantized module {} is absent from the file", m.module),
        ));
        return None;
    };
    let Some(ty) = GgmlType::from_id(info.type_id) else {
        blockers.push(Blocker::new(
            BlockerCode::TensorType,
            name,
            format!("type id {}", info.type_id),
        ));
        return None;
    };
    if info.ne[0] != m.inn as i64 || info.ne[1] != m.out as i64 {
        blockers.push(Blocker::new(
            BlockerCode::TensorShape,
            name,
            format!(
                "file ne {:?}, source module [{} × {}]",
                info.ne, m.out, m.inn
            ),
        ));
        return None;
    }
    Some((info, ty))
}

/// The first stored field (code, then d/m per block) that differs from the source's.
fn field_difference(
    dm: &[(u16, u16)],
    got_codes: &[u8],
    src: &SourceModule,
    m: &mlx::AffineTensor,
) -> Option<String> {
    if got_codes != src.codes {
        let i = first_difference(got_codes, &src.codes);
        return Some(format!(
            "code {i} (row {}, column {}) stored {}, source {}",
            i / m.inn,
            i % m.inn,
            got_codes.get(i).copied().unwrap_or(0),
            src.codes.get(i).copied().unwrap_or(0)
        ));
    }
    let gpr = m.inn / m.affine.group;
    for (b, (d, mm)) in dm.iter().enumerate() {
        let i0 = b * 32;
        let g = (i0 / m.inn) * gpr + (i0 % m.inn) / m.affine.group;
        let d_ok = gguf::dequant::f16_to_f32(*d).to_bits() == src.scales[g].to_bits();
        let m_ok = gguf::dequant::f16_to_f32(*mm).to_bits() == src.biases[g].to_bits();
        if !(d_ok && m_ok) {
            return Some(format!(
                "block {b}: d {d:#06x} / m {mm:#06x} vs source scale {} / bias {}",
                src.scales[g], src.biases[g]
            ));
        }
    }
    None
}

/// One module's stored tensor next to its source.
struct ModuleCheck<'a> {
    ty: GgmlType,
    stored: &'a [u8],
    src: &'a SourceModule,
    m: &'a mlx::AffineTensor,
    name: &'a str,
}

impl ModuleCheck<'_> {
    /// A Q4_1/Q5_1 tensor stored exactly: fields, then values under the named formula.
    fn exact(&self, r: &mut AffineGate1Report, blockers: &mut Vec<Blocker>) {
        let (src, name) = (self.src, self.name);
        r.exact_tensors += 1;
        let (dm, got_codes) = stored_fields(self.ty, self.stored);
        match field_difference(&dm, &got_codes, src, self.m) {
            None => r.fields_identical += 1,
            Some(e) => blockers.push(Blocker::new(BlockerCode::AffineFields, name, e)),
        }
        // The named formula on the stored fields.
        let from_file: Vec<f32> = got_codes
            .iter()
            .enumerate()
            .map(|(i, q)| {
                let (d, mm) = dm[i / 32];
                gguf::dequant::f16_to_f32(d) * *q as f32 + gguf::dequant::f16_to_f32(mm)
            })
            .collect();
        if bits_of(&from_file) == bits_of(&src.values) {
            r.values_identical += 1;
        } else {
            let i = first_difference(&bits_of(&from_file), &bits_of(&src.values));
            blockers.push(Blocker::new(
                BlockerCode::AffineValues,
                name,
                format!(
                    "value {i}: file {:e}, source {:e} (named formula, u32 view)",
                    from_file.get(i).copied().unwrap_or(0.0),
                    src.values.get(i).copied().unwrap_or(0.0)
                ),
            ));
        }
    }

    /// A declared fallback (F32/F16/re-quantized): its bytes equal the declared encoding of
    /// the named-formula values, made by ggml's own encoder (`ggml_quantize_chunk`), never by
    /// the converter's `mlx::encode_fallback`.
    fn fallback(&self, r: &mut AffineGate1Report, blockers: &mut Vec<Blocker>) -> Result<()> {
        let (ty, name, values) = (self.ty, self.name, &self.src.values);
        r.fallback_tensors += 1;
        let want: Vec<u8> = if ty == GgmlType::F32 {
            values.iter().flat_map(|v| v.to_le_bytes()).collect()
        } else {
            llama_runtime::ggml_quantize(ty.id(), values, self.m.inn)
                .map_err(|e| anyhow::anyhow!("Gate 1: ggml cannot encode {name} as {ty}: {e}"))?
        };
        if want == self.stored {
            r.fallback_identical += 1;
        } else {
            let i = first_difference(&want, self.stored);
            blockers.push(Blocker::new(BlockerCode::FallbackBits, name, format!("stored {ty} bytes differ from the declared encoding of the source's named-formula values at byte {i}")));
        }
        Ok(())
    }

    /// ggml's own dequantization of what is stored, against the named formula (reported).
    fn to_float(&self, r: &mut AffineGate1Report) -> Result<()> {
        if self.ty == GgmlType::F32 {
            return Ok(());
        }
        let mut ggml_vals = vec![0f32; self.src.values.len()];
        llama_runtime::ggml_to_float(self.ty.id(), self.stored, &mut ggml_vals)
            .map_err(|e| anyhow::anyhow!("Gate 1: ggml to_float of {}: {e}", self.name))?;
        r.ggml_to_float_checked += 1;
        if bits_of(&ggml_vals) == bits_of(&self.src.values) {
            r.ggml_to_float_agrees += 1;
        }
        Ok(())
    }
}

/// Index of the first element where `a` and `b` differ (0 when only the lengths differ).
fn first_difference<T: PartialEq>(a: &[T], b: &[T]) -> usize {
    a.iter().zip(b).position(|(x, y)| x != y).unwrap_or(0)
}

/// Runs the affine Gate 1 over every GGUF tensor whose source is an MLX-quantized module.
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
    let qc = match quant_config(hf, blockers) {
        Ok(None) => return Ok((r, Covered::default())),
        Ok(Some(q)) => Some(q),
        Err(()) => None,
    };
    let (mods, bad) = qc
        .as_ref()
        .map_or_else(Default::default, |q| mlx::find(hf, q));
    for (t, m) in &bad {
        blockers.push(Blocker::new(BlockerCode::SourceQuantization, t, m.clone()));
    }
    let mut cov = covered(hf, a);
    if qc.is_none() {
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
    let mut src_maps = SourceMaps::new(hf);
    for m in &mods {
        let Some(mapped) = arch::map_tensor(a, &hf.tensors[m.weight].name)? else {
            continue;
        };
        let name = mapped.gguf;
        cov.gguf_names.insert(name.clone());
        let Some((info, ty)) = stored_tensor(&infos, m, &name, blockers) else {
            continue;
        };
        *r.by_type.entry(ty.to_string()).or_default() += 1;
        let src = source_module(&mut src_maps, m, a, &name)?;
        let Some(stored) = read_stored(&mut file, gguf_path, info, blockers)? else {
            continue;
        };
        let mc = ModuleCheck {
            ty,
            stored: &stored,
            src: &src,
            m,
            name: &name,
        };
        mc.to_float(&mut r)?;
        match ty {
            GgmlType::Q4_1 | GgmlType::Q5_1 => mc.exact(&mut r, blockers),
            _ => mc.fallback(&mut r, blockers)?,
        }
    }
    Ok((r, cov))
}
