//! Gate 1 for files converted from GPTQ, AWQ and compressed-tensors checkpoints. Declared rule,
//! fixed before measuring:
//! - (a) for a tensor stored as Q4_0 / Q4_1 / Q5_0 / Q8_0, its fields read back from the file
//!   (`d`, `m` bit patterns and codes) equal what the source's codes, zeros and f16-exact
//!   scales imply (Q5_0: codes q − zero + 16);
//! - (b) ggml's own `to_float` of the stored bytes is bit-identical (u32 view) to the named
//!   formula `scale · (q − zero)` of the source, rows in llama's order;
//! - a fallback tensor (F32, F16, or re-quantized) equals the declared encoding of those values
//!   byte for byte.
//!
//! The source is unpacked by the reference (`reference::packed`), not by the converter.

use std::collections::HashMap;
use std::path::Path;

use anyhow::{Context, Result};
use gguf::GgmlType;
use llama_runtime::{CGguf, CTensorInfo};
use reference::packed::{PackFormat, PackScheme, Unpacked};

use super::common::{read_stored, AffineGate1Report, Covered, PARTS};
use crate::source::{arch, hf::HfDir};
use crate::verify::outcome::{Blocker, BlockerCode};

fn f16(v: f32) -> u16 {
    gguf::quant::f32_to_f16_bits(v)
}

/// The fields a block of `ty` must hold for source rows in `order` (d, m or 0, 32 codes as
/// the block stores them: unsigned for Q4_0/Q4_1, two's complement bytes for Q8_0).
fn expected_fields(ty: GgmlType, u: &Unpacked, order: &[usize]) -> Vec<(u16, u16, [u8; 32])> {
    let mut out = Vec::new();
    for &o in order {
        for b in 0..u.inn / 32 {
            let g = o * u.groups + u.group_of[b * 32];
            let m = if ty == GgmlType::Q4_1 {
                f16(-u.scales[g] * u.zeros[g] as f32)
            } else {
                0
            };
            let mut q = [0u8; 32];
            for (j, c) in q.iter_mut().enumerate() {
                let code = u.codes[o * u.inn + b * 32 + j] as i32;
                *c = match ty {
                    GgmlType::Q8_0 => (code - 128) as i8 as u8,
                    // Q5_0 stores q − zero + 16 (value d·(c − 16)).
                    GgmlType::Q5_0 => (code - u.zeros[g] + 16) as u8,
                    _ => code as u8,
                };
            }
            out.push((f16(u.scales[g]), m, q));
        }
    }
    out
}

/// The fields of stored blocks of `ty` (Q4_0, Q4_1, Q5_0 or Q8_0), as [`expected_fields`]
/// lists them.
fn stored_fields(ty: GgmlType, bytes: &[u8]) -> Vec<(u16, u16, [u8; 32])> {
    let le = |b: &[u8]| u16::from_le_bytes([b[0], b[1]]);
    bytes
        .chunks_exact(ty.type_size() as usize)
        .map(|b| {
            let mut q = [0u8; 32];
            let (m, qs) = match ty {
                GgmlType::Q8_0 => {
                    q.copy_from_slice(&b[2..34]);
                    return (le(b), 0, q);
                }
                GgmlType::Q4_1 => (le(&b[2..4]), &b[4..20]),
                _ => (0, &b[2..18]),
            };
            if ty == GgmlType::Q5_0 {
                let qh = u32::from_le_bytes([b[2], b[3], b[4], b[5]]);
                for j in 0..16 {
                    q[j] = (b[6 + j] & 0x0f) | (((qh >> j) & 1) << 4) as u8;
                    q[j + 16] = (b[6 + j] >> 4) | (((qh >> (j + 16)) & 1) << 4) as u8;
                }
                return (le(b), 0, q);
            }
            for j in 0..16 {
                q[j] = qs[j] & 0x0f;
                q[j + 16] = qs[j] >> 4;
            }
            (le(b), m, q)
        })
        .collect()
}

/// The packing scheme of the folder, `None` for other folders; an unreadable one is a blocker
/// (`Some(None)`).
fn scheme_of(hf: &HfDir, blockers: &mut Vec<Blocker>) -> Option<Option<PackScheme>> {
    match reference::packed::scheme(&hf.config, &hf.dir.join("config.json")) {
        Ok(None) => None,
        Ok(Some(s)) => Some(Some(s)),
        Err(e) => {
            blockers.push(Blocker::new(
                BlockerCode::SourceQuantization,
                "config.json",
                e.to_string(),
            ));
            Some(None)
        }
    }
}

/// Every source index a packed module consumes, and the GGUF names of the modules.
fn covered(hf: &HfDir, a: arch::Arch, anchor: &str) -> Covered {
    let mut cov = Covered::default();
    for (i, t) in hf.tensors.iter().enumerate() {
        let Some((module, part)) = t.name.rsplit_once('.') else {
            continue;
        };
        if PARTS.contains(&part) {
            cov.source_indices.insert(i);
        }
        if part == anchor {
            if let Ok(Some(m)) = arch::map_tensor(a, &format!("{module}.weight")) {
                cov.gguf_names.insert(m.gguf);
            }
        }
    }
    cov
}

