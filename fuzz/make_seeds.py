#!/usr/bin/env python3
"""Writes a seed corpus for the gguf_reader fuzz target into fuzz/corpus/gguf_reader/:
a small valid GGUF made with an independent (Python struct) writer, and, when fetched,
the first 64 KiB of a real llama.cpp-made file."""
import os
import random
import struct

here = os.path.dirname(os.path.abspath(__file__))
out = os.path.join(here, "corpus", "gguf_reader")
os.makedirs(out, exist_ok=True)


def s(x):
    x = x.encode()
    return struct.pack("<Q", len(x)) + x


def kv(k, t, payload):
    return s(k) + struct.pack("<I", t) + payload


random.seed(1)
meta = [
    kv("general.architecture", 8, s("llama")),
    kv("general.alignment", 4, struct.pack("<I", 32)),
    kv("tokenizer.ggml.tokens", 9, struct.pack("<IQ", 8, 3) + s("a") + s("b") + s("<s>")),
    kv("x.nested", 9, struct.pack("<IQ", 9, 1) + struct.pack("<IQ", 5, 2) + struct.pack("<ii", 1, -1)),
    kv("x.f", 6, struct.pack("<f", 1.5)),
    kv("x.b", 7, b"\x01"),
]
# (name, ggml type id, ne, bytes)
tensors = [("t.f16", 1, [8, 2], 32), ("t.q4_0", 2, [32], 18), ("t.q4k", 12, [256], 144),
           ("t.q6k", 14, [256, 2], 420), ("t.q8_0", 8, [64], 68)]
infos, data, off = b"", b"", 0
for name, ty, dims, nb in tensors:
    infos += s(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<q", d) for d in dims)
    infos += struct.pack("<IQ", ty, off)
    pad = (-nb) % 32
    data += bytes(random.getrandbits(8) for _ in range(nb)) + b"\0" * pad
    off += nb + pad
head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(meta)) + b"".join(meta) + infos
head += b"\0" * ((-len(head)) % 32)
with open(os.path.join(out, "small_valid"), "wb") as f:
    f.write(head + data)

real = os.path.join(here, "..", ".cache", "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
if os.path.exists(real):
    with open(real, "rb") as f, open(os.path.join(out, "real_prefix"), "wb") as g:
        g.write(f.read(65536))
