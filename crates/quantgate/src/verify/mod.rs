//! `quantgate verify`: three gates with thresholds fixed before measuring, ending in `GO` or
//! `NO-GO`. The verdict is GO iff there is no blocker; every failed check is a blocker, and
//! nothing else decides.
//!
//! * Gate 1 ([`gate1`]): stored bits and metadata, read back through ggml's own reader.
//! * Gate 2 ([`tokenizer`], [`vectors`]): token ids in all four add_special × parse_special modes,
//!   and embeddings (min cosine, top-1 retrieval) against the independent reference.
//! * Gate 3 ([`gate3`]): sha256 manifest of the release folder and a re-measurement on exactly
//!   those bytes.

pub mod corpus;
pub mod expand;
pub mod gate1;
pub mod gate1_affine;
pub mod gate3;
pub mod logits;
pub mod report;
pub mod requant;
pub mod tokenizer;
pub mod vectors;

use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result};
use serde::{Deserialize, Serialize};

use crate::convert::{self, arch::Arch, hf::HfDir, OutType};
use crate::hash::sha256_file;

/// One reason for NO-GO.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct Blocker {
    /// Gate number (0 = set-up: protocol, inputs).
    pub gate: u8,
    /// Stable machine-readable code, e.g. `tensor-bits`, `metadata-mismatch`.
    pub code: String,
    /// The tensor, key or text concerned.
    pub subject: String,
    /// What was found.
    pub detail: String,
}

impl Blocker {
    /// A blocker of `gate` with `code` about `subject`.
    pub fn new(gate: u8, code: &str, subject: &str, detail: String) -> Blocker {
        Blocker {
            gate,
            code: code.into(),
            subject: subject.into(),
            detail,
        }
    }
}

/// Thresholds, fixed before anything is measured. Their hash goes into the report.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Thresholds {
    /// Lowest allowed cosine between llama.cpp's and the reference's pooled embeddings.
    pub min_cosine: f64,
    /// Fraction of retrieval queries whose top-1 document must be identical (1.0 = all).
    pub min_top1_agreement: f64,
    /// Causal LMs: lowest allowed per-position cosine of the logits.
    pub min_logits_cosine: f64,
    /// Causal LMs: lowest allowed fraction of positions with the same argmax.
    pub min_logits_top1_agreement: f64,
    /// Causal LMs: highest allowed mean KL(reference ‖ llama.cpp), nats.
    pub max_mean_kld: f64,
}

impl Default for Thresholds {
    /// The built-in declaration: embedding cosine ≥ 0.99 with every top-1 identical; logits
    /// cosine ≥ 0.99, argmax agreement ≥ 0.95, mean KLD ≤ 0.01 nats.
    fn default() -> Self {
        Thresholds {
            min_cosine: 0.99,
            min_top1_agreement: 1.0,
            min_logits_cosine: 0.99,
            min_logits_top1_agreement: 0.95,
            max_mean_kld: 0.01,
        }
    }
}

/// The names every protocol must declare under `[thresholds]`.
pub const THRESHOLD_NAMES: &[&str] = &[
    "min_cosine",
    "min_top1_agreement",
    "min_logits_cosine",
    "min_logits_top1_agreement",
    "max_mean_kld",
];

/// Loads thresholds from a protocol TOML file (`[thresholds]` table). Every threshold must be
/// declared there: an undeclared one is a blocker, never a default.
pub fn thresholds_from_protocol(path: &Path, blockers: &mut Vec<Blocker>) -> Result<Thresholds> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("{}: cannot read protocol", path.display()))?;
    let v: toml::Value =
        toml::from_str(&text).with_context(|| format!("{}: invalid TOML", path.display()))?;
    let table = v.get("thresholds").and_then(|t| t.as_table());
    let mut get = |name: &str| -> f64 {
        match table
            .and_then(|t| t.get(name))
            .and_then(|x| x.as_float().or_else(|| x.as_integer().map(|i| i as f64)))
        {
            Some(x) => x,
            None => {
                blockers.push(Blocker::new(
                    0,
                    "threshold-undeclared",
                    name,
                    format!("{} does not declare thresholds.{name}; thresholds are fixed before measuring, never defaulted", path.display()),
                ));
                f64::NAN
            }
        }
    };
    Ok(Thresholds {
        min_cosine: get("min_cosine"),
        min_top1_agreement: get("min_top1_agreement"),
        min_logits_cosine: get("min_logits_cosine"),
        min_logits_top1_agreement: get("min_logits_top1_agreement"),
        max_mean_kld: get("max_mean_kld"),
    })
}

