//! quantgate's integration tests, one binary (one link of llama.cpp and candle instead of one
//! per file): a module per area. Tests that need a process of their own run the `quantgate`
//! binary as a child (`common::qg`).

mod common;

mod bad_inputs;
mod cpu_variant;
mod eval_bench;
mod eval_ppl;
mod gemma3;
mod golden_dequant;
mod golden_quantize;
mod hf_v5;
mod house;
mod image;
mod imatrix;
mod llama3;
mod mlx_convert;
mod packed_convert;
mod peer_tensors;
mod phi3;
mod ppl_parity;
mod protocol_check;
mod protocol_runs;
mod quantized;
mod qwen3moe;
mod real_gguf;
mod ref_ppl;
mod release;
mod scale;
mod seed_a;
mod setup_detection;
mod signing;
mod sweep;
mod sweep_slurm;
mod tokenizer_stress;
mod trust;
mod trust2;
mod verify_causal;
mod verify_embeddings;
mod verify_qwen2;
mod xlmr;
