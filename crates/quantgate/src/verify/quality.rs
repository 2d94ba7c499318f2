//! Quality against the source, for lossy (block-quantized) files: llama.cpp running the file as
//! shipped against the reference on the original HF weights. Always reported; judged only
//! against a budget the protocol declared for the file's ftype before measuring
//! (`[budget.Q4_K_M] max_mean_kld = …, min_same_top_p = …, max_ppl_ratio = …`). An exceeded
//! or unmeasured budget item is a blocker naming it.

use std::path::Path;

use anyhow::Result;
use serde::{Deserialize, Serialize};

use super::logits::LogitsReport;
use super::outcome::{Blocker, BlockerCode};
use crate::threads::Threads;

/// Tokens per chunk of the PPL slice.
pub const PPL_CTX: usize = 512;
/// Chunks of the PPL slice: the first 4 × 512 tokens of the text, as llama-perplexity chunks it.
pub const PPL_CHUNKS: usize = 4;

/// A quality budget for one ftype, from a protocol.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Budget {
    /// The ftype it applies to (`Q4_K_M`).
    pub ftype: String,
    /// Highest mean KLD (reference ‖ file), nats.
    pub max_mean_kld: Option<f64>,
    /// Lowest fraction of positions with the same top token.
    pub min_same_top_p: Option<f64>,
    /// Highest PPL(file) / PPL(reference) on the PPL slice.
    pub max_ppl_ratio: Option<f64>,
}

/// PPL of both sides on the same slice.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct QualityPpl {
    /// The text file.
    pub text: String,
    /// Tokens per chunk and chunks scored.
    pub n_ctx: usize,
    /// Chunks scored.
    pub chunks: usize,
    /// llama.cpp on the file as shipped (llama-perplexity's method).
    #[serde(deserialize_with = "crate::serde_nan::f64")]
    pub file_ppl: f64,
    /// The reference on the HF weights, same chunks.
    #[serde(deserialize_with = "crate::serde_nan::f64")]
    pub reference_ppl: f64,
    /// file / reference.
    #[serde(deserialize_with = "crate::serde_nan::f64")]
    pub ratio: f64,
}

/// The quality section of a report.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Quality {
    /// The file's ftype name (`Q4_K_M`), from `general.file_type`.
    pub ftype: String,
    /// Logits of the file as shipped against the reference on the HF weights (mean KLD, same
    /// top p = `top1_agreement`, p99 KLD, RMS Δp).
    pub logits: LogitsReport,
    /// PPL of both on the slice, when a text was given.
    pub ppl: Option<QualityPpl>,
    /// The declared budget, if any ("not declared (reported only)" otherwise).
    pub budget: Option<Budget>,
}

/// PPL of the file (llama.cpp, `file` loaded from `gguf`) and of the HF source (`reference`
/// with the source's tokenizer `tok`) on the first [`PPL_CHUNKS`] × [`PPL_CTX`] tokens of
/// `text`. Both models are the ones Gate 2 already holds: nothing is loaded again.
///
/// Errors: unreadable text, too few tokens, a failed forward.
pub fn ppl_pair(
    file: &llama_runtime::Model,
    gguf: &Path,
    tok: &reference::tokenizer::HfTokenizer,
    reference: &reference::decoder::Decoder,
    hf_dir: &Path,
    text: &Path,
    threads: Threads,
) -> Result<QualityPpl> {
    let body = crate::eval::ppl::read_text(text)?;
    let params = crate::eval::ppl::PplParams {
        n_ctx: PPL_CTX as u32,
        chunks: Some(PPL_CHUNKS),
        threads,
        n_ubatch: PPL_CTX as u32,
    };
    let file_ppl = crate::eval::ppl::perplexity_of(file, gguf, 0.0, &body, &params, |_, _, _| {})?;
    let bos = file.add_bos().then(|| file.bos() as u32);
    let reference = crate::eval::ref_ppl::reference_perplexity_of(
        tok,
        reference,
        hf_dir,
        &body,
        PPL_CTX,
        PPL_CHUNKS,
        bos,
        |_, _| {},
    )?;
    Ok(QualityPpl {
        text: text.display().to_string(),
        n_ctx: PPL_CTX,
        chunks: file_ppl.chunks,
        file_ppl: file_ppl.ppl,
        reference_ppl: reference.ppl,
        ratio: file_ppl.ppl / reference.ppl,
    })
}

/// Judges `q` against its budget: each declared item measured and within it, else a Gate 2
/// `quality-budget` blocker naming `budget.FTYPE.ITEM`.
pub fn judge(q: &Quality, blockers: &mut Vec<Blocker>) {
    let Some(b) = &q.budget else { return };
    let rows = [
        (
            "max_mean_kld",
            b.max_mean_kld,
            Some(q.logits.mean_kld),
            true,
        ),
        (
            "min_same_top_p",
            b.min_same_top_p,
            Some(q.logits.top1_agreement),
            false,
        ),
        (
            "max_ppl_ratio",
            b.max_ppl_ratio,
            q.ppl.as_ref().map(|p| p.ratio),
            true,
        ),
    ];
    for (name, limit, measured, at_most) in rows {
        let Some(limit) = limit else { continue };
        let subject = format!("budget.{}.{name}", b.ftype);
        let detail = match measured {
            None => Some("declared but not measured (verify --ppl-text FILE)".to_string()),
            Some(m) if !m.is_finite() => Some(format!("measured {m}")),
            Some(m) if at_most && m > limit => Some(format!("measured {m:.6} > {limit}")),
            Some(m) if !at_most && m < limit => Some(format!("measured {m:.6} < {limit}")),
            Some(_) => None,
        };
        if let Some(d) = detail {
            blockers.push(Blocker::new(BlockerCode::QualityBudget, &subject, d));
        }
    }
}

/// The section as text lines (terminal and report.md share them).
pub fn lines(q: &Quality) -> Vec<String> {
    let l = &q.logits;
    let mut out = vec![format!(
        "quality against the source ({}; the file as shipped vs the reference on the HF weights): mean KLD {:.6}, same top p {:.4}, p99 KLD {:.6}, RMS Δp {:.4}, min cosine {:.6} ({} positions)",
        q.ftype, l.mean_kld, l.top1_agreement, l.p99_kld, l.rms_dp, l.min_cosine, l.positions
    )];
    out.push(match &q.ppl {
        Some(p) => format!(
            "quality PPL ({} × {} tokens of {}): file {:.4}, reference {:.4}, ratio {:.4}",
            p.chunks, p.n_ctx, p.text, p.file_ppl, p.reference_ppl, p.ratio
        ),
        None => "quality PPL: not measured (verify --ppl-text FILE)".into(),
    });
    out.push(match &q.budget {
        None => format!(
            "quality budget: not declared for {} (reported only)",
            q.ftype
        ),
        Some(b) => {
            let items: Vec<String> = [
                ("max_mean_kld", b.max_mean_kld),
                ("min_same_top_p", b.min_same_top_p),
                ("max_ppl_ratio", b.max_ppl_ratio),
            ]
            .iter()
            .filter_map(|(n, v)| v.map(|v| format!("{n} = {v}")))
            .collect();
            format!("quality budget [budget.{}]: {}", b.ftype, items.join(", "))
        }
    });
    out
}
