//! Gate 1: every metadata key and every tensor of the file, read back through ggml's own
//! reader (and, for the keys, as the stored bytes), compared with what the sources imply — bit
//! for bit for tensors. One module per kind of source: `plain` (float checkpoints, and files
//! llama.cpp's quantizer made from them), `mlx` (MLX affine), `packed` (GPTQ, AWQ,
//! compressed-tensors); the expected keys (`expected`, `expected_vocab`, starting from the
//! converter's `metadata` as docs/architecture.md explains) and the file type (`file_type`).

mod common;
pub mod encoding;
pub mod expected;
pub mod expected_ugm;
pub mod expected_vocab;
pub mod file_type;
pub mod generated;
mod mlx;
mod packed;
pub mod plain;
pub mod row_blocks;
pub mod source_maps;

use std::path::Path;

use anyhow::Result;
use llama_runtime::CGguf;

pub use common::{read_stored, role, AffineGate1Report, Covered, Role};
pub use plain::{is_provenance, Gate1Report};

use super::outcome::{Blocker, BlockerCode};
use super::sources::{Findings, Sources};
use super::VerifyOptions;
use crate::convert::{self, OutType};
use crate::source::arch::Arch;
use crate::source::hf::HfDir;

/// Outtype implied by the stored tensor types (for the expected `general.file_type`).
fn outtype_of(types: &[u32]) -> OutType {
    use gguf::GgmlType as T;
    let has = |t: T| types.contains(&t.id());
    if has(T::Q8_0) {
        OutType::Q8_0
    } else if has(T::BF16) {
        OutType::BF16
    } else if has(T::F16) {
        OutType::F16
    } else {
        OutType::F32
    }
}

/// Gate 1's typed section.
#[derive(Default)]
pub struct Gate1 {
    /// Metadata and plain tensors (and the totals including affine tensors).
    pub report: Gate1Report,
    /// Tensors converted from already-quantized (MLX affine) sources.
    pub affine: Option<AffineGate1Report>,
    /// The source's quantization metadata disagrees with its tensors.
    pub source_inconsistent: bool,
    /// An importance-matrix quant's keys, the imatrix given, the undecided tensors.
    pub imatrix: crate::verify::imatrix::ImatrixSection,
}

/// The tensor order Gate 1 expects.
enum Order {
    /// A conversion's: the HF folder's.
    Conversion,
    /// llama.cpp's quantizer's, from its plan; with `true`, a conversion's is accepted too
    /// (a Q8_0 file can come from either writer).
    Quantizer(Vec<String>, bool),
    /// Not known: the quantizer's plan could not be made (the file is refused for another
    /// reason, which has its own blocker).
    Unknown,
}

/// The `general.file_type` these sources imply for the stored types, and the tensor order
/// that goes with it. For a file `convert` writes: its file type, HF folder order. For a
/// block-quantized file: the ftype llama.cpp's quantizer plans exactly these types for
/// ([`file_type`]) and the quantizer's order. The file's own value is taken when its plan
/// matches; otherwise the matching ftype (or, when none matches, the converter's value) is
/// expected, and a note names the first tensor that differs. When no plan can be made (no F32
/// expansion, or llama.cpp refuses the file) a value `convert` would not write is not judged.
fn expected_file_type(s: &Sources, f: &mut Findings) -> Result<(u32, Order)> {
    let stored: Vec<gguf::GgmlType> = s
        .types
        .iter()
        .filter_map(|t| gguf::GgmlType::from_id(*t))
        .collect();
    let by_convert = convert::file_type(outtype_of(&s.types), &stored);
    let quantized = !s.vocab_only && super::expand::has_block_quantized(&s.types);
    let Some(claimed) = file_type::claimed(&s.c).filter(|_| quantized) else {
        return Ok((by_convert, Order::Conversion));
    };
    let convertible = claimed == by_convert;
    let not_judged = |f: &mut Findings, why: String| {
        if convertible {
            return Ok((by_convert, Order::Conversion));
        }
        f.notes.push(format!(
            "general.file_type {claimed} and tensor order not checked: {why}"
        ));
        Ok((claimed, Order::Unknown))
    };
    let Some(exp) = s.plan_file() else {
        return not_judged(f, "no F32 expansion of the stored values".into());
    };
    if gguf::LlamaFtype::by_id(claimed).is_some_and(|t| t.quantize_target) {
        // llama.cpp's loader may refuse the file (a missing key, heads that do not fit); Gate
        // 2's load then names the refusal.
        match file_type::compare(&s.c, exp, claimed) {
            Err(e) => {
                return not_judged(
                    f,
                    format!("llama.cpp's quantizer could not plan the file: {e:#}"),
                )
            }
            Ok((file_type::PlanMatch::Exact, order)) => {
                return Ok((claimed, Order::Quantizer(order, convertible)))
            }
            Ok((file_type::PlanMatch::Differs { .. }, _)) if convertible => {
                return Ok((by_convert, Order::Conversion))
            }
            Ok((file_type::PlanMatch::Differs { n, first: (t, plan, got) }, _)) => {
                f.notes.push(format!(
                    "general.file_type {claimed}: llama.cpp's quantizer plans other types for {n} tensors (first: {t} planned {plan}, stored {got})"
                ))
            }
        }
    }
    Ok(match file_type::matching_ftype(&s.c, exp) {
        Ok(Some((t, order))) => (t.id, Order::Quantizer(order, false)),
        Ok(None) => (by_convert, Order::Conversion),
        Err(e) => {
            f.notes
                .push(format!("no ftype's plan could be made: {e:#}"));
            (by_convert, Order::Conversion)
        }
    })
}