/// What to verify.
#[derive(Clone, Debug)]
pub struct VerifyOptions {
    /// The HF source folder.
    pub hf_dir: PathBuf,
    /// The GGUF to verify.
    pub gguf: PathBuf,
    /// Extra texts, one per line (added to the built-in corpus).
    pub texts: Option<PathBuf>,
    /// Protocol file declaring the thresholds.
    pub protocol: Option<PathBuf>,
    /// Release folder for Gate 3.
    pub release: Option<PathBuf>,
    /// Threads for llama.cpp.
    pub threads: i32,
}

/// An input file and its hash.
#[derive(Clone, Debug, Serialize)]
pub struct InputHash {
    pub path: String,
    pub sha256: String,
}

/// The full verification result.
#[derive(Clone, Debug, Serialize)]
pub struct VerifyReport {
    /// `GO` or `NO-GO`.
    pub verdict: String,
    /// Every blocker (empty iff GO).
    pub blockers: Vec<Blocker>,
    /// Thresholds used and their sha256.
    pub thresholds: Thresholds,
    pub thresholds_sha256: String,
    /// quantgate version and the pinned llama.cpp build.
    pub quantgate: String,
    pub llama_cpp: String,
    /// Context settings of every llama.cpp measurement.
    pub llama_context: serde_json::Value,
    /// Inputs with their sha256.
    pub inputs: Vec<InputHash>,
    pub gate1: gate1::Gate1Report,
    /// Gate 1 of tensors converted from already-quantized (MLX affine) sources.
    pub gate1_affine: Option<gate1_affine::AffineGate1Report>,
    pub gate2_tokenizer: Option<tokenizer::TokenizerReport>,
    pub gate2_vectors: Option<vectors::VectorReport>,
    pub gate2_logits: Option<logits::LogitsReport>,
    /// With block-quantized weights: the file as shipped against the reference (reported;
    /// `gate2_logits` then holds the judged F32-expansion measurement).
    pub gate2_logits_as_shipped: Option<logits::LogitsReport>,
    pub gate3: Option<gate3::Gate3Report>,
    /// Facts worth knowing that do not block (source disagreements, limitations).
    pub notes: Vec<String>,
}

/// `value ≥ threshold`, false when either is NaN (an undeclared threshold never passes).
fn meets(value: f64, threshold: f64) -> bool {
    value >= threshold
}

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

