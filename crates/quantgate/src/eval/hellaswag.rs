//! HellaSwag acc_norm as llama-perplexity computes it (`docs/llamacpp-spec.md` §1.2):
//! tasks drawn without replacement by `std::mt19937(1)` with libstdc++'s
//! `uniform_int_distribution` (Lemire's method), each ending scored by its mean token
//! log-likelihood after the prefix shared by all four, and a Wilson 95% interval.
//!
//! Each ending is decoded as a sequence of its own (llama-perplexity packs the four with a
//! shared prefix into one decode); the math per sequence is the same, but float results can
//! differ in the last bits, which matters only on exact ties.

use std::path::Path;

use crate::threads::Threads;
use anyhow::{bail, Context as _, Result};
use llama_runtime::{Context, ContextParams, Model};
use serde::{Deserialize, Serialize};

/// One task: context, gold ending, four endings.
#[derive(Clone, Debug)]
pub struct Task {
    pub context: String,
    pub gold: usize,
    pub endings: [String; 4],
}

/// Parses the 6-lines-per-task file (lines split on `\n` only; `\r` stays).
pub fn load_tasks(path: &Path) -> Result<Vec<Task>> {
    crate::paths::ensure_regular_file(path)?;
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("{}: cannot read", path.display()))?;
    let mut lines: Vec<&str> = text.split('\n').collect();
    if lines.last() == Some(&"") {
        lines.pop();
    }
    if !lines.len().is_multiple_of(6) {
        bail!(
            "{}: number of lines in prompt not a multiple of 6",
            path.display()
        );
    }
    lines
        .chunks_exact(6)
        .enumerate()
        .map(|(i, l)| {
            let gold: usize = l[1]
                .trim()
                .parse()
                .with_context(|| format!("{}: task {i}: gold index {:?}", path.display(), l[1]))?;
            if gold > 3 {
                bail!("{}: task {i}: gold index {gold} > 3", path.display());
            }
            Ok(Task {
                context: l[0].to_string(),
                gold,
                endings: [
                    l[2].to_string(),
                    l[3].to_string(),
                    l[4].to_string(),
                    l[5].to_string(),
                ],
            })
        })
        .collect()
}

/// libstdc++'s `uniform_int_distribution<size_t>(0, r − 1)` on a 32-bit engine (Lemire).
fn uniform_below(rng: &mut rand_mt::Mt, r: u64) -> u64 {
    let mut prod = rng.next_u32() as u64 * r;
    let mut low = prod & 0xFFFF_FFFF;
    if low < r {
        let thr = ((1u64 << 32) - r) % r;
        while low < thr {
            prod = rng.next_u32() as u64 * r;
            low = prod & 0xFFFF_FFFF;
        }
    }
    prod >> 32
}

/// The original indices of the first `n` tasks llama-perplexity evaluates, in order.
pub fn task_order(total: usize, n: usize) -> Vec<usize> {
    let mut rng = rand_mt::Mt::new(1);
    let mut remaining: Vec<usize> = (0..total).collect();
    (0..n.min(total))
        .map(|_| {
            let idx = uniform_below(&mut rng, remaining.len() as u64) as usize;
            remaining.remove(idx)
        })
        .collect()
}

/// Result of a run.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct HellaswagResult {
    pub tasks: usize,
    pub correct: usize,
    /// 100 · correct / tasks.
    #[serde(deserialize_with = "crate::serde_nan::f64")]
    pub acc_norm: f64,
    /// Wilson 95% interval, percent.
    #[serde(deserialize_with = "crate::serde_nan::f64")]
    pub ci_low: f64,
    #[serde(deserialize_with = "crate::serde_nan::f64")]
    pub ci_high: f64,
    /// Model load time, ms.
    #[serde(deserialize_with = "crate::serde_nan::f64")]
    pub load_ms: f64,
}

/// Wilson interval as llama-perplexity prints it: (lo, hi) fractions for `correct` of `n`.
pub fn wilson(correct: usize, n: usize) -> (f64, f64) {
    let za = 1.95996398454f64;
    let f = correct as f64 / n as f64;
    let z = za * za / n as f64;
    let cnf = z * (n as f64 * (4.0 * f * (1.0 - f) + z)).sqrt() / (2.0 * za);
    (
        (f + z / 2.0 - cnf) / (1.0 + z),
        (f + z / 2.0 + cnf) / (1.0 + z),
    )
}

