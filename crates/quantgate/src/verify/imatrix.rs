//! Importance-matrix quants in Gate 1: the `quantize.imatrix.*` keys held against the imatrix
//! given with `--imatrix`, and what Gate 1 can decide without one.
//!
//! The decision, written down before anything was measured (docs/imatrix.md):
//! - keys and `--imatrix FILE`: every tensor is re-made with the file's weights and must be
//!   byte-identical; `quantize.imatrix.entries_count`, `.chunks_count` and `.dataset` must be
//!   the file's (a mismatch is an `imatrix-keys` blocker naming the key and the file's sha256);
//!   `quantize.imatrix.file` is the path the quantizer was given, which names no content, so
//!   a different name is a note;
//! - keys and no imatrix: a tensor whose type takes weights (every block type but Q8_0) and
//!   whose bytes are not the unweighted encoding cannot be decided byte for byte. It is listed
//!   as undecided, a named limitation, and bounded: the RMS error of its stored values against
//!   the source at most [`MAX_UNDECIDED_RMS_RATIO`] × that of the unweighted encoding, else an
//!   `imatrix-undecided-error` blocker. Every other check still binds (the other tensors byte
//!   for byte, Gate 2 on the exact stored values, a declared quality budget);
//! - `--imatrix` for a file without the keys: an `imatrix-keys` blocker (the file does not say
//!   it was quantized with one, so no tensor can be judged against its weights).

use std::collections::BTreeMap;

use gguf::keys::quantize as qk;
use serde::{Deserialize, Serialize};

use super::outcome::{Blocker, BlockerCode};
use crate::imatrix::LoadedImatrix;

/// How Gate 1 treated the file's importance matrix.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum ImatrixStatus {
    /// No `quantize.imatrix.*` keys (and none given).
    #[default]
    None,
    /// Keys and `--imatrix`: every tensor re-made with its weights.
    Checked,
    /// Keys without `--imatrix`: tensors that take weights are judged by Gate 2 only.
    NotGiven,
}

/// Gate 1's imatrix section of the report.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ImatrixSection {
    /// How it was treated.
    pub status: ImatrixStatus,
    /// The file's `quantize.imatrix.*` values, as text.
    pub keys: BTreeMap<String, String>,
    /// The imatrix given with `--imatrix`.
    pub given: Option<crate::imatrix::ImatrixUse>,
    /// Tensors whose bytes Gate 1 could not decide without the imatrix ([`ImatrixStatus::NotGiven`]).
    pub undecided: Vec<UndecidedTensor>,
}

/// The bound on an undecided tensor (docs/imatrix.md, fixed 2026-12-06 before any imatrix
/// quant was verified): RMS error of the stored values against the source ≤ this × the RMS
/// error of ggml's unweighted encoding at the same type. An imatrix moves error between
/// columns; a zeroed or re-scaled tensor exceeds it many times over.
pub const MAX_UNDECIDED_RMS_RATIO: f64 = 2.0;

/// A tensor Gate 1 could not re-make without the imatrix, and how far its values are from the
/// source.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct UndecidedTensor {
    /// The GGUF tensor name.
    pub name: String,
    /// Its ggml type.
    pub ty: String,
    /// RMS of (stored values read back by ggml − source values).
    pub rms_stored: f64,
    /// RMS of (ggml's unweighted encoding read back − source values).
    pub rms_unweighted: f64,
}

impl UndecidedTensor {
    /// `rms_stored / rms_unweighted` (1.0 when both are 0, infinite when only the first is).
    pub fn ratio(&self) -> f64 {
        if self.rms_unweighted > 0.0 {
            self.rms_stored / self.rms_unweighted
        } else if self.rms_stored > 0.0 {
            f64::INFINITY
        } else {
            1.0
        }
    }

