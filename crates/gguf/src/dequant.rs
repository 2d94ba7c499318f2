//! Dequantization of ggml block types to f32.
//!
//! Block layouts per `ggml/src/ggml-common.h` (`block_q4_0` … `block_q8_K`); formulas per the
//! `dequantize_row_*` functions of `ggml/src/ggml-quants.c` (summarised in
//! `docs/llamacpp-spec.md` §5.1). The order of float operations follows those
//! formulas exactly (e.g. Q4_K is `(d·sc)·q − (dmin·m)`, Q6_K is `(d·sc)·q`) so that results are
//! bit-identical to ggml's `to_float`; Rust never contracts a·b+c into an FMA.

use crate::blocks::*;
use crate::types::GgmlType;

/// Why a buffer could not be dequantized.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DequantError {
    /// No dequantizer for this type (IQ*, TQ*, MXFP4, NVFP4, integer types …).
    #[error("dequantization of {0} is not supported")]
    Unsupported(GgmlType),
    /// `n` is not a multiple of the block size, or the byte count does not match `n`.
    #[error("{ty}: {n} elements need {need} bytes, got {got}")]
    Size {
        /// The ggml type being dequantized.
        ty: GgmlType,
        /// Elements requested (`out.len()`).
        n: usize,
        /// Bytes `n` elements take: `n / ggml_blck_size · ggml_type_size` (whole blocks only).
        need: usize,
        /// Bytes given (`src.len()`).
        got: usize,
    },
}

/// Types this module can dequantize.
pub const SUPPORTED: &[GgmlType] = &[
    GgmlType::F32,
    GgmlType::F16,
    GgmlType::BF16,
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q8_0,
    GgmlType::Q2_K,
    GgmlType::Q3_K,
    GgmlType::Q4_K,
    GgmlType::Q5_K,
    GgmlType::Q6_K,
    GgmlType::Q8_K,
    GgmlType::IQ4_NL,
    GgmlType::IQ4_XS,
];

/// Whether [`dequantize`] handles `ty`.
pub fn is_supported(ty: GgmlType) -> bool {
    SUPPORTED.contains(&ty)
}

/// Dequantizes `src` (the stored bytes of `out.len()` elements of type `ty`) into `out`.
///
/// Errors: an unsupported type, or sizes that do not match (`out.len()` must be a multiple of
/// the block size and `src.len()` exactly `out.len() / block · type_size`).
pub fn dequantize(ty: GgmlType, src: &[u8], out: &mut [f32]) -> Result<(), DequantError> {
    if !is_supported(ty) {
        return Err(DequantError::Unsupported(ty));
    }
    let n = out.len();
    let bs = ty.block_size() as usize;
    let need = (n / bs) * ty.type_size() as usize;
    if !n.is_multiple_of(bs) || src.len() != need {
        return Err(DequantError::Size {
            ty,
            n,
            need,
            got: src.len(),
        });
    }
    match ty {
        GgmlType::F32 => {
            for (b, y) in src.chunks_exact(4).zip(out.iter_mut()) {
                *y = f32::from_le_bytes(b.try_into().expect("4"));
            }
        }
        GgmlType::F16 => {
            for (b, y) in src.chunks_exact(2).zip(out.iter_mut()) {
                *y = f16_to_f32(u16::from_le_bytes([b[0], b[1]]));
            }
        }
        GgmlType::BF16 => {
            for (b, y) in src.chunks_exact(2).zip(out.iter_mut()) {
                *y = f32::from_bits((u16::from_le_bytes([b[0], b[1]]) as u32) << 16);
            }
        }
        GgmlType::Q4_0 => blocks::<Q4_0_BYTES, QK>(src, out, q4_0),
        GgmlType::Q4_1 => blocks::<Q4_1_BYTES, QK>(src, out, q4_1),
        GgmlType::Q5_0 => blocks::<Q5_0_BYTES, QK>(src, out, q5_0),
        GgmlType::Q5_1 => blocks::<Q5_1_BYTES, QK>(src, out, q5_1),
        GgmlType::Q8_0 => blocks::<Q8_0_BYTES, QK>(src, out, q8_0),
        GgmlType::Q2_K => blocks::<Q2_K_BYTES, QK_K>(src, out, q2_k),
        GgmlType::Q3_K => blocks::<Q3_K_BYTES, QK_K>(src, out, q3_k),
        GgmlType::Q4_K => blocks::<Q4_K_BYTES, QK_K>(src, out, q4_k),
        GgmlType::Q5_K => blocks::<Q5_K_BYTES, QK_K>(src, out, q5_k),
        GgmlType::Q6_K => blocks::<Q6_K_BYTES, QK_K>(src, out, q6_k),
        GgmlType::Q8_K => blocks::<Q8_K_BYTES, QK_K>(src, out, q8_k),
        GgmlType::IQ4_NL => blocks::<IQ4_NL_BYTES, QK>(src, out, iq4_nl),
        GgmlType::IQ4_XS => blocks::<IQ4_XS_BYTES, QK_K>(src, out, iq4_xs),
        _ => unreachable!("checked by is_supported"),
    }
    Ok(())
}

