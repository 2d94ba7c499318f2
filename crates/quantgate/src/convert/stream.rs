//! Float source tensor (F32, F16, BF16) → F32, F16 or BF16 output, streamed in blocks of rows:
//! each block is read from the shard (`pread`), converted on all cores, and written, so only
//! one block of source and one of output are in memory. The values are those of
//! [`HfDir::to_f32`] followed by [`gguf::quant::encode_f16`] / `encode_bf16` / `to_le_bytes`
//! (the encoders convert_hf_to_gguf.py's numpy casts match), element for element.

use std::io::Write;

use gguf::GgmlType;
use rayon::prelude::*;

use crate::source::hf::{HfDir, SourceDtype, SourceTensor};

/// Output bytes per block (rounded to whole rows, or whole heads when permuting).
const BLOCK_BYTES: usize = 8 << 20;

/// What the conversion saw, summed over the tensor.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// NaN or ±inf source values.
    pub nonfinite: usize,
    /// Finite values that became ±inf in f16 (|x| > 65504 after rounding).
    pub overflow: usize,
    /// Non-zero values that became ±0 in f16.
    pub underflow: usize,
}

impl std::ops::Add for Counts {
    type Output = Counts;
    fn add(self, o: Counts) -> Counts {
        Counts {
            nonfinite: self.nonfinite + o.nonfinite,
            overflow: self.overflow + o.overflow,
            underflow: self.underflow + o.underflow,
        }
    }
}

/// The Q/K row permutation of [`crate::source::permute::permute_qk`]: (rows, heads).
pub type Permute = Option<(usize, usize)>;

/// The source row that output row `dst` holds under `permute` (llama.cpp's Q/K
/// interleave: within each head, output row 2i+j is source row j·hd/2 + i).
fn source_row(dst: usize, permute: Permute) -> usize {
    match permute {
        None => dst,
        Some((rows, heads)) => {
            let hd = rows / heads;
            let (h, k) = (dst / hd, dst % hd);
            h * hd + (k % 2) * (hd / 2) + k / 2
        }
    }
}

/// Converts `src` to `ty` (F32, F16 or BF16), writing `rows` rows to `out`; `check` sees the
/// running counts after each block and may stop the conversion with an error.
///
/// Errors: read/write errors, or what `check` returns.
pub fn convert(
    hf: &HfDir,
    src: &SourceTensor,
    ty: GgmlType,
    (rows, permute): (usize, Permute),
    out: &mut dyn Write,
    check: &mut dyn FnMut(Counts) -> std::io::Result<()>,
) -> std::io::Result<Counts> {
    let (in_sz, out_sz) = (src.dtype.size(), out_size(ty));
    debug_assert!(in_sz > 0, "float sources only");
    let n: usize = src.shape.iter().product();
    let cols = n / rows.max(1);
    // Whole heads per block when permuting, so a block's source rows are one contiguous range.
    let unit = permute.map_or(1, |(r, h)| r / h);
    let per_block = ((BLOCK_BYTES / (cols * out_sz).max(1)) / unit).max(1) * unit;
    let row_bytes = cols * in_sz;
    let mut total = Counts::default();
    // Block k is converted on the pool while block k−1 is written by this thread (the write
    // is a kernel copy; overlapping it with the conversion hides one of them).
    std::thread::scope(|scope| -> std::io::Result<Counts> {
        let mut pending: Option<Vec<u8>> = None;
        let mut spare: Vec<u8> = Vec::new();
        for r0 in (0..rows).step_by(per_block) {
            let r1 = (r0 + per_block).min(rows);
            let mut sbuf = vec![0u8; (r1 - r0) * row_bytes];
            hf.read_at(src, (r0 * row_bytes) as u64, &mut sbuf)?;
            let mut obuf = std::mem::take(&mut spare);
            obuf.resize((r1 - r0) * cols * out_sz, 0);
            let dt = src.dtype;
            let job = scope.spawn(move || {
                let c = obuf
                    .par_chunks_mut(cols * out_sz)
                    .enumerate()
                    .map(|(i, o)| {
                        let s = source_row(r0 + i, permute) - r0;
                        convert_row(&sbuf[s * row_bytes..(s + 1) * row_bytes], dt, o, ty)
                    })
                    .reduce(Counts::default, |a, b| a + b);
                (obuf, c)
            });
            if let Some(b) = pending.take() {
                out.write_all(&b)?;
                spare = b;
            }
            let (obuf, c) = job
                .join()
                .map_err(|_| std::io::Error::other("conversion panicked"))?;
            total = total + c;
            check(total)?;
            pending = Some(obuf);
        }
        if let Some(b) = pending {
            out.write_all(&b)?;
        }
        Ok(total)
    })
}

