#!/usr/bin/env bash
# Builds .cache/hf/Qwen3-30B-A3B-2L-seeded (ignored): a Qwen3-MoE checkpoint (`qwen3_moe`,
# llama.cpp `qwen3moe`), so convert must stack the per-expert tensors into
# ffn_{gate,up,down}_exps and verify must route as transformers does.
# - config.json: testdata/hf-configs/Qwen3-30B-A3B (the published values; see its
#   PROVENANCE.md), shrunk where the issue allows it: 2 layers (of 48), 16 experts (of 128) with
#   8 used per token as published, hidden 512 (of 2048). head_dim (128), 32 query / 4 KV heads,
#   moe_intermediate_size (768), vocab (151936), rope_theta, norm_topk_prob and the token ids
#   stay as published.
# - tokenizer: testdata/hf/Qwen3-0.6B (Qwen3's tokenizer.json, tokenizer_config.json,
#   vocab.json, merges.txt: the Qwen3 family shares them, 30B-A3B included).
# - weights, generation_config.json: Qwen3MoeForCausalLM from that config, seeded
#   (scripts/seeded_qwen3moe.py, seed 20261203), saved by transformers' save_pretrained (BF16), in
#   the venv of scripts/build-quant-fixtures.sh (torch, transformers 5.17.0). Random values,
#   not Qwen's.
# Idempotent.
# fixture-key: seeded_qwen3moe.py quant-requirements.txt build-quant-fixtures.sh
set -euo pipefail
cd "$(dirname "$0")/.."
out=.cache/hf/Qwen3-30B-A3B-2L-seeded
cache=${QUANTGATE_CACHE:-$HOME/.cache/quantgate}
qvenv=$cache/venv-quant
[ -f "$out/.complete" ] && exit 0
[ -f "$qvenv/.complete" ] || bash scripts/build-quant-fixtures.sh
rm -rf "$out.tmp"
mkdir -p "$out.tmp"
cp testdata/hf/Qwen3-0.6B/{tokenizer.json,tokenizer_config.json,vocab.json,merges.txt} "$out.tmp"/
"$qvenv/bin/python" - testdata/hf-configs/Qwen3-30B-A3B/config.json "$out.tmp/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c.update(num_hidden_layers=2, num_experts=16, hidden_size=512, max_window_layers=2)
json.dump(c, open(sys.argv[2], "w"), indent=2)
PY
HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 "$qvenv/bin/python" scripts/seeded_qwen3moe.py "$out.tmp" 20261203
cat > "$out.tmp/README.md" <<'MD'
---
license: apache-2.0
---
# Qwen3-30B-A3B, 2 layers, 16 experts, seeded weights (quantgate test fixture)

Config: Qwen/Qwen3-30B-A3B (testdata/hf-configs/PROVENANCE.md), with 2 layers, 16 experts
(8 used per token), hidden 512; head_dim, heads, expert width, vocab and RoPE as published.
Tokenizer: Qwen3's (testdata/hf/Qwen3-0.6B). The weights are random (seed 20261203,
scripts/seeded_qwen3moe.py), not Qwen's.
MD
touch "$out.tmp/.complete"
mv "$out.tmp" "$out"
sha256sum "$out/model.safetensors"
