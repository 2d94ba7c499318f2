//! What a protocol declares for `verify` before anything is measured: `[thresholds]` and
//! `[budget.FTYPE]`, typed (serde, unknown names refused) and range-checked here for both
//! `verify --protocol` and the protocol's own validation. A value that could never bind (NaN,
//! out of range, an unknown name or ftype) is refused, never measured against.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context as _, Result};
use serde::{Deserialize, Serialize};

use super::outcome::{Blocker, BlockerCode};
use super::quality::Budget;
use super::thresholds::Thresholds;

/// `[thresholds]` as declared: the five names of [`Thresholds`], each optional here (an
/// undeclared one is a blocker in `verify`, an error in a protocol with a verify step).
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct DeclaredThresholds {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_cosine: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_top1_agreement: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_logits_cosine: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_logits_top1_agreement: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_mean_kld: Option<f64>,
}

impl DeclaredThresholds {
    /// Each threshold's name (as [`super::THRESHOLD_NAMES`]) and declared value.
    pub fn items(&self) -> [(&'static str, Option<f64>); 5] {
        [
            ("min_cosine", self.min_cosine),
            ("min_top1_agreement", self.min_top1_agreement),
            ("min_logits_cosine", self.min_logits_cosine),
            ("min_logits_top1_agreement", self.min_logits_top1_agreement),
            ("max_mean_kld", self.max_mean_kld),
        ]
    }

    /// One problem per declared value out of range (cosines and agreements in [0, 1], KLD a
    /// finite number ≥ 0), and, with `all_required`, per undeclared name.
    pub fn problems(&self, all_required: bool) -> Vec<String> {
        let mut out = Vec::new();
        for (name, v) in self.items() {
            let ok = match v {
                Some(x) if name == "max_mean_kld" => x.is_finite() && x >= 0.0,
                Some(x) => (0.0..=1.0).contains(&x),
                None => !all_required,
            };
            if !ok {
                out.push(format!(
                    "thresholds.{name}: {} is not a number in range (cosines and agreements in [0, 1], KLD ≥ 0)",
                    v.map_or("undeclared".to_string(), |x| x.to_string())
                ));
            }
        }
        out
    }

    /// The thresholds to judge by. An undeclared one is a [`BlockerCode::ThresholdUndeclared`]
    /// blocker naming `path` (and NaN, which nothing passes), never a default.
    pub fn resolve(&self, path: &Path, blockers: &mut Vec<Blocker>) -> Thresholds {
        let mut get = |(name, v): (&str, Option<f64>)| -> f64 {
            v.unwrap_or_else(|| {
                blockers.push(Blocker::new(
                    BlockerCode::ThresholdUndeclared,
                    name,
                    format!("{} does not declare thresholds.{name}; thresholds are fixed before measuring, never defaulted", path.display()),
                ));
                f64::NAN
            })
        };
        let [a, b, c, d, e] = self.items();
        Thresholds {
            min_cosine: get(a),
            min_top1_agreement: get(b),
            min_logits_cosine: get(c),
            min_logits_top1_agreement: get(d),
            max_mean_kld: get(e),
        }
    }
}

/// One `[budget.FTYPE]` table as declared: only the three items, each optional.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct BudgetTable {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_mean_kld: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_same_top_p: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_ppl_ratio: Option<f64>,
}

/// `[budget]`: one table per llama.cpp file type name.
pub type Budgets = BTreeMap<String, BudgetTable>;

/// Every budget, each checked so that it can bind: FTYPE a llama.cpp file type name
/// (`Q4_K_M`), at least one item declared, each a finite number in range (mean KLD ≥ 0, same
/// top p in [0, 1], PPL ratio > 0).
///
/// Errors: every problem, each naming `budget.FTYPE.ITEM`.
pub fn check_budgets(budgets: &Budgets) -> std::result::Result<Vec<Budget>, Vec<String>> {
    let mut problems = Vec::new();
    let mut out = Vec::new();
    for (ftype, b) in budgets {
        if gguf::LlamaFtype::by_name(ftype).is_none() {
            problems.push(format!(
                "budget.{ftype}: not a llama.cpp file type (e.g. Q4_K_M, Q8_0)"
            ));
            continue;
        }
        let items = [
            ("max_mean_kld", b.max_mean_kld, 0.0, f64::INFINITY, "≥ 0"),
            ("min_same_top_p", b.min_same_top_p, 0.0, 1.0, "in [0, 1]"),
            (
                "max_ppl_ratio",
                b.max_ppl_ratio,
                f64::MIN_POSITIVE,
                f64::INFINITY,
                "> 0",
            ),
        ];
        if items.iter().all(|(_, x, ..)| x.is_none()) {
            problems.push(format!("budget.{ftype}: declares no item"));
        }
        for (k, x, lo, hi, range) in items {
            if let Some(x) = x.filter(|x| !(x.is_finite() && *x >= lo && *x <= hi)) {
                problems.push(format!(
                    "budget.{ftype}.{k}: {x} is not a finite number {range}"
                ));
            }
        }
        out.push(Budget {
            ftype: ftype.clone(),
            max_mean_kld: b.max_mean_kld,
            min_same_top_p: b.min_same_top_p,
            max_ppl_ratio: b.max_ppl_ratio,
        });
    }
    if problems.is_empty() {
        Ok(out)
    } else {
        Err(problems)
    }
}

