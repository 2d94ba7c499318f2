//! Passes the folder of ggml's runtime-loaded CPU backends (`libggml-cpu-VARIANT.so`, built by
//! llama-cpp-sys-2's `dynamic-backends`, exported as `DEP_LLAMA_BACKENDS_DIR`) to the crate, and
//! lets this crate's test binaries find the llama.cpp shared libraries beside them.
fn main() {
    let dir = std::env::var("DEP_LLAMA_BACKENDS_DIR").unwrap_or_default();
    println!("cargo:rustc-env=QUANTGATE_GGML_BACKENDS_DIR={dir}");
    println!("cargo:rerun-if-env-changed=DEP_LLAMA_BACKENDS_DIR");
    // libllama.so / libggml*.so are hard-linked next to every binary (target/release and
    // target/release/deps) by llama-cpp-sys-2's build script.
    println!("cargo:rustc-link-arg=-Wl,-rpath,$ORIGIN");
}
