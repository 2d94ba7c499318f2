//! `quantgate bench …`: renders the figures of [`quantgate::benchmarks`], ours next to the
//! named peer's, with ratios.

use std::path::{Path, PathBuf};

use clap::Subcommand;
use quantgate::benchmarks::{self, convert::Peer, dequant, summarize};
use quantgate::stats::{median, min_median_max};

use super::{exit::usage, Status};
use quantgate::threads::Threads;

/// `bench` subcommands.
#[derive(Subcommand)]
pub enum BenchCommand {
    /// Conversion throughput (MB/s of source) of the repack path (MLX, GPTQ, AWQ or
    /// compressed-tensors) vs a plain copy conversion, alternated child processes, with the
    /// ratio (goal: within 2×).
    Repack {
        /// An already-quantized HF folder (MLX, GPTQ, AWQ or compressed-tensors).
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
    /// `convert` wall time and peak RSS next to the I/O floor (`cp` + `sync` of the source)
    /// and llama.cpp's convert_hf_to_gguf.py (when a Python with torch is present), arms
    /// alternated, each a child process of its own; then our tensors against the peer's.
    Convert {
        /// HF folder to convert.
        hf_dir: PathBuf,
        /// Output type.
        #[arg(long, default_value = "f16")]
        outtype: String,
        /// convert_hf_to_gguf.py to run (default: the llama-cpp-python 0.3.36 sdist's, cached).
        #[arg(long)]
        peer_script: Option<PathBuf>,
        /// Python for the peer (default: the cache's venv-torch, else python3).
        #[arg(long)]
        python: Option<PathBuf>,
        /// Repetitions per arm, alternated (median reported).
        #[arg(long, default_value_t = 3)]
        reps: usize,
    },
    /// `eval ppl` wall time, tokens/s, peak RSS and PPL against llama-perplexity built with
    /// llama.cpp's default CMake (built on first use, see `benchmarks::peer`), arms alternated
    /// in one run, each a child process of its own.
    Ppl {
        /// The GGUF model.
        model: PathBuf,
        /// Text file.
        #[arg(short = 'f', long)]
        file: PathBuf,
        /// A llama-perplexity binary to use instead of the default-CMake build.
        #[arg(long)]
        peer: Option<PathBuf>,
        /// Chunks.
        #[arg(long, default_value_t = 16)]
        chunks: usize,
        /// Threads.
        #[arg(short = 't', long, default_value_t = Threads::DEFAULT)]
        threads: Threads,
        /// Repetitions per arm.
        #[arg(long, default_value_t = 3)]
        reps: usize,
    },
    /// pp512/tg128 of `eval bench` against llama-bench built with llama.cpp's default CMake,
    /// rounds alternated in one run, each arm a child process of its own (peak RSS).
    Eval {
        /// The GGUF model.
        model: PathBuf,
        /// A llama-bench binary to use instead of the default-CMake build.
        #[arg(long)]
        peer: Option<PathBuf>,
        /// Prompt tokens (pp test).
        #[arg(short = 'p', long, default_value_t = 512)]
        n_prompt: usize,
        /// Generated tokens (tg test).
        #[arg(short = 'n', long, default_value_t = 128)]
        n_gen: usize,
        /// Repetitions per child (as llama-bench -r).
        #[arg(short = 'r', long, default_value_t = 5)]
        reps: usize,
        /// Alternated rounds (median reported).
        #[arg(long, default_value_t = 3)]
        rounds: usize,
        /// Threads.
        #[arg(short = 't', long, default_value_t = Threads::DEFAULT)]
        threads: Threads,
    },
    /// `verify` wall time and peak RSS per model (each run a child process of its own), with
    /// peak RSS against the file's size; alternated with another quantgate binary when given.
    Verify {
        /// HF folders, one per --gguf, in the same order.
        #[arg(long, required = true)]
        hf: Vec<PathBuf>,
        /// GGUF files.
        #[arg(long, required = true)]
        gguf: Vec<PathBuf>,
        /// Another quantgate binary (e.g. an earlier build) to run alternately.
        #[arg(long)]
        baseline_exe: Option<PathBuf>,
        /// Repetitions per arm.
        #[arg(long, default_value_t = 1)]
        reps: usize,
        /// Threads.
        #[arg(short = 't', long, default_value_t = Threads::DEFAULT)]
        threads: Threads,
    },
    /// The whole pipeline once on a big model (issue 30): convert F16 → quantize Q4_K_M →
    /// verify both → eval ppl (4 × 512) on both → eval kld, each step a child process; per
    /// step wall, peak RSS, peak RssAnon and disk, and the goals as measured ratios. The model:
    /// scripts/build-qwen2-7b-fixture.sh.
    Scale {
        /// The HF folder (e.g. the seeded Qwen2.5-7B-Instruct-shape fixture).
        hf_dir: PathBuf,
        /// Where the files go (needs about 2.3× the source's size free).
        #[arg(long)]
        work: PathBuf,
        /// Text for PPL and KLD (wikitext-2 test, as the protocol).
        #[arg(short = 'f', long)]
        file: PathBuf,
        /// Threads.
        #[arg(short = 't', long, default_value_t = Threads::DEFAULT)]
        threads: Threads,
    },
    /// KLD and PPL per quantization type against the F16 file, each type made without and
    /// with an importance matrix (issue 32; docs/imatrix.md), as llama-perplexity
    /// --kl-divergence measures them.
    Quant {
        /// The F16 GGUF every type is made from.
        f16: PathBuf,
        /// The importance matrix (from text disjoint from --file).
        #[arg(long)]
        imatrix: PathBuf,
        /// Evaluation text (wikitext-2 test).
        #[arg(short = 'f', long)]
        file: PathBuf,
        /// Types, comma-separated.
        #[arg(
            long,
            default_value = "Q4_K_M,IQ4_XS,Q3_K_M,IQ3_M",
            value_delimiter = ','
        )]
        types: Vec<String>,
        /// 512-token chunks scored.
        #[arg(long)]
        chunks: Option<usize>,
        /// Where the files go.
        #[arg(long, default_value = "out/bench-quant")]
        work: PathBuf,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
        /// Threads.
        #[arg(short = 't', long, default_value_t = Threads::DEFAULT)]
        threads: Threads,
    },
    /// Each GGUF of a release folder: our `llama-gguf-hash` manifest against the peer's
    /// `llama-gguf-hash --sha256` output (byte-identical?), the peer's `--check` on the
    /// folder's manifest, and both wall times.
    GgufHash {
        /// A release folder (or any folder of `*.gguf` files).
        dir: PathBuf,
        /// A llama-gguf-hash binary to use instead of the default-CMake build.
        #[arg(long)]
        peer: Option<PathBuf>,
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
            python,
            reps,
        } => convert(&hf_dir, &outtype, (python, peer_script), reps),
        BenchCommand::Ppl {
            model,
            file,
            peer,
            chunks,
            threads,
            reps,
        } => ppl(&model, &file, peer, (chunks, threads), reps),
        BenchCommand::Eval {
            model,
            peer,
            n_prompt,
            n_gen,
            reps,
            rounds,
            threads,
        } => speed(&model, peer, (n_prompt, n_gen), (reps, rounds, threads)),
        BenchCommand::Inspect { files, reps } => inspect(&files, reps),
        BenchCommand::GgufHash { dir, peer } => gguf_hash(&dir, peer),
        BenchCommand::Quant {
            f16,
            imatrix,
            file,
            types,
            chunks,
            work,
            json,
            threads,
        } => {
            let b = benchmarks::quant::QuantBench {
                f16: &f16,
                imatrix: &imatrix,
                types: &types,
                text: &file,
                chunks,
                threads,
                work: &work,
            };
            let t = benchmarks::quant::run(&b, &mut |m| eprintln!("bench quant: {m}"))?;
            if json {
                println!("{}", serde_json::to_string_pretty(&t)?);
            } else {
                print!("{}", benchmarks::quant::markdown(&t));
                println!("runtime: {}", t.runtime);
            }
            Ok(Status::Success)
        }
        BenchCommand::Scale {
            hf_dir,
            work,
            file,
            threads,
        } => super::bench_scale::run(&hf_dir, &work, &file, threads),
        BenchCommand::Verify {
            hf,
            gguf,
            baseline_exe,
            reps,
            threads,
        } => verify(&hf, &gguf, baseline_exe.as_deref(), reps, threads),
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

