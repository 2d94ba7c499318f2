//! KL divergence as llama-perplexity computes it (`docs/llamacpp-spec.md` §1.3):
//! a base run writes the `_logits_` file (every scored position's log-probabilities quantized to
//! 16 bits, the same file format llama-perplexity writes with `--kl-divergence-base`), and a
//! compare run decodes the same tokens with another model and reports mean KLD(base‖current),
//! "same top p", Δp RMS and percentiles.

use std::io::{BufReader, BufWriter, Read, Write};
use std::path::Path;

use crate::threads::Threads;
use anyhow::{bail, Context as _, Result};
use llama_runtime::Model;
use serde::{Deserialize, Serialize};

const MAGIC: &[u8; 8] = b"_logits_";

/// Encodes one position's logits as llama-perplexity's record: f32 scale, f32 min_log_prob,
/// then `n_vocab` u16 codes (and one 0 when `n_vocab` is odd).
pub fn encode_record(l: &[f32], out: &mut Vec<u16>) {
    let max = l.iter().fold(f32::NEG_INFINITY, |m, v| m.max(*v));
    let min = l
        .iter()
        .fold(f32::INFINITY, |m, v| m.min(*v))
        .max(max - 16.0);
    let sum: f64 = l.iter().map(|v| (v - max).exp() as f64).sum();
    let lse = sum.ln() as f32;
    let min_log_prob = min - max - lse;
    let scale = (max - min) / 65535.0;
    let push_f32 = |out: &mut Vec<u16>, x: f32| {
        let b = x.to_bits();
        out.push(b as u16);
        out.push((b >> 16) as u16);
    };
    push_f32(out, scale);
    push_f32(out, min_log_prob);
    for v in l {
        let q = if scale != 0.0 && *v > min {
            ((v - min) / scale).round_ties_even() as u16
        } else {
            0
        };
        out.push(q);
    }
    if !l.len().is_multiple_of(2) {
        out.push(0);
    }
}

/// Decodes a record into log-probabilities `scale·q + min_log_prob`.
pub fn decode_record(r: &[u16], n_vocab: usize) -> Vec<f32> {
    let f = |i: usize| f32::from_bits(r[i] as u32 | ((r[i + 1] as u32) << 16));
    let (scale, min_log_prob) = (f(0), f(2));
    r[4..4 + n_vocab]
        .iter()
        .map(|q| scale * *q as f32 + min_log_prob)
        .collect()
}

/// What the base run wrote.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct KldBaseResult {
    pub chunks: usize,
    pub n_ctx: usize,
    pub n_vocab: usize,
    /// Output file size, bytes.
    pub bytes: u64,
    /// Model load time, ms.
    #[serde(deserialize_with = "crate::serde_nan::f64")]
    pub load_ms: f64,
}

/// Base run: tokenizes `text` as llama-perplexity does and writes the `_logits_` file
/// (temp file in the same folder, renamed when complete).
pub fn write_base(
    model_path: &Path,
    text: &str,
    n_ctx: usize,
    chunks: Option<usize>,
    threads: Threads,
    out: &Path,
    mut progress: impl FnMut(usize, usize),
) -> Result<KldBaseResult> {
    let t0 = std::time::Instant::now();
    let model = Model::load(model_path, false)?;
    let load_ms = t0.elapsed().as_secs_f64() * 1e3;
    crate::eval::ppl::check_ctx(&model, model_path, n_ctx)?;
    let tokens = model.tokenize(text, true, false)?;
    if tokens.len() < 2 * n_ctx {
        bail!(
            "you need at least {} tokens; the text has {}",
            2 * n_ctx,
            tokens.len()
        );
    }
    let n_chunk = chunks.map_or(tokens.len() / n_ctx, |c| c.min(tokens.len() / n_ctx));
    let n_vocab = model.n_vocab();
    let dir = out
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    // Disk errors name the output (the io::Error stays in the chain: exit status 3).
    let ctx = || format!("{}: cannot write the base logits", out.display());
    let tmp = tempfile::Builder::new()
        .permissions(std::os::unix::fs::PermissionsExt::from_mode(0o644))
        .tempfile_in(dir)
        .with_context(ctx)?;
    let mut w = BufWriter::new(tmp.as_file());
    let header = |w: &mut BufWriter<&std::fs::File>| -> std::io::Result<()> {
        w.write_all(MAGIC)?;
        for v in [n_ctx as i32, n_vocab as i32, n_chunk as i32] {
            w.write_all(&v.to_le_bytes())?;
        }
        for t in &tokens[..n_chunk * n_ctx] {
            w.write_all(&t.to_le_bytes())?;
        }
        Ok(())
    };
    header(&mut w).with_context(ctx)?;
    let mut rec = Vec::new();
    super::ppl::scored_chunks(&model, &tokens, n_ctx, n_chunk, 512, threads, |i, rows| {
        for l in rows {
            rec.clear();
            encode_record(l, &mut rec);
            for q in &rec {
                w.write_all(&q.to_le_bytes())?;
            }
        }
        progress(i + 1, n_chunk);
        Ok(())
    })
    .with_context(ctx)?;
    w.flush().with_context(ctx)?;
    drop(w);
    tmp.as_file().sync_all().with_context(ctx)?;
    gguf::ensure_replaceable(out)?;
    tmp.persist(out)
        .map_err(|e| anyhow::anyhow!("{}: {}", out.display(), e.error))?;
    Ok(KldBaseResult {
        chunks: n_chunk,
        n_ctx,
        n_vocab,
        bytes: std::fs::metadata(out).map(|m| m.len()).unwrap_or(0),
        load_ms,
    })
}

