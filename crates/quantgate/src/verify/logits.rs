//! Gate 2 for causal LMs: per-position logits from llama.cpp against the reference forward
//! (candle f32 on the HF safetensors), on the same token ids, beyond position 0: min cosine,
//! top-1 agreement and mean KL divergence (reference ‖ llama.cpp).

use std::time::Instant;

use anyhow::Result;
use llama_runtime::{Context, ContextParams};

use super::sliced::Runner;
use serde::{Deserialize, Serialize};

use super::vectors::cosine;
use crate::threads::Threads;

/// Measurements.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct LogitsReport {
    /// Texts evaluated.
    pub texts: usize,
    /// Positions compared (position 0 excluded).
    pub positions: usize,
    /// Lowest per-position cosine of the logit vectors.
    #[serde(deserialize_with = "crate::serde_nan::f64")]
    pub min_cosine: f64,
    /// Fraction of positions with the same argmax.
    #[serde(deserialize_with = "crate::serde_nan::f64")]
    pub top1_agreement: f64,
    /// Mean KL(reference ‖ llama.cpp) over positions, nats.
    #[serde(deserialize_with = "crate::serde_nan::f64")]
    pub mean_kld: f64,
    /// Largest per-position KLD.
    #[serde(deserialize_with = "crate::serde_nan::f64")]
    pub max_kld: f64,
    /// 99th percentile of the per-position KLD (nearest rank), nats.
    #[serde(default, deserialize_with = "crate::serde_nan::f64")]
    pub p99_kld: f64,
    /// RMS over positions of Δp = p_llama.cpp(next token) − p_reference(next token), the
    /// probability given to the token that follows in the text (llama-perplexity's `RMS Δp`,
    /// as a fraction, not %). Positions with a next token only.
    #[serde(default, deserialize_with = "crate::serde_nan::f64")]
    pub rms_dp: f64,
    /// Lowest per-position cosine of each text, in corpus order.
    #[serde(default, deserialize_with = "crate::serde_nan::vec_f64")]
    pub per_text_min_cosine: Vec<f64>,
    /// The per-position KLD at percentiles 0, 1, …, 100 (nearest rank), nats: the
    /// distribution the HTML report plots.
    #[serde(default, deserialize_with = "crate::serde_nan::vec_f64")]
    pub kld_percentiles: Vec<f64>,
    /// llama.cpp's argmax token at every compared position, in order: what Gate 3 re-measures
    /// on the shipped bytes.
    #[serde(default)]
    pub llama_argmax: Vec<u32>,
    /// Where a NaN or infinite logit appeared (`llama.cpp logits of text N at position P`):
    /// each is a blocker. Absent from the JSON when empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub non_finite: Vec<String>,
    /// MoE models: llama.cpp's expert choices against the reference's ([`super::routing`]).
    /// Absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub routing: Option<super::routing::RoutingReport>,
    /// How fast each side ran (not part of the gate's figures: it differs run to run).
    #[serde(skip)]
    pub speed: Option<ForwardSpeed>,
}

/// Tokens per second of each side of a logits comparison.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct ForwardSpeed {
    /// Tokens run through each side.
    pub tokens: usize,
    /// The reference's forward (candle f32), seconds.
    pub reference_s: f64,
    /// llama.cpp's forward (for slices: writing, loading and running each), seconds.
    pub llama_s: f64,
}

impl ForwardSpeed {
    /// Tokens/s of the reference and of llama.cpp.
    pub fn tokens_per_s(&self) -> (f64, f64) {
        let t = self.tokens as f64;
        (t / self.reference_s, t / self.llama_s)
    }
}

/// log-softmax in f64.
fn log_softmax(l: &[f32]) -> Vec<f64> {
    let max = l.iter().fold(f32::NEG_INFINITY, |m, v| m.max(*v)) as f64;
    let lse = l.iter().map(|v| (*v as f64 - max).exp()).sum::<f64>().ln() + max;
    l.iter().map(|v| *v as f64 - lse).collect()
}

