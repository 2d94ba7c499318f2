//! Gate 1 on a large tensor a block of rows at a time: the source rows widened to f32, their
//! expected encoding and the stored bytes of the same rows, so that memory follows the block
//! (64 MiB of f32), not the tensor (an 8B model's output matrix is 2.2 GB in f32).
//!
//! Rows are encoded independently (ggml's `quantize_row_*` and the float conversions take no
//! state across rows without an imatrix), so the encoding of a block is the block of the
//! whole tensor's encoding. A tensor whose blocks all match is bit-identical as a whole; any
//! other outcome is left to the whole-tensor comparison, which names the first difference.

use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

use anyhow::{Context, Result};
use gguf::GgmlType;
use llama_runtime::CTensorInfo;

use super::source_maps::SourceMaps;
use crate::source::{arch, hf::HfDir};

/// Bytes of f32 source values compared at a time.
pub const BLOCK_F32_BYTES: usize = 64 << 20;

/// The encodings a stored tensor of type `ty` is tried against, in order: straight from the
/// source, then (block types only) after ggml's round trip through F16, then BF16 (a
/// conversion to that type, then `quantize`).
pub fn candidates(ty: GgmlType) -> &'static [Option<GgmlType>] {
    match ty {
        GgmlType::F16 | GgmlType::BF16 => &[None],
        _ => &[None, Some(GgmlType::F16), Some(GgmlType::BF16)],
    }
}

/// ggml's round trip of `x` (rows of `row` values) through the float type `t`, in place.
///
/// Errors: ggml cannot encode or decode `t` (naming the tensor).
pub fn round_trip(x: &mut [f32], t: GgmlType, row: usize, name: &str) -> Result<()> {
    let bytes = llama_runtime::ggml_quantize(t.id(), x, row)
        .map_err(|e| anyhow::anyhow!("Gate 1: ggml cannot encode {name} as {t}: {e}"))?;
    llama_runtime::ggml_to_float(t.id(), &bytes, x)
        .map_err(|e| anyhow::anyhow!("Gate 1: ggml cannot decode {name} from {t}: {e}"))
}

/// The bytes of `x` (rows of `row` values) stored as `ty`: little-endian f32, or ggml's
/// encoding — with importance `weights` (`row` per matrix: the matrices of `x` in order, e.g.
/// a stack's experts) when given, as llama-quant.cpp passes each matrix its slice.
///
/// Errors: ggml cannot encode `ty` (naming the tensor).
pub fn encode(
    x: &[f32],
    ty: GgmlType,
    row: usize,
    name: &str,
    weights: Option<&[f32]>,
) -> Result<Vec<u8>> {
    if ty == GgmlType::F32 {
        return Ok(x.iter().flat_map(|v| v.to_le_bytes()).collect());
    }
    // Types ggml cannot encode without weights (IQ2_XXS, IQ2_XS, IQ1_S) are only ever made
    // with an imatrix; checked without it, unit weights give the unweighted encoding's
    // stand-in (the bound of an undecided tensor, docs/imatrix.md).
    let unit = (weights.is_none() && llama_runtime::ggml_requires_imatrix(ty.id()))
        .then(|| vec![1f32; row]);
    let Some(w) = weights.or(unit.as_deref()) else {
        return llama_runtime::ggml_quantize(ty.id(), x, row)
            .map_err(|e| anyhow::anyhow!("Gate 1: ggml cannot encode {name} as {ty}: {e}"));
    };
    let n_mat = (w.len() / row.max(1)).max(1);
    let mut out = Vec::new();
    for (m, mat) in x.chunks((x.len() / n_mat).max(1)).enumerate() {
        let wm = &w[m * row..(m + 1) * row];
        out.extend(
            llama_runtime::ggml_quantize_weighted(ty.id(), mat, row, Some(wm)).map_err(|e| {
                anyhow::anyhow!(
                    "Gate 1: ggml cannot encode {name} as {ty} with its imatrix weights: {e}"
                )
            })?,
        );
    }
    Ok(out)
}

