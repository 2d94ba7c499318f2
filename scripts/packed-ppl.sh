#!/usr/bin/env bash
# Issue 14's PPL table for the GPTQ/AWQ/compressed-tensors fixtures (scripts/build-quant-fixtures.sh):
# wiki.test.raw, 4 × 512, on each fixture's lossless GGUF (`convert`), three numbers side by side:
# llama.cpp on the GGUF; the reference (candle f32) on the source dequantized by
# `reference::packed`; the reference on the producing library's own dequantization (the `-libdq`
# folder, GPTQ and compressed-tensors only). Writes out/packed-ppl/*.txt and prints a table.
# Usage: scripts/packed-ppl.sh [BIN]   (BIN defaults to target/release/quantgate)
set -euo pipefail
cd "$(dirname "$0")/.."
qg=${1:-target/release/quantgate}
out=out/packed-ppl
mkdir -p "$out"
export QUANTGATE_CPU_VARIANT=${QUANTGATE_CPU_VARIANT:-haswell}
ppl() { # gguf reference-dir log → "llama.cpp reference" (the PPLs of the side-by-side table)
  "$qg" eval ppl "$1" -f testdata/data/wiki.test.raw -c 512 --chunks 4 -t 2 --reference "$2" \
    > "$3"
  awk -F'|' '/^\| llama.cpp \|/ {split($5, a, " "); l = a[1]}
             /^\| reference / {split($5, a, " "); r = a[1]} END {print l, r}' "$3"
}
echo "| fixture | llama.cpp (GGUF) | reference, our unpacker | reference, library's dequantization |"
echo "|---|---:|---:|---:|"
for n in gptq-4-g128-sym gptq-4-g32-asym gptq-8-g128-sym awq-4-g64-asym awq-4-g32-sym \
         ct-4-g64-sym ct-4-g32-asym ct-8-channel-sym; do
  src=.cache/hf/SmolLM2-135M-Instruct-$n
  [ -f "$out/$n.gguf" ] || "$qg" convert "$src" -o "$out/$n.gguf" > /dev/null
  read -r llama ours < <(ppl "$out/$n.gguf" "$src" "$out/$n.txt")
  lib="— (no CPU dequantizer in the closure)"
  if [ -d "$src-libdq" ]; then
    read -r _ lib < <(ppl "$out/$n.gguf" "$src-libdq" "$out/$n-libdq.txt")
  fi
  echo "| $n | $llama | $ours | $lib |"
done
