//! Importance-matrix statistics read from llama.cpp's own graph, as `llama-imatrix` collects
//! them (llama.cpp `tools/imatrix/imatrix.cpp`, llama-cpp-python 0.3.36's copy, built against
//! the llama-cpp-sys-2 =0.1.161 pin): the scheduler's eval callback is asked about every node
//! and takes
//! - every `MUL_MAT` whose weight (`src[0]`) is named `blk.*`, whose activations (`src[1]`)
//!   are F32 with at least 16 rows (smaller batches are skipped, as the tool does): per column
//!   `j` of the weight's matrix `m` (`ne[2]·ne[3]` matrices), `Σ x_j²` over every row, and
//!   the rows counted once per matrix;
//! - every `MUL_MAT_ID` (MoE experts): per token and per chosen expert (`src[2]`, I32
//!   `[n_expert_used, n_tokens]`), `Σ x_j²` into that expert's row and one count for it.
//!
//! The sums are f32, accumulated row after row in the order the graph evaluates ubatches, as
//! the tool does, so the same activations give the same bits.

use std::collections::BTreeMap;
use std::ffi::{c_void, CStr};

use crate::sys;

/// One weight's statistics: `values` holds `n_mat` rows of `ne0` sums of squares, `counts`
/// the tokens seen per matrix (one entry for a dense weight, one per expert for MoE).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ImatrixStats {
    /// Sums of squared activations, `counts.len()` rows.
    pub values: Vec<f32>,
    /// Tokens per matrix.
    pub counts: Vec<i64>,
}

/// What the callback gathered: per weight name (`blk.0.attn_q.weight`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ImatrixLog {
    /// Per weight.
    pub entries: BTreeMap<String, ImatrixStats>,
    /// The first node that could not be read as the tool reads it (the run must fail).
    pub refused: Option<String>,
}

/// The weight's name without a backend prefix or copy suffix (`CUDA0#blk.0.attn_k.weight#0`
/// → `blk.0.attn_k.weight`), as the tool filters it.
fn weight_name(raw: &str) -> &str {
    match raw.split_once('#') {
        Some((_, rest)) => rest.split('#').next().unwrap_or(rest),
        None => raw,
    }
}

/// A tensor's data copied to host memory.
///
/// # Safety
/// `t` must be a computed tensor of the current graph.
unsafe fn host_bytes(t: *const sys::ggml_tensor) -> Vec<u8> {
    let n = sys::ggml_nbytes(t);
    let mut v = vec![0u8; n];
    sys::ggml_backend_tensor_get(t, v.as_mut_ptr() as *mut c_void, 0, n);
    v
}

fn f32_at(b: &[u8], off: usize) -> f32 {
    f32::from_le_bytes([b[off], b[off + 1], b[off + 2], b[off + 3]])
}

/// Adds the squares of `n` f32 at byte offset `off` of `b` to `acc`.
fn add_squares(acc: &mut [f32], b: &[u8], off: usize) {
    for (j, a) in acc.iter_mut().enumerate() {
        let x = f32_at(b, off + 4 * j);
        *a += x * x;
    }
}

/// Whether the node is one the tool collects (the scheduler's "ask" call).
///
/// # Safety
/// `t` must be a valid graph node.
unsafe fn wanted(t: *const sys::ggml_tensor) -> bool {
    let (src0, src1) = ((*t).src[0], (*t).src[1]);
    if (*t).op == sys::GGML_OP_MUL_MAT_ID {
        return true;
    }
    if (*t).op != sys::GGML_OP_MUL_MAT || src0.is_null() || src1.is_null() {
        return false;
    }
    if (*src1).ne[1] < 16 || (*src1).type_ != sys::GGML_TYPE_F32 {
        return false;
    }
    let name = CStr::from_ptr((*src0).name.as_ptr()).to_string_lossy();
    weight_name(&name).starts_with("blk.")
}

/// `MUL_MAT`: rows of `src1` into the weight's matrices.
///
/// # Safety
/// `src0`, `src1` must be the computed node's sources.
unsafe fn dense(
    e: &mut ImatrixStats,
    src0: &sys::ggml_tensor,
    src1: &sys::ggml_tensor,
) -> Result<(), String> {
    let ne0 = src1.ne[0] as usize;
    let n_mat = (src0.ne[2] * src0.ne[3]) as usize;
    if e.values.is_empty() {
        e.values = vec![0.0; ne0 * n_mat];
        e.counts = vec![0; 1];
    } else if e.values.len() != ne0 * n_mat {
        return Err(format!("{} sums, now {}", e.values.len(), ne0 * n_mat));
    }
    let data = host_bytes(src1);
    let nb = src1.nb;
    for i3 in 0..src1.ne[3] {
        for i2 in 0..src1.ne[2] {
            let m = ((i3 % src0.ne[3]) * src0.ne[2] + (i2 % src0.ne[2])) as usize;
            let acc = &mut e.values[m * ne0..(m + 1) * ne0];
            for row in 0..src1.ne[1] as usize {
                let off = row * nb[1] + i2 as usize * nb[2] + i3 as usize * nb[3];
                add_squares(acc, &data, off);
            }
        }
    }
    let rows = src1.ne[1] * src1.ne[2] * src1.ne[3];
    for c in &mut e.counts {
        *c += rows / n_mat as i64;
    }
    Ok(())
}

