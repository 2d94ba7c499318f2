//! A small safe wrapper over llama.cpp as vendored and built by `llama-cpp-sys-2 = "=0.1.161"`.
//!
//! This crate is the only place that calls llama.cpp/ggml C functions. It exposes what the
//! verifier needs from the standard runtime: the pinned build's identity and ggml's own type
//! traits (`to_float`, `ggml_quantize_chunk`), so our Rust code can be checked against ggml's.
//! Type ids are plain `u32` (`enum ggml_type`) so this crate does not depend on our GGUF code.

use std::ffi::CStr;
use std::fmt;
use std::sync::Once;

pub use llama_cpp_sys_2 as sys;

/// The exact crate pin of the runtime; printed in every report.
pub const LLAMA_CPP_SYS_PIN: &str = "llama-cpp-sys-2 =0.1.161";

/// Errors of this wrapper.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RuntimeError {
    /// The id is not below `GGML_TYPE_COUNT`.
    #[error("ggml type id {0} does not exist in this llama.cpp build")]
    UnknownType(u32),
    /// ggml has no `to_float`/quantizer for this type (e.g. a removed type id).
    #[error("ggml type {0} has no {1} in this llama.cpp build")]
    Missing(String, &'static str),
    /// Buffer sizes that do not match the type's block layout.
    #[error("ggml type {ty}: {detail}")]
    Size { ty: String, detail: String },
}

/// Identity of the llama.cpp build linked into this binary.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BuildInfo {
    /// Crate pin, e.g. `llama-cpp-sys-2 =0.1.161`.
    pub crate_pin: String,
    /// `ggml_version()`, e.g. `0.26.0`.
    pub ggml_version: String,
    /// `ggml_commit()` (`unknown` when the crate was built outside a git checkout).
    pub ggml_commit: String,
    /// `llama_print_system_info()`: the CPU features the build uses.
    pub system_info: String,
}

impl fmt::Display for BuildInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} (ggml {}, commit {})",
            self.crate_pin, self.ggml_version, self.ggml_commit
        )
    }
}

fn cstr(p: *const std::os::raw::c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    // SAFETY: ggml/llama return static NUL-terminated strings.
    unsafe { CStr::from_ptr(p) }
        .to_string_lossy()
        .trim()
        .to_string()
}

/// Initialises the llama.cpp backend once per process (`llama_backend_init`).
pub fn init() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // SAFETY: no arguments; guarded to run once per process as llama.h asks.
        unsafe { sys::llama_backend_init() };
    });
}

/// The linked build's identity.
pub fn build_info() -> BuildInfo {
    init();
    // SAFETY: plain getters returning static strings.
    let (v, c, s) = unsafe {
        (
            sys::ggml_version(),
            sys::ggml_commit(),
            sys::llama_print_system_info(),
        )
    };
    BuildInfo {
        crate_pin: LLAMA_CPP_SYS_PIN.into(),
        ggml_version: cstr(v),
        ggml_commit: cstr(c),
        system_info: cstr(s),
    }
}

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
    let t = traits_ptr(type_id)?;
    let name = cstr(t.type_name);
    // SAFETY: plain query on a valid id.
    if unsafe { sys::ggml_quantize_requires_imatrix(type_id) } {
        return Err(RuntimeError::Missing(name, "quantizer without an imatrix"));
    }
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
    let mut out = vec![0u8; n_per_row / bs * t.type_size * nrows];
    // SAFETY: `src` holds nrows·n_per_row floats and `out` exactly the bytes ggml writes for them.
    let written = unsafe {
        sys::ggml_quantize_chunk(
            type_id,
            src.as_ptr(),
            out.as_mut_ptr().cast(),
            0,
            nrows as i64,
            n_per_row as i64,
            std::ptr::null(),
        )
    };
    debug_assert_eq!(written, out.len());
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn build_info_names_the_pin_and_a_ggml_version() {
        let b = build_info();
        assert_eq!(b.crate_pin, "llama-cpp-sys-2 =0.1.161");
        assert_eq!(b.ggml_version, "0.26.0");
        assert!(b
            .to_string()
            .starts_with("llama-cpp-sys-2 =0.1.161 (ggml 0.26.0"));
    }

    #[test]
    fn q8_0_round_trip_through_ggml() {
        // One Q8_0 block of 0..32: d = 31/127 → exact codes, values within d/2.
        let x: Vec<f32> = (0..32).map(|i| i as f32).collect();
        let q = ggml_quantize(8, &x, 32).unwrap();
        assert_eq!(q.len(), 34);
        let mut y = vec![0f32; 32];
        ggml_to_float(8, &q, &mut y).unwrap();
        for (a, b) in x.iter().zip(&y) {
            assert!((a - b).abs() <= 0.13, "{a} vs {b}");
        }
        assert_eq!(
            ggml_to_float(8, &q[..33], &mut y),
            Err(RuntimeError::Size {
                ty: "q8_0".into(),
                detail: "32 elements and 33 bytes do not match blocks of 32 elements / 34 bytes"
                    .into()
            })
        );
        assert_eq!(type_traits(999), Err(RuntimeError::UnknownType(999)));
    }
}
