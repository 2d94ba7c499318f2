//! `scripts/setup.sh --check ROOT`: the libclang detection a fresh machine depends on, run
//! against fake library trees. Regression: the old glob `libclang*.so*` took Debian's
//! `libclang-cpp.so.14` (the C++ API library, shipped with llvm) for the C library bindgen
//! loads, skipped `libclang-dev`, and the llama-cpp-sys-2 build failed on a fresh machine.

use crate::common;

use std::path::PathBuf;
use std::process::Command;

fn setup_script() -> PathBuf {
    common::repo().join("scripts/setup.sh")
}

/// Makes a fake root holding the given files (relative paths), runs `setup.sh --check` on it
/// and returns (exit code, stdout).
fn check(files: &[&str]) -> (i32, String) {
    let root = tempfile::tempdir().unwrap();
    for f in files {
        let p = root.path().join(f);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, b"\x7fELF").unwrap();
    }
    let out = Command::new("bash")
        .arg(setup_script())
        .arg("--check")
        .arg(root.path())
        .env_remove("LIBCLANG_PATH")
        .output()
        .unwrap();
    let stdout = String::from_utf8(out.stdout).unwrap();
    (out.status.code().unwrap(), stdout.trim().to_string())
}

#[test]
fn libclang_cpp_alone_is_missing() {
    // Exactly what Debian 12's llvm-14 packages leave on a fresh machine.
    let (code, out) = check(&[
        "usr/lib/llvm-14/lib/libclang-cpp.so.14",
        "usr/lib/x86_64-linux-gnu/libclang-cpp.so.14",
    ]);
    assert_eq!((code, out.as_str()), (1, "libclang: missing"));
}

#[test]
fn libclang_so_1_is_present() {
    let (code, out) = check(&["usr/lib/llvm-14/lib/libclang.so.1"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.starts_with("libclang: present ("), "{out}");
    assert!(out.ends_with("usr/lib/llvm-14/lib/libclang.so.1)"), "{out}");
}

#[test]
fn each_bindgen_name_is_present() {
    // clang-sys accepts libclang.so, libclang-*.so, libclang.so.*, libclang-*.so.*.
    for f in [
        "usr/lib/llvm-16/lib/libclang.so",
        "usr/lib/x86_64-linux-gnu/libclang-14.so.1",
        "usr/lib/x86_64-linux-gnu/libclang-14.so",
        "usr/local/lib/libclang.so.18.1",
    ] {
        let (code, out) = check(&[f, "usr/lib/llvm-14/lib/libclang-cpp.so.14"]);
        assert_eq!(code, 0, "{f}: {out}");
        assert!(out.ends_with(&format!("{f})")), "{f}: {out}");
    }
}

#[test]
fn empty_tree_and_near_misses_are_missing() {
    assert_eq!(check(&[]).0, 1);
    // Static archives and unrelated libraries are not what bindgen dlopens.
    let (code, out) = check(&[
        "usr/lib/llvm-14/lib/libclang.a",
        "usr/lib/llvm-14/lib/libclangBasic.a",
        "usr/lib/x86_64-linux-gnu/libclang-cpp.so",
    ]);
    assert_eq!((code, out.as_str()), (1, "libclang: missing"));
}
