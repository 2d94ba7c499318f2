//! The typed outcomes of `verify`: the verdict and the blockers that decide it. Serialized as
//! the strings the reports have always carried (`GO`, `NO-GO`, `tensor-bits`, …).

use serde::{Deserialize, Serialize};

/// The verdict: GO iff there is no blocker.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub enum Verdict {
    /// Every gate passed.
    #[serde(rename = "GO")]
    Go,
    /// At least one blocker.
    #[serde(rename = "NO-GO")]
    NoGo,
}

impl Verdict {
    /// GO iff `blockers` is empty.
    pub fn from_blockers(blockers: &[Blocker]) -> Verdict {
        if blockers.is_empty() {
            Verdict::Go
        } else {
            Verdict::NoGo
        }
    }
}

/// Writes a unit enum's serde name (`GO`, `tensor-bits`, `capability proven`, …): the text
/// and the JSON of an outcome come from the one `rename` and never disagree.
pub fn write_serde_name<T: Serialize>(v: &T, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
    match serde_json::to_value(v) {
        Ok(serde_json::Value::String(s)) => f.write_str(&s),
        _ => Err(std::fmt::Error),
    }
}

impl std::fmt::Display for Verdict {
    /// `GO` or `NO-GO`, as printed on the last line.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write_serde_name(self, f)
    }
}

/// Why a blocker was raised: one code per check, stable across versions.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq, Hash)]
#[serde(rename_all = "kebab-case")]
pub enum BlockerCode {
    /// Set-up: a protocol does not declare a threshold.
    ThresholdUndeclared,
    /// Gate 1: ggml's GGUF reader (or quantgate's, which reads the stored metadata bytes)
    /// refuses the file: a duplicated key, a header cut short, misplaced tensor data, a bad
    /// `general.alignment`, … (the reader's own error line in the detail).
    GgufRefused,
    /// Gate 1: a config.json field quantgate cannot account for, or a value llama.cpp does
    /// not run the same way (`source::fields`).
    ConfigField,
    /// Gate 1: a metadata key the sources imply is absent.
    MetadataMissing,
    /// Gate 1: a metadata key differs from what the sources imply.
    MetadataMismatch,
    /// Gate 1: a key in the file that the sources do not imply (and not provenance).
    MetadataUnexpected,
    /// Gate 1: tensors out of the order their writer (convert or llama.cpp's quantizer) uses.
    TensorOrder,
    /// Gate 1: the tokenizer cannot be expressed in GGUF.
    TokenizerInexpressible,
    /// Gate 1: a source tensor is missing from the file.
    TensorMissing,
    /// Gate 1: the file holds a tensor the source does not imply.
    TensorUnexpected,
    /// Gate 1: the file ends before a tensor's data (a truncated file).
    TensorTruncated,
    /// Gate 1: a tensor's shape differs.
    TensorShape,
    /// Gate 1: a tensor's stored type differs from the expected one.
    TensorType,
    /// Gate 1: stored bytes differ from ggml's encoding of the source.
    TensorBits,
    /// Gate 1: an already-quantized source's metadata disagrees with its tensors.
    SourceQuantization,
    /// Gate 1: stored codes or d/m fields differ from the source's.
    AffineFields,
    /// Gate 1: stored values differ from the named formula.
    AffineValues,
    /// Gate 1: a declared fallback's bytes differ from its encoding.
    FallbackBits,
    /// Gate 1: the file's `quantize.imatrix.*` keys do not name the imatrix given with
    /// `--imatrix`, or an imatrix was given for a file without them (docs/imatrix.md).
    ImatrixKeys,
    /// Gate 1: an imatrix quant checked without its imatrix has a tensor whose stored values
    /// are further from the source than the bound allows
    /// (the bound in docs/imatrix.md).
    ImatrixUndecidedError,
    /// Gate 2: a quality item of the protocol's `[budget.FTYPE]` exceeded or not measured.
    QualityBudget,
    /// Gate 2: llama.cpp refuses to load the file (its own error line in the detail).
    LlamaLoad,
    /// Gate 2: the file's `general.architecture` is not the HF folder's.
    ArchitectureMismatch,
    /// Gate 2: a NaN or infinite embedding, logit or cosine.
    NonFinite,
    /// Gate 2: no add_special × parse_special mode matches HF on every text.
    TokenizerNoMode,
    /// Gate 2: generated texts of a class declared a blocker give other ids than HF
    /// (`verify::stress_gate`).
    TokenizerStress,
    /// Gate 2: embedding cosine below the threshold.
    VectorsCosine,
    /// Gate 2: retrieval top-1 agreement below the threshold.
    VectorsTop1,
    /// Gate 2: llama.cpp pools differently from the model's declaration.
    VectorsPooling,
    /// Gate 2: logits could not be compared.
    LogitsNotMeasured,
    /// Gate 2: logits cosine below the threshold.
    LogitsCosine,
    /// Gate 2: argmax agreement below the threshold.
    LogitsTop1,
    /// Gate 2: mean KLD above the threshold.
    LogitsKld,
    /// Gate 2 (MoE): llama.cpp routes tokens to other experts than the reference where the
    /// choice is clear, or too often at near-ties ([`super::routing`]).
    ExpertRouting,
    /// Gate 3: `release --check --trust KEY`: `model.sig` missing, made with another key, not
    /// verifying, or a file it signs changed, absent or added (`release::sign`).
    ReleaseSignature,
    /// Gate 3 (release): a GGUF's `llama-gguf-hash` manifest is missing or does not match its
    /// tensors (`release::manifest`).
    ReleaseManifest,
    /// Gate 3: the release folder's files are incomplete, or hold a GGUF that was not verified.
    ReleaseFiles,
    /// Gate 3 (release): a file differs from `SHA256SUMS`, is missing, or is not listed.
    ReleaseSha256,
    /// Gate 3 (release): a released GGUF is not the bytes `verify` judged.
    ReleaseNotVerified,
    /// Gate 3 (release): llama.cpp's outputs re-measured on the released copy differ from the
    /// verified file's, or it cannot run the copy.
    ReleaseRemeasure,
    /// Gate 3 (release --check): report.json disagrees with itself (a thresholds hash, or a
    /// verdict its own figures do not give).
    ReleaseReport,
    /// Gate 3 (release --check): the release report records a NO-GO of gates 1–2.
    ReleaseGates12,
}