fn convert(
    hf: &Path,
    outtype: &str,
    (python, script): (Option<PathBuf>, Option<PathBuf>),
    reps: usize,
) -> anyhow::Result<Status> {
    at_least_one_rep(reps)?;
    let cache = benchmarks::peer::cache_dir()?;
    let script = match script {
        Some(s) => s,
        None => benchmarks::peer::convert_script(&cache, &mut |m| eprintln!("{m}"))?,
    };
    let python = python.unwrap_or_else(|| benchmarks::peer::python(&cache));
    let exe = std::env::current_exe()?;
    let b = benchmarks::convert::run(&exe, hf, outtype, (&python, &script), reps)?;
    let mib = |kib: f64| kib / 1024.0;
    println!(
        "bench convert: {} → --outtype {outtype} · source {:.1} MB · {reps} alternated runs per arm (medians) · {} threads",
        hf.display(),
        b.source_bytes as f64 / 1e6,
        rayon::current_num_threads()
    );
    println!("| arm | wall s | MB/s of source | peak RSS MiB | wall / floor |\n|---|---:|---:|---:|---:|");
    let (fw, _) = summarize(&b.floor);
    let row = |name: &str, runs: &[quantgate::child::Measured]| -> (f64, f64) {
        let (w, rss) = summarize(runs);
        println!(
            "| {name} | {w:.3} | {:.1} | {:.1} | {:.2} |",
            b.source_bytes as f64 / 1e6 / w,
            mib(rss),
            w / fw
        );
        (w, rss)
    };
    row("floor: cp + sync of the source", &b.floor);
    let (ow, orss) = row("ours: quantgate convert", &b.ours);
    let limit = b.largest_tensor as f64 / 1048576.0 + 64.0;
    println!(
        "ours: {:.2}× the floor (goal <= 1.3: {}); peak RSS {:.1} MiB vs largest tensor + 64 MiB = {limit:.1} MiB ({})",
        ow / fw,
        met(ow / fw <= 1.3),
        mib(orss),
        met(mib(orss) <= limit)
    );
    match &b.peer {
        Peer::NoTorch(py) => println!(
            "peer: {} has no torch; convert_hf_to_gguf.py not run",
            py.display()
        ),
        Peer::Ran(py) => {
            let (pw, prss) = row(
                &format!("peer: convert_hf_to_gguf.py ({})", script.display()),
                &b.peer_runs,
            );
            println!(
                "peer: run by {}; ours is {:.2}× faster with {:.2} of its peak RSS",
                py.display(),
                pw / ow,
                orss / prss
            );
        }
    }
    if let Some(t) = &b.tensors {
        println!(
            "tensors vs the peer's: {} byte-identical, {} differing {:?}",
            t.identical,
            t.differing.len(),
            t.differing.iter().take(5).collect::<Vec<_>>()
        );
    }
    Ok(Status::Success)
}

