//! quantgate: convert, quantize, verify (GO/NO-GO) and evaluate GGUF models reproducibly.
//!
//! The library does the work and returns typed results; it never prints. The `quantgate`
//! binary (`main.rs` dispatching to `cli/<command>.rs`) parses arguments, calls one library
//! function and renders. Data flows one way: read → convert → write → verify (one function per
//! gate) → report. See `docs/architecture.md`.

#[cfg(feature = "runtime")]
pub mod benchmarks;
#[cfg(feature = "runtime")]
pub mod check_dequant;
pub mod child;
pub mod convert;
#[cfg(feature = "runtime")]
pub mod demo;
pub mod disk;
#[cfg(feature = "runtime")]
pub mod eval;
pub mod hash;
#[cfg(feature = "runtime")]
pub mod html;
/// The container image a command runs in (`QUANTGATE_IMAGE_DIGEST`).
pub mod image;
pub mod imatrix;
pub mod inspect;
pub mod interrupt;
pub mod paths;
pub mod progress;
#[cfg(feature = "runtime")]
pub mod protocol;
#[cfg(feature = "runtime")]
pub mod quantize;
#[cfg(feature = "runtime")]
pub mod release;
#[cfg(feature = "runtime")]
pub mod selftest;
pub mod serde_nan;
pub mod source;
pub mod stats;
#[cfg(feature = "runtime")]
pub mod sweep;
pub mod threads;
#[cfg(feature = "runtime")]
pub mod verify;