/// Applies a block dequantizer to every (TS-byte block, BS-element output) pair; fixed sizes
/// let the compiler drop bounds checks and vectorize the per-block loops.
#[inline(always)]
fn blocks<const TS: usize, const BS: usize>(
    src: &[u8],
    out: &mut [f32],
    f: fn(&[u8; TS], &mut [f32; BS]),
) {
    for (b, y) in src.chunks_exact(TS).zip(out.chunks_exact_mut(BS)) {
        f(
            b.try_into().expect("TS bytes"),
            y.try_into().expect("BS floats"),
        );
    }
}

/// Dequantizes a whole buffer of `n` elements into a new vector.
pub fn dequantize_to_vec(ty: GgmlType, src: &[u8], n: usize) -> Result<Vec<f32>, DequantError> {
    let mut out = vec![0f32; n];
    dequantize(ty, src, &mut out)?;
    Ok(out)
}

/// IEEE half → f32, exact, branch-free (the FP16 library's formula that ggml-base uses as
/// `ggml_compute_fp16_to_fp32`): normals/inf/NaN by rescaling the shifted bits by 2^-112,
/// subnormals through a magic bias. NaNs come out quiet with their payload, as in ggml.
#[inline(always)]
pub fn f16_to_f32(h: u16) -> f32 {
    let w = (h as u32) << 16;
    let sign = w & 0x8000_0000;
    let two_w = w.wrapping_add(w);
    let normalized = f32::from_bits((two_w >> 4) + (0xE0 << 23)) * f32::from_bits(0x0780_0000);
    let denormalized = f32::from_bits((two_w >> 17) | (126 << 23)) - 0.5;
    let bits = if two_w < (1 << 27) {
        denormalized.to_bits()
    } else {
        normalized.to_bits()
    };
    f32::from_bits(sign | bits)
}

#[inline(always)]
fn half_at(b: &[u8], i: usize) -> f32 {
    f16_to_f32(u16::from_le_bytes([b[i], b[i + 1]]))
}

/// block_q4_0: d:f16, qs[16]; y = (q − 8)·d.
fn q4_0(b: &[u8; Q4_0_BYTES], y: &mut [f32; QK]) {
    let d = half_at(b, 0);
    let qs = &b[2..18];
    for j in 0..16 {
        y[j] = ((qs[j] & 15) as i32 - 8) as f32 * d;
        y[j + 16] = ((qs[j] >> 4) as i32 - 8) as f32 * d;
    }
}

/// block_q4_1: d:f16, m:f16, qs[16]; y = q·d + m.
fn q4_1(b: &[u8; Q4_1_BYTES], y: &mut [f32; QK]) {
    let d = half_at(b, 0);
    let m = half_at(b, 2);
    let qs = &b[4..20];
    for j in 0..16 {
        y[j] = (qs[j] & 15) as f32 * d + m;
        y[j + 16] = (qs[j] >> 4) as f32 * d + m;
    }
}

/// block_q5_0: d:f16, qh:u32 LE, qs[16]; y = (q | h<<4 − 16)·d.
fn q5_0(b: &[u8; Q5_0_BYTES], y: &mut [f32; QK]) {
    let d = half_at(b, 0);
    let qh = u32::from_le_bytes([b[2], b[3], b[4], b[5]]);
    let qs = &b[6..22];
    for j in 0..16 {
        let h0 = (((qh >> j) & 1) << 4) as i32;
        let h1 = (((qh >> (j + 16)) & 1) << 4) as i32;
        y[j] = (((qs[j] & 15) as i32 | h0) - 16) as f32 * d;
        y[j + 16] = (((qs[j] >> 4) as i32 | h1) - 16) as f32 * d;
    }
}