/// The verify part of a protocol file: `[thresholds]` and `[budget]` (other sections are the
/// protocol's and ignored here).
#[derive(Clone, Debug, Default, Deserialize)]
pub struct Declarations {
    pub thresholds: Option<DeclaredThresholds>,
    pub budget: Option<Budgets>,
    /// `[stress]`: Gate 2's generated tokenizer cases; the built-in declaration when absent.
    pub stress: Option<super::stress_gate::StressDeclaration>,
}

impl Declarations {
    /// Reads `path`, refusing any threshold or budget that could never bind.
    ///
    /// Errors: an unreadable file, invalid TOML, an unknown threshold or budget item, or a
    /// value out of range (each naming the file and the key).
    pub fn read(path: &Path) -> Result<Declarations> {
        crate::paths::ensure_regular_file(path)?;
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("{}: cannot read protocol", path.display()))?;
        let d: Declarations = toml::from_str(&text)
            .with_context(|| format!("{}: invalid protocol", path.display()))?;
        let mut problems = d.thresholds.clone().unwrap_or_default().problems(false);
        if let Some(b) = &d.budget {
            problems.extend(check_budgets(b).err().unwrap_or_default());
        }
        if let Some(s) = &d.stress {
            problems.extend(s.problems());
        }
        anyhow::ensure!(
            problems.is_empty(),
            "{}: {}",
            path.display(),
            problems.join("; ")
        );
        Ok(d)
    }

    /// The declared budget of `ftype`, if any.
    pub fn budget_for(&self, ftype: &str) -> Option<Budget> {
        let b = self.budget.as_ref()?.get(ftype)?;
        Some(Budget {
            ftype: ftype.to_string(),
            max_mean_kld: b.max_mean_kld,
            min_same_top_p: b.min_same_top_p,
            max_ppl_ratio: b.max_ppl_ratio,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> std::result::Result<Vec<Budget>, Vec<String>> {
        let d: Declarations = toml::from_str(text).map_err(|e| vec![e.to_string()])?;
        check_budgets(&d.budget.unwrap_or_default())
    }

    #[test]
    fn budgets_that_cannot_bind_are_refused_by_name() {
        let ok = parse("[budget.Q4_K_M]\nmax_mean_kld = 0.1\nmax_ppl_ratio = 1.1\n").unwrap();
        assert_eq!(ok[0].max_ppl_ratio, Some(1.1));
        assert_eq!(ok[0].min_same_top_p, None);
        for (text, want) in [
            (
                "[budget.Q4_K_M]\nmax_ppl_ratio = nan\n",
                "budget.Q4_K_M.max_ppl_ratio: NaN",
            ),
            (
                "[budget.Q4_K_M]\nmax_mean_kld = -0.1\n",
                "budget.Q4_K_M.max_mean_kld: -0.1",
            ),
            (
                "[budget.Q4_K_M]\nmin_same_top_p = 1.5\n",
                "budget.Q4_K_M.min_same_top_p: 1.5",
            ),
            (
                "[budget.Q4_K_M]\nmax_kld = 0.1\n",
                "unknown field `max_kld`",
            ),
            (
                "[budget.Q4_K_X]\nmax_mean_kld = 0.1\n",
                "budget.Q4_K_X: not a llama.cpp file type",
            ),
            ("[budget.Q8_0]\n", "budget.Q8_0: declares no item"),
        ] {
            let e = parse(text).unwrap_err().join("; ");
            assert!(e.contains(want), "{text}: {e}");
        }
    }

    #[test]
    fn thresholds_are_typed_and_range_checked() {
        let d: Declarations =
            toml::from_str("[thresholds]\nmin_cosine = 1\nmax_mean_kld = 0.01\n").unwrap();
        let t = d.thresholds.unwrap();
        // An integer is a number: 1 is a valid cosine threshold.
        assert_eq!(t.min_cosine, Some(1.0));
        assert!(t.problems(false).is_empty());
        let all = t.problems(true);
        assert_eq!(all.len(), 3, "{all:?}");
        assert!(all[0].starts_with("thresholds.min_top1_agreement: undeclared"));
        let mut blockers = Vec::new();
        let r = t.resolve(Path::new("p.toml"), &mut blockers);
        assert_eq!(r.min_cosine, 1.0);
        assert!(r.min_logits_cosine.is_nan());
        assert_eq!(blockers.len(), 3);
        assert_eq!(blockers[0].code, BlockerCode::ThresholdUndeclared);
        let bad: DeclaredThresholds =
            toml::from_str("min_cosine = 1.5\nmax_mean_kld = nan\n").unwrap();
        let p = bad.problems(false);
        assert_eq!(p.len(), 2, "{p:?}");
        assert!(p[0].starts_with("thresholds.min_cosine: 1.5"));
        assert!(toml::from_str::<DeclaredThresholds>("min_cos = 0.9\n")
            .unwrap_err()
            .to_string()
            .contains("unknown field `min_cos`"));
    }
}
