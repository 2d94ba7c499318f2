//! `bench repack`: conversion throughput of the MLX repack path next to a plain copy
//! conversion, each run a child process of its own, alternated, median reported.

use std::path::Path;
use std::process::{Command, Stdio};

use anyhow::{ensure, Result};

use crate::child::{run_measured, Measured};

/// One arm: its runs and what it read and wrote.
#[derive(Clone, Debug)]
pub struct Arm {
    /// Per repetition: MB/s of source read, and the child's measurements.
    pub runs: Vec<(f64, Measured)>,
    /// Bytes of the folder's safetensors files.
    pub source_bytes: u64,
    /// Bytes of the GGUF written.
    pub output_bytes: u64,
}

/// Both arms and the per-replicate ratio repack / plain of MB/s.
#[derive(Clone, Debug)]
pub struct RepackBench {
    /// `convert MLX_DIR` (repack to Q4_1 …).
    pub repack: Arm,
    /// `convert PLAIN_DIR` with `--outtype auto` (a copy).
    pub plain: Arm,
    /// repack MB/s / plain MB/s per replicate.
    pub ratios: Vec<f64>,
}

/// Bytes of the folder's safetensors files (what a conversion reads).
fn source_bytes(dir: &Path) -> Result<u64> {
    let mut n = 0;
    for f in reference::safetensors_files(dir)? {
        n += std::fs::metadata(&f)?.len();
    }
    Ok(n)
}

/// Converts `mlx_dir` and `plain_dir` with `exe convert`, one untimed run each (page cache),
/// then `reps` alternated timed runs.
///
/// Errors: a conversion fails or a folder cannot be read.
pub fn run(exe: &Path, mlx_dir: &Path, plain_dir: &Path, reps: usize) -> Result<RepackBench> {
    let tmp = tempfile::tempdir()?;
    let convert = |dir: &Path, out: &str| -> Result<Measured> {
        let m = run_measured(
            Command::new(exe)
                .arg("convert")
                .arg(dir)
                .arg("-o")
                .arg(tmp.path().join(out))
                .stdout(Stdio::null()),
        )?;
        ensure!(
            m.exit_code == Some(0),
            "convert {} failed with exit code {:?}",
            dir.display(),
            m.exit_code
        );
        Ok(m)
    };
    convert(mlx_dir, "repack.gguf")?;
    convert(plain_dir, "plain.gguf")?;
    let (sa, sb) = (source_bytes(mlx_dir)?, source_bytes(plain_dir)?);
    let (mut a, mut b, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..reps {
        let ma = convert(mlx_dir, "repack.gguf")?;
        let mb = convert(plain_dir, "plain.gguf")?;
        let (ta, tb) = (sa as f64 / ma.wall_s / 1e6, sb as f64 / mb.wall_s / 1e6);
        ratios.push(ta / tb);
        a.push((ta, ma));
        b.push((tb, mb));
    }
    let out_bytes = |p: &str| std::fs::metadata(tmp.path().join(p)).map_or(0, |m| m.len());
    Ok(RepackBench {
        repack: Arm {
            runs: a,
            source_bytes: sa,
            output_bytes: out_bytes("repack.gguf"),
        },
        plain: Arm {
            runs: b,
            source_bytes: sb,
            output_bytes: out_bytes("plain.gguf"),
        },
        ratios,
    })
}