fn out_size(ty: GgmlType) -> usize {
    if ty == GgmlType::F32 {
        4
    } else {
        2
    }
}

/// One row: decode each source element to f32 (exact), encode as `ty`, count. F16 output goes
/// through the CPU's F16C conversion where the host has it (the same round-to-nearest-even;
/// rows with NaN are redone by the portable encoder, whose NaN bits are the reference's).
fn convert_row(input: &[u8], dt: SourceDtype, out: &mut [u8], ty: GgmlType) -> Counts {
    #[cfg(target_arch = "x86_64")]
    if ty == GgmlType::F16
        && std::arch::is_x86_feature_detected!("avx2")
        && std::arch::is_x86_feature_detected!("f16c")
    {
        // SAFETY: AVX2 and F16C were detected on this CPU.
        let c = unsafe { simd::to_f16(input, dt, out) };
        if c.nonfinite == 0 {
            return c;
        }
    }
    convert_row_portable(input, dt, out, ty)
}

/// [`convert_row`] element by element, with the reference encoders.
fn convert_row_portable(input: &[u8], dt: SourceDtype, out: &mut [u8], ty: GgmlType) -> Counts {
    let mut c = Counts::default();
    let osz = out_size(ty);
    let isz = dt.size();
    for (i, o) in input.chunks_exact(isz).zip(out.chunks_exact_mut(osz)) {
        let x = match dt {
            SourceDtype::F32 => f32::from_le_bytes([i[0], i[1], i[2], i[3]]),
            SourceDtype::F16 => gguf::dequant::f16_to_f32(u16::from_le_bytes([i[0], i[1]])),
            _ => f32::from_bits((u16::from_le_bytes([i[0], i[1]]) as u32) << 16),
        };
        c.nonfinite += usize::from(!x.is_finite());
        match ty {
            GgmlType::F32 => o.copy_from_slice(&x.to_le_bytes()),
            GgmlType::BF16 => o.copy_from_slice(&gguf::quant::f32_to_bf16_bits(x).to_le_bytes()),
            _ => {
                let h = gguf::quant::f32_to_f16_bits(x);
                let mag = h & 0x7fff;
                c.overflow += usize::from(x.is_finite() && mag == 0x7c00);
                c.underflow += usize::from(x != 0.0 && mag == 0);
                o.copy_from_slice(&h.to_le_bytes());
            }
        }
    }
    c
}

/// F32/F16/BF16 → F16, 8 elements at a time with AVX2 + F16C (`vcvtps2ph`, round to nearest
/// even, overflow to ±inf: IEEE 754 binary16, as the portable encoder).
#[cfg(target_arch = "x86_64")]
mod simd {
    use std::arch::x86_64::*;

    use super::{Counts, SourceDtype};

