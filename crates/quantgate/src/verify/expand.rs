//! The F32 expansion of a GGUF: the same metadata and tensors, every block-quantized or
//! half-precision tensor replaced by ggml's own `to_float` of its stored bytes. llama.cpp's CPU
//! matmuls quantize activations for block-quantized weights (vec_dot_type Q8_0/Q8_1/Q8_K), so
//! running this expansion separates what the file stores (Gate 1 checks it bit for bit) from
//! the runtime's arithmetic on quantized types.

use std::path::Path;

use anyhow::{anyhow, Result};
use gguf::{GgmlType, Gguf, GgufWriter, TensorData, TensorEntry, Value};

/// Whether any tensor of the file is block-quantized (not F32/F16/BF16).
pub fn has_block_quantized(types: &[u32]) -> bool {
    types.iter().any(|t| {
        !matches!(
            GgmlType::from_id(*t),
            Some(GgmlType::F32 | GgmlType::F16 | GgmlType::BF16)
        )
    })
}

/// Writes the F32 expansion of `src` to `out` (atomically; `general.file_type` = 0, ALL_F32).
///
/// Errors: unreadable source, a type ggml has no `to_float` for, or a write failure.
pub fn write_f32_expansion(src: &Path, out: &Path) -> Result<u64> {
    let g = Gguf::open(src)?;
    let mut w = GgufWriter::new();
    w.set_version(g.header.version);
    for (k, v) in &g.header.metadata {
        if k == gguf::keys::general::FILE_TYPE {
            let all_f32 = gguf::LlamaFtype::mostly(GgmlType::F32).expect("in the table");
            w.add_kv(k.clone(), Value::U32(all_f32.id));
        } else {
            w.add_kv(k.clone(), v.clone());
        }
    }
    for t in &g.header.tensors {
        let bytes = g.tensor_data(t);
        let data = if t.ggml_type == GgmlType::F32 {
            TensorData::Borrowed(bytes)
        } else {
            // One tensor in memory at a time.
            let (ty, n, name) = (t.ggml_type, t.n_elements() as usize, t.name.clone());
            TensorData::Deferred(Box::new(move |out| {
                let mut x = vec![0f32; n];
                llama_runtime::ggml_to_float(ty.id(), bytes, &mut x)
                    .map_err(|e| std::io::Error::other(format!("tensor {name}: {e}")))?;
                let b: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
                out.write_all(&b)
            }))
        };
        w.add_tensor(TensorEntry {
            name: t.name.clone(),
            ggml_type: GgmlType::F32,
            dims: t.dims.clone(),
            data,
        });
    }
    let s = w
        .write_to_path(out)
        .map_err(|e| anyhow!("{}: {e}", out.display()))?;
    Ok(s.file_bytes)
}