/// A stored tensor against source tensor `src` (rows of `ne0` values, each value plus
/// `shift`), `block_bytes` of f32 at a time. `Some(via)`: every block equals the encoding of
/// the first candidate ([`candidates`]) that matches the first block, so the whole tensor
/// does (and no earlier candidate can). `None`: a block matched nothing, the source is not a
/// float dtype, or the file is short; the caller compares the whole tensor.
///
/// Errors: reading the file or the source, or ggml refusing the type.
#[allow(clippy::too_many_arguments)]
pub fn compare(
    file: &mut std::fs::File,
    path: &Path,
    info: &CTensorInfo,
    src: (usize, usize, f32),
    ty: GgmlType,
    maps: &mut SourceMaps,
    block_bytes: usize,
) -> Result<Option<Option<GgmlType>>> {
    compare_weighted(file, path, info, src, (ty, None), maps, block_bytes)
}

/// [`compare`] of a tensor encoded with one matrix's importance weights (`ne0` values, the
/// same for every row).
///
/// Errors: as [`compare`].
#[allow(clippy::too_many_arguments)]
pub fn compare_weighted(
    file: &mut std::fs::File,
    path: &Path,
    info: &CTensorInfo,
    (src, ne0, shift): (usize, usize, f32),
    (ty, weights): (GgmlType, Option<&[f32]>),
    maps: &mut SourceMaps,
    block_bytes: usize,
) -> Result<Option<Option<GgmlType>>> {
    let n: usize = info.ne.iter().map(|d| *d as usize).product();
    let rows = n / ne0.max(1);
    let row_bytes = gguf::tensor_n_bytes(ty, &[ne0 as u64])
        .map_err(|e| anyhow::anyhow!("{}: {e}", info.name))? as usize;
    let len = file.metadata()?.len();
    if rows * ne0 != n
        || (rows * row_bytes) as u64 != info.size
        || info.file_offset + info.size > len
    {
        return Ok(None);
    }
    let per = (block_bytes / (ne0 * 4)).max(1);
    let mut chosen: Option<Option<GgmlType>> = None;
    for r0 in (0..rows).step_by(per) {
        let r1 = (r0 + per).min(rows);
        let Some(mut x) = maps.load_f32_range(src, r0 * ne0..r1 * ne0)? else {
            return Ok(None);
        };
        if shift != 0.0 {
            x.iter_mut().for_each(|v| *v += shift);
        }
        let mut stored = vec![0u8; (r1 - r0) * row_bytes];
        file.seek(SeekFrom::Start(info.file_offset + (r0 * row_bytes) as u64))?;
        file.read_exact(&mut stored)
            .with_context(|| format!("{}: reading {} data", path.display(), info.name))?;
        let tried: Vec<Option<GgmlType>> = match chosen {
            Some(v) => vec![v],
            None => candidates(ty).to_vec(),
        };
        let mut hit = None;
        for via in tried {
            let mut y = x.clone();
            if let Some(t) = via {
                round_trip(&mut y, t, ne0, &info.name)?;
            }
            if encode(&y, ty, ne0, &info.name, weights)? == stored {
                hit = Some(via);
                break;
            }
        }
        match hit {
            Some(v) => chosen = Some(v),
            None => return Ok(None),
        }
    }
    Ok(chosen)
}

/// [`compare`] for a tensor larger than one block whose expected values are its
/// one source's rows as they are (plus gemma3's norm shift): not a stack of experts, not
/// missing leading rows (XLM-R's positions), not Q/K-permuted. `None`: compare it whole.
#[allow(clippy::too_many_arguments)]
pub(super) fn in_row_blocks(
    file: &mut std::fs::File,
    path: &Path,
    hf: &HfDir,
    a: arch::Arch,
    members: &[usize],
    info: &CTensorInfo,
    (ty, weights): (GgmlType, Option<&[f32]>),
    maps: &mut SourceMaps,
) -> Result<Option<Option<GgmlType>>> {
    let n: u64 = info.ne.iter().map(|d| *d as u64).product();
    let plain = members.len() == 1
        && arch::rows_dropped(&hf.config, &info.name) == 0
        && crate::source::permute::permute_heads(hf, a, &info.name).is_none();
    if !plain || n * 4 <= BLOCK_F32_BYTES as u64 || info.ne[0] <= 0 {
        return Ok(None);
    }
    let src = (members[0], info.ne[0] as usize, a.norm_shift(&info.name));
    compare_weighted(file, path, info, src, (ty, weights), maps, BLOCK_F32_BYTES)
}
