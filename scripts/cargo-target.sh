#!/usr/bin/env bash
# Prints the cargo target folder the scripts build into: $CARGO_TARGET_DIR when set, else a folder
# outside the clone, ${QUANTGATE_CACHE:-~/.cache/quantgate}/target/KEY, where KEY is the sha256 of
# Cargo.lock (every dependency pinned by checksum) and of `rustc -vV`. This is how CI caches of
# Rust builds are keyed: a second clone on the same machine (CI) compiles only the workspace's own
# crates, not llama.cpp and every dependency again (llama.cpp's CMake build of its CPU variants
# is 10.6 min of a 13.6-min cold build on 2 cores). Cargo's own fingerprints decide what is
# rebuilt inside the folder. Folders of other keys unused for 7 days are removed.
#
# Usage: export CARGO_TARGET_DIR="$(scripts/cargo-target.sh)"; the binary is then
# "$CARGO_TARGET_DIR/release/quantgate".
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -n "${CARGO_TARGET_DIR:-}" ]; then
  echo "$CARGO_TARGET_DIR"
  exit 0
fi
base=${QUANTGATE_CACHE:-$HOME/.cache/quantgate}/target
key=$({ cat Cargo.lock; rustc -vV; } | sha256sum | cut -c1-16)
mkdir -p "$base/$key"
touch "$base/$key"
find "$base" -mindepth 1 -maxdepth 1 -type d ! -name "$key" -mtime +7 -exec rm -rf {} +
echo "$base/$key"
