//! Reading an HF checkpoint folder: config.json, tokenizer files and (sharded) safetensors.
//! Headers are parsed up front; tensor data is read with positioned reads one tensor at a time
//! (not memory-mapped), so a conversion's resident memory is bounded by its largest tensor,
//! not by the model's size.

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context, Result};
use serde_json::Value;

/// Source dtypes a conversion reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SourceDtype {
    F32,
    F16,
    BF16,
    /// Packed codes of already-quantized checkpoints (MLX affine).
    U32,
    /// Any other dtype (e.g. the I64 `position_ids` buffer): listed, never converted.
    Other,
}

impl SourceDtype {
    /// Bytes per element (0 for [`SourceDtype::Other`]).
    pub fn size(self) -> usize {
        match self {
            SourceDtype::F32 | SourceDtype::U32 => 4,
            SourceDtype::F16 | SourceDtype::BF16 => 2,
            SourceDtype::Other => 0,
        }
    }
}

/// One tensor of the checkpoint.
#[derive(Clone, Debug)]
pub struct SourceTensor {
    /// HF name, e.g. `encoder.layer.0.attention.self.query.weight`.
    pub name: String,
    /// Stored dtype.
    pub dtype: SourceDtype,
    /// Numpy-order shape (rows first).
    pub shape: Vec<usize>,
    file: usize,
    start: usize,
    end: usize,
}

impl SourceTensor {
    /// Number of elements.
    pub fn n_elements(&self) -> usize {
        self.shape.iter().product()
    }
}

/// An HF model folder.
pub struct HfDir {
    /// The folder.
    pub dir: PathBuf,
    /// config.json.
    pub config: Value,
    /// tokenizer_config.json (empty object when absent).
    pub tokenizer_config: Value,
    /// Tensors in checkpoint order: shard files sorted by name, each in data-offset order.
    pub tensors: Vec<SourceTensor>,
    files: Vec<(PathBuf, File)>,
}

/// The files of an HF folder beside config.json and the weights that a conversion or a
/// verification may read (tokenizer, chat templates, generation config, sentence-transformers
/// pooling); a release ships each that is present.
pub const SIDE_FILES: &[&str] = &[
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "vocab.txt",
    "vocab.json",
    "merges.txt",
    "added_tokens.json",
    "chat_template.jinja",
    "chat_template.json",
    "modules.json",
    "sentence_bert_config.json",
    "config_sentence_transformers.json",
    "1_Pooling/config.json",
];

/// Every input file of the HF folder `dir` that is present: the [`SIDE_FILES`], the
/// SentencePiece models (`tokenizer.model`; XLM-R's `sentencepiece.bpe.model`) and the
/// safetensors shards (as the reference reads
/// them), in that order. What `verify` hashes before measuring.
///
/// Errors: a path that cannot be examined (a symlink loop, a permission error).
pub fn input_files(dir: &Path) -> Result<Vec<std::path::PathBuf>> {
    let mut out = Vec::new();
    let spm = ["tokenizer.model", "sentencepiece.bpe.model"];
    for name in SIDE_FILES.iter().copied().chain(spm) {
        let p = dir.join(name);
        if crate::paths::present(&p)? {
            out.push(p);
        }
    }
    out.extend(reference::safetensors_files(dir).unwrap_or_default());
    Ok(out)
}

/// Reads a JSON file, naming it in errors.
pub fn read_json(path: &Path) -> Result<Value> {
    // A FIFO or device would block or never end: only regular files are opened.
    crate::paths::ensure_regular_file(path)?;
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("{}: cannot read", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("{}: invalid JSON", path.display()))
}

impl HfDir {
    /// Opens `dir`. With `with_weights` false only the config and tokenizer files are read
    /// (vocab-only conversion).
    ///
    /// Errors: missing config.json, unreadable or malformed safetensors (naming the file and
    /// field), a weight map that names missing shards, unsupported dtypes.
    pub fn open(dir: &Path, with_weights: bool) -> Result<HfDir> {
        let config = read_json(&dir.join("config.json"))?;
        let tc_path = dir.join("tokenizer_config.json");
        let tokenizer_config = if crate::paths::present(&tc_path)? {
            read_json(&tc_path)?
        } else {
            Value::Object(Default::default())
        };
        let mut h = HfDir {
            dir: dir.to_path_buf(),
            config,
            tokenizer_config,
            tensors: Vec::new(),
            files: Vec::new(),
        };
        if with_weights {
            h.load_safetensors()?;
        }
        Ok(h)
    }

