//! Already-quantized MLX checkpoints (affine: value = scale·q + bias per group of `group`
//! consecutive inputs, q packed `bits` wide into U32 words; layout observed in
//! `docs/mlx-layout.md`). The config's `quantization` table is the only source of bits and
//! group size; shapes must agree with it or the tensor is a blocker. Each quantized module is
//! written losslessly when a ggml block type holds the values exactly:
//! 4-bit → Q4_1 (d = scale, m = bias; ggml-common.h `block_q4_1`), 5-bit → Q5_1
//! (`block_q5_1`), group a multiple of 32, every scale and bias exact in f16. Otherwise the
//! tensor is a blocker unless the user picked a fallback (f32 exact, f16, or `requant:TYPE`).

use anyhow::{anyhow, Result};
use gguf::GgmlType;

use crate::source::hf::HfDir;
use crate::source::mlx::{Affine, AffineTensor};

mod write;
pub use write::{
    encode_fallback, fallback_type, file_type, no_exact_type, plan, repack_exact, FallbackError,
    MlxPlan,
};

/// A user's choice for tensors no block type holds exactly.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fallback {
    /// The named-formula values as F32 (exact, larger).
    F32,
    /// The values rounded to F16 (max error reported).
    F16,
    /// Re-quantized with ggml's reference quantizer for this type (error stats reported).
    Requant(GgmlType),
}

impl Fallback {
    /// Parses `f32`, `f16` or `requant:TYPE` (TYPE one of the reference quantizers' types).
    pub fn parse(s: &str) -> Result<Fallback> {
        match s.to_ascii_lowercase().as_str() {
            "f32" => Ok(Fallback::F32),
            "f16" => Ok(Fallback::F16),
            other => {
                let t = other
                    .strip_prefix("requant:")
                    .and_then(|t| GgmlType::from_name(&t.to_ascii_uppercase()))
                    .filter(|t| gguf::quant_ref::SUPPORTED.contains(t))
                    .ok_or_else(|| {
                        anyhow!("--fallback {s:?}: expected f32, f16 or requant:TYPE (Q4_0 … Q6_K, Q8_0)")
                    })?;
                Ok(Fallback::Requant(t))
            }
        }
    }
}

/// Codes of `rows × inn` values packed `bits` wide, each row's U32 words read as one
/// little-endian bit stream (code i at bits i·bits …), per docs/mlx-layout.md.
///
/// The writer's unpacker. `verify::gate1::mlx` has its own on purpose: the verifier never
/// reuses the converter's encoding path.
pub fn unpack_codes(words: &[u32], rows: usize, inn: usize, bits: u32) -> Vec<u8> {
    let per_row = words.len() / rows.max(1);
    let mask = (1u64 << bits) - 1;
    let mut out = Vec::with_capacity(rows * inn);
    for r in 0..rows {
        let w = &words[r * per_row..(r + 1) * per_row];
        for i in 0..inn {
            let bit = i * bits as usize;
            let (k, s) = (bit / 32, bit % 32);
            let mut v = (w[k] as u64) >> s;
            if s + bits as usize > 32 {
                v |= (w[k + 1] as u64) << (32 - s);
            }
            out.push((v & mask) as u8);
        }
    }
    out
}

/// The named formula: value = f32(scale) · f32(q) + f32(bias), an f32 multiply then an f32
/// add (two roundings, no FMA), for `rows × inn` codes with one scale/bias per group.
pub fn named_formula(
    codes: &[u8],
    scales: &[f32],
    biases: &[f32],
    inn: usize,
    group: usize,
) -> Vec<f32> {
    let gpr = inn / group;
    codes
        .iter()
        .enumerate()
        .map(|(i, &q)| {
            let g = (i / inn) * gpr + (i % inn) / group;
            scales[g] * q as f32 + biases[g]
        })
        .collect()
}

/// Whether `v` converts to f16 and back without change (bit pattern kept, |v| ≤ 65504).
pub fn f16_exact(v: f32) -> bool {
    let h = gguf::quant::f32_to_f16_bits(v);
    gguf::dequant::f16_to_f32(h).to_bits() == v.to_bits()
}

