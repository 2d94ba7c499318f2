//! Already-quantized GPTQ, AWQ (GEMM) and compressed-tensors `pack-quantized` checkpoints
//! (layouts in `docs/gptq-awq-ct-layout.md`). Bits, group size, symmetry, act-order and the
//! zero convention come from config.json's `quantization_config` only; tensor shapes must
//! agree with them and with the model's dimensions, or the module is an error naming it.
//!
//! A module is stored exactly when a ggml block type holds every group's values
//! `scale · (q − zero)`:
//! - 4-bit with zero 8 everywhere → Q4_0 (`d` = scale, codes unchanged; ggml-common.h
//!   `block_q4_0`);
//! - 4-bit → Q4_1 (`d` = scale, `m` = −scale·zero, when `m` is exact in f16; `block_q4_1`);
//! - other 4-bit → Q5_0 (`d` = scale, codes q − zero + 16, value `d·(c − 16)`; `block_q5_0`):
//!   exact for any zero 0..=16, at 5.5 bits per weight instead of 5;
//! - 8-bit with zero 128 everywhere → Q8_0 (`d` = scale, `qs` = q − 128; `block_q8_0`);
//!
//! each needing groups of a multiple of 32 inputs (or per-channel with `in` a multiple of 32),
//! every scale exact in f16 and a trivial act-order (`g_idx[i] == i / group`). Anything else
//! takes the user's fallback (f32 exact, f16, `requant:TYPE`), with the reason per tensor.

use std::collections::{HashMap, HashSet};

use anyhow::{anyhow, bail, Result};
use gguf::GgmlType;
use serde_json::Value;

use super::mlx::{f16_exact, Fallback};
use crate::source::hf::{HfDir, SourceTensor};

/// The packing family.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    /// GPTQ; `v1`: `qzeros` holds zero − 1.
    Gptq { v1: bool },
    /// AutoAWQ GEMM.
    Awq,
    /// compressed-tensors pack-quantized.
    CompressedTensors,
}

/// A checkpoint's quantization, from config.json alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Scheme {
    /// The packing family.
    pub family: Family,
    /// Bits per code (2, 4 or 8; AWQ 4).
    pub bits: u32,
    /// `None`: per-channel (one group per row).
    pub group: Option<usize>,
    /// Symmetric (GPTQ/AWQ `sym`, compressed-tensors `symmetric`).
    pub sym: bool,
    /// GPTQ `desc_act` / compressed-tensors `actorder`.
    pub act_order: bool,
}

fn count(q: &Value, k: &str) -> Result<u64> {
    q[k].as_u64()
        .ok_or_else(|| anyhow!("quantization_config.{k} is missing or not a count"))
}

fn group(v: &Value, k: &str) -> Result<Option<usize>> {
    match v.as_i64() {
        Some(g) if g > 0 => Ok(Some(g as usize)),
        Some(-1) | Some(0) => Ok(None),
        _ => bail!("quantization_config.{k} is missing or invalid"),
    }
}

impl Scheme {
    /// The scheme of a config.json, `None` when its `quantization_config` is none of these
    /// three methods.
    ///
    /// Errors: a field missing or of another kind, bits other than 2/4/8, an AWQ version
    /// other than GEMM, a compressed-tensors format other than pack-quantized or with more
    /// than one weight scheme.
    pub fn from_config(config: &Value) -> Result<Option<Scheme>> {
        let q = &config["quantization_config"];
        let s = match q["quant_method"].as_str() {
            Some("gptq") => Scheme {
                family: Family::Gptq {
                    v1: match q["checkpoint_format"].as_str() {
                        None | Some("gptq") => true,
                        Some("gptq_v2") => false,
                        Some(f) => bail!("GPTQ checkpoint_format {f:?} is not supported"),
                    },
                },
                bits: count(q, "bits")? as u32,
                group: group(&q["group_size"], "group_size")?,
                sym: q["sym"].as_bool().unwrap_or(true),
                act_order: q["desc_act"].as_bool().unwrap_or(false),
            },
            Some("awq") => {
                let v = q["version"].as_str().unwrap_or("gemm");
                if !v.eq_ignore_ascii_case("gemm") {
                    bail!("AWQ version {v:?} is not supported (GEMM only)");
                }
                Scheme {
                    family: Family::Awq,
                    bits: count(q, "bits")? as u32,
                    group: group(&q["group_size"], "group_size")?,
                    sym: q["sym"]
                        .as_bool()
                        .unwrap_or(q["zero_point"].as_bool() == Some(false)),
                    act_order: false,
                }
            }
            Some("compressed-tensors") => compressed_tensors(q)?,
            _ => return Ok(None),
        };
        if !matches!(s.bits, 2 | 4 | 8) || (s.family == Family::Awq && s.bits != 4) {
            bail!("{}-bit {:?} is not supported", s.bits, s.family);
        }
        Ok(Some(s))
    }
}