/// The peer binary `pick`ed from the default-CMake build (built on first use), or `given`;
/// with the line naming it.
fn peer_tool(
    given: Option<PathBuf>,
    pick: fn(&benchmarks::peer::PeerBuild) -> PathBuf,
) -> anyhow::Result<(PathBuf, String)> {
    if let Some(p) = given {
        let d = format!("{} (given with --peer; build flags unknown)", p.display());
        return Ok((p, d));
    }
    let cache = benchmarks::peer::cache_dir()?;
    let b = benchmarks::peer::ensure(&cache, &mut |m| eprintln!("{m}"))?;
    let d = format!("{} (built in {:.0} s)", b.description, b.build_s);
    Ok((pick(&b), d))
}

fn gguf_hash(dir: &Path, peer: Option<PathBuf>) -> anyhow::Result<Status> {
    let (peer, built) = peer_tool(peer, |b| b.gguf_hash.clone())?;
    let rows = benchmarks::gguf_hash::run(dir, &peer)?;
    println!("bench gguf-hash: {}", dir.display());
    println!("peer: llama-gguf-hash · {built}");
    println!("| file | tensors | identical to the peer's --sha256 | peer --check exit | ours s | peer s | ours/peer |\n|---|---:|---|---:|---:|---:|---:|");
    for r in &rows {
        let check = r
            .peer_check_exit
            .map_or("no manifest".into(), |c| c.to_string());
        println!(
            "| {} | {} | {} | {check} | {:.3} | {:.3} | {:.2} |",
            r.name,
            r.tensors,
            if r.identical { "yes" } else { "no" },
            r.ours_s,
            r.peer_s,
            r.ours_s / r.peer_s.max(1e-9)
        );
    }
    Ok(Status::Success)
}

