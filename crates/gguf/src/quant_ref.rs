//! ggml's reference quantizers (the `quantize_row_*_ref` functions that `ggml_quantize_chunk`
//! runs when no importance matrix is given), ported to Rust for Q4_0, Q4_1, Q5_0, Q5_1, Q2_K,
//! Q3_K, Q4_K, Q5_K and Q6_K, plus Q8_0 ([`quantize_q8_0`], with C's float → int8 conversion,
//! which differs from Rust's `as` when the inverse scale overflows to infinity on subnormal
//! blocks).
//!
//! Block layouts per `ggml/src/ggml-common.h` (`block_q4_0` … `block_q6_K`, summarised in
//! `docs/llamacpp-spec.md` §5.1); algorithms per `ggml/src/ggml-quants.c` of the
//! llama.cpp vendored by llama-cpp-sys-2 0.1.161. The output is byte-identical to ggml's:
//!
//! * every float expression keeps the C evaluation order (`a*b*c` is `(a*b)*c`, sums run
//!   sequentially) and the same operand conversions (int → float before multiplying);
//! * no FMA: ggml-base (where `ggml-quants.c` lives) is built with `-march=x86-64`, i.e. SSE2
//!   only, so GCC cannot contract `a*b+c` there; Rust never contracts either;
//! * `nearest_int` is the `+ 12582912.f` magic-number rounding (ties to even), including its
//!   behaviour on out-of-range inputs;
//! * C's float → `int8_t`/`uint8_t` casts are x86 `cvttss2si` (NaN and out-of-range give
//!   `INT_MIN`) followed by truncation to the low byte, and int → `int8_t`/`uint8_t`
//!   assignments wrap;
//! * comparisons are written as in C, so NaN takes the same branches.

use crate::dequant::f16_to_f32;
use crate::quant::f32_to_f16_bits;
use crate::types::GgmlType;

/// `GROUP_MAX_EPS` of ggml-quants.c: groups whose largest magnitude is below it count as zero.
const GROUP_MAX_EPS: f32 = 1e-15;

use crate::blocks::*;

/// Why [`quantize_ref`] refused its input.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuantRefError {
    /// No reference quantizer here for this type.
    #[error("reference quantization to {0} is not supported")]
    Unsupported(GgmlType),
    /// The input is not a whole number of blocks.
    #[error("{ty}: {n} values are not a multiple of the block size {block}")]
    Size {
        /// The ggml type requested.
        ty: GgmlType,
        /// Number of f32 input values (`x.len()`).
        n: usize,
        /// Elements per block of `ty` (`ggml_blck_size`): 32 for Q4_0 … Q8_0, `QK_K` = 256 for
        /// the K-quants.
        block: usize,
    },
}

/// Types [`quantize_ref`] handles: the block types of [`crate::dequant::SUPPORTED`] from Q4_0
/// to Q6_K (that list holds F32, F16, BF16 first and Q8_K last).
pub const SUPPORTED: &[GgmlType] = crate::dequant::SUPPORTED.split_at(3).1.split_at(10).0;

/// Appends to `out` the blocks of type `ty` that ggml's `ggml_quantize_chunk` (ggml.c, no
/// imatrix, i.e. `quantize_row_*_ref` of ggml-quants.c) makes of `x`. Rows are independent
/// block sequences, so `x` may hold any number of rows back to back.
///
/// Errors: a type outside [`SUPPORTED`], or `x.len()` not a multiple of the block size.
pub fn quantize_ref(ty: GgmlType, x: &[f32], out: &mut Vec<u8>) -> Result<(), QuantRefError> {
    let f: fn(&[f32], &mut Vec<u8>) = match ty {
        GgmlType::Q4_0 => quantize_q4_0,
        GgmlType::Q4_1 => quantize_q4_1,
        GgmlType::Q5_0 => quantize_q5_0,
        GgmlType::Q5_1 => quantize_q5_1,
        GgmlType::Q8_0 => quantize_q8_0,
        GgmlType::Q2_K => quantize_q2_k,
        GgmlType::Q3_K => quantize_q3_k,
        GgmlType::Q4_K => quantize_q4_k,
        GgmlType::Q5_K => quantize_q5_k,
        GgmlType::Q6_K => quantize_q6_k,
        _ => return Err(QuantRefError::Unsupported(ty)),
    };
    let block = ty.block_size() as usize;
    if !x.len().is_multiple_of(block) {
        return Err(QuantRefError::Size {
            ty,
            n: x.len(),
            block,
        });
    }
    f(x, out);
    Ok(())
}

/// [`quantize_ref`] into a new vector.
pub fn quantize_ref_to_vec(ty: GgmlType, x: &[f32]) -> Result<Vec<u8>, QuantRefError> {
    let mut out = Vec::with_capacity(x.len() / ty.block_size() as usize * ty.type_size() as usize);
    quantize_ref(ty, x, &mut out)?;
    Ok(out)
}

// ------------------------------------------------------------------ helpers

/// ggml-quants.c `nearest_int`: adds 1.5·2^23 so the FPU rounds to an integer (ties to even)
/// and reads it from the low mantissa bits. Exact for |v| ≤ 4194303; beyond that it returns
/// what the bit trick gives, as ggml does in release builds (its assert is compiled out).
#[inline(always)]
pub fn nearest_int(fval: f32) -> i32 {
    let val = fval + 12_582_912.0;
    (val.to_bits() & 0x007f_ffff) as i32 - 0x0040_0000
}

