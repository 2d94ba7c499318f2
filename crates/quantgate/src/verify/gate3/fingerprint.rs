//! What Gate 3 re-measures on a released GGUF: llama.cpp's discrete outputs on fixed inputs.
//! A causal LM gives its argmax token at every position of the built-in corpus (tokenized by
//! the file's own vocabulary, add_special on, parse_special off, up to 512 tokens per text); an
//! embedding model gives its top-1 document for every retrieval query. Measured on the input
//! file that `verify` judged and again on the copy in the release folder, the two must be
//! identical: the same bytes under the same runtime give the same outputs, so any difference
//! means the shipped bytes, or how they load, are not what was verified.

use std::path::Path;

use anyhow::{Context as _, Result};
use llama_runtime::{Context, ContextParams, Model};
use serde::{Deserialize, Serialize};

use crate::threads::Threads;
use crate::verify::{corpus, vectors};

/// Which output a fingerprint holds.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    /// Argmax token id at each position (position 0 included), texts in corpus order.
    Argmax,
    /// Top-1 document index per retrieval query.
    Top1,
}

/// llama.cpp's outputs on the fixed inputs.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Fingerprint {
    /// What `values` are.
    pub kind: Kind,
    /// The outputs, in order.
    pub values: Vec<u32>,
}

/// Measures `gguf` with `threads` llama.cpp threads.
///
/// Errors: llama.cpp cannot load the file or run it (the error names the file).
pub fn measure(gguf: &Path, kind: Kind, threads: Threads) -> Result<Fingerprint> {
    let model = Model::load(gguf, false).with_context(|| format!("{}", gguf.display()))?;
    let values = match kind {
        Kind::Argmax => argmax(&model, threads)?,
        Kind::Top1 => {
            let params = ContextParams::embeddings(512, threads.get());
            let (q, d) = vectors::embed_retrieval(&model, &params)?;
            q.iter().map(|x| vectors::top1(x, &d) as u32).collect()
        }
    };
    Ok(Fingerprint { kind, values })
}

fn argmax(model: &Model, threads: Threads) -> Result<Vec<u32>> {
    let mut ctx = Context::new(model, ContextParams::logits(512, 512, threads.get()))?;
    let mut out = Vec::new();
    for t in corpus::TOKENIZER_CORPUS {
        let ids = model.tokenize(t, true, false)?;
        if ids.is_empty() || ids.len() > 512 {
            continue;
        }
        for row in ctx.logits_from(&ids, 0)? {
            let best = row
                .iter()
                .enumerate()
                .fold(
                    (0, f32::NEG_INFINITY),
                    |b, (i, v)| if *v > b.1 { (i, *v) } else { b },
                );
            out.push(best.0 as u32);
        }
    }
    Ok(out)
}

/// The first index where `a` and `b` differ (or the shorter length), if they do.
pub fn first_difference(a: &Fingerprint, b: &Fingerprint) -> Option<usize> {
    if a == b {
        return None;
    }
    Some(
        a.values
            .iter()
            .zip(&b.values)
            .position(|(x, y)| x != y)
            .unwrap_or(a.values.len().min(b.values.len())),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_difference_is_found_or_none() {
        let f = |v: &[u32]| Fingerprint {
            kind: Kind::Argmax,
            values: v.to_vec(),
        };
        assert_eq!(first_difference(&f(&[1, 2, 3]), &f(&[1, 2, 3])), None);
        assert_eq!(first_difference(&f(&[1, 2, 3]), &f(&[1, 5, 3])), Some(1));
        assert_eq!(first_difference(&f(&[1, 2]), &f(&[1, 2, 3])), Some(2));
    }
}
