//! `quantgate release --hf HF_DIR --gguf FILE [--gguf FILE …] -o RELEASE_DIR`: verify each file,
//! assemble the release folder, Gate 3 on its bytes; `GO` or `NO-GO` for the package last.
//! `quantgate release --check RELEASE_DIR`: Gate 3 again on a folder already built.

use std::path::PathBuf;

use quantgate::release::{self, Gate3, ReleaseOptions};
use quantgate::verify::Verdict;

use super::exit::Usage;
use super::Status;
use quantgate::threads::Threads;

/// Arguments of `release`.
#[derive(clap::Args)]
pub struct Args {
    /// The HF source folder every GGUF was made from.
    #[arg(long, required_unless_present = "check")]
    hf: Option<PathBuf>,
    /// A GGUF to ship (repeat for each file).
    #[arg(long)]
    gguf: Vec<PathBuf>,
    /// The release folder to create (must not exist).
    #[arg(short, long, required_unless_present = "check")]
    out: Option<PathBuf>,
    /// Protocol TOML: thresholds and quality budgets.
    #[arg(long)]
    protocol: Option<PathBuf>,
    /// Text for each lossy file's PPL against the source (e.g. wiki.test.raw).
    #[arg(long, value_name = "FILE")]
    ppl_text: Option<PathBuf>,
    /// The importance matrix the files with `quantize.imatrix.*` keys were made with: each is
    /// then checked byte for byte with its weights (docs/imatrix.md), and the card names it.
    #[arg(long, value_name = "FILE")]
    imatrix: Option<PathBuf>,
    /// The source's hub id for the card's base_model (e.g. HuggingFaceTB/SmolLM2-135M-Instruct).
    #[arg(long)]
    base_model: Option<String>,
    /// ECDSA P-256 private key (PEM): sign the folder as model.sig (OpenSSF model-signing
    /// v1.0; `model_signing verify key` checks it).
    #[arg(long, value_name = "KEY")]
    sign: Option<PathBuf>,
    /// With --check: the public key (PEM) the folder must be signed with; its model.sig is
    /// checked before anything else.
    #[arg(long, value_name = "PUBKEY", requires = "check")]
    trust: Option<PathBuf>,
    /// Re-run Gate 3 on an existing release folder instead of building one.
    #[arg(long, value_name = "RELEASE_DIR", conflicts_with_all = ["hf", "gguf", "out"])]
    check: Option<PathBuf>,
    /// llama.cpp threads (outputs are reproducible for one thread count).
    #[arg(long, default_value_t = Threads::DEFAULT)]
    threads: Threads,
}

/// Builds (or checks) a release; exit 0 for GO, 1 for NO-GO.
pub fn run(a: Args) -> anyhow::Result<Status> {
    if let Some(dir) = a.check {
        let (verdict, g3, provenance) = release::check(&dir, a.threads, a.trust.as_deref())?;
        println!("provenance: {provenance}");
        render_gate3(&g3);
        println!("{verdict}");
        return Ok(Status::from_pass(verdict == Verdict::Go));
    }
    let (Some(hf_dir), Some(out)) = (a.hf, a.out) else {
        return Err(Usage("release needs --hf and -o (or --check DIR)".into()).into());
    };
    if a.gguf.is_empty() {
        return Err(Usage("release needs at least one --gguf".into()).into());
    }
    let opts = ReleaseOptions {
        hf_dir,
        ggufs: a.gguf,
        out,
        protocol: a.protocol,
        ppl_text: a.ppl_text,
        base_model: a.base_model,
        threads: a.threads,
        imatrix: a.imatrix,
        sign: a.sign,
    };
    // SIGINT/SIGTERM stop between steps: the staging folder is removed on the way out.
    quantgate::interrupt::install();
    super::progress::install_stderr_hook("release");
    let r = release::release(&opts, &mut |step| eprintln!("release: {step}"))?;
    println!("runtime: {}", r.report.llama_cpp);
    for f in &r.report.files {
        println!(
            "{}: {} · {} bytes · {:.2} bpw · gates 1–2 {}",
            f.name, f.ftype, f.bytes, f.bits_per_weight, f.verify.verdict
        );
        if let Some(q) = &f.verify.quality {
            println!(
                "  quality vs source: mean KLD {:.6}, same top p {:.4}{}",
                q.logits.mean_kld,
                q.logits.top1_agreement,
                q.ppl
                    .as_ref()
                    .map_or(String::new(), |p| format!(", PPL ratio {:.4}", p.ratio))
            );
        }
    }
    render_gate3(&r.gate3);
    // Gate 3's blockers were printed with it.
    for b in r.blockers.iter().filter(|b| b.gate != 3) {
        println!(
            "blocker: gate {} {} {}: {}",
            b.gate, b.code, b.subject, b.detail
        );
    }
    println!("release: {}", r.out.display());
    println!("{}", r.verdict);
    Ok(Status::from_pass(r.verdict == Verdict::Go))
}

fn render_gate3(g: &Gate3) {
    render_gate3_files(g);
    for b in &g.blockers {
        println!("blocker: gate 3 {} {}: {}", b.code, b.subject, b.detail);
    }
}

/// Gate 3's files hashed and each shipped GGUF's result (blockers are printed by the caller).
pub(super) fn render_gate3_files(g: &Gate3) {
    println!("gate 3: SHA256SUMS {} files re-hashed", g.files_hashed);
    for f in &g.files {
        println!(
            "  {}: same bytes as verified {}, {} outputs re-measured, identical {}",
            f.name, f.same_bytes_as_verified, f.remeasured, f.identical
        );
    }
}