/// Compare-run statistics (llama-perplexity's final block).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct KldResult {
    #[serde(deserialize_with = "crate::serde_nan::f64")]
    pub ppl_q: f64,
    #[serde(deserialize_with = "crate::serde_nan::f64")]
    pub ppl_base: f64,
    #[serde(deserialize_with = "crate::serde_nan::f64")]
    pub mean_kld: f64,
    #[serde(deserialize_with = "crate::serde_nan::f64")]
    pub mean_kld_unc: f64,
    #[serde(deserialize_with = "crate::serde_nan::f64")]
    pub max_kld: f64,
    #[serde(deserialize_with = "crate::serde_nan::f64")]
    pub median_kld: f64,
    #[serde(deserialize_with = "crate::serde_nan::f64")]
    pub kld_99: f64,
    #[serde(deserialize_with = "crate::serde_nan::f64")]
    pub same_top_p: f64,
    #[serde(deserialize_with = "crate::serde_nan::f64")]
    pub same_top_p_unc: f64,
    #[serde(deserialize_with = "crate::serde_nan::f64")]
    pub rms_dp: f64,
    pub positions: usize,
    pub chunks: usize,
    /// Tokens per chunk of the base file.
    pub n_ctx: usize,
    /// Model load time, ms.
    #[serde(deserialize_with = "crate::serde_nan::f64")]
    pub load_ms: f64,
}

fn mu(sum: f64, sum2: f64, n: f64) -> (f64, f64) {
    let f = sum / n;
    let v = sum2 / n - f * f;
    (
        f,
        if v > 0.0 && n > 10.0 {
            (v / (n - 1.0)).sqrt()
        } else {
            0.0
        },
    )
}

/// Percentile of sorted `v` at fraction `f` (f32 index arithmetic, as llama-perplexity).
pub fn percentile(v: &[f32], f: f32) -> f64 {
    if f <= 0.0 {
        return v[0] as f64;
    }
    if f >= 1.0 {
        return v[v.len() - 1] as f64;
    }
    let p = f * (v.len() - 1) as f32;
    let i = p.floor() as usize;
    let t = p - i as f32;
    ((1.0 - t) * v[i] + t * v[(i + 1).min(v.len() - 1)]) as f64
}

/// Compare run: `model_path` against the base file.
/// `progress(chunks_done, n_chunk)` is called after each chunk.
pub fn compare(
    model_path: &Path,
    base: &Path,
    threads: Threads,
    mut progress: impl FnMut(usize, usize),
) -> Result<KldResult> {
    let BaseFile {
        mut r,
        n_ctx,
        n_vocab,
        n_chunk,
        tokens,
    } = open_base(base)?;
    let t0 = std::time::Instant::now();
    let model = Model::load(model_path, false)?;
    let load_ms = t0.elapsed().as_secs_f64() * 1e3;
    if model.n_vocab() != n_vocab {
        bail!(
            "{}: base n_vocab {n_vocab} differs from the model's {}",
            base.display(),
            model.n_vocab()
        );
    }
    let nv = 2 * n_vocab.div_ceil(2) + 4;
    let mut rec = vec![0u8; 2 * nv];
    let mut sums = Sums::default();
    super::ppl::scored_chunks(&model, &tokens, n_ctx, n_chunk, 512, threads, |ci, rows| {
        let first = n_ctx / 2;
        for (k, l) in rows.iter().enumerate() {
            let logp = read_record(&mut r, &mut rec, base, n_vocab)?;
            let y = tokens[ci * n_ctx + first + k + 1] as usize;
            sums.add(l, &logp, y);
        }
        progress(ci + 1, n_chunk);
        Ok(())
    })?;
    Ok(sums.result(n_chunk, n_ctx, load_ms))
}

/// An open `_logits_` base file: its header and tokens read, positioned at the first record.
struct BaseFile {
    r: BufReader<std::fs::File>,
    n_ctx: usize,
    n_vocab: usize,
    n_chunk: usize,
    tokens: Vec<i32>,
}

