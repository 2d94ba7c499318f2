//! `bench quant`: what an importance matrix buys, per quantization type. Each type is made
//! from the same F16 file twice, without and with the imatrix (`quantize`, `quantize
//! --imatrix`), and measured against the F16 file's logits as `llama-perplexity
//! --kl-divergence` measures them ([`crate::eval::kld`]): mean KLD, 99th-percentile KLD, same
//! top p, PPL and its ratio to F16's. Types that cannot be made without an imatrix (IQ2_XXS, …)
//! get the imatrix row only.
//!
//! The imatrix must come from text disjoint from the evaluation text (HellaSwag contexts for
//! the imatrix, wikitext-2 test for KLD/PPL in docs/imatrix.md): a matrix computed on the
//! evaluation text would flatter it.

use std::path::Path;

use anyhow::{Context as _, Result};
use serde::Serialize;

use crate::eval::kld;
use crate::threads::Threads;

/// What to measure.
pub struct QuantBench<'a> {
    /// The F16 (or BF16/F32) GGUF every type is made from; also the KLD base.
    pub f16: &'a Path,
    /// The importance matrix (`quantgate imatrix` or llama-imatrix output).
    pub imatrix: &'a Path,
    /// llama.cpp file type names (`Q4_K_M`, `IQ4_XS`, …).
    pub types: &'a [String],
    /// Evaluation text (wikitext-2 test).
    pub text: &'a Path,
    /// 512-token chunks of `text` scored (`None`: all).
    pub chunks: Option<usize>,
    pub threads: Threads,
    /// Where the quantized files and the base logits go.
    pub work: &'a Path,
}

/// One measured file.
#[derive(Clone, Debug, Serialize)]
pub struct QuantRow {
    /// llama.cpp file type name.
    pub ftype: String,
    /// Made with the imatrix.
    pub imatrix: bool,
    /// File size, bytes.
    pub bytes: u64,
    /// Tensor data bits per weight (8 × tensor bytes / elements).
    pub bits_per_weight: f64,
    /// `quantize` wall time, s (with its Gate 1 re-quantization check).
    pub quantize_s: f64,
    /// llama-perplexity --kl-divergence's figures against the F16 base.
    pub mean_kld: f64,
    pub kld_99: f64,
    pub same_top_p: f64,
    pub ppl: f64,
    /// PPL(Q) / PPL(F16).
    pub ppl_ratio: f64,
}

/// The table: the F16 base's PPL and one row per (type, with/without).
#[derive(Clone, Debug, Serialize)]
pub struct QuantTable {
    /// llama.cpp pin and the CPU backend variant that ran (results depend on both).
    pub runtime: String,
    pub f16: String,
    pub imatrix: String,
    pub imatrix_sha256: String,
    pub text: String,
    pub positions: usize,
    pub ppl_f16: f64,
    pub rows: Vec<QuantRow>,
}

fn bits_per_weight(path: &Path) -> Result<f64> {
    let h = gguf::Header::read_infos(path)?;
    let (bytes, n) = h.tensors.iter().fold((0u64, 0u64), |(b, n), t| {
        (b + t.n_bytes, n + t.n_elements())
    });
    Ok(8.0 * bytes as f64 / n.max(1) as f64)
}

/// Makes and measures every type, without then with the imatrix; `on_step` hears each step.
///
/// Errors: a type llama.cpp does not know, a quantization or measurement that fails (naming
/// the file).
pub fn run(b: &QuantBench, on_step: &mut dyn FnMut(&str)) -> Result<QuantTable> {
    std::fs::create_dir_all(b.work).with_context(|| format!("{}", b.work.display()))?;
    let text = crate::eval::ppl::read_text(b.text)?;
    let base = b.work.join("f16.kld-base");
    on_step("F16 base logits");
    kld::write_base(b.f16, &text, 512, b.chunks, b.threads, &base, |_, _| {})?;
    let mut rows = Vec::new();
    let mut ppl_f16 = f64::NAN;
    let mut positions = 0;
    for ty in b.types {
        let needs = gguf::LlamaFtype::by_name(ty)
            .with_context(|| format!("{ty}: not a llama.cpp file type"))?
            .requires_imatrix();
        for with in [false, true] {
            if needs && !with {
                continue;
            }
            let out = b
                .work
                .join(format!("{ty}{}.gguf", if with { "-imatrix" } else { "" }));
            on_step(&format!("{ty}, imatrix {with}: quantize"));
            let q = crate::quantize::quantize_with(
                b.f16,
                &out,
                ty,
                b.threads,
                with.then_some(b.imatrix),
            )?;
            on_step(&format!("{ty}, imatrix {with}: KLD"));
            let k = kld::compare(&out, &base, b.threads, |_, _| {})?;
            (ppl_f16, positions) = (k.ppl_base, k.positions);
            rows.push(QuantRow {
                ftype: ty.clone(),
                imatrix: with,
                bytes: q.file_bytes,
                bits_per_weight: bits_per_weight(&out)?,
                quantize_s: q.seconds,
                mean_kld: k.mean_kld,
                kld_99: k.kld_99,
                same_top_p: k.same_top_p,
                ppl: k.ppl_q,
                ppl_ratio: k.ppl_q / k.ppl_base,
            });
            std::fs::remove_file(&out).with_context(|| format!("{}", out.display()))?;
        }
    }
    Ok(QuantTable {
        runtime: llama_runtime::build_info().to_string(),
        f16: b.f16.display().to_string(),
        imatrix: b.imatrix.display().to_string(),
        imatrix_sha256: crate::hash::sha256_file(b.imatrix)?,
        text: b.text.display().to_string(),
        positions,
        ppl_f16,
        rows,
    })
}

/// The table in Markdown.
pub fn markdown(t: &QuantTable) -> String {
    let mut s = format!(
        "F16 `{}`: PPL {:.4} on `{}` ({} positions); imatrix `{}` (sha256 `{}`)\n\n| type | imatrix | bpw | mean KLD | KLD p99 | same top p | PPL | PPL ratio |\n|---|---|---:|---:|---:|---:|---:|---:|\n",
        t.f16, t.ppl_f16, t.text, t.positions, t.imatrix, t.imatrix_sha256
    );
    for r in &t.rows {
        s += &format!(
            "| {} | {} | {:.2} | {:.6} | {:.6} | {:.4} | {:.4} | {:.4} |\n",
            r.ftype,
            if r.imatrix { "yes" } else { "no" },
            r.bits_per_weight,
            r.mean_kld,
            r.kld_99,
            r.same_top_p,
            r.ppl,
            r.ppl_ratio
        );
    }
    s
}
