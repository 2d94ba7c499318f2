//! `quantgate imatrix`: the importance matrix of a model over a text, computed as
//! `llama-imatrix` computes it (llama.cpp `tools/imatrix/imatrix.cpp`, the llama-cpp-python
//! 0.3.36 copy built against the llama-cpp-sys-2 =0.1.161 pin) and written in its GGUF format
//! ([`gguf::imatrix`]).
//!
//! The tool's loop: the text read as `-f` reads it (one trailing `\n` dropped), tokenized with
//! add_special = true, parse_special = false; chunks of `n_ctx` tokens, the first token of each
//! replaced by BOS when the vocabulary adds BOS; `n_batch / n_ctx` chunks decoded side by side
//! as sequences of one batch (n_batch 2048, n_ubatch 512, F16 KV cache, `n_seq_max` = that
//! many sequences), every token an output; the statistics gathered by the eval callback
//! ([`llama_runtime::imatrix`]). `imatrix.chunk_size` is `n_ctx`, `imatrix.chunk_count` the
//! largest token count of any weight over `n_ctx`, `imatrix.datasets` the text's path as given.

use std::path::Path;
use std::time::Instant;

use anyhow::{bail, ensure, Context as _, Result};
use gguf::imatrix::{Entry, Format, Imatrix};
use llama_runtime::{Context, ContextParams, Model};
use serde::Serialize;

use crate::threads::Threads;

/// Importance weights per weight name ([`gguf::imatrix::Imatrix::weights`]).
pub type Weights = std::collections::BTreeMap<String, Vec<f32>>;

/// The importance matrix a quantization used, as the report names it.
#[derive(Clone, Debug, Serialize, serde::Deserialize)]
pub struct ImatrixUse {
    /// The path as given (what `quantize.imatrix.file` holds).
    pub file: String,
    /// sha256 of the file (hex).
    pub sha256: String,
    /// `gguf` or `legacy_dat`.
    pub format: String,
    /// `quantize.imatrix.entries_count`, `.chunks_count` and `.dataset`.
    pub entries: usize,
    pub chunks: u32,
    pub dataset: Option<String>,
}

/// An imatrix file read for quantization: what the report names, what llama.cpp gets, and
/// the weights Gate 1 re-makes the tensors with.
pub struct LoadedImatrix {
    /// For the report.
    pub used: ImatrixUse,
    /// For llama_model_quantize.
    pub c: llama_runtime::QuantizeImatrix,
    /// For Gate 1.
    pub weights: Weights,
}

/// Reads `path` with our own imatrix reader ([`gguf::imatrix`]).
///
/// Errors: as [`gguf::imatrix::Imatrix::read`], naming the file and the field.
pub fn load(path: &Path) -> Result<LoadedImatrix> {
    crate::paths::ensure_regular_file(path)?;
    let m = gguf::imatrix::Imatrix::read(path)?;
    let weights = m.weights();
    let file = path.display().to_string();
    let used = ImatrixUse {
        file: file.clone(),
        sha256: crate::hash::sha256_file(path)?,
        format: match m.format {
            gguf::imatrix::Format::Gguf => "gguf",
            gguf::imatrix::Format::LegacyDat => "legacy_dat",
        }
        .into(),
        entries: m.entries.len(),
        chunks: m.chunk_count,
        dataset: m.datasets.first().cloned(),
    };
    let c = llama_runtime::QuantizeImatrix {
        weights: weights
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        file,
        dataset: used.dataset.clone(),
        chunks: m.chunk_count,
    };
    Ok(LoadedImatrix { used, c, weights })
}

/// Settings (llama-imatrix's flags and defaults: `-c 512`, `-b 2048`, `-ub 512`).
#[derive(Clone, Debug, Serialize)]
pub struct ImatrixParams {
    /// Tokens per chunk (`-c`).
    pub n_ctx: usize,
    /// Chunks to process at most (`--chunks`); all the text gives when `None`.
    pub chunks: Option<usize>,
    /// Logical batch (`-b`): a multiple of `n_ctx`; `n_batch / n_ctx` chunks go side by side.
    pub n_batch: usize,
    /// Physical batch (`-ub`).
    pub n_ubatch: usize,
    /// Threads (`-t`).
    pub threads: Threads,
}

