#!/usr/bin/env bash
# Benchmarks (figures and ratios against the named peer, measured side by side in one run):
# dequantization throughput ours vs ggml's to_float, and inspect wall time on real files.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/fetch-models.sh
cargo build --release --quiet
./target/release/quantgate bench dequant "$@"
./target/release/quantgate bench inspect .cache/models/*.gguf
