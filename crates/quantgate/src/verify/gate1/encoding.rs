//! The expected encoding of one stored tensor: the reference's values of its HF sources (one
//! tensor, or a stack's experts), shifted, permuted and encoded as ggml encodes them — with
//! the tensor's importance weights when the file is an imatrix quant checked with its imatrix
//! ([`Weighting`], [`crate::verify::imatrix`]).

use anyhow::Result;
use gguf::GgmlType;
use llama_runtime::CTensorInfo;

use super::row_blocks;
use super::source_maps::SourceMaps;
use crate::imatrix::Weights;
use crate::source::{arch, hf::HfDir};
use crate::verify::imatrix::{rms_diff, UndecidedTensor};
use crate::verify::outcome::{Blocker, BlockerCode};

/// How an imatrix quant's tensors are encoded.
#[derive(Clone, Copy, Default)]
pub struct Weighting<'a> {
    /// The weights of the imatrix given with `--imatrix`.
    pub weights: Option<&'a Weights>,
    /// The file has `quantize.imatrix.*` keys.
    pub keyed: bool,
}

impl<'a> Weighting<'a> {
    /// The weights llama-quant.cpp passes for `info`: its entry when it holds `ne[0] · n_mat`
    /// values (one row per expert); none otherwise (the quantizer then uses none, or refuses
    /// the imatrix, and the bytes decide).
    pub fn for_tensor(&self, info: &CTensorInfo) -> Option<&'a [f32]> {
        let w = self.weights?.get(&info.name)?;
        let n_mat = info.ne.get(2).copied().unwrap_or(1).max(1) as usize;
        (w.len() == info.ne[0] as usize * n_mat).then_some(w.as_slice())
    }

    /// Whether a tensor whose bytes are not the unweighted encoding is undecided rather than
    /// wrong: an imatrix quant checked without its imatrix, a type that takes weights, and a
    /// name the imatrix collects (`blk.*`).
    pub fn undecided(&self, info: &CTensorInfo, ty: GgmlType) -> bool {
        self.keyed
            && self.weights.is_none()
            && crate::verify::imatrix::takes_weights(ty)
            && info.name.starts_with("blk.")
    }
}

/// One stored tensor and where its expected values come from.
pub struct Target<'a> {
    pub hf: &'a HfDir,
    pub a: arch::Arch,
    /// HF tensor indices: one, or a stack's experts in order.
    pub members: &'a [usize],
    pub info: &'a CTensorInfo,
    pub ty: GgmlType,
    /// The source's shape as the file stores it.
    pub ne_src: &'a [i64],
    /// Importance weights, `ne[0]` per matrix.
    pub weights: Option<&'a [f32]>,
}

/// The reference's values of `t`'s sources as the file should hold them before encoding
/// (rows dropped, norm shift, Q/K permutation); with `via`, after ggml's round trip through
/// that float type. Length: the tensor's element count.
pub fn expected_values(
    t: &Target,
    via: Option<GgmlType>,
    maps: &mut SourceMaps,
) -> Result<Vec<f32>> {
    let mut x = Vec::new();
    for &j in t.members {
        x.extend(maps.load_f32(j)?);
    }
    let ne0 = t.ne_src[0] as usize;
    // XLM-R's position table starts at row pad_token_id + 1 in the file.
    let skip = arch::rows_dropped(&t.hf.config, &t.info.name) * ne0;
    if skip > 0 {
        x.drain(..skip.min(x.len()));
    }
    // gemma3 norms are stored as 1 + w (the shared arch table states it once).
    let shift = t.a.norm_shift(&t.info.name);
    if shift != 0.0 {
        x.iter_mut().for_each(|v| *v += shift);
    }
    if let Some(f) = via {
        row_blocks::round_trip(&mut x, f, ne0, &t.info.name)?;
    }
    if let Some(heads) = crate::source::permute::permute_heads(t.hf, t.a, &t.info.name) {
        // llama.cpp's Q/K row order (spec §4.3), applied to the reference's values.
        let rows = if t.ne_src.len() > 1 {
            t.ne_src[1] as usize
        } else {
            ne0
        };
        x = crate::source::permute::permute_qk(&x, rows, heads);
    }
    Ok(x)
}

/// The bytes ggml's encoding of [`expected_values`] should give.
pub fn expected_bytes(t: &Target, via: Option<GgmlType>, maps: &mut SourceMaps) -> Result<Vec<u8>> {
    let x = expected_values(t, via, maps)?;
    row_blocks::encode(&x, t.ty, t.ne_src[0] as usize, &t.info.name, t.weights)
}

/// An undecided tensor's distance from its source: `stored` and `unweighted` (ggml's
/// encoding without weights) read back by ggml's `to_float`, each against
/// [`expected_values`] ([`crate::verify::imatrix::MAX_UNDECIDED_RMS_RATIO`] judges it).
pub fn undecided_error(
    t: &Target,
    stored: &[u8],
    unweighted: &[u8],
    maps: &mut SourceMaps,
) -> Result<UndecidedTensor> {
    let x = expected_values(t, None, maps)?;
    let back = |b: &[u8]| -> Result<Vec<f32>> {
        let mut y = vec![0f32; x.len()];
        llama_runtime::ggml_to_float(t.ty.id(), b, &mut y)
            .map_err(|e| anyhow::anyhow!("Gate 1: ggml cannot read {} back: {e}", t.info.name))?;
        Ok(y)
    };
    Ok(UndecidedTensor {
        name: t.info.name.clone(),
        ty: t.ty.to_string(),
        rms_stored: rms_diff(&back(stored)?, &x),
        rms_unweighted: rms_diff(&back(unweighted)?, &x),
    })
}

/// The float type (F16, BF16) whose round trip makes the expected encoding equal `stored`,
/// tried in [`row_blocks::candidates`] order; `None` if neither does.
pub fn via_intermediate(
    t: &Target,
    stored: &[u8],
    maps: &mut SourceMaps,
) -> Result<Option<GgmlType>> {
    for f in row_blocks::candidates(t.ty).iter().flatten() {
        if expected_bytes(t, Some(*f), maps)? == stored {
            return Ok(Some(*f));
        }
    }
    Ok(None)
}

/// The blocker for stored bytes that differ from the expected ones, naming the first
/// difference and its source (for a stack of experts, the expert whose slab holds it).
pub fn bits_blocker(
    info: &CTensorInfo,
    sources: &[&str],
    ty: GgmlType,
    stored: &[u8],
    expected: &[u8],
) -> Blocker {
    let at = stored
        .iter()
        .zip(expected)
        .position(|(a, b)| a != b)
        .unwrap_or(stored.len().min(expected.len()));
    let slab = (expected.len() / sources.len().max(1)).max(1);
    let e = (at / slab).min(sources.len().saturating_sub(1));
    let which = if sources.len() > 1 {
        format!("expert {e} ({})", sources[e])
    } else {
        sources.first().copied().unwrap_or("?").to_string()
    };
    Blocker::new(
        BlockerCode::TensorBits,
        &info.name,
        format!(
            "stored {ty} bytes differ from the encoding of {which} at byte {at} of {}",
            stored.len()
        ),
    )
}
