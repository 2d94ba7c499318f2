//! `quantgate bench …`: renders the figures of [`quantgate::benchmarks`], ours next to the
//! named peer's, with ratios.

use std::path::{Path, PathBuf};

use clap::Subcommand;
use quantgate::benchmarks::{self, convert::Peer, dequant, summarize};
use quantgate::stats::{median, min_median_max};

use super::{exit::usage, Status};

/// `bench` subcommands.
#[derive(Subcommand)]
pub enum BenchCommand {
    /// Conversion throughput (MB/s of source) of the MLX repack path vs a plain copy conversion,
    /// alternated child processes, with the ratio (goal: within 2×).
    Repack {
        /// An MLX-quantized HF folder.
        mlx_dir: PathBuf,
        /// An unquantized HF folder (F16/BF16) converted with --outtype auto (a copy).
        #[arg(long)]
        plain: PathBuf,
        /// Repetitions per arm.
        #[arg(long, default_value_t = 5)]
        reps: usize,
    },
    /// Dequantization throughput per type (GB/s of f32 output), ours vs ggml's to_float, single thread.
    Dequant {
        /// Elements per repetition (rounded up to a multiple of 256).
        #[arg(long, default_value_t = 1 << 22)]
        elements: usize,
        /// Repetitions per arm (median reported).
        #[arg(long, default_value_t = 7)]
        reps: usize,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
        /// Only these types (comma-separated ggml names, e.g. Q4_K,Q8_0).
        #[arg(long, value_delimiter = ',')]
        types: Vec<String>,
    },
    /// `convert` wall time and peak RSS (each run a child process of its own), ours vs llama.cpp's
    /// convert_hf_to_gguf.py when Python with torch and the script are available.
    Convert {
        /// HF folder to convert.
        hf_dir: PathBuf,
        /// Output type.
        #[arg(long, default_value = "f16")]
        outtype: String,
        /// Path of llama.cpp's convert_hf_to_gguf.py (with its gguf-py and conversion packages).
        #[arg(long)]
        peer_script: Option<PathBuf>,
        /// Repetitions per arm, alternated (median reported).
        #[arg(long, default_value_t = 3)]
        reps: usize,
    },
    /// `eval ppl` wall time, tokens/s and peak RSS against llama-perplexity on the same file and
    /// settings, arms alternated in one run, each a child process of its own.
    Ppl {
        /// The GGUF model.
        model: PathBuf,
        /// Text file.
        #[arg(short = 'f', long)]
        file: PathBuf,
        /// Path of a llama-perplexity binary (not part of this project).
        #[arg(long)]
        peer: Option<PathBuf>,
        /// Chunks.
        #[arg(long, default_value_t = 16)]
        chunks: usize,
        /// Threads.
        #[arg(short = 't', long, default_value_t = 2)]
        threads: i32,
        /// Repetitions per arm.
        #[arg(long, default_value_t = 2)]
        reps: usize,
    },
    /// Wall time of `inspect` (open, validate, sha256, report) without --check-dequant.
    Inspect {
        /// GGUF files.
        files: Vec<PathBuf>,
        /// Repetitions (median reported).
        #[arg(long, default_value_t = 5)]
        reps: usize,
    },
}

/// Runs one benchmark and prints its table.
pub fn run(cmd: BenchCommand) -> anyhow::Result<Status> {
    match cmd {
        BenchCommand::Repack {
            mlx_dir,
            plain,
            reps,
        } => repack(&mlx_dir, &plain, reps),
        BenchCommand::Dequant {
            elements,
            reps,
            json,
            types,
        } => dequant(elements, reps, json, &types),
        BenchCommand::Convert {
            hf_dir,
            outtype,
            peer_script,
            reps,
        } => convert(&hf_dir, &outtype, peer_script.as_deref(), reps),
        BenchCommand::Ppl {
            model,
            file,
            peer,
            chunks,
            threads,
            reps,
        } => ppl(&model, &file, peer.as_deref(), chunks, threads, reps),
        BenchCommand::Inspect { files, reps } => inspect(&files, reps),
    }
}

fn at_least_one_rep(reps: usize) -> anyhow::Result<()> {
    if reps == 0 {
        return Err(usage("--reps must be at least 1"));
    }
    Ok(())
}

