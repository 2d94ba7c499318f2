//! `quantgate imatrix MODEL.gguf -f TEXT -o imatrix.gguf`: llama-imatrix's statistics, written
//! in its GGUF format.

use std::path::PathBuf;

use quantgate::imatrix::{self, ImatrixParams, ImatrixReport};
use quantgate::threads::Threads;

use super::Status;

/// Arguments of `imatrix` (llama-imatrix's names and defaults).
#[derive(clap::Args)]
pub struct Args {
    /// Model GGUF (usually the F16 conversion).
    model: PathBuf,
    /// Text to compute over (`-f`, as llama-imatrix reads it).
    #[arg(short = 'f', long = "file")]
    text: PathBuf,
    /// Output imatrix GGUF (written atomically).
    #[arg(short = 'o', long = "output", default_value = "imatrix.gguf")]
    output: PathBuf,
    /// Tokens per chunk.
    #[arg(short = 'c', long = "ctx-size", default_value_t = 512)]
    n_ctx: usize,
    /// Chunks at most (all the text gives by default).
    #[arg(long)]
    chunks: Option<usize>,
    /// Logical batch: a multiple of -c; that many chunks go side by side.
    #[arg(short = 'b', long = "batch-size", default_value_t = 2048)]
    n_batch: usize,
    /// Physical batch.
    #[arg(long = "ubatch-size", visible_alias = "ub", default_value_t = 512)]
    n_ubatch: usize,
    /// Threads.
    #[arg(short = 't', long, default_value_t = Threads::DEFAULT)]
    threads: Threads,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

/// Computes and writes the matrix; exit 0, or 2/3 on input or runtime errors.
pub fn run(a: Args) -> anyhow::Result<Status> {
    let p = ImatrixParams {
        n_ctx: a.n_ctx,
        chunks: a.chunks,
        n_batch: a.n_batch,
        n_ubatch: a.n_ubatch,
        threads: a.threads,
    };
    let bar = super::progress::bar(0, "imatrix chunks");
    let r = imatrix::compute(&a.model, &a.text, &a.output, &p, |done, total| {
        bar.set_length(total as u64);
        bar.set_position(done as u64);
    })?;
    bar.finish_and_clear();
    if a.json {
        println!("{}", serde_json::to_string_pretty(&r)?);
    } else {
        render(&r);
    }
    Ok(Status::Success)
}

fn render(r: &ImatrixReport) {
    println!("runtime: {}", r.runtime);
    println!(
        "imatrix of {} over {}: {} chunks × {} tokens ({} in the text), {} chunks per batch, {:.1} s",
        r.model,
        r.text,
        r.chunks,
        r.chunk_size,
        r.text_tokens,
        r.params.n_batch / r.params.n_ctx,
        r.seconds
    );
    println!(
        "wrote {}: {} entries, imatrix.chunk_count {}, sha256 {}",
        r.output, r.entries, r.chunk_count, r.output_sha256
    );
}
