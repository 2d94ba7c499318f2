//! pp/tg throughput as llama-bench measures it (`docs/llamacpp-spec.md` §2): per test a
//! fresh context, one untimed warm-up (a full prompt run, or a 1-token generation), then for each
//! repetition: clear the memory, time the decode calls and their synchronization. Tokens are C
//! `rand() % n_vocab` (BOS first when the vocab adds BOS), as llama-bench draws them. Arms are
//! alternated within one time window (A, B, A, B …) and the per-replicate ratio B/A is reported.

use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::threads::Threads;
use anyhow::Result;
use llama_runtime::{Context, ContextParams, Model};
use serde::{Deserialize, Serialize};

/// One arm's samples for one test.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ArmResult {
    pub model: String,
    /// `pp512` or `tg128`.
    pub test: String,
    /// Tokens per second per repetition: 1e9·n / t_ns.
    #[serde(deserialize_with = "crate::serde_nan::vec_f64")]
    pub samples_ts: Vec<f64>,
    /// Mean of `samples_ts`.
    #[serde(deserialize_with = "crate::serde_nan::f64")]
    pub avg_ts: f64,
    /// Sample standard deviation of `samples_ts` (0 for one sample).
    #[serde(deserialize_with = "crate::serde_nan::f64")]
    pub stddev_ts: f64,
    /// Model load time, ms.
    #[serde(deserialize_with = "crate::serde_nan::f64")]
    pub load_ms: f64,
    /// File size, bytes.
    pub file_bytes: u64,
}

/// mean and sample standard deviation (llama-bench's `avg_ts` / `stddev_ts`).
pub fn mean_sd(v: &[f64]) -> (f64, f64) {
    let n = v.len() as f64;
    let mean = v.iter().sum::<f64>() / n;
    if v.len() <= 1 {
        return (mean, 0.0);
    }
    let sq: f64 = v.iter().map(|x| x * x).sum();
    (
        mean,
        (sq / (n - 1.0) - mean * mean * n / (n - 1.0))
            .max(0.0)
            .sqrt(),
    )
}

fn random_tokens(model: &Model, n: usize) -> Vec<i32> {
    let n_vocab = model.n_vocab() as i32;
    (0..n)
        .map(|i| {
            if i == 0 && model.add_bos() {
                model.bos()
            } else {
                // SAFETY: libc rand() is not seeded, exactly as in llama-bench (deterministic
                // per process).
                (unsafe { libc::rand() }) % n_vocab
            }
        })
        .collect()
}

/// The context llama-bench builds for pp`n_prompt`/tg`n_gen`: n_ctx the larger rounded up to
/// 256, n_batch min(2048, n_ctx), n_ubatch 512, F16 KV cache, no embeddings.
pub fn context_params(n_prompt: usize, n_gen: usize, threads: Threads) -> ContextParams {
    let n_ctx = (n_prompt.max(n_gen) as u32).div_ceil(256) * 256;
    ContextParams {
        n_ctx,
        n_batch: 2048.min(n_ctx),
        n_ubatch: 512,
        n_threads: threads.get(),
        embeddings: false,
        pooling_type: -1,
        type_kv: 1,
        n_seq_max: 1,
    }
}

/// The result an `eval bench` record holds: per arm and test, then the ratios to the first arm.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct BenchResult {
    /// Per arm and test ([`run`]).
    pub rows: Vec<ArmResult>,
    /// Per later arm and test ([`ratio_table`]).
    pub ratios: Vec<RatioRow>,
}