/// Runs all gates. Errors only for unusable inputs (the caller prints them, exit 2); every
/// measured failure is a blocker in the report instead.
pub fn verify(opts: &VerifyOptions) -> Result<VerifyReport> {
    let mut blockers = Vec::new();
    let mut notes = Vec::new();
    let thresholds = match &opts.protocol {
        Some(p) => thresholds_from_protocol(p, &mut blockers)?,
        None => Thresholds::default(),
    };
    let thresholds_sha256 =
        crate::hash::sha256_bytes(serde_json::to_string(&thresholds)?.as_bytes());

    // Inputs, hashed before anything is measured.
    let mut inputs = vec![InputHash {
        path: opts.gguf.display().to_string(),
        sha256: sha256_file(&opts.gguf)?,
    }];
    // ggml's own reader, opened once: the independent read-back path of Gate 1.
    let c = llama_runtime::CGguf::open(&opts.gguf).map_err(|e| anyhow::anyhow!("Gate 1: {e}"))?;
    let file_tensors = c.tensors();
    let vocab_only = file_tensors.is_empty();
    let hf = HfDir::open(&opts.hf_dir, !vocab_only)?;
    for name in [
        "config.json",
        "tokenizer.json",
        "tokenizer_config.json",
        "modules.json",
        "1_Pooling/config.json",
    ] {
        let p = opts.hf_dir.join(name);
        if p.exists() {
            inputs.push(InputHash {
                path: p.display().to_string(),
                sha256: sha256_file(&p)?,
            });
        }
    }
    for f in reference::safetensors_files(&opts.hf_dir).unwrap_or_default() {
        inputs.push(InputHash {
            path: f.display().to_string(),
            sha256: sha256_file(&f)?,
        });
    }
    let arch = convert::arch_of(&hf)?;

    // Gate 1: metadata and tensors.
    let tok = convert::tokenizer::load(&opts.hf_dir)?;
    notes.extend(tok.notes.iter().cloned());
    let vocab = convert::vocab::build(&tok.json, &hf.tokenizer_config, &hf.config, &tok.tokenizer)?;
    notes.extend(vocab.notes.iter().cloned());
    for b in &vocab.blockers {
        blockers.push(Blocker::new(
            1,
            "tokenizer-inexpressible",
            "tokenizer",
            b.clone(),
        ));
    }
    let pooling = reference::pooling::Pooling::from_sentence_transformers(&opts.hf_dir)?;
    let types: Vec<u32> = file_tensors.iter().map(|t| t.type_id).collect();
    let mut expected = convert::metadata(&hf, arch, outtype_of(&types), pooling, &vocab);
    // A file from an MLX checkpoint is typed by its quantized tensors (as convert writes it).
    let stored: Vec<gguf::GgmlType> = types
        .iter()
        .filter_map(|t| gguf::GgmlType::from_id(*t))
        .collect();
    if let Some(ft) = convert::mlx::file_type(&stored) {
        for (k, v) in expected.iter_mut() {
            if k == "general.file_type" {
                *v = gguf::Value::U32(ft);
            }
        }
    }
    if vocab_only {
        // A vocab-only file's file_type is whatever the converter was asked; not implied.
        expected.retain(|(k, _)| k != "general.file_type");
        notes.push(
            "vocab-only file: tensors and vectors are not measured; Gate 1 covers metadata only"
                .into(),
        );
    }
    // general.name depends on the folder name the file was converted from; not a model fact.
    expected.retain(|(k, _)| k != "general.name");
    let mut g1 = gate1::Gate1Report::default();
    gate1::check_metadata(&c, &expected, &mut blockers, &mut g1)?;
    let mut affine_report = None;
    let mut source_inconsistent = false;
    if !vocab_only {
        let n_before = blockers.len();
        let (ar, covered) = gate1_affine::check(&opts.gguf, &c, &hf, arch, &mut blockers)?;
        source_inconsistent = blockers[n_before..]
            .iter()
            .any(|b| b.code == "source-quantization");
        g1.tensors += ar.exact_tensors + ar.fallback_tensors;
        g1.bit_identical += ar.values_identical.min(ar.fields_identical) + ar.fallback_identical;
        for (t, n) in &ar.by_type {
            *g1.by_type.entry(t.clone()).or_default() += n;
        }
        if ar.modules > 0 || !covered.gguf_names.is_empty() {
            if ar.ggml_to_float_agrees < ar.ggml_to_float_checked {
                notes.push(format!(
                    "ggml to_float differs from the named formula (f32 multiply then add) on {} of {} affine tensors (e.g. FMA contraction); Gate 1 is decided on fields + named formula as declared",
                    ar.ggml_to_float_checked - ar.ggml_to_float_agrees,
                    ar.ggml_to_float_checked
                ));
            }
            affine_report = Some(ar);
        }
        gate1::check_tensors(&opts.gguf, &c, &hf, arch, &covered, &mut blockers, &mut g1)?;
    }

    // Gate 2.
    let model = llama_runtime::Model::load(&opts.gguf, vocab_only)?;
    let mut texts: Vec<String> = corpus::TOKENIZER_CORPUS
        .iter()
        .map(|s| s.to_string())
        .collect();
    if let Some(p) = &opts.texts {
        let t = std::fs::read_to_string(p)
            .with_context(|| format!("{}: cannot read texts", p.display()))?;
        texts.extend(t.lines().filter(|l| !l.trim().is_empty()).map(String::from));
    }
    let tr = tokenizer::check(&tok.tokenizer, &tok.json, &model, &texts)?;
    if tr.matching_modes.is_empty() {
        let detail = tr
            .modes
            .iter()
            .map(|m| {
                format!(
                    "add_special={} parse_special={}: {}/{} ({})",
                    m.mode.add_special,
                    m.mode.parse_special,
                    m.matched,
                    m.total,
                    m.first_mismatch
                        .as_ref()
                        .map(|x| x.shape.as_str())
                        .unwrap_or("")
                )
            })
            .collect::<Vec<_>>()
            .join("; ");
        blockers.push(Blocker::new(
            2,
            "tokenizer-no-mode",
            "token ids",
            format!("no mode matches HF on every text: {detail}"),
        ));
    }
    notes.extend(tr.limitations.iter().cloned());

    let params = llama_runtime::ContextParams::embeddings(512, opts.threads);
    let mut vr = None;
    let mut lr = None;
    let mut logits_as_shipped = None;
    if !vocab_only {
        // Vectors and logits are compared on the texts whose ids both sides can agree on.
        let gated: Vec<String> = texts
            .iter()
            .filter(|t| tokenizer::known_divergence(&tok.json, t).is_none())
            .cloned()
            .collect();
        let model_type = hf.config["model_type"].as_str().unwrap_or("");
        let is_embedding = arch == Arch::Bert || pooling.is_some();
        if is_embedding {
            let reference = vectors::RefModel::load(&opts.hf_dir, model_type)?;
            let v = vectors::check(&model, &params, &reference, &tok.tokenizer, &gated)?;
            if model_type == "bert" && hf.config["hidden_act"].as_str().unwrap_or("gelu") == "gelu"
            {
                // Measured on all-MiniLM-L6-v2 F32: min cosine 0.9999979 with erf GELU in the
                // reference, 0.9999996 with the tanh form; the stored bits are identical.
                notes.push(
                    "llama.cpp's CPU GELU is the tanh approximation read from an f16 table; HF BERT uses exact erf GELU \
                     (the reference too): expect cosines a few 1e-6 below 1 even for an F32 file"
                        .into(),
                );
            }
            if !meets(v.min_cosine, thresholds.min_cosine) {
                blockers.push(Blocker::new(
                    2,
                    "vectors-cosine",
                    &v.worst_text,
                    format!(
                        "min cosine {:.6} < threshold {}",
                        v.min_cosine, thresholds.min_cosine
                    ),
                ));
            }
            let agreement = v.top1_identical as f64 / v.queries as f64;
            if !meets(agreement, thresholds.min_top1_agreement) {
                blockers.push(Blocker::new(
                    2,
                    "vectors-top1",
                    "retrieval",
                    format!(
                        "{}/{} top-1 identical < threshold {}",
                        v.top1_identical, v.queries, thresholds.min_top1_agreement
                    ),
                ));
            }
            if v.llama_pooling != reference.pooling().llama_id() as i32 {
                blockers.push(Blocker::new(
                    2,
                    "vectors-pooling",
                    "pooling_type",
                    format!(
                        "llama.cpp pools with type {}, the model declares {:?}",
                        v.llama_pooling,
                        reference.pooling()
                    ),
                ));
            }
            vr = Some(v);
        } else if source_inconsistent {
            blockers.push(Blocker::new(
                2,
                "logits-not-measured",
                "logits",
                "the source's quantization metadata disagrees with its tensors (Gate 1); the reference cannot load it".into(),
            ));
        } else {
            let reference = reference::decoder::Decoder::load(&opts.hf_dir)?;
            let direct = logits::check(&model, &reference, &tok.tokenizer, &gated, opts.threads)?;
            let l = if expand::has_block_quantized(&types) {
                // Declared rule: with block-quantized weights llama.cpp's CPU matmuls quantize
                // activations (Q8_0/Q8_1/Q8_K), an arithmetic of the runtime shared by every
                // such file. The thresholds judge llama.cpp running the F32 expansion of the
                // stored values (ggml's own to_float) against the reference; the file as
                // shipped is measured and reported beside it.
                let dir = tempfile::tempdir()?;
                let p = dir.path().join("f32-expansion.gguf");
                expand::write_f32_expansion(&opts.gguf, &p)?;
                let m32 = llama_runtime::Model::load(&p, false)?;
                let l = logits::check(&m32, &reference, &tok.tokenizer, &gated, opts.threads)?;
                notes.push(format!(
                    "block-quantized weights: logits judged on llama.cpp running the F32 expansion of the stored values \
                     (min cosine {:.6}, argmax {:.4}, mean KLD {:.6}); the file as shipped, with llama.cpp's quantized-activation \
                     matmuls: min cosine {:.6}, argmax {:.4}, mean KLD {:.6}",
                    l.min_cosine, l.top1_agreement, l.mean_kld,
                    direct.min_cosine, direct.top1_agreement, direct.mean_kld
                ));
                logits_as_shipped = Some(direct);
                l
            } else {
                direct
            };
            if l.positions == 0 {
                blockers.push(Blocker::new(
                    2,
                    "logits-not-measured",
                    "logits",
                    "no position was compared".into(),
                ));
            }
            if !meets(l.min_cosine, thresholds.min_logits_cosine) {
                blockers.push(Blocker::new(
                    2,
                    "logits-cosine",
                    "logits",
                    format!(
                        "min cosine {:.6} < {}",
                        l.min_cosine, thresholds.min_logits_cosine
                    ),
                ));
            }
            if !meets(l.top1_agreement, thresholds.min_logits_top1_agreement) {
                blockers.push(Blocker::new(
                    2,
                    "logits-top1",
                    "logits",
                    format!(
                        "argmax agreement {:.4} < {}",
                        l.top1_agreement, thresholds.min_logits_top1_agreement
                    ),
                ));
            }
            if !meets(thresholds.max_mean_kld, l.mean_kld) {
                blockers.push(Blocker::new(
                    2,
                    "logits-kld",
                    "logits",
                    format!("mean KLD {:.6} > {}", l.mean_kld, thresholds.max_mean_kld),
                ));
            }
            lr = Some(l);
        }
    }

    // Gate 3.
    let g3 = match &opts.release {
        Some(dir) => Some(gate3::check(dir, &params, vr.as_ref(), &mut blockers)?),
        None => None,
    };

    let build = llama_runtime::build_info();
    Ok(VerifyReport {
        verdict: if blockers.is_empty() { "GO" } else { "NO-GO" }.into(),
        blockers,
        thresholds,
        thresholds_sha256,
        quantgate: env!("CARGO_PKG_VERSION").into(),
        llama_cpp: build.to_string(),
        llama_context: serde_json::json!({
            "n_ctx": params.n_ctx, "n_batch": params.n_batch, "n_ubatch": params.n_ubatch,
            "threads": params.n_threads, "kv_type": "F16", "pooling": "model default",
            "tokenize": "add_special=true, parse_special=true",
        }),
        inputs,
        gate1: g1,
        gate1_affine: affine_report,
        gate2_tokenizer: Some(tr),
        gate2_vectors: vr,
        gate2_logits: lr,
        gate2_logits_as_shipped: logits_as_shipped,
        gate3: g3,
        notes,
    })
}
