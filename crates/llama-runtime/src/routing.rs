//! The experts llama.cpp routes each token to, read from its own graph: the scheduler's
//! eval callback (`llama_context_params.cb_eval`) is asked about every node and copies those
//! named `ffn_moe_topk-IL` (llama-graph.cpp `build_moe_ffn`: `selected_experts`, I32
//! `[n_expert_used, n_tokens]`, the argsort top-k of the router's probabilities in layer IL).

use std::collections::BTreeMap;
use std::ffi::{c_void, CStr};

use crate::sys;

/// The graph node name prefix of the chosen experts.
const TOPK: &str = "ffn_moe_topk-";

/// Per layer, per token (in decode order, ubatch after ubatch): the chosen experts as llama.cpp
/// ordered them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RoutingLog {
    /// Layer index → one row of expert ids per token evaluated.
    pub layers: BTreeMap<usize, Vec<Vec<i32>>>,
}

/// The layer of a `ffn_moe_topk-IL` node, or `None` for any other node.
fn topk_layer(t: *const sys::ggml_tensor) -> Option<usize> {
    // SAFETY: the scheduler passes a valid tensor whose name is a NUL-terminated array.
    let name = unsafe { CStr::from_ptr((*t).name.as_ptr()) };
    name.to_str().ok()?.strip_prefix(TOPK)?.parse().ok()
}

/// The `cb_eval` callback: asks for the top-k nodes, then appends their rows to the
/// [`RoutingLog`] behind `user_data`. Never unwinds into C.
///
/// # Safety
/// `user_data` must point to a live `RoutingLog` that nothing else accesses during the decode.
pub(crate) unsafe extern "C" fn collect(
    t: *mut sys::ggml_tensor,
    ask: bool,
    user_data: *mut c_void,
) -> bool {
    let Some(layer) = topk_layer(t) else {
        // Not observed; when not asking, keep computing.
        return !ask;
    };
    if ask {
        return true;
    }
    let (k, n) = ((*t).ne[0].max(0) as usize, (*t).ne[1].max(0) as usize);
    if (*t).type_ != sys::GGML_TYPE_I32 || k == 0 {
        return true;
    }
    // The node is a view of the argsort (`ggml_top_k`): rows are nb[1] bytes apart, not k·4.
    let stride = (*t).nb[1];
    let log = &mut *(user_data as *mut RoutingLog);
    let rows = log.layers.entry(layer).or_default();
    for j in 0..n {
        let mut ids = vec![0i32; k];
        sys::ggml_backend_tensor_get(t, ids.as_mut_ptr() as *mut c_void, j * stride, k * 4);
        rows.push(ids);
    }
    true
}
