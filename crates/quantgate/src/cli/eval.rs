//! `quantgate eval …`: argument parsing and rendering of the measurements. Each one prints
//! llama.cpp's own result lines on stdout, a progress bar with ETA on stderr, and with `--json`
//! writes an [`EvalRecord`] (result, settings, load time, wall time, peak RSS) atomically.
//! SIGINT/SIGTERM stop between chunks/tasks/repetitions: exit 130, no output file left behind.

use std::path::{Path, PathBuf};
use std::time::Instant;

use clap::Subcommand;
use quantgate::eval::record::{self, EvalKind, EvalRecord, RunSettings};

use super::progress;
use super::{exit::usage, Status};
use quantgate::eval::{hellaswag, kld, llama_bench, ppl};
use quantgate::threads::Threads;

#[derive(Subcommand)]
pub enum EvalCommand {
    /// pp/tg throughput like llama-bench, arms alternated in one window (e.g. F16 then Q4_K_M),
    /// with the per-replicate ratio of each arm to the first.
    Bench {
        /// Models (arms), the first is the baseline.
        #[arg(required = true)]
        models: Vec<PathBuf>,
        /// Prompt tokens (pp test).
        #[arg(short = 'p', long, default_value_t = 512)]
        n_prompt: usize,
        /// Generated tokens (tg test).
        #[arg(short = 'n', long, default_value_t = 128)]
        n_gen: usize,
        /// Repetitions per arm.
        #[arg(short = 'r', long, default_value_t = 5)]
        reps: usize,
        /// Threads.
        #[arg(short = 't', long, default_value_t = Threads::DEFAULT)]
        threads: Threads,
        /// Also write the JSON record here.
        #[arg(long)]
        json: Option<PathBuf>,
    },
    /// HellaSwag acc_norm as llama-perplexity --hellaswag computes it (same task order).
    Hellaswag {
        /// The GGUF model.
        model: PathBuf,
        /// 6-lines-per-task file (hellaswag_val_full.txt).
        #[arg(short = 'f', long)]
        file: PathBuf,
        /// Tasks to evaluate.
        #[arg(long, default_value_t = 400)]
        tasks: usize,
        /// Context length.
        #[arg(short = 'c', long, default_value_t = 1024)]
        ctx: u32,
        /// Threads.
        #[arg(short = 't', long, default_value_t = Threads::DEFAULT)]
        threads: Threads,
        /// Also write the JSON record here.
        #[arg(long)]
        json: Option<PathBuf>,
    },
    /// Base run of the KL divergence: writes llama-perplexity's `_logits_` file.
    KldBase {
        /// The base (e.g. F16) model.
        model: PathBuf,
        /// Text file.
        #[arg(short = 'f', long)]
        file: PathBuf,
        /// Output logits file.
        #[arg(long)]
        out: PathBuf,
        /// Tokens per chunk.
        #[arg(short = 'c', long, default_value_t = 512)]
        ctx: usize,
        /// Chunks (default: all).
        #[arg(long)]
        chunks: Option<usize>,
        /// Threads.
        #[arg(short = 't', long, default_value_t = Threads::DEFAULT)]
        threads: Threads,
        /// Also write the JSON record here.
        #[arg(long)]
        json: Option<PathBuf>,
    },
    /// Compare run: mean KLD(base‖model), same top p, Δp RMS against a `_logits_` file.
    Kld {
        /// The model to compare.
        model: PathBuf,
        /// The base logits file (from `eval kld-base` or llama-perplexity --kl-divergence-base).
        #[arg(long)]
        base: PathBuf,
        /// Threads.
        #[arg(short = 't', long, default_value_t = Threads::DEFAULT)]
        threads: Threads,
        /// Also write the JSON record here.
        #[arg(long)]
        json: Option<PathBuf>,
    },
    /// Perplexity as llama-perplexity computes it; prints its per-chunk and `Final estimate` lines.
    Ppl {
        /// The GGUF model.
        model: PathBuf,
        /// Text file (one trailing newline is stripped, as `-f` does).
        #[arg(short = 'f', long)]
        file: PathBuf,
        /// Tokens per chunk.
        #[arg(short = 'c', long, default_value_t = 512)]
        ctx: u32,
        /// Chunks to score (default: all).
        #[arg(long)]
        chunks: Option<usize>,
        /// Threads.
        #[arg(short = 't', long, default_value_t = Threads::DEFAULT)]
        threads: Threads,
        /// Physical batch size.
        #[arg(long, default_value_t = 512)]
        ubatch: u32,
        /// Also write the JSON record here.
        #[arg(long)]
        json: Option<PathBuf>,
        /// Also compute the PPL of this HF folder with the reference (candle f32; MLX, GPTQ,
        /// AWQ and compressed-tensors folders dequantized by their named formula) on the same
        /// tokens and chunks, printed
        /// side by side.
        #[arg(long)]
        reference: Option<PathBuf>,
    },
}

