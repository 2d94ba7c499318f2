//! Benchmarks (`quantgate bench …`): commands that print figures next to the named peer's,
//! measured side by side in one run with the arms alternated — never timed tests. Each returns
//! typed figures; the CLI renders them.
//!
//! * [`dequant`]: our block dequantizers vs ggml's `to_float` (GB/s).
//! * [`convert`]: `convert` vs llama.cpp's `convert_hf_to_gguf.py` (wall, peak RSS).
//! * [`ppl`]: `eval ppl` vs `llama-perplexity` (tokens/s, peak RSS).
//! * [`speed`]: `eval bench` vs `llama-bench` (pp512/tg128, peak RSS).
//! * [`verify`]: `verify` wall and peak RSS per model, against an earlier build.
//! * [`repack`]: MLX repack vs a plain copy conversion (MB/s of source).
//! * [`peer`]: llama-perplexity and llama-bench built with llama.cpp's default CMake.
//! * [`gguf_hash`]: release manifests vs `llama-gguf-hash` (identical output, `--check`).
//! * [`inspect`]: `inspect` wall time on real files.
//! * [`quant`]: KLD/PPL per quantization type, without and with an importance matrix.
//! * [`scale`]: the whole pipeline once on a 7–8B model, against the goals of issue 30.

pub mod convert;
pub mod dequant;
pub mod gguf_hash;
pub mod inspect;
pub mod peer;
pub mod ppl;
pub mod quant;
pub mod repack;
pub mod scale;
pub mod speed;
pub mod verify;

use crate::child::Measured;
use crate::stats::median;

/// Median wall time (s) and median peak RSS (KiB) of one arm's runs.
pub fn summarize(runs: &[Measured]) -> (f64, f64) {
    let wall: Vec<f64> = runs.iter().map(|m| m.wall_s).collect();
    let rss: Vec<f64> = runs.iter().map(|m| m.max_rss_kib as f64).collect();
    (median(&wall), median(&rss))
}
