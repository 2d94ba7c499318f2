#!/usr/bin/env bash
# Builds HF folders as transformers v5 saves them (cached in .cache/hf/, ignored), from real
# v4 folders, with transformers==5.24.0 from the hash-pinned .cache/venv-mlx
# (scripts/build-mlx-fixtures.sh first; no torch needed):
# - SmolLM2-135M-Instruct-v5: `AutoConfig` and `AutoTokenizer` of the SmolLM2 fixture, then
#   `save_pretrained` (config.json with `rope_parameters`, `dtype`, `head_dim`; the chat template
#   in chat_template.jinja; tokenizer.json re-serialized), and `GenerationConfig` likewise. The weights are the v4 folder's
#   model.safetensors, hard-linked: a full `AutoModelForCausalLM` re-save with torch 2.15 writes
#   the same 272 tensors byte for byte (checked once, 2026-12-01), and `save_pretrained` of the
#   config alone writes the same config.json as the model's.
# - Qwen2.5-0.5B-Instruct-v5, Qwen3-0.6B-v5: the same for the testdata/hf folders
#   (no weights: vocab-only conversions).
# - all-MiniLM-L6-v2-v5: the same for MiniLM (bert), its model.safetensors hard-linked.
# Idempotent.
# fixture-key: mlx-requirements.txt build-mlx-fixtures.sh build-smollm2-fixture.sh
set -euo pipefail
cd "$(dirname "$0")/.."
venv=.cache/venv-mlx
# The venv is build-mlx-fixtures.sh's (its folders may have been restored without it).
[ -x "$venv/bin/python" ] || bash scripts/build-mlx-fixtures.sh --venv-only
# A folder is rebuilt whenever this script changes: .complete holds the script's sha256.
recipe=$(sha256sum "$0" | cut -d' ' -f1)
build() {
  local src=$1 out=$2
  [ "$(cat "$out/.complete" 2>/dev/null)" = "$recipe" ] && return 0
  rm -rf "$out.tmp"
  mkdir -p "$out.tmp"
  "$venv/bin/python" - "$src" "$out.tmp" <<'PY'
import sys
import transformers
import os
from transformers import AutoConfig, AutoTokenizer, GenerationConfig
assert transformers.__version__ == "5.24.0", transformers.__version__
src, dst = sys.argv[1:]
AutoConfig.from_pretrained(src).save_pretrained(dst)
AutoTokenizer.from_pretrained(src).save_pretrained(dst)
if os.path.exists(os.path.join(src, "generation_config.json")):
    GenerationConfig.from_pretrained(src).save_pretrained(dst)
PY
  # sentence-transformers' own files (pooling), which transformers neither reads nor writes.
  for f in modules.json config_sentence_transformers.json sentence_bert_config.json 1_Pooling; do
    [ -e "$src/$f" ] && cp -r "$src/$f" "$out.tmp/"
  done
  if [ -f "$src/model.safetensors" ]; then
    ln "$src/model.safetensors" "$out.tmp/model.safetensors" 2>/dev/null ||
      cp "$src/model.safetensors" "$out.tmp/model.safetensors"
  fi
  echo "$recipe" > "$out.tmp/.complete"
  rm -rf "$out"
  mv "$out.tmp" "$out"
}
build .cache/hf/SmolLM2-135M-Instruct .cache/hf/SmolLM2-135M-Instruct-v5
build testdata/hf/Qwen2.5-0.5B-Instruct .cache/hf/Qwen2.5-0.5B-Instruct-v5
build testdata/hf/Qwen3-0.6B .cache/hf/Qwen3-0.6B-v5
build .cache/hf/all-MiniLM-L6-v2 .cache/hf/all-MiniLM-L6-v2-v5
echo "v5 fixtures: .cache/hf/{SmolLM2-135M-Instruct,Qwen2.5-0.5B-Instruct,Qwen3-0.6B,all-MiniLM-L6-v2}-v5"
