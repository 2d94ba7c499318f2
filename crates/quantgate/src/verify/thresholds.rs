//! Thresholds and their judging: declared before anything is measured (built-in, or a
//! protocol's `[thresholds]`), then each measured figure is held against its threshold
//! (`vector_checks`, `logits_checks` → `judge`). `rejudge` does the same for a recorded
//! report (`release --check`).

use serde::{Deserialize, Serialize};

use super::{logits, long_context, quality, vectors, Blocker, BlockerCode, VerifyReport};

/// Thresholds, fixed before anything is measured. Their hash goes into the report.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Thresholds {
    /// Lowest allowed cosine between llama.cpp's and the reference's pooled embeddings.
    #[serde(deserialize_with = "crate::serde_nan::f64")]
    pub min_cosine: f64,
    /// Fraction of retrieval queries whose top-1 document must be identical (1.0 = all).
    #[serde(deserialize_with = "crate::serde_nan::f64")]
    pub min_top1_agreement: f64,
    /// Causal LMs: lowest allowed per-position cosine of the logits.
    #[serde(deserialize_with = "crate::serde_nan::f64")]
    pub min_logits_cosine: f64,
    /// Causal LMs: lowest allowed fraction of positions with the same argmax.
    #[serde(deserialize_with = "crate::serde_nan::f64")]
    pub min_logits_top1_agreement: f64,
    /// Causal LMs: highest allowed mean KL(reference ‖ llama.cpp), nats.
    #[serde(deserialize_with = "crate::serde_nan::f64")]
    pub max_mean_kld: f64,
}

impl Default for Thresholds {
    /// The built-in declaration: embedding cosine ≥ 0.99 with every top-1 identical; logits
    /// cosine ≥ 0.99, argmax agreement ≥ 0.95, mean KLD ≤ 0.01 nats.
    fn default() -> Self {
        Thresholds {
            min_cosine: 0.99,
            min_top1_agreement: 1.0,
            min_logits_cosine: 0.99,
            min_logits_top1_agreement: 0.95,
            max_mean_kld: 0.01,
        }
    }
}

/// The names every protocol must declare under `[thresholds]`.
pub const THRESHOLD_NAMES: &[&str] = &[
    "min_cosine",
    "min_top1_agreement",
    "min_logits_cosine",
    "min_logits_top1_agreement",
    "max_mean_kld",
];

/// How a measured value is held against its threshold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cmp {
    /// Passes when measured ≥ threshold.
    AtLeast,
    /// Passes when measured ≤ threshold.
    AtMost,
}

/// One row of the threshold table.
#[derive(Clone, Debug)]
pub struct ThresholdCheck {
    /// The threshold's name in [`Thresholds`].
    pub name: &'static str,
    /// The blocker raised when it fails.
    pub code: BlockerCode,
    /// The blocker's subject (text, `logits`, `retrieval`).
    pub subject: String,
    /// The measured value.
    pub measured: f64,
    /// How it is compared.
    pub cmp: Cmp,
    /// The declared threshold.
    pub threshold: f64,
    /// The blocker's detail when it fails.
    pub detail: String,
}

impl ThresholdCheck {
    /// Whether the row passes; NaN on either side never passes (an undeclared threshold is NaN).
    pub fn passes(&self) -> bool {
        match self.cmp {
            Cmp::AtLeast => self.measured >= self.threshold,
            Cmp::AtMost => self.measured <= self.threshold,
        }
    }
}

/// The threshold rows of an embedding measurement.
pub fn vector_checks(t: &Thresholds, v: &vectors::VectorReport) -> Vec<ThresholdCheck> {
    let agreement = v.top1_identical as f64 / v.queries as f64;
    vec![
        ThresholdCheck {
            name: "min_cosine",
            code: BlockerCode::VectorsCosine,
            subject: v.worst_text.clone(),
            measured: v.min_cosine,
            cmp: Cmp::AtLeast,
            threshold: t.min_cosine,
            detail: format!(
                "min cosine {:.6} < threshold {}",
                v.min_cosine, t.min_cosine
            ),
        },
        ThresholdCheck {
            name: "min_top1_agreement",
            code: BlockerCode::VectorsTop1,
            subject: "retrieval".into(),
            measured: agreement,
            cmp: Cmp::AtLeast,
            threshold: t.min_top1_agreement,
            detail: format!(
                "{}/{} top-1 identical < threshold {}",
                v.top1_identical, v.queries, t.min_top1_agreement
            ),
        },
    ]
}