/// The exact block type for `a` (`None`: none holds these values exactly), given whether every
/// scale and bias is f16-exact; the rule text says why.
pub fn exact_type(a: Affine, all_f16_exact: bool) -> (Option<GgmlType>, String) {
    let ty = match a.bits {
        4 => GgmlType::Q4_1,
        5 => GgmlType::Q5_1,
        b => {
            return (
                None,
                format!("{b}-bit affine: no ggml block type holds it exactly"),
            )
        }
    };
    if !a.group.is_multiple_of(32) {
        return (
            None,
            format!(
                "{}-bit group {}: not a multiple of {ty}'s 32",
                a.bits, a.group
            ),
        );
    }
    if !all_f16_exact {
        return (
            None,
            format!("{}-bit: some scale or bias is not exact in f16", a.bits),
        );
    }
    (
        Some(ty),
        format!(
            "{}-bit group {} → {ty} (d = scale, m = bias; exact)",
            a.bits, a.group
        ),
    )
}

/// Encodes codes (`rows × inn`, one per value) with per-group scale/bias (f16-exact) as Q4_1
/// blocks (`block_q4_1`: d f16, m f16, `qs[16]`: value j in the low nibble of `qs[j]`, j+16 in the
/// high nibble) or Q5_1 blocks (`block_q5_1`: d, m, qh u32 with bit j = 5th bit of value j,
/// `qs[16]` as Q4_1).
pub fn encode_exact(
    ty: GgmlType,
    codes: &[u8],
    scales: &[f32],
    biases: &[f32],
    inn: usize,
    group: usize,
) -> Vec<u8> {
    let gpr = inn / group;
    let n_blocks = codes.len() / 32;
    let mut out = Vec::with_capacity(n_blocks * ty.type_size() as usize);
    for b in 0..n_blocks {
        let i0 = b * 32;
        let g = (i0 / inn) * gpr + (i0 % inn) / group;
        out.extend_from_slice(&gguf::quant::f32_to_f16_bits(scales[g]).to_le_bytes());
        out.extend_from_slice(&gguf::quant::f32_to_f16_bits(biases[g]).to_le_bytes());
        let q = &codes[i0..i0 + 32];
        if ty == GgmlType::Q5_1 {
            let qh = q
                .iter()
                .enumerate()
                .fold(0u32, |h, (j, &c)| h | (((c as u32 >> 4) & 1) << j));
            out.extend_from_slice(&qh.to_le_bytes());
        }
        out.extend((0..16).map(|j| (q[j] & 0x0f) | ((q[j + 16] & 0x0f) << 4)));
    }
    out
}

/// The decoded fields of one affine module, rows already in GGUF order.
pub struct Decoded {
    pub codes: Vec<u8>,
    pub scales: Vec<f32>,
    pub biases: Vec<f32>,
}

