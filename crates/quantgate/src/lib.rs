//! quantgate: convert, quantize, verify (GO/NO-GO) and evaluate GGUF models reproducibly.
//!
//! The library does the work and returns typed results; it never prints. The `quantgate`
//! binary (`main.rs` dispatching to `cli/<command>.rs`) parses arguments, calls one library
//! function and renders. Data flows one way: read → convert → write → verify (one function per
//! gate) → report. See `docs/architecture.md`.

pub mod benchmarks;
pub mod check_dequant;
pub mod child;
pub mod convert;
pub mod demo;
pub mod eval;
pub mod hash;
pub mod inspect;
pub mod interrupt;
pub mod paths;
pub mod protocol;
pub mod quantize;
pub mod selftest;
pub mod serde_nan;
pub mod stats;
pub mod verify;
