"""Writes a seeded Llama 3.2 checkpoint with transformers' own save_pretrained into OUT_DIR,
whose config.json is already there (scripts/build-llama3-fixture.sh): LlamaForCausalLM built
from that config under torch.manual_seed(SEED) (transformers' initialisation: N(0, 0.02)
matrices, unit RMSNorm weights), stored as BF16 (the config's dtype). No Llama weights are
reachable offline, so the values are random; the layout, names and dtype are transformers'.

q_proj and k_proj are drawn 4x wider (N(0, 0.08)) so that attention is as peaked as a trained
model's and depends on position: with N(0, 0.02) attention is nearly uniform, and logits at
8448 tokens moved only by cos 0.99998 when rope_freqs used factor 16 instead of 32; with 0.08
by cos 0.92 (argmax agreement 0.55), while at 512 tokens by cos 0.9998.

Usage: seeded_llama3.py OUT_DIR SEED
"""
import sys

import torch
from transformers import AutoConfig, LlamaForCausalLM


def main():
    out, seed = sys.argv[1], int(sys.argv[2])
    torch.manual_seed(seed)
    cfg = AutoConfig.from_pretrained(out)
    model = LlamaForCausalLM(cfg).to(torch.bfloat16)
    # RMSNorm weights start at exactly 1; draw them around 1 so a norm read wrongly shows.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(("q_proj.weight", "k_proj.weight")):
                p.mul_(4.0)
            if name.endswith("norm.weight"):
                p.copy_((1.0 + 0.1 * torch.randn_like(p, dtype=torch.float32)).to(p.dtype))
    model.save_pretrained(out, safe_serialization=True)


if __name__ == "__main__":
    main()
