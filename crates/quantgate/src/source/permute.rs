//! llama's Q/K row permutation (`docs/llamacpp-spec.md` §4.3): HF checkpoints keep the
//! rotate-half layout, llama.cpp's `llama` graph expects adjacent pairs, so the converter
//! reorders `attn_q`/`attn_k` rows (weights and biases) per head. A fact of the source's layout,
//! read by both the writer and Gate 1.

use super::arch::Arch;
use super::hf::HfDir;

/// The head count for llama's Q/K permutation of `gguf_name`, if it needs one
/// (`docs/llamacpp-spec.md` §4.3: q with n_head, k with n_kv_head, weights and biases).
pub fn permute_heads(hf: &HfDir, arch: Arch, gguf_name: &str) -> Option<usize> {
    if arch != Arch::Llama {
        return None;
    }
    let n_head = hf.config_u64("num_attention_heads")? as usize;
    let n_kv = hf
        .config_u64("num_key_value_heads")
        .map(|v| v as usize)
        .unwrap_or(n_head);
    let local = gguf_name
        .rsplit_once('.')
        .map(|(m, _)| m)?
        .rsplit('.')
        .next()?;
    match local {
        "attn_q" => Some(n_head),
        "attn_k" => Some(n_kv),
        _ => None,
    }
}

/// Reorders the rows of `x` (`rows × cols`, row-major) from HF's rotate-half layout to
/// llama.cpp's adjacent pairs, per head: `new_row[2i + j] = old_row[j·(hd/2) + i]`.
pub fn permute_qk<T: Copy + Default>(x: &[T], rows: usize, heads: usize) -> Vec<T> {
    let cols = x.len() / rows;
    let hd = rows / heads;
    let mut out = vec![T::default(); x.len()];
    for h in 0..heads {
        for i in 0..hd / 2 {
            for j in 0..2 {
                let src = h * hd + j * (hd / 2) + i;
                let dst = h * hd + 2 * i + j;
                out[dst * cols..(dst + 1) * cols].copy_from_slice(&x[src * cols..(src + 1) * cols]);
            }
        }
    }
    out
}

/// Source row of each output row under llama's Q/K permutation (identity when `heads` is
/// `None`): output row `h·hd + 2i + j` takes source row `h·hd + j·hd/2 + i`.
pub fn row_order(rows: usize, heads: Option<usize>) -> Vec<usize> {
    let mut order: Vec<usize> = (0..rows).collect();
    if let Some(heads) = heads {
        let hd = rows / heads;
        for h in 0..heads {
            for i in 0..hd / 2 {
                for j in 0..2 {
                    order[h * hd + 2 * i + j] = h * hd + j * (hd / 2) + i;
                }
            }
        }
    }
    order
}
