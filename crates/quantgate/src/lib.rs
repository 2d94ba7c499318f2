//! quantgate: convert, quantize, verify (GO/NO-GO) and evaluate GGUF models reproducibly.
//!
//! The library does the work and returns data; `main.rs` parses arguments and renders.
//! Data flows one way: read → convert → write → verify → report.

pub mod bench;
pub mod check_dequant;
pub mod child;
pub mod convert;
pub mod eval;
pub mod hash;
pub mod inspect;
pub mod interrupt;
pub mod paths;
pub mod progress;
pub mod protocol;
pub mod quantize;
pub mod verify;