impl Default for ImatrixParams {
    fn default() -> Self {
        ImatrixParams {
            n_ctx: 512,
            chunks: None,
            n_batch: 2048,
            n_ubatch: 512,
            threads: Threads::DEFAULT,
        }
    }
}

/// What a run produced.
#[derive(Clone, Debug, Serialize)]
pub struct ImatrixReport {
    /// The model, the text and the output as given.
    pub model: String,
    pub text: String,
    pub output: String,
    /// sha256 of the written file (hex).
    pub output_sha256: String,
    /// Weights with statistics (`quantize.imatrix.entries_count` when it is used).
    pub entries: usize,
    /// `imatrix.chunk_count` and `imatrix.chunk_size`.
    pub chunk_count: u32,
    pub chunk_size: u32,
    /// Tokens in the whole text, and chunks processed.
    pub text_tokens: usize,
    pub chunks: usize,
    /// Settings.
    pub params: ImatrixParams,
    /// Wall time of the decodes, seconds.
    pub seconds: f64,
    /// llama.cpp pin and the CPU backend variant that ran.
    pub runtime: String,
}

/// The chunks of `tokens` as the tool decodes them: `n_chunk` chunks of `n_ctx`, BOS first
/// when `bos` is given.
fn chunks(tokens: &[i32], n_ctx: usize, n_chunk: usize, bos: Option<i32>) -> Vec<Vec<i32>> {
    (0..n_chunk)
        .map(|i| {
            let mut c = tokens[i * n_ctx..(i + 1) * n_ctx].to_vec();
            if let Some(b) = bos {
                c[0] = b;
            }
            c
        })
        .collect()
}

fn check_params(p: &ImatrixParams) -> Result<usize> {
    ensure!(
        p.n_ctx >= 16,
        "-c {}: a chunk needs at least 16 tokens (the tool skips smaller batches)",
        p.n_ctx
    );
    ensure!(
        p.n_batch >= p.n_ctx && p.n_batch.is_multiple_of(p.n_ctx),
        "-b {} must be a multiple of -c {} (chunks go side by side in one batch)",
        p.n_batch,
        p.n_ctx
    );
    ensure!(p.chunks != Some(0), "--chunks 0: nothing to compute");
    Ok(p.n_batch / p.n_ctx)
}

