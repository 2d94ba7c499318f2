//! `quantgate eval`: measurements numerically compatible with llama.cpp's own tools.

pub mod bench;
pub mod hellaswag;
pub mod kld;
pub mod ppl;
pub mod record;
pub mod ref_ppl;