    /// Its blocker when over [`MAX_UNDECIDED_RMS_RATIO`] (or not finite).
    pub fn blocker(&self) -> Option<Blocker> {
        let r = self.ratio();
        (r.is_nan() || r > MAX_UNDECIDED_RMS_RATIO).then(|| {
            Blocker::new(
                BlockerCode::ImatrixUndecidedError,
                &self.name,
                format!(
                    "imatrix quant checked without its imatrix: the stored {} values are {:.3e} RMS from the source, {r:.2} × the unweighted encoding's {:.3e} (bound {MAX_UNDECIDED_RMS_RATIO} ×)",
                    self.ty, self.rms_stored, self.rms_unweighted
                ),
            )
        })
    }
}

/// RMS of `a − b` over their common length, in f64.
pub fn rms_diff(a: &[f32], b: &[f32]) -> f64 {
    let n = a.len().min(b.len()).max(1);
    let s: f64 = a
        .iter()
        .zip(b)
        .map(|(x, y)| (*x as f64 - *y as f64).powi(2))
        .sum();
    (s / n as f64).sqrt()
}

/// Whether ggml's quantizer uses importance weights for `ty` (`ggml_quantize_chunk`: every
/// block type's `quantize_*` takes them except Q8_0's, which ignores them; the float types
/// are converted, not quantized).
pub fn takes_weights(ty: gguf::GgmlType) -> bool {
    use gguf::GgmlType as T;
    !matches!(ty, T::F32 | T::F16 | T::BF16 | T::Q8_0)
}

fn text(v: &gguf::Value) -> String {
    v.as_str()
        .map(str::to_string)
        .or_else(|| v.as_int().map(|i| i.to_string()))
        .unwrap_or_else(|| format!("{v:?}"))
}

/// llama-quantize cuts strings to 127 bytes (`strncpy`).
fn cut127(s: &str) -> String {
    let b = &s.as_bytes()[..s.len().min(127)];
    String::from_utf8_lossy(b).into_owned()
}

