//! Importance matrices (imatrix), as llama.cpp's `llama-imatrix` writes them and
//! `llama-quantize --imatrix` reads them (llama.cpp `tools/imatrix/imatrix.cpp` and
//! `common/imatrix-loader.cpp` of the llama-cpp-sys-2 =0.1.161 pin).
//!
//! **GGUF format** (current): `general.type = "imatrix"`, `imatrix.datasets` (array of string),
//! `imatrix.chunk_count` and `imatrix.chunk_size` (u32); per weight `NAME`, tensors
//! `NAME.in_sum2` (F32, `[n_per_row, n_mat]`: the sum over every token of the squared input
//! activation of each column, per expert for MoE) and `NAME.counts` (F32, `[1, n_mat]`: tokens
//! seen, per expert), in name order. Trailing dimensions of 1 are not stored (ggml_n_dims).
//!
//! **Legacy `.dat`** (little-endian): `i32 n_entries`; per entry `i32 len`, the name, `i32
//! ncall`, `i32 nval`, `nval` f32 = (sum / count) · ncall; then optionally `i32 chunk_count`,
//! `i32 len` and the dataset name.
//!
//! The weights the quantizer gets ([`Entry::weights`]) are the mean squared activations:
//! `in_sum2 / count` per expert in f32, with `count` rounded to an integer (`lround`), and 1.0
//! for an expert never routed to; legacy values divided by `ncall`.

use std::collections::BTreeMap;
use std::path::Path;

use crate::error::{Error, Result};
use crate::keys::imatrix as keys;
use crate::{GgmlType, Gguf, GgufWriter, TensorData, TensorEntry, Value, ValueType};

/// Which of the two on-disk formats a matrix came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// GGUF with `general.type = imatrix`.
    Gguf,
    /// The legacy `.dat` layout.
    LegacyDat,
}

/// One weight's statistics.
#[derive(Clone, Debug, PartialEq)]
pub struct Entry {
    /// Sum of squared activations, `n_mat` rows of `n_per_row` (GGUF), or the legacy values.
    pub in_sum2: Vec<f32>,
    /// Tokens seen per matrix (expert); the legacy format's single `ncall`.
    pub counts: Vec<f32>,
}

impl Entry {
    /// Values per matrix row (the weight's `ne[0]`).
    pub fn n_per_row(&self) -> usize {
        self.in_sum2.len() / self.counts.len().max(1)
    }

    /// The importance weights `llama-quantize` passes to ggml's quantizer: `n_mat · n_per_row`
    /// floats (see the module docs).
    pub fn weights(&self, format: Format) -> Vec<f32> {
        let n = self.n_per_row();
        let mut w = self.in_sum2.clone();
        for (m, c) in self.counts.iter().enumerate() {
            let row = &mut w[m * n..(m + 1) * n];
            let c = c.round() as i64 as f32;
            match format {
                Format::Gguf if c > 0.0 => row.iter_mut().for_each(|v| *v /= c),
                Format::Gguf => row.iter_mut().for_each(|v| *v = 1.0),
                Format::LegacyDat if c > 0.0 => row.iter_mut().for_each(|v| *v /= c),
                Format::LegacyDat => {}
            }
        }
        w
    }
}

/// A whole importance matrix.
#[derive(Clone, Debug, PartialEq)]
pub struct Imatrix {
    /// The texts it was computed on, as the tool was given them.
    pub datasets: Vec<String>,
    /// Chunks processed.
    pub chunk_count: u32,
    /// Tokens per chunk (0 in the legacy format).
    pub chunk_size: u32,
    /// Per weight name (`blk.0.attn_q.weight`), in name order.
    pub entries: BTreeMap<String, Entry>,
    /// Where it came from.
    pub format: Format,
}

fn invalid(field: impl Into<String>, offset: u64, detail: impl Into<String>) -> Error {
    Error::Invalid {
        field: field.into(),
        offset,
        detail: detail.into(),
    }
}

