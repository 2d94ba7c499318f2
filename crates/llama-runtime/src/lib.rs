//! A small safe wrapper over llama.cpp as vendored and built by `llama-cpp-sys-2 = "=0.1.161"`.
//!
//! This crate is the only place that calls llama.cpp/ggml C functions. It exposes what the
//! verifier needs from the standard runtime: the pinned build's identity and ggml's own type
//! traits (`to_float`, `ggml_quantize_chunk`), so our Rust code can be checked against ggml's.
//! Type ids are plain `u32` (`enum ggml_type`) so this crate does not depend on our GGUF code.

#![deny(missing_docs)]

use std::ffi::CStr;
use std::fmt;
use std::sync::Once;

pub use llama_cpp_sys_2 as sys;

mod capture;
mod context;
mod cpu;
mod ggml;
mod gguf_c;
pub mod imatrix;
pub mod log;
mod model;
mod quantize;
pub mod routing;

pub use context::{Context, ContextParams};
pub use cpu::{
    backends_dir, cpu_backend, scores, variants, CpuBackend, BROKEN_VARIANTS, CPU_VARIANT_ENV,
};
pub use ggml::{
    ggml_quantize, ggml_quantize_weighted, ggml_requires_imatrix, ggml_to_float, type_traits,
    TypeTraits,
};
pub use gguf_c::{CGguf, CTensorInfo, CValue};
pub use model::{Model, TokenizeError};
pub use quantize::{quantize_model, quantize_plan, PlannedType, QuantizeImatrix};

/// The exact crate pin of the runtime; printed in every report.
pub const LLAMA_CPP_SYS_PIN: &str = "llama-cpp-sys-2 =0.1.161";

/// Errors of this wrapper.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
pub enum RuntimeError {
    /// The id is not below `GGML_TYPE_COUNT`.
    #[error("ggml type id {0} does not exist in this llama.cpp build")]
    UnknownType(u32),
    /// ggml has no `to_float`/quantizer for this type (e.g. a removed type id).
    #[error("ggml type {0} has no {1} in this llama.cpp build")]
    Missing(String, &'static str),
    /// Buffer sizes that do not match the type's block layout.
    #[error("ggml type {ty}: {detail}")]
    Size {
        /// ggml's name of the type (`ggml_type_name`, e.g. `q4_K`).
        ty: String,
        /// The element count, byte count or row length that does not fit the blocks.
        detail: String,
    },
    /// llama.cpp could not load a model file.
    #[error("{path}: llama.cpp could not load the model: {log}")]
    Load {
        /// The model or GGUF file path (`Path::display`).
        path: String,
        /// llama.cpp's own error lines for this load (see [`log`]), or a hint when it logged
        /// none.
        log: String,
    },
    /// The CPU backend could not be loaded: a pinned variant that was not built or that this
    /// host cannot run, or no module at all.
    #[error("CPU backend: {detail}")]
    Backend {
        /// What was asked and what was found (the variants built).
        detail: String,
    },
    /// `llama_get_embeddings_seq` found no pooled embedding: the context's pooling type (from
    /// the file's `{arch}.pooling_type`, or none) gives no pooled vector for this model.
    #[error("llama.cpp llama_get_embeddings_seq failed: no pooled embedding (pooling type {pooling_type})")]
    NoPooledEmbedding {
        /// `llama_pooling_type` of the context (llama.h `LLAMA_POOLING_TYPE_*`).
        pooling_type: i32,
    },
    /// A llama.cpp call failed: context creation, evaluation or `llama_model_quantize`.
    #[error("llama.cpp {call} failed: {detail}")]
    Eval {
        /// The llama.cpp function that failed, e.g. `llama_decode` or `llama_model_quantize`.
        call: &'static str,
        /// What went wrong: the return code, the parameters or position involved, or the I/O
        /// error of the final rename.
        detail: String,
    },
}

/// Identity of the llama.cpp build linked into this binary.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BuildInfo {
    /// Crate pin, e.g. `llama-cpp-sys-2 =0.1.161`.
    pub crate_pin: String,
    /// `ggml_version()`, e.g. `0.26.0`.
    pub ggml_version: String,
    /// `ggml_commit()` (`unknown` when the crate was built outside a git checkout).
    pub ggml_commit: String,
    /// `llama_print_system_info()`: the CPU features the build uses.
    pub system_info: String,
    /// The CPU backend that runs: variant and ISA features ([`cpu_backend`]), or why none
    /// could be loaded.
    pub cpu: Result<CpuBackend, RuntimeError>,
}

impl fmt::Display for BuildInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The crate builds llama.cpp outside a git checkout, so the commit is usually unknown.
        match self.ggml_commit.as_str() {
            "" | "unknown" => write!(f, "{} (ggml {})", self.crate_pin, self.ggml_version)?,
            c => write!(
                f,
                "{} (ggml {}, commit {c})",
                self.crate_pin, self.ggml_version
            )?,
        }
        match &self.cpu {
            Ok(c) => write!(f, " · CPU backend {c}"),
            Err(e) => write!(f, " · {e}"),
        }
    }
}