fn ppl(
    model: &Path,
    file: &Path,
    peer: Option<PathBuf>,
    (chunks, threads): (usize, Threads),
    reps: usize,
) -> anyhow::Result<Status> {
    at_least_one_rep(reps)?;
    let (peer, built) = peer_tool(peer, |b| b.perplexity.clone())?;
    let exe = std::env::current_exe()?;
    let b = benchmarks::ppl::run(&exe, Some(&peer), model, file, (chunks, threads), reps)?;
    println!("bench ppl: {} · {chunks} chunks × 512 · {threads} threads · {reps} alternated runs per arm", model.display());
    println!("ours: quantgate eval ppl · {}", b.ours[0].kernels);
    println!(
        "peer: llama-perplexity · {built}\n      {}",
        b.peer[0].kernels
    );
    println!("| arm | median wall s | tokens/s (incl. load) | peak RSS MiB | Final estimate PPL |\n|---|---:|---:|---:|---|");
    let row = |name: &str, v: &[benchmarks::ppl::PplRun]| -> (f64, f64) {
        let med = median(&v.iter().map(|r| r.measured.wall_s).collect::<Vec<_>>());
        let rss = v.iter().map(|r| r.measured.max_rss_kib).max().unwrap_or(0) as f64 / 1024.0;
        println!(
            "| {name} | {med:.2} | {:.1} | {rss:.1} | {} |",
            b.tokens as f64 / med,
            v[0].estimate
        );
        (med, rss)
    };
    let (ow, orss) = row("ours", &b.ours);
    let (tw, trss) = row("peer", &b.peer);
    let same = b
        .ours
        .iter()
        .chain(&b.peer)
        .all(|r| r.estimate == b.ours[0].estimate);
    println!(
        "ratio ours/peer: tokens/s {:.3} (goal >= 1.0: {}); peak RSS {:.3} (goal < 1: {}); PPL {}",
        tw / ow,
        met(tw / ow >= 1.0),
        orss / trss,
        met(orss < trss),
        if same {
            "identical in every run"
        } else {
            "differs (the kernels differ; see the two lines above)"
        }
    );
    Ok(Status::Success)
}

fn met(ok: bool) -> &'static str {
    if ok {
        "met"
    } else {
        "NOT met"
    }
}

fn speed(
    model: &Path,
    peer: Option<PathBuf>,
    (n_prompt, n_gen): (usize, usize),
    (reps, rounds, threads): (usize, usize, Threads),
) -> anyhow::Result<Status> {
    at_least_one_rep(reps.min(rounds))?;
    if n_prompt == 0 || n_gen == 0 {
        return Err(usage("-p and -n must be at least 1"));
    }
    let (peer, built) = peer_tool(peer, |b| b.bench.clone())?;
    let exe = std::env::current_exe()?;
    let b = benchmarks::speed::run(
        &exe,
        &peer,
        model,
        (n_prompt, n_gen),
        (reps, rounds, threads),
    )?;
    println!("bench eval: {} · {threads} threads · -r {reps} per child · {rounds} alternated rounds (medians)", model.display());
    println!(
        "ours: quantgate eval bench · {}",
        llama_runtime::build_info()
    );
    println!("peer: llama-bench · {built}");
    let med = |v: &[benchmarks::speed::SpeedRun], f: fn(&benchmarks::speed::SpeedRun) -> f64| {
        median(&v.iter().map(f).collect::<Vec<_>>())
    };
    println!("| test | ours t/s | peer t/s | ratio | goal |\n|---|---:|---:|---:|---|");
    for (test, f, goal) in [
        (
            format!("pp{n_prompt}"),
            (|r: &benchmarks::speed::SpeedRun| r.pp_ts) as fn(&_) -> f64,
            1.0,
        ),
        (
            format!("tg{n_gen}"),
            |r: &benchmarks::speed::SpeedRun| r.tg_ts,
            0.95,
        ),
    ] {
        let (o, t) = (med(&b.ours, f), med(&b.peer, f));
        println!(
            "| {test} | {o:.2} | {t:.2} | {:.3} | >= {goal}: {} |",
            o / t,
            met(o / t >= goal)
        );
    }
    let rss = |v: &[benchmarks::speed::SpeedRun]| {
        v.iter().map(|r| r.measured.max_rss_kib).max().unwrap_or(0) as f64 / 1024.0
    };
    let (o, t) = (rss(&b.ours), rss(&b.peer));
    println!(
        "peak RSS: ours {o:.1} MiB, peer {t:.1} MiB, ratio {:.3} (goal < 1: {})",
        o / t,
        met(o < t)
    );
    Ok(Status::Success)
}

