//! The peer the benches compare against: `llama-perplexity`, `llama-bench`, `llama-imatrix`,
//! `llama-quantize` and `llama-gguf-hash` built the way users build llama.cpp (its default CMake), from the
//! llama.cpp sources quantgate pins.
//! Built on first use into the cache folder (`$QUANTGATE_CACHE`, default
//! `~/.cache/quantgate`), outside the clone, and reused.
//!
//! Sources: llama-cpp-sys-2 =0.1.161 ships a trimmed llama.cpp (`src/`, `ggml/`, `common/`
//! but empty `tools/`). The tools' sources come from the llama-cpp-python 0.3.36 sdist
//! (PyPI, sha256-pinned), whose `tools/perplexity`, `tools/llama-bench`, `tools/imatrix`,
//! `tools/quantize` and `examples/gguf-hash` build against the pin's libraries unchanged (the pin's
//! `src/llama-quant.cpp` is the sdist's, byte for byte). Everything that computes (ggml kernels, llama graph, common) is
//! the pin's.
//!
//! Flags: llama.cpp's defaults (`CMAKE_BUILD_TYPE=Release`, `GGML_NATIVE=ON`, shared
//! libraries, OpenMP), plus `-mno-amx-*`: on a host with AMX, the native build compiles ggml's
//! AMX kernels, which crash in this pin (see `llama_runtime::BROKEN_VARIANTS`). The other
//! options only leave out targets the bench does not build (tests, examples, server, app).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{bail, ensure, Context, Result};
use serde::{Deserialize, Serialize};

/// The llama-cpp-python sdist the tools come from (PyPI), and its sha256.
pub const SDIST: (&str, &str) = (
    "llama_cpp_python-0.3.36.tar.gz",
    "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e",
);

/// Compiler flags added to llama.cpp's defaults (why: the module docs).
pub const EXTRA_FLAGS: &str = "-mno-amx-tile -mno-amx-int8 -mno-amx-bf16";

/// CMake options that only leave out targets (the flags that compile kernels stay default).
const TARGET_OPTS: &[&str] = &[
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_SERVER=OFF",
    "-DLLAMA_BUILD_APP=OFF",
];

/// A built peer.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PeerBuild {
    /// `llama-perplexity`.
    pub perplexity: PathBuf,
    /// `llama-bench`.
    pub bench: PathBuf,
    /// `llama-imatrix`.
    pub imatrix: PathBuf,
    /// `llama-quantize`.
    pub quantize: PathBuf,
    /// `llama-gguf-hash` (per-tensor xxh64/sha1/sha256 manifests and `--check`).
    pub gguf_hash: PathBuf,
    /// What was built and how, for every figure: sources, CMake options, the flags CMake
    /// chose (from its cache: GGML_NATIVE, BUILD_SHARED_LIBS, GGML_OPENMP, CMAKE_C_FLAGS).
    pub description: String,
    /// Wall time of the build that made it, seconds.
    pub build_s: f64,
}

/// The cache folder: `$QUANTGATE_CACHE`, else `~/.cache/quantgate`.
pub fn cache_dir() -> Result<PathBuf> {
    if let Some(c) = std::env::var_os("QUANTGATE_CACHE").filter(|c| !c.is_empty()) {
        return Ok(PathBuf::from(c));
    }
    let home = std::env::var_os("HOME").context("neither QUANTGATE_CACHE nor HOME is set")?;
    Ok(PathBuf::from(home).join(".cache/quantgate"))
}