/// Runs the packed Gate 1, or returns `None` when the folder is not GPTQ / AWQ /
/// compressed-tensors.
pub fn check(
    gguf_path: &Path,
    c: &CGguf,
    hf: &HfDir,
    a: arch::Arch,
    blockers: &mut Vec<Blocker>,
) -> Result<Option<(AffineGate1Report, Covered)>> {
    let Some(scheme) = scheme_of(hf, blockers) else {
        return Ok(None);
    };
    let anchor = match scheme.map(|s| s.format) {
        Some(PackFormat::PackQuantized) => "weight_packed",
        _ => "qweight",
    };
    let mut r = AffineGate1Report {
        rule: "fields (codes, d/m bits) + ggml to_float ≡ named formula scale·(q − zero), u32 view; fallbacks byte-identical to their declared encoding".into(),
        ..Default::default()
    };
    let cov = covered(hf, a, anchor);
    let Some(scheme) = scheme else {
        return Ok(Some((r, cov)));
    };
    let infos: HashMap<String, CTensorInfo> = c
        .tensors()
        .into_iter()
        .map(|i| (i.name.clone(), i))
        .collect();
    let w = reference::weights::MmapWeights::open(&reference::safetensors_files(&hf.dir)?)?;
    let mut file =
        std::fs::File::open(gguf_path).with_context(|| gguf_path.display().to_string())?;
    for t in &hf.tensors {
        let Some(module) = t.name.strip_suffix(&format!(".{anchor}")) else {
            continue;
        };
        r.modules += 1;
        let Ok(Some(m)) = arch::map_tensor(a, &format!("{module}.weight")) else {
            continue;
        };
        let Some(info) = infos.get(&m.gguf) else {
            blockers.push(Blocker::new(
                BlockerCode::TensorMissing,
                &m.gguf,
                format!("the source's quantized module {module} is absent from the file"),
            ));
            continue;
        };
        let mc = Module {
            name: &m.gguf,
            module,
            info,
        };
        mc.check(&w, &scheme, hf, a, (&mut file, gguf_path), &mut r, blockers)?;
    }
    Ok(Some((r, cov)))
}

struct Module<'a> {
    name: &'a str,
    module: &'a str,
    info: &'a CTensorInfo,
}

impl Module<'_> {
    fn blocker(&self, code: BlockerCode, detail: String, blockers: &mut Vec<Blocker>) {
        blockers.push(Blocker::new(code, self.name, detail));
    }

    #[allow(clippy::too_many_arguments)]
    fn check(
        &self,
        w: &reference::weights::MmapWeights,
        s: &PackScheme,
        hf: &HfDir,
        a: arch::Arch,
        (file, path): (&mut std::fs::File, &Path),
        r: &mut AffineGate1Report,
        blockers: &mut Vec<Blocker>,
    ) -> Result<()> {
        let (inn, out) = (self.info.ne[0] as usize, self.info.ne[1].max(1) as usize);
        let Some(ty) = GgmlType::from_id(self.info.type_id) else {
            self.blocker(
                BlockerCode::TensorType,
                format!("type id {}", self.info.type_id),
                blockers,
            );
            return Ok(());
        };
        *r.by_type.entry(ty.to_string()).or_default() += 1;
        let u = match reference::packed::unpack(w, self.module, s, out, inn) {
            Ok(u) => u,
            Err(e) => {
                self.blocker(BlockerCode::SourceQuantization, e.to_string(), blockers);
                return Ok(());
            }
        };
        let heads = crate::source::permute::permute_heads(hf, a, self.name);
        let order = crate::source::permute::row_order(out, heads);
        let values: Vec<f32> = {
            let v = u.dequantize();
            order
                .iter()
                .flat_map(|&o| v[o * inn..(o + 1) * inn].to_vec())
                .collect()
        };
        let Some(stored) = read_stored(file, path, self.info, blockers)? else {
            return Ok(());
        };
        if matches!(
            ty,
            GgmlType::Q4_0 | GgmlType::Q4_1 | GgmlType::Q5_0 | GgmlType::Q8_0
        ) {
            let mut back = vec![0f32; values.len()];
            llama_runtime::ggml_to_float(ty.id(), &stored, &mut back)
                .map_err(|e| anyhow::anyhow!("Gate 1: ggml to_float of {}: {e}", self.name))?;
            r.ggml_to_float_checked += 1;
            if back
                .iter()
                .zip(&values)
                .all(|(x, y)| x.to_bits() == y.to_bits())
            {
                r.ggml_to_float_agrees += 1;
                r.exact_tensors += 1;
                r.values_identical += 1;
                if expected_fields(ty, &u, &order) == stored_fields(ty, &stored) {
                    r.fields_identical += 1;
                } else {
                    self.blocker(BlockerCode::TensorBits, format!("{ty}: values equal the named formula, but the d/m/code fields differ from the source's"), blockers);
                }
                return Ok(());
            }
        }
        r.fallback_tensors += 1;
        let expected = match ty {
            GgmlType::F32 => values.iter().flat_map(|v| v.to_le_bytes()).collect(),
            GgmlType::F16 => {
                let mut b = Vec::new();
                gguf::quant::encode_f16(&values, &mut b);
                b
            }
            t => llama_runtime::ggml_quantize(t.id(), &values, inn).map_err(|e| {
                anyhow::anyhow!("Gate 1: ggml cannot encode {} as {t}: {e}", self.name)
            })?,
        };
        if expected == stored {
            r.fallback_identical += 1;
        } else {
            let at = expected
                .iter()
                .zip(&stored)
                .position(|(x, y)| x != y)
                .unwrap_or(0);
            self.blocker(
                BlockerCode::TensorBits,
                format!("stored {ty} is neither the named formula scale·(q − zero) of {} nor its {ty} encoding (first difference at byte {at})", self.module),
                blockers,
            );
        }
        Ok(())
    }
}
