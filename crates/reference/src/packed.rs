//! GPTQ, AWQ (GEMM) and compressed-tensors `pack-quantized` checkpoints, unpacked by the
//! reference: written from the layouts in `docs/gptq-awq-ct-layout.md`, independent of the
//! converter's reader. Bits, group size, symmetry and the zero-point convention come from
//! config.json's `quantization_config` only; every tensor shape is checked against them.
//!
//! A module `P` unpacks to unsigned codes `q[o, i]`, a zero `z[o, g]` in the same unsigned
//! domain, and a scale `s[o, g]`; its value is the named formula `w = s · (q − z)` in f32 (the
//! integer difference is exact, so the product is rounded once).

use std::path::Path;

use safetensors::tensor::Dtype;
use serde_json::Value;

use crate::weights::MmapWeights;
use crate::{RefError, Result};

/// The packing of a checkpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PackFormat {
    /// GPTQ; `v1` stores `zero − 1` in `qzeros` (`checkpoint_format` "gptq" or absent), v2 the
    /// zero itself ("gptq_v2").
    Gptq { v1: bool },
    /// AutoAWQ GEMM: packed along the output dim in AWQ's interleaved nibble order.
    AwqGemm,
    /// compressed-tensors `pack-quantized`.
    PackQuantized,
}

/// How every quantized module of a checkpoint is stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PackScheme {
    /// The packing.
    pub format: PackFormat,
    /// Bits per code.
    pub bits: u32,
    /// Inputs per group; `None`: one group per output row (per-channel).
    pub group: Option<usize>,
    /// Symmetric: no stored zero point (compressed-tensors) or a single zero (GPTQ/AWQ).
    pub sym: bool,
    /// GPTQ `desc_act` (act-order): `g_idx` may be any permutation of groups.
    pub desc_act: bool,
}

fn bad(path: &Path, detail: impl Into<String>) -> RefError {
    RefError::File {
        path: path.into(),
        detail: detail.into(),
    }
}

fn u64_field(q: &Value, key: &str, path: &Path) -> Result<u64> {
    q.get(key).and_then(Value::as_u64).ok_or_else(|| {
        bad(
            path,
            format!("quantization_config.{key}: missing or not a count"),
        )
    })
}

/// The group size field: a positive count, or −1 / 0 for per-channel.
fn group_field(v: Option<&Value>, key: &str, path: &Path) -> Result<Option<usize>> {
    match v.and_then(Value::as_i64) {
        Some(g) if g > 0 => Ok(Some(g as usize)),
        Some(-1) | Some(0) => Ok(None),
        _ => Err(bad(
            path,
            format!("quantization_config.{key}: missing or invalid"),
        )),
    }
}

/// The scheme of `config` (config.json at `path`), or `None` when it has no GPTQ, AWQ or
/// compressed-tensors `quantization_config`.
///
/// Errors: a `quant_method` of these three with missing or contradictory fields, or a
/// compressed-tensors config with more than one weight scheme or another format.
pub fn scheme(config: &Value, path: &Path) -> Result<Option<PackScheme>> {
    let Some(q) = config.get("quantization_config") else {
        return Ok(None);
    };
    let method = q.get("quant_method").and_then(Value::as_str).unwrap_or("");
    let s = match method {
        "gptq" => {
            let fmt = q.get("checkpoint_format").and_then(Value::as_str);
            let v1 = match fmt {
                None | Some("gptq") => true,
                Some("gptq_v2") => false,
                Some(f) => return Err(bad(path, format!("GPTQ checkpoint_format {f:?}"))),
            };
            PackScheme {
                format: PackFormat::Gptq { v1 },
                bits: u64_field(q, "bits", path)? as u32,
                group: group_field(q.get("group_size"), "group_size", path)?,
                sym: q.get("sym").and_then(Value::as_bool).unwrap_or(true),
                desc_act: q.get("desc_act").and_then(Value::as_bool).unwrap_or(false),
            }
        }
        "awq" => {
            let version = q.get("version").and_then(Value::as_str).unwrap_or("gemm");
            if !version.eq_ignore_ascii_case("gemm") {
                return Err(bad(path, format!("AWQ version {version:?} (only GEMM)")));
            }
            let zero_point = q.get("zero_point").and_then(Value::as_bool);
            PackScheme {
                format: PackFormat::AwqGemm,
                bits: u64_field(q, "bits", path)? as u32,
                group: group_field(q.get("group_size"), "group_size", path)?,
                sym: q
                    .get("sym")
                    .and_then(Value::as_bool)
                    .unwrap_or(zero_point == Some(false)),
                desc_act: false,
            }
        }
        "compressed-tensors" => compressed_tensors(q, path)?,
        _ => return Ok(None),
    };
    if !matches!(s.bits, 2 | 4 | 8) {
        return Err(bad(path, format!("{} bits (2, 4 or 8 only)", s.bits)));
    }
    Ok(Some(s))
}

