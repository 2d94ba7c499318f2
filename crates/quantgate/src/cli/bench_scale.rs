//! `quantgate bench scale`: renders [`quantgate::benchmarks::scale`]: one table of steps, one
//! of goals (measured / allowed), and the reference's tokens/s beside llama.cpp's.

use std::path::Path;

use quantgate::benchmarks::scale;
use quantgate::threads::Threads;

use super::Status;

/// Runs the pipeline on `hf` in `work` and prints the tables (Markdown).
pub fn run(hf: &Path, work: &Path, text: &Path, threads: Threads) -> anyhow::Result<Status> {
    let exe = std::env::current_exe()?;
    super::progress::install_stderr_hook("bench scale");
    let b = scale::run(&exe, hf, work, text, threads)?;
    let gb = |x: u64| x as f64 / 1e9;
    println!(
        "bench scale: {} · {threads} threads · runtime {}",
        hf.display(),
        llama_runtime::build_info()
    );
    println!(
        "model: source {:.2} GB · F16 {:.2} GB · largest tensor {:.3} GB · largest layer in f32 {:.3} GB · cp + sync floor of the source {:.1} s",
        gb(b.sizes.source),
        gb(b.sizes.f16),
        gb(b.sizes.largest_tensor),
        gb(b.sizes.largest_layer_f32),
        b.floor_s
    );
    println!("\n| step | wall s | peak RSS GB | peak RssAnon GB | peak disk use GB | leaves GB |\n|---|---:|---:|---:|---:|---:|");
    for s in &b.steps {
        println!(
            "| {} | {:.1} | {:.2} | {:.2} | {:.2} | {:.2} |",
            s.name,
            s.wall_s,
            gb(s.peak_rss),
            gb(s.peak_anon),
            gb(s.disk_peak),
            gb(s.written)
        );
    }
    println!("\n| goal | measured | allowed | ratio | met |\n|---|---:|---:|---:|---|");
    for g in &b.goals {
        println!(
            "| {} | {:.2} {u} | {:.2} {u} | {:.2} | {} |",
            g.what,
            g.measured,
            g.allowed,
            g.ratio(),
            if g.met() { "yes" } else { "no" },
            u = g.unit
        );
    }
    println!("\n| verify step | tokens | reference tok/s (candle f32) | llama.cpp tok/s | llama.cpp / reference |\n|---|---:|---:|---:|---:|");
    for (name, s) in &b.forward_speed {
        let (r, l) = s.tokens_per_s();
        println!("| {name} | {} | {r:.1} | {l:.1} | {:.2} |", s.tokens, l / r);
    }
    println!("\n| verify step | verdict | blockers | per gate: wall s / peak RSS GiB / peak RssAnon GiB |\n|---|---|---|---|");
    for (name, verdict, blockers, costs) in &b.verdicts {
        let codes: Vec<String> = blockers.iter().map(|x| x.detail.clone()).collect();
        let gates: Vec<String> = costs
            .iter()
            .map(|c| {
                format!(
                    "{}: {:.0} / {:.2} / {:.2}",
                    c.gate,
                    c.wall_s,
                    c.peak_rss_mib / 1024.0,
                    c.peak_anon_mib / 1024.0
                )
            })
            .collect();
        println!(
            "| {name} | {verdict} | {} | {} |",
            codes.join("; "),
            gates.join(" · ")
        );
    }
    println!("\n| eval step | figure |\n|---|---|");
    for (name, v) in &b.evals {
        let v = v.get("result").unwrap_or(v);
        let pick = ["ppl", "ppl_se", "mean_kld", "same_top_p"];
        let figs: Vec<String> = pick
            .iter()
            .filter_map(|k| v.get(*k).map(|x| format!("{k} {x}")))
            .collect();
        println!("| {name} | {} |", figs.join(" · "));
    }
    std::fs::write(
        work.join("bench-scale.json"),
        serde_json::to_vec_pretty(&b)?,
    )?;
    println!("\nJSON: {}", work.join("bench-scale.json").display());
    Ok(Status::Success)
}
