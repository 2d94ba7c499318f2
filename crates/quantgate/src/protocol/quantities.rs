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

/// How a stem is matched against a quantity's name (the part before `[`).
#[derive(Clone, Copy, Debug)]
enum Stem {
    /// The whole stem.
    Exact(&'static str),
    /// Stems starting with it (`delta_ppl`).
    Prefix(&'static str),
    /// Stems ending with it (`pp512_ratio`, `tg128_ts`).
    Suffix(&'static str),
}

/// Every quantity the runner writes, `STEM[label]`, with its kind, class and unit: the one
/// table [`quantity`] (the runner) and [`expected_kind`] (`analyze`) share. First match wins.
const TABLE: &[(Stem, Kind, Class, &str)] = {
    use Class::*;
    use Kind::*;
    use Stem::*;
    &[
        (Exact("ppl"), NonDelta, Quality, "PPL"),
        (Exact("acc_norm"), NonDelta, Quality, "%"),
        (Exact("mean_kld"), NonDelta, Quality, "nats"),
        (Exact("same_top_p"), NonDelta, Quality, "%"),
        (Exact("file_bytes"), NonDelta, Quality, "bytes"),
        (Exact("verify_go"), NonDelta, Quality, "1 = GO"),
        (Exact("logits_min_cosine"), NonDelta, Quality, "cosine"),
        (
            Exact("logits_top1_agreement"),
            NonDelta,
            Quality,
            "fraction",
        ),
        (Exact("logits_mean_kld"), NonDelta, Quality, "nats"),
        (Exact("vectors_min_cosine"), NonDelta, Quality, "cosine"),
        // The unit of a delta is its measurement's (delta_ppl: PPL); see `quantity`.
        (Prefix("delta_"), Delta, Quality, ""),
        (Exact("load_ms"), NonDelta, Performance, "ms"),
        (Exact("peak_rss_kib"), NonDelta, Performance, "KiB"),
        (Suffix("_ratio"), Ratio, Performance, "ratio"),
        (Suffix("_ts"), Reported, Performance, "t/s"),
    ]
};

fn lookup(stem: &str) -> Option<(Kind, Class, &'static str)> {
    TABLE.iter().find_map(|(s, k, c, u)| {
        let hit = match s {
            Stem::Exact(x) => stem == *x,
            Stem::Prefix(x) => stem.starts_with(x),
            Stem::Suffix(x) => stem.ends_with(x),
        };
        hit.then_some((*k, *c, *u))
    })
}

/// The quantity name `STEM[label]` (`ppl[F16]`, `peak_rss_kib[ppl,F16]`, `pp512_ratio[Q4_K_M/F16]`).
pub fn name(stem: &str, label: &str) -> String {
    format!("{stem}[{label}]")
}

/// A quantity of `stem` with `value`, its kind, class and unit from the table (a delta takes
/// its measurement's unit).
///
/// Panics on a stem the table does not hold: that is a bug in the runner, which only writes
/// stems listed here.
pub fn quantity(stem: &str, value: f64) -> Quantity {
    let (kind, class, unit) =
        lookup(stem).unwrap_or_else(|| panic!("quantity stem {stem:?} is not in the table"));
    let unit = match stem.strip_prefix("delta_") {
        Some(base) if kind == Kind::Delta => lookup(base).map_or(unit, |x| x.2),
        _ => unit,
    };
    Quantity::new(value, kind, class, unit)
}

/// The kind and class a quantity's name implies (the runner's naming, `NAME[arm]`): `analyze`
/// takes them from here, never from a results file. `None` for a name the runner never writes.
pub fn expected_kind(name: &str) -> Option<(Kind, Class)> {
    let stem = name.split('[').next()?;
    if !name.ends_with(']') {
        return None;
    }
    lookup(stem).map(|(k, c, _)| (k, c))
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

    #[test]
    fn names_kinds_and_units_from_one_table() {
        assert_eq!(name("ppl", "F16"), "ppl[F16]");
        assert_eq!(
            expected_kind("ppl[F16]"),
            Some((Kind::NonDelta, Class::Quality))
        );
        assert_eq!(
            expected_kind("delta_acc_norm[Q4_K_M]"),
            Some((Kind::Delta, Class::Quality))
        );
        assert_eq!(
            expected_kind("pp512_ratio[Q4_K_M/F16]"),
            Some((Kind::Ratio, Class::Performance))
        );
        assert_eq!(
            expected_kind("tg128_ts[F16]"),
            Some((Kind::Reported, Class::Performance))
        );
        assert_eq!(
            expected_kind("peak_rss_kib[ppl,F16]"),
            Some((Kind::NonDelta, Class::Performance))
        );
        assert_eq!(expected_kind("ppl"), None);
        assert_eq!(expected_kind("bogus[F16]"), None);
        assert_eq!(quantity("delta_ppl", 1.0).unit, "PPL");
        assert_eq!(quantity("delta_acc_norm", 1.0).unit, "%");
        assert_eq!(quantity("verify_go", 1.0).unit, "1 = GO");
    }
}