/// block_q5_1: d:f16, m:f16, qh:u32 LE, qs[16]; y = (q | h<<4)·d + m.
fn q5_1(b: &[u8; Q5_1_BYTES], y: &mut [f32; QK]) {
    let d = half_at(b, 0);
    let m = half_at(b, 2);
    let qh = u32::from_le_bytes([b[4], b[5], b[6], b[7]]);
    let qs = &b[8..24];
    for j in 0..16 {
        let h0 = ((qh >> j) & 1) << 4;
        let h1 = ((qh >> (j + 16)) & 1) << 4;
        y[j] = ((qs[j] & 15) as u32 | h0) as f32 * d + m;
        y[j + 16] = ((qs[j] >> 4) as u32 | h1) as f32 * d + m;
    }
}

/// block_q8_0: d:f16, qs[32]:i8; y = q·d.
fn q8_0(b: &[u8; Q8_0_BYTES], y: &mut [f32; QK]) {
    let d = half_at(b, 0);
    for (yj, &q) in y.iter_mut().zip(&b[2..34]) {
        // Through i32: LLVM vectorizes i8→i32→f32 (cvtdq2ps) but not a direct i8→f32.
        *yj = (q as i8 as i32) as f32 * d;
    }
}

/// block_q2_K: scales[16], qs[64], d:f16, dmin:f16.
fn q2_k(b: &[u8; Q2_K_BYTES], y: &mut [f32; QK_K]) {
    let scales = &b[0..16];
    let d = half_at(b, 80);
    let dmin = half_at(b, 82);
    for h in 0..2 {
        let q = &b[16 + 32 * h..16 + 32 * h + 32];
        for g in 0..4 {
            let shift = 2 * g;
            for s in 0..2 {
                let sc = scales[8 * h + 2 * g + s];
                let dl = d * (sc & 15) as f32;
                let ml = dmin * (sc >> 4) as f32;
                let base = 128 * h + 32 * g + 16 * s;
                for l in 0..16 {
                    y[base + l] = dl * ((q[16 * s + l] >> shift) & 3) as f32 - ml;
                }
            }
        }
    }
}

/// block_q3_K: hmask[32], qs[64], scales[12] (16 six-bit scales), d:f16.
fn q3_k(b: &[u8; Q3_K_BYTES], y: &mut [f32; QK_K]) {
    let hmask = &b[0..32];
    let sb = &b[96..108];
    let d = half_at(b, 108);
    let mut scales = [0i32; 16];
    for (j, s) in scales.iter_mut().enumerate() {
        let lo4 = if j < 8 { sb[j] & 15 } else { sb[j - 8] >> 4 };
        let hi2 = (sb[8 + j % 4] >> (2 * (j / 4))) & 3;
        *s = (lo4 | (hi2 << 4)) as i32 - 32;
    }
    for h in 0..2 {
        let q = &b[32 + 32 * h..64 + 32 * h];
        for g in 0..4 {
            let shift = 2 * g;
            let m = 1u8 << (4 * h + g);
            for s in 0..2 {
                let dl = d * scales[8 * h + 2 * g + s] as f32;
                let base = 128 * h + 32 * g + 16 * s;
                for l in 0..16 {
                    let i = 16 * s + l;
                    let hb = if hmask[i] & m != 0 { 0 } else { 4 };
                    y[base + l] = dl * (((q[i] >> shift) & 3) as i32 - hb) as f32;
                }
            }
        }
    }
}

/// block_q4_K: d:f16, dmin:f16, scales[12], qs[128].
fn q4_k(b: &[u8; Q4_K_BYTES], y: &mut [f32; QK_K]) {
    let d = half_at(b, 0);
    let dmin = half_at(b, 2);
    let sc = &b[4..16];
    for k in 0..4 {
        let q: &[u8; 32] = b[16 + 32 * k..48 + 32 * k].try_into().expect("32");
        let (s1, m1) = get_scale_min_k4(2 * k, sc);
        let (s2, m2) = get_scale_min_k4(2 * k + 1, sc);
        let (d1, m1) = (d * s1 as f32, dmin * m1 as f32);
        let (d2, m2) = (d * s2 as f32, dmin * m2 as f32);
        let (lo, hi) = y[64 * k..64 * k + 64].split_at_mut(32);
        for ((l, h), &qv) in lo.iter_mut().zip(hi.iter_mut()).zip(q) {
            *l = d1 * (qv & 15) as f32 - m1;
            *h = d2 * (qv >> 4) as f32 - m2;
        }
    }
}

