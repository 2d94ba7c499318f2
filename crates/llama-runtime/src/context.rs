//! A llama.cpp inference context (`llama_context`) for pooled embeddings and per-position
//! logits, with every setting that changes results pinned by the caller and recorded.

use std::ptr::NonNull;

use crate::{sys, Model, RuntimeError};

/// Context settings. Results depend on them, so reports record them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContextParams {
    /// Context length in tokens.
    pub n_ctx: u32,
    /// Logical batch size.
    pub n_batch: u32,
    /// Physical batch size (a pooled sequence must fit in one ubatch).
    pub n_ubatch: u32,
    /// Threads for generation and batch processing.
    pub n_threads: i32,
    /// Compute embeddings (pooled per `pooling_type`) instead of logits.
    pub embeddings: bool,
    /// `llama_pooling_type`: −1 = the model's own, 0 none, 1 mean, 2 cls, 3 last, 4 rank.
    pub pooling_type: i32,
    /// KV cache type as a ggml type id (1 = F16, llama.cpp's default).
    pub type_kv: u32,
    /// Sequences the context holds at once (`n_seq_max`; each gets `n_ctx / n_seq_max`
    /// positions of a non-unified cache).
    pub n_seq_max: u32,
}

impl ContextParams {
    /// Settings for logits of sequences of up to `n_ctx` tokens (llama-perplexity's per-chunk
    /// shape: one chunk per decode, `n_ubatch` tokens per physical batch).
    pub fn logits(n_ctx: u32, n_ubatch: u32, n_threads: i32) -> Self {
        ContextParams {
            n_ctx,
            n_batch: n_ctx,
            n_ubatch,
            n_threads,
            embeddings: false,
            pooling_type: -1,
            type_kv: 1,
            n_seq_max: 1,
        }
    }

    /// Settings for pooled embeddings of sequences of up to `n_ctx` tokens.
    pub fn embeddings(n_ctx: u32, n_threads: i32) -> Self {
        ContextParams {
            n_ctx,
            n_batch: n_ctx,
            n_ubatch: n_ctx,
            n_threads,
            embeddings: true,
            pooling_type: -1,
            type_kv: 1,
            n_seq_max: 1,
        }
    }
}

/// A context over a borrowed model. Freed on drop.
pub struct Context<'m> {
    ptr: NonNull<sys::llama_context>,
    model: &'m Model,
    params: ContextParams,
    /// What the eval callback writes to, if anything.
    observer: Observer,
}

/// Where a context's eval callback writes ([`Context::with_routing`],
/// [`Context::with_layer_output`]). Owned through a raw pointer (from `Box::into_raw`)
/// because llama.cpp holds it too; freed in `Drop` after the context.
#[derive(Clone, Copy)]
enum Observer {
    None,
    Routing(NonNull<crate::routing::RoutingLog>),
    Capture(NonNull<crate::capture::Capture>),
    Imatrix(NonNull<crate::imatrix::ImatrixLog>),
}

impl Observer {
    /// The callback and its user data for `llama_context_params`.
    fn callback(self) -> (sys::ggml_backend_sched_eval_callback, *mut std::ffi::c_void) {
        match self {
            Observer::None => (None, std::ptr::null_mut()),
            Observer::Routing(r) => (Some(crate::routing::collect), r.as_ptr() as *mut _),
            Observer::Capture(c) => (Some(crate::capture::collect), c.as_ptr() as *mut _),
            Observer::Imatrix(m) => (Some(crate::imatrix::collect), m.as_ptr() as *mut _),
        }
    }

    /// Frees what the observer owns.
    ///
    /// # Safety
    /// Only once, after the context that could write it is freed (or was never made).
    unsafe fn free(self) {
        match self {
            Observer::None => {}
            Observer::Routing(r) => drop(Box::from_raw(r.as_ptr())),
            Observer::Capture(c) => drop(Box::from_raw(c.as_ptr())),
            Observer::Imatrix(m) => drop(Box::from_raw(m.as_ptr())),
        }
    }
}