/// The threshold rows of a logits measurement.
pub fn logits_checks(t: &Thresholds, l: &logits::LogitsReport) -> Vec<ThresholdCheck> {
    let row = |name, code, measured, cmp, threshold, detail| ThresholdCheck {
        name,
        code,
        subject: "logits".into(),
        measured,
        cmp,
        threshold,
        detail,
    };
    vec![
        row(
            "min_logits_cosine",
            BlockerCode::LogitsCosine,
            l.min_cosine,
            Cmp::AtLeast,
            t.min_logits_cosine,
            format!("min cosine {:.6} < {}", l.min_cosine, t.min_logits_cosine),
        ),
        row(
            "min_logits_top1_agreement",
            BlockerCode::LogitsTop1,
            l.top1_agreement,
            Cmp::AtLeast,
            t.min_logits_top1_agreement,
            format!(
                "argmax agreement {:.4} < {}",
                l.top1_agreement, t.min_logits_top1_agreement
            ),
        ),
        row(
            "max_mean_kld",
            BlockerCode::LogitsKld,
            l.mean_kld,
            Cmp::AtMost,
            t.max_mean_kld,
            format!("mean KLD {:.6} > {}", l.mean_kld, t.max_mean_kld),
        ),
    ]
}

/// The threshold rows of a long-context measurement: the logits thresholds, the subject
/// `long-context logits` and the positions named.
pub fn long_context_checks(t: &Thresholds, lc: &long_context::LongContext) -> Vec<ThresholdCheck> {
    logits_checks(t, &lc.logits)
        .into_iter()
        .map(|mut c| {
            c.subject = "long-context logits".into();
            c.detail = format!(
                "positions {}..{} of {} tokens ({}): {}",
                lc.first_scored, lc.n_tokens, lc.n_tokens, lc.why, c.detail
            );
            c
        })
        .collect()
}

/// The blocker of a MoE logits measurement whose routing differs from the reference's
/// beyond near-ties (fixed rule, [`super::routing::failure`]).
pub fn routing_blocker(l: &logits::LogitsReport) -> Option<Blocker> {
    let why = super::routing::failure(l.routing.as_ref()?)?;
    Some(Blocker::new(
        BlockerCode::ExpertRouting,
        "expert routing",
        why,
    ))
}

/// Evaluates the rows in order; every failing row is a Gate 2 blocker.
/// The threshold-derived blockers a recorded report's own figures give (Gate 1 counts,
/// vectors and logits against its thresholds, quality against its budget): what `release
/// --check` holds a recorded GO against. Measurement-free.
pub fn rejudge(v: &VerifyReport, blockers: &mut Vec<Blocker>) {
    let g = &v.gate1;
    if g.bit_identical != g.tensors || g.metadata_matching != g.metadata_keys {
        blockers.push(Blocker::new(
            BlockerCode::TensorBits,
            "gate1",
            format!(
                "{}/{} tensors and {}/{} metadata keys identical",
                g.bit_identical, g.tensors, g.metadata_matching, g.metadata_keys
            ),
        ));
    }
    if let Some(x) = &v.gate2_vectors {
        judge(vector_checks(&v.thresholds, x), blockers);
    }
    if let Some(l) = &v.gate2_logits {
        judge(logits_checks(&v.thresholds, l), blockers);
        blockers.extend(routing_blocker(l));
    }
    if let Some(lc) = &v.gate2_long_context {
        judge(long_context_checks(&v.thresholds, lc), blockers);
    }
    if let Some(q) = &v.quality {
        quality::judge(q, blockers);
    }
}

pub(super) fn judge(checks: Vec<ThresholdCheck>, blockers: &mut Vec<Blocker>) {
    for c in checks {
        if !c.passes() {
            blockers.push(Blocker::new(c.code, &c.subject, c.detail));
        }
    }
}