fn compressed_tensors(q: &Value, path: &Path) -> Result<PackScheme> {
    let format = q.get("format").and_then(Value::as_str).unwrap_or("");
    if format != "pack-quantized" {
        return Err(bad(path, format!("compressed-tensors format {format:?}")));
    }
    let groups = q
        .get("config_groups")
        .and_then(Value::as_object)
        .ok_or_else(|| bad(path, "quantization_config.config_groups: missing"))?;
    let mut weights = groups.values().filter_map(|g| g.get("weights"));
    let (Some(w), None) = (weights.next(), weights.next()) else {
        return Err(bad(
            path,
            "config_groups: exactly one weights scheme is supported",
        ));
    };
    if w.get("type").and_then(Value::as_str) != Some("int") {
        return Err(bad(path, "config_groups weights.type is not \"int\""));
    }
    let group = match w.get("strategy").and_then(Value::as_str) {
        Some("channel") => None,
        Some("group") => Some(
            group_field(w.get("group_size"), "weights.group_size", path)?
                .ok_or_else(|| bad(path, "group strategy without a group_size"))?,
        ),
        s => return Err(bad(path, format!("weights.strategy {s:?}"))),
    };
    Ok(PackScheme {
        format: PackFormat::PackQuantized,
        bits: u64_field(w, "num_bits", path)? as u32,
        group,
        sym: w.get("symmetric").and_then(Value::as_bool).unwrap_or(true),
        desc_act: w.get("actorder").is_some_and(|a| !a.is_null()),
    })
}

/// One module, unpacked.
#[derive(Clone, Debug)]
pub struct Unpacked {
    /// Output rows.
    pub out: usize,
    /// Inputs per row.
    pub inn: usize,
    /// Groups per row.
    pub groups: usize,
    /// Unsigned codes, `[out, in]` row-major.
    pub codes: Vec<u8>,
    /// Zeros in the codes' domain, `[out, groups]`.
    pub zeros: Vec<i32>,
    /// Scales as f32 (exact widening of the stored f16/bf16/f32), `[out, groups]`.
    pub scales: Vec<f32>,
    /// The group of each input (`g_idx`, or `i / group`).
    pub group_of: Vec<usize>,
}

impl Unpacked {
    /// `w = s · (q − z)` in f32, `[out, in]` row-major.
    pub fn dequantize(&self) -> Vec<f32> {
        let mut w = Vec::with_capacity(self.out * self.inn);
        for o in 0..self.out {
            for i in 0..self.inn {
                let g = o * self.groups + self.group_of[i];
                let d = self.codes[o * self.inn + i] as i32 - self.zeros[g];
                w.push(self.scales[g] * d as f32);
            }
        }
        w
    }
}