/// Gate 1's tensor-order check for `order`.
fn check_order(s: &Sources, order: Order, f: &mut Findings) -> Result<()> {
    const CONVERSION: &str = "a conversion's order (the HF folder's)";
    match order {
        Order::Unknown => {}
        Order::Conversion => {
            let hf = plain::expected_order(&s.hf, s.arch)?;
            plain::check_order(&s.c, &hf, CONVERSION, &mut f.blockers);
        }
        Order::Quantizer(q, also_conversion) => {
            let mut as_conversion = Vec::new();
            if also_conversion {
                let hf = plain::expected_order(&s.hf, s.arch)?;
                plain::check_order(&s.c, &hf, CONVERSION, &mut as_conversion);
            }
            if !also_conversion || !as_conversion.is_empty() {
                plain::check_order(&s.c, &q, "llama.cpp's quantizer order", &mut f.blockers);
            }
        }
    }
    Ok(())
}

/// The metadata the sources imply (as `convert` writes it, with [`expected_file_type`], merged
/// with the hyperparameters [`expected`] and the tokenizer keys [`expected_vocab`] derive
/// without `convert`), less the keys that are
/// not model facts (the provenance keys, [`plain::is_provenance`]; `general.file_type` of a
/// vocab-only file).
fn expected_metadata(s: &Sources, ft: u32, f: &mut Findings) -> Result<Vec<(String, gguf::Value)>> {
    use gguf::keys::general;
    let mut expected = convert::metadata(&s.hf, s.arch, ft, s.pooling, &s.vocab, 0)?;
    let mut independent = expected::hparams(&s.hf.config, s.arch)?;
    independent.extend(expected_vocab::tokenizer_keys(
        &s.hf.dir,
        s.tok.tokenizer.inner(),
        &s.hf.tokenizer_config,
        &s.hf.config,
    )?);
    f.notes.extend(expected::merge(&mut expected, independent));
    if s.vocab_only {
        // A vocab-only file's file_type is whatever the converter was asked; not implied.
        expected.retain(|(k, _)| k != general::FILE_TYPE);
    }
    // Provenance (general.name, basename, size_label, license, …) depends on the folder name
    // and card the file was converted from, not on the model: allowed, not judged.
    expected.retain(|(k, _)| !plain::is_provenance(k));
    Ok(expected)
}

/// What the sources themselves cannot express: config.json fields and declared tensors
/// (`config-field`) and tokenizer features the GGUF vocabulary cannot hold
/// (`tokenizer-inexpressible`); a vocab-only file gets a note instead of the tensor check.
///
/// Errors: the HF folder's tensor order cannot be derived.
fn source_blockers(s: &Sources, f: &mut Findings) -> Result<()> {
    for p in crate::source::fields::check(&s.hf.config, s.arch) {
        f.blockers
            .push(Blocker::new(BlockerCode::ConfigField, "config.json", p));
    }
    for b in &s.vocab.blockers {
        f.blockers.push(Blocker::new(
            BlockerCode::TokenizerInexpressible,
            "tokenizer",
            b.clone(),
        ));
    }
    if s.vocab_only {
        f.notes.push(
            "vocab-only file: tensors and vectors are not measured; Gate 1 covers metadata only"
                .into(),
        );
    } else {
        let names = plain::expected_order(&s.hf, s.arch)?;
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        for p in crate::source::declared::declared_tensors(&s.hf.config, s.arch, &names) {
            f.blockers
                .push(Blocker::new(BlockerCode::ConfigField, "config.json", p));
        }
    }
    Ok(())
}

