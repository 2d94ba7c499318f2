//! What Gate 1's plain, MLX and packed checks share: the quantized-source report, the tensors
//! a quantized check covers (so the plain check skips them), the role of a source tensor in a
//! quantized module, and reading one tensor's stored bytes.

use std::collections::{BTreeMap, HashSet};
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

use anyhow::{Context, Result};
use llama_runtime::CTensorInfo;
use serde::{Deserialize, Serialize};

use crate::verify::outcome::{Blocker, BlockerCode};

/// What the affine Gate 1 measured.
#[derive(Clone, Debug, Serialize, Deserialize, Default)]
pub struct AffineGate1Report {
    /// The declared decision rule.
    pub rule: String,
    /// Quantized source modules found.
    pub modules: usize,
    /// Stored exactly (Q4_1/Q5_1): fields identical / values identical under the named formula.
    pub exact_tensors: usize,
    pub fields_identical: usize,
    pub values_identical: usize,
    /// Fallback tensors and how many equal their declared encoding byte for byte.
    pub fallback_tensors: usize,
    pub fallback_identical: usize,
    /// Tensors where ggml's `to_float` equals the named formula bit for bit / tensors checked.
    pub ggml_to_float_agrees: usize,
    pub ggml_to_float_checked: usize,
    /// Per stored type: tensors.
    pub by_type: BTreeMap<String, usize>,
}

/// GGUF names and source indices the affine check covers (so the plain check skips them).
#[derive(Default)]
pub struct Covered {
    pub gguf_names: HashSet<String>,
    pub source_indices: HashSet<usize>,
}

/// Tensor-name suffixes a packed module consumes.
pub(super) const PARTS: [&str; 8] = [
    "qweight",
    "qzeros",
    "scales",
    "g_idx",
    "weight_packed",
    "weight_scale",
    "weight_zero_point",
    "weight_shape",
];

/// What a source tensor is to a conversion of a packed (or MLX) checkpoint.
pub enum Role<'a> {
    /// The packed codes of module `.0` (GPTQ/AWQ `qweight`, compressed-tensors
    /// `weight_packed`): the module's `.weight` in the file.
    Codes(&'a str),
    /// Another tensor of a quantized module (zeros, scales, `g_idx`, MLX `biases`, …).
    Part,
    /// A plain tensor.
    Plain,
}

/// The role of source tensor `name`.
pub fn role(name: &str) -> Role<'_> {
    match name.rsplit_once('.') {
        Some((m, "qweight" | "weight_packed")) => Role::Codes(m),
        Some((_, p)) if PARTS.contains(&p) || p == "biases" => Role::Part,
        _ => Role::Plain,
    }
}

/// The stored bytes of `info`, or a blocker when the file ends before them (a truncated file).
///
/// Errors: a read failure other than the end of the file.
pub fn read_stored(
    file: &mut std::fs::File,
    path: &Path,
    info: &CTensorInfo,
    blockers: &mut Vec<Blocker>,
) -> Result<Option<Vec<u8>>> {
    let len = file.metadata()?.len();
    let end = info.file_offset.saturating_add(info.size);
    if end > len {
        blockers.push(Blocker::new(
            BlockerCode::TensorTruncated,
            &info.name,
            format!(
                "{}: data ends at byte {end}, the file has {len} bytes",
                path.display()
            ),
        ));
        return Ok(None);
    }
    let mut stored = vec![0u8; info.size as usize];
    file.seek(SeekFrom::Start(info.file_offset))?;
    file.read_exact(&mut stored)
        .with_context(|| format!("{}: reading {} data", path.display(), info.name))?;
    Ok(Some(stored))
}