impl Imatrix {
    /// Reads either format: GGUF when the file starts with `GGUF`, else the legacy layout.
    ///
    /// Errors (naming the file and the field): unreadable file, truncation, an entry without
    /// both `in_sum2` and `counts`, non-F32 data, sizes that do not divide, no entries, or a
    /// value that is not finite (llama-quantize refuses those too).
    pub fn read(path: impl AsRef<Path>) -> Result<Imatrix> {
        let path = path.as_ref();
        let bytes = std::fs::read(path).map_err(|cause| Error::Io {
            path: path.to_path_buf(),
            cause,
        })?;
        let m = if bytes.starts_with(b"GGUF") {
            let g = Gguf::open(path)?;
            from_gguf(&g)
        } else {
            from_legacy(&bytes)
        }
        .map_err(|e| e.in_file(path))?;
        Ok(m)
    }

    /// Writes the GGUF format, as `llama-imatrix` does: the same keys in the same order and
    /// tensors in name order, so equal statistics give equal bytes. Temp file, then rename.
    ///
    /// Errors: as [`GgufWriter::write_to_path`].
    pub fn write_gguf(&self, path: impl AsRef<Path>) -> Result<crate::WriteSummary> {
        let mut w = GgufWriter::new();
        w.add_kv(crate::keys::general::TYPE, Value::string("imatrix"));
        let ds = self.datasets.iter().map(|d| Value::string(d.as_str()));
        w.add_kv(
            keys::DATASETS,
            Value::Array(ValueType::String, ds.collect()),
        );
        w.add_kv(keys::CHUNK_COUNT, Value::U32(self.chunk_count));
        w.add_kv(keys::CHUNK_SIZE, Value::U32(self.chunk_size));
        for (name, e) in &self.entries {
            let n_mat = e.counts.len() as u64;
            let dims = |ne0: u64| {
                if n_mat == 1 {
                    vec![ne0]
                } else {
                    vec![ne0, n_mat]
                }
            };
            let f32s = |v: &[f32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<_>>();
            w.add_tensor(TensorEntry {
                name: format!("{name}.in_sum2"),
                ggml_type: GgmlType::F32,
                dims: dims(e.n_per_row() as u64),
                data: TensorData::Owned(f32s(&e.in_sum2)),
            });
            w.add_tensor(TensorEntry {
                name: format!("{name}.counts"),
                ggml_type: GgmlType::F32,
                dims: dims(1),
                data: TensorData::Owned(f32s(&e.counts)),
            });
        }
        w.write_to_path(path)
    }

    /// The weights per entry name ([`Entry::weights`]).
    pub fn weights(&self) -> BTreeMap<String, Vec<f32>> {
        let f = self.format;
        self.entries
            .iter()
            .map(|(k, e)| (k.clone(), e.weights(f)))
            .collect()
    }
}

fn f32_values(g: &Gguf, t: &crate::TensorInfo) -> Result<Vec<f32>> {
    if t.ggml_type != GgmlType::F32 {
        return Err(invalid(
            format!("tensor {} type", t.name),
            0,
            format!("{} (imatrix tensors are F32)", t.ggml_type),
        ));
    }
    let v: Vec<f32> = g
        .tensor_data(t)
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    if let Some(i) = v.iter().position(|x| !x.is_finite()) {
        return Err(invalid(
            format!("tensor {} value {i}", t.name),
            g.header.data_offset + t.offset + 4 * i as u64,
            format!("{} is not finite", v[i]),
        ));
    }
    Ok(v)
}

fn u32_key(g: &Gguf, key: &str) -> Result<u32> {
    match g.header.get(key) {
        None => Ok(0),
        Some(Value::U32(v)) => Ok(*v),
        Some(v) => Err(invalid(
            key,
            0,
            format!("{:?}, expected a u32", v.value_type()),
        )),
    }
}

fn from_gguf(g: &Gguf) -> Result<Imatrix> {
    let datasets = match g.header.get(keys::DATASETS) {
        None => Vec::new(),
        Some(Value::Array(ValueType::String, v)) => v
            .iter()
            .map(|s| s.as_str().unwrap_or_default().to_string())
            .collect(),
        Some(v) => return Err(invalid(keys::DATASETS, 0, format!("{:?}", v.value_type()))),
    };
    // Per weight name: its `.in_sum2` and `.counts` tensors, as found.
    type Parts = (Option<Vec<f32>>, Option<Vec<f32>>);
    let mut parts: BTreeMap<String, Parts> = BTreeMap::new();
    for t in &g.header.tensors {
        if let Some(n) = t.name.strip_suffix(".in_sum2") {
            parts.entry(n.to_string()).or_default().0 = Some(f32_values(g, t)?);
        } else if let Some(n) = t.name.strip_suffix(".counts") {
            parts.entry(n.to_string()).or_default().1 = Some(f32_values(g, t)?);
        }
    }
    let mut entries = BTreeMap::new();
    for (name, p) in parts {
        let (Some(in_sum2), Some(counts)) = p else {
            return Err(invalid(
                format!("entry {name}"),
                0,
                "needs both .in_sum2 and .counts tensors",
            ));
        };
        if counts.is_empty() || in_sum2.is_empty() || in_sum2.len() % counts.len() != 0 {
            return Err(invalid(
                format!("entry {name}"),
                0,
                format!(
                    "{} sums do not divide into {} counts",
                    in_sum2.len(),
                    counts.len()
                ),
            ));
        }
        entries.insert(name, Entry { in_sum2, counts });
    }
    if entries.is_empty() {
        return Err(invalid(
            "tensors",
            0,
            "no imatrix entries (NAME.in_sum2, NAME.counts)",
        ));
    }
    Ok(Imatrix {
        datasets,
        chunk_count: u32_key(g, keys::CHUNK_COUNT)?,
        chunk_size: u32_key(g, keys::CHUNK_SIZE)?,
        entries,
        format: Format::Gguf,
    })
}

/// A little-endian cursor over the legacy file that names what it reads.
struct Cursor<'a> {
    b: &'a [u8],
    at: usize,
}