/// The keys of `raw` against `given`; blockers for what disagrees, notes for names.
pub fn check_keys(
    raw: &[(String, gguf::Value)],
    given: Option<&LoadedImatrix>,
    blockers: &mut Vec<Blocker>,
    notes: &mut Vec<String>,
) -> ImatrixSection {
    let keys: BTreeMap<String, String> = raw
        .iter()
        .filter(|(k, _)| k.starts_with(qk::IMATRIX_PREFIX))
        .map(|(k, v)| (k.clone(), text(v)))
        .collect();
    let status = match (keys.is_empty(), given) {
        (true, None) => ImatrixStatus::None,
        (true, Some(m)) => {
            blockers.push(Blocker::new(
                BlockerCode::ImatrixKeys,
                qk::IMATRIX_PREFIX,
                format!(
                    "an imatrix was given ({}, sha256 {}), but the file has no quantize.imatrix.* keys: it does not say it was quantized with one",
                    m.used.file, m.used.sha256
                ),
            ));
            ImatrixStatus::None
        }
        (false, None) => ImatrixStatus::NotGiven,
        (false, Some(m)) => {
            let u = &m.used;
            let want = [
                (qk::IMATRIX_N_ENTRIES, Some(u.entries.to_string())),
                (
                    qk::IMATRIX_N_CHUNKS,
                    (u.chunks > 0).then(|| u.chunks.to_string()),
                ),
                (qk::IMATRIX_DATASET, u.dataset.as_deref().map(cut127)),
            ];
            for (k, w) in want {
                if keys.get(k) != w.as_ref() {
                    blockers.push(Blocker::new(
                        BlockerCode::ImatrixKeys,
                        k,
                        format!(
                            "the file says {:?}, the given imatrix {} (sha256 {}) {:?}",
                            keys.get(k),
                            u.file,
                            u.sha256,
                            w
                        ),
                    ));
                }
            }
            let name = |p: &str| p.rsplit('/').next().unwrap_or(p).to_string();
            if let Some(f) = keys
                .get(qk::IMATRIX_FILE)
                .filter(|f| name(f) != name(&u.file))
            {
                notes.push(format!(
                    "quantize.imatrix.file names {f}; the imatrix given is {} (names are paths, not content: not judged)",
                    u.file
                ));
            }
            ImatrixStatus::Checked
        }
    };
    ImatrixSection {
        status,
        keys,
        given: given.map(|m| m.used.clone()),
        undecided: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gguf::Value;

    fn loaded(entries: usize, chunks: u32, dataset: &str) -> LoadedImatrix {
        LoadedImatrix {
            used: crate::imatrix::ImatrixUse {
                file: "out/imatrix.gguf".into(),
                sha256: "ab".repeat(32),
                format: "gguf".into(),
                entries,
                chunks,
                dataset: Some(dataset.into()),
            },
            c: Default::default(),
            weights: Default::default(),
        }
    }

    fn raw() -> Vec<(String, Value)> {
        vec![
            (
                qk::IMATRIX_FILE.into(),
                Value::string("/tmp/x/imatrix.gguf"),
            ),
            (qk::IMATRIX_DATASET.into(), Value::string("hellaswag.txt")),
            (qk::IMATRIX_N_ENTRIES.into(), Value::U32(210)),
            (qk::IMATRIX_N_CHUNKS.into(), Value::U32(8)),
        ]
    }

    #[test]
    fn keys_must_name_the_given_imatrix() {
        let (mut b, mut n) = (Vec::new(), Vec::new());
        let s = check_keys(
            &raw(),
            Some(&loaded(210, 8, "hellaswag.txt")),
            &mut b,
            &mut n,
        );
        assert_eq!((s.status, b.len(), n.len()), (ImatrixStatus::Checked, 0, 0));
        let s = check_keys(
            &raw(),
            Some(&loaded(210, 9, "hellaswag.txt")),
            &mut b,
            &mut n,
        );
        assert_eq!(s.status, ImatrixStatus::Checked);
        assert_eq!(b.len(), 1);
        assert_eq!(b[0].code, BlockerCode::ImatrixKeys);
        assert!(
            b[0].detail.contains("\"8\"") && b[0].detail.contains("\"9\""),
            "{}",
            b[0].detail
        );
    }

    #[test]
    fn no_keys_with_an_imatrix_blocks_and_keys_without_one_are_not_given() {
        let (mut b, mut n) = (Vec::new(), Vec::new());
        let s = check_keys(&raw(), None, &mut b, &mut n);
        assert_eq!(
            (s.status, b.len(), s.keys.len()),
            (ImatrixStatus::NotGiven, 0, 4)
        );
        let s = check_keys(&[], Some(&loaded(1, 1, "x")), &mut b, &mut n);
        assert_eq!((s.status, b.len()), (ImatrixStatus::None, 1));
        assert!(takes_weights(gguf::GgmlType::Q4_K) && !takes_weights(gguf::GgmlType::Q8_0));
    }

    #[test]
    fn undecided_bound() {
        let t = |s: f64, u: f64| UndecidedTensor {
            name: "blk.0.ffn_down.weight".into(),
            ty: "q4_K".into(),
            rms_stored: s,
            rms_unweighted: u,
        };
        assert!(t(0.02, 0.01).blocker().is_none());
        let b = t(0.0201, 0.01).blocker().unwrap();
        assert_eq!(b.code, BlockerCode::ImatrixUndecidedError);
        assert!(b.detail.contains("2.01"), "{}", b.detail);
        assert!(t(0.0, 0.0).blocker().is_none());
        assert!(t(1e-9, 0.0).blocker().is_some());
        assert!(t(f64::NAN, 0.01).blocker().is_some());
        assert!((rms_diff(&[1.0, 2.0], &[1.0, 0.0]) - 2f64.sqrt()).abs() < 1e-12);
    }
}
