//! ggml's own GGUF reader (`gguf_init_from_file`, `ggml/src/gguf.cpp`): the independent
//! read-back path of Gate 1. Nothing here shares code with our Rust reader or writer.

use std::ffi::{CStr, CString};
use std::path::Path;
use std::ptr::NonNull;

use crate::{sys, RuntimeError};

/// A GGUF file as ggml parsed it (metadata and tensor infos; no tensor data loaded).
pub struct CGguf {
    ctx: NonNull<sys::gguf_context>,
}

/// A tensor info as ggml reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CTensorInfo {
    /// Name.
    pub name: String,
    /// ggml type id.
    pub type_id: u32,
    /// `ne[0..4]`.
    pub ne: [i64; 4],
    /// Absolute byte offset of the data in the file (data section offset + tensor offset).
    pub file_offset: u64,
    /// Data bytes.
    pub size: u64,
}

/// A metadata value as ggml reads it: type id and raw little-endian payload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CValue {
    /// A scalar of GGUF value type `ty` (its bytes).
    Scalar {
        /// `enum gguf_type` id (`ggml/include/gguf.h`): 0–7 or 10–12, never string or array.
        ty: u32,
        /// The value's little-endian bytes from `gguf_get_val_data` (1, 2, 4 or 8 bytes).
        bytes: Vec<u8>,
    },
    /// A string.
    Str(Vec<u8>),
    /// An array of strings.
    StrArray(Vec<Vec<u8>>),
    /// An array of scalars of type `ty`: `n` elements, raw bytes.
    Array {
        /// `enum gguf_type` id of the elements (`gguf_get_arr_type`), a fixed-size scalar type.
        ty: u32,
        /// Number of elements (`gguf_get_arr_n`).
        n: usize,
        /// The `n` elements' little-endian bytes back to back from `gguf_get_arr_data`
        /// (`n` × the element size; bools one byte each).
        bytes: Vec<u8>,
    },
    /// Nested arrays (ggml's reader refuses them, so this never appears in a file it opened).
    Unsupported,
}

const GGUF_TYPE_STRING: u32 = 8;
const GGUF_TYPE_ARRAY: u32 = 9;

fn scalar_size(ty: u32) -> usize {
    match ty {
        0 | 1 | 7 => 1,
        2 | 3 => 2,
        4..=6 => 4,
        10..=12 => 8,
        _ => 0,
    }
}

impl CGguf {
    /// Parses `path` with ggml (`no_alloc`: infos only).
    ///
    /// Errors: ggml refused the file ([`RuntimeError::Load`]).
    pub fn open(path: &Path) -> Result<CGguf, RuntimeError> {
        crate::init();
        crate::ensure_regular(path)?;
        let mark = crate::log::mark();
        let load = || RuntimeError::Load {
            path: path.display().to_string(),
            log: crate::load_log(mark),
        };
        let c = CString::new(path.as_os_str().as_encoded_bytes()).map_err(|_| load())?;
        let params = sys::gguf_init_params {
            no_alloc: true,
            ctx: std::ptr::null_mut(),
        };
        // SAFETY: valid path; params by value; ggml allocates and owns the returned context.
        let ctx = unsafe { sys::gguf_init_from_file(c.as_ptr(), params) };
        NonNull::new(ctx).map(|ctx| CGguf { ctx }).ok_or_else(load)
    }

    fn raw(&self) -> *const sys::gguf_context {
        self.ctx.as_ptr()
    }

    /// Tensor infos in file order.
    pub fn tensors(&self) -> Vec<CTensorInfo> {
        // SAFETY: ids below gguf_get_n_tensors; returned pointers are owned by the context.
        unsafe {
            let data = sys::gguf_get_data_offset(self.raw()) as u64;
            (0..sys::gguf_get_n_tensors(self.raw()))
                .map(|i| {
                    let name = CStr::from_ptr(sys::gguf_get_tensor_name(self.raw(), i))
                        .to_string_lossy()
                        .into_owned();
                    let ne_ptr = sys::gguf_get_tensor_ne(self.raw(), i);
                    let mut ne = [1i64; 4];
                    for (j, v) in ne.iter_mut().enumerate() {
                        *v = *ne_ptr.add(j);
                    }
                    CTensorInfo {
                        name,
                        type_id: sys::gguf_get_tensor_type(self.raw(), i),
                        ne,
                        file_offset: data + sys::gguf_get_tensor_offset(self.raw(), i) as u64,
                        size: sys::gguf_get_tensor_size(self.raw(), i) as u64,
                    }
                })
                .collect()
        }
    }

    /// Metadata keys in file order.
    pub fn keys(&self) -> Vec<String> {
        // SAFETY: ids below gguf_get_n_kv.
        unsafe {
            (0..sys::gguf_get_n_kv(self.raw()))
                .map(|i| {
                    CStr::from_ptr(sys::gguf_get_key(self.raw(), i))
                        .to_string_lossy()
                        .into_owned()
                })
                .collect()
        }
    }

    /// The value of `key`, or `None` if absent.
    pub fn get(&self, key: &str) -> Option<CValue> {
        let k = CString::new(key).ok()?;
        // SAFETY: key id from gguf_find_key; each getter matches the stored type, which is
        // checked first (ggml aborts on a type mismatch).
        unsafe {
            let id = sys::gguf_find_key(self.raw(), k.as_ptr());
            if id < 0 {
                return None;
            }
            let ty = sys::gguf_get_kv_type(self.raw(), id);
            Some(match ty {
                GGUF_TYPE_STRING => Value::str(sys::gguf_get_val_str(self.raw(), id)),
                GGUF_TYPE_ARRAY => {
                    let at = sys::gguf_get_arr_type(self.raw(), id);
                    let n = sys::gguf_get_arr_n(self.raw(), id);
                    if at == GGUF_TYPE_STRING {
                        CValue::StrArray(
                            (0..n)
                                .map(|j| {
                                    CStr::from_ptr(sys::gguf_get_arr_str(self.raw(), id, j))
                                        .to_bytes()
                                        .to_vec()
                                })
                                .collect(),
                        )
                    } else if scalar_size(at) > 0 {
                        let p = sys::gguf_get_arr_data(self.raw(), id) as *const u8;
                        let bytes = std::slice::from_raw_parts(p, n * scalar_size(at)).to_vec();
                        CValue::Array { ty: at, n, bytes }
                    } else {
                        CValue::Unsupported
                    }
                }
                t if scalar_size(t) > 0 => {
                    let p = sys::gguf_get_val_data(self.raw(), id) as *const u8;
                    CValue::Scalar {
                        ty: t,
                        bytes: std::slice::from_raw_parts(p, scalar_size(t)).to_vec(),
                    }
                }
                _ => CValue::Unsupported,
            })
        }
    }
}

struct Value;

impl Value {
    /// # Safety
    /// `p` is a NUL-terminated string owned by a live gguf context.
    unsafe fn str(p: *const std::os::raw::c_char) -> CValue {
        CValue::Str(CStr::from_ptr(p).to_bytes().to_vec())
    }
}

impl Drop for CGguf {
    fn drop(&mut self) {
        // SAFETY: we own the context.
        unsafe { sys::gguf_free(self.ctx.as_ptr()) }
    }
}
