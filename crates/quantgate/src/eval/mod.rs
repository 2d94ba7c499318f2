//! `quantgate eval`: measurements numerically compatible with llama.cpp's own tools.

/// `eval bench`: pp/tg throughput as llama-bench measures it.
pub mod llama_bench;
pub mod hellaswag;
pub mod kld;
pub mod ppl;
pub mod record;
pub mod ref_ppl;
