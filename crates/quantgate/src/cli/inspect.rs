//! `quantgate inspect FILE.gguf [--json] [--tensors] [--check-dequant]`.

use std::path::PathBuf;

use anyhow::Context;
use quantgate::check_dequant::{self, DequantCheck};
use quantgate::{hash, inspect};

use super::Status;

/// Arguments of `inspect`.
#[derive(clap::Args)]
pub struct Args {
    /// The GGUF file.
    file: PathBuf,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
    /// Include the full tensor table in the text output.
    #[arg(long)]
    tensors: bool,
    /// Dequantize every tensor with our code and with ggml's to_float and compare bit
    /// patterns (u32 view); exit 1 on any difference.
    #[arg(long)]
    check_dequant: bool,
}

/// Inspects (and optionally checks) the file; exit 1 on a dequantization difference.
pub fn run(a: Args) -> anyhow::Result<Status> {
    let g = gguf::Gguf::open(&a.file)?;
    let sha = hash::sha256_file(&a.file).context("sha256")?;
    let report = inspect::inspect(&g, sha);
    let checked = a.check_dequant.then(|| {
        let pb = super::progress::bar(g.header.tensors.len() as u64, "tensors");
        let c = check_dequant::check_dequant(&g, |done, _| pb.set_position(done as u64));
        pb.finish_and_clear();
        c
    });
    let build = llama_runtime::build_info();
    if a.json {
        let v = serde_json::json!({
            "llama_cpp": build.to_string(),
            "inspect": report,
            "check_dequant": checked,
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        print!("{}", inspect::render_text(&report, a.tensors));
        println!("\nruntime: {build}");
        if let Some(c) = &checked {
            render_check(c);
        }
    }
    Ok(Status::from_pass(checked.is_none_or(|c| c.passed())))
}

fn render_check(c: &DequantCheck) {
    println!(
        "check-dequant: {}/{} tensors bit-identical to ggml to_float ({} elements compared)",
        c.identical, c.tensors, c.elements
    );
    if !c.unsupported.is_empty() {
        let head: Vec<&str> = c.unsupported.iter().take(5).map(String::as_str).collect();
        let more = c.unsupported.len().saturating_sub(head.len());
        println!(
            "check-dequant: {} tensor(s) not verified (unsupported type): {}{}",
            c.unsupported.len(),
            head.join(", "),
            if more > 0 {
                format!(" and {more} more")
            } else {
                String::new()
            }
        );
    }
    if let Some(d) = &c.first_difference {
        println!(
            "check-dequant: first difference in '{}' element {}: ours {:#010x}, ggml {:#010x}",
            d.tensor, d.element, d.ours_bits, d.ggml_bits
        );
    }
}
