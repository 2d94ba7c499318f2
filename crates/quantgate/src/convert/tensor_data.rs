//! The deferred bytes of each planned tensor: plain float sources (Q/K-permuted, encoded as
//! the stored type), gemma3's shifted norms, and already-quantized MLX / GPTQ / AWQ /
//! compressed-tensors modules (repacked exactly, or stored as a declared fallback). Each reads
//! its source only when the writer asks for it, and refuses non-finite values unless allowed.

use std::cell::RefCell;
use std::rc::Rc;

use anyhow::Result;
use gguf::{GgmlType, GgufWriter, TensorData, TensorEntry};

use super::{mlx, packed, stream, PlannedTensor};
use crate::source::hf::{self, HfDir};
use crate::source::permute::{permute_qk, row_order};

/// MLX modules by the index of their `.weight`.
pub(super) type AffineBySource = std::collections::HashMap<usize, crate::source::mlx::AffineTensor>;

/// GPTQ / AWQ / compressed-tensors modules by the index of their packed codes.
pub(super) type PackedBySource = std::collections::HashMap<usize, (packed::Module, packed::Scheme)>;

/// What the deferred tensor writers report back, and how they treat non-finite values.
pub(super) struct Sinks {
    pub(super) fallback_errors: Rc<RefCell<Vec<mlx::FallbackError>>>,
    pub(super) underflow: Rc<RefCell<Vec<(String, usize)>>>,
    pub(super) allow_nonfinite: bool,
}

/// Every planned plain tensor's count of NaN/Inf source values (tensors with none omitted).
pub(super) fn nonfinite_sources(
    hf: &HfDir,
    planned: &[(usize, PlannedTensor)],
) -> Result<Vec<(String, usize)>> {
    let mut out = Vec::new();
    for (i, p) in planned {
        let mut n = 0;
        for j in members(*i, p) {
            let src = &hf.tensors[j];
            if src.dtype == hf::SourceDtype::U32 {
                continue;
            }
            n += hf.to_f32(src)?.iter().filter(|v| !v.is_finite()).count();
        }
        if n > 0 {
            out.push((p.gguf_name.clone(), n));
        }
    }
    Ok(out)
}

/// The source indices a planned tensor is made of: its experts, in order, for a stacked MoE
/// tensor; else its own.
fn members(i: usize, p: &PlannedTensor) -> Vec<usize> {
    if p.experts.is_empty() {
        vec![i]
    } else {
        p.experts.clone()
    }
}

pub(super) fn add_tensors<'a>(
    w: &mut GgufWriter<'a>,
    hf: &'a HfDir,
    planned: &[(usize, PlannedTensor)],
    (affine, packed): (&AffineBySource, &PackedBySource),
    sink: &Sinks,
) {
    // Progress in MiB written, so the ETA weighs tensors by size.
    let size = |p: &PlannedTensor| {
        let ty = GgmlType::from_name(&p.ggml_type).expect("planned type");
        gguf::tensor_n_bytes(ty, &p.ne).unwrap_or(0) >> 20
    };
    let total = planned.iter().map(|(_, p)| size(p)).sum::<u64>() as usize;
    let mut done = 0usize;
    for (i, p) in planned {
        let src = &hf.tensors[*i];
        let ty = GgmlType::from_name(&p.ggml_type).expect("planned type");
        let name = p.gguf_name.clone();
        let uf = sink.underflow.clone();
        let permute = p.permute_heads;
        let rows = p.ne.get(1).copied().unwrap_or(p.ne[0]) as usize;
        let data = match (affine.get(i).cloned(), packed.get(i).cloned()) {
            (Some(at), _) => {
                let fe = (sink.fallback_errors.clone(), sink.allow_nonfinite);
                affine_data(hf, at, ty, permute, name, fe)
            }
            (None, Some(m)) => {
                let fe = (sink.fallback_errors.clone(), sink.allow_nonfinite);
                packed_data(hf, m, ty, permute, name, fe)
            }
            (None, None) if !p.experts.is_empty() => {
                let allow = sink.allow_nonfinite;
                let rows = p.ne[1] as usize;
                stacked_data(hf, p.experts.clone(), ty, rows, name, uf, allow)
            }
            (None, None) if p.shift != 0.0 || p.skip_rows > 0 => {
                let skip = p.skip_rows * p.ne[0] as usize;
                f32_data(hf, src, (ty, p.shift, skip), name, sink.allow_nonfinite)
            }
            (None, None) => {
                let allow = sink.allow_nonfinite;
                plain_data(hf, src, ty, (permute, rows), name, uf, allow)
            }
        };
        let data = match data {
            TensorData::Deferred(f) => TensorData::Deferred(Box::new(move |out| {
                crate::progress::report("MiB of tensors written", done, total);
                f(out)
            })),
            d => d,
        };
        done += size(p) as usize;
        w.add_tensor(TensorEntry {
            name: p.gguf_name.clone(),
            ggml_type: ty,
            dims: p.ne.clone(),
            data,
        });
    }
}