/// The peer in `cache`, building it first when it is missing (minutes on 2 cores; progress
/// goes to `log`).
///
/// Errors: the pin's source folder is unknown, the sdist cannot be fetched or has another
/// sha256, or CMake fails (its log file is named).
pub fn ensure(cache: &Path, log: &mut dyn FnMut(&str)) -> Result<PeerBuild> {
    let dir = cache.join("peer").join(format!(
        "{}-tools5-lcp-0.3.36-default",
        llama_runtime::LLAMA_CPP_SYS_PIN.replace(" =", "-")
    ));
    let stamp = dir.join("peer.json");
    // The record is written last; a missing or unreadable one (an interrupted build) means
    // build again.
    let done = std::fs::read_to_string(&stamp)
        .ok()
        .and_then(|t| serde_json::from_str::<PeerBuild>(&t).ok());
    let all = |p: &PeerBuild| {
        [
            &p.perplexity,
            &p.bench,
            &p.imatrix,
            &p.quantize,
            &p.gguf_hash,
        ]
        .iter()
        .all(|b| b.is_file())
    };
    if let Some(p) = done.filter(all) {
        return Ok(p);
    }
    let t0 = Instant::now();
    let src = llama_runtime::llama_source_dir();
    ensure!(
        src.join("ggml").is_dir(),
        "llama.cpp sources of the pin not found ({:?}); rebuild quantgate",
        src
    );
    let sdist = fetch_sdist(cache, log)?;
    let tree = dir.join("src");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    log(&format!(
        "peer: copying {} and the sdist's tools",
        src.display()
    ));
    sh(
        Command::new("cp").arg("-a").arg(&src).arg(&tree),
        &dir.join("cp.log"),
    )?;
    add_tools(&sdist, &tree, &dir)?;
    let build = dir.join("build");
    log("peer: cmake configure (llama.cpp defaults)");
    let flags = format!("-DCMAKE_C_FLAGS={EXTRA_FLAGS}");
    let cxx = format!("-DCMAKE_CXX_FLAGS={EXTRA_FLAGS}");
    sh(
        Command::new("cmake")
            .arg("-S")
            .arg(&tree)
            .arg("-B")
            .arg(&build)
            .args(["-DCMAKE_BUILD_TYPE=Release", &flags, &cxx])
            .args(TARGET_OPTS),
        &dir.join("configure.log"),
    )?;
    log("peer: building llama-perplexity, llama-bench, llama-imatrix, llama-quantize, llama-gguf-hash");
    let jobs = std::thread::available_parallelism().map_or(2, |n| n.get());
    sh(
        Command::new("cmake")
            .arg("--build")
            .arg(&build)
            .args(["-j", &jobs.to_string()])
            .args(["--target", "llama-perplexity", "llama-bench"])
            .args(["llama-imatrix", "llama-quantize", "llama-gguf-hash"]),
        &dir.join("build.log"),
    )?;
    let p = PeerBuild {
        perplexity: build.join("bin/llama-perplexity"),
        bench: build.join("bin/llama-bench"),
        imatrix: build.join("bin/llama-imatrix"),
        quantize: build.join("bin/llama-quantize"),
        gguf_hash: build.join("bin/llama-gguf-hash"),
        description: describe(&build)?,
        build_s: t0.elapsed().as_secs_f64(),
    };
    let tmp = stamp.with_extension("json.tmp");
    std::fs::write(&tmp, serde_json::to_string_pretty(&p)?)?;
    std::fs::rename(&tmp, &stamp)?;
    Ok(p)
}

/// The sdist in `cache/sdist`, downloaded with pip when missing; its sha256 checked.
fn fetch_sdist(cache: &Path, log: &mut dyn FnMut(&str)) -> Result<PathBuf> {
    let dir = cache.join("sdist");
    let path = dir.join(SDIST.0);
    if !path.is_file() {
        log("peer: pip download llama-cpp-python==0.3.36 (sdist)");
        std::fs::create_dir_all(&dir)?;
        sh(
            Command::new("python3")
                .args(["-m", "pip", "download", "--no-deps", "--no-binary", ":all:"])
                .arg("llama-cpp-python==0.3.36")
                .arg("-d")
                .arg(&dir),
            &dir.join("pip.log"),
        )?;
    }
    let got = crate::hash::sha256_file(&path)?;
    if got != SDIST.1 {
        bail!("{}: sha256 {got}, expected {}", path.display(), SDIST.1);
    }
    Ok(path)
}

/// The sdist's programs the peer builds: (folder under the sdist's `vendor/llama.cpp/`, name
/// under the tree's `tools/`). gguf-hash is an example upstream; the pin's `examples/` is
/// empty, so it goes under `tools/` beside the others (it links only ggml and `vendor::hash`).
const TOOLS: [(&str, &str); 5] = [
    ("tools/perplexity", "perplexity"),
    ("tools/llama-bench", "llama-bench"),
    ("tools/imatrix", "imatrix"),
    ("tools/quantize", "quantize"),
    ("examples/gguf-hash", "gguf-hash"),
];

