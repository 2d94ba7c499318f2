//! `quantgate selftest HF_DIR GGUF`: fault injection into the verifier (see
//! [`quantgate::selftest`]); prints the table of classes and exits 1 if any mutant passed.

use std::collections::BTreeMap;
use std::path::PathBuf;

use quantgate::selftest::{self, SelftestReport};

use super::Status;
use quantgate::threads::Threads;

/// Arguments of `selftest`.
#[derive(clap::Args)]
pub struct Args {
    /// The HF folder the GGUF was converted from.
    hf_dir: PathBuf,
    /// A correct conversion of it (verify says GO).
    gguf: PathBuf,
    /// llama.cpp threads.
    #[arg(long, default_value_t = Threads::DEFAULT)]
    threads: Threads,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

/// Runs the self-test; exit 0 when sound, 1 otherwise.
pub fn run(a: Args) -> anyhow::Result<Status> {
    quantgate::interrupt::install();
    let pb = super::progress::bar(0, "verifications");
    let r = selftest::run(&a.hf_dir, &a.gguf, a.threads, |i, n, class| {
        pb.set_length(n as u64);
        pb.set_position(i as u64);
        pb.set_message(class.to_string());
    });
    pb.finish_and_clear();
    let r = r?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&r)?);
    } else {
        render(&r);
    }
    Ok(Status::from_pass(r.sound()))
}

fn render(r: &SelftestReport) {
    println!("runtime: {}", llama_runtime::build_info());
    if r.baseline_blockers.is_empty() {
        println!("unmutated file: {}", r.baseline);
    } else {
        println!("unmutated file: {} {:?}", r.baseline, r.baseline_blockers);
    }
    println!("| class | mutants | caught | caught by |\n|---|---:|---:|---|");
    let mut classes: BTreeMap<&str, (usize, usize, Vec<String>)> = BTreeMap::new();
    for m in &r.mutants {
        let e = classes.entry(m.class.as_str()).or_default();
        e.0 += 1;
        e.1 += m.caught as usize;
        let first =
            m.by.first()
                .cloned()
                .unwrap_or_else(|| "nothing (GO)".into());
        if !e.2.contains(&first) {
            e.2.push(first);
        }
    }
    for (class, (n, caught, by)) in &classes {
        println!("| {class} | {n} | {caught} | {} |", by.join(", "));
    }
    for m in r.mutants.iter().filter(|m| !m.caught) {
        println!("NOT CAUGHT: {} — {}: {:?}", m.class, m.what, m.by);
    }
    let caught = r.mutants.iter().filter(|m| m.caught).count();
    println!(
        "{caught}/{} mutants caught; unmutated {} → {}",
        r.mutants.len(),
        r.baseline,
        if r.sound() { "sound" } else { "NOT sound" }
    );
}