/// Reads and unpacks `t`'s codes, scales and biases (scales/biases exact as f32), with the
/// rows permuted for llama's Q/K when `permute` names a head count.
pub fn decode(hf: &HfDir, t: &AffineTensor, permute: Option<usize>) -> std::io::Result<Decoded> {
    let raw = hf.bytes(&hf.tensors[t.weight])?;
    let words: Vec<u32> = raw
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    let mut codes = unpack_codes(&words, t.out, t.inn, t.affine.bits);
    let mut scales = hf.to_f32(&hf.tensors[t.scales])?;
    let mut biases = hf.to_f32(&hf.tensors[t.biases])?;
    if let Some(heads) = permute {
        codes = crate::source::permute::permute_qk(&codes, t.out, heads);
        scales = crate::source::permute::permute_qk(&scales, t.out, heads);
        biases = crate::source::permute::permute_qk(&biases, t.out, heads);
    }
    Ok(Decoded {
        codes,
        scales,
        biases,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unpack_4_and_6_bit_little_endian_streams() {
        // 4-bit: code 8j+n = (word_j >> 4n) & 0xF.
        let w = [0x7654_3210u32, 0xfedc_ba98];
        assert_eq!(unpack_codes(&w, 1, 16, 4), (0..16).collect::<Vec<u8>>());
        // 6-bit: 16 codes in 3 words; code 5 straddles bits 30..36.
        let codes: Vec<u64> = (0..16).map(|i| (i * 4 + 1) % 64).collect();
        let mut stream = 0u128;
        for (i, c) in codes.iter().enumerate() {
            stream |= (*c as u128) << (6 * i);
        }
        let w = [stream as u32, (stream >> 32) as u32, (stream >> 64) as u32];
        let got = unpack_codes(&w, 1, 16, 6);
        assert_eq!(got.iter().map(|c| *c as u64).collect::<Vec<_>>(), codes);
    }

    #[test]
    fn q4_1_and_q5_1_encodings_dequantize_to_the_named_formula() {
        let codes4: Vec<u8> = (0..64).map(|i| (i * 7 % 16) as u8).collect();
        let codes5: Vec<u8> = (0..64).map(|i| (i * 11 % 32) as u8).collect();
        let scales = [0.0123f32, -0.5];
        let biases = [-0.25f32, 3.0];
        let (s16, b16): (Vec<f32>, Vec<f32>) = (
            scales
                .iter()
                .map(|v| gguf::dequant::f16_to_f32(gguf::quant::f32_to_f16_bits(*v)))
                .collect(),
            biases.to_vec(),
        );
        for (ty, codes) in [(GgmlType::Q4_1, &codes4), (GgmlType::Q5_1, &codes5)] {
            let bytes = encode_exact(ty, codes, &s16, &b16, 64, 32);
            assert_eq!(bytes.len(), 2 * ty.type_size() as usize);
            let ours = gguf::dequant::dequantize_to_vec(ty, &bytes, 64).unwrap();
            let want = named_formula(codes, &s16, &b16, 64, 32);
            assert_eq!(
                ours.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                want.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                "{ty}"
            );
        }
    }

    #[test]
    fn exact_type_rules() {
        let a = |bits, group| Affine { bits, group };
        assert_eq!(exact_type(a(4, 64), true).0, Some(GgmlType::Q4_1));
        assert_eq!(exact_type(a(5, 32), true).0, Some(GgmlType::Q5_1));
        assert_eq!(exact_type(a(6, 64), true).0, None);
        assert_eq!(exact_type(a(4, 16), true).0, None);
        assert_eq!(exact_type(a(4, 64), false).0, None);
        assert!(f16_exact(0.5) && f16_exact(-0.0) && !f16_exact(1e-9) && !f16_exact(70000.0));
        assert!(!f16_exact(f32::from_bits(0x3f80_0001)));
        assert_eq!(
            Fallback::parse("requant:q8_0").unwrap(),
            Fallback::Requant(GgmlType::Q8_0)
        );
        assert!(Fallback::parse("requant:iq2_xs").is_err());
    }
}

#[cfg(test)]
mod repack_tests {
    use super::*;

    #[test]
    fn repack_equals_unpack_permute_encode() {
        // 8 rows × 64 inputs, 2 heads; 4-bit and 5-bit; group 32 and 64.
        let mut seed = 12345u32;
        let mut rnd = || {
            seed ^= seed << 13;
            seed ^= seed >> 17;
            seed ^= seed << 5;
            seed
        };
        for (ty, bits, group) in [
            (GgmlType::Q4_1, 4, 32),
            (GgmlType::Q4_1, 4, 64),
            (GgmlType::Q5_1, 5, 32),
        ] {
            let (rows, inn) = (8usize, 64usize);
            let words: Vec<u32> = (0..rows * inn * bits as usize / 32)
                .map(|_| rnd())
                .collect();
            let ng = rows * inn / group;
            let scales: Vec<f32> = (0..ng).map(|i| (i as f32 - 3.0) * 0.125).collect();
            let biases: Vec<f32> = (0..ng).map(|i| -(i as f32) * 0.5).collect();
            for heads in [None, Some(2)] {
                let mut codes = unpack_codes(&words, rows, inn, bits);
                let (mut s, mut b) = (scales.clone(), biases.clone());
                if let Some(h) = heads {
                    codes = crate::source::permute::permute_qk(&codes, rows, h);
                    s = crate::source::permute::permute_qk(&s, rows, h);
                    b = crate::source::permute::permute_qk(&b, rows, h);
                }
                let want = encode_exact(ty, &codes, &s, &b, inn, group);
                let got = repack_exact(
                    ty,
                    &words,
                    bits,
                    &scales,
                    &biases,
                    inn,
                    group,
                    &crate::source::permute::row_order(rows, heads),
                );
                assert_eq!(got, want, "{ty} group {group} heads {heads:?}");
            }
        }
    }
}