fn compressed_tensors(q: &Value) -> Result<Scheme> {
    let f = q["format"].as_str().unwrap_or("");
    if f != "pack-quantized" {
        bail!("compressed-tensors format {f:?} is not supported (pack-quantized only)");
    }
    let groups = q["config_groups"]
        .as_object()
        .ok_or_else(|| anyhow!("quantization_config.config_groups is missing"))?;
    let ws: Vec<&Value> = groups.values().map(|g| &g["weights"]).collect();
    let [w] = ws.as_slice() else {
        bail!(
            "config_groups: {} weight schemes (one is supported)",
            ws.len()
        );
    };
    if w["type"].as_str() != Some("int") {
        bail!("config_groups weights.type {} is not \"int\"", w["type"]);
    }
    let group = match w["strategy"].as_str() {
        Some("channel") => None,
        Some("group") => Some(
            group(&w["group_size"], "weights.group_size")?
                .ok_or_else(|| anyhow!("group strategy without a group_size"))?,
        ),
        s => bail!("weights.strategy {s:?} is not supported (group or channel)"),
    };
    Ok(Scheme {
        family: Family::CompressedTensors,
        bits: count(w, "num_bits")? as u32,
        group,
        sym: w["symmetric"].as_bool().unwrap_or(true),
        act_order: !w["actorder"].is_null(),
    })
}

/// One packed module: its tensors (indices into the folder's table) and weight shape.
#[derive(Clone, Debug)]
pub struct Module {
    /// Module path, e.g. `model.layers.0.self_attn.q_proj`.
    pub module: String,
    /// `qweight` / `weight_packed`: where the module sits in checkpoint order.
    pub anchor: usize,
    /// `scales` / `weight_scale`.
    pub scales: usize,
    /// `qzeros` / `weight_zero_point` (absent for symmetric compressed-tensors).
    pub zeros: Option<usize>,
    /// GPTQ `g_idx`, when stored.
    pub g_idx: Option<usize>,
    /// Every other tensor of the module (consumed by it).
    pub parts: Vec<usize>,
    /// Output rows of the weight.
    pub out: usize,
    /// Inputs per row (from config.json's dimensions).
    pub inn: usize,
}

/// What the module's tensors hold.
pub struct Decoded {
    /// `[out, in]` unsigned codes.
    pub codes: Vec<u8>,
    /// `[out, groups]` zeros in the codes' domain.
    pub zeros: Vec<i32>,
    /// `[out, groups]` scales (exact f32 of the stored float).
    pub scales: Vec<f32>,
    /// Group of each input.
    pub group_of: Vec<usize>,
    /// Groups per row.
    pub groups: usize,
}

