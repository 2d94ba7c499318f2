//! ggml's own type traits, `to_float` and reference quantizer, so our Rust code can be checked
//! against them bit for bit.

use crate::{cstr, sys, RuntimeError};

/// ggml's own traits of one type (`ggml_get_type_traits`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TypeTraits {
    /// `ggml_type_name`, e.g. `q4_K`.
    pub name: String,
    /// Elements per block (0 for removed ids).
    pub block_size: u64,
    /// Bytes per block.
    pub type_size: u64,
    /// Whether ggml counts it as quantized.
    pub is_quantized: bool,
    /// Whether a `to_float` exists.
    pub has_to_float: bool,
}

fn traits_ptr(type_id: u32) -> Result<&'static sys::ggml_type_traits, RuntimeError> {
    if type_id >= sys::GGML_TYPE_COUNT {
        return Err(RuntimeError::UnknownType(type_id));
    }
    // SAFETY: id checked against GGML_TYPE_COUNT (ggml asserts on larger ids); the table is static.
    let p = unsafe { sys::ggml_get_type_traits(type_id) };
    // SAFETY: non-null pointer into ggml's static type_traits table.
    unsafe { p.as_ref() }.ok_or(RuntimeError::UnknownType(type_id))
}

/// ggml's traits of type `type_id`.
pub fn type_traits(type_id: u32) -> Result<TypeTraits, RuntimeError> {
    let t = traits_ptr(type_id)?;
    Ok(TypeTraits {
        name: cstr(t.type_name),
        block_size: t.blck_size.max(0) as u64,
        type_size: t.type_size as u64,
        is_quantized: t.is_quantized,
        has_to_float: t.to_float.is_some(),
    })
}

fn check_sizes(t: &sys::ggml_type_traits, n: usize, bytes: usize) -> Result<(), RuntimeError> {
    let bs = t.blck_size.max(0) as usize;
    if bs == 0 || !n.is_multiple_of(bs) || bytes != n / bs * t.type_size {
        return Err(RuntimeError::Size {
            ty: cstr(t.type_name),
            detail: format!(
                "{n} elements and {bytes} bytes do not match blocks of {bs} elements / {} bytes",
                t.type_size
            ),
        });
    }
    Ok(())
}

// Q8_K is an intermediate type: ggml's type table has no `to_float` for it, but ggml-base
// exports the row dequantizer (declared in ggml/src/ggml-quants.h, not in the public headers).
extern "C" {
    fn dequantize_row_q8_K(x: *const std::ffi::c_void, y: *mut f32, k: i64);
}

/// `enum ggml_type` id of Q8_K.
const GGML_TYPE_Q8_K: u32 = 15;

/// Dequantizes `src` (`out.len()` elements of type `type_id`) with ggml's own `to_float` into
/// `out` (for Q8_K, which has none in the table, ggml-base's `dequantize_row_q8_K`).
///
/// Errors: unknown type, no `to_float`, or sizes that do not match the block layout.
pub fn ggml_to_float(type_id: u32, src: &[u8], out: &mut [f32]) -> Result<(), RuntimeError> {
    let t = traits_ptr(type_id)?;
    let q8_k: sys::ggml_to_float_t = Some(dequantize_row_q8_K);
    let f = if type_id == GGML_TYPE_Q8_K {
        q8_k
    } else {
        t.to_float
    }
    .ok_or_else(|| RuntimeError::Missing(cstr(t.type_name), "to_float"))?;
    check_sizes(t, out.len(), src.len())?;
    if out.is_empty() {
        return Ok(());
    }
    // SAFETY: sizes checked above: `src` holds exactly out.len()/blck blocks, `out` has room
    // for out.len() floats; ggml reads/writes nothing else.
    unsafe { f(src.as_ptr().cast(), out.as_mut_ptr(), out.len() as i64) };
    Ok(())
}

