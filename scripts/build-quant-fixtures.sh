#!/usr/bin/env bash
# Builds GPTQ, AWQ and compressed-tensors checkpoints of the SmolLM2 fixture with the producing
# libraries (scripts/quant_fixtures.py), cached in .cache/hf/SmolLM2-135M-Instruct-{gptq,awq,ct}-*
# (ignored). The tools come from the hash-pinned closure scripts/quant-requirements.txt
# (llm-compressor 0.14.0.1, auto-round 0.15.1, compressed-tensors 0.19.0, torch 2.14.0 from
# PyPI, run on CPU), downloaded once into ${QUANTGATE_CACHE:-~/.cache/quantgate}/wheels-quant
# and installed into .../venv-quant, both outside the clone so CI reuses them; a fresh machine
# fetches them (about 3 GB). No hub access: the tools run with HF_HUB_OFFLINE=1.
# A folder is rebuilt whenever the driver, the pinned closure or its own arguments change.
# Idempotent.
# fixture-key: quant-requirements.txt quant_fixtures.py library_dequant.py build-smollm2-fixture.sh gguf_to_hf.py
set -euo pipefail
cd "$(dirname "$0")/.."
cache=${QUANTGATE_CACHE:-$HOME/.cache/quantgate}
wheels=$cache/wheels-quant
venv=$cache/venv-quant
req=scripts/quant-requirements.txt
[ -f .cache/hf/SmolLM2-135M-Instruct/.complete ] || bash scripts/build-smollm2-fixture.sh
if [ "$(cat "$venv/.complete" 2>/dev/null)" != "$(sha256sum "$req" | cut -d' ' -f1)" ]; then
  mkdir -p "$wheels"
  python3 -m pip download --quiet --disable-pip-version-check --no-deps --require-hashes \
    -r "$req" -d "$wheels"
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check --no-index --find-links "$wheels" \
    --require-hashes -r "$req"
  sha256sum "$req" | cut -d' ' -f1 > "$venv/.complete"
fi
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
src=.cache/hf/SmolLM2-135M-Instruct
build() { # name tool format bits group SYM|ASYM
  local out=.cache/hf/SmolLM2-135M-Instruct-$1 recipe
  recipe=$( (cat scripts/quant_fixtures.py "$req"; echo "$@") | sha256sum | cut -d' ' -f1)
  [ "$(cat "$out/.complete" 2>/dev/null)" = "$recipe" ] && return 0
  rm -rf "$out" "$out.tmp" "$out.tmp.ar"
  "$venv/bin/python" scripts/quant_fixtures.py "$src" "$out.tmp" "${@:2}" > "$out.log" 2>&1 ||
    { tail -20 "$out.log" >&2; exit 1; }
  mv "$out.log" "$out.tmp/convert.log"
  echo "$recipe" > "$out.tmp/.complete"
  mv "$out.tmp" "$out"
}
build gptq-4-g128-sym auto-round auto_gptq 4 128 SYM
build gptq-4-g32-asym auto-round auto_gptq 4 32 ASYM
build gptq-8-g128-sym auto-round auto_gptq 8 128 SYM
# AWQ GEMM needs in % group == 0 (576 % 128 ≠ 0: auto-round refuses g128 here).
build awq-4-g64-asym auto-round auto_awq 4 64 ASYM
build awq-4-g32-sym auto-round auto_awq 4 32 SYM
# llm-compressor needs in % group == 0 as well (it refuses g128 on 576 inputs).
build ct-4-g64-sym llm-compressor pack-quantized 4 64 SYM
build ct-4-g32-asym llm-compressor pack-quantized 4 32 ASYM
build ct-8-channel-sym llm-compressor pack-quantized 8 0 SYM
# The producing library's own dequantization of each GPTQ and compressed-tensors fixture, as a
# plain F32 folder (scripts/library_dequant.py; AWQ has no CPU dequantizer in the closure).
libdq() { # name
  local in=.cache/hf/SmolLM2-135M-Instruct-$1 out=.cache/hf/SmolLM2-135M-Instruct-$1-libdq recipe
  recipe=$( (cat scripts/library_dequant.py "$in/.complete") | sha256sum | cut -d' ' -f1)
  [ "$(cat "$out/.complete" 2>/dev/null)" = "$recipe" ] && return 0
  rm -rf "$out"
  "$venv/bin/python" scripts/library_dequant.py "$in" "$out" > "$out.log" 2>&1 ||
    { tail -20 "$out.log" >&2; exit 1; }
  rm -f "$out.log" "$out/convert.log" "$out/.complete"
  echo "$recipe" > "$out/.complete"
}
for n in gptq-4-g128-sym gptq-4-g32-asym gptq-8-g128-sym ct-4-g64-sym ct-4-g32-asym ct-8-channel-sym; do
  libdq "$n"
done
echo "quant fixtures: .cache/hf/SmolLM2-135M-Instruct-{gptq,awq,ct}-*"
