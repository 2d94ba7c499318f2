//! The figures of a finished task that must not depend on where it ran: read from the JSON its
//! command wrote (convert's and quantize's `--json`, verify's and release's `report.json`,
//! a protocol run's `results.json`), with wall times, resource figures and paths left out.
//! Local and Slurm runs of one sweep are compared on exactly these (issue 31: "identical
//! verdicts and quality fields").

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;

use super::file::TaskKind;

/// Keys dropped at any depth: timings, costs, machine facts and paths, which differ between
/// executors without the result differing.
const VOLATILE: &[&str] = &[
    "seconds",
    "wall_s",
    "cpu_s",
    "costs",
    "gate2_speed",
    "input",
    "output",
    "out",
    "path",
    "dir",
    "hf_dir",
    "operator",
    "environment",
    "steps",
    "started",
    "finished",
    "image_digest",
    // verify's mean llama.cpp time per text (gate2_vectors).
    "llama_ms_per_text",
];

/// Top-level keys kept per task kind.
fn kept(kind: TaskKind) -> &'static [&'static str] {
    match kind {
        TaskKind::Convert => &["arch", "file_bytes", "rules", "tokenizer", "tensors"],
        TaskKind::Quantize => &["ftype", "file_bytes", "gate1", "fallbacks", "tensors"],
        TaskKind::Verify => &[
            "verdict",
            "blockers",
            "thresholds",
            "thresholds_sha256",
            "llama_cpp",
            "gate1",
            "gate1_affine",
            "gate2_tokenizer",
            "gate2_stress",
            "gate2_vectors",
            "gate2_logits",
            "gate2_logits_as_shipped",
            "gate2_long_context",
            "quality",
        ],
        TaskKind::Release => &["gates_1_2", "llama_cpp", "threads", "files"],
        TaskKind::Protocol => &["protocol_sha256", "state", "models", "files"],
    }
}

/// `v` without the volatile keys, at any depth; an absolute path (quantize's `gate1.source`)
/// is cut to its file name, which names the same file wherever the sweep folder lies.
pub fn strip(v: &mut Value) {
    match v {
        Value::String(s) if s.starts_with('/') => {
            let name = Path::new(s.as_str())
                .file_name()
                .map(|n| n.to_string_lossy().into_owned());
            *s = name.unwrap_or_default();
        }
        Value::Object(m) => {
            m.retain(|k, _| !VOLATILE.contains(&k.as_str()));
            m.values_mut().for_each(strip);
        }
        Value::Array(a) => a.iter_mut().for_each(strip),
        _ => {}
    }
}

/// The kept keys of the JSON document at `p` (empty when it is absent or not JSON: a command
/// that failed early writes none).
pub fn from_json(kind: TaskKind, p: &Path) -> BTreeMap<String, Value> {
    let Ok(text) = std::fs::read_to_string(p) else {
        return BTreeMap::new();
    };
    from_text(kind, &text)
}

/// As [`from_json`], on the document's text.
pub fn from_text(kind: TaskKind, text: &str) -> BTreeMap<String, Value> {
    let Ok(Value::Object(mut doc)) = serde_json::from_str::<Value>(text) else {
        return BTreeMap::new();
    };
    let mut out = BTreeMap::new();
    for k in kept(kind) {
        if let Some(mut v) = doc.remove(*k) {
            strip(&mut v);
            out.insert((*k).to_string(), v);
        }
    }
    out
}

/// A figure for tables: a number or string at `path` (`gate2_logits.mean_kld`).
pub fn lookup<'a>(q: &'a BTreeMap<String, Value>, path: &str) -> Option<&'a Value> {
    let mut parts = path.split('.');
    let mut v = q.get(parts.next()?)?;
    for p in parts {
        v = match v {
            Value::Object(m) => m.get(p)?,
            Value::Array(a) => a.get(p.parse::<usize>().ok()?)?,
            _ => return None,
        };
    }
    Some(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timings_and_paths_go_figures_stay() {
        let doc = r#"{"verdict":"GO","costs":[{"gate":1,"wall_s":3.0}],
            "gate2_logits":{"mean_kld":0.001,"min_cosine":0.9999,"seconds":2.5},
            "inputs":[{"path":"/a/b","sha256":"00"}],
            "quality":{"logits":{"mean_kld":0.02},"path":"/x"},
            "gate1":{"source":"/a/tasks/000-convert/m-F16.gguf"}}"#;
        let q = from_text(TaskKind::Verify, doc);
        assert_eq!(
            q.keys().collect::<Vec<_>>(),
            ["gate1", "gate2_logits", "quality", "verdict"]
        );
        assert_eq!(lookup(&q, "gate1.source"), Some(&Value::from("m-F16.gguf")));
        assert_eq!(
            lookup(&q, "gate2_logits.mean_kld"),
            Some(&Value::from(0.001))
        );
        assert_eq!(lookup(&q, "gate2_logits.seconds"), None);
        assert_eq!(
            lookup(&q, "quality.logits.mean_kld"),
            Some(&Value::from(0.02))
        );
        assert_eq!(lookup(&q, "quality.path"), None);
        assert!(from_text(TaskKind::Verify, "not json").is_empty());
    }
}