impl Cursor<'_> {
    fn take(&mut self, n: usize, field: &str) -> Result<&[u8]> {
        let end = self.at.checked_add(n).filter(|e| *e <= self.b.len());
        let Some(end) = end else {
            return Err(Error::Truncated {
                field: field.into(),
                offset: self.at as u64,
                need: n as u64,
                len: self.b.len() as u64,
            });
        };
        let s = &self.b[self.at..end];
        self.at = end;
        Ok(s)
    }

    fn i32(&mut self, field: &str) -> Result<i32> {
        let s = self.take(4, field)?;
        Ok(i32::from_le_bytes([s[0], s[1], s[2], s[3]]))
    }

    /// A count that must be positive (or, with `zero_ok`, non-negative).
    fn count(&mut self, field: &str, zero_ok: bool) -> Result<usize> {
        let at = self.at as u64;
        let v = self.i32(field)?;
        if v < 0 || (v == 0 && !zero_ok) {
            return Err(invalid(field, at, format!("{v}")));
        }
        Ok(v as usize)
    }
}

fn from_legacy(b: &[u8]) -> Result<Imatrix> {
    let mut c = Cursor { b, at: 0 };
    let n = c.count("n_entries", false)?;
    let mut entries = BTreeMap::new();
    for i in 0..n {
        let len = c.count(&format!("entry {i} name length"), false)?;
        let at = c.at as u64;
        let name = String::from_utf8(c.take(len, &format!("entry {i} name"))?.to_vec())
            .map_err(|_| invalid(format!("entry {i} name"), at, "not UTF-8"))?;
        let ncall = c.i32(&format!("entry {name} ncall"))?;
        let nval = c.count(&format!("entry {name} nval"), false)?;
        let field = format!("entry {name} values");
        let at = c.at as u64;
        let raw = c.take(nval.saturating_mul(4), &field)?;
        let in_sum2: Vec<f32> = raw
            .chunks_exact(4)
            .map(|x| f32::from_le_bytes([x[0], x[1], x[2], x[3]]))
            .collect();
        if let Some(j) = in_sum2.iter().position(|x| !x.is_finite()) {
            return Err(invalid(&field, at + 4 * j as u64, "not finite"));
        }
        let counts = vec![ncall as f32];
        entries.insert(name, Entry { in_sum2, counts });
    }
    let (mut chunk_count, mut datasets) = (0, Vec::new());
    if c.at < b.len() {
        chunk_count = c.count("chunk_count", true)? as u32;
        if c.at < b.len() {
            let len = c.count("dataset name length", true)?;
            let d = c.take(len, "dataset name")?;
            datasets.push(String::from_utf8_lossy(d).into_owned());
        }
    }
    Ok(Imatrix {
        datasets,
        chunk_count,
        chunk_size: 0,
        entries,
        format: Format::LegacyDat,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Imatrix {
        let mut entries = BTreeMap::new();
        entries.insert(
            "blk.0.ffn_down_exps.weight".to_string(),
            Entry {
                in_sum2: vec![2.0, 4.0, 9.0, 3.0],
                counts: vec![2.0, 0.0],
            },
        );
        entries.insert(
            "blk.0.attn_q.weight".to_string(),
            Entry {
                in_sum2: vec![1.0, 3.0, 5.0],
                counts: vec![4.0],
            },
        );
        Imatrix {
            datasets: vec!["hellaswag.txt".into()],
            chunk_count: 2,
            chunk_size: 512,
            entries,
            format: Format::Gguf,
        }
    }

    #[test]
    fn weights_are_mean_squares_per_expert_and_one_where_never_routed() {
        let w = sample().weights();
        assert_eq!(w["blk.0.attn_q.weight"], vec![0.25, 0.75, 1.25]);
        assert_eq!(w["blk.0.ffn_down_exps.weight"], vec![1.0, 2.0, 1.0, 1.0]);
    }

    #[test]
    fn gguf_round_trips_and_stores_llama_imatrix_layout() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("imatrix.gguf");
        let m = sample();
        m.write_gguf(&p).unwrap();
        assert_eq!(Imatrix::read(&p).unwrap(), m);
        let g = Gguf::open(&p).unwrap();
        let names: Vec<_> = g.header.tensors.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "blk.0.attn_q.weight.in_sum2",
                "blk.0.attn_q.weight.counts",
                "blk.0.ffn_down_exps.weight.in_sum2",
                "blk.0.ffn_down_exps.weight.counts"
            ]
        );
        assert_eq!(g.header.tensors[0].dims, [3]);
        assert_eq!(g.header.tensors[2].dims, [2, 2]);
        assert_eq!(g.header.tensors[3].dims, [1, 2]);
        let keys: Vec<_> = g.header.metadata.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(
            keys,
            [
                "general.type",
                "imatrix.datasets",
                "imatrix.chunk_count",
                "imatrix.chunk_size"
            ]
        );
    }

    fn legacy_bytes() -> Vec<u8> {
        let mut b = Vec::new();
        b.extend(1i32.to_le_bytes());
        b.extend(4i32.to_le_bytes());
        b.extend(b"w.wt");
        b.extend(10i32.to_le_bytes());
        b.extend(2i32.to_le_bytes());
        b.extend(5.0f32.to_le_bytes());
        b.extend(20.0f32.to_le_bytes());
        b.extend(10i32.to_le_bytes());
        b.extend(3i32.to_le_bytes());
        b.extend(b"d.t");
        b
    }

    #[test]
    fn legacy_dat_reads_with_its_trailer_and_weights_divide_by_ncall() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("imatrix.dat");
        std::fs::write(&p, legacy_bytes()).unwrap();
        let m = Imatrix::read(&p).unwrap();
        assert_eq!(m.format, Format::LegacyDat);
        assert_eq!(
            (m.chunk_count, m.datasets.clone()),
            (10, vec!["d.t".into()])
        );
        assert_eq!(m.weights()["w.wt"], vec![0.5, 2.0]);
    }

    #[test]
    fn truncated_or_hostile_legacy_files_name_the_field() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("imatrix.dat");
        let b = legacy_bytes();
        std::fs::write(&p, &b[..18]).unwrap();
        let e = Imatrix::read(&p).unwrap_err().to_string();
        assert!(e.contains("entry w.wt nval"), "{e}");
        let mut h = b.clone();
        h[4..8].copy_from_slice(&i32::MAX.to_le_bytes());
        std::fs::write(&p, &h).unwrap();
        let e = Imatrix::read(&p).unwrap_err().to_string();
        assert!(e.contains("entry 0 name") && e.contains("truncated"), "{e}");
        let mut nan = b;
        nan[20..24].copy_from_slice(&f32::NAN.to_le_bytes());
        std::fs::write(&p, &nan).unwrap();
        let e = Imatrix::read(&p).unwrap_err().to_string();
        assert!(
            e.contains("entry w.wt values") && e.contains("not finite"),
            "{e}"
        );
    }
}
