//! One decoder layer's output read from llama.cpp's own graph: the scheduler's eval callback
//! (`llama_context_params.cb_eval`) copies the node named `l_out-IL` (llama-graph.cpp: every
//! decoder builder names the residual stream after layer IL so, F32 `[n_embd, n_tokens]`).
//! Together with a batch of embeddings as input (`llama_batch.embd`), it runs a model in slices
//! of layers: slice k's `l_out` of its last layer is slice k+1's input.

use std::ffi::{c_void, CStr, CString};

use crate::sys;

/// What the callback looks for and what it found.
#[derive(Debug)]
pub(crate) struct Capture {
    /// The node name, `l_out-IL`.
    name: CString,
    /// The captured rows, `n_embd` floats per token, ubatch after ubatch.
    pub(crate) rows: Vec<f32>,
    /// Nodes of the right name with a type or shape this reader does not take.
    pub(crate) refused: Option<String>,
}

impl Capture {
    /// Looks for the output of layer `layer`.
    pub(crate) fn layer_output(layer: usize) -> Capture {
        Capture {
            name: CString::new(format!("l_out-{layer}")).expect("no NUL in a formatted name"),
            rows: Vec::new(),
            refused: None,
        }
    }

    /// The observed node's name.
    pub(crate) fn name(&self) -> &CStr {
        &self.name
    }
}

/// The `cb_eval` callback: asks for the named node, then appends its rows to the [`Capture`]
/// behind `user_data`. Never unwinds into C.
///
/// # Safety
/// `user_data` must point to a live `Capture` that nothing else accesses during the decode.
pub(crate) unsafe extern "C" fn collect(
    t: *mut sys::ggml_tensor,
    ask: bool,
    user_data: *mut c_void,
) -> bool {
    let cap = &mut *(user_data as *mut Capture);
    // SAFETY: the scheduler passes a valid tensor whose name is a NUL-terminated array.
    let name = CStr::from_ptr((*t).name.as_ptr());
    if name != cap.name.as_c_str() {
        // Not observed; when not asking, keep computing.
        return !ask;
    }
    if ask {
        return true;
    }
    let (n_embd, n) = ((*t).ne[0].max(0) as usize, (*t).ne[1].max(0) as usize);
    if (*t).type_ != sys::GGML_TYPE_F32 || (*t).ne[2] != 1 || (*t).ne[3] != 1 {
        cap.refused = Some(format!(
            "node {name:?} has ggml type {} and shape {:?}, not F32 [n_embd, n_tokens]",
            (*t).type_,
            (*t).ne
        ));
        return true;
    }
    // Rows are nb[1] bytes apart (a view may be strided).
    let stride = (*t).nb[1];
    let start = cap.rows.len();
    cap.rows.resize(start + n * n_embd, 0.0);
    for j in 0..n {
        let dst = cap.rows[start + j * n_embd..].as_mut_ptr();
        sys::ggml_backend_tensor_get(t, dst as *mut c_void, j * stride, n_embd * 4);
    }
    // Stop the graph here: what follows (later layers, the output head) is not read.
    false
}
