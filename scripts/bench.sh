#!/usr/bin/env bash
# Benchmarks: figures and ratios against the named peer, measured side by side in one run (never
# timed tests). The peers are llama.cpp's own tools built with its default CMake from the
# sources quantgate pins (built on first use into ~/.cache/quantgate/peer, minutes on 2 cores),
# and convert_hf_to_gguf.py when ~/.cache/quantgate/venv-torch has torch
# (scripts/record-peer-keys.sh makes it).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
CARGO_TARGET_DIR="$(scripts/cargo-target.sh)"
export CARGO_TARGET_DIR
scripts/fetch-models.sh
scripts/build-smollm2-fixture.sh
scripts/build-qwen2-fixture.sh
cargo build --release --quiet
qg="$CARGO_TARGET_DIR/release/quantgate"
model=.cache/models/SmolLM2-135M-Instruct.Q4_1.gguf
$qg bench ppl "$model" -f testdata/data/wiki.test.raw --chunks 16 --reps 3
$qg bench eval "$model"
$qg bench convert .cache/hf/SmolLM2-135M-Instruct --outtype f16 --reps 3
$qg bench dequant "$@"
$qg bench inspect .cache/models/*.gguf
# verify's wall and peak RSS on two model sizes, F16 and Q4_K_M (set QUANTGATE_BASELINE_EXE to
# an earlier quantgate binary to alternate with it).
mkdir -p out/bench
pairs=()
for m in SmolLM2-135M-Instruct Qwen2.5-Coder-0.5B-Instruct; do
  [ -f "out/bench/$m-f16.gguf" ] || $qg convert ".cache/hf/$m" --outtype f16 -o "out/bench/$m-f16.gguf" >/dev/null
  [ -f "out/bench/$m-q4_k_m.gguf" ] || $qg quantize "out/bench/$m-f16.gguf" "out/bench/$m-q4_k_m.gguf" Q4_K_M >/dev/null
  for t in f16 q4_k_m; do pairs+=(--hf ".cache/hf/$m" --gguf "out/bench/$m-$t.gguf"); done
done
$qg bench verify "${pairs[@]}" ${QUANTGATE_BASELINE_EXE:+--baseline-exe "$QUANTGATE_BASELINE_EXE"}
