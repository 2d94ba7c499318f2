//! The reference side of Gate 2, independent of llama.cpp and of our GGUF writer:
//!
//! * [`tokenizer::HfTokenizer`]: the `tokenizers` crate (the code behind HF's Python
//!   tokenizers) on `tokenizer.json`, padding and truncation off;
//! * [`bert::Bert`] and [`decoder::Decoder`]: f32 forwards written on candle ops over the HF
//!   safetensors, returning every position (candle-transformers' models return only the last);
//! * [`pooling`]: sentence-transformers pooling (mean, cls, last token);
//! * [`mlx`]: MLX affine-quantized checkpoints, dequantized to f32 for the decoder.

pub mod bert;
pub mod decoder;
pub mod hf_config;
pub mod longrope;
pub mod mlx;
pub mod moe;
pub mod packed;
pub mod pooling;
pub mod rope;
pub mod tokenizer;
pub mod weights;

use std::path::{Path, PathBuf};

/// Errors of the reference implementation; each names the file or tensor involved.
#[derive(Debug, thiserror::Error)]
pub enum RefError {
    /// Reading or parsing an input file.
    #[error("{path}: {detail}")]
    File { path: PathBuf, detail: String },
    /// A candle operation failed (shape mismatch, missing tensor …).
    #[error("reference forward: {0}")]
    Candle(#[from] candle_core::Error),
    /// A model feature the reference does not implement.
    #[error("reference does not support {0}")]
    Unsupported(String),
    /// The tokenizer failed on a text.
    #[error("tokenizer: {0}")]
    Tokenizer(String),
}

/// Result alias of this crate.
pub type Result<T> = std::result::Result<T, RefError>;

/// Reads and parses a JSON file.
pub fn read_json(path: &Path) -> Result<serde_json::Value> {
    let text = std::fs::read_to_string(path).map_err(|e| RefError::File {
        path: path.into(),
        detail: e.to_string(),
    })?;
    serde_json::from_str(&text).map_err(|e| RefError::File {
        path: path.into(),
        detail: e.to_string(),
    })
}

/// Integer field `key` of a parsed config.json at `path`.
///
/// Errors: the field is missing or not a non-negative integer (naming the file and field).
pub fn config_usize(v: &serde_json::Value, path: &Path, key: &str) -> Result<usize> {
    v[key]
        .as_u64()
        .map(|x| x as usize)
        .ok_or_else(|| RefError::File {
            path: path.into(),
            detail: format!("missing integer field {key:?}"),
        })
}

/// Whether an optional input file is there: `false` only when nothing is at the path. A
/// dangling symlink, a symlink loop or an unreadable folder is an error naming the path, never
/// "absent" (which would silently change what is compared).
pub fn present(p: &Path) -> Result<bool> {
    match std::fs::metadata(p) {
        Ok(_) => Ok(true),
        Err(e)
            if e.kind() == std::io::ErrorKind::NotFound
                && std::fs::symlink_metadata(p).is_err() =>
        {
            Ok(false)
        }
        Err(e) => Err(RefError::File {
            path: p.into(),
            detail: e.to_string(),
        }),
    }
}

/// The safetensors files of an HF folder, as transformers picks them: the single
/// `model.safetensors` when present (it wins over an index, `modeling_utils`'s order), else the
/// shards named by `model.safetensors.index.json` (sorted, deduplicated), each a plain file
/// name inside `dir`.
///
/// Errors: neither file, an index without a `weight_map` object, or a shard name that is not
/// a plain file name (`../x`, `a/b`, absolute), each naming the file.
pub fn safetensors_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let single = dir.join("model.safetensors");
    if present(&single)? {
        return Ok(vec![single]);
    }
    let index = dir.join("model.safetensors.index.json");
    if present(&index)? {
        let v = read_json(&index)?;
        let map = v["weight_map"].as_object().ok_or_else(|| RefError::File {
            path: index.clone(),
            detail: "no weight_map object".into(),
        })?;
        let mut files: Vec<String> = map
            .values()
            .filter_map(|f| f.as_str().map(String::from))
            .collect();
        files.sort();
        files.dedup();
        if let Some(bad) = files.iter().find(|f| !is_plain_file_name(f)) {
            return Err(RefError::File {
                path: index,
                detail: format!("weight_map names {bad:?}, which is not a file in the folder"),
            });
        }
        return Ok(files.into_iter().map(|f| dir.join(f)).collect());
    }
    Err(RefError::File {
        path: dir.into(),
        detail: "no model.safetensors or model.safetensors.index.json".into(),
    })
}

/// A single path component naming a file: no separator, not `.` or `..`, not empty.
fn is_plain_file_name(f: &str) -> bool {
    !f.is_empty() && f != "." && f != ".." && !f.contains('/') && !f.contains('\0')
}

/// A `VarBuilder` over the HF safetensors, every tensor converted to f32 on the CPU when it is
/// read, its mapped pages released afterwards ([`weights::MmapWeights`]).
pub fn var_builder(dir: &Path) -> Result<candle_nn::VarBuilder<'static>> {
    weights::var_builder(&safetensors_files(dir)?, candle_core::DType::F32)
}