/// Settings of a logits context as `ContextParams::logits` builds it (KV F16).
fn logits_settings(threads: Threads, n_ctx: u32, n_ubatch: u32, seed: Option<u64>) -> RunSettings {
    RunSettings {
        threads,
        n_ctx,
        n_batch: n_ctx,
        n_ubatch: n_ubatch.min(n_ctx),
        type_kv: "F16".into(),
        seed,
    }
}

/// Writes the record if `--json` was given.
#[allow(clippy::too_many_arguments)]
fn emit<T: serde::Serialize>(
    json: Option<&Path>,
    kind: EvalKind,
    models: &[&Path],
    settings: RunSettings,
    load_ms: Vec<f64>,
    t0: Instant,
    result: T,
) -> anyhow::Result<()> {
    let Some(path) = json else { return Ok(()) };
    let rec = EvalRecord {
        kind,
        models: models.iter().map(|p| p.display().to_string()).collect(),
        file_bytes: record::file_sizes(models),
        runtime: llama_runtime::build_info().to_string(),
        settings,
        load_ms,
        wall_s: t0.elapsed().as_secs_f64(),
        peak_rss_kib: record::peak_rss_self_kib(),
        result,
    };
    record::write(path, &rec)
}

/// Checks, before anything is measured: every output (`--json`, its `.md` twin, `--out`)
/// distinct from the inputs and from each other (the thread count was checked by its type).
fn check_args(outputs: &[&Path], inputs: &[&Path]) -> anyhow::Result<()> {
    for o in outputs {
        quantgate::paths::ensure_output_distinct(o, inputs)?;
    }
    for (i, a) in outputs.iter().enumerate() {
        for b in &outputs[i + 1..] {
            if a == b {
                return Err(usage(format!("{}: two outputs at one path", a.display())));
            }
        }
    }
    Ok(())
}

/// `--json` and its Markdown twin.
fn json_outputs(json: &Option<PathBuf>) -> anyhow::Result<Vec<PathBuf>> {
    match json {
        None => Ok(Vec::new()),
        Some(j) if j.extension().is_some_and(|e| e == "md") => Err(usage(format!(
            "--json {}: the Markdown record is written next to it as .md; use a .json name",
            j.display()
        ))),
        Some(j) => Ok(vec![j.clone(), j.with_extension("md")]),
    }
}

fn refs(v: &[PathBuf]) -> Vec<&Path> {
    v.iter().map(PathBuf::as_path).collect()
}

/// Runs one `eval` subcommand.
pub fn run(cmd: EvalCommand) -> anyhow::Result<Status> {
    quantgate::interrupt::install();
    let t0 = Instant::now();
    match cmd {
        EvalCommand::KldBase {
            model,
            file,
            out,
            ctx,
            chunks,
            threads,
            json,
        } => kld_base(&model, &file, &out, ctx, chunks, threads, json, t0),
        EvalCommand::Kld {
            model,
            base,
            threads,
            json,
        } => kld(&model, &base, threads, json, t0),
        EvalCommand::Hellaswag {
            model,
            file,
            tasks,
            ctx,
            threads,
            json,
        } => hellaswag(&model, &file, tasks, ctx, threads, json, t0),
        EvalCommand::Bench {
            models,
            n_prompt,
            n_gen,
            reps,
            threads,
            json,
        } => bench(&models, n_prompt, n_gen, reps, threads, json, t0),
        EvalCommand::Ppl {
            model,
            file,
            ctx,
            chunks,
            threads,
            ubatch,
            json,
            reference,
        } => {
            if chunks == Some(0) || ubatch == 0 {
                return Err(usage("--chunks and --ubatch must be at least 1"));
            }
            let p = ppl::PplParams {
                n_ctx: ctx,
                chunks,
                threads,
                n_ubatch: ubatch,
            };
            perplexity(&model, &file, &p, json, reference.as_deref(), t0)
        }
    }?;
    Ok(Status::Success)
}

#[allow(clippy::too_many_arguments)]
fn kld_base(
    model: &Path,
    file: &Path,
    out: &Path,
    ctx: usize,
    chunks: Option<usize>,
    threads: Threads,
    json: Option<PathBuf>,
    t0: Instant,
) -> anyhow::Result<()> {
    if chunks == Some(0) {
        return Err(usage("--chunks 0: at least one chunk"));
    }
    let mut outs = json_outputs(&json)?;
    outs.push(out.to_path_buf());
    check_args(&refs(&outs), &[model, file])?;
    let text = ppl::read_text(file)?;
    println!("runtime: {}", llama_runtime::build_info());
    let pb = progress::bar(0, "chunks");
    let r = kld::write_base(model, &text, ctx, chunks, threads, out, |i, n| {
        pb.set_length(n as u64);
        pb.set_position(i as u64)
    });
    pb.finish_and_clear();
    let r = r?;
    println!(
        "kld base: {} chunks × {ctx} tokens, n_vocab {} → {}",
        r.chunks,
        r.n_vocab,
        out.display()
    );
    let s = logits_settings(threads, ctx as u32, 512, None);
    emit(
        json.as_deref(),
        EvalKind::KldBase,
        &[model],
        s,
        vec![r.load_ms],
        t0,
        r,
    )
}