/// Runs pp`n_prompt` and tg`n_gen` on every model, `reps` times, arms alternated.
/// Returns (per arm and test, per-replicate ratios of each later arm to the first).
/// `progress(done, total)` hears each timed run (total = tests × `reps` × models).
pub fn run(
    models: &[PathBuf],
    n_prompt: usize,
    n_gen: usize,
    reps: usize,
    threads: Threads,
    mut progress: impl FnMut(usize, usize),
) -> Result<Vec<ArmResult>> {
    struct Arm {
        path: PathBuf,
        model: Model,
        load_ms: f64,
    }
    let mut arms: Vec<Arm> = Vec::new();
    for p in models {
        let t0 = Instant::now();
        let model = Model::load(p, false)?;
        let need = context_params(n_prompt, n_gen, threads).n_ctx as usize;
        crate::eval::ppl::check_ctx(&model, p, need)?;
        arms.push(Arm {
            path: p.clone(),
            model,
            load_ms: t0.elapsed().as_secs_f64() * 1e3,
        });
    }
    // Samples per arm: (pp, tg) tokens/s, kept apart from the arms the contexts borrow.
    let mut samples: Vec<(Vec<f64>, Vec<f64>)> = vec![(Vec::new(), Vec::new()); arms.len()];
    let params = context_params(n_prompt, n_gen, threads);
    let tests = [n_prompt, n_gen].iter().filter(|n| **n > 0).count();
    let (total, mut done) = (tests * reps * arms.len(), 0);
    progress(0, total);
    for (test, n) in [("pp", n_prompt), ("tg", n_gen)] {
        if n == 0 {
            continue;
        }
        // One context per arm and test; warm-up untimed.
        let mut ctxs: Vec<Context> = arms
            .iter()
            .map(|a| Context::new(&a.model, params.clone()))
            .collect::<Result<_, _>>()?;
        for (a, ctx) in arms.iter().zip(ctxs.iter_mut()) {
            ctx.clear_memory();
            if test == "pp" {
                ctx.decode_timed_run(&random_tokens(&a.model, n), 0)?;
            } else {
                ctx.decode_timed_run(&random_tokens(&a.model, 1), 0)?;
            }
        }
        for _ in 0..reps {
            crate::interrupt::check()?;
            for ((a, ctx), smp) in arms.iter().zip(ctxs.iter_mut()).zip(samples.iter_mut()) {
                ctx.clear_memory();
                let toks = random_tokens(&a.model, n);
                let t0 = Instant::now();
                if test == "pp" {
                    ctx.decode_timed_run(&toks, 0)?;
                } else {
                    for (i, t) in toks.iter().enumerate() {
                        ctx.decode_timed_run(std::slice::from_ref(t), i)?;
                    }
                }
                let ns = t0.elapsed().as_nanos() as f64;
                let ts = 1e9 * n as f64 / ns;
                if test == "pp" {
                    smp.0.push(ts)
                } else {
                    smp.1.push(ts)
                }
                done += 1;
                progress(done, total);
            }
        }
    }
    let mut out = Vec::new();
    for (a, smp) in arms.iter().zip(&samples) {
        for (test, n, v) in [("pp", n_prompt, &smp.0), ("tg", n_gen, &smp.1)] {
            if v.is_empty() {
                continue;
            }
            let (avg, sd) = mean_sd(v);
            out.push(ArmResult {
                model: a.path.display().to_string(),
                test: format!("{test}{n}"),
                samples_ts: v.clone(),
                avg_ts: avg,
                stddev_ts: sd,
                load_ms: a.load_ms,
                file_bytes: std::fs::metadata(&a.path).map(|m| m.len()).unwrap_or(0),
            });
        }
    }
    Ok(out)
}

/// Per-replicate ratios `later / first` of two arms' samples for the same test.
pub fn ratios(first: &ArmResult, later: &ArmResult) -> Vec<f64> {
    first
        .samples_ts
        .iter()
        .zip(&later.samples_ts)
        .map(|(a, b)| b / a)
        .collect()
}

/// The per-replicate ratio of one later arm to the first arm for one test.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RatioRow {
    /// The later arm's model.
    pub model: String,
    /// The first (baseline) arm's model.
    pub base: String,
    /// `pp512` / `tg128`.
    pub test: String,
    /// `later / first` per replicate.
    #[serde(deserialize_with = "crate::serde_nan::vec_f64")]
    pub per_replicate: Vec<f64>,
    /// Mean and sample sd of `per_replicate`.
    #[serde(deserialize_with = "crate::serde_nan::f64")]
    pub mean: f64,
    #[serde(deserialize_with = "crate::serde_nan::f64")]
    pub sd: f64,
}

/// Ratios of every later arm to the first arm (`rows` as [`run`] returns them), per test.
pub fn ratio_table(rows: &[ArmResult]) -> Vec<RatioRow> {
    let Some(first) = rows.first() else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for r in rows.iter().filter(|r| r.model != first.model) {
        if let Some(base) = rows
            .iter()
            .find(|b| b.model == first.model && b.test == r.test)
        {
            let q = ratios(base, r);
            let (mean, sd) = mean_sd(&q);
            out.push(RatioRow {
                model: r.model.clone(),
                base: base.model.clone(),
                test: r.test.clone(),
                per_replicate: q,
                mean,
                sd,
            });
        }
    }
    out
}

/// The file name of a path, for tables.
pub fn short_name(p: &str) -> String {
    Path::new(p)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| p.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mean_and_sample_sd_like_llama_bench() {
        let (m, sd) = mean_sd(&[10.0, 12.0, 14.0]);
        assert_eq!(m, 12.0);
        assert!((sd - 2.0).abs() < 1e-12);
        assert_eq!(mean_sd(&[5.0]), (5.0, 0.0));
    }
}
