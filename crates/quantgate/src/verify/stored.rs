//! The file's stored values as the reference consumes them: every tensor the HF folder maps to
//! a GGUF tensor, read by the Rust GGUF reader, dequantized by `gguf::dequant` (ggml's
//! `to_float` formulas, golden-tested against ggml) and put back into HF's layout (shape
//! reversed; llama's Q/K row permutation undone). Running the reference on these values and
//! llama.cpp on the F32 expansion of the same file compares two forwards on the same weights:
//! the measure of whether the runtime computes what the file stores, not of quantization loss.

use std::collections::HashMap;
use std::path::Path;

use anyhow::{anyhow, Result};
use candle_core::{Device, Tensor};

use crate::source::{arch, arch::Arch, hf::HfDir};

/// Rows of `x` (`rows × cols`) back from llama.cpp's adjacent-pair order to HF's rotate-half
/// order, per head of `rows / heads` rows: HF row `j·(hd/2) + i` is stored row `2i + j`
/// (`docs/llamacpp-spec.md` §4.3). Written here, not borrowed from the converter.
pub fn unpermute_qk(x: &[f32], rows: usize, heads: usize) -> Vec<f32> {
    let cols = x.len() / rows;
    let hd = rows / heads;
    let mut out = vec![0f32; x.len()];
    for h in 0..heads {
        for stored in 0..hd {
            let (i, j) = (stored / 2, stored % 2);
            let hf_row = h * hd + j * (hd / 2) + i;
            let s = (h * hd + stored) * cols;
            out[hf_row * cols..(hf_row + 1) * cols].copy_from_slice(&x[s..s + cols]);
        }
    }
    out
}

/// The Q/K head count from config.json for a llama `attn_q`/`attn_k` tensor.
fn qk_heads(hf: &HfDir, gguf_name: &str) -> Option<usize> {
    let n_head = hf.config_u64("num_attention_heads")? as usize;
    let n_kv = hf
        .config_u64("num_key_value_heads")
        .map_or(n_head, |v| v as usize);
    if gguf_name.contains(".attn_q.") {
        Some(n_head)
    } else if gguf_name.contains(".attn_k.") {
        Some(n_kv)
    } else {
        None
    }
}

/// HF name → f32 tensor of the stored values of `gguf` (see the module doc).
///
/// Errors: an unreadable file, a tensor the file lacks, a type without a dequantizer, or a
/// shape that does not match the source's element count.
pub fn hf_tensors(gguf_path: &Path, hf: &HfDir, a: Arch) -> Result<HashMap<String, Tensor>> {
    let b = StoredBackend::open(gguf_path, hf, a)?;
    b.slots
        .keys()
        .map(|name| Ok((name.clone(), b.tensor(name).map_err(|e| anyhow!("{e}"))?)))
        .collect()
}

/// Where one HF tensor's stored values are: the GGUF tensor's index, the HF shape, and the
/// Q/K head count whose permutation to undo (llama), and the shift to take off (gemma3 norms,
/// stored as 1 + w).
#[derive(Clone, Debug)]
struct Slot {
    index: usize,
    shape: Vec<usize>,
    unpermute: Option<usize>,
    shift: f32,
    /// One expert of a stacked MoE tensor: (its slab, the slab count).
    expert: Option<(usize, usize)>,
    /// Zeros before the stored values (XLM-R's dropped position rows).
    pad_values: usize,
}

/// The stored values as a candle backend that dequantizes a tensor only when the reference
/// asks for it (one layer at a time, [`reference::decoder::Decoder::forward_many`]); the
/// values are those of [`hf_tensors`].
struct StoredBackend {
    g: gguf::Gguf,
    slots: HashMap<String, Slot>,
}