fn kld(
    model: &Path,
    base: &Path,
    threads: Threads,
    json: Option<PathBuf>,
    t0: Instant,
) -> anyhow::Result<()> {
    check_args(&refs(&json_outputs(&json)?), &[model, base])?;
    println!("runtime: {}", llama_runtime::build_info());
    let pb = progress::bar(0, "chunks");
    let r = kld::compare(model, base, threads, |i, n| {
        pb.set_length(n as u64);
        pb.set_position(i as u64)
    });
    pb.finish_and_clear();
    let r = r?;
    println!("====== Perplexity statistics ======");
    println!("Mean PPL(Q)                   : {:10.6}", r.ppl_q);
    println!("Mean PPL(base)                : {:10.6}", r.ppl_base);
    println!("====== KL divergence statistics ======");
    println!("Mean    KLD: {:10.6} ± {:10.6}", r.mean_kld, r.mean_kld_unc);
    println!("Maximum KLD: {:10.6}", r.max_kld);
    println!("99.0%   KLD: {:10.6}", r.kld_99);
    println!("Median  KLD: {:10.6}", r.median_kld);
    println!("====== Token probability statistics ======");
    println!("RMS Δp    : {:6.3} %", 100.0 * r.rms_dp);
    println!(
        "Same top p: {:6.3} ± {:5.3} %",
        100.0 * r.same_top_p,
        100.0 * r.same_top_p_unc
    );
    let s = logits_settings(threads, r.n_ctx as u32, 512, None);
    emit(
        json.as_deref(),
        EvalKind::Kld,
        &[model, base],
        s,
        vec![r.load_ms],
        t0,
        r,
    )
}

fn hellaswag(
    model: &Path,
    file: &Path,
    tasks: usize,
    ctx: u32,
    threads: Threads,
    json: Option<PathBuf>,
    t0: Instant,
) -> anyhow::Result<()> {
    if tasks == 0 {
        return Err(usage("--tasks 0: at least one task"));
    }
    check_args(&refs(&json_outputs(&json)?), &[model, file])?;
    let all = hellaswag::load_tasks(file)?;
    println!("runtime: {}", llama_runtime::build_info());
    println!("hellaswag_score : loaded {} tasks from prompt.", all.len());
    let n = tasks.min(all.len());
    println!("hellaswag_score : selecting {n} randomized tasks.");
    println!("\ntask\tacc_norm\t95% confidence interval");
    let pb = progress::bar(n as u64, "tasks");
    let r = hellaswag::run(model, &all, tasks, ctx, threads, |n, acc, lo, hi| {
        pb.suspend(|| println!("{n}\t{acc:3.8}%\t[{lo:3.4}%, {hi:3.4}%]"));
        pb.set_position(n as u64);
    });
    pb.finish_and_clear();
    let r = r?;
    println!();
    let s = logits_settings(threads, ctx, 512, Some(1));
    emit(
        json.as_deref(),
        EvalKind::Hellaswag,
        &[model],
        s,
        vec![r.load_ms],
        t0,
        r,
    )
}