fn argmax(l: &[f32]) -> usize {
    l.iter()
        .enumerate()
        .fold(
            (0, f32::NEG_INFINITY),
            |b, (i, v)| if *v > b.1 { (i, *v) } else { b },
        )
        .0
}

/// Running sums over compared positions.
struct Tally {
    n: usize,
    agree: usize,
    kld_sum: f64,
    max_kld: f64,
    min_cos: f64,
    klds: Vec<f64>,
    dp2: f64,
    n_dp: usize,
    per_text: Vec<f64>,
    llama_argmax: Vec<u32>,
    bad: Vec<String>,
}

impl Tally {
    fn new() -> Tally {
        Tally {
            n: 0,
            agree: 0,
            kld_sum: 0.0,
            max_kld: 0.0,
            min_cos: f64::INFINITY,
            klds: Vec::new(),
            dp2: 0.0,
            n_dp: 0,
            per_text: Vec::new(),
            llama_argmax: Vec::new(),
            bad: Vec::new(),
        }
    }

    /// One text: reference logits `rl` and llama.cpp's `ll` of positions `first..n` of `ids`
    /// (`n − first` rows of `n_vocab` each); position 0 is never compared.
    fn add_text(&mut self, ids: &[u32], first: usize, rl: &[Vec<f32>], ll: &[Vec<f32>]) {
        let text = self.per_text.len();
        let mut text_min = f64::INFINITY;
        for pos in first.max(1)..ids.len() {
            let (a, b) = (&rl[pos - first], &ll[pos - first]);
            let what = format!("logits of text {text} at position {pos}");
            for (side, v) in [("reference", a), ("llama.cpp", b)] {
                if self.bad.len() < 8 {
                    self.bad.extend(super::vectors::non_finite(side, &what, v));
                }
            }
            // f64::min would drop a NaN cosine; it must stay the minimum.
            let c = cosine(a, b);
            text_min = if c.is_nan() { c } else { text_min.min(c) };
            self.llama_argmax.push(argmax(b) as u32);
            if c.is_nan() || self.min_cos.is_nan() {
                self.min_cos = f64::NAN;
            } else {
                self.min_cos = self.min_cos.min(c);
            }
            self.agree += (argmax(a) == argmax(b)) as usize;
            let (pa, pb) = (log_softmax(a), log_softmax(b));
            let kld: f64 = pa.iter().zip(&pb).map(|(x, y)| x.exp() * (x - y)).sum();
            self.kld_sum += kld;
            self.max_kld = self.max_kld.max(kld);
            self.klds.push(kld);
            if let Some(next) = ids.get(pos + 1) {
                let d = pb[*next as usize].exp() - pa[*next as usize].exp();
                self.dp2 += d * d;
                self.n_dp += 1;
            }
            self.n += 1;
        }
        self.per_text.push(text_min);
    }

    fn report(mut self) -> LogitsReport {
        let p99_kld = percentile(&mut self.klds, 0.99);
        let kld_percentiles = (0..=100)
            .map(|q| percentile(&mut self.klds, q as f64 / 100.0))
            .collect();
        let n = self.n.max(1) as f64;
        LogitsReport {
            texts: self.per_text.len(),
            positions: self.n,
            min_cosine: self.min_cos,
            top1_agreement: self.agree as f64 / n,
            mean_kld: self.kld_sum / n,
            max_kld: self.max_kld,
            p99_kld,
            rms_dp: (self.dp2 / self.n_dp.max(1) as f64).sqrt(),
            per_text_min_cosine: self.per_text,
            kld_percentiles,
            llama_argmax: self.llama_argmax,
            non_finite: self.bad,
            routing: None,
            speed: None,
        }
    }
}