impl BlockerCode {
    /// The gate whose check this code is (0 = set-up: protocol, inputs). A code belongs to one
    /// gate, so a blocker's gate is never given separately from its code.
    pub fn gate(self) -> u8 {
        use BlockerCode::*;
        match self {
            ThresholdUndeclared => 0,
            GgufRefused
            | ConfigField
            | MetadataMissing
            | MetadataMismatch
            | MetadataUnexpected
            | TensorOrder
            | TokenizerInexpressible
            | TensorMissing
            | TensorUnexpected
            | TensorTruncated
            | TensorShape
            | TensorType
            | TensorBits
            | SourceQuantization
            | AffineFields
            | AffineValues
            | FallbackBits
            | ImatrixKeys
            | ImatrixUndecidedError => 1,
            QualityBudget | LlamaLoad | ArchitectureMismatch | NonFinite | TokenizerNoMode
            | TokenizerStress | VectorsCosine | VectorsTop1 | VectorsPooling
            | LogitsNotMeasured | LogitsCosine | LogitsTop1 | LogitsKld | ExpertRouting => 2,
            ReleaseSignature | ReleaseManifest | ReleaseFiles | ReleaseSha256
            | ReleaseNotVerified | ReleaseRemeasure | ReleaseReport | ReleaseGates12 => 3,
        }
    }
}

impl std::fmt::Display for BlockerCode {
    /// The serde name (`tensor-bits`, …).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write_serde_name(self, f)
    }
}

/// One reason for NO-GO.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Blocker {
    /// Gate number (0 = set-up: protocol, inputs).
    pub gate: u8,
    /// Stable machine-readable code.
    pub code: BlockerCode,
    /// The tensor, key or text concerned.
    pub subject: String,
    /// What was found.
    pub detail: String,
}

impl Blocker {
    /// A blocker with `code` (of gate [`BlockerCode::gate`]) about `subject`.
    pub fn new(code: BlockerCode, subject: &str, detail: String) -> Blocker {
        Blocker {
            gate: code.gate(),
            code,
            subject: subject.into(),
            detail,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serialized_names_are_the_report_strings() {
        for (c, name) in [
            (BlockerCode::ThresholdUndeclared, "threshold-undeclared"),
            (BlockerCode::TensorBits, "tensor-bits"),
            (BlockerCode::VectorsTop1, "vectors-top1"),
            (BlockerCode::ReleaseRemeasure, "release-remeasure"),
        ] {
            assert_eq!(serde_json::to_value(c).unwrap(), name);
            assert_eq!(c.to_string(), name);
            assert_eq!(
                serde_json::from_value::<BlockerCode>(name.into()).unwrap(),
                c
            );
        }
        assert_eq!(serde_json::to_value(Verdict::NoGo).unwrap(), "NO-GO");
        assert_eq!(serde_json::to_value(Verdict::Go).unwrap(), "GO");
        assert_eq!(Verdict::NoGo.to_string(), "NO-GO");
    }
}
