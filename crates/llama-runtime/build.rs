//! Passes the folder of ggml's runtime-loaded CPU backends (`libggml-cpu-VARIANT.so`, built by
//! llama-cpp-sys-2's `dynamic-backends`, exported as `DEP_LLAMA_BACKENDS_DIR`) to the crate,
//! exports the llama.cpp source folder it was built from (`QUANTGATE_LLAMA_SRC`), and makes
//! llama.cpp's shared libraries findable:
//!
//! - binaries get a run path to `out/lib` of the sys crate, where `libllama.so.0` (the soname
//!   they need) lives. Dependents get the folder as `DEP_QUANTGATE_LLAMA_RUNTIME_LIB_DIR`
//!   (the `links` key), since `rustc-link-arg` reaches only this package's own binaries.
//! - The sys crate's build script (0.1.161, build.rs "copy DLLs to target") hard-links the
//!   unversioned `libllama.so` symlinks into `target/PROFILE{,/deps,/examples}` without their
//!   `libllama.so.0` targets. Those links dangle, and the next run of that script fails with
//!   EEXIST (`dst.exists()` follows the link). Putting the versioned names beside them, as
//!   links to `out/lib`, makes them resolve, so a rebuild skips them.
use std::path::{Path, PathBuf};

fn main() {
    let backends = std::env::var("DEP_LLAMA_BACKENDS_DIR").unwrap_or_default();
    println!("cargo:rustc-env=QUANTGATE_GGML_BACKENDS_DIR={backends}");
    println!("cargo:rerun-if-env-changed=DEP_LLAMA_BACKENDS_DIR");
    let lib = Path::new(&backends)
        .parent()
        .map(|p| p.join("lib"))
        .unwrap_or_default();
    println!("cargo:lib_dir={}", lib.display());
    // The llama.cpp source tree the sys crate built (its CMake cache names it), for benches
    // that build llama.cpp's own tools from the same sources.
    let cache = lib.with_file_name("build").join("CMakeCache.txt");
    let src = std::fs::read_to_string(&cache)
        .ok()
        .and_then(|t| {
            t.lines().find_map(|l| {
                l.strip_prefix("CMAKE_HOME_DIRECTORY:INTERNAL=")
                    .map(String::from)
            })
        })
        .unwrap_or_default();
    println!("cargo:rustc-env=QUANTGATE_LLAMA_SRC={src}");
    println!("cargo:rustc-link-arg=-Wl,-rpath,{}", lib.display());
    if let Some(profile) = profile_dir() {
        for dir in [
            profile.clone(),
            profile.join("deps"),
            profile.join("examples"),
        ] {
            if dir.is_dir() {
                link_versioned(&lib, &dir);
            }
        }
    }
}

/// `target/PROFILE`: OUT_DIR is `target/PROFILE/build/llama-runtime-HASH/out`.
fn profile_dir() -> Option<PathBuf> {
    let out = PathBuf::from(std::env::var_os("OUT_DIR")?);
    Some(out.ancestors().nth(3)?.to_path_buf())
}

/// For every `lib*.so.N…` in `lib`, a symlink of that name in `dir` pointing to it (replacing
/// an older one, which may point into a previous build's `out/lib`).
fn link_versioned(lib: &Path, dir: &Path) {
    let Ok(entries) = std::fs::read_dir(lib) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let n = name.to_string_lossy();
        if !(n.starts_with("lib") && n.contains(".so.")) {
            continue;
        }
        let dst = dir.join(&name);
        let _ = std::fs::remove_file(&dst);
        if let Err(err) = std::os::unix::fs::symlink(e.path(), &dst) {
            println!("cargo:warning={}: {err}", dst.display());
        }
    }
}
