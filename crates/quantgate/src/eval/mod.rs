//! `quantgate eval`: measurements numerically compatible with llama.cpp's own tools.

pub mod hellaswag;
pub mod kld;
/// `eval bench`: pp/tg throughput as llama-bench measures it.
pub mod llama_bench;
pub mod ppl;
pub mod record;
pub mod ref_ppl;