/// C float → int conversion as x86 `cvttss2si` does it: truncation, and `INT_MIN` for NaN and
/// values outside the i32 range (Rust's `as` would saturate instead). The C code then keeps the
/// low byte for its `int8_t`/`uint8_t` casts.
#[inline(always)]
fn cvtt(v: f32) -> i32 {
    let t = v as i32; // saturating; NaN → 0
    if (-2_147_483_648.0..2_147_483_648.0).contains(&v) {
        t
    } else {
        i32::MIN
    }
}

#[inline(always)]
fn put_f16(dst: &mut [u8], v: f32) {
    dst.copy_from_slice(&f32_to_f16_bits(v).to_le_bytes());
}

#[inline(always)]
fn get_f16(src: &[u8]) -> f32 {
    f16_to_f32(u16::from_le_bytes([src[0], src[1]]))
}

/// ggml-quants.c `make_qx_quants`: symmetric quantization of `x` to `L` ∈ [0, 2·nmax), scale
/// searched over 19 candidate inverse scales (`rmse_type` > 0) weighted by `qw` or by the
/// `rmse_type` rule (1: x², 2: 1, 3: |x|, else √|x|). Returns the scale. `x.len()` ≤ 32 (ggml
/// calls it on groups of 16).
fn make_qx_quants(
    nmax: i32,
    x: &[f32],
    l_out: &mut [i8],
    mut rmse_type: i32,
    qw: Option<&[f32]>,
) -> f32 {
    let n = x.len();
    let mut max = 0f32;
    let mut amax = 0f32;
    for &v in x {
        let ax = v.abs();
        if ax > amax {
            amax = ax;
            max = v;
        }
    }
    if amax < GROUP_MAX_EPS {
        l_out[..n].fill(0);
        return 0.0;
    }
    let nmax_f = nmax as f32;
    let mut iscale = (-nmax) as f32 / max;
    if rmse_type == 0 {
        for (l_i, &v) in l_out.iter_mut().zip(x) {
            let l = nearest_int(iscale * v);
            *l_i = (nmax + (-nmax).max((nmax - 1).min(l))) as i8;
        }
        return 1.0 / iscale;
    }
    let mut return_early = false;
    if rmse_type < 0 {
        rmse_type = -rmse_type;
        return_early = true;
    }
    // The weights are pure functions of x (or given), so computing them once changes nothing.
    let mut wbuf = [0f32; 32];
    let wbuf = &mut wbuf[..n]; // callers pass groups of 16
    for (i, w) in wbuf.iter_mut().enumerate() {
        *w = match qw {
            Some(q) => q[i],
            None => match rmse_type {
                1 => x[i] * x[i],
                2 => 1.0,
                3 => x[i].abs(),
                _ => x[i].abs().sqrt(),
            },
        };
    }
    let weight = |i: usize| wbuf[i];
    let mut sumlx = 0f32;
    let mut suml2 = 0f32;
    for i in 0..n {
        let l = (-nmax).max((nmax - 1).min(nearest_int(iscale * x[i])));
        l_out[i] = (l + nmax) as i8;
        let w = weight(i);
        let lf = l as f32;
        sumlx += w * x[i] * lf;
        suml2 += w * lf * lf;
    }
    let mut scale = if suml2 != 0.0 { sumlx / suml2 } else { 0.0 };
    if return_early {
        return if suml2 > 0.0 {
            0.5 * (scale + 1.0 / iscale)
        } else {
            1.0 / iscale
        };
    }
    let mut best = scale * sumlx;
    let mut ls = [0i32; 32];
    let ls = &mut ls[..n]; // callers pass groups of 16
    for is in -9..=9 {
        if is == 0 {
            continue;
        }
        iscale = -(nmax_f + 0.1 * is as f32) / max;
        sumlx = 0.0;
        suml2 = 0.0;
        // Quantize first (independent per element), then the sequential sums in C's order.
        for (li, &v) in ls.iter_mut().zip(x) {
            *li = (-nmax).max((nmax - 1).min(nearest_int(iscale * v)));
        }
        for i in 0..n {
            let w = weight(i);
            let lf = ls[i] as f32;
            sumlx += w * x[i] * lf;
            suml2 += w * lf * lf;
        }
        if suml2 > 0.0 && sumlx * sumlx > best * suml2 {
            for i in 0..n {
                let l = nearest_int(iscale * x[i]);
                l_out[i] = (nmax + (-nmax).max((nmax - 1).min(l))) as i8;
            }
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    scale
}

/// ggml-quants.c `make_q3_quants`: symmetric quantization to `L` ∈ [0, 2·nmax); with
/// `do_rmse`, up to 5 passes of per-element coordinate descent on the x²-weighted error.
/// Returns the scale.
fn make_q3_quants(nmax: i32, x: &[f32], l_out: &mut [i8], do_rmse: bool) -> f32 {
    let n = x.len();
    let mut max = 0f32;
    let mut amax = 0f32;
    for &v in x {
        let ax = v.abs();
        if ax > amax {
            amax = ax;
            max = v;
        }
    }
    if amax < GROUP_MAX_EPS {
        l_out[..n].fill(0);
        return 0.0;
    }
    let iscale = (-nmax) as f32 / max;
    if do_rmse {
        let mut sumlx = 0f32;
        let mut suml2 = 0f32;
        for i in 0..n {
            let l = (-nmax).max((nmax - 1).min(nearest_int(iscale * x[i])));
            l_out[i] = l as i8;
            let w = x[i] * x[i];
            let lf = l as f32;
            sumlx += w * x[i] * lf;
            suml2 += w * lf * lf;
        }
        for _itry in 0..5 {
            let mut n_changed = 0;
            for i in 0..n {
                let w = x[i] * x[i];
                let li = l_out[i] as f32;
                let mut slx = sumlx - w * x[i] * li;
                if slx > 0.0 {
                    let mut sl2 = suml2 - w * li * li;
                    let new_l = nearest_int(x[i] * sl2 / slx);
                    let new_l = (-nmax).max((nmax - 1).min(new_l));
                    if new_l != l_out[i] as i32 {
                        let nl = new_l as f32;
                        slx += w * x[i] * nl;
                        sl2 += w * nl * nl;
                        if sl2 > 0.0 && slx * slx * suml2 > sumlx * sumlx * sl2 {
                            l_out[i] = new_l as i8;
                            sumlx = slx;
                            suml2 = sl2;
                            n_changed += 1;
                        }
                    }
                }
            }
            if n_changed == 0 {
                break;
            }
        }
        for l in l_out[..n].iter_mut() {
            *l = l.wrapping_add(nmax as i8);
        }
        return if suml2 > 0.0 { sumlx / suml2 } else { 0.0 };
    }
    for (l_i, &v) in l_out.iter_mut().zip(x) {
        let l = (-nmax).max((nmax - 1).min(nearest_int(iscale * v)));
        *l_i = (l + nmax) as i8;
    }
    1.0 / iscale
}

/// ggml-quants.c `make_qkx2_quants`: asymmetric quantization `x ≈ scale·L − the_min` with
/// `L` ∈ [0, nmax], weighted by `weights`, trying `nstep + 1` inverse scales
/// `(rmin + rdelta·is + nmax)/(max − min)` and keeping the lowest weighted error (|diff| if
/// `use_mad`, else diff²). Returns `(scale, the_min)`.
#[allow(clippy::too_many_arguments)]
fn make_qkx2_quants(
    nmax: i32,
    x: &[f32],
    weights: &[f32],
    l_out: &mut [u8],
    laux: &mut [u8],
    rmin: f32,
    rdelta: f32,
    nstep: i32,
    use_mad: bool,
) -> (f32, f32) {
    let n = x.len();
    let (weights, l_out, laux) = (&weights[..n], &mut l_out[..n], &mut laux[..n]);
    let mut min = x[0];
    let mut max = x[0];
    let mut sum_w = weights[0];
    let mut sum_x = sum_w * x[0];
    for i in 1..n {
        if x[i] < min {
            min = x[i];
        }
        if x[i] > max {
            max = x[i];
        }
        let w = weights[i];
        sum_w += w;
        sum_x += w * x[i];
    }
    if min > 0.0 {
        min = 0.0;
    }
    if max == min {
        l_out[..n].fill(0);
        return (0.0, -min);
    }
    let nmax_f = nmax as f32;
    let mut iscale = nmax_f / (max - min);
    let mut scale = 1.0 / iscale;
    let mut best_error = 0f32;
    for i in 0..n {
        let l = nearest_int(iscale * (x[i] - min));
        l_out[i] = 0.max(nmax.min(l)) as u8;
        let diff = scale * l_out[i] as f32 + min - x[i];
        let diff = if use_mad { diff.abs() } else { diff * diff };
        best_error += weights[i] * diff;
    }
    if nstep < 1 {
        return (scale, -min);
    }
    for is in 0..=nstep {
        iscale = (rmin + rdelta * is as f32 + nmax_f) / (max - min);
        let mut sum_l = 0f32;
        let mut sum_l2 = 0f32;
        let mut sum_xl = 0f32;
        // Quantize first (independent per element), then the sequential sums in C's order.
        for (la, &v) in laux.iter_mut().zip(x) {
            *la = 0.max(nmax.min(nearest_int(iscale * (v - min)))) as u8;
        }
        for i in 0..n {
            let w = weights[i];
            let lf = laux[i] as f32;
            sum_l += w * lf;
            sum_l2 += w * lf * lf;
            sum_xl += w * lf * x[i];
        }
        let d = sum_w * sum_l2 - sum_l * sum_l;
        if d > 0.0 {
            let mut this_scale = (sum_w * sum_xl - sum_x * sum_l) / d;
            let mut this_min = (sum_l2 * sum_x - sum_l * sum_xl) / d;
            if this_min > 0.0 {
                this_min = 0.0;
                this_scale = sum_xl / sum_l2;
            }
            let mut cur_error = 0f32;
            for i in 0..n {
                let diff = this_scale * laux[i] as f32 + this_min - x[i];
                let diff = if use_mad { diff.abs() } else { diff * diff };
                cur_error += weights[i] * diff;
            }
            if cur_error < best_error {
                l_out[..n].copy_from_slice(&laux[..n]);
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    (scale, -min)
}

/// The signed value of largest magnitude (first one wins ties), as the `amax < fabsf(v)` loops
/// of the Q4_0/Q5_0 reference quantizers find it.
#[inline(always)]
fn signed_absmax(b: &[f32]) -> f32 {
    let mut amax = 0f32;
    let mut max = 0f32;
    for &v in b {
        if amax < v.abs() {
            amax = v.abs();
            max = v;
        }
    }
    max
}

/// (min, max) starting from (FLT_MAX, −FLT_MAX), as the Q4_1/Q5_1 reference quantizers do.
#[inline(always)]
fn min_max(b: &[f32]) -> (f32, f32) {
    let mut min = f32::MAX;
    let mut max = -f32::MAX;
    for &v in b {
        if v < min {
            min = v;
        }
        if v > max {
            max = v;
        }
    }
    (min, max)
}

#[inline(always)]
fn inv(d: f32) -> f32 {
    // C `d ? 1.0f/d : 0.0f`: NaN counts as true.
    if d != 0.0 {
        1.0 / d
    } else {
        0.0
    }
}

fn check_len(x: &[f32], block: usize, ty: &str) {
    assert!(
        x.len().is_multiple_of(block),
        "{ty} needs a multiple of {block} values"
    );
}

// ------------------------------------------------------------------ 32-element blocks

/// Q4_0 (layout per ggml-common.h `block_q4_0`: d f16, `qs[16]`; algorithm per ggml-quants.c
/// `quantize_row_q4_0_ref`): d = max/−8 with max the signed value of largest magnitude,
/// q = min(15, int8(x·(1/d) + 8.5)); element j in the low nibble of `qs[j]`, j+16 in the high.
///
/// Panics if `x.len()` is not a multiple of 32.
pub fn quantize_q4_0(x: &[f32], out: &mut Vec<u8>) {
    check_len(x, QK, "Q4_0");
    out.reserve(x.len() / QK * Q4_0_BYTES);
    for b in x.chunks_exact(QK) {
        let d = signed_absmax(b) / -8.0;
        let id = inv(d);
        let mut blk = [0u8; Q4_0_BYTES];
        put_f16(&mut blk[0..2], d);
        for j in 0..16 {
            let xi0 = 15.min(cvtt(b[j] * id + 8.5) as i8 as i32) as u8;
            let xi1 = 15.min(cvtt(b[16 + j] * id + 8.5) as i8 as i32) as u8;
            blk[2 + j] = xi0 | (xi1 << 4);
        }
        out.extend_from_slice(&blk);
    }
}

/// Q4_1 (layout per ggml-common.h `block_q4_1`: d f16, m f16, `qs[16]`; algorithm per
/// ggml-quants.c `quantize_row_q4_1_ref`): d = (max − min)/15, m = min,
/// q = min(15, int8((x − min)·(1/d) + 0.5)).
///
/// Panics if `x.len()` is not a multiple of 32.
pub fn quantize_q4_1(x: &[f32], out: &mut Vec<u8>) {
    check_len(x, QK, "Q4_1");
    out.reserve(x.len() / QK * Q4_1_BYTES);
    for b in x.chunks_exact(QK) {
        let (min, max) = min_max(b);
        let d = (max - min) / 15.0;
        let id = inv(d);
        let mut blk = [0u8; Q4_1_BYTES];
        put_f16(&mut blk[0..2], d);
        put_f16(&mut blk[2..4], min);
        for j in 0..16 {
            let x0 = (b[j] - min) * id;
            let x1 = (b[16 + j] - min) * id;
            let xi0 = 15.min(cvtt(x0 + 0.5) as i8 as i32) as u8;
            let xi1 = 15.min(cvtt(x1 + 0.5) as i8 as i32) as u8;
            blk[4 + j] = xi0 | (xi1 << 4);
        }
        out.extend_from_slice(&blk);
    }
}

/// Q5_0 (layout per ggml-common.h `block_q5_0`: d f16, `qh[4]` (u32 LE), `qs[16]`; algorithm per
/// ggml-quants.c `quantize_row_q5_0_ref`): d = max/−16, q = min(31, int8(x·(1/d) + 16.5));
/// low nibbles as Q4_0, bit 4 of element j in bit j of qh.
///
/// Panics if `x.len()` is not a multiple of 32.
pub fn quantize_q5_0(x: &[f32], out: &mut Vec<u8>) {
    check_len(x, QK, "Q5_0");
    out.reserve(x.len() / QK * Q5_0_BYTES);
    for b in x.chunks_exact(QK) {
        let d = signed_absmax(b) / -16.0;
        let id = inv(d);
        let mut blk = [0u8; Q5_0_BYTES];
        put_f16(&mut blk[0..2], d);
        let mut qh = 0u32;
        for j in 0..16 {
            let xi0 = 31.min(cvtt(b[j] * id + 16.5) as i8 as i32) as u8;
            let xi1 = 31.min(cvtt(b[16 + j] * id + 16.5) as i8 as i32) as u8;
            blk[6 + j] = (xi0 & 0x0F) | ((xi1 & 0x0F) << 4);
            qh |= (((xi0 & 0x10) >> 4) as u32) << j;
            qh |= (((xi1 & 0x10) >> 4) as u32) << (j + 16);
        }
        blk[2..6].copy_from_slice(&qh.to_le_bytes());
        out.extend_from_slice(&blk);
    }
}

/// Q5_1 (layout per ggml-common.h `block_q5_1`: d f16, m f16, `qh[4]`, `qs[16]`; algorithm per
/// ggml-quants.c `quantize_row_q5_1_ref`): d = (max − min)/31, m = min,
/// q = uint8((x − min)·(1/d) + 0.5) (no clamp, as in ggml).
///
/// Panics if `x.len()` is not a multiple of 32.
pub fn quantize_q5_1(x: &[f32], out: &mut Vec<u8>) {
    check_len(x, QK, "Q5_1");
    out.reserve(x.len() / QK * Q5_1_BYTES);
    for b in x.chunks_exact(QK) {
        let (min, max) = min_max(b);
        let d = (max - min) / 31.0;
        let id = inv(d);
        let mut blk = [0u8; Q5_1_BYTES];
        put_f16(&mut blk[0..2], d);
        put_f16(&mut blk[2..4], min);
        let mut qh = 0u32;
        for j in 0..16 {
            let x0 = (b[j] - min) * id;
            let x1 = (b[16 + j] - min) * id;
            let xi0 = cvtt(x0 + 0.5) as u8;
            let xi1 = cvtt(x1 + 0.5) as u8;
            blk[8 + j] = (xi0 & 0x0F) | ((xi1 & 0x0F) << 4);
            qh |= (((xi0 & 0x10) >> 4) as u32) << j;
            qh |= (((xi1 & 0x10) >> 4) as u32) << (j + 16);
        }
        blk[4..8].copy_from_slice(&qh.to_le_bytes());
        out.extend_from_slice(&blk);
    }
}

/// Q8_0 (layout per ggml-common.h `block_q8_0`: d f16, `qs[32]` i8; algorithm per
/// ggml-quants.c `quantize_row_q8_0_ref`): d = amax/127, q = int8(roundf(x·(1/d))).
///
/// The final conversion is done as GCC's `cvttss2si` + low byte: when amax is subnormal, 1/d
/// is +inf and ggml stores 0 for ±inf products where Rust's saturating `as` would give 127/−1
/// (an earlier encoder of ours did that; the golden tests' all-subnormal blocks catch it).
///
/// Panics if `x.len()` is not a multiple of 32.
pub fn quantize_q8_0(x: &[f32], out: &mut Vec<u8>) {
    check_len(x, QK, "Q8_0");
    out.reserve(x.len() / QK * Q8_0_BYTES);
    for b in x.chunks_exact(QK) {
        let mut amax = 0f32;
        for &v in b {
            // C MAX(amax, fabsf(v)) = amax > |v| ? amax : |v|.
            amax = if amax > v.abs() { amax } else { v.abs() };
        }
        let d = amax / 127.0;
        let id = inv(d);
        let mut blk = [0u8; Q8_0_BYTES];
        put_f16(&mut blk[0..2], d);
        for (q, &v) in blk[2..].iter_mut().zip(b) {
            *q = cvtt((v * id).round()) as u8;
        }
        out.extend_from_slice(&blk);
    }
}

// ------------------------------------------------------------------ K-quants (256 elements)

/// Q2_K (layout per ggml-common.h `block_q2_K`: `scales[16]` (4-bit scale | 4-bit min << 4),
/// `qs[64]`, d f16, dmin f16; algorithm per ggml-quants.c `quantize_row_q2_K_ref`): 16
/// sub-blocks of 16 through `make_qkx2_quants(nmax 3, weights |x|, rmin −0.5, rdelta 0.1,
/// 15 steps, MAD)`, scales and mins quantized to 4 bits against their maxima, then every
/// element re-quantized with the stored scales.
///
/// Panics if `x.len()` is not a multiple of 256.
pub fn quantize_q2_k(x: &[f32], out: &mut Vec<u8>) {
    check_len(x, QK_K, "Q2_K");
    out.reserve(x.len() / QK_K * Q2_K_BYTES);
    let mut l = [0u8; QK_K];
    let mut laux = [0u8; 16];
    let mut weights = [0f32; 16];
    let mut mins = [0f32; 16];
    let mut scales = [0f32; 16];
    let q4scale = 15f32;
    for b in x.chunks_exact(QK_K) {
        let mut blk = [0u8; Q2_K_BYTES];
        let mut max_scale = 0f32;
        let mut max_min = 0f32;
        for j in 0..16 {
            let xs = &b[16 * j..16 * j + 16];
            for (w, v) in weights.iter_mut().zip(xs) {
                *w = v.abs();
            }
            let (s, m) = make_qkx2_quants(
                3,
                xs,
                &weights,
                &mut l[16 * j..16 * j + 16],
                &mut laux,
                -0.5,
                0.1,
                15,
                true,
            );
            scales[j] = s;
            mins[j] = m;
            if s > max_scale {
                max_scale = s;
            }
            if m > max_min {
                max_min = m;
            }
        }
        let (sc, rest) = blk.split_at_mut(16);
        if max_scale > 0.0 {
            let iscale = q4scale / max_scale;
            for j in 0..16 {
                sc[j] = nearest_int(iscale * scales[j]) as u8;
            }
            put_f16(&mut rest[64..66], max_scale / q4scale);
        } else {
            sc.fill(0);
            put_f16(&mut rest[64..66], 0.0);
        }
        if max_min > 0.0 {
            let iscale = q4scale / max_min;
            for j in 0..16 {
                let lm = nearest_int(iscale * mins[j]);
                sc[j] |= lm.wrapping_shl(4) as u8;
            }
            put_f16(&mut rest[66..68], max_min / q4scale);
        } else {
            put_f16(&mut rest[66..68], 0.0);
        }
        let d_all = get_f16(&rest[64..66]);
        let dmin_all = get_f16(&rest[66..68]);
        for j in 0..16 {
            let d = d_all * (sc[j] & 0xF) as f32;
            if d == 0.0 {
                continue;
            }
            let dm = dmin_all * (sc[j] >> 4) as f32;
            for ii in 0..16 {
                let q = nearest_int((b[16 * j + ii] + dm) / d);
                l[16 * j + ii] = 0.max(3.min(q)) as u8;
            }
        }
        let qs = &mut rest[..64];
        for j in (0..QK_K).step_by(128) {
            for k in 0..32 {
                qs[j / 4 + k] =
                    l[j + k] | (l[j + k + 32] << 2) | (l[j + k + 64] << 4) | (l[j + k + 96] << 6);
            }
        }
        out.extend_from_slice(&blk);
    }
}

/// Q3_K (layout per ggml-common.h `block_q3_K`: `hmask[32]`, `qs[64]`, `scales[12]` (16 six-bit
/// scales, offset 32), d f16; algorithm per ggml-quants.c `quantize_row_q3_K_ref`): 16
/// sub-blocks of 16 through `make_q3_quants(nmax 4, rmse)`, scales quantized to 6 bits against
/// the one of largest magnitude (d = max/−32), then every element re-quantized.
///
/// Panics if `x.len()` is not a multiple of 256.
pub fn quantize_q3_k(x: &[f32], out: &mut Vec<u8>) {
    check_len(x, QK_K, "Q3_K");
    out.reserve(x.len() / QK_K * Q3_K_BYTES);
    let mut l = [0i8; QK_K];
    let mut scales = [0f32; 16];
    for b in x.chunks_exact(QK_K) {
        let mut blk = [0u8; Q3_K_BYTES];
        let mut max_scale = 0f32;
        let mut amax = 0f32;
        for j in 0..16 {
            scales[j] = make_q3_quants(
                4,
                &b[16 * j..16 * j + 16],
                &mut l[16 * j..16 * j + 16],
                true,
            );
            let scale = scales[j].abs();
            if scale > amax {
                amax = scale;
                max_scale = scales[j];
            }
        }
        let (hmask, rest) = blk.split_at_mut(32);
        let (qs, rest) = rest.split_at_mut(64);
        let (sc, dbytes) = rest.split_at_mut(12);
        if max_scale != 0.0 {
            let iscale = -32.0 / max_scale;
            for j in 0..16 {
                let li = nearest_int(iscale * scales[j]) as i8;
                let mut li = ((-32i32).max(31.min(li as i32)) + 32) as i8;
                if j < 8 {
                    sc[j] = (li & 0xF) as u8;
                } else {
                    sc[j - 8] |= ((li & 0xF) << 4) as u8;
                }
                li >>= 4;
                sc[j % 4 + 8] |= ((li as i32) << (2 * (j / 4))) as u8;
            }
            put_f16(dbytes, 1.0 / iscale);
        } else {
            put_f16(dbytes, 0.0);
        }
        let d_all = get_f16(dbytes);
        for j in 0..16 {
            let lo = (if j < 8 { sc[j] & 0xF } else { sc[j - 8] >> 4 }) as i32;
            let s = ((lo | (((sc[8 + j % 4] >> (2 * (j / 4))) & 3) as i32) << 4) - 32) as i8;
            let d = d_all * s as f32;
            if d == 0.0 {
                continue;
            }
            for ii in 0..16 {
                let q = nearest_int(b[16 * j + ii] / d);
                l[16 * j + ii] = ((-4i32).max(3.min(q)) + 4) as i8;
            }
        }
        let mut m = 0usize;
        let mut hm = 1u8;
        for lj in l.iter_mut() {
            if *lj > 3 {
                hmask[m] |= hm;
                *lj -= 4;
            }
            m += 1;
            if m == QK_K / 8 {
                m = 0;
                hm = hm.wrapping_shl(1);
            }
        }
        for j in (0..QK_K).step_by(128) {
            for k in 0..32 {
                let v = (l[j + k] as i32)
                    | ((l[j + k + 32] as i32) << 2)
                    | ((l[j + k + 64] as i32) << 4)
                    | ((l[j + k + 96] as i32) << 6);
                qs[j / 4 + k] = v as u8;
            }
        }
        out.extend_from_slice(&blk);
    }
}

/// Shared part of Q4_K and Q5_K: eight sub-blocks of 32 through `make_qkx2_quants` with
/// weights `sqrt(mean x²) + |x|`, then 6-bit scales and mins packed as `get_scale_min_k4`
/// reads them, d and dmin (f16) written to `head[0..4]` and `scales[12]` to `head[4..16]`,
/// and every element re-quantized to `l` ∈ [0, nmax].
fn quantize_kx_super_block(
    b: &[f32],
    nmax: i32,
    rmin: f32,
    nstep: i32,
    head: &mut [u8],
    l: &mut [u8; QK_K],
) {
    let mut laux = [0u8; 32];
    let mut weights = [0f32; 32];
    let mut mins = [0f32; 8];
    let mut scales = [0f32; 8];
    let mut max_scale = 0f32;
    let mut max_min = 0f32;
    for j in 0..8 {
        let xs = &b[32 * j..32 * j + 32];
        let mut sum_x2 = 0f32;
        for &v in xs {
            sum_x2 += v * v;
        }
        let av_x = (sum_x2 / 32.0).sqrt();
        for (w, v) in weights.iter_mut().zip(xs) {
            *w = av_x + v.abs();
        }
        let (s, m) = make_qkx2_quants(
            nmax,
            xs,
            &weights,
            &mut l[32 * j..32 * j + 32],
            &mut laux,
            rmin,
            0.1,
            nstep,
            false,
        );
        scales[j] = s;
        mins[j] = m;
        if s > max_scale {
            max_scale = s;
        }
        if m > max_min {
            max_min = m;
        }
    }
    let inv_scale = if max_scale > 0.0 {
        63.0 / max_scale
    } else {
        0.0
    };
    let inv_min = if max_min > 0.0 { 63.0 / max_min } else { 0.0 };
    let (dd, sc) = head.split_at_mut(4);
    for j in 0..8 {
        let ls = 63.min(nearest_int(inv_scale * scales[j]) as u8);
        let lm = 63.min(nearest_int(inv_min * mins[j]) as u8);
        if j < 4 {
            sc[j] = ls;
            sc[j + 4] = lm;
        } else {
            sc[j + 4] = (ls & 0xF) | ((lm & 0xF) << 4);
            sc[j - 4] |= (ls >> 4) << 6;
            sc[j] |= (lm >> 4) << 6;
        }
    }
    put_f16(&mut dd[0..2], max_scale / 63.0);
    put_f16(&mut dd[2..4], max_min / 63.0);
    let d_all = get_f16(&dd[0..2]);
    let dmin_all = get_f16(&dd[2..4]);
    for j in 0..8 {
        let (s, m) = get_scale_min_k4(j, sc);
        let d = d_all * s as f32;
        if d == 0.0 {
            continue;
        }
        let dm = dmin_all * m as f32;
        for ii in 0..32 {
            let q = nearest_int((b[32 * j + ii] + dm) / d);
            l[32 * j + ii] = 0.max(nmax.min(q)) as u8;
        }
    }
}

/// Q4_K (layout per ggml-common.h `block_q4_K`: d f16, dmin f16, `scales[12]` (eight 6-bit
/// scale/min pairs, `get_scale_min_k4`), `qs[128]`; algorithm per ggml-quants.c
/// `quantize_row_q4_K_ref`): `make_qkx2_quants(nmax 15, rmin −1, rdelta 0.1, 20 steps)` per
/// 32-element sub-block; in each 64-element chunk element l is the low nibble of `qs[l]`,
/// element 32 + l the high one.
///
/// Panics if `x.len()` is not a multiple of 256.
pub fn quantize_q4_k(x: &[f32], out: &mut Vec<u8>) {
    check_len(x, QK_K, "Q4_K");
    out.reserve(x.len() / QK_K * Q4_K_BYTES);
    let mut l = [0u8; QK_K];
    for b in x.chunks_exact(QK_K) {
        let mut blk = [0u8; Q4_K_BYTES];
        let (head, qs) = blk.split_at_mut(16);
        quantize_kx_super_block(b, 15, -1.0, 20, head, &mut l);
        for (c, q) in qs.chunks_exact_mut(32).enumerate() {
            let j = 64 * c;
            for k in 0..32 {
                q[k] = l[j + k] | (l[j + k + 32] << 4);
            }
        }
        out.extend_from_slice(&blk);
    }
}

/// Q5_K (layout per ggml-common.h `block_q5_K`: d f16, dmin f16, `scales[12]`, `qh[32]`,
/// `qs[128]`; algorithm per ggml-quants.c `quantize_row_q5_K_ref`): as Q4_K with
/// `make_qkx2_quants(nmax 31, rmin −0.5, rdelta 0.1, 15 steps)`; bit 4 of element 64c + l goes
/// to bit 2c of `qh[l]`, of element 64c + 32 + l to bit 2c + 1.
///
/// Panics if `x.len()` is not a multiple of 256.
pub fn quantize_q5_k(x: &[f32], out: &mut Vec<u8>) {
    check_len(x, QK_K, "Q5_K");
    out.reserve(x.len() / QK_K * Q5_K_BYTES);
    let mut l = [0u8; QK_K];
    for b in x.chunks_exact(QK_K) {
        let mut blk = [0u8; Q5_K_BYTES];
        let (head, rest) = blk.split_at_mut(16);
        quantize_kx_super_block(b, 31, -0.5, 15, head, &mut l);
        let (qh, ql) = rest.split_at_mut(32);
        let mut m1 = 1u8;
        let mut m2 = 2u8;
        for (c, q) in ql.chunks_exact_mut(32).enumerate() {
            let n = 64 * c;
            for j in 0..32 {
                let mut l1 = l[n + j];
                if l1 > 15 {
                    l1 -= 16;
                    qh[j] |= m1;
                }
                let mut l2 = l[n + j + 32];
                if l2 > 15 {
                    l2 -= 16;
                    qh[j] |= m2;
                }
                q[j] = l1 | (l2 << 4);
            }
            m1 = m1.wrapping_shl(2);
            m2 = m2.wrapping_shl(2);
        }
        out.extend_from_slice(&blk);
    }
}

/// Q6_K (layout per ggml-common.h `block_q6_K`: `ql[128]`, `qh[64]`, `scales[16]` i8, d f16;
/// algorithm per ggml-quants.c `quantize_row_q6_K_ref`): 16 sub-blocks of 16 through
/// `make_qx_quants(nmax 32, rmse_type 1)`, scales quantized to i8 against the one of largest
/// magnitude (d = max/−128), then every element re-quantized to [0, 63]; a super-block whose
/// scales are all below 1e-15 is all zero bytes.
///
/// Panics if `x.len()` is not a multiple of 256.
pub fn quantize_q6_k(x: &[f32], out: &mut Vec<u8>) {
    check_len(x, QK_K, "Q6_K");
    out.reserve(x.len() / QK_K * Q6_K_BYTES);
    let mut l = [0i8; QK_K];
    let mut scales = [0f32; 16];
    for b in x.chunks_exact(QK_K) {
        let mut blk = [0u8; Q6_K_BYTES];
        let mut max_scale = 0f32;
        let mut max_abs_scale = 0f32;
        for ib in 0..16 {
            let scale = make_qx_quants(
                32,
                &b[16 * ib..16 * ib + 16],
                &mut l[16 * ib..16 * ib + 16],
                1,
                None,
            );
            scales[ib] = scale;
            let abs_scale = scale.abs();
            if abs_scale > max_abs_scale {
                max_abs_scale = abs_scale;
                max_scale = scale;
            }
        }
        if max_abs_scale < GROUP_MAX_EPS {
            // memset 0, then d = fp16(0) = 0: all zero bytes.
            out.extend_from_slice(&blk);
            continue;
        }
        let (ql, rest) = blk.split_at_mut(128);
        let (qh, rest) = rest.split_at_mut(64);
        let (sc, dbytes) = rest.split_at_mut(16);
        let iscale = -128.0 / max_scale;
        put_f16(dbytes, 1.0 / iscale);
        for ib in 0..16 {
            sc[ib] = 127.min(nearest_int(iscale * scales[ib])) as i8 as u8;
        }
        let d_all = get_f16(dbytes);
        for j in 0..16 {
            let d = d_all * (sc[j] as i8) as f32;
            if d == 0.0 {
                continue;
            }
            for ii in 0..16 {
                let q = nearest_int(b[16 * j + ii] / d);
                l[16 * j + ii] = ((-32i32).max(31.min(q)) + 32) as i8;
            }
        }
        for h in 0..2 {
            let j = 128 * h;
            let ql = &mut ql[64 * h..64 * h + 64];
            let qh = &mut qh[32 * h..32 * h + 32];
            for k in 0..32 {
                let q1 = (l[j + k] & 0xF) as u8;
                let q2 = (l[j + k + 32] & 0xF) as u8;
                let q3 = (l[j + k + 64] & 0xF) as u8;
                let q4 = (l[j + k + 96] & 0xF) as u8;
                ql[k] = q1 | (q3 << 4);
                ql[k + 32] = q2 | (q4 << 4);
                qh[k] = ((l[j + k] >> 4) as u8)
                    | (((l[j + k + 32] >> 4) as u8) << 2)
                    | (((l[j + k + 64] >> 4) as u8) << 4)
                    | (((l[j + k + 96] >> 4) as u8) << 6);
            }
        }
        out.extend_from_slice(&blk);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn supported_is_q4_0_to_q6_k() {
        use GgmlType as T;
        assert_eq!(
            SUPPORTED,
            [
                T::Q4_0,
                T::Q4_1,
                T::Q5_0,
                T::Q5_1,
                T::Q8_0,
                T::Q2_K,
                T::Q3_K,
                T::Q4_K,
                T::Q5_K,
                T::Q6_K
            ]
        );
    }

    #[test]
    fn nearest_int_rounds_half_to_even() {
        assert_eq!(nearest_int(0.5), 0);
        assert_eq!(nearest_int(1.5), 2);
        assert_eq!(nearest_int(2.5), 2);
        assert_eq!(nearest_int(-0.5), 0);
        assert_eq!(nearest_int(-1.5), -2);
        assert_eq!(nearest_int(-3.7), -4);
        assert_eq!(nearest_int(4_194_303.0), 4_194_303);
    }

    #[test]
    fn c_float_casts_follow_cvttss2si() {
        assert_eq!(cvtt(-1.7), -1);
        assert_eq!(cvtt(f32::NAN), i32::MIN);
        assert_eq!(cvtt(f32::INFINITY) as i8, 0);
        assert_eq!(cvtt(3e9), i32::MIN);
    }

    #[test]
    fn q4_0_block_by_hand() {
        // max = -4 → d = 0.5, id = 2: x = -4 → int8(-8 + 8.5) = 0; x = 1 → int8(2 + 8.5) = 10.
        let mut x = [1f32; 32];
        x[0] = -4.0;
        let out = quantize_ref_to_vec(GgmlType::Q4_0, &x).unwrap();
        assert_eq!(out.len(), 18);
        assert_eq!(u16::from_le_bytes([out[0], out[1]]), 0x3800); // 0.5
        assert_eq!(out[2], 10 << 4); // element 0 → 0, element 16 → 10
        assert_eq!(out[3], 10 | (10 << 4));
    }

    #[test]
    fn sizes_and_errors() {
        let x = vec![0.25f32; 512];
        for &ty in SUPPORTED {
            let out = quantize_ref_to_vec(ty, &x).unwrap();
            assert_eq!(out.len() as u64, ty.row_bytes(512).unwrap(), "{ty}");
        }
        assert_eq!(
            quantize_ref_to_vec(GgmlType::Q4_K, &x[..300]),
            Err(QuantRefError::Size {
                ty: GgmlType::Q4_K,
                n: 300,
                block: 256
            })
        );
        assert_eq!(
            quantize_ref_to_vec(GgmlType::IQ2_XXS, &x),
            Err(QuantRefError::Unsupported(GgmlType::IQ2_XXS))
        );
    }
}
