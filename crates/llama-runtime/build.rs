//! Passes the folder of ggml's runtime-loaded CPU backends (`libggml-cpu-VARIANT.so`, built by
//! llama-cpp-sys-2's `dynamic-backends`, exported as `DEP_LLAMA_BACKENDS_DIR`) to the crate,
//! and gives binaries a run path to llama.cpp's shared libraries (`out/lib` of the sys crate:
//! its build script hard-links only the unversioned symlinks beside the binaries, so
//! `libllama.so.0` is found only there). Dependents get the folder as
//! `DEP_QUANTGATE_LLAMA_RUNTIME_LIB_DIR` (the `links` key).
fn main() {
    let backends = std::env::var("DEP_LLAMA_BACKENDS_DIR").unwrap_or_default();
    println!("cargo:rustc-env=QUANTGATE_GGML_BACKENDS_DIR={backends}");
    println!("cargo:rerun-if-env-changed=DEP_LLAMA_BACKENDS_DIR");
    let lib = std::path::Path::new(&backends)
        .parent()
        .map(|p| p.join("lib"))
        .unwrap_or_default();
    println!("cargo:lib_dir={}", lib.display());
    println!("cargo:rustc-link-arg=-Wl,-rpath,{}", lib.display());
}
