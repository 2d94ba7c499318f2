//! `bench convert`: three arms side by side in one run, alternated, each a child process of its
//! own (wall time and peak RSS from `wait4`):
//! - the floor: `cp` of the source `.safetensors` files and `sync` of the copies (the I/O a
//!   conversion cannot avoid: read the source once, write as many bytes, make them durable);
//! - our `convert`;
//! - llama.cpp's `convert_hf_to_gguf.py` (from the llama-cpp-python 0.3.36 sdist, run with its
//!   own gguf-py) when a Python with torch is available.
//!
//! Afterwards the tensors of our output and the peer's are compared byte for byte.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{ensure, Context, Result};

use crate::child::{run_measured, Measured};

/// Why the peer did not run, or that it did.
#[derive(Clone, Debug, PartialEq)]
pub enum Peer {
    /// `convert_hf_to_gguf.py` ran with this Python.
    Ran(PathBuf),
    /// This Python has no torch and numpy.
    NoTorch(PathBuf),
}

/// The tensors of our output against the peer's.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorMatch {
    /// Tensors in both files with the same type, shape and bytes.
    pub identical: usize,
    /// Names of the tensors that differ or are in only one file.
    pub differing: Vec<String>,
}

/// The runs of the three arms.
#[derive(Clone, Debug)]
pub struct ConvertBench {
    /// `cp` + `sync`, one entry per repetition.
    pub floor: Vec<Measured>,
    /// Our `convert`.
    pub ours: Vec<Measured>,
    /// The peer's runs (empty unless [`Peer::Ran`]).
    pub peer_runs: Vec<Measured>,
    /// What happened to the peer.
    pub peer: Peer,
    /// Bytes of the source `.safetensors` files.
    pub source_bytes: u64,
    /// Bytes of the largest tensor of our output.
    pub largest_tensor: u64,
    /// Our tensors against the peer's (when it ran).
    pub tensors: Option<TensorMatch>,
}

fn has_torch(python: &Path) -> bool {
    Command::new(python)
        .args(["-c", "import torch, numpy"])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

/// The source shards of `hf`.
fn shards(hf: &Path) -> Result<Vec<PathBuf>> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(hf)
        .with_context(|| format!("{}: cannot list", hf.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "safetensors"))
        .collect();
    v.sort();
    ensure!(!v.is_empty(), "{}: no .safetensors files", hf.display());
    Ok(v)
}

/// Runs the three arms `reps` times alternated, converting `hf` to `outtype` into a temp
/// folder beside the output of the floor (same disk). `script` is llama.cpp's
/// `convert_hf_to_gguf.py`, run by `python` from its own folder.
///
/// Errors: a child cannot start or fails, or an output cannot be read back.
pub fn run(
    exe: &Path,
    hf: &Path,
    outtype: &str,
    (python, script): (&Path, &Path),
    reps: usize,
) -> Result<ConvertBench> {
    let peer = if has_torch(python) {
        Peer::Ran(python.to_path_buf())
    } else {
        Peer::NoTorch(python.to_path_buf())
    };
    let src = shards(hf)?;
    let source_bytes = src
        .iter()
        .map(|p| p.metadata().map_or(0, |m| m.len()))
        .sum();
    let tmp = tempfile::tempdir_in(std::env::current_dir()?)?;
    let (ours_out, peer_out) = (tmp.path().join("ours.gguf"), tmp.path().join("peer.gguf"));
    let (mut floor, mut ours, mut peer_runs) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..reps {
        let copy = tmp.path().join("copy");
        let _ = std::fs::remove_dir_all(&copy);
        std::fs::create_dir_all(&copy)?;
        let mut c = Command::new("sh");
        c.arg("-c")
            .arg(r#"d=$1; shift; cp -- "$@" "$d"/ && sync -- "$d"/*"#)
            .arg("sh")
            .arg(&copy)
            .args(&src);
        floor.push(ok(c, "cp + sync")?);
        // Every arm writes a new file, as the floor does (replacing one frees its blocks).
        let _ = std::fs::remove_file(&ours_out);
        let _ = std::fs::remove_file(&peer_out);
        let mut c = Command::new(exe);
        c.arg("convert").arg(hf).arg("-o").arg(&ours_out);
        c.args(["--outtype", outtype]);
        ours.push(ok(c, "quantgate convert")?);
        if let Peer::Ran(py) = &peer {
            let mut c = Command::new(py);
            c.arg(script).arg(std::path::absolute(hf)?).arg("--outfile");
            c.arg(&peer_out).args(["--outtype", outtype]);
            c.current_dir(script.parent().unwrap_or(Path::new(".")));
            peer_runs.push(ok(c, "convert_hf_to_gguf.py")?);
        }
    }
    let ours_file = gguf::Gguf::open(&ours_out)?;
    let largest_tensor = ours_file
        .header
        .tensors
        .iter()
        .map(|t| t.n_bytes)
        .max()
        .unwrap_or(0);
    let tensors = match peer {
        Peer::Ran(_) => Some(compare(&ours_file, &gguf::Gguf::open(&peer_out)?)),
        Peer::NoTorch(_) => None,
    };
    Ok(ConvertBench {
        floor,
        ours,
        peer_runs,
        peer,
        source_bytes,
        largest_tensor,
        tensors,
    })
}

fn ok(mut c: Command, what: &str) -> Result<Measured> {
    let m = run_measured(c.stdout(Stdio::null()).stderr(Stdio::null()))?;
    ensure!(m.exit_code == Some(0), "{what} failed: {c:?} {m:?}");
    Ok(m)
}

/// Every tensor by name: type, shape and bytes.
fn compare(a: &gguf::Gguf, b: &gguf::Gguf) -> TensorMatch {
    let mut m = TensorMatch {
        identical: 0,
        differing: Vec::new(),
    };
    for t in &a.header.tensors {
        match b.header.tensors.iter().find(|u| u.name == t.name) {
            Some(u)
                if u.ggml_type == t.ggml_type
                    && u.dims == t.dims
                    && a.tensor_data(t) == b.tensor_data(u) =>
            {
                m.identical += 1
            }
            _ => m.differing.push(t.name.clone()),
        }
    }
    for u in &b.header.tensors {
        if !a.header.tensors.iter().any(|t| t.name == u.name) {
            m.differing.push(u.name.clone());
        }
    }
    m
}