/// Computes the importance matrix of `model_path` over the text at `text_path` and writes it
/// to `output` (GGUF; temp file, renamed when complete). Stops between batches on
/// SIGINT/SIGTERM, leaving nothing at `output`.
///
/// Errors: bad settings, an output that is an input, an unreadable model or text, a
/// vocabulary that adds EOS (the tool asserts on it), fewer than `2·n_ctx` tokens, a failed
/// decode, a graph node the collector cannot read, or a write error naming the path.
pub fn compute(
    model_path: &Path,
    text_path: &Path,
    output: &Path,
    p: &ImatrixParams,
    mut progress: impl FnMut(usize, usize),
) -> Result<ImatrixReport> {
    let n_seq = check_params(p)?;
    crate::paths::ensure_regular_file(model_path)?;
    crate::paths::ensure_output_distinct(output, &[model_path, text_path])?;
    let text = crate::eval::ppl::read_text(text_path)?;
    crate::interrupt::install();
    let model = Model::load(model_path, false)?;
    ensure!(
        !model.add_eos(),
        "{}: the vocabulary adds EOS; llama-imatrix refuses such models",
        model_path.display()
    );
    crate::eval::ppl::check_ctx(&model, model_path, p.n_ctx)?;
    let tokens = model.tokenize(&text, true, false)?;
    if tokens.len() < 2 * p.n_ctx {
        bail!(
            "{}: {} tokens; a context of {} needs at least {}",
            text_path.display(),
            tokens.len(),
            p.n_ctx,
            2 * p.n_ctx
        );
    }
    let n_chunk = p
        .chunks
        .map_or(tokens.len() / p.n_ctx, |c| c.min(tokens.len() / p.n_ctx));
    let bos = model.add_bos().then(|| model.bos());
    let all = chunks(&tokens, p.n_ctx, n_chunk, bos);
    let params = ContextParams {
        n_ctx: (n_seq * p.n_ctx) as u32,
        n_batch: p.n_batch as u32,
        n_ubatch: p.n_ubatch.min(p.n_batch) as u32,
        n_seq_max: n_seq as u32,
        ..ContextParams::logits(p.n_ctx as u32, 512, p.threads.get())
    };
    let mut ctx = Context::with_imatrix(&model, params)?;
    let t0 = Instant::now();
    for (g, group) in all.chunks(n_seq).enumerate() {
        crate::interrupt::check()?;
        let seqs: Vec<&[i32]> = group.iter().map(|c| c.as_slice()).collect();
        ctx.decode_sequences(&seqs)?;
        progress((g * n_seq + group.len()).min(n_chunk), n_chunk);
    }
    let seconds = t0.elapsed().as_secs_f64();
    let log = ctx.take_imatrix();
    if let Some(r) = log.refused {
        bail!(
            "{}: the imatrix collector could not read {r}",
            model_path.display()
        );
    }
    let m = to_imatrix(log.entries, text_path, p.n_ctx)?;
    crate::interrupt::check()?;
    gguf::ensure_replaceable(output)?;
    m.write_gguf(output)?;
    Ok(ImatrixReport {
        model: model_path.display().to_string(),
        text: text_path.display().to_string(),
        output: output.display().to_string(),
        output_sha256: crate::hash::sha256_file(output)?,
        entries: m.entries.len(),
        chunk_count: m.chunk_count,
        chunk_size: m.chunk_size,
        text_tokens: tokens.len(),
        chunks: n_chunk,
        params: p.clone(),
        seconds,
        runtime: llama_runtime::build_info().to_string(),
    })
}

/// The collected statistics as the file the tool writes.
fn to_imatrix(
    entries: std::collections::BTreeMap<String, llama_runtime::imatrix::ImatrixStats>,
    text: &Path,
    n_ctx: usize,
) -> Result<Imatrix> {
    let max = entries
        .values()
        .flat_map(|e| e.counts.iter().copied())
        .max()
        .context("the model has no blk.* matrix multiplications to collect")?;
    Ok(Imatrix {
        datasets: vec![text.display().to_string()],
        chunk_count: (max / n_ctx as i64) as u32,
        chunk_size: n_ctx as u32,
        entries: entries
            .into_iter()
            .map(|(k, e)| {
                let counts = e.counts.iter().map(|c| *c as f32).collect();
                (
                    k,
                    Entry {
                        in_sum2: e.values,
                        counts,
                    },
                )
            })
            .collect(),
        format: Format::Gguf,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_start_with_bos_when_the_vocabulary_adds_it() {
        let t: Vec<i32> = (10..30).collect();
        let c = chunks(&t, 8, 2, Some(1));
        assert_eq!(
            c,
            vec![
                vec![1, 11, 12, 13, 14, 15, 16, 17],
                vec![1, 19, 20, 21, 22, 23, 24, 25]
            ]
        );
        assert_eq!(chunks(&t, 8, 1, None)[0][0], 10);
    }

    #[test]
    fn batches_must_hold_whole_chunks() {
        let p = |n_ctx, n_batch| ImatrixParams {
            n_ctx,
            n_batch,
            ..Default::default()
        };
        assert_eq!(check_params(&p(512, 2048)).unwrap(), 4);
        assert_eq!(check_params(&p(2048, 2048)).unwrap(), 1);
        let e = check_params(&p(768, 2048)).unwrap_err().to_string();
        assert!(e.contains("-b 2048 must be a multiple of -c 768"), "{e}");
        assert!(check_params(&p(8, 2048)).is_err());
    }
}
