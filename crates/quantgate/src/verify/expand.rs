//! The F32 expansion of a GGUF: the same metadata and tensors, every block-quantized or
//! half-precision tensor replaced by ggml's own `to_float` of its stored bytes. llama.cpp's CPU
//! matmuls quantize activations for block-quantized weights (vec_dot_type Q8_0/Q8_1/Q8_K), so
//! running this expansion separates what the file stores (Gate 1 checks it bit for bit) from
//! the runtime's arithmetic on quantized types.
//!
//! Three forms: the whole expansion; a slice of its layers ([`write_slice`], run one after the
//! other by `verify::sliced`, so the scratch disk is one slice); and the shape file
//! ([`write_shape_file`]): the whole expansion's header over a sparse data section, which is
//! all llama.cpp's quantizer reads in a dry run (Gate 1's ftype plan).

use std::io::{Seek, SeekFrom, Write};
use std::ops::Range;
use std::path::Path;

use anyhow::{anyhow, Result};
use gguf::{GgmlType, Gguf, GgufWriter, TensorData, TensorEntry, TensorInfo, Value};

/// Whether any tensor of the file is block-quantized (not F32/F16/BF16).
pub fn has_block_quantized(types: &[u32]) -> bool {
    types.iter().any(|t| {
        !matches!(
            GgmlType::from_id(*t),
            Some(GgmlType::F32 | GgmlType::F16 | GgmlType::BF16)
        )
    })
}

/// The F32 bytes of tensor `t` (stored bytes `bytes`), produced while the file is written:
/// one tensor in memory at a time.
fn expanded<'a>(t: &TensorInfo, bytes: &'a [u8]) -> TensorData<'a> {
    if t.ggml_type == GgmlType::F32 {
        return TensorData::Borrowed(bytes);
    }
    let (ty, n, name) = (t.ggml_type, t.n_elements() as usize, t.name.clone());
    TensorData::Deferred(Box::new(move |out| {
        let mut x = vec![0f32; n];
        llama_runtime::ggml_to_float(ty.id(), bytes, &mut x)
            .map_err(|e| std::io::Error::other(format!("tensor {name}: {e}")))?;
        let b: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
        out.write_all(&b)
    }))
}

/// The source's metadata with `general.file_type` = ALL_F32 and the given replacements.
fn metadata<'a>(g: &Gguf, replace: &[(String, Value)]) -> GgufWriter<'a> {
    let mut w = GgufWriter::new();
    w.set_version(g.header.version);
    for (k, v) in &g.header.metadata {
        let v = if k == gguf::keys::general::FILE_TYPE {
            let all_f32 = gguf::LlamaFtype::mostly(GgmlType::F32).expect("in the table");
            Value::U32(all_f32.id)
        } else {
            replace
                .iter()
                .find(|(rk, _)| rk == k)
                .map_or_else(|| v.clone(), |(_, rv)| rv.clone())
        };
        w.add_kv(k.clone(), v);
    }
    w
}

fn entry<'a>(
    t: &TensorInfo,
    name: String,
    ggml_type: GgmlType,
    data: TensorData<'a>,
) -> TensorEntry<'a> {
    TensorEntry {
        name,
        ggml_type,
        dims: t.dims.clone(),
        data,
    }
}

/// Writes the F32 expansion of `src` to `out` (atomically; `general.file_type` = 0, ALL_F32).
///
/// Errors: unreadable source, a type ggml has no `to_float` for, or a write failure.
pub fn write_f32_expansion(src: &Path, out: &Path) -> Result<u64> {
    let g = Gguf::open(src)?;
    let mut w = metadata(&g, &[]);
    for t in &g.header.tensors {
        w.add_tensor(entry(
            t,
            t.name.clone(),
            GgmlType::F32,
            expanded(t, g.tensor_data(t)),
        ));
    }
    let s = w
        .write_to_path(out)
        .map_err(|e| anyhow!("{}: {e}", out.display()))?;
    Ok(s.file_bytes)
}

/// The whole expansion's size in bytes (header included), without writing it.
pub fn f32_expansion_bytes(src: &Gguf) -> Result<u64> {
    let mut w = metadata(src, &[]);
    for t in &src.header.tensors {
        w.add_tensor(entry(
            t,
            t.name.clone(),
            GgmlType::F32,
            zeros(t.n_elements() * 4),
        ));
    }
    Ok(w.file_bytes()?)
}

/// `n` zero bytes, written in 1 MiB pieces.
fn zeros<'a>(n: u64) -> TensorData<'a> {
    TensorData::Deferred(Box::new(move |out| {
        static Z: [u8; 1 << 20] = [0; 1 << 20];
        let mut left = n;
        while left > 0 {
            let k = left.min(Z.len() as u64) as usize;
            out.write_all(&Z[..k])?;
            left -= k as u64;
        }
        Ok(())
    }))
}

/// A file written through a seek over every all-zero piece: the zeros take no disk blocks.
struct Sparse {
    f: std::fs::File,
}

impl Write for Sparse {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if buf.iter().all(|b| *b == 0) {
            self.f.seek(SeekFrom::Current(buf.len() as i64))?;
        } else {
            self.f.write_all(buf)?;
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.f.flush()
    }
}