/// The mean log-probability of `seq`'s ending (tokens `cp..`) given its context: `first` is
/// the logits row of position `cp − 1`, `rest` those of positions `cp ..= len − 2`. The first
/// token's probability as llama-perplexity computes it (f32 exp, f64 sum, f32 probability,
/// then log); the others with an f32 sum. NaN for an ending with no token of its own.
fn ending_score(seq: &[i32], cp: usize, first: &[f32], rest: &[Vec<f32>]) -> f64 {
    let mut lp = 0f64;
    for j in cp - 1..seq.len() - 1 {
        let l = if j == cp - 1 { first } else { &rest[j - cp] };
        let y = seq[j + 1] as usize;
        let max = l.iter().fold(f32::NEG_INFINITY, |m, v| m.max(*v));
        lp += if j == cp - 1 {
            let sum: f64 = l.iter().map(|v| (v - max).exp() as f64).sum();
            (((l[y] - max).exp() as f64 / sum) as f32).ln() as f64
        } else {
            let sum: f32 = l.iter().map(|v| (v - max).exp()).sum();
            (l[y] - max - sum.ln()) as f64
        };
    }
    lp / (seq.len() - cp) as f64
}

/// Runs `n_tasks` tasks; `row(n, acc, lo, hi)` is called after each.
pub fn run(
    model_path: &Path,
    tasks: &[Task],
    n_tasks: usize,
    n_ctx: u32,
    threads: Threads,
    mut row: impl FnMut(usize, f64, f64, f64),
) -> Result<HellaswagResult> {
    let t0 = std::time::Instant::now();
    let model = Model::load(model_path, false)?;
    let load_ms = t0.elapsed().as_secs_f64() * 1e3;
    crate::eval::ppl::check_ctx(&model, model_path, n_ctx as usize)?;
    if tasks.is_empty() || n_tasks == 0 {
        bail!(
            "no tasks to evaluate ({} in the file, {n_tasks} requested)",
            tasks.len()
        );
    }
    let mut ctx = Context::new(
        &model,
        ContextParams::logits(n_ctx, n_ctx.min(512), threads.get()),
    )?;
    let order = task_order(tasks.len(), n_tasks);
    let mut correct = 0;
    for (k, &ti) in order.iter().enumerate() {
        crate::interrupt::check()?;
        let t = &tasks[ti];
        let seqs: Vec<Vec<i32>> = t
            .endings
            .iter()
            .map(|e| model.tokenize(&format!("{} {}", t.context, e), true, false))
            .collect::<Result<_, _>>()?;
        let cp = (0..seqs.iter().map(Vec::len).min().unwrap_or(0))
            .take_while(|&i| seqs.iter().all(|s| s[i] == seqs[0][i]))
            .count();
        if cp == 0 {
            bail!("task {ti}: the endings share no prefix token");
        }
        if let Some(seq) = seqs.iter().find(|s| s.len() as u32 > n_ctx) {
            bail!(
                "task {ti} does not fit in the context window (requires {} tokens)",
                seq.len()
            );
        }
        // The shared context once (its last position predicts each ending's first token),
        // then each ending's own tokens after it.
        let first = ctx.logits_from(&seqs[0][..cp], cp - 1)?.remove(0);
        let mut best = (0usize, f64::NEG_INFINITY);
        for (s, seq) in seqs.iter().enumerate() {
            let rest = if seq.len() > cp + 1 {
                ctx.logits_continuing(&seq[cp..seq.len() - 1], cp)?
            } else {
                Vec::new()
            };
            let score = ending_score(seq, cp, &first, &rest);
            if score > best.1 {
                best = (s, score);
            }
        }
        correct += (best.0 == t.gold) as usize;
        let n = k + 1;
        let (lo, hi) = wilson(correct, n);
        row(n, 100.0 * correct as f64 / n as f64, 100.0 * lo, 100.0 * hi);
    }
    let n = order.len();
    let (lo, hi) = wilson(correct, n);
    Ok(HellaswagResult {
        tasks: n,
        correct,
        acc_norm: 100.0 * correct as f64 / n as f64,
        ci_low: 100.0 * lo,
        ci_high: 100.0 * hi,
        load_ms,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn task_order_matches_the_libstdcxx_test_vector() {
        // docs/llamacpp-spec.md §1.2 (g++ 12, 10042 tasks).
        assert_eq!(
            task_order(10042, 10),
            vec![4187, 10013, 7233, 9363, 1, 1286, 3036, 10032, 1474, 2371]
        );
        let mut rng = rand_mt::Mt::new(1);
        let first: Vec<u32> = (0..5).map(|_| rng.next_u32()).collect();
        assert_eq!(
            first,
            vec![1791095845, 4282876139, 3093770124, 4005303368, 491263]
        );
    }

    #[test]
    fn wilson_interval_brackets_the_rate() {
        let (lo, hi) = wilson(50, 100);
        assert!(
            (lo - 0.4038).abs() < 1e-3 && (hi - 0.5962).abs() < 1e-3,
            "{lo} {hi}"
        );
    }
}