fn le_words(b: &[u8]) -> Vec<u32> {
    b.chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

fn float_values(hf: &HfDir, t: &SourceTensor) -> std::io::Result<Vec<f32>> {
    let v = hf.to_f32(t)?;
    if v.len() != t.n_elements() {
        return Err(std::io::Error::other(format!(
            "{}: not an F32/F16/BF16 tensor",
            t.name
        )));
    }
    Ok(v)
}

/// A module's sizes.
#[derive(Clone, Copy)]
struct Dims {
    out: usize,
    inn: usize,
    groups: usize,
    bits: usize,
}

/// Field `e` of a dense LSB-first stream of `bits`-wide fields (compressed-tensors packing; a
/// field may straddle two words).
fn dense(words: &[u32], e: usize, bits: usize) -> u32 {
    let (k, sh) = (e * bits / 32, (e * bits % 32) as u32);
    let mut v = words[k] >> sh;
    if sh as usize + bits > 32 {
        v |= words[k + 1] << (32 - sh);
    }
    v & ((1u32 << bits) - 1)
}

/// GPTQ: codes packed along the inputs (`[in·bits/32, out]`), zeros along the outputs.
fn decode_gptq(w: &[u32], zw: &[u32], v1: bool, d: Dims, dec: &mut Decoded) {
    let (per, mask) = (32 / d.bits, (1u32 << d.bits) - 1);
    for (k, word) in w.iter().enumerate() {
        let (r, o) = (k / d.out, k % d.out);
        for j in 0..per {
            dec.codes[o * d.inn + r * per + j] = ((word >> (j * d.bits)) & mask) as u8;
        }
    }
    let zcols = d.out.div_ceil(per);
    for g in 0..d.groups {
        for o in 0..d.out {
            let z = (zw[g * zcols + o / per] >> ((o % per) * d.bits)) & mask;
            dec.zeros[o * d.groups + g] = z as i32 + v1 as i32;
        }
    }
}

/// AWQ GEMM: nibble k of a word holds output 8c + AWQ_ORDER[k], for codes and zeros alike.
fn decode_awq(w: &[u32], zw: &[u32], d: Dims, dec: &mut Decoded) {
    const AWQ_ORDER: [usize; 8] = [0, 2, 4, 6, 1, 3, 5, 7];
    let cols = d.out / 8;
    for (k, word) in w.iter().enumerate() {
        let (i, c) = (k / cols, k % cols);
        for (n, o) in AWQ_ORDER.iter().enumerate() {
            dec.codes[(c * 8 + o) * d.inn + i] = ((word >> (4 * n)) & 0xf) as u8;
        }
    }
    for g in 0..d.groups {
        for c in 0..cols {
            for (n, o) in AWQ_ORDER.iter().enumerate() {
                dec.zeros[(c * 8 + o) * d.groups + g] =
                    ((zw[g * cols + c] >> (4 * n)) & 0xf) as i32;
            }
        }
    }
}

/// compressed-tensors: codes dense along the inputs; zero points (asymmetric only) dense
/// along the outputs, `[ceil(out·bits/32), groups]`; both stored + 2^(bits−1).
fn decode_ct(w: &[u32], zw: &[u32], d: Dims, dec: &mut Decoded) {
    let rw = (d.inn * d.bits).div_ceil(32);
    for o in 0..d.out {
        let row = &w[o * rw..(o + 1) * rw];
        for i in 0..d.inn {
            dec.codes[o * d.inn + i] = dense(row, i, d.bits) as u8;
        }
    }
    if zw.is_empty() {
        dec.zeros.fill(1 << (d.bits - 1));
        return;
    }
    for g in 0..d.groups {
        let col: Vec<u32> = zw.iter().skip(g).step_by(d.groups).copied().collect();
        for o in 0..d.out {
            dec.zeros[o * d.groups + g] = dense(&col, o, d.bits) as i32;
        }
    }
}

/// Reads a module's codes, zeros, scales and groups (shapes were checked by [`find`]).
pub fn decode(hf: &HfDir, m: &Module, s: &Scheme) -> std::io::Result<Decoded> {
    let grp = s.group.unwrap_or(m.inn);
    let d = Dims {
        out: m.out,
        inn: m.inn,
        groups: m.inn.div_ceil(grp),
        bits: s.bits as usize,
    };
    let w = le_words(&hf.bytes(&hf.tensors[m.anchor])?);
    let zw = match m.zeros {
        Some(z) => le_words(&hf.bytes(&hf.tensors[z])?),
        None => Vec::new(),
    };
    let raw_scales = float_values(hf, &hf.tensors[m.scales])?;
    let mut dec = Decoded {
        codes: vec![0u8; d.out * d.inn],
        zeros: vec![0i32; d.out * d.groups],
        scales: raw_scales.clone(),
        group_of: (0..d.inn).map(|i| i / grp).collect(),
        groups: d.groups,
    };
    match s.family {
        Family::Gptq { v1 } => decode_gptq(&w, &zw, v1, d, &mut dec),
        Family::Awq => decode_awq(&w, &zw, d, &mut dec),
        Family::CompressedTensors => decode_ct(&w, &zw, d, &mut dec),
    }
    if s.family != Family::CompressedTensors {
        // GPTQ/AWQ scales are `[groups, out]`; ours are `[out, groups]`.
        for g in 0..d.groups {
            for o in 0..d.out {
                dec.scales[o * d.groups + g] = raw_scales[g * d.out + o];
            }
        }
    }
    if let Some(gi) = m.g_idx {
        let v = le_words(&hf.bytes(&hf.tensors[gi])?);
        for (i, g) in v.iter().enumerate().take(d.inn) {
            if *g as usize >= d.groups {
                return Err(std::io::Error::other(format!(
                    "{}.g_idx[{i}] = {g}: beyond the {} groups",
                    m.module, d.groups
                )));
            }
            dec.group_of[i] = *g as usize;
        }
    }
    Ok(dec)
}

/// The named formula `scale · (q − zero)` in f32, rows in `order`.
pub fn named_formula(d: &Decoded, inn: usize, order: &[usize]) -> Vec<f32> {
    let mut x = Vec::with_capacity(order.len() * inn);
    for &o in order {
        for i in 0..inn {
            let g = o * d.groups + d.group_of[i];
            x.push(d.scales[g] * (d.codes[o * inn + i] as i32 - d.zeros[g]) as f32);
        }
    }
    x
}

/// The ggml type that holds module `m` exactly, with the rule, or `None` with the reason.
pub fn exact_type(m: &Module, s: &Scheme, d: &Decoded) -> (Option<GgmlType>, String) {
    let grp = s.group.unwrap_or(m.inn);
    let what = format!(
        "{}-bit {} {}",
        s.bits,
        if s.group.is_some() {
            format!("group {grp}")
        } else {
            "per-channel".into()
        },
        if s.sym { "sym" } else { "asym" }
    );
    let no = |why: String| (None, format!("{what}: {why}"));
    if !grp.is_multiple_of(32) || !m.inn.is_multiple_of(32) {
        return no(format!(
            "groups of {grp} over {} inputs do not align with 32-weight blocks",
            m.inn
        ));
    }
    if d.group_of.iter().enumerate().any(|(i, g)| *g != i / grp) {
        return no("non-trivial act-order (g_idx is not i / group)".into());
    }
    if let Some(x) = d.scales.iter().find(|x| !f16_exact(**x)) {
        return no(format!("scale {x} is not exact in f16"));
    }
    let all = |z: i32| d.zeros.iter().all(|x| *x == z);
    match s.bits {
        4 if all(8) => (Some(GgmlType::Q4_0), format!("{what} (zero 8) → Q4_0 exact")),
        4 => match d
            .zeros
            .iter()
            .zip(&d.scales)
            .map(|(z, sc)| -sc * *z as f32)
            .find(|m| !f16_exact(*m))
        {
            None => (Some(GgmlType::Q4_1), format!("{what} → Q4_1 exact (m = −scale·zero)")),
            // q − zero + 16 lies in 0..=31 for any 4-bit code and zero 0..=16: Q5_0's value
            // d·(c − 16) is then scale·(q − zero) exactly.
            Some(_) if d.zeros.iter().all(|z| (0..=16).contains(z)) => (
                Some(GgmlType::Q5_0),
                format!("{what} → Q5_0 exact (codes q − zero + 16; Q4_1's m = −scale·zero not exact in f16)"),
            ),
            Some(m) => no(format!("m = −scale·zero = {m} is not exact in f16")),
        },
        8 if all(128) => (Some(GgmlType::Q8_0), format!("{what} (zero 128) → Q8_0 exact")),
        8 => no("8-bit with a zero other than 128 has no exact ggml type".into()),
        b => no(format!("{b}-bit codes have no exact ggml type")),
    }
}

/// Encodes module rows in `order` as Q4_0 / Q4_1 / Q5_0 / Q8_0 blocks (the type from
/// [`exact_type`]; `block_q5_0`: d f16, qh = bit 4 of each code, qs = low nibbles).
pub fn encode_exact(ty: GgmlType, d: &Decoded, inn: usize, order: &[usize]) -> Vec<u8> {
    let f16 = |v: f32| gguf::quant::f32_to_f16_bits(v).to_le_bytes();
    let mut out = Vec::with_capacity(order.len() * inn / 32 * ty.type_size() as usize);
    for &o in order {
        for b in 0..inn / 32 {
            let g = o * d.groups + d.group_of[b * 32];
            let q = &d.codes[o * inn + b * 32..o * inn + b * 32 + 32];
            out.extend_from_slice(&f16(d.scales[g]));
            match ty {
                GgmlType::Q8_0 => out.extend(q.iter().map(|c| (*c as i32 - 128) as i8 as u8)),
                GgmlType::Q5_0 => {
                    let c: Vec<u8> = q
                        .iter()
                        .map(|c| (*c as i32 - d.zeros[g] + 16) as u8)
                        .collect();
                    let qh = (0..32).fold(0u32, |h, j| h | (((c[j] >> 4) & 1) as u32) << j);
                    out.extend_from_slice(&qh.to_le_bytes());
                    out.extend((0..16).map(|j| (c[j] & 0x0f) | ((c[j + 16] & 0x0f) << 4)));
                }
                _ => {
                    if ty == GgmlType::Q4_1 {
                        out.extend_from_slice(&f16(-d.scales[g] * d.zeros[g] as f32));
                    }
                    out.extend((0..16).map(|j| (q[j] & 0x0f) | (q[j + 16] << 4)));
                }
            }
        }
    }
    out
}

/// Per-module decisions of a packed checkpoint.
#[derive(Default)]
pub struct PackedPlan {
    /// The checkpoint's scheme.
    pub scheme: Option<Scheme>,
    /// Anchor tensor index → (module, stored type, rule).
    pub by_anchor: HashMap<usize, (Module, GgmlType, String)>,
    /// The other tensors of every module.
    pub skip: HashSet<usize>,
}

/// Every packed module of the folder, shapes checked against the scheme and the model.
///
/// Errors: a module whose tensors are missing or disagree with the scheme (named).
pub fn find(hf: &HfDir, s: &Scheme) -> Result<Vec<Module>> {
    let by_name: HashMap<&str, usize> = hf
        .tensors
        .iter()
        .enumerate()
        .map(|(i, t)| (t.name.as_str(), i))
        .collect();
    let anchor = match s.family {
        Family::CompressedTensors => ".weight_packed",
        _ => ".qweight",
    };
    let mut mods = Vec::new();
    for (i, t) in hf.tensors.iter().enumerate() {
        let Some(module) = t.name.strip_suffix(anchor) else {
            continue;
        };
        mods.push(module_of(hf, &by_name, s, module, i)?);
    }
    Ok(mods)
}

fn module_of(
    hf: &HfDir,
    by_name: &HashMap<&str, usize>,
    s: &Scheme,
    module: &str,
    anchor: usize,
) -> Result<Module> {
    let get = |suffix: &str| by_name.get(format!("{module}.{suffix}").as_str()).copied();
    let need = |suffix: &str| {
        get(suffix)
            .ok_or_else(|| anyhow!("{}: tensor {module}.{suffix} is missing", hf.dir.display()))
    };
    let ct = s.family == Family::CompressedTensors;
    let scales = need(if ct { "weight_scale" } else { "scales" })?;
    let zeros = match (ct, s.sym) {
        (true, true) => match get("weight_zero_point") {
            Some(z) => bail!(
                "{}: tensor {}: a zero point, but config.json declares the weights symmetric",
                hf.dir.display(),
                hf.tensors[z].name
            ),
            None => None,
        },
        (true, false) => Some(need("weight_zero_point")?),
        (false, _) => Some(need("qzeros")?),
    };
    let g_idx = if ct { None } else { get("g_idx") };
    let inn = crate::source::mlx::expected_inputs(hf, module).ok_or_else(|| {
        anyhow!(
            "{}: module {module}: its input size is not known from config.json",
            hf.dir.display()
        )
    })?;
    // The output count from the codes (the tensor the module is named by), so that a
    // disagreeing scales or zeros tensor is the one named.
    let codes = &hf.tensors[anchor].shape;
    let out = match s.family {
        Family::Gptq { .. } => codes.get(1).copied().unwrap_or(0),
        Family::Awq => codes.get(1).map_or(0, |c| c * 8),
        Family::CompressedTensors => codes.first().copied().unwrap_or(0),
    };
    let (want_w, want_s, want_z) = implied_shapes(s, out, inn);
    let check = |i: usize, want: &[usize]| {
        let t = &hf.tensors[i];
        if t.shape != want {
            bail!(
                "{}: tensor {}: shape {:?}, but {}-bit {} with {} inputs and {out} outputs implies {want:?}",
                hf.dir.display(),
                t.name,
                t.shape,
                s.bits,
                s.group.map_or("per-channel".to_string(), |g| format!("group {g}")),
                inn
            );
        }
        Ok(())
    };
    check(anchor, &want_w)?;
    check(scales, &want_s)?;
    if let Some(z) = zeros {
        check(z, &want_z)?;
    }
    if s.act_order && g_idx.is_none() && !ct {
        bail!(
            "{}: {module}: desc_act is set but {module}.g_idx is missing",
            hf.dir.display()
        );
    }
    if let Some(gi) = g_idx {
        check(gi, &[inn])?;
    }
    let mut parts = vec![scales];
    parts.extend(zeros);
    parts.extend(g_idx);
    parts.extend(get("weight_shape"));
    Ok(Module {
        module: module.to_string(),
        anchor,
        scales,
        zeros,
        g_idx,
        parts,
        out,
        inn,
    })
}

/// The shapes `(codes, scales, zeros)` that `s` implies for a weight of `out × inn`
/// (`docs/gptq-awq-ct-layout.md`).
fn implied_shapes(s: &Scheme, out: usize, inn: usize) -> (Vec<usize>, Vec<usize>, Vec<usize>) {
    let bits = s.bits as usize;
    let groups = inn.div_ceil(s.group.unwrap_or(inn));
    let per = 32 / bits;
    match s.family {
        Family::Gptq { .. } => (
            vec![inn / per, out],
            vec![groups, out],
            vec![groups, out.div_ceil(per)],
        ),
        Family::Awq => (vec![inn, out / 8], vec![groups, out], vec![groups, out / 8]),
        Family::CompressedTensors => (
            vec![out, (inn * bits).div_ceil(32)],
            vec![out, groups],
            vec![(out * bits).div_ceil(32), groups],
        ),
    }
}

/// Decides each module's stored type.
///
/// Errors: as [`find`]; modules no block type holds exactly when no fallback was chosen (every
/// one named with its reason).
pub fn plan(hf: &HfDir, s: &Scheme, fallback: Option<Fallback>) -> Result<PackedPlan> {
    let mut p = PackedPlan {
        scheme: Some(*s),
        ..PackedPlan::default()
    };
    let mut need = Vec::new();
    for m in find(hf, s)? {
        let d = decode(hf, &m, s)?;
        let (ty, rule) = match exact_type(&m, s, &d) {
            (Some(t), rule) => (t, rule),
            (None, rule) => match super::mlx::fallback_type(rule, fallback, m.inn) {
                Ok(x) => x,
                Err(why) => {
                    need.push(format!("{}.weight ({why})", m.module));
                    continue;
                }
            },
        };
        p.skip.extend(m.parts.iter().copied());
        p.by_anchor.insert(m.anchor, (m, ty, rule));
    }
    super::mlx::no_exact_type(hf, &need)?;
    Ok(p)
}
