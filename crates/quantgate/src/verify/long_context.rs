//! Gate 2 at long context. Llama 3's RoPE scaling (`rope_freqs.weight`) changes only the
//! frequencies whose wavelength exceeds `original_context / high_freq_factor`, most of all those
//! beyond `original_context / low_freq_factor`; at the ≤ 512 tokens of the fixed texts a wrong
//! factor hardly moves the logits (measured on the seeded Llama 3.2 fixture: every factor 1
//! instead of the published ones, min cosine 0.9999988). So a model with such scaling is also
//! judged, with the same thresholds, on the positions past that wavelength of one sequence
//! [`SCORED`] tokens longer than it.

use anyhow::Result;
use serde::{Deserialize, Serialize};

use super::{corpus, logits};
use crate::threads::Threads;

/// How the note on LongRoPE's long/short switch begins (`verify` notes; the model card lists
/// it under what was not verified).
pub const LONGROPE_NOTE: &str = "LongRoPE:";

/// Positions scored past the wavelength.
pub const SCORED: usize = 256;

/// The longest sequence the check runs (tokens): the reference's memory and time grow with
/// it; Llama 3.x needs 8448.
pub const LIMIT: usize = 65536;

/// What a long-context measurement ran on and what it measured.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct LongContext {
    /// Tokens in the sequence (the llama.cpp context is this long).
    pub n_tokens: usize,
    /// The first position scored: the wavelength, rounded up.
    pub first_scored: usize,
    /// Where the length comes from, e.g. `rope_type llama3: original_max_position_embeddings
    /// 8192 / low_freq_factor 1`.
    pub why: String,
    /// The logits of positions `first_scored..n_tokens`, judged by the logits thresholds.
    pub logits: logits::LogitsReport,
}

/// The long sequence a config's RoPE needs: `(first scored position, n_tokens, why)`, or `None`
/// when its RoPE has no long-range scaling.
///
/// Errors: RoPE fields that cannot be read (naming config.json and the field).
pub fn plan(config: &serde_json::Value) -> Result<Option<(usize, usize, String)>> {
    let Some(l) = crate::source::rope::read(config)?.llama3 else {
        return Ok(None);
    };
    let why = format!(
        "rope_type llama3: original_max_position_embeddings {} / low_freq_factor {}",
        l.original_context, l.low_freq_factor
    );
    let wavelength = l.low_freq_wavelength().ceil();
    if wavelength.is_nan() || wavelength + SCORED as f64 > LIMIT as f64 {
        anyhow::bail!(
            "config.json: {why} = {wavelength} tokens: the long-context check is limited to {LIMIT} tokens"
        );
    }
    let first = wavelength as usize;
    Ok(Some((first, first + SCORED, why)))
}

/// `n` token ids of text: the built-in corpus, the first text with the tokenizer's special
/// tokens and the rest without, cycled until `n` ids.
///
/// Errors: the tokenizer fails, or yields no ids.
pub fn ids(hf: &reference::tokenizer::HfTokenizer, n: usize) -> Result<Vec<u32>> {
    let mut out = hf.encode(corpus::TOKENIZER_CORPUS[0], true)?;
    let mut cycle = Vec::new();
    for t in corpus::TOKENIZER_CORPUS {
        cycle.extend(hf.encode(&format!("{t}\n\n"), false)?);
    }
    if cycle.is_empty() {
        anyhow::bail!("the tokenizer gives no ids for the built-in corpus");
    }
    out.extend(cycle.iter().cycle().take(n.saturating_sub(out.len())));
    out.truncate(n);
    Ok(out)
}

/// Measures the long-context logits of `model` against `reference`, when the config asks for
/// it ([`plan`]).
///
/// Errors: as [`plan`], [`ids`] and [`logits::check_tail`].
pub fn check(
    config: &serde_json::Value,
    llama: super::sliced::Runner,
    reference: &reference::decoder::Decoder,
    hf: &reference::tokenizer::HfTokenizer,
    threads: Threads,
) -> Result<Option<LongContext>> {
    let Some((first, n, why)) = plan(config)? else {
        return Ok(None);
    };
    let ids = ids(hf, n)?;
    let logits = logits::check_tail(llama, reference, &ids, first, threads)?;
    Ok(Some(LongContext {
        n_tokens: n,
        first_scored: first,
        why,
        logits,
    }))
}
