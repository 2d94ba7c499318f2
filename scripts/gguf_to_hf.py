"""Undoes a llama.cpp conversion: the tensors of a GGUF, dequantized by the `gguf` package
(gguf-py, a reader independent of quantgate), renamed to HF's names, with llama's Q/K row
permutation undone where asked, saved as one BF16 model.safetensors; plus a model card whose front
matter comes from the GGUF's general.* keys.

Usage: gguf_to_hf.py GGUF OUT_DIR --source TEXT --card-title TITLE --card-body TEXT
                     [--unpermute-qk]
TEXT may use {organization} (general.organization). Used by scripts/build-*-fixture.sh.
"""
import argparse
import json
import struct

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize

GLOBAL = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}
# gemma3's extra norms, and its ffn_norm (llama.cpp: pre-FFN norm; HF: pre_feedforward_layernorm).
GEMMA3_LAYER = {
    "attn_q_norm": "self_attn.q_norm",
    "attn_k_norm": "self_attn.k_norm",
    "post_attention_norm": "post_attention_layernorm",
    "ffn_norm": "pre_feedforward_layernorm",
    "post_ffw_norm": "post_feedforward_layernorm",
}
LAYER = {
    "attn_norm": "input_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_norm": "post_attention_layernorm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}


def string(reader, key):
    field = reader.fields.get(key)
    return None if field is None else bytes(field.parts[field.data[0]]).decode()


def unpermute(w, heads):
    # GGUF rows are llama.cpp's adjacent-pair RoPE layout; HF uses rotate-half.
    return w.reshape(heads, w.shape[0] // heads // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def bf16(a):
    # Round to nearest even, as torch's float32 -> bfloat16 cast does.
    u = a.astype(np.float32).view(np.uint32)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def hf_tensors(reader, cfg, unpermute_qk):
    n_head, n_kv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    # convert_hf_to_gguf.py's Gemma3Model stores every RMSNorm weight + 1 (HF's Gemma norm
    # multiplies by 1 + w, llama.cpp's by w): undone here.
    gemma3 = cfg.get("model_type") == "gemma3_text"
    layer = {**LAYER, **GEMMA3_LAYER} if gemma3 else LAYER
    tensors = {}
    for t in reader.tensors:
        shape = tuple(int(d) for d in reversed(t.shape.tolist()))
        w = dequantize(t.data, t.tensor_type).astype(np.float32).reshape(shape)
        name, suffix = t.name.rsplit(".", 1)
        if gemma3 and name.endswith("norm"):
            w = w - np.float32(1.0)
        if name.startswith("blk."):
            _, i, local = name.split(".", 2)
            if unpermute_qk and local == "attn_q":
                w = unpermute(w, n_head)
            elif unpermute_qk and local == "attn_k":
                w = unpermute(w, n_kv)
            hf = f"model.layers.{i}.{layer[local]}.{suffix}"
        else:
            hf = f"{GLOBAL[name]}.{suffix}"
        tensors[hf] = w
    return tensors


def write_safetensors(path, tensors, source):
    header, blobs, off = {}, [], 0
    for name in sorted(tensors):
        b = bf16(tensors[name]).tobytes()
        header[name] = {"dtype": "BF16", "shape": list(tensors[name].shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    header["__metadata__"] = {"format": "pt", "source": source}
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def write_card(path, reader, title, body):
    front = []
    lic = string(reader, "general.license")
    if lic is not None:
        front.append("license: %s" % lic)
    if "general.languages" in reader.fields:
        f = reader.fields["general.languages"]
        front.append("language:\n" + "\n".join("- %s" % bytes(f.parts[i]).decode() for i in f.data))
    front += ["library_name: transformers", "pipeline_tag: text-generation"]
    body = body.format(organization=string(reader, "general.organization"))
    with open(path, "w") as f:
        f.write("---\n%s\n---\n\n# %s (quantgate test fixture)\n\n%s\n" % ("\n".join(front), title, body))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("gguf")
    ap.add_argument("out")
    ap.add_argument("--source", required=True)
    ap.add_argument("--card-title", required=True)
    ap.add_argument("--card-body", required=True)
    ap.add_argument("--unpermute-qk", action="store_true")
    ap.add_argument("--card-only", action="store_true")
    a = ap.parse_args()
    reader = GGUFReader(a.gguf)
    if not a.card_only:
        cfg = json.load(open(f"{a.out}/config.json"))
        tensors = hf_tensors(reader, cfg, a.unpermute_qk)
        write_safetensors(f"{a.out}/model.safetensors", tensors, a.source)
        print(f"{len(tensors)} tensors written")
    write_card(f"{a.out}/README.md", reader, a.card_title, a.card_body)


if __name__ == "__main__":
    main()
