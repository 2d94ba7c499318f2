#!/usr/bin/env bash
# The main job on the embedded default: fetch two real GGUF files made by llama.cpp
# (SmolLM2-135M Q4_1, gemma-3-270m Q4_K_M), inspect them and prove that every tensor our
# Rust code dequantizes is bit-identical to ggml's own to_float.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/fetch-models.sh
echo "demo: building (the first build compiles llama.cpp: 3-10 minutes)" >&2
cargo build --release --quiet
status=0
for f in .cache/models/SmolLM2-135M-Instruct.Q4_1.gguf .cache/models/gemma-3-270m-q4_k_m.gguf; do
  echo "== $f"
  ./target/release/quantgate inspect --check-dequant "$f" || status=$?
done
exit $status
