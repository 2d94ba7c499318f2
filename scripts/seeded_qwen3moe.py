"""Writes a seeded Qwen3-MoE checkpoint with transformers' own save_pretrained into OUT_DIR,
whose config.json is already there (scripts/build-qwen3moe-fixture.sh): Qwen3MoeForCausalLM
built from that config under torch.manual_seed(SEED) (transformers' initialisation: N(0, 0.02)
matrices, unit RMSNorm weights), stored as BF16 (the config's dtype), per-expert tensors
(`mlp.experts.E.{gate,up,down}_proj.weight`) as the published checkpoints hold them. No
Qwen3-MoE weights are reachable offline, so the values are random.

As for the Llama 3 fixture, q_proj and k_proj are drawn 4x wider so attention depends on
position, and the norms around 1 so a norm read wrongly shows. The router (`mlp.gate`) is drawn
4x wider too, so its top-k choice is as decided as a trained router's instead of a near tie
between experts.

transformers 5 rewrites config.json in its own spelling (`num_local_experts`,
`rope_parameters`, `dtype`); the published file (v4 spelling) is put back afterwards, since that
is what users download.

Usage: seeded_qwen3moe.py OUT_DIR SEED
"""
import shutil
import sys

import torch
from transformers import AutoConfig, Qwen3MoeForCausalLM


def main():
    out, seed = sys.argv[1], int(sys.argv[2])
    shutil.copy(f"{out}/config.json", f"{out}/config.published.json")
    torch.manual_seed(seed)
    cfg = AutoConfig.from_pretrained(out)
    model = Qwen3MoeForCausalLM(cfg).to(torch.bfloat16)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(("q_proj.weight", "k_proj.weight", "mlp.gate.weight")):
                p.mul_(4.0)
            if name.endswith("norm.weight"):
                p.copy_((1.0 + 0.1 * torch.randn_like(p, dtype=torch.float32)).to(p.dtype))
    model.save_pretrained(out, safe_serialization=True)
    shutil.move(f"{out}/config.published.json", f"{out}/config.json")


if __name__ == "__main__":
    main()