/// Compares logits on `texts` (tokenized by HF with special tokens; the same ids go to both).
/// Texts of 2..=512 tokens are compared; one text's logits of each side are in memory at a
/// time.
pub fn check(
    llama: Runner,
    reference: &reference::decoder::Decoder,
    hf: &reference::tokenizer::HfTokenizer,
    texts: &[String],
    threads: Threads,
) -> Result<LogitsReport> {
    let mut seqs = Vec::new();
    for t in texts {
        let ids = hf.encode(t, true)?;
        if (2..=512).contains(&ids.len()) {
            seqs.push(ids);
        }
    }
    let refs: Vec<&[u32]> = seqs.iter().map(Vec::as_slice).collect();
    let t_all = Instant::now();
    let ready = llama.ready(&refs, 512, threads.get())?;
    let mut llama_s = t_all.elapsed().as_secs_f64();
    let params = ContextParams::logits(512, 512, threads.get());
    let mut ctx = if reference.is_moe() {
        Context::with_routing(ready.model(), params)?
    } else {
        Context::new(ready.model(), params)?
    };
    let mut routing = reference.is_moe().then(super::routing::Tally::new);
    let mut tally = Tally::new();
    // The reference runs every text in one pass over its weights, layer by layer.
    crate::progress::report("gate 2 logits: reference", 0, refs.len());
    reference.forward_each(&refs, |i, out| -> Result<()> {
        crate::progress::report("gate 2 logits", i, refs.len());
        let t = Instant::now();
        let ll = ready.logits(&mut ctx, i, &seqs[i], 0)?;
        llama_s += t.elapsed().as_secs_f64();
        if let Some(r) = routing.as_mut() {
            r.add(&out.routing, &ctx.take_routing());
        }
        let rl = out.logits.to_vec2::<f32>()?;
        drop(out);
        tally.add_text(&seqs[i], 0, &rl, &ll);
        Ok(())
    })?;
    let mut report = tally.report();
    report.routing = routing.map(super::routing::Tally::report);
    report.speed = Some(ForwardSpeed {
        tokens: refs.iter().map(|s| s.len()).sum(),
        reference_s: t_all.elapsed().as_secs_f64() - llama_s,
        llama_s,
    });
    Ok(report)
}

/// Compares the logits of positions `first..n` of one long sequence `ids` (`n` tokens, one
/// llama.cpp context of `n`, the reference's [`reference::decoder::Decoder::forward_tail`]).
///
/// Errors: `first ≥ n`, or a failed forward on either side.
pub fn check_tail(
    llama: Runner,
    reference: &reference::decoder::Decoder,
    ids: &[u32],
    first: usize,
    threads: Threads,
) -> Result<LogitsReport> {
    let n = ids.len() as u32;
    crate::progress::report("gate 2 long-context logits: reference", 0, 2);
    let rl = reference.forward_tail(ids, first)?.to_vec2::<f32>()?;
    crate::progress::report("gate 2 long-context logits: llama.cpp", 1, 2);
    let ready = llama.ready(&[ids], n, threads.get())?;
    let mut ctx = Context::new(ready.model(), ContextParams::logits(n, 512, threads.get()))?;
    let ll = ready.logits(&mut ctx, 0, ids, first)?;
    let mut tally = Tally::new();
    tally.add_text(ids, first, &rl, &ll);
    Ok(tally.report())
}

/// The `q`-quantile of `x` by nearest rank (NaN sorts last; NaN for an empty slice).
pub fn percentile(x: &mut [f64], q: f64) -> f64 {
    if x.is_empty() {
        return f64::NAN;
    }
    x.sort_by(|a, b| a.total_cmp(b));
    let rank = ((q * x.len() as f64).ceil() as usize).clamp(1, x.len());
    x[rank - 1]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentile() {
        let mut v: Vec<f64> = (1..=200).map(f64::from).collect();
        assert_eq!(percentile(&mut v, 0.99), 198.0);
        assert_eq!(percentile(&mut [3.0, 1.0], 0.99), 3.0);
        assert!(percentile(&mut [], 0.99).is_nan());
    }
}