/// Quantizes `src` (`nrows` rows of `n_per_row` f32) to type `type_id` with ggml's
/// `ggml_quantize_chunk` (no importance matrix) and returns the blocks.
///
/// Errors: unknown type, a type that needs an importance matrix, or a row length that is not a
/// multiple of the block size.
pub fn ggml_quantize(type_id: u32, src: &[f32], n_per_row: usize) -> Result<Vec<u8>, RuntimeError> {
    ggml_quantize_weighted(type_id, src, n_per_row, None)
}

/// Whether ggml's quantizer refuses `type_id` without importance weights
/// (`ggml_quantize_requires_imatrix`: IQ2_XXS, IQ2_XS, IQ1_S).
pub fn ggml_requires_imatrix(type_id: u32) -> bool {
    // SAFETY: plain query on an id; ggml answers false for ids it does not know.
    unsafe { sys::ggml_quantize_requires_imatrix(type_id) }
}

/// As [`ggml_quantize`], with importance weights: `n_per_row` floats that apply to every row
/// (one matrix; llama-quant.cpp passes each expert its own slice). Types that ignore weights
/// (Q8_0, the float types) give the same bytes either way.
///
/// Errors: as [`ggml_quantize`] (a type that needs an importance matrix is refused only
/// without one), or weights that are not one row long.
pub fn ggml_quantize_weighted(
    type_id: u32,
    src: &[f32],
    n_per_row: usize,
    imatrix: Option<&[f32]>,
) -> Result<Vec<u8>, RuntimeError> {
    let t = traits_ptr(type_id)?;
    let name = cstr(t.type_name);
    // SAFETY: plain query on a valid id.
    if imatrix.is_none() && unsafe { sys::ggml_quantize_requires_imatrix(type_id) } {
        return Err(RuntimeError::Missing(name, "quantizer without an imatrix"));
    }
    if let Some(w) = imatrix.filter(|w| w.len() != n_per_row) {
        return Err(RuntimeError::Size {
            ty: name,
            detail: format!("{} importance weights for rows of {n_per_row}", w.len()),
        });
    }
    let w_at = imatrix.map_or(0, |w| w.as_ptr() as usize);
    if n_per_row == 0 || !src.len().is_multiple_of(n_per_row) {
        return Err(RuntimeError::Size {
            ty: name,
            detail: format!("{} values are not whole rows of {n_per_row}", src.len()),
        });
    }
    let bs = t.blck_size.max(0) as usize;
    if bs == 0 || !n_per_row.is_multiple_of(bs) {
        return Err(RuntimeError::Size {
            ty: name,
            detail: format!("row length {n_per_row} is not a multiple of the block size {bs}"),
        });
    }
    let nrows = src.len() / n_per_row;
    let row_bytes = n_per_row / bs * t.type_size;
    let mut out = vec![0u8; row_bytes * nrows];
    // Rows are encoded independently (the weights are the same for every row), so contiguous
    // row ranges go to threads of their own, as llama.cpp's quantizer splits its chunks: the same bytes, sooner.
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let per = nrows.div_ceil(threads.clamp(1, nrows.max(1)));
    let (src_at, out_at) = (src.as_ptr() as usize, out.as_mut_ptr() as usize);
    let written: usize = std::thread::scope(|s| {
        let parts: Vec<_> = (0..nrows)
            .step_by(per.max(1))
            .map(|r0| {
                let n = per.min(nrows - r0);
                s.spawn(move || {
                    // SAFETY: `src` holds nrows·n_per_row floats and `out` exactly the bytes
                    // ggml writes for them; each thread writes rows r0..r0+n only (ggml
                    // offsets dst by start / n_per_row rows), and both outlive the scope; the
                    // weights (null or n_per_row floats) are only read.
                    unsafe {
                        sys::ggml_quantize_chunk(
                            type_id,
                            src_at as *const f32,
                            out_at as *mut std::ffi::c_void,
                            (r0 * n_per_row) as i64,
                            n as i64,
                            n_per_row as i64,
                            w_at as *const f32,
                        )
                    }
                })
            })
            .collect();
        parts.into_iter().map(|p| p.join().unwrap_or(0)).sum()
    });
    debug_assert_eq!(written, out.len());
    Ok(out)
}
