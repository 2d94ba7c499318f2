#!/usr/bin/env bash
# Builds the seed A scenario folder, .cache/hf/Qwen3-Embedding-0.6B-2L-seeded (ignored):
# Qwen3-Embedding-0.6B's real config, tokenizer and sentence-transformers files
# (testdata/hf/Qwen3-Embedding-0.6B: last-token pooling, `<|endoftext|>` appended by
# tokenizer.json's TemplateProcessing), shrunk to 2 layers, with deterministic SEEDED weights
# (scripts/seeded_qwen3.py, seed 20261202). These are not the model's weights: none are
# reachable offline. Only num_hidden_layers and max_window_layers change in config.json.
# Idempotent.
# fixture-key: seeded_qwen3.py
set -euo pipefail
cd "$(dirname "$0")/.."
out=.cache/hf/Qwen3-Embedding-0.6B-2L-seeded
venv=.cache/venv
src=testdata/hf/Qwen3-Embedding-0.6B
[ -f "$out/.complete" ] && exit 0
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/pip" install --quiet --disable-pip-version-check "numpy==2.2.6"
rm -rf "$out.tmp"
mkdir -p "$out.tmp/1_Pooling"
cp "$src"/{tokenizer.json,tokenizer_config.json,vocab.json,merges.txt,generation_config.json} "$out.tmp"/
cp "$src"/{modules.json,config_sentence_transformers.json} "$out.tmp"/
cp "$src"/1_Pooling/config.json "$out.tmp/1_Pooling/"
"$venv/bin/python" - "$src/config.json" "$out.tmp/config.json" <<'PY'
import json, sys
cfg = json.load(open(sys.argv[1]))
cfg["num_hidden_layers"] = 2
cfg["max_window_layers"] = 2
json.dump(cfg, open(sys.argv[2], "w"), indent=2)
PY
"$venv/bin/python" scripts/seeded_qwen3.py "$out.tmp" 20261202
cat > "$out.tmp/README.md" <<'MD'
---
license: apache-2.0
library_name: sentence-transformers
---
# Qwen3-Embedding-0.6B, 2 layers, seeded weights (quantgate test fixture)

Config, tokenizer and sentence-transformers files: Qwen/Qwen3-Embedding-0.6B (see
testdata/hf/PROVENANCE.md), with num_hidden_layers 2. The weights are random (seed
20261202, scripts/seeded_qwen3.py), not the model's.
MD
touch "$out.tmp/.complete"
mv "$out.tmp" "$out"
sha256sum "$out/model.safetensors"
