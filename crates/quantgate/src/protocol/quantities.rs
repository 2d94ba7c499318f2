//! The quantities a run reports, and how two runs' values of one are compared.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::Tolerances;

/// How a quantity is compared across runs (`[tolerances]`).
#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// |Q2 − Q1| / |Q1|.
    NonDelta,
    /// |D2 − D1| / |B1| with B1 the run-1 value of `baseline`.
    Delta,
    /// |R2 − R1| / |R1|.
    Ratio,
    /// Shown with its spread, not judged (absolute throughput: the ratio is judged instead).
    Reported,
}

/// Which part of the decision a quantity belongs to.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Class {
    /// Model quality and file identity: PPL, acc_norm, KLD, same top p, deltas, file bytes,
    /// verify results.
    Quality,
    /// Resources and speed: throughput ratios, load time, peak RSS.
    Performance,
}

/// One reported value.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
pub struct Quantity {
    pub value: f64,
    pub kind: Kind,
    pub class: Class,
    /// Unit, e.g. `PPL`, `%`, `nats`, `t/s`, `KiB`, `ms`, `bytes`.
    pub unit: String,
    /// Sample standard deviation where the value is a mean of replicates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spread: Option<f64>,
    /// For `Delta`: the name of the baseline quantity (B).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baseline: Option<String>,
}

impl Quantity {
    /// A quantity without spread or baseline.
    pub fn new(value: f64, kind: Kind, class: Class, unit: &str) -> Self {
        Quantity {
            value,
            kind,
            class,
            unit: unit.into(),
            spread: None,
            baseline: None,
        }
    }
}

/// Quantities of one model, by name (`ppl[F16]`, `delta_ppl[Q4_K_M]`, …).
pub type Quantities = BTreeMap<String, Quantity>;

/// The kind and class a quantity's name implies (the runner's naming, `NAME[arm]`): `analyze`
/// takes them from here, never from a results file. `None` for a name the runner never writes.
pub fn expected_kind(name: &str) -> Option<(Kind, Class)> {
    let stem = name.split('[').next()?;
    if !name.ends_with(']') {
        return None;
    }
    Some(match stem {
        "ppl"
        | "acc_norm"
        | "mean_kld"
        | "same_top_p"
        | "file_bytes"
        | "verify_go"
        | "logits_min_cosine"
        | "logits_top1_agreement"
        | "logits_mean_kld"
        | "vectors_min_cosine" => (Kind::NonDelta, Class::Quality),
        s if s.starts_with("delta_") => (Kind::Delta, Class::Quality),
        "load_ms" | "peak_rss_kib" => (Kind::NonDelta, Class::Performance),
        s if s.ends_with("_ratio") => (Kind::Ratio, Class::Performance),
        s if s.ends_with("_ts") => (Kind::Reported, Class::Performance),
        _ => return None,
    })
}

/// Relative deviation of run 2 from run 1 under `kind`'s rule; `b1` is the run-1 baseline
/// value for deltas. Equal values deviate 0 (also 0/0); a zero denominator with unequal values
/// deviates +∞; NaN anywhere gives NaN (never within tolerance).
pub fn deviation(kind: Kind, q1: f64, q2: f64, b1: Option<f64>) -> f64 {
    if q1 == q2 {
        return 0.0;
    }
    let den = match kind {
        Kind::Delta => b1.unwrap_or(f64::NAN),
        _ => q1,
    };
    let d = (q2 - q1).abs() / den.abs();
    if den == 0.0 && !d.is_nan() {
        f64::INFINITY
    } else {
        d
    }
}

/// The tolerance of `kind` (`None` for reported-only quantities).
pub fn tolerance(t: &Tolerances, kind: Kind) -> Option<f64> {
    match kind {
        Kind::NonDelta => Some(t.non_delta),
        Kind::Delta => Some(t.delta),
        Kind::Ratio => Some(t.ratio),
        Kind::Reported => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deviation_rules() {
        assert_eq!(
            deviation(Kind::NonDelta, 10.0, 10.3, None),
            0.030000000000000072
        );
        // Delta: |D2 − D1| / |B1|.
        assert!((deviation(Kind::Delta, 1.0, 1.2, Some(20.0)) - 0.01).abs() < 1e-15);
        assert_eq!(deviation(Kind::Ratio, 0.5, 0.5, None), 0.0);
        assert_eq!(deviation(Kind::NonDelta, 0.0, 0.0, None), 0.0);
        assert_eq!(deviation(Kind::NonDelta, 0.0, 1e-9, None), f64::INFINITY);
        assert!(deviation(Kind::Delta, 1.0, 2.0, None).is_nan());
        assert!(deviation(Kind::NonDelta, f64::NAN, 1.0, None).is_nan());
    }
}