/// Opens the base file and reads its magic, header and tokens.
fn open_base(base: &Path) -> Result<BaseFile> {
    crate::paths::ensure_regular_file(base)?;
    let f =
        std::fs::File::open(base).with_context(|| format!("{}: cannot open", base.display()))?;
    let mut r = BufReader::new(f);
    let mut magic = [0u8; 8];
    r.read_exact(&mut magic)
        .with_context(|| format!("{}: truncated header", base.display()))?;
    if &magic != MAGIC {
        bail!(
            "{}: not a llama-perplexity logits file (magic {:?})",
            base.display(),
            magic
        );
    }
    let mut i32s = |n: usize| -> Result<Vec<i32>> {
        let mut b = vec![0u8; 4 * n];
        r.read_exact(&mut b)
            .with_context(|| format!("{}: truncated", base.display()))?;
        Ok(b.chunks_exact(4)
            .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect())
    };
    let h = i32s(3)?;
    let (n_ctx, n_vocab, n_chunk) = (h[0] as usize, h[1] as usize, h[2] as usize);
    if n_ctx < 2 || n_vocab == 0 || n_chunk == 0 || n_ctx * n_chunk > 1 << 28 {
        bail!(
            "{}: implausible header n_ctx={n_ctx} n_vocab={n_vocab} n_chunk={n_chunk}",
            base.display()
        );
    }
    let tokens = i32s(n_ctx * n_chunk)?;
    Ok(BaseFile {
        r,
        n_ctx,
        n_vocab,
        n_chunk,
        tokens,
    })
}

/// Reads the next record into `rec` and decodes it into the base log-probabilities.
fn read_record(
    r: &mut BufReader<std::fs::File>,
    rec: &mut [u8],
    base: &Path,
    n_vocab: usize,
) -> Result<Vec<f32>> {
    r.read_exact(rec)
        .with_context(|| format!("{}: truncated records", base.display()))?;
    let q16: Vec<u16> = rec
        .chunks_exact(2)
        .map(|c| u16::from_le_bytes([c[0], c[1]]))
        .collect();
    Ok(decode_record(&q16, n_vocab))
}

/// The compare run's running sums over scored positions, and every position's KLD.
#[derive(Default)]
struct Sums {
    s_nll: f64,
    s_nll2: f64,
    s_b: f64,
    s_b2: f64,
    s_kld: f64,
    s_kld2: f64,
    s_dp2: f64,
    n_same: usize,
    count: usize,
    klds: Vec<f32>,
}

impl Sums {
    /// Adds one position: current logits `l`, base log-probabilities `logp`, next token `y`.
    fn add(&mut self, l: &[f32], logp: &[f32], y: usize) {
        let m = l.iter().fold(f32::NEG_INFINITY, |a, v| a.max(*v));
        let imax = l.iter().position(|v| *v == m).unwrap_or(0);
        let lse = (l.iter().map(|v| (v - m).exp() as f64).sum::<f64>().ln()) as f32;
        let nll = (m + lse - l[y]) as f64;
        let nll_b = -(logp[y] as f64);
        let bmax = logp.iter().fold(f32::NEG_INFINITY, |a, v| a.max(*v));
        let imax_b = logp.iter().position(|v| *v == bmax).unwrap_or(0);
        let mut kld = 0f64;
        for (lp, lq) in logp.iter().zip(l) {
            if *lp > -16.0 {
                let log_q = lq - m - lse;
                kld += (*lp as f64).exp() * (*lp as f64 - log_q as f64);
            }
        }
        let dp = (-nll).exp() - (-nll_b).exp();
        self.s_nll += nll;
        self.s_nll2 += nll * nll;
        self.s_b += nll_b;
        self.s_b2 += nll_b * nll_b;
        self.s_kld += kld;
        self.s_kld2 += kld * kld;
        self.s_dp2 += dp * dp;
        self.n_same += (imax == imax_b) as usize;
        self.count += 1;
        self.klds.push(kld as f32);
    }

    /// The final statistics (llama-perplexity's final block).
    fn result(mut self, n_chunk: usize, n_ctx: usize, load_ms: f64) -> KldResult {
        let klds = &mut self.klds;
        let n = self.count as f64;
        let (mq, _) = mu(self.s_nll, self.s_nll2, n);
        let (mb, _) = mu(self.s_b, self.s_b2, n);
        let (mk, uk) = mu(self.s_kld, self.s_kld2, n);
        let p = self.n_same as f64 / n;
        klds.sort_by(|a, b| a.total_cmp(b));
        let median = if klds.len().is_multiple_of(2) {
            0.5 * (klds[klds.len() / 2] as f64 + klds[klds.len() / 2 - 1] as f64)
        } else {
            klds[klds.len() / 2] as f64
        };
        KldResult {
            ppl_q: mq.exp(),
            ppl_base: mb.exp(),
            mean_kld: mk,
            mean_kld_unc: uk,
            max_kld: *klds.last().unwrap_or(&0.0) as f64,
            median_kld: median,
            kld_99: percentile(klds, 0.99),
            same_top_p: p,
            same_top_p_unc: (p * (1.0 - p) / (n - 1.0)).sqrt(),
            rms_dp: (self.s_dp2 / n).sqrt(),
            positions: self.count,
            chunks: n_chunk,
            n_ctx,
            load_ms,
        }
    }
}
