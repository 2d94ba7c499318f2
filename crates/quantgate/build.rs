//! Records the source revision (`git describe --always --dirty`) for run receipts, and gives
//! the `quantgate` binary and test binaries an `$ORIGIN` run path: llama.cpp's shared libraries
//! (`libllama.so`, `libggml*.so`) are hard-linked beside them by llama-cpp-sys-2's build script,
//! so `./target/release/quantgate` runs without `LD_LIBRARY_PATH`.

fn main() {
    let rev = std::process::Command::new("git")
        .args(["describe", "--always", "--dirty", "--abbrev=12"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=QUANTGATE_GIT_REV={rev}");
    println!("cargo:rustc-link-arg=-Wl,-rpath,$ORIGIN");
    // Rebuild when HEAD moves or the index changes (commits, staged edits).
    println!("cargo:rerun-if-changed=../../.git/HEAD");
    println!("cargo:rerun-if-changed=../../.git/index");
}