/// Gate 1: every metadata key and every tensor, read back through ggml's own reader and
/// compared with what the sources imply (bit for bit for tensors).
pub(super) fn run(opts: &VerifyOptions, s: &Sources, f: &mut Findings) -> Result<Gate1> {
    source_blockers(s, f)?;
    let mut g1 = Gate1Report::default();
    let given = opts
        .imatrix
        .as_deref()
        .map(crate::imatrix::load)
        .transpose()?;
    let mut im = crate::verify::imatrix::check_keys(
        &s.raw_kv,
        given.as_ref(),
        &mut f.blockers,
        &mut f.notes,
    );
    let (ft, order) = expected_file_type(s, f)?;
    let expected = expected_metadata(s, ft, f)?;
    plain::check_metadata(&s.c, &s.raw_kv, &expected, &mut f.blockers, &mut g1)?;
    // A vocab-only file's file_type is whatever the converter was asked: allowed, not implied.
    let mut also: Vec<&str> = im.keys.keys().map(String::as_str).collect();
    if s.vocab_only {
        also.push(gguf::keys::general::FILE_TYPE);
    }
    plain::check_unexpected_keys(&s.c, &s.raw_kv, &expected, &also, &mut f.blockers);
    if !s.vocab_only {
        check_order(s, order, f)?;
    }
    if s.vocab_only {
        return Ok(Gate1 {
            report: g1,
            imatrix: im,
            ..Default::default()
        });
    }
    let mut out = Gate1 {
        report: g1,
        affine: None,
        source_inconsistent: false,
        imatrix: Default::default(),
    };
    let n_before = f.blockers.len();
    let (ar, covered) = quantized(&opts.gguf, &s.c, &s.hf, s.arch, &mut f.blockers)?;
    out.source_inconsistent = f.blockers[n_before..]
        .iter()
        .any(|b| b.code == BlockerCode::SourceQuantization);
    let g1 = &mut out.report;
    g1.tensors += ar.exact_tensors + ar.fallback_tensors;
    g1.bit_identical += ar.values_identical.min(ar.fields_identical) + ar.fallback_identical;
    for (t, n) in &ar.by_type {
        *g1.by_type.entry(t.clone()).or_default() += n;
    }
    if ar.modules > 0 || !covered.gguf_names.is_empty() {
        if ar.ggml_to_float_agrees < ar.ggml_to_float_checked {
            f.notes.push(format!(
                "ggml to_float differs from the named formula (f32 multiply then add) on {} of {} affine tensors (e.g. FMA contraction); Gate 1 is decided on fields + named formula as declared",
                ar.ggml_to_float_checked - ar.ggml_to_float_agrees,
                ar.ggml_to_float_checked
            ));
        }
        out.affine = Some(ar);
    }
    let w = encoding::Weighting {
        weights: given.as_ref().map(|m| &m.weights),
        keyed: !im.keys.is_empty(),
    };
    let hf = (&s.hf, s.arch);
    plain::check_tensors(
        &opts.gguf,
        &s.c,
        hf,
        &covered,
        w,
        &mut f.blockers,
        &mut im.undecided,
        g1,
    )?;
    undecided_note(&im, &mut f.notes);
    out.imatrix = im;
    for (t, n) in &g1.via_intermediate {
        f.notes.push(format!(
            "{n} block-quantized tensors are the encoding of the source rounded to {t} (a conversion to {t}, then quantize)"
        ));
    }
    Ok(out)
}

/// The quantized-source check: GPTQ / AWQ / compressed-tensors sources have their own rule,
/// MLX affine sources theirs; a float source has neither (an empty report).
fn quantized(
    gguf_path: &Path,
    c: &CGguf,
    hf: &HfDir,
    a: Arch,
    blockers: &mut Vec<Blocker>,
) -> Result<(AffineGate1Report, Covered)> {
    if let Some(done) = packed::check(gguf_path, c, hf, a, blockers)? {
        return Ok(done);
    }
    mlx::check(gguf_path, c, hf, a, blockers)
}

/// The limitation note of an imatrix quant checked without its imatrix (docs/imatrix.md).
fn undecided_note(im: &crate::verify::imatrix::ImatrixSection, notes: &mut Vec<String>) {
    if let Some(worst) = im
        .undecided
        .iter()
        .max_by(|a, b| a.ratio().total_cmp(&b.ratio()))
    {
        notes.push(format!(
            "limitation: imatrix quant checked without its imatrix: Gate 1 could not re-make {} tensors byte for byte; their RMS error against the source is at most {:.2} × the unweighted encoding's ({}; bound {} ×), and Gate 2 judges their stored values (pass --imatrix FILE for the byte check)",
            im.undecided.len(),
            worst.ratio(),
            worst.name,
            crate::verify::imatrix::MAX_UNDECIDED_RMS_RATIO
        ));
    }
}
