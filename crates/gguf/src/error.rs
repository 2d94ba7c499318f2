//! One error type for the GGUF container: every variant names the field and the byte offset.

use std::path::PathBuf;

/// Errors of reading, validating and writing GGUF files.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An I/O error on `path`.
    // The message includes the cause, so it is deliberately not a `source` (anyhow would
    // print it twice).
    #[error("{path}: {cause}")]
    Io {
        /// The file that could not be inspected, opened, mapped or written.
        path: PathBuf,
        /// The OS error (or a synthesised `InvalidInput` for a path that is not a regular file).
        cause: std::io::Error,
    },
    /// A parse error inside the file `path`.
    #[error("{path}: {inner}")]
    InFile {
        /// The GGUF file being parsed.
        path: PathBuf,
        /// The parse error itself (never `Io` or `InFile`: [`Error::in_file`] does not nest).
        inner: Box<Error>,
    },
    /// The file ends before `field` (needs `need` bytes at `offset`, the file has `len`).
    #[error("truncated: {field} needs {need} bytes at byte offset {offset}, but the file has {len} bytes")]
    Truncated {
        /// What was being read, e.g. `tensor_info[3] name` or `tensor "blk.0.attn_q.weight" data`.
        field: String,
        /// Byte offset in the file where the field starts.
        offset: u64,
        /// Bytes the field needs from `offset` on.
        need: u64,
        /// Length of the whole file in bytes.
        len: u64,
    },
    /// The first four bytes are not `GGUF`.
    #[error("bad magic {found:02x?} at byte offset 0 (expected \"GGUF\" = [47, 47, 55, 46])")]
    BadMagic {
        /// The first four bytes of the file (a GGUF file starts with `GGUF_MAGIC` = `"GGUF"`,
        /// `ggml/src/gguf.cpp`).
        found: [u8; 4],
    },
    /// Version other than 2 or 3 (v1 used 32-bit lengths; llama.cpp rejects it too).
    #[error("unsupported GGUF version {version} at byte offset 4 (supported: 2, 3)")]
    UnsupportedVersion {
        /// The little-endian `u32` version read at byte offset 4.
        version: u32,
    },
    /// A version whose low 16 bits are zero: the file was written with the other byte order.
    #[error("GGUF version {raw:#010x} at byte offset 4 is byte-swapped: big-endian files are not supported")]
    BigEndian {
        /// The version field at byte offset 4 as read little-endian (e.g. `0x03000000` for v3).
        raw: u32,
    },
    /// A field holds a value that is not allowed (`detail` says why).
    #[error("invalid {field} at byte offset {offset}: {detail}")]
    Invalid {
        /// The offending field, e.g. `metadata "general.alignment"` or
        /// `tensor_info[0] "output.weight"`.
        field: String,
        /// Byte offset in the file where the field starts.
        offset: u64,
        /// Why the value is refused (cap exceeded, duplicate key, bad `ne`, misplaced offset …).
        detail: String,
    },
    /// A tensor info names a ggml type id that does not exist.
    #[error("tensor '{tensor}': unknown ggml type id {id} at byte offset {offset}")]
    UnknownType {
        /// Tensor name, shortened by [`short`].
        tensor: String,
        /// The `ggml_type` id read from the tensor info (not in `enum ggml_type` of `ggml.h`).
        id: u32,
        /// Byte offset in the file of the tensor info's type field.
        offset: u64,
    },
    /// An operation that does not handle this ggml type (e.g. dequantizing IQ2_XXS).
    #[error("tensor '{tensor}': ggml type {ty} is unsupported by {operation}")]
    UnsupportedType {
        /// Tensor name.
        tensor: String,
        /// The tensor's ggml type.
        ty: crate::GgmlType,
        /// The operation that does not handle `ty`, e.g. `dequantization`.
        operation: &'static str,
    },
    /// The writer was given inconsistent input.
    #[error("cannot write tensor '{tensor}': {detail}")]
    Write {
        /// Tensor name, or empty when the problem is in the metadata (keys, `general.alignment`).
        tensor: String,
        /// What is inconsistent.
        detail: String,
    },
}

impl Error {
    /// Attaches the file path to a parse error.
    pub fn in_file(self, path: impl Into<PathBuf>) -> Error {
        match self {
            e @ (Error::Io { .. } | Error::InFile { .. }) => e,
            e => Error::InFile {
                path: path.into(),
                inner: Box::new(e),
            },
        }
    }
}

/// A name or key cut to at most 80 characters for error messages, so a hostile 1 MB name
/// cannot make a multi-megabyte error line; control characters are escaped.
pub fn short(name: &str) -> String {
    const MAX: usize = 80;
    let escaped: String = name.chars().flat_map(char::escape_debug).collect();
    if escaped.chars().count() <= MAX {
        escaped
    } else {
        let head: String = escaped.chars().take(MAX).collect();
        format!("{head}… ({} bytes)", name.len())
    }
}

/// Result alias of this crate.
pub type Result<T> = std::result::Result<T, Error>;