/// block_q5_K: d:f16, dmin:f16, scales[12], qh[32], qs[128].
fn q5_k(b: &[u8; Q5_K_BYTES], y: &mut [f32; QK_K]) {
    let d = half_at(b, 0);
    let dmin = half_at(b, 2);
    let sc = &b[4..16];
    let qh: &[u8; 32] = b[16..48].try_into().expect("32");
    for k in 0..4 {
        let q: &[u8; 32] = b[48 + 32 * k..80 + 32 * k].try_into().expect("32");
        let (s1, m1) = get_scale_min_k4(2 * k, sc);
        let (s2, m2) = get_scale_min_k4(2 * k + 1, sc);
        let (d1, m1) = (d * s1 as f32, dmin * m1 as f32);
        let (d2, m2) = (d * s2 as f32, dmin * m2 as f32);
        let (sh1, sh2) = (2 * k as u32, 2 * k as u32 + 1);
        let (lo, hi) = y[64 * k..64 * k + 64].split_at_mut(32);
        for (((l, h), &qv), &hv) in lo.iter_mut().zip(hi.iter_mut()).zip(q).zip(qh) {
            // Bit 2k (2k+1) of qh adds 16 to the low (high) nibble.
            let h1 = ((hv >> sh1) & 1) << 4;
            let h2 = ((hv >> sh2) & 1) << 4;
            *l = d1 * ((qv & 15) + h1) as f32 - m1;
            *h = d2 * ((qv >> 4) + h2) as f32 - m2;
        }
    }
}

/// block_q6_K: ql[128], qh[64], scales[16]:i8, d:f16.
fn q6_k(b: &[u8; Q6_K_BYTES], y: &mut [f32; QK_K]) {
    let d = half_at(b, 208);
    for n in 0..2 {
        let ql = &b[64 * n..64 * n + 64];
        let qh = &b[128 + 32 * n..160 + 32 * n];
        let sc = &b[192 + 8 * n..200 + 8 * n];
        let y = &mut y[128 * n..128 * n + 128];
        for l in 0..32 {
            let is = l / 16;
            let q1 = ((ql[l] & 15) | ((qh[l] & 3) << 4)) as i32 - 32;
            let q2 = ((ql[l + 32] & 15) | (((qh[l] >> 2) & 3) << 4)) as i32 - 32;
            let q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i32 - 32;
            let q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i32 - 32;
            y[l] = d * (sc[is] as i8) as f32 * q1 as f32;
            y[l + 32] = d * (sc[is + 2] as i8) as f32 * q2 as f32;
            y[l + 64] = d * (sc[is + 4] as i8) as f32 * q3 as f32;
            y[l + 96] = d * (sc[is + 6] as i8) as f32 * q4 as f32;
        }
    }
}

/// block_q8_K: d:f32, qs[256]:i8, bsums[16]:i16; y = d·q.
fn q8_k(b: &[u8; Q8_K_BYTES], y: &mut [f32; QK_K]) {
    let d = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    for (yj, &q) in y.iter_mut().zip(&b[4..260]) {
        *yj = d * (q as i8) as f32;
    }
}

/// The 16 non-linear levels of IQ4_NL and IQ4_XS (`kvalues_iq4nl`, ggml-common.h).
const KVALUES_IQ4NL: [i8; 16] = [
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
];

/// 32 values from 16 bytes of nibbles: low nibbles first, then high, each `dl · level`.
fn iq4_nibbles(dl: f32, qs: &[u8], y: &mut [f32]) {
    let (lo, hi) = y.split_at_mut(16);
    for ((l, h), &q) in lo.iter_mut().zip(hi.iter_mut()).zip(qs) {
        *l = dl * KVALUES_IQ4NL[(q & 15) as usize] as f32;
        *h = dl * KVALUES_IQ4NL[(q >> 4) as usize] as f32;
    }
}

/// block_iq4_nl: d:f16, qs[16]; y = d·level.
fn iq4_nl(b: &[u8; IQ4_NL_BYTES], y: &mut [f32; QK]) {
    iq4_nibbles(half_at(b, 0), &b[2..18], y);
}

/// block_iq4_xs: d:f16, scales_h:u16, scales_l[4], qs[128]; per 32 values a 6-bit scale
/// `ls` (4 low bits from scales_l, 2 high from scales_h) and `dl = d·(ls − 32)`.
fn iq4_xs(b: &[u8; IQ4_XS_BYTES], y: &mut [f32; QK_K]) {
    let d = half_at(b, 0);
    let scales_h = u16::from_le_bytes([b[2], b[3]]);
    for ib in 0..8 {
        let lo = (b[4 + ib / 2] >> (4 * (ib % 2))) & 15;
        let hi = ((scales_h >> (2 * ib)) & 3) as u8;
        let ls = (lo | (hi << 4)) as i32;
        let dl = d * (ls - 32) as f32;
        iq4_nibbles(
            dl,
            &b[8 + 16 * ib..24 + 16 * ib],
            &mut y[32 * ib..32 * ib + 32],
        );
    }
}
