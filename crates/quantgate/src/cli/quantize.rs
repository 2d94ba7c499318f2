//! `quantgate quantize IN.gguf OUT.gguf TYPE`: llama.cpp's quantizer, then Gate 1 by
//! re-quantization with our ports of ggml's reference quantizers.

use std::collections::BTreeMap;
use std::path::PathBuf;

use quantgate::quantize::{self, QuantizeReport};

use super::Status;
use quantgate::threads::Threads;

/// Arguments of `quantize`.
#[derive(clap::Args)]
pub struct Args {
    /// Input GGUF (F32/F16/BF16).
    input: PathBuf,
    /// Output GGUF (written atomically).
    output: PathBuf,
    /// Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K_S/M/L, Q4_K_S/M, Q5_K_S/M, Q6_K, and the IQ
    /// types (IQ4_XS, IQ4_NL, IQ3_M/S/XS/XXS, IQ2_M/S/XS/XXS, IQ1_M/S; Q2_K_S): the IQ2, IQ1 and
    /// IQ3_XXS types need --imatrix.
    #[arg(value_name = "TYPE")]
    ftype: String,
    /// Importance matrix (`quantgate imatrix` or llama-imatrix output, GGUF or legacy .dat),
    /// as `llama-quantize --imatrix`.
    #[arg(long)]
    imatrix: Option<PathBuf>,
    /// Threads.
    #[arg(long, default_value_t = Threads::DEFAULT)]
    threads: Threads,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

/// Quantizes; exit 1 when a tensor differs from our re-quantization.
pub fn run(a: Args) -> anyhow::Result<Status> {
    super::progress::install_stderr_hook("quantize");
    let r = quantize::quantize_with(
        &a.input,
        &a.output,
        &a.ftype,
        a.threads,
        a.imatrix.as_deref(),
    )?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&r)?);
    } else {
        render(&r);
    }
    Ok(Status::from_pass(r.gate1.pass))
}

fn render(r: &QuantizeReport) {
    let g = &r.gate1;
    println!("runtime: {}", llama_runtime::build_info());
    let mut hist = BTreeMap::<&str, usize>::new();
    for t in &r.tensors {
        *hist.entry(t.ggml_type.as_str()).or_default() += 1;
    }
    println!(
        "quantized {} → {} as {} in {:.2} s: {} bytes; types {:?}",
        r.input, r.output, r.ftype, r.seconds, r.file_bytes, hist
    );
    if let Some(m) = &r.imatrix {
        println!(
            "imatrix: {} ({}, sha256 {}): {} entries, {} chunks, dataset {:?}",
            m.file, m.format, m.sha256, m.entries, m.chunks, m.dataset
        );
    }
    // Every fallback is in --json; the text shows a count and the first few.
    for f in r.fallbacks.iter().take(3) {
        println!("fallback: {f}");
    }
    if r.fallbacks.len() > 3 {
        println!(
            "fallback: … {} tensors in all (--json lists each)",
            r.fallbacks.len()
        );
    }
    for t in g.tensors.iter().filter(|t| !t.identical) {
        println!(
            "gate 1: {} ({} from {}) differs from our re-quantization at block {:?}",
            t.name, t.ggml_type, t.source_type, t.first_diff_block
        );
    }
    println!(
        "gate 1 (re-quantization: {}): {}/{} tensors byte-identical ({} re-quantized, {} copied) → {}",
        if r.imatrix.is_some() {
            "ggml's quantizer with the imatrix's weights"
        } else {
            "ggml reference algorithm, no imatrix"
        },
        g.identical,
        g.tensors.len(),
        g.requantized,
        g.copied,
        if g.pass { "pass" } else { "FAIL" }
    );
}