pub(crate) fn cstr(p: *const std::os::raw::c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    // SAFETY: ggml/llama return static NUL-terminated strings.
    unsafe { CStr::from_ptr(p) }
        .to_string_lossy()
        .trim()
        .to_string()
}

/// Initialises the llama.cpp backend once per process (`llama_backend_init`) and routes
/// llama.cpp's log through [`log`]: its error lines are kept to explain a refusal, and all of it
/// goes to stderr only when `QUANTGATE_LLAMA_LOG=1` (it is very chatty).
pub fn init() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let verbose = std::env::var("QUANTGATE_LLAMA_LOG").is_ok_and(|v| v == "1");
        // A non-null user pointer tells the callback to echo (it is never dereferenced).
        let echo = if verbose {
            std::ptr::NonNull::<std::os::raw::c_void>::dangling().as_ptr()
        } else {
            std::ptr::null_mut()
        };
        // SAFETY: a static callback; set before any other llama.cpp call. ggml's own log
        // (gguf reader) goes through the same callback.
        unsafe {
            sys::llama_log_set(Some(log::capture), echo);
        }
        // The CPU module first: llama.cpp finds no device otherwise.
        cpu::load();
        // SAFETY: after the backends are registered, as llama.cpp's tools do.
        unsafe {
            sys::llama_backend_init();
        }
    });
}

/// A [`RuntimeError::Load`] unless `path` is a regular file: llama.cpp would block forever
/// opening a FIFO, or read a device without end. (The twin of
/// `quantgate::paths::ensure_regular_file`: this crate depends on no other of ours.)
pub(crate) fn ensure_regular(path: &std::path::Path) -> Result<(), RuntimeError> {
    match std::fs::metadata(path) {
        Ok(m) if m.is_file() => Ok(()),
        Ok(_) => Err(RuntimeError::Load {
            path: path.display().to_string(),
            log: "not a regular file".into(),
        }),
        Err(e) => Err(RuntimeError::Load {
            path: path.display().to_string(),
            log: e.to_string(),
        }),
    }
}

/// The `log` of a [`RuntimeError::Load`]: llama.cpp's error lines since `mark`, or a hint.
pub(crate) fn load_log(mark: u64) -> String {
    let l = log::errors_since(mark);
    if l.is_empty() {
        "llama.cpp logged no error (run with QUANTGATE_LLAMA_LOG=1 for its full log)".into()
    } else {
        l
    }
}

/// The llama.cpp source folder llama-cpp-sys-2 built this crate's libraries from (its CMake
/// cache's `CMAKE_HOME_DIRECTORY`, read at build time; empty when unknown). The crate ships a
/// trimmed tree: `src/`, `ggml/`, `common/`, `include/`, but no `tools/` sources.
pub fn llama_source_dir() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("QUANTGATE_LLAMA_SRC"))
}

/// The linked build's identity.
pub fn build_info() -> BuildInfo {
    init();
    // SAFETY: plain getters returning static strings.
    let (v, c, s) = unsafe {
        (
            sys::ggml_version(),
            sys::ggml_commit(),
            sys::llama_print_system_info(),
        )
    };
    BuildInfo {
        crate_pin: LLAMA_CPP_SYS_PIN.into(),
        ggml_version: cstr(v),
        ggml_commit: cstr(c),
        system_info: cstr(s),
        cpu: cpu_backend(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn build_info_names_the_pin_and_a_ggml_version() {
        let b = build_info();
        assert_eq!(b.crate_pin, "llama-cpp-sys-2 =0.1.161");
        assert_eq!(b.ggml_version, "0.26.0");
        let s = b.to_string();
        assert!(
            s.starts_with("llama-cpp-sys-2 =0.1.161 (ggml 0.26.0"),
            "{s}"
        );
        // The CPU backend that runs is part of the identity.
        assert!(s.contains(" · CPU backend "), "{s}");
        assert!(s.contains("(host best) ["), "{s}");
    }

    #[test]
    fn q8_0_round_trip_through_ggml() {
        // One Q8_0 block of 0..32: d = 31/127 → exact codes, values within d/2.
        let x: Vec<f32> = (0..32).map(|i| i as f32).collect();
        let q = ggml_quantize(8, &x, 32).unwrap();
        assert_eq!(q.len(), 34);
        let mut y = vec![0f32; 32];
        ggml_to_float(8, &q, &mut y).unwrap();
        for (a, b) in x.iter().zip(&y) {
            assert!((a - b).abs() <= 0.13, "{a} vs {b}");
        }
        assert_eq!(
            ggml_to_float(8, &q[..33], &mut y),
            Err(RuntimeError::Size {
                ty: "q8_0".into(),
                detail: "32 elements and 33 bytes do not match blocks of 32 elements / 34 bytes"
                    .into()
            })
        );
        assert_eq!(type_traits(999), Err(RuntimeError::UnknownType(999)));
    }
}
