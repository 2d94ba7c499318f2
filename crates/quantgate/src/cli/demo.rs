//! `quantgate demo`: the main job on the embedded default (see [`quantgate::demo`]).

use std::path::PathBuf;

use quantgate::demo::{self, DemoArm};
use quantgate::verify::Verdict;

use super::Status;

/// Arguments of `demo`.
#[derive(clap::Args)]
pub struct Args {
    /// Output folder for the GGUF files, release folders and reports.
    #[arg(long, default_value = "out/demo")]
    out: PathBuf,
}

/// Runs both arms; `GO` as the last line (exit 0) when both pass.
pub fn run(a: Args) -> anyhow::Result<Status> {
    if !demo::inputs_ready()? {
        eprintln!("demo: fetching the inputs (scripts/fetch-models.sh)");
        demo::fetch_inputs()?;
    }
    let pb = indicatif::ProgressBar::new(4).with_style(
        indicatif::ProgressStyle::with_template(
            "demo {bar:30} {pos}/{len} {msg} [{elapsed}, ETA {eta}]",
        )
        .expect("template"),
    );
    let mut go = true;
    for (outtype, name) in demo::ARMS {
        pb.set_message(format!("convert {name}"));
        let arm = demo::run_arm(&a.out, outtype, name, || {
            pb.inc(1);
            pb.set_message(format!("verify {name}"));
        })?;
        pb.inc(1);
        // println through the bar: a hidden bar (no terminal) would swallow pb.println.
        pb.suspend(|| render(&arm));
        go &= arm.verify.verdict == Verdict::Go;
    }
    pb.finish_and_clear();
    println!("runtime: {}", llama_runtime::build_info());
    println!("{}", if go { Verdict::Go } else { Verdict::NoGo });
    Ok(Status::from_pass(go))
}

fn render(arm: &DemoArm) {
    let (c, r) = (&arm.convert, &arm.verify);
    let v = r.gate2_vectors.as_ref();
    println!(
        "{}: {} bytes in {:.2} s; gate 1 {}/{} bit-identical; min cosine {:.7}; top-1 {}/{}; {} → {}",
        arm.name,
        c.file_bytes,
        c.seconds,
        r.gate1.bit_identical,
        r.gate1.tensors,
        v.map(|v| v.min_cosine).unwrap_or(f64::NAN),
        v.map(|v| v.top1_identical).unwrap_or(0),
        v.map(|v| v.queries).unwrap_or(0),
        r.verdict,
        arm.report_dir.join("report.md").display()
    );
    for b in &r.blockers {
        println!(
            "  blocker: gate {} {} {}: {}",
            b.gate, b.code, b.subject, b.detail
        );
    }
}
