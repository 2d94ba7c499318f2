#!/usr/bin/env python3
"""Builds the base folder and seed corpora of the hf_safetensors and hf_config fuzz targets.

Base folder `fuzz/base/tiny-bert/`: all-MiniLM-L6-v2's real tokenizer files, a config of the same shape as
the real one (hidden 8, 2 heads, 1 layer), and a model.safetensors written here with `struct`
(independent of quantgate's and the safetensors crate's code). Small (0.5 MB), so one fuzz run
is dominated by loading the tokenizer.

Seeds: `corpus/hf_safetensors/` gets that file's header JSON; `corpus/hf_config/` gets its config,
MiniLM's real config.json, and the real configs under testdata/hf/.

Usage: python3 fuzz/make_hf_seeds.py [MINILM_DIR]   (default .cache/hf/all-MiniLM-L6-v2)
"""
import glob
import json
import os
import random
import shutil
import struct
import sys

here = os.path.dirname(os.path.abspath(__file__))
repo = os.path.dirname(here)
src = sys.argv[1] if len(sys.argv) > 1 else os.path.join(repo, ".cache/hf/all-MiniLM-L6-v2")
base = os.path.join(here, "base", "tiny-bert")
os.makedirs(base, exist_ok=True)
N_VOCAB, H, FF, POS = 30522, 8, 16, 16

# Tokenizer files: the real ones, unchanged (a cut vocabulary would change the pre-tokenizer
# probe hash, and convert would refuse every input before reaching the weights).
for f in ["tokenizer.json", "vocab.txt", "tokenizer_config.json", "special_tokens_map.json"]:
    shutil.copy(os.path.join(src, f), base)

config = json.load(open(os.path.join(src, "config.json")))
config.update(hidden_size=H, intermediate_size=FF, num_attention_heads=2, num_hidden_layers=1,
              max_position_embeddings=POS, vocab_size=N_VOCAB)
json.dump(config, open(os.path.join(base, "config.json"), "w"), indent=2)

# model.safetensors: BERT names and shapes, seeded values.
shapes = {
    "embeddings.word_embeddings.weight": [N_VOCAB, H],
    "embeddings.position_embeddings.weight": [POS, H],
    "embeddings.token_type_embeddings.weight": [2, H],
    "embeddings.LayerNorm.weight": [H], "embeddings.LayerNorm.bias": [H],
}
for p in ["attention.self.query", "attention.self.key", "attention.self.value",
          "attention.output.dense"]:
    shapes[f"encoder.layer.0.{p}.weight"] = [H, H]
    shapes[f"encoder.layer.0.{p}.bias"] = [H]
shapes.update({
    "encoder.layer.0.attention.output.LayerNorm.weight": [H],
    "encoder.layer.0.attention.output.LayerNorm.bias": [H],
    "encoder.layer.0.intermediate.dense.weight": [FF, H],
    "encoder.layer.0.intermediate.dense.bias": [FF],
    "encoder.layer.0.output.dense.weight": [H, FF],
    "encoder.layer.0.output.dense.bias": [H],
    "encoder.layer.0.output.LayerNorm.weight": [H],
    "encoder.layer.0.output.LayerNorm.bias": [H],
})
rng = random.Random(1)
header, data = {"__metadata__": {"format": "pt"}}, b""
for name, shape in shapes.items():
    n = 1
    for d in shape:
        n *= d
    # F16 for the 2-D weights, F32 otherwise: both source dtypes in one file.
    if len(shape) == 2:
        blob = struct.pack(f"<{n}e", *[rng.uniform(-0.5, 0.5) for _ in range(n)])
        dtype = "F16"
    else:
        blob = struct.pack(f"<{n}f", *[rng.uniform(-0.5, 0.5) for _ in range(n)])
        dtype = "F32"
    header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(blob)]}
    data += blob
hj = json.dumps(header, separators=(",", ":")).encode()
hj += b" " * ((-len(hj)) % 8)
st = struct.pack("<Q", len(hj)) + hj + data
open(os.path.join(base, "model.safetensors"), "wb").write(st)

for target in ["hf_safetensors", "hf_config"]:
    os.makedirs(os.path.join(here, "corpus", target), exist_ok=True)
# The hf_safetensors target fuzzes the header JSON; the data section comes from the base file.
open(os.path.join(here, "corpus", "hf_safetensors", "tiny-bert"), "wb").write(hj)
cdir = os.path.join(here, "corpus", "hf_config")


def seed(path, name):
    # Copied as bytes: the shared fixtures are read-only and so would be a copy's mode.
    open(os.path.join(cdir, name), "wb").write(open(path, "rb").read())


seed(os.path.join(base, "config.json"), "tiny-bert")
seed(os.path.join(src, "config.json"), "all-MiniLM-L6-v2")
for p in glob.glob(os.path.join(repo, "testdata", "hf", "*", "config.json")):
    seed(p, os.path.basename(os.path.dirname(p)))
print(f"base folder {base}; seeds in {os.path.join(here, 'corpus')}")
