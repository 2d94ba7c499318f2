//! `quantgate sweep compare A B`: two runs of one plan (say here and on Slurm), task by task:
//! the same end state, verdict and quality fields ([`super::figures`]), or the first field
//! that differs. Issue 31: "Local and Slurm give identical verdicts and quality fields".

use std::path::Path;

use anyhow::{bail, Result};
use serde::Serialize;
use serde_json::Value;

use super::plan::Plan;
use super::receipt;

/// One task's comparison.
#[derive(Clone, Debug, Serialize)]
pub struct TaskDiff {
    pub id: String,
    /// Empty when state, verdict and quality are identical; else each difference
    /// (`quality.gate2_logits.mean_kld: 0.001 vs 0.002`).
    pub differences: Vec<String>,
}

/// The first differences between `a` and `b` at `path` (at most 10).
fn diff(path: &str, a: &Value, b: &Value, out: &mut Vec<String>) {
    if out.len() >= 10 || a == b {
        return;
    }
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys: std::collections::BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            for k in keys {
                let null = Value::Null;
                diff(
                    &format!("{path}.{k}"),
                    x.get(k).unwrap_or(&null),
                    y.get(k).unwrap_or(&null),
                    out,
                );
            }
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            for (i, (p, q)) in x.iter().zip(y).enumerate() {
                diff(&format!("{path}[{i}]"), p, q, out);
            }
        }
        _ => out.push(format!("{path}: {} vs {}", short(a), short(b))),
    }
}

/// `v` as JSON, cut to 80 characters (a missing receipt against a whole one would be pages).
fn short(v: &Value) -> String {
    let s = v.to_string();
    match s.char_indices().nth(80) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s,
    }
}

/// Compares the receipts of the sweep folders `a` and `b`.
///
/// Errors: no plan in either; plans of different sweep files.
pub fn compare(a: &Path, b: &Path) -> Result<Vec<TaskDiff>> {
    let (pa, pb) = (Plan::load(a)?, Plan::load(b)?);
    if pa.sweep_sha256 != pb.sweep_sha256 {
        bail!(
            "{} and {} are plans of different sweep files ({} vs {})",
            a.display(),
            b.display(),
            pa.sweep_sha256,
            pb.sweep_sha256
        );
    }
    if pa != pb {
        bail!(
            "{} and {}: plan.json differs (planned by another quantgate?)",
            a.display(),
            b.display()
        );
    }
    let mut out = Vec::new();
    for t in &pa.tasks {
        let ra = receipt::read_for(a, t)?;
        let rb = receipt::read_for(b, t)?;
        // Stripped again: receipts written before a key was known to be volatile keep it.
        let view = |r: &Option<receipt::Receipt>| {
            let mut v = r.as_ref().map_or(Value::Null, |r| {
                serde_json::json!({"state": r.state, "verdict": r.verdict, "quality": r.quality, "outputs": r.outputs.iter().filter(|o| o.path.ends_with(".gguf")).map(|o| &o.sha256).collect::<Vec<_>>()})
            });
            super::figures::strip(&mut v);
            v
        };
        let mut d = Vec::new();
        if ra.is_none() && rb.is_none() {
            // Nothing ran: nothing is the same.
            d.push("no receipt in either run".to_string());
        }
        diff("", &view(&ra), &view(&rb), &mut d);
        out.push(TaskDiff {
            id: t.id.clone(),
            differences: d,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn differences_are_named_by_path_and_cut_short() {
        let a = serde_json::json!({"state": "passed", "quality": {"gate2_logits": {"mean_kld": 0.001}, "x": [1, 2]}});
        let b = serde_json::json!({"state": "passed", "quality": {"gate2_logits": {"mean_kld": 0.002}, "x": [1, 3]}});
        let mut d = Vec::new();
        diff("", &a, &b, &mut d);
        assert_eq!(
            d,
            [
                ".quality.gate2_logits.mean_kld: 0.001 vs 0.002",
                ".quality.x[1]: 2 vs 3"
            ]
        );
        let mut d = Vec::new();
        diff("", &Value::Null, &Value::String("y".repeat(200)), &mut d);
        assert_eq!(d.len(), 1);
        assert!(d[0].len() < 120 && d[0].ends_with('…'), "{}", d[0]);
        let mut d = Vec::new();
        diff("", &a, &a, &mut d);
        assert!(d.is_empty());
    }
}