/// The raw little-endian words of an I32 tensor and its shape.
fn words(w: &MmapWeights, name: &str) -> Result<(Vec<u32>, Vec<usize>)> {
    let (dtype, shape, bytes) = w
        .raw(name)
        .ok_or_else(|| RefError::Unsupported(format!("missing tensor {name}")))?;
    if dtype != Dtype::I32 {
        return Err(RefError::Unsupported(format!(
            "{name}: dtype {dtype:?}, expected I32"
        )));
    }
    let v = bytes
        .chunks_exact(4)
        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    Ok((v, shape.to_vec()))
}

fn floats(w: &MmapWeights, name: &str) -> Result<(Vec<f32>, Vec<usize>)> {
    w.decode_f32(name)?
        .ok_or_else(|| RefError::Unsupported(format!("{name}: not a float tensor")))
}

fn expect_shape(name: &str, got: &[usize], want: &[usize]) -> Result<()> {
    if got != want {
        return Err(RefError::Unsupported(format!(
            "{name}: shape {got:?}, the quantization config implies {want:?}"
        )));
    }
    Ok(())
}

/// Field `k` (0-based, `bits` wide, LSB first) of a word.
fn field(word: u32, k: usize, bits: u32) -> u32 {
    (word >> (k as u32 * bits)) & ((1u32 << bits) - 1)
}

/// Unpacks module `prefix` (e.g. `model.layers.0.self_attn.q_proj`) of weight shape
/// `[out, inn]` (from config.json).
///
/// Errors: a missing tensor, a dtype or shape the scheme does not imply, a `g_idx` entry out
/// of range.
pub fn unpack(
    w: &MmapWeights,
    prefix: &str,
    s: &PackScheme,
    out: usize,
    inn: usize,
) -> Result<Unpacked> {
    let group = s.group.unwrap_or(inn);
    let groups = inn.div_ceil(group);
    let per = (32 / s.bits) as usize;
    let mut u = Unpacked {
        out,
        inn,
        groups,
        codes: vec![0; out * inn],
        zeros: vec![0; out * groups],
        scales: Vec::new(),
        group_of: (0..inn).map(|i| i / group).collect(),
    };
    match s.format {
        PackFormat::Gptq { v1 } => {
            let (qw, shape) = words(w, &format!("{prefix}.qweight"))?;
            expect_shape(
                &format!("{prefix}.qweight"),
                &shape,
                &[inn.div_ceil(per), out],
            )?;
            for i in 0..inn {
                for o in 0..out {
                    u.codes[o * inn + i] = field(qw[(i / per) * out + o], i % per, s.bits) as u8;
                }
            }
            let (qz, shape) = words(w, &format!("{prefix}.qzeros"))?;
            expect_shape(
                &format!("{prefix}.qzeros"),
                &shape,
                &[groups, out.div_ceil(per)],
            )?;
            let cols = out.div_ceil(per);
            for g in 0..groups {
                for o in 0..out {
                    let z = field(qz[g * cols + o / per], o % per, s.bits) as i32;
                    // v1 stores zero − 1; its readers add the 1 back after masking.
                    u.zeros[o * groups + g] = z + v1 as i32;
                }
            }
            u.scales = transposed_scales(w, prefix, groups, out)?;
            let gname = format!("{prefix}.g_idx");
            if w.contains(&gname) {
                let (gi, shape) = words(w, &gname)?;
                expect_shape(&gname, &shape, &[inn])?;
                for (i, g) in gi.iter().enumerate() {
                    if *g as usize >= groups {
                        return Err(RefError::Unsupported(format!(
                            "{gname}[{i}] = {g}, beyond {groups} groups"
                        )));
                    }
                    u.group_of[i] = *g as usize;
                }
            }
        }
        PackFormat::AwqGemm => {
            if s.bits != 4 {
                return Err(RefError::Unsupported(format!(
                    "AWQ GEMM with {} bits",
                    s.bits
                )));
            }
            // Output c·8 + j sits at nibble AWQ_POS[j] of word c.
            const AWQ_POS: [usize; 8] = [0, 4, 1, 5, 2, 6, 3, 7];
            let cols = out / 8;
            let (qw, shape) = words(w, &format!("{prefix}.qweight"))?;
            expect_shape(&format!("{prefix}.qweight"), &shape, &[inn, cols])?;
            for i in 0..inn {
                for o in 0..out {
                    let word = qw[i * cols + o / 8];
                    u.codes[o * inn + i] = field(word, AWQ_POS[o % 8], 4) as u8;
                }
            }
            let (qz, shape) = words(w, &format!("{prefix}.qzeros"))?;
            expect_shape(&format!("{prefix}.qzeros"), &shape, &[groups, cols])?;
            for g in 0..groups {
                for o in 0..out {
                    u.zeros[o * groups + g] = field(qz[g * cols + o / 8], AWQ_POS[o % 8], 4) as i32;
                }
            }
            u.scales = transposed_scales(w, prefix, groups, out)?;
        }
        PackFormat::PackQuantized => unpack_ct(w, prefix, s, &mut u)?,
    }
    Ok(u)
}

