//! Records the source revision (`git describe --always --dirty`) for run receipts, and gives
//! the `quantgate` binary and test binaries a run path to llama.cpp's shared libraries (the
//! folder llama-runtime exports), so `./target/release/quantgate` runs without
//! `LD_LIBRARY_PATH`.

fn main() {
    let rev = std::process::Command::new("git")
        .args(["describe", "--always", "--dirty", "--abbrev=12"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=QUANTGATE_GIT_REV={rev}");
    if let Ok(lib) = std::env::var("DEP_QUANTGATE_LLAMA_RUNTIME_LIB_DIR") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{lib}");
    }
    // Rebuild when HEAD moves or the index changes (commits, staged edits).
    println!("cargo:rerun-if-changed=../../.git/HEAD");
    println!("cargo:rerun-if-changed=../../.git/index");
}
