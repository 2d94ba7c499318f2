//! Float source tensor (F32, F16, BF16) → F32, F16 or BF16 output, streamed in blocks of rows:
//! each block is read from the shard (`pread`), converted on all cores, and written, so only
//! one block of source and one of output are in memory. The values are those of
//! [`HfDir::to_f32`] followed by [`gguf::quant::encode_f16`] / `encode_bf16` / `to_le_bytes`
//! (the encoders convert_hf_to_gguf.py's numpy casts match), element for element.

use std::io::Write;

use gguf::GgmlType;
use rayon::prelude::*;

use super::hf::{HfDir, SourceDtype, SourceTensor};

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

/// The Q/K row permutation of [`super::permute_qk`]: (rows, heads).
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
    let mut total = Counts::default();
    let (mut sbuf, mut obuf) = (Vec::new(), Vec::new());
    for r0 in (0..rows).step_by(per_block) {
        let r1 = (r0 + per_block).min(rows);
        let row_bytes = cols * in_sz;
        sbuf.resize((r1 - r0) * row_bytes, 0);
        hf.read_at(src, (r0 * row_bytes) as u64, &mut sbuf)?;
        obuf.resize((r1 - r0) * cols * out_sz, 0);
        let c = obuf
            .par_chunks_mut(cols * out_sz)
            .enumerate()
            .map(|(i, o)| {
                let s = source_row(r0 + i, permute) - r0;
                let input = &sbuf[s * row_bytes..(s + 1) * row_bytes];
                convert_row(input, src.dtype, o, ty)
            })
            .reduce(Counts::default, |a, b| a + b);
        total = total + c;
        check(total)?;
        out.write_all(&obuf)?;
    }
    Ok(total)
}

fn out_size(ty: GgmlType) -> usize {
    if ty == GgmlType::F32 {
        4
    } else {
        2
    }
}

/// One row: decode each source element to f32 (exact), encode as `ty`, count.
fn convert_row(input: &[u8], dt: SourceDtype, out: &mut [u8], ty: GgmlType) -> Counts {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn source_rows_follow_permute_qk() {
        // 2 heads of 4 rows, one column: permute_qk's output read back row by row.
        let x: Vec<usize> = (0..8).collect();
        let p = super::super::permute_qk(&x, 8, 2);
        let via: Vec<usize> = (0..8).map(|r| source_row(r, Some((8, 2)))).collect();
        assert_eq!(p, via);
        assert_eq!(source_row(5, None), 5);
    }

    #[test]
    fn rows_encode_as_the_reference_encoders_and_count() {
        let vals = [1.0f32, -2.5, 70000.0, 1e-9, 0.0, f32::NAN, 65504.0];
        let bytes: Vec<u8> = vals.iter().flat_map(|v| v.to_le_bytes()).collect();
        let mut out = vec![0u8; vals.len() * 2];
        let c = convert_row(&bytes, SourceDtype::F32, &mut out, GgmlType::F16);
        let mut want = Vec::new();
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