    /// Converts `input` (elements of `dt`) into `out` (f16); the tail after the last group of 8
    /// goes through the portable encoder.
    ///
    /// # Safety
    /// The CPU must have AVX2 and F16C.
    #[target_feature(enable = "avx2,f16c")]
    pub unsafe fn to_f16(input: &[u8], dt: SourceDtype, out: &mut [u8]) -> Counts {
        let isz = dt.size();
        let n = out.len() / 2;
        let whole = n / 8 * 8;
        let mut c = Counts::default();
        let exp = _mm256_set1_epi32(0x7f80_0000);
        let abs = _mm256_set1_epi32(0x7fff_ffff);
        let zero = _mm256_setzero_si256();
        for g in (0..whole).step_by(8) {
            let src = input.as_ptr().add(g * isz);
            let x: __m256 = match dt {
                SourceDtype::F32 => _mm256_loadu_ps(src as *const f32),
                SourceDtype::F16 => _mm256_cvtph_ps(_mm_loadu_si128(src as *const __m128i)),
                _ => {
                    let h = _mm256_cvtepu16_epi32(_mm_loadu_si128(src as *const __m128i));
                    _mm256_castsi256_ps(_mm256_slli_epi32::<16>(h))
                }
            };
            let h = _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(x);
            _mm_storeu_si128(out.as_mut_ptr().add(g * 2) as *mut __m128i, h);
            let xi = _mm256_castps_si256(x);
            let nonfinite = _mm256_cmpeq_epi32(_mm256_and_si256(xi, exp), exp);
            let nonzero = _mm256_xor_si256(
                _mm256_cmpeq_epi32(_mm256_and_si256(xi, abs), zero),
                _mm256_set1_epi32(-1),
            );
            // f16 magnitudes widened to 32 bits.
            let hm = _mm256_and_si256(_mm256_cvtepu16_epi32(h), _mm256_set1_epi32(0x7fff));
            let inf = _mm256_cmpeq_epi32(hm, _mm256_set1_epi32(0x7c00));
            let hzero = _mm256_cmpeq_epi32(hm, zero);
            let count = |m: __m256i| {
                (_mm256_movemask_ps(_mm256_castsi256_ps(m)) as u32).count_ones() as usize
            };
            c.nonfinite += count(nonfinite);
            c.overflow += count(_mm256_andnot_si256(nonfinite, inf));
            c.underflow += count(_mm256_and_si256(nonzero, hzero));
        }
        let tail = super::convert_row_portable(
            &input[whole * isz..],
            dt,
            &mut out[whole * 2..],
            gguf::GgmlType::F16,
        );
        c + tail
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn source_rows_follow_permute_qk() {
        // 2 heads of 4 rows, one column: permute_qk's output read back row by row.
        let x: Vec<usize> = (0..8).collect();
        let p = crate::source::permute::permute_qk(&x, 8, 2);
        let via: Vec<usize> = (0..8).map(|r| source_row(r, Some((8, 2)))).collect();
        assert_eq!(p, via);
        assert_eq!(source_row(5, None), 5);
    }

    /// Every f16-relevant bit pattern class, in all three source dtypes, through the fast path:
    /// the bytes of the reference encoder and its counts.
    #[test]
    fn the_fast_f16_path_equals_the_reference_encoder() {
        let mut vals: Vec<f32> = Vec::new();
        // Every finite bf16 value (all exponents, mantissas, both signs).
        for b in 0..=u16::MAX {
            let v = f32::from_bits((b as u32) << 16);
            if v.is_finite() {
                vals.push(v);
            }
        }
        // Ties and near-ties of f16 rounding, subnormals, the overflow edge.
        for k in 0..4096u32 {
            vals.push(f32::from_bits(0x3f80_0000 + k * 0x1000 + 0x0fff));
            vals.push(f32::from_bits(0x3380_0000 + k * 0x800));
            vals.push(65504.0 + k as f32 * 0.01);
        }
        for dt in [SourceDtype::F32, SourceDtype::BF16, SourceDtype::F16] {
            let xs: Vec<f32> = match dt {
                SourceDtype::F32 => vals.clone(),
                SourceDtype::BF16 => vals
                    .iter()
                    .map(|v| f32::from_bits(v.to_bits() & 0xffff_0000))
                    .collect(),
                _ => vals
                    .iter()
                    .map(|v| gguf::dequant::f16_to_f32(gguf::quant::f32_to_f16_bits(*v)))
                    .collect(),
            };
            let bytes: Vec<u8> = match dt {
                SourceDtype::F32 => xs.iter().flat_map(|v| v.to_le_bytes()).collect(),
                SourceDtype::BF16 => xs
                    .iter()
                    .flat_map(|v| ((v.to_bits() >> 16) as u16).to_le_bytes())
                    .collect(),
                _ => xs
                    .iter()
                    .flat_map(|v| gguf::quant::f32_to_f16_bits(*v).to_le_bytes())
                    .collect(),
            };
            let mut fast = vec![0u8; xs.len() * 2];
            let mut slow = vec![0u8; xs.len() * 2];
            assert!(
                std::arch::is_x86_feature_detected!("f16c"),
                "this test needs F16C"
            );
            // SAFETY: AVX2 and F16C are present (asserted; AVX2 comes with every F16C host
            // ggml's variants target).
            let cf = unsafe { simd::to_f16(&bytes, dt, &mut fast) };
            let cs = convert_row_portable(&bytes, dt, &mut slow, GgmlType::F16);
            assert_eq!(cf, cs, "{dt:?}");
            assert!(fast == slow, "{dt:?}: bytes differ");
            if dt != SourceDtype::F16 {
                assert!(cs.overflow > 1000 && cs.underflow > 1000, "{dt:?} {cs:?}");
            }
        }
    }

    #[test]
    fn rows_encode_as_the_reference_encoders_and_count() {
        let vals = [1.0f32, -2.5, 70000.0, 1e-9, 0.0, f32::NAN, 65504.0];
        let bytes: Vec<u8> = vals.iter().flat_map(|v| v.to_le_bytes()).collect();
        let mut out = vec![0u8; vals.len() * 2];
        let c = convert_row(&bytes, SourceDtype::F32, &mut out, GgmlType::F16);
        let mut want = Vec::new();
        // NaN (allowed with --allow-nonfinite) takes the portable encoder's bits.
        gguf::quant::encode_f16(&vals, &mut want);
        assert_eq!(out, want);
        assert_eq!(
            c,
            Counts {
                nonfinite: 1,
                overflow: 1,
                underflow: 1
            }
        );
        let mut out = vec![0u8; vals.len() * 2];
        convert_row(&bytes, SourceDtype::F32, &mut out, GgmlType::BF16);
        let mut want = Vec::new();
        gguf::quant::encode_bf16(&vals, &mut want);
        assert_eq!(out, want);
    }
}