/// The deferred bytes of an MLX module: repacked exactly, or decoded and stored as a fallback.
fn affine_data<'a>(
    hf_ref: &'a HfDir,
    at: crate::source::mlx::AffineTensor,
    ty: GgmlType,
    permute: Option<usize>,
    name: String,
    (fe, allow): (Rc<RefCell<Vec<mlx::FallbackError>>>, bool),
) -> TensorData<'a> {
    TensorData::Deferred(Box::new(move |out| {
        crate::interrupt::check().map_err(std::io::Error::other)?;
        for i in [at.scales, at.biases] {
            let src = &hf_ref.tensors[i];
            let bad = count_nonfinite(&hf_ref.to_f32(src)?);
            nonfinite_guard(hf_ref, src, &name, bad, allow)?;
        }
        let g = at.affine.group;
        let buf = if matches!(ty, GgmlType::Q4_1 | GgmlType::Q5_1) {
            let raw = hf_ref.bytes(&hf_ref.tensors[at.weight])?;
            let words: Vec<u32> = raw
                .chunks_exact(4)
                .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect();
            let s = hf_ref.to_f32(&hf_ref.tensors[at.scales])?;
            let b = hf_ref.to_f32(&hf_ref.tensors[at.biases])?;
            let order = row_order(at.out, permute);
            mlx::repack_exact(ty, &words, at.affine.bits, &s, &b, at.inn, g, &order)
        } else {
            let d = mlx::decode(hf_ref, &at, permute)?;
            let x = mlx::named_formula(&d.codes, &d.scales, &d.biases, at.inn, g);
            fallback_bytes(ty, &x, &name, &fe)?
        };
        out.write_all(&buf)
    }))
}

/// A module's named-formula values `x` stored as the declared fallback `ty`; the encoding
/// error of a lossy fallback is recorded in `fe` for the report (F32 is exact: none).
///
/// Errors: the encoder refuses `ty`.
fn fallback_bytes(
    ty: GgmlType,
    x: &[f32],
    name: &str,
    fe: &RefCell<Vec<mlx::FallbackError>>,
) -> std::io::Result<Vec<u8>> {
    let (buf, err) = mlx::encode_fallback(ty, x, name)?;
    if ty != GgmlType::F32 {
        fe.borrow_mut().push(err);
    }
    Ok(buf)
}

/// The deferred bytes of a GPTQ / AWQ / compressed-tensors module: encoded exactly, or the
/// named-formula values stored as a fallback.
fn packed_data<'a>(
    hf_ref: &'a HfDir,
    (m, s): (packed::Module, packed::Scheme),
    ty: GgmlType,
    permute: Option<usize>,
    name: String,
    (fe, allow): (Rc<RefCell<Vec<mlx::FallbackError>>>, bool),
) -> TensorData<'a> {
    TensorData::Deferred(Box::new(move |out| {
        crate::interrupt::check().map_err(std::io::Error::other)?;
        let d = packed::decode(hf_ref, &m, &s)?;
        let scales = &hf_ref.tensors[m.scales];
        nonfinite_guard(hf_ref, scales, &name, count_nonfinite(&d.scales), allow)?;
        let order = row_order(m.out, permute);
        let buf = if matches!(
            ty,
            GgmlType::Q4_0 | GgmlType::Q4_1 | GgmlType::Q5_0 | GgmlType::Q8_0
        ) && packed::exact_type(&m, &s, &d).0 == Some(ty)
        {
            packed::encode_exact(ty, &d, m.inn, &order)
        } else {
            let x = packed::named_formula(&d, m.inn, &order);
            fallback_bytes(ty, &x, &name, &fe)?
        };
        out.write_all(&buf)
    }))
}

/// The deferred bytes of a float source tensor: read, Q/K-permuted if needed, encoded as `ty`.
fn plain_data<'a>(
    hf_ref: &'a HfDir,
    src: &'a hf::SourceTensor,
    ty: GgmlType,
    (permute, rows): (Option<usize>, usize),
    name: String,
    uf: Rc<RefCell<Vec<(String, usize)>>>,
    allow_nonfinite: bool,
) -> TensorData<'a> {
    TensorData::Deferred(Box::new(move |out| {
        // Ctrl-C: stop between tensors; the writer's temp file is removed on error.
        crate::interrupt::check().map_err(std::io::Error::other)?;
        let underflow = encode_source(
            hf_ref,
            src,
            ty,
            (permute, rows),
            (&name, allow_nonfinite),
            out,
        )?;
        if underflow > 0 {
            uf.borrow_mut().push((name.clone(), underflow));
        }
        Ok(())
    }))
}

