//! `general.file_type` of a quantized file, as llama.cpp's quantizer writes it: the ftype that
//! was asked for, whose type plan (`llama_tensor_get_type`, run as a dry run on the F32
//! expansion) gives every tensor exactly the type the file stores. The converter's code is not
//! involved: the plan is llama.cpp's own.

use std::path::Path;

use anyhow::Result;
use gguf::LlamaFtype;
use llama_runtime::{CGguf, CValue};

/// How the file's stored types compare with llama.cpp's plan for an ftype.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PlanMatch {
    /// Every tensor has the plan's type.
    Exact,
    /// `n` tensors differ; the first one with its planned and stored ggml type names.
    Differs {
        /// Number of tensors whose stored type is not the planned one.
        n: usize,
        /// (tensor, planned type, stored type) of the first difference.
        first: (String, String, String),
    },
}

/// The file's `general.file_type` as a u32, if present and of an integer type.
pub fn claimed(c: &CGguf) -> Option<u32> {
    match c.get(gguf::keys::general::FILE_TYPE)? {
        CValue::Scalar { ty: 4, bytes } => Some(u32::from_le_bytes(bytes.try_into().ok()?)),
        _ => None,
    }
}

/// Whether the file was quantized with an importance matrix (`quantize.imatrix.*` keys): the
/// plan then differs for some tensors (llama-quant.cpp's `has_imatrix`).
pub fn has_imatrix(c: &CGguf) -> bool {
    c.keys()
        .iter()
        .any(|k| k.starts_with(gguf::keys::quantize::IMATRIX_PREFIX))
}

/// What the dry run needs to plan as with an imatrix: the plan depends on whether one is
/// given, not on its values, so one entry that names no tensor does.
fn plan_imatrix(on: bool) -> Option<llama_runtime::QuantizeImatrix> {
    on.then(|| llama_runtime::QuantizeImatrix {
        weights: vec![("(plan only)".into(), vec![1.0])],
        ..Default::default()
    })
}

/// Compares the stored types of `c` with llama.cpp's plan for `ftype` on `expansion` (a file
/// of the same tensor names and shapes in F32), planned with an imatrix when the file was
/// quantized with one. Also returns the plan's tensor order, the order llama.cpp's quantizer
/// writes.
///
/// Errors: llama.cpp refuses the dry run or its log does not parse.
pub fn compare(c: &CGguf, expansion: &Path, ftype: u32) -> Result<(PlanMatch, Vec<String>)> {
    let im = plan_imatrix(has_imatrix(c));
    let plan = llama_runtime::quantize_plan(expansion, ftype, im.as_ref())?;
    let order = plan.iter().map(|p| p.name.clone()).collect();
    let stored = c.tensors();
    let mut n = 0;
    let mut first = None;
    for t in &stored {
        let stored_name = gguf::GgmlType::from_id(t.type_id).map_or_else(
            || format!("type {}", t.type_id),
            |g| g.ggml_name().to_string(),
        );
        let p = plan.iter().find(|p| p.name == t.name);
        let planned = p.map_or("(not in plan)".to_string(), |p| p.ggml_type.clone());
        // A tensor the quantizer keeps has the input's float type, which the F32 expansion
        // cannot tell: any float type is the plan's (Gate 1 checks which one is right).
        let kept_float = p.is_some_and(|p| p.kept)
            && matches!(
                gguf::GgmlType::from_id(t.type_id),
                Some(gguf::GgmlType::F32 | gguf::GgmlType::F16 | gguf::GgmlType::BF16)
            );
        if !kept_float && !planned.eq_ignore_ascii_case(&stored_name) {
            n += 1;
            first.get_or_insert((t.name.clone(), planned, stored_name));
        }
    }
    let m = match first {
        None if plan.len() == stored.len() => PlanMatch::Exact,
        None => PlanMatch::Differs {
            n: plan.len().abs_diff(stored.len()),
            first: (
                "(tensor count)".into(),
                plan.len().to_string(),
                stored.len().to_string(),
            ),
        },
        Some(first) => PlanMatch::Differs { n, first },
    };
    Ok((m, order))
}

/// The first quantize target whose plan matches the stored types exactly, with its order.
///
/// Errors: as [`compare`].
pub fn matching_ftype(c: &CGguf, expansion: &Path) -> Result<Option<(LlamaFtype, Vec<String>)>> {
    for ft in LlamaFtype::quantize_targets() {
        let (m, order) = compare(c, expansion, ft.id)?;
        if m == PlanMatch::Exact {
            return Ok(Some((ft, order)));
        }
    }
    Ok(None)
}
