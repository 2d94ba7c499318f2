//! `inspect --check-dequant`: every tensor dequantized by our Rust code and by ggml's own
//! `to_float` (through llama-cpp-sys-2), compared as u32 bit patterns so -0.0 and NaN count.
//! ggml has no `to_float` for F32 because it uses F32 data in place; there the reference is the
//! stored little-endian bit pattern itself.

use gguf::{dequant, Gguf};
use serde::Serialize;

/// Elements compared per step (bounds memory for large tensors).
const CHUNK_ELEMENTS: u64 = 1 << 20;

/// The first element where the two dequantizers differ.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct FirstDifference {
    /// Tensor name.
    pub tensor: String,
    /// Flat element index within the tensor.
    pub element: u64,
    /// Our f32 bit pattern.
    pub ours_bits: u32,
    /// ggml's f32 bit pattern.
    pub ggml_bits: u32,
}

/// Result of comparing every tensor of a file.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct DequantCheck {
    /// Tensors compared.
    pub tensors: u64,
    /// Tensors whose every element has the same bit pattern.
    pub identical: u64,
    /// Tensors with at least one differing element.
    pub differing: u64,
    /// Tensors of a type that one side cannot dequantize (counted as not verified).
    pub unsupported: Vec<String>,
    /// Elements compared in all.
    pub elements: u64,
    /// The first difference found, if any.
    pub first_difference: Option<FirstDifference>,
}

impl DequantCheck {
    /// True when every tensor was compared and is bit-identical.
    pub fn passed(&self) -> bool {
        self.differing == 0 && self.unsupported.is_empty() && self.identical == self.tensors
    }
}

/// Compares every tensor of `g`; `progress` is called after each tensor with (done, total).
pub fn check_dequant(g: &Gguf, mut progress: impl FnMut(usize, usize)) -> DequantCheck {
    let tensors = &g.header.tensors;
    let mut out = DequantCheck {
        tensors: tensors.len() as u64,
        identical: 0,
        differing: 0,
        unsupported: Vec::new(),
        elements: 0,
        first_difference: None,
    };
    let mut ours = Vec::new();
    let mut theirs = Vec::new();
    for (i, t) in tensors.iter().enumerate() {
        let ty = t.ggml_type;
        let data = g.tensor_data(t);
        let row = t.ne()[0];
        let rows = t.n_rows();
        let row_bytes = ty.row_bytes(row).expect("validated by the reader") as usize;
        let rows_per_chunk = (CHUNK_ELEMENTS / row.max(1)).max(1);
        let mut same = true;
        let mut supported = dequant::is_supported(ty);
        let mut r0 = 0;
        while supported && same && r0 < rows {
            let nr = rows_per_chunk.min(rows - r0);
            let n = (nr * row) as usize;
            let bytes = &data[r0 as usize * row_bytes..(r0 + nr) as usize * row_bytes];
            ours.resize(n, 0f32);
            theirs.resize(n, 0f32);
            if dequant::dequantize(ty, bytes, &mut ours).is_err()
                || ggml_values(ty, bytes, &mut theirs).is_err()
            {
                supported = false;
                break;
            }
            if let Some(k) = first_bit_difference(&ours, &theirs) {
                same = false;
                if out.first_difference.is_none() {
                    out.first_difference = Some(FirstDifference {
                        tensor: t.name.clone(),
                        element: r0 * row + k as u64,
                        ours_bits: ours[k].to_bits(),
                        ggml_bits: theirs[k].to_bits(),
                    });
                }
            }
            out.elements += n as u64;
            r0 += nr;
        }
        if !supported {
            out.unsupported.push(format!("{} ({})", t.name, ty));
        } else if same {
            out.identical += 1;
        } else {
            out.differing += 1;
        }
        progress(i + 1, tensors.len());
    }
    out
}

/// ggml's view of `bytes` as f32: its `to_float`, or the stored bits for F32.
fn ggml_values(
    ty: gguf::GgmlType,
    bytes: &[u8],
    out: &mut [f32],
) -> Result<(), llama_runtime::RuntimeError> {
    if ty == gguf::GgmlType::F32 {
        for (o, b) in out.iter_mut().zip(bytes.chunks_exact(4)) {
            *o = f32::from_bits(u32::from_le_bytes([b[0], b[1], b[2], b[3]]));
        }
        return Ok(());
    }
    llama_runtime::ggml_to_float(ty.id(), bytes, out)
}

/// Index of the first element whose f32 bit patterns differ (u32 view: -0.0 ≠ 0.0 and NaNs
/// with different payloads differ), or `None` when the slices are bit-identical. Slices of
/// different lengths differ at the shorter length.
pub fn first_bit_difference(a: &[f32], b: &[f32]) -> Option<usize> {
    a.iter()
        .zip(b)
        .position(|(x, y)| x.to_bits() != y.to_bits())
        .or((a.len() != b.len()).then(|| a.len().min(b.len())))
}

#[cfg(test)]
mod tests {
    use super::first_bit_difference;

    #[test]
    fn signed_zeros_and_nan_payloads_count_as_differences() {
        assert_eq!(first_bit_difference(&[1.0, 0.0], &[1.0, -0.0]), Some(1));
        let (n1, n2) = (f32::from_bits(0x7fc0_0001), f32::from_bits(0x7fc0_0002));
        assert_eq!(first_bit_difference(&[n1], &[n2]), Some(0));
        assert_eq!(first_bit_difference(&[n1, 2.0], &[n1, 2.0]), None);
        assert_eq!(first_bit_difference(&[1.0], &[1.0, 2.0]), Some(1));
    }
}