fn bench(
    models: &[PathBuf],
    n_prompt: usize,
    n_gen: usize,
    reps: usize,
    threads: Threads,
    json: Option<PathBuf>,
    t0: Instant,
) -> anyhow::Result<()> {
    if reps == 0 || (n_prompt == 0 && n_gen == 0) {
        return Err(usage("--reps and one of -p/-n must be at least 1"));
    }
    check_args(&refs(&json_outputs(&json)?), &refs(models))?;
    let pb = progress::bar(0, "timed runs");
    let rows = llama_bench::run(models, n_prompt, n_gen, reps, threads, |i, n| {
        pb.set_length(n as u64);
        pb.set_position(i as u64)
    });
    pb.finish_and_clear();
    let rows = rows?;
    let c = llama_bench::context_params(n_prompt, n_gen, threads);
    println!(
        "runtime: {} · threads {threads} · n_ctx {} · n_batch {} · n_ubatch {} · KV F16",
        llama_runtime::build_info(),
        c.n_ctx,
        c.n_batch,
        c.n_ubatch
    );
    println!("| model | size | test | t/s |\n|---|---:|---|---:|");
    for r in &rows {
        println!(
            "| {} | {:.1} MiB | {} | {:.2} ± {:.2} |",
            llama_bench::short_name(&r.model),
            r.file_bytes as f64 / 1048576.0,
            r.test,
            r.avg_ts,
            r.stddev_ts
        );
    }
    let table = llama_bench::ratio_table(&rows);
    for q in &table {
        println!(
            "ratio {} / {} {}: {:.3} ± {:.3} (per replicate {:?})",
            llama_bench::short_name(&q.model),
            llama_bench::short_name(&q.base),
            q.test,
            q.mean,
            q.sd,
            q.per_replicate
                .iter()
                .map(|x| (x * 1000.0).round() / 1000.0)
                .collect::<Vec<_>>()
        );
    }
    let s = RunSettings {
        threads,
        n_ctx: c.n_ctx,
        n_batch: c.n_batch,
        n_ubatch: c.n_ubatch,
        type_kv: "F16".into(),
        seed: Some(1),
    };
    let load_ms = models
        .iter()
        .map(|m| {
            rows.iter()
                .find(|r| Path::new(&r.model) == m)
                .map_or(0.0, |r| r.load_ms)
        })
        .collect();
    let result = llama_bench::BenchResult {
        rows,
        ratios: table,
    };
    emit(
        json.as_deref(),
        EvalKind::Bench,
        &refs(models),
        s,
        load_ms,
        t0,
        result,
    )
}

fn perplexity(
    model: &Path,
    file: &Path,
    p: &ppl::PplParams,
    json: Option<PathBuf>,
    reference: Option<&Path>,
    t0: Instant,
) -> anyhow::Result<()> {
    check_args(&refs(&json_outputs(&json)?), &[model, file])?;
    if let Some(r) = reference {
        if !r.join("config.json").is_file() {
            return Err(usage(format!(
                "--reference {}: no config.json (an HF folder is expected)",
                r.display()
            )));
        }
    }
    let text = ppl::read_text(file)?;
    println!("runtime: {}", llama_runtime::build_info());
    let pb = progress::bar(0, "chunks");
    let r = ppl::perplexity(model, &text, p, |i, n, v| {
        pb.set_length(n as u64);
        use std::io::Write;
        pb.suspend(|| {
            print!("[{i}]{v:.4},");
            let _ = std::io::stdout().flush();
        });
        pb.set_position(i as u64);
    });
    pb.finish_and_clear();
    let r = r?;
    println!();
    println!(
        "perplexity: {} chunks, n_ctx={}, {} tokens scored, {:.1} tokens/s, load {:.0} ms, threads {}",
        r.chunks, p.n_ctx, r.scored_tokens, r.tokens_per_second, r.load_ms, p.threads
    );
    println!("Final estimate: PPL = {:.4} +/- {:.5}", r.ppl, r.ppl_se);
    if let Some(hf) = reference {
        reference_side_by_side(model, hf, &text, p.n_ctx, &r)?;
    }
    let s = logits_settings(p.threads, p.n_ctx, p.n_ubatch, None);
    emit(
        json.as_deref(),
        EvalKind::Ppl,
        &[model],
        s,
        vec![r.load_ms],
        t0,
        r,
    )
}

/// `--reference HF_DIR`: the reference's PPL on the same tokens and chunks, printed next to
/// llama.cpp's.
fn reference_side_by_side(
    model: &Path,
    hf: &Path,
    text: &str,
    ctx: u32,
    r: &ppl::PplResult,
) -> anyhow::Result<()> {
    let bos = {
        let m = llama_runtime::Model::load(model, true)?;
        m.add_bos().then(|| m.bos() as u32)
    };
    let pb = progress::bar(0, "reference chunks");
    let rr = quantgate::eval::ref_ppl::reference_perplexity(
        hf,
        text,
        ctx as usize,
        r.chunks,
        bos,
        |i, n| {
            pb.set_length(n as u64);
            pb.set_position(i as u64)
        },
    );
    pb.finish_and_clear();
    let rr = rr?;
    println!("\n| side | model | chunks × n_ctx | PPL |\n|---|---|---|---:|");
    println!(
        "| llama.cpp | {} | {} × {ctx} | {:.4} ± {:.5} |",
        model.display(),
        r.chunks,
        r.ppl,
        r.ppl_se
    );
    println!(
        "| reference (candle f32) | {} | {} × {ctx} | {:.4} ± {:.5} |",
        hf.display(),
        rr.chunks,
        rr.ppl,
        rr.ppl_se
    );
    if rr.scored_tokens != r.scored_tokens || rr.text_tokens != r.text_tokens {
        println!(
            "note: token counts differ (llama.cpp {} text / {} scored, reference {} / {})",
            r.text_tokens, r.scored_tokens, rr.text_tokens, rr.scored_tokens
        );
    }
    Ok(())
}
