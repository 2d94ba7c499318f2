//! `quantgate demo`: the main job on the embedded default (see [`quantgate::demo`]).

use std::path::PathBuf;

use quantgate::demo::{self, DemoRun};
use quantgate::verify::Verdict;

use super::Status;

/// Arguments of `demo`.
#[derive(clap::Args)]
pub struct Args {
    /// Output folder for the GGUF files and the release folder (`OUT/release`).
    #[arg(long, default_value = "out/demo")]
    out: PathBuf,
}

/// Runs the demo; `GO` as the last line (exit 0) when the release is GO.
pub fn run(a: Args) -> anyhow::Result<Status> {
    if !demo::inputs_ready()? {
        eprintln!("demo: fetching the inputs (scripts/fetch-models.sh)");
        demo::fetch_inputs()?;
    }
    let pb = indicatif::ProgressBar::new_spinner().with_style(
        indicatif::ProgressStyle::with_template("demo {spinner} {msg} [{elapsed}]")
            .expect("template"),
    );
    pb.enable_steady_tick(std::time::Duration::from_millis(200));
    let d = demo::run(&a.out, &mut |step| pb.set_message(step.to_string()))?;
    pb.finish_and_clear();
    render(&d);
    println!("{}", d.release.verdict);
    Ok(Status::from_pass(d.release.verdict == Verdict::Go))
}

fn render(d: &DemoRun) {
    println!(
        "convert F16: {} bytes in {:.2} s",
        d.convert.file_bytes, d.convert.seconds
    );
    for (p, q) in &d.quantized {
        println!("quantize: {} ({} tensors)", p.display(), q.tensors.len());
    }
    let r = &d.release;
    println!("runtime: {}", r.report.llama_cpp);
    for f in &r.report.files {
        let v = &f.verify;
        let cos = v.gate2_vectors.as_ref().map_or(f64::NAN, |x| x.min_cosine);
        println!(
            "{}: {} · {:.2} bpw · gate 1 {}/{} bit-identical · gate 2 min cosine {:.6} · {}",
            f.name,
            f.ftype,
            f.bits_per_weight,
            v.gate1.bit_identical,
            v.gate1.tensors,
            cos,
            v.verdict
        );
    }
    for g in &r.gate3.files {
        println!(
            "gate 3 {}: same bytes as verified {}, re-measured identical {}",
            g.name, g.same_bytes_as_verified, g.identical
        );
    }
    for b in &r.blockers {
        println!(
            "  blocker: gate {} {} {}: {}",
            b.gate, b.code, b.subject, b.detail
        );
    }
    println!(
        "release: {} (README.md, report.html, SHA256SUMS)",
        r.out.display()
    );
}