fn verify(
    hf: &[PathBuf],
    gguf: &[PathBuf],
    baseline: Option<&Path>,
    reps: usize,
    threads: Threads,
) -> anyhow::Result<Status> {
    at_least_one_rep(reps)?;
    if hf.len() != gguf.len() {
        return Err(usage("give one --hf per --gguf, in the same order"));
    }
    let pairs: Vec<(PathBuf, PathBuf)> = hf.iter().cloned().zip(gguf.iter().cloned()).collect();
    let exe = std::env::current_exe()?;
    let rows = benchmarks::verify::run(&exe, baseline, &pairs, reps, threads)?;
    println!(
        "bench verify: {threads} threads · {reps} run(s) per arm · runtime {}",
        llama_runtime::build_info()
    );
    if let Some(b) = baseline {
        println!("baseline: {}", b.display());
    }
    println!("| model | GGUF MiB | F16 MiB | verdict | wall s | peak RSS MiB | RSS / F16 | RSS − F16 MiB (goal ≤ 1024) | baseline wall s | baseline RSS MiB | wall / baseline (goal ≤ 1) |\n|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|");
    for r in &rows {
        let (w, rss) = summarize(&r.ours);
        let (mib, f16) = (
            r.file_bytes as f64 / 1048576.0,
            r.f16_bytes as f64 / 1048576.0,
        );
        let rss = rss / 1024.0;
        let (bw, brss, ratio) = if r.baseline.is_empty() {
            ("-".to_string(), "-".to_string(), "-".to_string())
        } else {
            let (bw, brss) = summarize(&r.baseline);
            let ratio = w / bw;
            (
                format!("{bw:.1}"),
                format!("{:.0}", brss / 1024.0),
                format!("{ratio:.2} ({})", met(ratio <= 1.0)),
            )
        };
        println!(
            "| {} | {mib:.0} | {f16:.0} | {} | {w:.1} | {rss:.0} | {:.2} | {:.0} ({}) | {bw} | {brss} | {ratio} |",
            r.gguf.display(),
            if r.exit_code == Some(0) {
                "GO"
            } else {
                "NO-GO"
            },
            rss / f16,
            rss - f16,
            met(rss - f16 <= 1024.0)
        );
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

/// The already-quantized format of a folder's config.json (`None`: a plain folder).
fn quantized_format(dir: &Path) -> anyhow::Result<Option<String>> {
    let cfg = quantgate::source::hf::read_json(&dir.join("config.json"))?;
    if reference::mlx::is_mlx_quantized(&cfg) {
        return Ok(Some("MLX affine".into()));
    }
    Ok(
        quantgate::convert::packed::Scheme::from_config(&cfg)?.map(|s| {
            format!(
                "{:?} {}-bit {}",
                s.family,
                s.bits,
                if s.sym { "sym" } else { "asym" }
            )
        }),
    )
}

fn repack(mlx_dir: &Path, plain_dir: &Path, reps: usize) -> anyhow::Result<Status> {
    at_least_one_rep(reps)?;
    let format = quantized_format(mlx_dir)?.ok_or_else(|| {
        usage(format!(
            "{}: not an MLX, GPTQ, AWQ or compressed-tensors folder",
            mlx_dir.display()
        ))
    })?;
    if let Some(f) = quantized_format(plain_dir)? {
        return Err(usage(format!(
            "{}: {f} (--plain must be an unquantized folder)",
            plain_dir.display()
        )));
    }
    let exe = std::env::current_exe()?;
    let b = benchmarks::repack::run(&exe, mlx_dir, plain_dir, reps)?;
    println!("runtime: {}", llama_runtime::build_info());
    println!("| conversion | source MB | output MB | median wall s | median MB/s (source) | peak RSS MiB |\n|---|---:|---:|---:|---:|---:|");
    for (name, dir, arm) in [
        (format!("repack ({format})"), mlx_dir, &b.repack),
        (
            "plain copy (--outtype auto)".to_string(),
            plain_dir,
            &b.plain,
        ),
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
