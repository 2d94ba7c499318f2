"""Writes deterministic seeded BF16 weights for a qwen3 HF folder whose config.json is already in
OUT_DIR (scripts/build-qwen3-embedding-fixture.sh). No real Qwen3-Embedding weights are reachable
offline, so the values are random: numpy's PCG64 seeded with SEED, N(0, 0.02) for every matrix
(the config's initializer_range), N(1, 0.1) for the RMSNorm weights. Tensor names are those
of config.json's architecture, Qwen3ForCausalLM (`model.` prefix; no lm_head: tied), which
mlx-lm also requires.

Usage: seeded_qwen3.py OUT_DIR SEED
"""
import json
import struct
import sys

import numpy as np


def bf16(a):
    """f32 → bf16 bits, round to nearest even (as torch's .to(bfloat16))."""
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def main():
    out, seed = sys.argv[1], int(sys.argv[2])
    c = json.load(open(f"{out}/config.json"))
    h, hd, f, v = c["hidden_size"], c["head_dim"], c["intermediate_size"], c["vocab_size"]
    nq, nkv, std = c["num_attention_heads"], c["num_key_value_heads"], c["initializer_range"]
    rng = np.random.Generator(np.random.PCG64(seed))
    shapes = [("model.embed_tokens.weight", (v, h), "w")]
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        shapes += [
            (p + "input_layernorm.weight", (h,), "n"),
            (p + "self_attn.q_proj.weight", (nq * hd, h), "w"),
            (p + "self_attn.k_proj.weight", (nkv * hd, h), "w"),
            (p + "self_attn.v_proj.weight", (nkv * hd, h), "w"),
            (p + "self_attn.o_proj.weight", (h, nq * hd), "w"),
            (p + "self_attn.q_norm.weight", (hd,), "n"),
            (p + "self_attn.k_norm.weight", (hd,), "n"),
            (p + "post_attention_layernorm.weight", (h,), "n"),
            (p + "mlp.gate_proj.weight", (f, h), "w"),
            (p + "mlp.up_proj.weight", (f, h), "w"),
            (p + "mlp.down_proj.weight", (h, f), "w"),
        ]
    shapes.append(("model.norm.weight", (h,), "n"))
    header, blobs, off = {}, [], 0
    for name, shape, kind in shapes:  # drawn in this order: the seed fixes every value
        a = rng.normal(0.0, std, shape) if kind == "w" else rng.normal(1.0, 0.1, shape)
        b = bf16(a.astype(np.float32)).tobytes()
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    header["__metadata__"] = {"format": "pt", "source": f"seeded_qwen3.py seed {seed}"}
    hj = json.dumps(header, separators=(",", ":")).encode()
    hj += b" " * ((8 - len(hj) % 8) % 8)
    with open(f"{out}/model.safetensors", "wb") as fh:
        fh.write(struct.pack("<Q", len(hj)))
        fh.write(hj)
        for b in blobs:
            fh.write(b)


if __name__ == "__main__":
    main()