/// Writes the whole expansion's header at `out` over a sparse, all-zero data section of the
/// right length: a file with the expansion's names, types, shapes and metadata that takes a
/// few pages of disk. llama.cpp's quantizer in a dry run reads only these
/// (`llama_model_quantize` with `dry_run`: no tensor data is read or written).
///
/// Errors: unreadable source or a write failure.
pub fn write_shape_file(src: &Gguf, out: &Path) -> Result<u64> {
    let mut w = metadata(src, &[]);
    for t in &src.header.tensors {
        w.add_tensor(entry(
            t,
            t.name.clone(),
            GgmlType::F32,
            zeros(t.n_elements() * 4),
        ));
    }
    let io = |e: std::io::Error| anyhow!("{}: {e}", out.display());
    let mut s = Sparse {
        f: std::fs::File::create(out).map_err(io)?,
    };
    let mut buf = std::io::BufWriter::with_capacity(1 << 20, &mut s);
    let n = w
        .write_to(&mut buf)
        .map_err(|e| anyhow!("{}: {e}", out.display()))?
        .file_bytes;
    buf.flush().map_err(io)?;
    drop(buf);
    // The zeros after the last written byte are a hole too.
    s.f.set_len(n).map_err(io)?;
    Ok(n)
}

/// The layer index of a `blk.N.*` tensor name.
pub fn layer_of(name: &str) -> Option<usize> {
    name.strip_prefix("blk.")?.split('.').next()?.parse().ok()
}

/// Writes layers `layers` of `src`'s F32 expansion as a model of its own at `out`: every key
/// copied, `{arch}.block_count` = the slice's length, `blk.N.*` renamed from `blk.0`, the
/// model-level tensors (token_embd, output_norm, output, rope_freqs) kept. Only the last
/// slice's logits are read, so elsewhere `token_embd.weight` and `output.weight` keep their
/// stored type (they are loaded, never computed with); in the last slice the output matrix
/// (`output.weight`, or `token_embd.weight` when the embeddings are tied) is expanded too.
///
/// Errors: a write failure, or a type ggml has no `to_float` for.
pub fn write_slice(
    src: &Gguf,
    arch: &str,
    layers: Range<usize>,
    last: bool,
    out: &Path,
) -> Result<u64> {
    let s = slice_writer(src, arch, layers, last, false)
        .write_to_path(out)
        .map_err(|e| anyhow!("{}: {e}", out.display()))?;
    Ok(s.file_bytes)
}

/// The size [`write_slice`] would write, bytes, without expanding anything.
pub fn slice_bytes(src: &Gguf, arch: &str, layers: Range<usize>, last: bool) -> Result<u64> {
    Ok(slice_writer(src, arch, layers, last, true).file_bytes()?)
}

/// The writer of one slice ([`write_slice`]); with `dry`, zeros stand for the expanded data.
fn slice_writer<'a>(
    src: &'a Gguf,
    arch: &str,
    layers: Range<usize>,
    last: bool,
    dry: bool,
) -> GgufWriter<'a> {
    let block_count = gguf::keys::arch_key(gguf::keys::llm::BLOCK_COUNT, arch);
    let mut w = metadata(src, &[(block_count, Value::U32(layers.len() as u32))]);
    let tied = !src.header.tensors.iter().any(|t| t.name == "output.weight");
    for t in &src.header.tensors {
        let bytes = src.tensor_data(t);
        let (name, expand) = match layer_of(&t.name) {
            Some(l) if layers.contains(&l) => {
                // "blk.12.attn_q.weight" → ".attn_q.weight"
                let after = &t.name["blk.".len()..];
                let rest = &after[after.find('.').unwrap_or(after.len())..];
                (format!("blk.{}{rest}", l - layers.start), true)
            }
            Some(_) => continue,
            None => {
                let logits_matrix =
                    t.name == "output.weight" || (tied && t.name == "token_embd.weight");
                let kept = matches!(t.name.as_str(), "token_embd.weight" | "output.weight");
                (t.name.clone(), !kept || (last && logits_matrix))
            }
        };
        let (ty, data) = match (expand, dry) {
            (false, _) => (t.ggml_type, TensorData::Borrowed(bytes)),
            (true, false) => (GgmlType::F32, expanded(t, bytes)),
            (true, true) => (GgmlType::F32, zeros(t.n_elements() * 4)),
        };
        w.add_tensor(entry(t, name, ty, data));
    }
    w
}

/// Rows `ids` of the stored `token_embd.weight` in f32 (ggml's `to_float` of each stored row,
/// the values llama.cpp's `get_rows` gives the first layer): `ids.len() × n_embd` floats.
///
/// Errors: no `token_embd.weight`, an id past its rows, or a type without `to_float`.
pub fn embedding_rows(src: &Gguf, ids: &[u32]) -> Result<Vec<f32>> {
    let t = src
        .header
        .tensors
        .iter()
        .find(|t| t.name == "token_embd.weight")
        .ok_or_else(|| anyhow!("{}: no token_embd.weight", src.path().display()))?;
    let (n_embd, n_rows) = (
        t.dims[0] as usize,
        t.dims.get(1).copied().unwrap_or(1) as usize,
    );
    let bytes = src.tensor_data(t);
    let row_bytes = bytes.len() / n_rows.max(1);
    let mut out = vec![0f32; ids.len() * n_embd];
    for (i, id) in ids.iter().enumerate() {
        let id = *id as usize;
        anyhow::ensure!(
            id < n_rows,
            "{}: token id {id} past token_embd.weight's {n_rows} rows",
            src.path().display()
        );
        let row = &bytes[id * row_bytes..(id + 1) * row_bytes];
        llama_runtime::ggml_to_float(
            t.ggml_type.id(),
            row,
            &mut out[i * n_embd..(i + 1) * n_embd],
        )
        .map_err(|e| anyhow!("token_embd.weight row {id}: {e}"))?;
    }
    Ok(out)
}
