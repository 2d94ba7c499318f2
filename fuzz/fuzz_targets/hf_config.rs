//! Fuzz target: any bytes as `config.json` of an otherwise valid BERT folder (the config path of
//! `convert`: architecture lookup, metadata, cross-checks against the tensors). It must end in
//! Ok or an error, never a panic (e.g. a count that overflows a GGUF integer type).
#![no_main]

mod hf_common;

libfuzzer_sys::fuzz_target!(|data: &[u8]| hf_common::convert_with("config.json", data));