impl<'m> Context<'m> {
    /// Creates a context (`llama_init_from_model`).
    ///
    /// Errors: llama.cpp refused the parameters.
    pub fn new(model: &'m Model, params: ContextParams) -> Result<Context<'m>, RuntimeError> {
        Self::create(model, params, Observer::None)
    }

    /// As [`Context::new`], recording the experts llama.cpp routes every token to in every
    /// MoE layer ([`crate::routing`]); [`Context::take_routing`] hands them over. The graph is
    /// evaluated in pieces around the observed nodes: same values, slower.
    ///
    /// Errors: as [`Context::new`].
    pub fn with_routing(
        model: &'m Model,
        params: ContextParams,
    ) -> Result<Context<'m>, RuntimeError> {
        let log = Box::into_raw(Box::<crate::routing::RoutingLog>::default());
        // SAFETY: Box::into_raw never returns null.
        let log = unsafe { NonNull::new_unchecked(log) };
        Self::create(model, params, Observer::Routing(log))
    }

    /// As [`Context::new`], recording the output of decoder layer `layer` (the graph node
    /// `l_out-LAYER`, [`crate::capture`]) of every decode; [`Context::layer_output_from_embd`]
    /// hands it over. The graph is evaluated in two pieces around the node: same values.
    ///
    /// Errors: as [`Context::new`].
    pub fn with_layer_output(
        model: &'m Model,
        params: ContextParams,
        layer: usize,
    ) -> Result<Context<'m>, RuntimeError> {
        let cap = Box::into_raw(Box::new(crate::capture::Capture::layer_output(layer)));
        // SAFETY: Box::into_raw never returns null.
        let cap = unsafe { NonNull::new_unchecked(cap) };
        Self::create(model, params, Observer::Capture(cap))
    }

    /// As [`Context::new`], gathering importance-matrix statistics of every decode
    /// ([`crate::imatrix`]); [`Context::take_imatrix`] hands them over.
    ///
    /// Errors: as [`Context::new`].
    pub fn with_imatrix(
        model: &'m Model,
        params: ContextParams,
    ) -> Result<Context<'m>, RuntimeError> {
        let log = Box::into_raw(Box::<crate::imatrix::ImatrixLog>::default());
        // SAFETY: Box::into_raw never returns null.
        let log = unsafe { NonNull::new_unchecked(log) };
        Self::create(model, params, Observer::Imatrix(log))
    }

    /// The statistics gathered since the last call (empty without [`Context::with_imatrix`]).
    pub fn take_imatrix(&mut self) -> crate::imatrix::ImatrixLog {
        // SAFETY: as take_routing: written only during a decode.
        match self.observer {
            Observer::Imatrix(m) => std::mem::take(unsafe { &mut *m.as_ptr() }),
            _ => Default::default(),
        }
    }

    /// Decodes `seqs` as one batch after clearing the memory: sequence `s` at positions
    /// `0..len` of sequence id `s`, every token an output (llama-imatrix's batches: up to
    /// `n_seq_max` chunks side by side).
    ///
    /// Errors: more sequences than `n_seq_max`, more tokens than the batch, or a failed
    /// decode.
    pub fn decode_sequences(&mut self, seqs: &[&[i32]]) -> Result<(), RuntimeError> {
        let n: usize = seqs.iter().map(|s| s.len()).sum();
        if n == 0 || n > self.params.n_batch as usize || seqs.len() > self.params.n_seq_max as usize
        {
            return Err(RuntimeError::Eval {
                call: "llama_decode",
                detail: format!(
                    "{} sequences of {n} tokens do not fit one batch of {} ({} sequences)",
                    seqs.len(),
                    self.params.n_batch,
                    self.params.n_seq_max
                ),
            });
        }
        self.clear();
        // SAFETY: batch sized for n tokens with one seq id each; every index < n is written;
        // freed before returning.
        unsafe {
            let mut batch = sys::llama_batch_init(n as i32, 0, 1);
            let mut i = 0;
            for (s, seq) in seqs.iter().enumerate() {
                for (k, &t) in seq.iter().enumerate() {
                    *batch.token.add(i) = t;
                    *batch.pos.add(i) = k as i32;
                    *batch.n_seq_id.add(i) = 1;
                    *(*batch.seq_id.add(i)) = s as i32;
                    *batch.logits.add(i) = 1;
                    i += 1;
                }
            }
            batch.n_tokens = n as i32;
            let rc = sys::llama_decode(self.ptr.as_ptr(), batch);
            sys::llama_batch_free(batch);
            if rc != 0 {
                return Err(RuntimeError::Eval {
                    call: "llama_decode",
                    detail: format!("returned {rc} for {} sequences of {n} tokens", seqs.len()),
                });
            }
        }
        Ok(())
    }

    /// The routing recorded since the last call (empty without [`Context::with_routing`], or
    /// for a model without experts).
    pub fn take_routing(&mut self) -> crate::routing::RoutingLog {
        // SAFETY: the log is ours and llama.cpp writes it only during a decode, which cannot
        // run while this &mut self borrow lasts.
        match self.observer {
            Observer::Routing(r) => std::mem::take(unsafe { &mut *r.as_ptr() }),
            _ => Default::default(),
        }
    }

    fn create(
        model: &'m Model,
        params: ContextParams,
        observer: Observer,
    ) -> Result<Context<'m>, RuntimeError> {
        // SAFETY: default params from llama.cpp, adjusted by plain field writes.
        let mut p = unsafe { sys::llama_context_default_params() };
        p.n_ctx = params.n_ctx;
        p.n_batch = params.n_batch;
        p.n_ubatch = params.n_ubatch;
        p.n_seq_max = params.n_seq_max;
        p.n_threads = params.n_threads;
        p.n_threads_batch = params.n_threads;
        p.embeddings = params.embeddings;
        p.pooling_type = params.pooling_type;
        p.type_k = params.type_kv;
        p.type_v = params.type_kv;
        p.no_perf = true;
        (p.cb_eval, p.cb_eval_user_data) = observer.callback();
        // SAFETY: valid model pointer; params by value; the observer outlives the context
        // (dropped with it, after llama_free).
        let ptr = unsafe { sys::llama_init_from_model(model.raw(), p) };
        let Some(ptr) = NonNull::new(ptr) else {
            // SAFETY: llama.cpp made no context that could write it.
            unsafe { observer.free() };
            return Err(RuntimeError::Eval {
                call: "llama_init_from_model",
                detail: format!("{params:?}"),
            });
        };
        Ok(Context {
            ptr,
            model,
            params,
            observer,
        })
    }

    /// The settings this context was made with.
    pub fn params(&self) -> &ContextParams {
        &self.params
    }

    /// The pooling type llama.cpp actually uses (model default resolved).
    pub fn pooling_type(&self) -> i32 {
        // SAFETY: valid context.
        unsafe { sys::llama_pooling_type(self.ptr.as_ptr()) }
    }

    fn clear(&mut self) {
        // SAFETY: valid context; encoder-only models have no memory (null), which we skip.
        unsafe {
            let mem = sys::llama_get_memory(self.ptr.as_ptr());
            if !mem.is_null() {
                sys::llama_memory_clear(mem, true);
            }
        }
    }

    /// Evaluates one sequence (positions 0..n, sequence 0, every token an output), after
    /// clearing the memory, as llama.cpp's embedding example does.
    fn eval(&mut self, tokens: &[i32]) -> Result<(), RuntimeError> {
        self.eval_outputs(tokens, 0)
    }

    /// Evaluates one sequence after clearing the memory, requesting outputs only for positions
    /// ≥ `first_output` (llama-perplexity scores the second half of each chunk), then returns
    /// the logits of those positions (`n − first_output` rows of `n_vocab`).
    ///
    /// Errors: a sequence longer than one ubatch or the context, or a failed decode.
    pub fn logits_from(
        &mut self,
        tokens: &[i32],
        first_output: usize,
    ) -> Result<Vec<Vec<f32>>, RuntimeError> {
        self.eval_outputs(tokens, first_output)?;
        self.output_rows(first_output..tokens.len(), 0)
    }

    /// Copies of the logits rows of batch indices `idx` (each requested as an output) of a
    /// batch decoded at positions `pos0..` (named in errors).
    fn output_rows(
        &self,
        idx: std::ops::Range<usize>,
        pos0: usize,
    ) -> Result<Vec<Vec<f32>>, RuntimeError> {
        let n_vocab = self.model.n_vocab();
        idx.map(|i| {
            // SAFETY: batch index i was requested as an output.
            let p = unsafe { sys::llama_get_logits_ith(self.ptr.as_ptr(), i as i32) };
            if p.is_null() {
                return Err(RuntimeError::Eval {
                    call: "llama_get_logits_ith",
                    detail: format!("no logits at position {}", pos0 + i),
                });
            }
            // SAFETY: n_vocab floats per output row.
            Ok(unsafe { std::slice::from_raw_parts(p, n_vocab) }.to_vec())
        })
        .collect()
    }

    /// As [`Context::logits_from`], without copying: one slice per output row into llama.cpp's
    /// logits buffer (valid until the next call on this context).
    ///
    /// Errors: as [`Context::logits_from`].
    pub fn logits_view_from(
        &mut self,
        tokens: &[i32],
        first_output: usize,
    ) -> Result<Vec<&[f32]>, RuntimeError> {
        self.eval_outputs(tokens, first_output)?;
        let n_vocab = self.model.n_vocab();
        let n_out = tokens.len() - first_output;
        // SAFETY: after a decode that requested outputs for positions first_output.. (in
        // batch order), llama_get_logits is the start of n_out contiguous rows of n_vocab
        // floats (llama.h: "rows are in the order they appear in the batch").
        let p = unsafe { sys::llama_get_logits(self.ptr.as_ptr()) };
        if p.is_null() {
            return Err(RuntimeError::Eval {
                call: "llama_get_logits",
                detail: "no logits".into(),
            });
        }
        let all = unsafe { std::slice::from_raw_parts(p, n_out * n_vocab) };
        Ok(all.chunks_exact(n_vocab).collect())
    }

    fn eval_outputs(&mut self, tokens: &[i32], first_output: usize) -> Result<(), RuntimeError> {
        self.clear();
        self.decode_at(tokens, 0, first_output)
    }

    /// Decodes `tokens` at positions `pos0..` of sequence 0 as one batch (whatever the memory
    /// holds before `pos0` stays), requesting outputs for batch indices ≥ `first_output`.
    fn decode_at(
        &mut self,
        tokens: &[i32],
        pos0: usize,
        first_output: usize,
    ) -> Result<(), RuntimeError> {
        let n = tokens.len();
        if n == 0 || n > self.params.n_batch as usize || n > self.params.n_ctx as usize {
            return Err(RuntimeError::Eval {
                call: "llama_decode",
                detail: format!(
                    "{n} tokens do not fit one batch of {} (n_ctx {})",
                    self.params.n_batch, self.params.n_ctx
                ),
            });
        }
        // SAFETY: batch sized for n tokens with one seq id each; every array llama_batch_init
        // allocates is written for indices < n; freed below on every path.
        unsafe {
            let mut batch = sys::llama_batch_init(n as i32, 0, 1);
            for (i, &t) in tokens.iter().enumerate() {
                *batch.token.add(i) = t;
                *batch.pos.add(i) = (pos0 + i) as i32;
                *batch.n_seq_id.add(i) = 1;
                *(*batch.seq_id.add(i)) = 0;
                *batch.logits.add(i) = (i >= first_output) as i8;
            }
            batch.n_tokens = n as i32;
            let (call, rc) = if self.model.encoder_only() {
                ("llama_encode", sys::llama_encode(self.ptr.as_ptr(), batch))
            } else {
                ("llama_decode", sys::llama_decode(self.ptr.as_ptr(), batch))
            };
            sys::llama_batch_free(batch);
            if rc != 0 {
                return Err(RuntimeError::Eval {
                    call,
                    detail: format!("returned {rc} for {n} tokens"),
                });
            }
        }
        Ok(())
    }

    /// Decodes one sequence given as input embeddings (`embd`: `n × n_embd` floats, positions
    /// `0..n` of sequence 0, after clearing the memory), positions from `first_output` on
    /// outputs.
    ///
    /// Errors: `embd` not a whole number of rows, more rows than one batch or the context, or
    /// a failed decode.
    fn decode_embd(&mut self, embd: &[f32], first_output: usize) -> Result<usize, RuntimeError> {
        let n_embd = self.model.n_embd();
        let n = embd.len() / n_embd.max(1);
        if n == 0
            || n * n_embd != embd.len()
            || n > self.params.n_batch as usize
            || n > self.params.n_ctx as usize
        {
            return Err(RuntimeError::Eval {
                call: "llama_decode",
                detail: format!(
                    "{} input floats are not 1..={} rows of n_embd {n_embd}",
                    embd.len(),
                    self.params.n_batch.min(self.params.n_ctx)
                ),
            });
        }
        self.clear();
        // SAFETY: batch sized for n rows of n_embd floats with one seq id each; every array
        // llama_batch_init allocates is written for indices < n; freed below on every path.
        unsafe {
            let mut batch = sys::llama_batch_init(n as i32, n_embd as i32, 1);
            std::ptr::copy_nonoverlapping(embd.as_ptr(), batch.embd, embd.len());
            for i in 0..n {
                *batch.pos.add(i) = i as i32;
                *batch.n_seq_id.add(i) = 1;
                *(*batch.seq_id.add(i)) = 0;
                *batch.logits.add(i) = (i >= first_output) as i8;
            }
            batch.n_tokens = n as i32;
            let rc = sys::llama_decode(self.ptr.as_ptr(), batch);
            sys::llama_batch_free(batch);
            if rc != 0 {
                return Err(RuntimeError::Eval {
                    call: "llama_decode",
                    detail: format!("returned {rc} for {n} input embeddings"),
                });
            }
        }
        Ok(n)
    }

    /// Logits of every position of a sequence given as input embeddings (`n × n_embd`
    /// floats): `n` rows of `n_vocab`, from row `first_output` on.
    ///
    /// Errors: as [`Context::decode_embd`].
    pub fn logits_from_embd(
        &mut self,
        embd: &[f32],
        first_output: usize,
    ) -> Result<Vec<Vec<f32>>, RuntimeError> {
        let n = embd.len() / self.model.n_embd().max(1);
        let first = first_output.min(n.saturating_sub(1));
        self.decode_embd(embd, first)?;
        self.output_rows(first..n, 0)
    }

    /// The output of the observed layer ([`Context::with_layer_output`]) for a sequence given
    /// as input embeddings: `n × n_embd` floats, in position order. Only the last position is
    /// an output (a one-row logits buffer): the observed layer must not be the model's last,
    /// whose feed-forward llama.cpp runs on the output rows only. The callback stops the graph
    /// after the observed node.
    ///
    /// Errors: as [`Context::decode_embd`]; a context without that observer, or a node of
    /// another type or shape, or one not found.
    pub fn layer_output_from_embd(&mut self, embd: &[f32]) -> Result<Vec<f32>, RuntimeError> {
        let Observer::Capture(cap) = self.observer else {
            return Err(RuntimeError::Eval {
                call: "llama_decode",
                detail: "the context observes no layer output".into(),
            });
        };
        // SAFETY: llama.cpp writes the capture only during a decode, which cannot run while
        // this &mut self borrow lasts; the pointer lives as long as the context.
        unsafe { (*cap.as_ptr()).rows.clear() };
        let rows = embd.len() / self.model.n_embd().max(1);
        let n = self.decode_embd(embd, rows.saturating_sub(1))?;
        // SAFETY: as above.
        let cap = unsafe { &mut *cap.as_ptr() };
        if let Some(why) = cap.refused.take() {
            return Err(RuntimeError::Eval {
                call: "cb_eval",
                detail: why,
            });
        }
        let rows = std::mem::take(&mut cap.rows);
        if rows.len() != n * self.model.n_embd() {
            return Err(RuntimeError::Eval {
                call: "cb_eval",
                detail: format!(
                    "captured {} floats of {:?}, expected {n} rows of {}",
                    rows.len(),
                    cap.name(),
                    self.model.n_embd()
                ),
            });
        }
        Ok(rows)
    }

    /// The pooled embedding of one sequence (`llama_get_embeddings_seq`), not normalised.
    ///
    /// Errors: evaluation failure, or a context without pooling.
    pub fn embed(&mut self, tokens: &[i32]) -> Result<Vec<f32>, RuntimeError> {
        self.eval(tokens)?;
        let n_embd = self.model.n_embd();
        // SAFETY: valid context after a successful eval; the pointer has n_embd floats.
        let p = unsafe { sys::llama_get_embeddings_seq(self.ptr.as_ptr(), 0) };
        if p.is_null() {
            return Err(RuntimeError::NoPooledEmbedding {
                pooling_type: self.pooling_type(),
            });
        }
        // SAFETY: see above.
        Ok(unsafe { std::slice::from_raw_parts(p, n_embd) }.to_vec())
    }

    /// Decodes `tokens` at positions `pos0..` of sequence 0 in pieces of at most `n_batch`,
    /// requesting only the last token's logits (llama-bench's `llama_batch_get_one` runs), then
    /// waits for the computation (`llama_synchronize`). The memory is kept.
    ///
    /// Errors: a failed decode.
    pub fn decode_timed_run(&mut self, tokens: &[i32], pos0: usize) -> Result<(), RuntimeError> {
        for (k, piece) in tokens
            .chunks(self.params.n_batch.max(1) as usize)
            .enumerate()
        {
            let start = pos0 + k * self.params.n_batch as usize;
            // SAFETY: batch sized for piece.len() tokens with one seq id each; freed below.
            unsafe {
                let mut batch = sys::llama_batch_init(piece.len() as i32, 0, 1);
                for (i, &t) in piece.iter().enumerate() {
                    *batch.token.add(i) = t;
                    *batch.pos.add(i) = (start + i) as i32;
                    *batch.n_seq_id.add(i) = 1;
                    *(*batch.seq_id.add(i)) = 0;
                    *batch.logits.add(i) = (i + 1 == piece.len()) as i8;
                }
                batch.n_tokens = piece.len() as i32;
                let rc = sys::llama_decode(self.ptr.as_ptr(), batch);
                sys::llama_batch_free(batch);
                if rc != 0 {
                    return Err(RuntimeError::Eval {
                        call: "llama_decode",
                        detail: format!("returned {rc} at position {start}"),
                    });
                }
            }
        }
        // SAFETY: valid context.
        unsafe { sys::llama_synchronize(self.ptr.as_ptr()) };
        Ok(())
    }

    /// Clears the memory (KV cache) without zeroing its data, as llama-bench does per repetition.
    pub fn clear_memory(&mut self) {
        // SAFETY: valid context; encoder-only models have no memory (null), which we skip.
        unsafe {
            let mem = sys::llama_get_memory(self.ptr.as_ptr());
            if !mem.is_null() {
                sys::llama_memory_clear(mem, false);
            }
        }
    }

    /// Logits of a continuation of sequence 0: drops what the memory holds from position
    /// `pos0` on (keeping positions `0..pos0`, e.g. a shared prefix decoded once by
    /// [`Context::logits_from`]), decodes `tokens` at positions `pos0..` and returns the logits
    /// of each (`tokens.len()` rows of `n_vocab`). llama-perplexity's HellaSwag shares the
    /// context of the four endings the same way, so each ending costs only its own tokens.
    ///
    /// Errors: more tokens than one batch or the context holds, or a failed decode.
    pub fn logits_continuing(
        &mut self,
        tokens: &[i32],
        pos0: usize,
    ) -> Result<Vec<Vec<f32>>, RuntimeError> {
        if pos0 + tokens.len() > self.params.n_ctx as usize {
            return Err(RuntimeError::Eval {
                call: "llama_decode",
                detail: format!(
                    "positions {pos0}..{} do not fit the context of {}",
                    pos0 + tokens.len(),
                    self.params.n_ctx
                ),
            });
        }
        // SAFETY: valid context; a decoder has memory (checked non-null).
        unsafe {
            let mem = sys::llama_get_memory(self.ptr.as_ptr());
            if !mem.is_null() {
                sys::llama_memory_seq_rm(mem, 0, pos0 as i32, -1);
            }
        }
        self.decode_at(tokens, pos0, 0)?;
        self.output_rows(0..tokens.len(), pos0)
    }

    /// Logits of every position of one sequence: `tokens.len()` rows of `n_vocab`.
    ///
    /// Errors: evaluation failure, or a context made for embeddings.
    pub fn logits(&mut self, tokens: &[i32]) -> Result<Vec<Vec<f32>>, RuntimeError> {
        self.logits_from(tokens, 0)
    }
}

impl Drop for Context<'_> {
    fn drop(&mut self) {
        // SAFETY: we own the context pointer; the observer (from Box::into_raw) is freed
        // after the context that could write it.
        unsafe {
            sys::llama_free(self.ptr.as_ptr());
            self.observer.free();
        }
    }
}