/// GPTQ/AWQ `scales` `[groups, out]` as `[out, groups]`.
fn transposed_scales(w: &MmapWeights, prefix: &str, groups: usize, out: usize) -> Result<Vec<f32>> {
    let (sc, shape) = floats(w, &format!("{prefix}.scales"))?;
    expect_shape(&format!("{prefix}.scales"), &shape, &[groups, out])?;
    let mut t = vec![0f32; out * groups];
    for g in 0..groups {
        for o in 0..out {
            t[o * groups + g] = sc[g * out + o];
        }
    }
    Ok(t)
}

/// Element `e` of a densely packed LSB-first bit stream of `bits`-wide fields.
fn dense(words: &[u32], e: usize, bits: u32) -> u32 {
    let bit = e * bits as usize;
    let (k, off) = (bit / 32, (bit % 32) as u32);
    let mut v = words[k] >> off;
    if off + bits > 32 {
        v |= words[k + 1] << (32 - off);
    }
    v & ((1u32 << bits) - 1)
}

fn unpack_ct(w: &MmapWeights, prefix: &str, s: &PackScheme, u: &mut Unpacked) -> Result<()> {
    let (out, inn, groups) = (u.out, u.inn, u.groups);
    let offset = 1i32 << (s.bits - 1);
    let row_words = (inn * s.bits as usize).div_ceil(32);
    let (wp, shape) = words(w, &format!("{prefix}.weight_packed"))?;
    expect_shape(
        &format!("{prefix}.weight_packed"),
        &shape,
        &[out, row_words],
    )?;
    for o in 0..out {
        let row = &wp[o * row_words..(o + 1) * row_words];
        for i in 0..inn {
            u.codes[o * inn + i] = dense(row, i, s.bits) as u8;
        }
    }
    let (sc, shape) = floats(w, &format!("{prefix}.weight_scale"))?;
    expect_shape(&format!("{prefix}.weight_scale"), &shape, &[out, groups])?;
    u.scales = sc;
    let zp_name = format!("{prefix}.weight_zero_point");
    if s.sym {
        if w.contains(&zp_name) {
            return Err(RefError::Unsupported(format!(
                "{zp_name}: present, but the config says symmetric"
            )));
        }
        u.zeros.iter_mut().for_each(|z| *z = offset);
        return Ok(());
    }
    // Asymmetric: signed zero points `[out, groups]`, packed along dim 0 (the outputs).
    let (zp, shape) = words(w, &zp_name)?;
    let zrows = (out * s.bits as usize).div_ceil(32);
    expect_shape(&zp_name, &shape, &[zrows, groups])?;
    for g in 0..groups {
        let col: Vec<u32> = (0..zrows).map(|r| zp[r * groups + g]).collect();
        for o in 0..out {
            // Stored as zero + 2^(bits−1): already in the codes' unsigned domain.
            u.zeros[o * groups + g] = dense(&col, o, s.bits) as i32;
        }
    }
    Ok(())
}