/// Replaces the tree's empty `tools/` with the sdist's [`TOOLS`], and a
/// `tools/CMakeLists.txt` that adds only those.
fn add_tools(sdist: &Path, tree: &Path, dir: &Path) -> Result<()> {
    let x = dir.join("sdist");
    std::fs::create_dir_all(&x)?;
    sh(
        Command::new("tar")
            .arg("xzf")
            .arg(sdist)
            .arg("-C")
            .arg(&x)
            .arg("--wildcards")
            .args(TOOLS.map(|(from, _)| format!("*/vendor/llama.cpp/{from}/*"))),
        &dir.join("tar.log"),
    )?;
    let lcp = x.join("llama_cpp_python-0.3.36/vendor/llama.cpp");
    for (from, name) in TOOLS {
        let dst = tree.join("tools").join(name);
        let _ = std::fs::remove_dir_all(&dst);
        std::fs::rename(lcp.join(from), &dst)?;
    }
    std::fs::write(
        tree.join("tools/CMakeLists.txt"),
        format!(
            "find_package(Threads REQUIRED)\nllama_add_compile_flags()\n{}",
            TOOLS
                .map(|(_, t)| format!("add_subdirectory({t})\n"))
                .concat()
        ),
    )?;
    let _ = std::fs::remove_dir_all(&x);
    Ok(())
}

/// One line naming the sources and the flags CMake used (from `CMakeCache.txt`).
fn describe(build: &Path) -> Result<String> {
    let cache = std::fs::read_to_string(build.join("CMakeCache.txt"))?;
    let get = |k: &str| {
        cache
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{k}:")))
            .and_then(|l| l.split_once('='))
            .map_or("?".to_string(), |(_, v)| v.to_string())
    };
    Ok(format!(
        "llama.cpp of {} (ggml {}) with tools/ of llama-cpp-python 0.3.36, \
         default CMake: CMAKE_BUILD_TYPE={} GGML_NATIVE={} BUILD_SHARED_LIBS={} GGML_OPENMP={} \
         CMAKE_C_FLAGS=\"{}\"",
        llama_runtime::LLAMA_CPP_SYS_PIN,
        llama_runtime::build_info().ggml_version,
        get("CMAKE_BUILD_TYPE"),
        get("GGML_NATIVE"),
        get("BUILD_SHARED_LIBS"),
        get("GGML_OPENMP"),
        get("CMAKE_C_FLAGS"),
    ))
}

/// Runs `cmd` with stdout and stderr into `log`; fails naming the log when it fails.
fn sh(cmd: &mut Command, log: &Path) -> Result<()> {
    let f = std::fs::File::create(log)?;
    let status = cmd
        .stdout(Stdio::from(f.try_clone()?))
        .stderr(Stdio::from(f))
        .status()
        .with_context(|| format!("cannot start {cmd:?}"))?;
    ensure!(
        status.success(),
        "{cmd:?} failed ({status}); see {}",
        log.display()
    );
    Ok(())
}

/// The `system_info:` line a llama.cpp tool printed (its CPU features), from its stderr.
pub fn system_info(stderr: &str) -> Option<String> {
    stderr
        .lines()
        .find(|l| l.contains("system_info:"))
        .map(|l| l[l.find("system_info:").unwrap_or(0)..].trim().to_string())
}

/// llama.cpp's `convert_hf_to_gguf.py` of the sdist (with its `gguf-py` and conversion
/// modules beside it), extracted into `cache/peer/` on first use.
///
/// Errors: as [`ensure`]'s sdist fetch, or the archive lacks the script.
pub fn convert_script(cache: &Path, log: &mut dyn FnMut(&str)) -> Result<PathBuf> {
    let dir = cache.join("peer/llama-cpp-python-0.3.36-src");
    let script = dir.join("llama_cpp_python-0.3.36/vendor/llama.cpp/convert_hf_to_gguf.py");
    if script.is_file() {
        return Ok(script);
    }
    let sdist = fetch_sdist(cache, log)?;
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    log("peer: extracting the sdist's llama.cpp (convert_hf_to_gguf.py, gguf-py)");
    sh(
        Command::new("tar")
            .arg("xzf")
            .arg(&sdist)
            .arg("-C")
            .arg(&dir),
        &cache.join("peer/tar-src.log"),
    )?;
    ensure!(
        script.is_file(),
        "{}: not in {}",
        script.display(),
        sdist.display()
    );
    Ok(script)
}

/// The Python that runs `convert_hf_to_gguf.py`: `cache/venv-torch` (made by
/// scripts/record-peer-keys.sh: torch from PyPI, CPU) when present, else `python3`.
pub fn python(cache: &Path) -> PathBuf {
    let venv = cache.join("venv-torch/bin/python");
    if venv.is_file() {
        venv
    } else {
        PathBuf::from("python3")
    }
}