impl StoredBackend {
    /// The tensor table: every HF tensor the architecture maps, with its GGUF tensor.
    ///
    /// Errors: an unreadable file, a tensor the file lacks, or an element count that differs
    /// from the source's.
    fn open(gguf_path: &Path, hf: &HfDir, a: Arch) -> Result<StoredBackend> {
        let g = gguf::Gguf::open(gguf_path)?;
        let by_name: HashMap<&str, usize> = g
            .header
            .tensors
            .iter()
            .enumerate()
            .map(|(i, t)| (t.name.as_str(), i))
            .collect();
        let mut slots = HashMap::new();
        for src in &hf.tensors {
            // A packed module's codes stand for its `.weight`, shaped as the file stores it.
            let (hf_name, source_shape) = match super::gate1::role(&src.name) {
                super::gate1::Role::Codes(m) => (format!("{m}.weight"), None),
                super::gate1::Role::Part => continue,
                super::gate1::Role::Plain => (src.name.clone(), Some(&src.shape)),
            };
            let Some(m) = arch::map_tensor(a, &hf_name)? else {
                continue;
            };
            let index = *by_name
                .get(m.gguf.as_str())
                .ok_or_else(|| anyhow!("{}: no tensor {}", gguf_path.display(), m.gguf))?;
            let t = &g.header.tensors[index];
            // A stack's slab (the last dimension counts the experts) stands for one expert.
            let expert = m
                .expert
                .map(|e| (e as usize, *t.dims.last().unwrap_or(&1) as usize));
            if let Some((e, count)) = expert.filter(|(e, count)| e >= count) {
                return Err(anyhow!(
                    "{}: tensor {} holds {count} experts; the source's {} is expert {e}",
                    gguf_path.display(),
                    m.gguf,
                    src.name
                ));
            }
            let n = t.n_elements() as usize / expert.map_or(1, |(_, n)| n.max(1));
            // XLM-R: the file's position table starts at HF's row pad_token_id + 1; the rows
            // before it are zeros here (HF's positions never index them).
            let pad_rows = arch::rows_dropped(&hf.config, &m.gguf);
            let row = src.shape.last().copied().unwrap_or(1);
            let n = n + pad_rows * row;
            let shape = match source_shape {
                Some(s) if n != src.n_elements() => {
                    return Err(anyhow!(
                        "{}: tensor {} has {n} elements, the source's {} has {}",
                        gguf_path.display(),
                        m.gguf,
                        src.name,
                        s.iter().product::<usize>()
                    ))
                }
                Some(s) => s.clone(),
                None => t.dims.iter().rev().map(|d| *d as usize).collect(),
            };
            let unpermute = if a == Arch::Llama {
                qk_heads(hf, &m.gguf)
            } else {
                None
            };
            slots.insert(
                hf_name,
                Slot {
                    index,
                    shape,
                    unpermute,
                    shift: a.norm_shift(&m.gguf),
                    expert,
                    pad_values: pad_rows * row,
                },
            );
        }
        Ok(StoredBackend { g, slots })
    }

    fn tensor(&self, name: &str) -> candle_core::Result<Tensor> {
        let slot = self
            .slots
            .get(name)
            .ok_or_else(|| candle_core::Error::CannotFindTensor {
                path: name.to_string(),
            })?;
        let t = &self.g.header.tensors[slot.index];
        let mut data = self.g.tensor_data(t);
        let mut n = t.n_elements() as usize;
        if let Some((e, count)) = slot.expert {
            // Slabs are whole rows, so each is an equal share of the bytes.
            let bytes = data.len() / count;
            data = &data[e * bytes..(e + 1) * bytes];
            n /= count;
        }
        let mut x = gguf::dequant::dequantize_to_vec(t.ggml_type, data, n).map_err(|e| {
            candle_core::Error::Msg(format!(
                "{}: tensor {}: {e}",
                self.g.path().display(),
                t.name
            ))
        })?;
        self.g.release(t);
        if let Some(heads) = slot.unpermute {
            x = unpermute_qk(&x, slot.shape[0], heads);
        }
        if slot.shift != 0.0 {
            x.iter_mut().for_each(|v| *v -= slot.shift);
        }
        if slot.pad_values > 0 {
            x.splice(0..0, std::iter::repeat_n(0.0, slot.pad_values));
        }
        Tensor::from_vec(x, slot.shape.clone(), &Device::Cpu)
    }
}

impl candle_nn::var_builder::SimpleBackend for StoredBackend {
    fn get(
        &self,
        s: candle_core::Shape,
        name: &str,
        _: candle_nn::Init,
        dtype: candle_core::DType,
        dev: &Device,
    ) -> candle_core::Result<Tensor> {
        let t = self.tensor(name)?;
        if t.shape() != &s {
            return Err(candle_core::Error::UnexpectedShape {
                msg: format!("shape mismatch for {name}"),
                expected: s,
                got: t.shape().clone(),
            });
        }
        t.to_device(dev)?.to_dtype(dtype)
    }

    fn get_unchecked(
        &self,
        name: &str,
        dtype: candle_core::DType,
        dev: &Device,
    ) -> candle_core::Result<Tensor> {
        self.tensor(name)?.to_device(dev)?.to_dtype(dtype)
    }

    fn contains_tensor(&self, name: &str) -> bool {
        self.slots.contains_key(name)
    }
}

/// The stored values of `gguf` under HF names as a lazily dequantizing `VarBuilder`: nothing
/// is expanded until the reference reads a tensor, and a layer's tensors are dropped after
/// its forward.
///
/// Errors: as [`hf_tensors`] for the table (a tensor the file lacks, an element count that
/// differs from the source's); dequantization errors surface when a tensor is read.
pub fn var_builder(
    gguf_path: &Path,
    hf: &HfDir,
    a: Arch,
) -> Result<candle_nn::VarBuilder<'static>> {
    Ok(candle_nn::VarBuilder::from_backend(
        Box::new(StoredBackend::open(gguf_path, hf, a)?),
        candle_core::DType::F32,
        Device::Cpu,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unpermute_inverts_the_converters_permutation() {
        // 2 heads of 4 rows, 3 columns: every value distinct.
        let x: Vec<f32> = (0..24).map(|v| v as f32).collect();
        let stored = crate::source::permute::permute_qk(&x, 8, 2);
        assert_ne!(stored, x);
        assert_eq!(unpermute_qk(&stored, 8, 2), x);
        // HF row 1 (j = 0, i = 1) is stored as row 2.
        assert_eq!(stored[2 * 3..3 * 3], x[3..6]);
    }
}