/// The weights of a packed checkpoint as a candle backend: `P.weight` of a packed module is
/// unpacked and dequantized (`[out, in]` f32, the named formula) when the model asks for it;
/// every other tensor is read as stored.
struct PackedBackend {
    w: MmapWeights,
    scheme: PackScheme,
}

impl PackedBackend {
    fn anchor(&self) -> &'static str {
        match self.scheme.format {
            PackFormat::PackQuantized => "weight_packed",
            _ => "qweight",
        }
    }

    fn packed_module<'n>(&self, name: &'n str) -> Option<&'n str> {
        let module = name.strip_suffix(".weight")?;
        self.w
            .contains(&format!("{module}.{}", self.anchor()))
            .then_some(module)
    }
}

impl PackedBackend {
    /// `(out, in)` of a packed module from its stored shapes and the config's bits.
    fn dims(&self, module: &str) -> Option<(usize, usize)> {
        let shape = |part: &str| {
            self.w
                .raw(&format!("{module}.{part}"))
                .map(|r| r.1.to_vec())
        };
        let per = (32 / self.scheme.bits) as usize;
        match self.scheme.format {
            PackFormat::Gptq { .. } => {
                let q = shape("qweight")?;
                Some((*q.get(1)?, q.first()? * per))
            }
            PackFormat::AwqGemm => {
                let q = shape("qweight")?;
                Some((q.get(1)? * per, *q.first()?))
            }
            PackFormat::PackQuantized => {
                let (dtype, _, bytes) = self.w.raw(&format!("{module}.weight_shape"))?;
                if dtype != Dtype::I64 || bytes.len() != 16 {
                    return None;
                }
                let v = |k: usize| {
                    i64::from_le_bytes(bytes[k..k + 8].try_into().ok()?)
                        .try_into()
                        .ok()
                };
                Some((v(0)?, v(8)?))
            }
        }
    }
}

impl candle_nn::var_builder::SimpleBackend for PackedBackend {
    fn get(
        &self,
        s: candle_core::Shape,
        name: &str,
        init: candle_nn::Init,
        dtype: candle_core::DType,
        dev: &candle_core::Device,
    ) -> candle_core::Result<candle_core::Tensor> {
        let Some(module) = self.packed_module(name) else {
            return self.w.get(s, name, init, dtype, dev);
        };
        let (out, inn) = s.dims2()?;
        let u = unpack(&self.w, module, &self.scheme, out, inn)
            .map_err(|e| candle_core::Error::Msg(e.to_string()))?;
        candle_core::Tensor::from_vec(u.dequantize(), (out, inn), dev)?.to_dtype(dtype)
    }

    fn get_unchecked(
        &self,
        name: &str,
        dtype: candle_core::DType,
        dev: &candle_core::Device,
    ) -> candle_core::Result<candle_core::Tensor> {
        let Some(module) = self.packed_module(name) else {
            return self.w.get_unchecked(name, dtype, dev);
        };
        let (out, inn) = self
            .dims(module)
            .ok_or_else(|| candle_core::Error::Msg(format!("{module}: shape unknown")))?;
        self.get(
            (out, inn).into(),
            name,
            candle_nn::Init::Const(0.),
            dtype,
            dev,
        )
    }

    fn contains_tensor(&self, name: &str) -> bool {
        self.w.contains(name) || self.packed_module(name).is_some()
    }
}

