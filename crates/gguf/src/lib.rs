//! GGUF container and ggml block types: quantgate's core.
//!
//! * [`Gguf`] / [`Header`]: validating reader over a memory map (GGUF v2 and v3).
//! * [`GgufWriter`]: deterministic, atomic writer.
//! * [`GgmlType`]: the type table; [`dequant`]: block dequantizers bit-identical to ggml's.
//!
//! Format facts come from llama.cpp's `ggml/src/gguf.cpp`, `ggml-common.h` and `ggml-quants.c`
//! as vendored by llama-cpp-sys-2 0.1.161, summarised in `docs/llamacpp-spec.md` §5.

#![deny(missing_docs)]

pub mod blocks;
pub mod dequant;
mod error;
mod ftype;
pub mod imatrix;
pub mod keys;
mod output;
pub mod quant;
pub mod quant_ref;
mod reader;
mod types;
mod value;
mod writer;

pub use error::{short, Error, Result};
pub use ftype::LlamaFtype;
pub use output::ensure_replaceable;
pub use reader::{
    pad, tensor_n_bytes, Gguf, Header, TensorInfo, DEFAULT_ALIGNMENT, GGUF_MAGIC, KEY_ALIGNMENT,
    MAX_ARRAY_DEPTH, MAX_ARRAY_LEN, MAX_DIMS, MAX_KV, MAX_TENSORS, MAX_TENSOR_NAME_LEN,
    MAX_TOTAL_ARRAY_ELEMENTS,
};
pub use types::GgmlType;
pub use value::{Value, ValueType};
pub use writer::{DeferredData, GgufWriter, TensorData, TensorEntry, WriteSummary};

impl Header {
    /// A writer holding this header's metadata and tensors, with tensor data borrowed from
    /// `bytes` (the whole file this header was parsed from), in the same order and version:
    /// writing it reproduces a file written by llama.cpp or gguf-py byte for byte.
    pub fn to_writer<'a>(&self, bytes: &'a [u8]) -> GgufWriter<'a> {
        let mut w = GgufWriter::new();
        w.set_version(self.version);
        for (k, v) in &self.metadata {
            w.add_kv(k.clone(), v.clone());
        }
        for t in &self.tensors {
            let start = (self.data_offset + t.offset) as usize;
            w.add_tensor(TensorEntry {
                name: t.name.clone(),
                ggml_type: t.ggml_type,
                dims: t.dims.clone(),
                data: TensorData::Borrowed(&bytes[start..start + t.n_bytes as usize]),
            });
        }
        w
    }
}

impl Gguf {
    /// [`Header::to_writer`] over this file's memory map.
    pub fn to_writer(&self) -> GgufWriter<'_> {
        self.header.to_writer(self.bytes())
    }
}