    /// Reads every shard's header into `tensors`, in checkpoint order, and keeps the shards open.
    fn load_safetensors(&mut self) -> Result<()> {
        let names = self.shard_names()?;
        let mut seen = HashMap::new();
        for (fi, name) in names.iter().enumerate() {
            let path = self.dir.join(name);
            crate::paths::ensure_regular_file(&path)?;
            let file = File::open(&path)
                .with_context(|| format!("{}: cannot open shard", path.display()))?;
            let file_len = file.metadata()?.len() as usize;
            let (entries, base) = read_header(&path, &file, file_len)?;
            let mut list: Vec<SourceTensor> = Vec::new();
            for (tname, info) in &entries {
                if tname == "__metadata__" {
                    continue;
                }
                let t = header_entry(&path, tname, info, base, file_len, fi)?;
                if let Some(prev) = seen.insert(tname.clone(), name.clone()) {
                    bail!("tensor {tname:?} appears in both {prev} and {name}");
                }
                list.push(t);
            }
            list.sort_by_key(|t| t.start);
            no_overlap(&path, &list)?;
            self.tensors.extend(list);
            self.files.push((path, file));
        }
        Ok(())
    }

    /// The shard file names, as transformers picks them: the single `model.safetensors` when
    /// present (it wins over an index), else the index's weight map, sorted and deduplicated.
    ///
    /// Errors: neither file; a weight map that is not an object or names something other than
    /// a plain file name in the folder (`../x`, `sub/x`, an absolute path).
    fn shard_names(&self) -> Result<Vec<String>> {
        let index = self.dir.join("model.safetensors.index.json");
        if crate::paths::present(&self.dir.join("model.safetensors"))? {
            return Ok(vec!["model.safetensors".into()]);
        }
        if !crate::paths::present(&index)? {
            bail!(
                "{}: no model.safetensors or model.safetensors.index.json",
                self.dir.display()
            );
        }
        let v = read_json(&index)?;
        let map = v["weight_map"].as_object().ok_or_else(|| {
            anyhow!(
                "{}: field weight_map missing or not an object",
                index.display()
            )
        })?;
        let mut names: Vec<String> = map
            .values()
            .filter_map(|f| f.as_str().map(String::from))
            .collect();
        names.sort();
        names.dedup();
        if let Some(bad) = names.iter().find(|n| {
            n.is_empty() || *n == "." || *n == ".." || n.contains('/') || n.contains('\0')
        }) {
            bail!(
                "{}: field weight_map names {bad:?}, which is not a file in the folder",
                index.display()
            );
        }
        Ok(names)
    }

    /// The stored bytes of `t`, read from its shard.
    ///
    /// Errors: the shard became shorter or unreadable since it was opened.
    pub fn bytes(&self, t: &SourceTensor) -> std::io::Result<Vec<u8>> {
        let mut buf = vec![0u8; t.end - t.start];
        self.files[t.file]
            .1
            .read_exact_at(&mut buf, t.start as u64)?;
        Ok(buf)
    }

    /// `buf.len()` bytes of `t`'s data from `offset` (relative to its start).
    ///
    /// Errors: the range leaves the tensor, or the shard became shorter or unreadable.
    pub fn read_at(&self, t: &SourceTensor, offset: u64, buf: &mut [u8]) -> std::io::Result<()> {
        let end = offset + buf.len() as u64;
        if end > (t.end - t.start) as u64 {
            return Err(std::io::Error::other(format!(
                "tensor {}: read of bytes {offset}..{end} past its end",
                t.name
            )));
        }
        self.files[t.file]
            .1
            .read_exact_at(buf, t.start as u64 + offset)
    }

    /// The shard file holding `t`.
    pub fn file_of(&self, t: &SourceTensor) -> &Path {
        &self.files[t.file].0
    }

    /// The values of `t` as f32 (exact for F32, F16 and BF16 sources).
    pub fn to_f32(&self, t: &SourceTensor) -> std::io::Result<Vec<f32>> {
        let b = self.bytes(t)?;
        Ok(match t.dtype {
            SourceDtype::F32 => b
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect(),
            SourceDtype::F16 => b
                .chunks_exact(2)
                .map(|c| gguf::dequant::f16_to_f32(u16::from_le_bytes([c[0], c[1]])))
                .collect(),
            SourceDtype::BF16 => b
                .chunks_exact(2)
                .map(|c| f32::from_bits((u16::from_le_bytes([c[0], c[1]]) as u32) << 16))
                .collect(),
            // plan() refuses to map such tensors; U32 codes are read by convert::mlx.
            SourceDtype::U32 | SourceDtype::Other => Vec::new(),
        })
    }

