//! A loaded llama.cpp model (`llama_model`) and its tokenizer (`llama_tokenize`).

use std::ffi::CString;
use std::path::Path;
use std::ptr::NonNull;

use crate::{init, sys, RuntimeError};

/// A model loaded by llama.cpp on the CPU (no GPU layers). Freed on drop.
pub struct Model {
    ptr: NonNull<sys::llama_model>,
    path: String,
}

// SAFETY: llama_model is immutable after loading; llama.cpp shares it between contexts/threads.
unsafe impl Send for Model {}
unsafe impl Sync for Model {}

/// Why `llama_tokenize` failed.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TokenizeError {
    /// The text contains a NUL byte, which the C API cannot take.
    #[error("text contains a NUL byte")]
    Nul,
    /// llama.cpp reported an overflow (`INT32_MIN`).
    #[error("llama_tokenize overflowed on a text of {0} bytes")]
    Overflow(usize),
}

impl Model {
    /// Loads `path` with llama.cpp (`llama_model_load_from_file`), CPU only, memory-mapped.
    /// `vocab_only` loads just the tokenizer (no tensors needed in the file).
    ///
    /// Errors: [`RuntimeError::Load`] naming the file when llama.cpp refuses it;
    /// [`RuntimeError::Backend`] when the CPU backend (a pinned variant) cannot be loaded.
    pub fn load(path: &Path, vocab_only: bool) -> Result<Model, RuntimeError> {
        init();
        // A pinned CPU variant this host cannot run refuses every model, never falls back.
        crate::cpu::cpu_backend()?;
        crate::ensure_regular(path)?;
        let mark = crate::log::mark();
        let c =
            CString::new(path.as_os_str().as_encoded_bytes()).map_err(|_| RuntimeError::Load {
                path: path.display().to_string(),
                log: "the path contains a NUL byte".into(),
            })?;
        // SAFETY: default params from llama.cpp, adjusted by plain field writes.
        let mut params = unsafe { sys::llama_model_default_params() };
        params.n_gpu_layers = 0;
        params.vocab_only = vocab_only;
        // SAFETY: valid NUL-terminated path; params by value.
        let ptr = unsafe { sys::llama_model_load_from_file(c.as_ptr(), params) };
        NonNull::new(ptr)
            .map(|ptr| Model {
                ptr,
                path: path.display().to_string(),
            })
            .ok_or_else(|| RuntimeError::Load {
                path: path.display().to_string(),
                log: crate::load_log(mark),
            })
    }

    pub(crate) fn raw(&self) -> *mut sys::llama_model {
        self.ptr.as_ptr()
    }

    /// The path the model was loaded from.
    pub fn path(&self) -> &str {
        &self.path
    }

    fn vocab(&self) -> *const sys::llama_vocab {
        // SAFETY: valid model pointer for self's lifetime.
        unsafe { sys::llama_model_get_vocab(self.raw()) }
    }

    /// Embedding width (`n_embd`).
    pub fn n_embd(&self) -> usize {
        // SAFETY: valid model.
        unsafe { sys::llama_model_n_embd(self.raw()) as usize }
    }

    /// Training context length (`*.context_length`), tokens.
    pub fn n_ctx_train(&self) -> usize {
        // SAFETY: valid model.
        unsafe { sys::llama_model_n_ctx_train(self.raw()).max(0) as usize }
    }

    /// Number of tokens in the vocabulary.
    pub fn n_vocab(&self) -> usize {
        // SAFETY: valid vocab of a valid model.
        unsafe { sys::llama_vocab_n_tokens(self.vocab()) as usize }
    }

    /// The vocabulary's add_bos flag (after llama.cpp's defaults and the GGUF keys).
    pub fn add_bos(&self) -> bool {
        // SAFETY: valid vocab.
        unsafe { sys::llama_vocab_get_add_bos(self.vocab()) }
    }

    /// The vocabulary's add_eos flag.
    pub fn add_eos(&self) -> bool {
        // SAFETY: valid vocab.
        unsafe { sys::llama_vocab_get_add_eos(self.vocab()) }
    }

    /// The BOS token id.
    pub fn bos(&self) -> i32 {
        // SAFETY: valid vocab.
        unsafe { sys::llama_vocab_bos(self.vocab()) }
    }

    /// Whether llama.cpp evaluates this model with `llama_encode` (encoder-only models).
    pub fn encoder_only(&self) -> bool {
        // SAFETY: valid model.
        unsafe {
            sys::llama_model_has_encoder(self.raw()) && !sys::llama_model_has_decoder(self.raw())
        }
    }

    /// A metadata value as llama.cpp sees it (`llama_model_meta_val_str`), e.g.
    /// `tokenizer.ggml.pre`; `None` when absent.
    pub fn meta(&self, key: &str) -> Option<String> {
        let k = CString::new(key).ok()?;
        let mut buf = vec![0u8; 4096];
        // SAFETY: buf has buf.len() bytes; llama.cpp writes a NUL-terminated string into it.
        let n = unsafe {
            sys::llama_model_meta_val_str(
                self.raw(),
                k.as_ptr(),
                buf.as_mut_ptr().cast(),
                buf.len(),
            )
        };
        if n < 0 {
            return None;
        }
        buf.truncate((n as usize).min(buf.len() - 1));
        Some(String::from_utf8_lossy(&buf).into_owned())
    }

    /// Token ids of `text` per `llama_tokenize(vocab, text, add_special, parse_special)`.
    ///
    /// Errors: a NUL byte in `text`, or llama.cpp's overflow signal.
    pub fn tokenize(
        &self,
        text: &str,
        add_special: bool,
        parse_special: bool,
    ) -> Result<Vec<i32>, TokenizeError> {
        if text.as_bytes().contains(&0) {
            return Err(TokenizeError::Nul);
        }
        let len = i32::try_from(text.len()).map_err(|_| TokenizeError::Overflow(text.len()))?;
        // common_tokenize's first guess, then the exact size llama.cpp asks for.
        let mut cap = text.len() + 2 * add_special as usize + 1;
        loop {
            let mut out = vec![0i32; cap];
            // SAFETY: text is valid for len bytes (not NUL-terminated: the length is passed);
            // out has cap slots and llama.cpp writes at most n_tokens_max of them.
            let n = unsafe {
                sys::llama_tokenize(
                    self.vocab(),
                    text.as_ptr().cast(),
                    len,
                    out.as_mut_ptr(),
                    cap as i32,
                    add_special,
                    parse_special,
                )
            };
            if n == i32::MIN {
                return Err(TokenizeError::Overflow(text.len()));
            }
            if n >= 0 {
                out.truncate(n as usize);
                return Ok(out);
            }
            cap = (-n) as usize;
        }
    }
}

impl Drop for Model {
    fn drop(&mut self) {
        // SAFETY: we own the pointer; contexts borrow the model, so none outlives it.
        unsafe { sys::llama_model_free(self.ptr.as_ptr()) }
    }
}
