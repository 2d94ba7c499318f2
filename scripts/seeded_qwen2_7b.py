"""Writes the seeded weights of a Qwen2.5-7B-Instruct-shaped checkpoint into OUT_DIR, whose
config.json is already there (scripts/build-qwen2-7b-fixture.sh), as transformers lays out a
7B checkpoint: BF16 safetensors shards `model-0000K-of-0000N.safetensors` plus
`model.safetensors.index.json`.

No transformers model is built: at 7.6e9 parameters its f32 copy (30 GB) is larger than the
machine. Each tensor is drawn on its own, in row chunks, from numpy's PCG64 seeded with
(SEED, sha256 of the tensor name), so the bytes do not depend on chunking, order or platform:
matrices N(0, 0.02) (transformers' initializer_range), q_proj/k_proj N(0, QK_STD) so that
attention depends on position (see seeded_llama3.py), biases N(0, 0.02), RMSNorm weights
1 + N(0, 0.1). f32 → BF16 rounds to nearest even, as torch's `.to(torch.bfloat16)` does.

QK_STD = 0.04: the spread of q·k/√head_dim is about std² × hidden for unit-RMS inputs. The
seeded llama3 fixture's N(0, 0.08) at hidden 512 gives 3.3 (attention as peaked as a trained
model's, see seeded_llama3.py); 0.08 at Qwen2.5-0.5B's hidden 896 gives 5.7, and so does 0.04 at
3584. The first build used 0.08 at 3584: 22.9, a near-hard softmax, and a model so
ill-conditioned that llama.cpp against itself, the same F16 file under its haswell and zen4
kernels (only the f32 accumulation order differs), gave mean KLD 0.243 and the same top token
at 14% of positions (4 × 512 tokens of wiki.test.raw). No comparison of two forwards can pass
on such a model.

Usage: seeded_qwen2_7b.py OUT_DIR SEED
"""
import hashlib
import json
import struct
import sys

import numpy as np

SHARD_BYTES = 4 * 10**9  # transformers' default max_shard_size is 5 GB; 7B repos use ~4 GB
CHUNK = 1 << 24  # elements drawn at a time
QK_STD = 0.04


def tensors(cfg):
    h, inter, vocab = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    kv = h // cfg["num_attention_heads"] * cfg["num_key_value_heads"]
    yield "model.embed_tokens.weight", (vocab, h), 0.02
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        yield p + "input_layernorm.weight", (h,), None
        yield p + "self_attn.q_proj.weight", (h, h), QK_STD
        yield p + "self_attn.q_proj.bias", (h,), 0.02
        yield p + "self_attn.k_proj.weight", (kv, h), QK_STD
        yield p + "self_attn.k_proj.bias", (kv,), 0.02
        yield p + "self_attn.v_proj.weight", (kv, h), 0.02
        yield p + "self_attn.v_proj.bias", (kv,), 0.02
        yield p + "self_attn.o_proj.weight", (h, h), 0.02
        yield p + "post_attention_layernorm.weight", (h,), None
        yield p + "mlp.gate_proj.weight", (inter, h), 0.02
        yield p + "mlp.up_proj.weight", (inter, h), 0.02
        yield p + "mlp.down_proj.weight", (h, inter), 0.02
    yield "model.norm.weight", (h,), None
    if not cfg.get("tie_word_embeddings", False):
        yield "lm_head.weight", (vocab, h), 0.02


def bf16_bytes(x):
    u = x.view(np.uint32)
    rounded = u + (np.uint32(0x7FFF) + ((u >> 16) & 1))
    return (rounded >> 16).astype(np.uint16).tobytes()


def draw(name, shape, std, seed, out):
    digest = int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "little")
    rng = np.random.Generator(np.random.PCG64([seed, digest]))
    n = int(np.prod(shape))
    for start in range(0, n, CHUNK):
        k = min(CHUNK, n - start)
        x = rng.standard_normal(k, dtype=np.float32)
        if std is None:
            x = np.float32(1.0) + np.float32(0.1) * x
        else:
            x *= np.float32(std)
        out.write(bf16_bytes(x))


def main():
    out, seed = sys.argv[1], int(sys.argv[2])
    cfg = json.load(open(f"{out}/config.json"))
    shards, cur, size = [], [], 0
    for name, shape, std in tensors(cfg):
        nbytes = int(np.prod(shape)) * 2
        if cur and size + nbytes > SHARD_BYTES:
            shards.append(cur)
            cur, size = [], 0
        cur.append((name, shape, std))
        size += nbytes
    shards.append(cur)
    weight_map, total = {}, 0
    for k, shard in enumerate(shards, 1):
        fname = f"model-{k:05d}-of-{len(shards):05d}.safetensors"
        header, off = {"__metadata__": {"format": "pt"}}, 0
        for name, shape, _ in shard:
            nbytes = int(np.prod(shape)) * 2
            header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [off, off + nbytes]}
            off += nbytes
            weight_map[name] = fname
        total += off
        hb = json.dumps(header, separators=(",", ":")).encode()
        hb += b" " * (-len(hb) % 8)
        with open(f"{out}/{fname}", "wb") as f:
            f.write(struct.pack("<Q", len(hb)) + hb)
            for name, shape, std in shard:
                draw(name, shape, std, seed, f)
        print(f"seeded_qwen2_7b: {fname} ({off} bytes)", file=sys.stderr)
    index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
    with open(f"{out}/model.safetensors.index.json", "w") as f:
        json.dump(index, f, indent=2)
        f.write("\n")


if __name__ == "__main__":
    main()
