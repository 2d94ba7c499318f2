"""Writes a seeded Phi-3-family checkpoint with transformers' own save_pretrained into OUT_DIR,
whose config.json is already there (scripts/build-phi3-fixture.sh): Phi3ForCausalLM built from
that config under torch.manual_seed(SEED) (transformers' initialisation: N(0, 0.02) matrices,
unit RMSNorm weights), stored as BF16 (the config's dtype), with the fused
`self_attn.qkv_proj` and `mlp.gate_up_proj` tensors the published checkpoints hold.

As for the Llama 3 fixture, the query and key rows of qkv_proj are drawn 4x wider so attention
depends on position (a RoPE error shows), and the norms around 1 so a norm read wrongly shows.

transformers 5 rewrites config.json in its own spelling (`rope_parameters`, `dtype`); the
published spelling (v4) is put back afterwards, since that is what users download.

Usage: seeded_phi3.py OUT_DIR SEED
"""
import shutil
import sys

import torch
from transformers import AutoConfig, Phi3ForCausalLM


def main():
    out, seed = sys.argv[1], int(sys.argv[2])
    shutil.copy(f"{out}/config.json", f"{out}/config.published.json")
    torch.manual_seed(seed)
    cfg = AutoConfig.from_pretrained(out)
    model = Phi3ForCausalLM(cfg).to(torch.bfloat16)
    hd = cfg.hidden_size // cfg.num_attention_heads
    qk_rows = (cfg.num_attention_heads + cfg.num_key_value_heads) * hd
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("qkv_proj.weight"):
                p[:qk_rows].mul_(4.0)
            if name.endswith("norm.weight"):
                p.copy_((1.0 + 0.1 * torch.randn_like(p, dtype=torch.float32)).to(p.dtype))
    model.save_pretrained(out, safe_serialization=True)
    shutil.move(f"{out}/config.published.json", f"{out}/config.json")


if __name__ == "__main__":
    main()
