//! `quantgate inspect`: what a GGUF file holds — architecture, metadata, tensors, type
//! histogram, bits per weight, size and sha256 — as data that the CLI renders as text or JSON.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use gguf::{GgmlType, Gguf, Value};
use serde::Serialize;
use serde_json::json;

/// Arrays longer than this are summarised (type, length, first elements).
pub const ARRAY_SUMMARY_LEN: usize = 8;

/// One row of the tensor table.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct TensorRow {
    /// Tensor name as stored.
    pub name: String,
    /// ggml type name, upper case (`Q4_K`).
    pub ggml_type: String,
    /// `ne` as stored (`ne[0]` = row length).
    pub shape: Vec<u64>,
    /// Data bytes (unpadded).
    pub bytes: u64,
}

/// Per-type totals.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct TypeStats {
    /// Number of tensors of this type.
    pub tensors: u64,
    /// Elements (weights) stored in this type.
    pub elements: u64,
    /// Data bytes of this type.
    pub bytes: u64,
}

/// Everything `inspect` reports about one file.
#[derive(Clone, Debug, Serialize)]
pub struct InspectReport {
    /// Path as given.
    pub path: String,
    /// File size in bytes.
    pub file_bytes: u64,
    /// sha256 of the whole file.
    pub sha256: String,
    /// GGUF version.
    pub version: u32,
    /// `general.architecture` (empty when missing).
    pub architecture: String,
    /// Data alignment.
    pub alignment: u64,
    /// Absolute offset of the data section.
    pub data_offset: u64,
    /// Metadata in file order, long arrays summarised.
    pub metadata: Vec<(String, serde_json::Value)>,
    /// Tensor table in file order.
    pub tensors: Vec<TensorRow>,
    /// Per-type totals, keyed by ggml type name.
    pub type_histogram: BTreeMap<String, TypeStats>,
    /// Total elements over all tensors.
    pub n_elements: u64,
    /// Total tensor data bytes.
    pub tensor_bytes: u64,
    /// 8 · tensor bytes / elements.
    pub bits_per_weight: f64,
}

/// Builds the report for an open file whose sha256 was computed by the caller.
pub fn inspect(g: &Gguf, sha256: String) -> InspectReport {
    let h = &g.header;
    let mut hist: BTreeMap<GgmlType, TypeStats> = BTreeMap::new();
    let mut tensors = Vec::with_capacity(h.tensors.len());
    for t in &h.tensors {
        let s = hist.entry(t.ggml_type).or_insert(TypeStats {
            tensors: 0,
            elements: 0,
            bytes: 0,
        });
        s.tensors += 1;
        s.elements += t.n_elements();
        s.bytes += t.n_bytes;
        tensors.push(TensorRow {
            name: t.name.clone(),
            ggml_type: t.ggml_type.to_string(),
            shape: t.dims.clone(),
            bytes: t.n_bytes,
        });
    }
    let n_elements: u64 = hist.values().map(|s| s.elements).sum();
    let tensor_bytes: u64 = hist.values().map(|s| s.bytes).sum();
    InspectReport {
        path: g.path().display().to_string(),
        file_bytes: g.bytes().len() as u64,
        sha256,
        version: h.version,
        architecture: h.architecture().unwrap_or_default().to_string(),
        alignment: h.alignment,
        data_offset: h.data_offset,
        metadata: h
            .metadata
            .iter()
            .map(|(k, v)| (k.clone(), value_json(v)))
            .collect(),
        tensors,
        type_histogram: hist.into_iter().map(|(t, s)| (t.to_string(), s)).collect(),
        n_elements,
        tensor_bytes,
        bits_per_weight: if n_elements == 0 {
            0.0
        } else {
            8.0 * tensor_bytes as f64 / n_elements as f64
        },
    }
}

/// A metadata value as JSON (NaN and ±inf as the strings `NaN`, `inf`, `-inf`, which JSON
/// numbers cannot hold); arrays longer than [`ARRAY_SUMMARY_LEN`] become
/// `{"array": type, "len": n, "head": [...]}`.
pub fn value_json(v: &Value) -> serde_json::Value {
    match v {
        Value::U8(x) => json!(x),
        Value::I8(x) => json!(x),
        Value::U16(x) => json!(x),
        Value::I16(x) => json!(x),
        Value::U32(x) => json!(x),
        Value::I32(x) => json!(x),
        Value::F32(x) if !x.is_finite() => json!(x.to_string()),
        Value::F32(x) => json!(x),
        Value::Bool(x) => json!(x),
        Value::U64(x) => json!(x),
        Value::I64(x) => json!(x),
        Value::F64(x) if !x.is_finite() => json!(x.to_string()),
        Value::F64(x) => json!(x),
        Value::String(b) => json!(String::from_utf8_lossy(b)),
        Value::Array(t, items) if items.len() > ARRAY_SUMMARY_LEN => json!({
            "array": t.name(),
            "len": items.len(),
            "head": items.iter().take(4).map(value_json).collect::<Vec<_>>(),
        }),
        Value::Array(_, items) => json!(items.iter().map(value_json).collect::<Vec<_>>()),
    }
}

/// Human-readable rendering; the tensor table only when `with_tensors`.
pub fn render_text(r: &InspectReport, with_tensors: bool) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "file:          {}", r.path);
    let _ = writeln!(s, "size:          {} bytes", r.file_bytes);
    let _ = writeln!(s, "sha256:        {}", r.sha256);
    let _ = writeln!(s, "gguf version:  {}", r.version);
    let _ = writeln!(s, "architecture:  {}", gguf::short(&r.architecture));
    let _ = writeln!(
        s,
        "alignment:     {}  (data at byte {})",
        r.alignment, r.data_offset
    );
    let _ = writeln!(
        s,
        "tensors:       {}  ({} elements, {} bytes, {:.4} bits per weight)",
        r.tensors.len(),
        r.n_elements,
        r.tensor_bytes,
        r.bits_per_weight
    );
    let _ = writeln!(s, "\nmetadata ({} keys):", r.metadata.len());
    for (k, v) in &r.metadata {
        let text = match v {
            serde_json::Value::Object(o) if o.contains_key("array") => format!(
                "[{}; {}] {} …",
                o["array"].as_str().unwrap_or(""),
                o["len"],
                o["head"]
            ),
            other => {
                let t = other.to_string();
                if t.chars().count() > 100 {
                    format!(
                        "{}… ({} chars)",
                        t.chars().take(97).collect::<String>(),
                        t.len()
                    )
                } else {
                    t
                }
            }
        };
        let _ = writeln!(s, "  {} = {text}", gguf::short(k));
    }
    let _ = writeln!(s, "\ntype histogram:");
    let _ = writeln!(
        s,
        "  {:<8} {:>7} {:>14} {:>14} {:>7}",
        "type", "tensors", "elements", "bytes", "bpw"
    );
    for (t, st) in &r.type_histogram {
        let bpw = GgmlType::from_name(t)
            .map(|t| t.bits_per_weight())
            .unwrap_or(0.0);
        let _ = writeln!(
            s,
            "  {t:<8} {:>7} {:>14} {:>14} {bpw:>7.4}",
            st.tensors, st.elements, st.bytes
        );
    }
    if with_tensors {
        let _ = writeln!(s, "\ntensors:");
        for t in &r.tensors {
            let _ = writeln!(
                s,
                "  {:<40} {:<6} {:<24} {:>12}",
                gguf::short(&t.name),
                t.ggml_type,
                format!("{:?}", t.shape),
                t.bytes
            );
        }
    }
    s
}
