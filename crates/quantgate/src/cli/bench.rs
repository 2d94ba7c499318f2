//! `quantgate bench repack`: conversion throughput of the MLX repack path next to a plain
//! copy conversion, each run a child process of its own, alternated, median reported.

use std::path::Path;
use std::process::{Command, ExitCode, Stdio};

use quantgate::child::{run_measured, Measured};

/// Bytes of the folder's safetensors files (what a conversion reads).
fn source_bytes(dir: &Path) -> anyhow::Result<u64> {
    let mut n = 0;
    for f in reference::safetensors_files(dir)? {
        n += std::fs::metadata(&f)?.len();
    }
    Ok(n)
}

/// Runs `convert` on `mlx_dir` (repack to Q4_1 …) and on `plain_dir` (`--outtype auto`: a BF16
/// source is copied to BF16, an F16 source to F16), `reps` times alternated, and prints MB/s of
/// source read per conversion and the ratio repack / plain (goal ≥ 0.5, i.e. within 2×).
pub fn repack(mlx_dir: &Path, plain_dir: &Path, reps: usize) -> anyhow::Result<ExitCode> {
    if reps == 0 {
        return Err(crate::Usage("--reps must be at least 1".into()).into());
    }
    for (dir, want) in [(mlx_dir, true), (plain_dir, false)] {
        let cfg = quantgate::convert::hf::read_json(&dir.join("config.json"))?;
        if reference::mlx::is_mlx_quantized(&cfg) != want {
            return Err(crate::Usage(format!(
                "{}: {} (the first folder must be MLX-quantized, --plain must not be)",
                dir.display(),
                if want {
                    "not MLX-quantized"
                } else {
                    "MLX-quantized"
                }
            ))
            .into());
        }
    }
    let exe = std::env::current_exe()?;
    let tmp = tempfile::tempdir()?;
    let run = |dir: &Path, out: &str| -> anyhow::Result<Measured> {
        let m = run_measured(
            Command::new(&exe)
                .arg("convert")
                .arg(dir)
                .arg("-o")
                .arg(tmp.path().join(out))
                .stdout(Stdio::null()),
        )?;
        anyhow::ensure!(
            m.exit_code == Some(0),
            "convert {} failed with exit code {:?}",
            dir.display(),
            m.exit_code
        );
        Ok(m)
    };
    // One untimed run each so both read from the page cache.
    run(mlx_dir, "repack.gguf")?;
    run(plain_dir, "plain.gguf")?;
    let (mut a, mut b, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    let (sa, sb) = (
        source_bytes(mlx_dir)? as f64,
        source_bytes(plain_dir)? as f64,
    );
    for _ in 0..reps {
        let ma = run(mlx_dir, "repack.gguf")?;
        let mb = run(plain_dir, "plain.gguf")?;
        let (ta, tb) = (sa / ma.wall_s / 1e6, sb / mb.wall_s / 1e6);
        ratios.push(ta / tb);
        a.push((ta, ma));
        b.push((tb, mb));
    }
    let med = |mut v: Vec<f64>| {
        v.sort_by(|x, y| x.total_cmp(y));
        v[v.len() / 2]
    };
    let out_mb =
        |p: &str| std::fs::metadata(tmp.path().join(p)).map_or(0.0, |m| m.len() as f64 / 1e6);
    println!("runtime: {}", llama_runtime::build_info());
    println!("| conversion | source MB | output MB | median wall s | median MB/s (source) | peak RSS MiB |\n|---|---:|---:|---:|---:|---:|");
    for (name, dir, v, s, o) in [
        (
            "repack (MLX affine → Q4_1 …)",
            mlx_dir,
            &a,
            sa,
            out_mb("repack.gguf"),
        ),
        (
            "plain copy (--outtype auto)",
            plain_dir,
            &b,
            sb,
            out_mb("plain.gguf"),
        ),
    ] {
        println!(
            "| {name}: {} | {:.1} | {:.1} | {:.3} | {:.1} | {:.1} |",
            dir.display(),
            s / 1e6,
            o,
            med(v.iter().map(|x| x.1.wall_s).collect()),
            med(v.iter().map(|x| x.0).collect()),
            med(v.iter().map(|x| x.1.max_rss_kib as f64).collect()) / 1024.0
        );
    }
    let r = med(ratios.clone());
    println!(
        "ratio repack/plain MB/s: median {r:.3} (per replicate {:?}); goal ≥ 0.5 (within 2×): {}",
        ratios
            .iter()
            .map(|x| (x * 1000.0).round() / 1000.0)
            .collect::<Vec<_>>(),
        if r >= 0.5 { "met" } else { "NOT met" }
    );
    Ok(ExitCode::SUCCESS)
}