fn dequant(elements: usize, reps: usize, json: bool, types: &[String]) -> anyhow::Result<Status> {
    if elements == 0 || reps == 0 {
        return Err(usage("--elements and --reps must be at least 1"));
    }
    let mut only = Vec::new();
    for t in types {
        let ty = gguf::GgmlType::from_name(t)
            .ok_or_else(|| usage(format!("unknown ggml type {t:?}")))?;
        if !dequant::benched().contains(&ty) {
            return Err(usage(format!(
                "{ty} cannot be benchmarked (ours vs ggml to_float covers: {})",
                dequant::benched()
                    .iter()
                    .map(|t| t.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
        only.push(ty);
    }
    let build = llama_runtime::build_info();
    if !json {
        println!("dequantization throughput, single thread, {elements} elements, median of {reps}");
        println!("peer: ggml to_float from {build}");
        println!(
            "{:<6} {:>12} {:>12} {:>8}  bit-identical",
            "type", "ours GB/s", "ggml GB/s", "ratio"
        );
    }
    let rows = dequant::bench_dequant(elements, reps, &only, |r| {
        if !json {
            println!(
                "{:<6} {:>12.3} {:>12.3} {:>7.2}x  {}",
                r.ggml_type, r.ours_gbps, r.ggml_gbps, r.ratio, r.bit_identical
            );
        }
    });
    if json {
        let v = serde_json::json!({"llama_cpp": build.to_string(), "rows": rows});
        println!("{}", serde_json::to_string_pretty(&v)?);
    }
    Ok(Status::Success)
}

fn convert(hf: &Path, outtype: &str, peer: Option<&Path>, reps: usize) -> anyhow::Result<Status> {
    at_least_one_rep(reps)?;
    let exe = std::env::current_exe()?;
    let b = benchmarks::convert::run(&exe, hf, outtype, peer, reps)?;
    match &b.peer {
        Peer::NotFound(p) => println!("peer: {} not found", p.display()),
        Peer::NoTorch => println!("peer: Python with torch and numpy is not available; convert_hf_to_gguf.py cannot run here"),
        Peer::NotGiven => println!(
            "peer: no --peer-script given (llama.cpp's convert_hf_to_gguf.py; needs torch)"
        ),
        Peer::Ran(_) => {}
    }
    let (ow, orss) = summarize(&b.ours);
    println!("ours:  convert {} --outtype {outtype}: median wall {ow:.3} s, peak RSS {:.1} MiB ({reps} runs)", hf.display(), orss / 1024.0);
    if !b.peer_runs.is_empty() {
        let (tw, trss) = summarize(&b.peer_runs);
        println!(
            "peer:  convert_hf_to_gguf.py: median wall {tw:.3} s, peak RSS {:.1} MiB",
            trss / 1024.0
        );
        println!(
            "ratio: {:.1}x faster (goal >= 10x), peak RSS {:.2} of the peer's (goal <= 0.33)",
            tw / ow,
            orss / trss
        );
    }
    Ok(Status::Success)
}

fn ppl(
    model: &Path,
    file: &Path,
    peer: Option<&Path>,
    chunks: usize,
    threads: i32,
    reps: usize,
) -> anyhow::Result<Status> {
    at_least_one_rep(reps)?;
    let exe = std::env::current_exe()?;
    let b = benchmarks::ppl::run(&exe, peer, model, file, chunks, threads, reps)?;
    let show = |name: &str, v: &[quantgate::child::Measured]| -> (f64, f64) {
        let med = median(&v.iter().map(|m| m.wall_s).collect::<Vec<_>>());
        let rss = v.iter().map(|m| m.max_rss_kib).max().unwrap_or(0) as f64 / 1024.0;
        println!(
            "{name}: median wall {med:.2} s ({:.1} tokens/s incl. load), peak RSS {rss:.1} MiB",
            b.tokens as f64 / med
        );
        (med, rss)
    };
    println!("bench ppl: {chunks} chunks × 512, {threads} threads, {reps} alternated runs per arm");
    let (ow, orss) = show("ours (quantgate eval ppl)", &b.ours);
    if !b.peer.is_empty() {
        let (tw, trss) = show("peer (llama-perplexity)", &b.peer);
        println!("ratio: tokens/s {:.3} of the peer's (goal >= 0.95); peak RSS {:.3} of the peer's (goal within 10%)", tw / ow, orss / trss);
    } else {
        println!("peer: no --peer llama-perplexity given");
    }
    Ok(Status::Success)
}

fn inspect(files: &[PathBuf], reps: usize) -> anyhow::Result<Status> {
    if files.is_empty() || reps == 0 {
        return Err(usage(
            "bench inspect needs at least one file and --reps of at least 1",
        ));
    }
    for f in files {
        let t = benchmarks::inspect::run(f, reps)?;
        let (min, med, max) = min_median_max(&t.times_s);
        println!(
            "inspect {}: {} bytes, median {med:.3} s (min {min:.3}, max {max:.3}) over {} runs; target < 1 s",
            f.display(),
            t.bytes,
            t.times_s.len()
        );
    }
    Ok(Status::Success)
}

fn repack(mlx_dir: &Path, plain_dir: &Path, reps: usize) -> anyhow::Result<Status> {
    at_least_one_rep(reps)?;
    for (dir, want) in [(mlx_dir, true), (plain_dir, false)] {
        let cfg = quantgate::convert::hf::read_json(&dir.join("config.json"))?;
        if reference::mlx::is_mlx_quantized(&cfg) != want {
            return Err(usage(format!(
                "{}: {} (the first folder must be MLX-quantized, --plain must not be)",
                dir.display(),
                if want {
                    "not MLX-quantized"
                } else {
                    "MLX-quantized"
                }
            )));
        }
    }
    let exe = std::env::current_exe()?;
    let b = benchmarks::repack::run(&exe, mlx_dir, plain_dir, reps)?;
    println!("runtime: {}", llama_runtime::build_info());
    println!("| conversion | source MB | output MB | median wall s | median MB/s (source) | peak RSS MiB |\n|---|---:|---:|---:|---:|---:|");
    for (name, dir, arm) in [
        ("repack (MLX affine → Q4_1 …)", mlx_dir, &b.repack),
        ("plain copy (--outtype auto)", plain_dir, &b.plain),
    ] {
        let col = |f: &dyn Fn(&(f64, quantgate::child::Measured)) -> f64| {
            median(&arm.runs.iter().map(f).collect::<Vec<_>>())
        };
        println!(
            "| {name}: {} | {:.1} | {:.1} | {:.3} | {:.1} | {:.1} |",
            dir.display(),
            arm.source_bytes as f64 / 1e6,
            arm.output_bytes as f64 / 1e6,
            col(&|x| x.1.wall_s),
            col(&|x| x.0),
            col(&|x| x.1.max_rss_kib as f64) / 1024.0
        );
    }
    let r = median(&b.ratios);
    println!(
        "ratio repack/plain MB/s: median {r:.3} (per replicate {:?}); goal ≥ 0.5 (within 2×): {}",
        b.ratios
            .iter()
            .map(|x| (x * 1000.0).round() / 1000.0)
            .collect::<Vec<_>>(),
        if r >= 0.5 { "met" } else { "NOT met" }
    );
    Ok(Status::Success)
}
