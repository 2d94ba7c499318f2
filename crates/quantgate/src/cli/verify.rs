//! `quantgate verify --hf HF_DIR --gguf FILE.gguf …`: the three gates, `GO` or `NO-GO` last.

use std::path::{Path, PathBuf};

use quantgate::verify::{self, Verdict, VerifyOptions, VerifyReport};

use super::Status;
use quantgate::threads::Threads;

/// Arguments of `verify`.
#[derive(clap::Args)]
pub struct Args {
    /// The HF source folder.
    #[arg(long)]
    hf: PathBuf,
    /// The GGUF file to verify.
    #[arg(long)]
    gguf: PathBuf,
    /// Extra texts for Gate 2, one per line.
    #[arg(long)]
    texts: Option<PathBuf>,
    /// Protocol TOML declaring every threshold under [thresholds].
    #[arg(long)]
    protocol: Option<PathBuf>,
    /// Folder to write report.json and report.md into.
    #[arg(long)]
    report: Option<PathBuf>,
    /// Release folder for Gate 3 (sha256 manifest and re-measurement of the shipped file).
    #[arg(long)]
    release: Option<PathBuf>,
    /// Text for the quality section's PPL of the file and of the source (first 4 × 512
    /// tokens, e.g. wiki.test.raw); without it PPL is not measured.
    #[arg(long, value_name = "FILE")]
    ppl_text: Option<PathBuf>,
    /// The importance matrix the file was quantized with (`llama-quantize --imatrix`): Gate 1
    /// re-makes every tensor with its weights. Without it, an imatrix quant's weighted tensors
    /// are listed as undecided (a named limitation) and judged by Gate 2 only.
    #[arg(long, value_name = "FILE")]
    imatrix: Option<PathBuf>,
    /// llama.cpp threads.
    #[arg(long, default_value_t = Threads::DEFAULT)]
    threads: Threads,
}

/// `out/verify-STEM` for `gguf` when no `--report` is given.
fn default_report_dir(gguf: &Path) -> PathBuf {
    let stem = gguf
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    PathBuf::from("out").join(format!("verify-{stem}"))
}

/// Verifies and writes the report; exit 0 for GO, 1 for NO-GO.
pub fn run(a: Args) -> anyhow::Result<Status> {
    let dir = a.report.unwrap_or_else(|| default_report_dir(&a.gguf));
    let opts = VerifyOptions {
        hf_dir: a.hf,
        gguf: a.gguf,
        texts: a.texts,
        protocol: a.protocol,
        release: a.release,
        ppl_text: a.ppl_text,
        threads: a.threads,
        work_dir: Some(dir.clone()),
        imatrix: a.imatrix.clone(),
    };
    quantgate::interrupt::install();
    super::progress::install_stderr_hook("verify");
    let r = verify::verify(&opts)?;
    verify::report::write(&dir, &r)?;
    render(&r);
    println!("report: {}", dir.display());
    println!("{}", r.verdict);
    Ok(Status::from_pass(r.verdict == Verdict::Go))
}

fn render(r: &VerifyReport) {
    println!("runtime: {}", r.llama_cpp);
    println!(
        "gate 1: {}/{} tensors bit-identical, {}/{} metadata keys match",
        r.gate1.bit_identical, r.gate1.tensors, r.gate1.metadata_matching, r.gate1.metadata_keys
    );
    render_imatrix(&r.gate1_imatrix);
    if let Some(t) = &r.gate2_tokenizer {
        let modes: Vec<String> = t.matching_modes.iter().map(|m| m.to_string()).collect();
        println!(
            "gate 2 tokenizer: {} texts; modes matching HF on every text: [{}]",
            t.texts,
            modes.join("; ")
        );
    }
    if let Some(v) = &r.gate2_vectors {
        println!(
            "gate 2 vectors: min cosine {:.7} (threshold {}), top-1 identical {}/{}",
            v.min_cosine, r.thresholds.min_cosine, v.top1_identical, v.queries
        );
    }
    render_logits(r);
    if let Some(g) = &r.gate3 {
        super::release::render_gate3_files(g);
    }
    for b in &r.blockers {
        println!(
            "blocker: gate {} {} {}: {}",
            b.gate, b.code, b.subject, b.detail
        );
    }
}

fn render_logits(r: &VerifyReport) {
    if let Some(l) = &r.gate2_logits {
        let judged_on = if r.gate2_logits_as_shipped.is_some() {
            " (llama.cpp on the F32 expansion vs the reference on the same stored values)"
        } else {
            ""
        };
        let t = &r.thresholds;
        println!(
            "gate 2 logits{judged_on}: {} texts, {} positions; min cosine {:.6} (threshold {}), argmax agreement {:.4} (threshold {}), mean KLD {:.6} (threshold {})",
            l.texts,
            l.positions,
            l.min_cosine,
            t.min_logits_cosine,
            l.top1_agreement,
            t.min_logits_top1_agreement,
            l.mean_kld,
            t.max_mean_kld
        );
    }
    if let Some(q) = &r.quality {
        for line in verify::quality::lines(q) {
            println!("{line}");
        }
    } else if let Some(l) = &r.gate2_logits_as_shipped {
        println!(
            "quality against the source (the file as shipped vs the reference on the HF weights; reported, not judged): min cosine {:.6}, argmax agreement {:.4}, mean KLD {:.6}",
            l.min_cosine, l.top1_agreement, l.mean_kld
        );
    }
}

/// Gate 1's imatrix line (docs/imatrix.md), for a file with `quantize.imatrix.*` keys.
fn render_imatrix(im: &verify::imatrix::ImatrixSection) {
    use verify::imatrix::{ImatrixStatus, MAX_UNDECIDED_RMS_RATIO};
    match (im.status, &im.given) {
        (ImatrixStatus::Checked, Some(g)) => println!(
            "gate 1 imatrix: every tensor re-made with the weights of {} (sha256 {})",
            g.file, g.sha256
        ),
        (ImatrixStatus::NotGiven, _) => println!(
            "gate 1 imatrix: not given (limitation): {} tensors undecided byte for byte, worst RMS error {:.2} × the unweighted encoding's (bound {MAX_UNDECIDED_RMS_RATIO} ×)",
            im.undecided.len(),
            im.undecided.iter().map(|u| u.ratio()).fold(0.0, f64::max)
        ),
        _ => {}
    }
}