/// Writes float source `src` (`rows` rows, Q/K-permuted by `permute` heads) encoded as `ty`
/// to `out`; returns how many non-zero values became zero in f16.
///
/// Errors: read/write errors, non-finite values unless allowed, f16 overflow (naming `name`).
fn encode_source(
    hf_ref: &HfDir,
    src: &hf::SourceTensor,
    ty: GgmlType,
    (permute, rows): (Option<usize>, usize),
    (name, allow_nonfinite): (&str, bool),
    out: &mut dyn std::io::Write,
) -> std::io::Result<usize> {
    if ty == GgmlType::Q8_0 {
        let mut x = hf_ref.to_f32(src)?;
        nonfinite_guard(hf_ref, src, name, count_nonfinite(&x), allow_nonfinite)?;
        if let Some(heads) = permute {
            x = permute_qk(&x, rows, heads);
        }
        // Q8_0 needs whole 32-value blocks of the (permuted) rows: whole tensor at once.
        let mut buf = Vec::new();
        gguf::quant_ref::quantize_q8_0(&x, &mut buf);
        out.write_all(&buf)?;
        return Ok(0);
    }
    let perm = permute.map(|h| (rows, h));
    let c = stream::convert(hf_ref, src, ty, (rows, perm), out, &mut |c| {
        nonfinite_guard(hf_ref, src, name, c.nonfinite, allow_nonfinite)?;
        overflow_guard(name, c.overflow)
    })?;
    Ok(c.underflow)
}

/// The deferred bytes of a stacked MoE tensor: each expert's source tensor (`rows` rows),
/// encoded as `ty` in expert order, one after another (the 3-D tensor's slabs; rows are
/// independent, so a slab's Q8_0 blocks are those of the whole tensor).
fn stacked_data<'a>(
    hf_ref: &'a HfDir,
    experts: Vec<usize>,
    ty: GgmlType,
    rows: usize,
    name: String,
    uf: Rc<RefCell<Vec<(String, usize)>>>,
    allow_nonfinite: bool,
) -> TensorData<'a> {
    TensorData::Deferred(Box::new(move |out| {
        crate::interrupt::check().map_err(std::io::Error::other)?;
        let mut underflow = 0;
        for &j in &experts {
            let src = &hf_ref.tensors[j];
            underflow +=
                encode_source(hf_ref, src, ty, (None, rows), (&name, allow_nonfinite), out)?;
        }
        if underflow > 0 {
            uf.borrow_mut().push((name.clone(), underflow));
        }
        Ok(())
    }))
}

/// The deferred bytes of a source tensor stored as F32 values plus `shift` (gemma3 norms),
/// without its first `skip` values (XLM-R's dropped position rows, [`PlannedTensor::skip_rows`]):
/// widened to f32 first, then shifted, as convert_hf_to_gguf.py does.
fn f32_data<'a>(
    hf_ref: &'a HfDir,
    src: &'a hf::SourceTensor,
    (ty, shift, skip): (GgmlType, f32, usize),
    name: String,
    allow_nonfinite: bool,
) -> TensorData<'a> {
    TensorData::Deferred(Box::new(move |out| {
        crate::interrupt::check().map_err(std::io::Error::other)?;
        if ty != GgmlType::F32 {
            return Err(std::io::Error::other(format!(
                "tensor {name}: a shifted norm or cut position table must be stored as F32, not {ty}"
            )));
        }
        let x = hf_ref.to_f32(src)?;
        let x = x.get(skip..).ok_or_else(|| {
            std::io::Error::other(format!(
                "tensor {name}: {} values, fewer than the {skip} to drop",
                x.len()
            ))
        })?;
        nonfinite_guard(hf_ref, src, &name, count_nonfinite(x), allow_nonfinite)?;
        // Adding a zero shift would turn -0.0 into +0.0 (IEEE: -0 + +0 = +0); the converter
        // keeps the sign.
        let shifted = |v: f32| if shift == 0.0 { v } else { v + shift };
        let buf: Vec<u8> = x.iter().flat_map(|v| shifted(*v).to_le_bytes()).collect();
        out.write_all(&buf)
    }))
}

fn count_nonfinite(x: &[f32]) -> usize {
    x.iter().filter(|v| !v.is_finite()).count()
}

/// Refuses `bad` non-finite source values unless `--allow-nonfinite`.
fn nonfinite_guard(
    hf: &HfDir,
    src: &hf::SourceTensor,
    name: &str,
    bad: usize,
    allow: bool,
) -> std::io::Result<()> {
    if bad > 0 && !allow {
        return Err(std::io::Error::other(format!(
            "{}: tensor {} ({name}): {bad} non-finite source values (NaN/Inf); refusing to \
             write them (--allow-nonfinite keeps them, recorded in the file)",
            hf.file_of(src).display(),
            src.name
        )));
    }
    Ok(())
}

/// Refuses finite values beyond the f16 range (they would be written as inf).
fn overflow_guard(name: &str, overflow: usize) -> std::io::Result<()> {
    if overflow > 0 {
        return Err(std::io::Error::other(format!(
            "tensor {name}: {overflow} finite values exceed the f16 range (|x| > 65504); \
             refusing to write inf — use --outtype f32 or bf16"
        )));
    }
    Ok(())
}
