//! `quantgate convert HF_DIR -o OUT.gguf [--outtype …] [--vocab-only] [--json] [--fallback …]`.

use std::path::PathBuf;

use quantgate::convert::{self, mlx::Fallback, ConvertOptions, ConvertReport, OutType};

use super::{exit::usage, Status};

/// Arguments of `convert`.
#[derive(clap::Args)]
pub struct Args {
    /// The HF folder.
    hf_dir: PathBuf,
    /// Output GGUF path (written atomically).
    #[arg(short, long)]
    output: PathBuf,
    /// Output type: f32, f16, bf16, q8_0 or auto (BF16 source → bf16, else f16).
    #[arg(long, default_value = "auto")]
    outtype: String,
    /// Write only the tokenizer and hyperparameters (no tensors).
    #[arg(long)]
    vocab_only: bool,
    /// Print the conversion report as JSON.
    #[arg(long)]
    json: bool,
    /// Already-quantized (MLX) tensors no ggml block type holds exactly: `f32` (exact,
    /// larger), `f16` (max error reported) or `requant:TYPE` (error stats reported).
    /// Without it such tensors are a blocker.
    #[arg(long)]
    fallback: Option<String>,
    /// Keep NaN/Inf source values instead of refusing them (recorded in the file's metadata
    /// and the report; such a file never verifies GO).
    #[arg(long)]
    allow_nonfinite: bool,
}

/// Converts; a conversion that cannot be done exactly as asked is an error (exit 2).
pub fn run(a: Args) -> anyhow::Result<Status> {
    quantgate::interrupt::install();
    super::progress::install_stderr_hook("convert");
    let fallback = a
        .fallback
        .map(|f| Fallback::parse(&f))
        .transpose()
        .map_err(|e| usage(e.to_string()))?;
    let opts = ConvertOptions {
        outtype: OutType::parse(&a.outtype).map_err(|e| usage(e.to_string()))?,
        vocab_only: a.vocab_only,
        fallback,
        allow_nonfinite: a.allow_nonfinite,
    };
    let r = convert::convert(&a.hf_dir, &a.output, &opts)?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&r)?);
    } else {
        render(&a.hf_dir, &r);
    }
    Ok(Status::Success)
}

fn render(hf_dir: &std::path::Path, r: &ConvertReport) {
    println!(
        "converted {} ({}) → {}: {} tensors, {} bytes, {:.2} s",
        hf_dir.display(),
        r.arch,
        r.output,
        r.tensors.len(),
        r.file_bytes,
        r.seconds
    );
    println!("tokenizer: {}", r.tokenizer);
    for s in &r.rules {
        println!(
            "rule: {} — {} tensors, {} weights, {} bytes, {:.3} bits/weight",
            s.rule, s.tensors, s.elements, s.bytes, s.bits_per_weight
        );
    }
    for e in &r.fallback_errors {
        println!(
            "fallback error: {} as {}: max |Δ| {:.3e}, RMS {:.3e}",
            e.tensor, e.stored_as, e.max_abs, e.rms
        );
    }
    for n in &r.notes {
        println!("note: {n}");
    }
}