/// A `VarBuilder` over a packed checkpoint's folder (f32 on the CPU): packed modules
/// dequantized by [`unpack`] when read, one at a time.
///
/// Errors: the shards cannot be opened.
pub fn var_builder(dir: &Path, scheme: PackScheme) -> Result<candle_nn::VarBuilder<'static>> {
    let w = MmapWeights::open(&crate::safetensors_files(dir)?)?;
    Ok(candle_nn::VarBuilder::from_backend(
        Box::new(PackedBackend { w, scheme }),
        candle_core::DType::F32,
        candle_core::Device::Cpu,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn hf(name: &str) -> PathBuf {
        let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../../.cache/hf")
            .join(name);
        assert!(
            p.join(".complete").exists(),
            "{} missing: run scripts/build-quant-fixtures.sh",
            p.display()
        );
        p
    }

    /// Every module of `name` against the BF16 weights it was quantized from (round to
    /// nearest): each value within one scale of the source, and on average within a third of
    /// one. A wrong bit order, zero convention or group mapping moves values by whole scales.
    fn close_to_source(name: &str, want: PackScheme, zero: Option<i32>) {
        let dir = hf(name);
        let config = crate::read_json(&dir.join("config.json")).unwrap();
        let s = scheme(&config, &dir).unwrap().expect("a packed scheme");
        assert_eq!(s, want);
        let w = MmapWeights::open(&crate::safetensors_files(&dir).unwrap()).unwrap();
        let src =
            MmapWeights::open(&[hf("SmolLM2-135M-Instruct").join("model.safetensors")]).unwrap();
        let mut modules = 0;
        for layer in [0, 17, 29] {
            for (m, out, inn) in [
                ("self_attn.q_proj", 576, 576),
                ("self_attn.k_proj", 192, 576),
                ("mlp.down_proj", 576, 1536),
            ] {
                let prefix = format!("model.layers.{layer}.{m}");
                let u = unpack(&w, &prefix, &s, out, inn).unwrap();
                if let Some(z) = zero {
                    assert!(u.zeros.iter().all(|x| *x == z), "{prefix}: zeros");
                }
                let (orig, _) = src
                    .decode_f32(&format!("{prefix}.weight"))
                    .unwrap()
                    .unwrap();
                let deq = u.dequantize();
                let (mut worst, mut sum) = (0f64, 0f64);
                for o in 0..out {
                    for i in 0..inn {
                        let sc = u.scales[o * u.groups + u.group_of[i]].abs() as f64;
                        let e = (deq[o * inn + i] - orig[o * inn + i]).abs() as f64 / sc.max(1e-12);
                        worst = worst.max(e);
                        sum += e;
                    }
                }
                let mean = sum / (out * inn) as f64;
                assert!(
                    worst <= 1.01 && mean <= 0.34,
                    "{prefix}: worst {worst}, mean {mean}"
                );
                modules += 1;
            }
        }
        assert_eq!(modules, 9);
    }

    /// Every module of `name` against the producing library's own dequantization
    /// (`NAME-libdq`, scripts/library_dequant.py): auto-round's GPTQ kernel computes in f16 and
    /// compressed-tensors in bf16, so our f32 scale·(q − zero) rounded to that type must equal
    /// the library's value bit for bit (±0 aside). Returns the modules compared.
    fn matches_library(name: &str, round: fn(f32) -> f32) -> usize {
        let dir = hf(name);
        let config = crate::read_json(&dir.join("config.json")).unwrap();
        let s = scheme(&config, &dir).unwrap().expect("a packed scheme");
        let w = MmapWeights::open(&crate::safetensors_files(&dir).unwrap()).unwrap();
        let lib = hf(&format!("{name}-libdq"));
        let lib = MmapWeights::open(&[lib.join("model.safetensors")]).unwrap();
        let mut modules = 0;
        for layer in 0..30 {
            for (m, out, inn) in [
                ("self_attn.q_proj", 576, 576),
                ("self_attn.k_proj", 192, 576),
                ("self_attn.v_proj", 192, 576),
                ("self_attn.o_proj", 576, 576),
                ("mlp.gate_proj", 1536, 576),
                ("mlp.up_proj", 1536, 576),
                ("mlp.down_proj", 576, 1536),
            ] {
                let prefix = format!("model.layers.{layer}.{m}");
                let ours = unpack(&w, &prefix, &s, out, inn).unwrap().dequantize();
                let (theirs, shape) = lib
                    .decode_f32(&format!("{prefix}.weight"))
                    .unwrap()
                    .unwrap();
                assert_eq!(shape, [out, inn], "{prefix}");
                // Bits, except that −0 equals +0: the library's weights come out of a product
                // with the identity, where −0 + 0 = +0.
                let same = |a: f32, b: f32| a.to_bits() == b.to_bits() || (a == 0.0 && b == 0.0);
                let bad = (0..ours.len())
                    .filter(|&i| !same(round(ours[i]), theirs[i]))
                    .count();
                assert_eq!(bad, 0, "{name}: {prefix}: {bad} values differ");
                modules += 1;
            }
        }
        modules
    }

    fn via_f16(x: f32) -> f32 {
        half::f16::from_f32(x).to_f32()
    }

    fn via_bf16(x: f32) -> f32 {
        half::bf16::from_f32(x).to_f32()
    }

    #[test]
    fn gptq_and_compressed_tensors_equal_their_library_dequantization() {
        for name in ["gptq-4-g128-sym", "gptq-4-g32-asym", "gptq-8-g128-sym"] {
            let n = matches_library(&format!("SmolLM2-135M-Instruct-{name}"), via_f16);
            assert_eq!(n, 210, "{name}");
        }
        for name in ["ct-4-g64-sym", "ct-4-g32-asym", "ct-8-channel-sym"] {
            let n = matches_library(&format!("SmolLM2-135M-Instruct-{name}"), via_bf16);
            assert_eq!(n, 210, "{name}");
        }
    }

    #[test]
    fn gptq_4bit_g128_sym_v1() {
        let s = PackScheme {
            format: PackFormat::Gptq { v1: true },
            bits: 4,
            group: Some(128),
            sym: true,
            desc_act: false,
        };
        // v1 stores 7 for the symmetric zero 8.
        close_to_source("SmolLM2-135M-Instruct-gptq-4-g128-sym", s, Some(8));
    }

    #[test]
    fn gptq_4bit_g32_asym() {
        let s = PackScheme {
            format: PackFormat::Gptq { v1: true },
            bits: 4,
            group: Some(32),
            sym: false,
            desc_act: false,
        };
        close_to_source("SmolLM2-135M-Instruct-gptq-4-g32-asym", s, None);
    }

    #[test]
    fn gptq_8bit_g128_sym() {
        let s = PackScheme {
            format: PackFormat::Gptq { v1: true },
            bits: 8,
            group: Some(128),
            sym: true,
            desc_act: false,
        };
        close_to_source("SmolLM2-135M-Instruct-gptq-8-g128-sym", s, Some(128));
    }

    #[test]
    fn awq_gemm_interleaved_order_sym_and_asym() {
        let s = |group, sym| PackScheme {
            format: PackFormat::AwqGemm,
            bits: 4,
            group: Some(group),
            sym,
            desc_act: false,
        };
        close_to_source("SmolLM2-135M-Instruct-awq-4-g32-sym", s(32, true), Some(8));
        close_to_source("SmolLM2-135M-Instruct-awq-4-g64-asym", s(64, false), None);
    }

    #[test]
    fn compressed_tensors_pack_quantized() {
        let s = |bits, group, sym| PackScheme {
            format: PackFormat::PackQuantized,
            bits,
            group,
            sym,
            desc_act: false,
        };
        close_to_source(
            "SmolLM2-135M-Instruct-ct-4-g64-sym",
            s(4, Some(64), true),
            Some(8),
        );
        close_to_source(
            "SmolLM2-135M-Instruct-ct-4-g32-asym",
            s(4, Some(32), false),
            None,
        );
        close_to_source(
            "SmolLM2-135M-Instruct-ct-8-channel-sym",
            s(8, None, true),
            Some(128),
        );
    }
}
