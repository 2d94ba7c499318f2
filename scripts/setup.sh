#!/usr/bin/env bash
# Installs what building quantgate needs on a fresh Debian machine: cmake and libclang-dev
# (llama-cpp-sys-2 builds llama.cpp with cmake and generates bindings with bindgen).
# Idempotent: does nothing when both are present.
set -euo pipefail
need=()
command -v cmake >/dev/null 2>&1 || need+=(cmake)
ls /usr/lib/llvm-*/lib/libclang*.so* >/dev/null 2>&1 || ls /usr/lib/x86_64-linux-gnu/libclang*.so* >/dev/null 2>&1 || need+=(libclang-dev)
if [ ${#need[@]} -gt 0 ]; then
  echo "setup: installing ${need[*]}" >&2
  sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need[@]}" >/dev/null
fi
command -v cargo >/dev/null 2>&1 || { echo "setup: cargo (Rust) is required" >&2; exit 1; }