/// `MUL_MAT_ID`: each token's rows into the experts it was routed to.
///
/// # Safety
/// `src0`, `src1`, `ids` must be the computed node's sources.
unsafe fn experts(
    e: &mut ImatrixStats,
    src0: &sys::ggml_tensor,
    src1: &sys::ggml_tensor,
    ids: &sys::ggml_tensor,
) -> Result<(), String> {
    let (ne0, n_as) = (src1.ne[0] as usize, src0.ne[2] as usize);
    let (n_ids, n_tokens) = (ids.ne[0] as usize, src1.ne[2] as usize);
    if ids.ne[1] != src1.ne[2] || src1.ne[3] != 1 || ids.type_ != sys::GGML_TYPE_I32 {
        return Err(format!("ids {:?} for activations {:?}", ids.ne, src1.ne));
    }
    if e.values.is_empty() {
        e.values = vec![0.0; ne0 * n_as];
        e.counts = vec![0; n_as];
    } else if e.values.len() != ne0 * n_as || e.counts.len() != n_as {
        return Err(format!(
            "{} sums of {} experts, now {n_as}",
            e.values.len(),
            e.counts.len()
        ));
    }
    let (data, idb) = (host_bytes(src1), host_bytes(ids));
    for idx in 0..n_ids {
        for row in 0..n_tokens {
            let at = row * ids.nb[1] + idx * ids.nb[0];
            let ex = i32::from_le_bytes([idb[at], idb[at + 1], idb[at + 2], idb[at + 3]]);
            if ex < 0 || ex as usize >= n_as {
                return Err(format!("expert id {ex} of {n_as}"));
            }
            let ex = ex as usize;
            let i11 = idx % src1.ne[1] as usize;
            let off = i11 * src1.nb[1] + row * src1.nb[2];
            e.counts[ex] += 1;
            add_squares(&mut e.values[ex * ne0..(ex + 1) * ne0], &data, off);
        }
    }
    Ok(())
}

/// The `cb_eval` callback. Never unwinds into C; a node it cannot read is recorded in
/// [`ImatrixLog::refused`] and the graph goes on.
///
/// # Safety
/// `user_data` must point to a live `ImatrixLog` that nothing else accesses during the decode.
pub(crate) unsafe extern "C" fn collect(
    t: *mut sys::ggml_tensor,
    ask: bool,
    user_data: *mut c_void,
) -> bool {
    if ask {
        return wanted(t);
    }
    let log = &mut *(user_data as *mut ImatrixLog);
    let (src0, src1) = (&*(*t).src[0], &*(*t).src[1]);
    let raw = CStr::from_ptr(src0.name.as_ptr()).to_string_lossy();
    let name = weight_name(&raw).to_string();
    if src1.nb[0] != 4 || src1.type_ != sys::GGML_TYPE_F32 {
        log.refused
            .get_or_insert(format!("{name}: activations are not contiguous F32"));
        return true;
    }
    let e = log.entries.entry(name.clone()).or_default();
    let r = if (*t).op == sys::GGML_OP_MUL_MAT_ID {
        experts(e, src0, src1, &*(*t).src[2])
    } else {
        dense(e, src0, src1)
    };
    let finite = e.values.iter().all(|v| v.is_finite());
    match r {
        Err(d) => {
            log.refused.get_or_insert(format!("{name}: {d}"));
        }
        Ok(()) if !finite => {
            log.refused
                .get_or_insert(format!("{name}: non-finite sums of squares"));
        }
        Ok(()) => {}
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weight_names_lose_backend_prefixes_as_the_tool_filters_them() {
        assert_eq!(
            weight_name("CUDA0#blk.0.attn_k.weight#0"),
            "blk.0.attn_k.weight"
        );
        assert_eq!(
            weight_name("CUDA0#blk.0.attn_k.weight"),
            "blk.0.attn_k.weight"
        );
        assert_eq!(weight_name("blk.0.attn_k.weight"), "blk.0.attn_k.weight");
    }

    #[test]
    fn squares_add_in_f32_row_after_row() {
        let mut acc = vec![1.0f32, 0.0];
        let b: Vec<u8> = [2.0f32, -3.0]
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect();
        add_squares(&mut acc, &b, 0);
        add_squares(&mut acc, &b, 0);
        assert_eq!(acc, vec![9.0, 18.0]);
    }
}