    /// An integer from config.json (also looked up under `text_config`).
    pub fn config_u64(&self, key: &str) -> Option<u64> {
        self.config[key]
            .as_u64()
            .or_else(|| self.config["text_config"][key].as_u64())
    }

    /// A float from config.json.
    pub fn config_f64(&self, key: &str) -> Option<f64> {
        self.config[key]
            .as_f64()
            .or_else(|| self.config["text_config"][key].as_f64())
    }
}

/// Errors when two tensors of one shard (sorted by start) share bytes.
fn no_overlap(path: &Path, list: &[SourceTensor]) -> Result<()> {
    for w in list.windows(2) {
        if w[1].start < w[0].end {
            bail!(
                "{}: tensors {:?} and {:?} overlap (data_offsets end {} > start {})",
                path.display(),
                w[0].name,
                w[1].name,
                w[0].end,
                w[1].start
            );
        }
    }
    Ok(())
}

/// Reads a shard's safetensors header: its entries and the offset where tensor data begins.
fn read_header(
    path: &Path,
    file: &File,
    file_len: usize,
) -> Result<(serde_json::Map<String, Value>, usize)> {
    // The header: u64 length, then that much JSON (capped as the safetensors crate does).
    let mut len8 = [0u8; 8];
    file.read_exact_at(&mut len8, 0)
        .with_context(|| format!("{}: truncated safetensors header length", path.display()))?;
    let n = u64::from_le_bytes(len8);
    if n > 100_000_000 || 8 + n as usize > file_len {
        bail!(
            "{}: safetensors header length {n} is invalid for a {file_len}-byte file",
            path.display()
        );
    }
    let mut head = vec![0u8; 8 + n as usize];
    file.read_exact_at(&mut head, 0)?;
    let header: Value = serde_json::from_slice(&head[8..])
        .with_context(|| format!("{}: safetensors header is not valid JSON", path.display()))?;
    let Value::Object(entries) = header else {
        return Err(anyhow!(
            "{}: safetensors header is not a JSON object",
            path.display()
        ));
    };
    let base = 8 + n as usize;
    Ok((entries, base))
}

/// One header entry as a tensor of shard `fi`, its dtype, shape and offsets checked against
/// each other and the file.
fn header_entry(
    path: &Path,
    tname: &str,
    info: &Value,
    base: usize,
    file_len: usize,
    fi: usize,
) -> Result<SourceTensor> {
    let bad = |what: &str| anyhow!("{}: tensor {tname:?}: {what}", path.display());
    let (dtype, width) = match info["dtype"].as_str() {
        Some("F32") => (SourceDtype::F32, 4),
        Some("F16") => (SourceDtype::F16, 2),
        Some("BF16") => (SourceDtype::BF16, 2),
        Some("U32") => (SourceDtype::U32, 4),
        Some(_) => (SourceDtype::Other, 0),
        None => return Err(bad("field dtype missing")),
    };
    let shape: Vec<usize> = info["shape"]
        .as_array()
        .ok_or_else(|| bad("field shape missing"))?
        .iter()
        .map(|d| {
            d.as_u64()
                .map(|d| d as usize)
                .ok_or_else(|| bad("shape holds a non-integer"))
        })
        .collect::<Result<_>>()?;
    let offs = info["data_offsets"]
        .as_array()
        .ok_or_else(|| bad("field data_offsets missing"))?;
    let (s, e) = match (
        offs.first().and_then(|v| v.as_u64()),
        offs.get(1).and_then(|v| v.as_u64()),
    ) {
        (Some(s), Some(e)) if offs.len() == 2 && s <= e => (s as usize, e as usize),
        _ => return Err(bad("data_offsets is not [start, end] with start <= end")),
    };
    if base.checked_add(e).is_none_or(|end| end > file_len) {
        return Err(bad(&format!(
            "data_offsets end {e} is beyond the file ({file_len} bytes)"
        )));
    }
    let n_el = shape.iter().try_fold(1usize, |a, d| a.checked_mul(*d));
    if width > 0 && n_el.and_then(|n| n.checked_mul(width)) != Some(e - s) {
        return Err(bad(&format!(
            "shape {shape:?} × {width} bytes does not equal data_offsets length {}",
            e - s
        )));
    }
    Ok(SourceTensor {
        name: tname.to_string(),
        dtype,
        shape,
        file: fi,
        start: base + s,
        end: base + e,
    })
}
