"""Writes the producing library's own dequantization of a GPTQ or compressed-tensors checkpoint as
a plain F32 HF folder, for issue 14's PPL comparison (scripts/library-dequant-ppl.sh).

- GPTQ (auto-round's `auto_gptq` export, checkpoint_format gptq, zero stored minus one):
  auto-round's own CPU kernel for that layout, `auto_round_extension.torch.qlinear_torch_zp.
  QuantLinear`, is built per module from the stored qweight/qzeros/scales/g_idx, and its forward
  is run on the identity (its g_idx branch, on column slices; see gptq()). That yields exactly the weights it multiplies by: the kernel
  dequantizes to float16 (scales are float16), so each value is fp16(scale · (q − zero)).
- compressed-tensors (llm-compressor's pack-quantized): transformers loads the folder with
  `CompressedTensorsConfig(run_compressed=False)`, which runs compressed-tensors' decompressor
  and leaves dense Linear weights (in the scales' dtype).
- AWQ: auto-round's AWQ inference backends need gptqmodel or autoawq, which are not in the pinned
  closure; the script refuses it.

Every other tensor (embeddings, norms) is copied, widened to F32 (exact).

Usage: library_dequant.py SRC_DIR OUT_DIR
"""
import json
import os
import shutil
import sys

import torch
from safetensors import safe_open
from safetensors.torch import save_file


def gptq(src, qc):
    from auto_round_extension.torch.qlinear_torch_zp import QuantLinear

    if qc.get("checkpoint_format", "gptq") != "gptq":
        raise SystemExit(f"{src}: checkpoint_format {qc.get('checkpoint_format')} is not gptq (v1)")
    bits, group = qc["bits"], qc["group_size"]
    f = safe_open(os.path.join(src, "model.safetensors"), "pt")
    out = {}
    for name in f.keys():
        if name.endswith(".qweight"):
            p = name[: -len(".qweight")]
            qweight, scales = f.get_tensor(name), f.get_tensor(p + ".scales")
            n_in, n_out = qweight.shape[0] * 32 // bits, qweight.shape[1]
            qzeros = f.get_tensor(p + ".qzeros")
            g_idx = f.get_tensor(p + ".g_idx") if p + ".g_idx" in f.keys() else None
            if g_idx is None:
                g_idx = torch.arange(n_in, dtype=torch.int32) // group
            # The kernel's plain branch cannot take a last partial group (576 inputs at group
            # 128), and its g_idx branch slices the output columns by the input count. So the
            # g_idx branch runs on column slices of at most n_in outputs (a multiple of 32, so
            # qzeros split on whole int32 words); dequantization is per column.
            step, pack = n_in // 32 * 32, 32 // bits
            cols = []
            for c0 in range(0, n_out, step):
                c1 = min(n_out, c0 + step)
                m = QuantLinear(bits, group, n_in, c1 - c0, bias=False, g_idx=True)
                m.qweight = qweight[:, c0:c1].contiguous()
                m.qzeros = qzeros[:, c0 // pack : c1 // pack].contiguous()
                m.scales = scales[:, c0:c1].contiguous()
                m.g_idx = g_idx
                with torch.no_grad():
                    cols.append(m(torch.eye(n_in, dtype=torch.float32)))
            w = torch.cat(cols, dim=1).t().contiguous()
            out[p + ".weight"] = w
            if p + ".bias" in f.keys():
                out[p + ".bias"] = f.get_tensor(p + ".bias").float()
        elif not name.rsplit(".", 1)[-1] in ("qzeros", "scales", "g_idx") and name not in out:
            out[name] = f.get_tensor(name).float()
    return out


def compressed_tensors(src):
    from transformers import AutoModelForCausalLM, CompressedTensorsConfig

    qc = CompressedTensorsConfig(run_compressed=False)
    model = AutoModelForCausalLM.from_pretrained(src, device_map="cpu", quantization_config=qc)
    out = {}
    for name, t in model.state_dict().items():
        # Quantization parameters stay as module attributes after decompression; drop them.
        if name.rsplit(".", 1)[-1] in ("weight", "bias"):
            out[name] = t.detach().float().contiguous()
    if model.config.tie_word_embeddings:
        out.pop("lm_head.weight", None)
    return out


def main():
    src, dst = sys.argv[1:]
    cfg = json.load(open(os.path.join(src, "config.json")))
    qc = cfg.pop("quantization_config")
    method = qc.get("quant_method")
    if method == "gptq":
        tensors = gptq(src, qc)
    elif method == "compressed-tensors":
        tensors = compressed_tensors(src)
    else:
        raise SystemExit(f"{src}: no library dequantizer for quant_method {method!r} in the pinned closure")
    tmp = dst + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    for n in os.listdir(src):
        if n not in ("config.json", "model.safetensors") and not n.startswith(".") and os.path.isfile(os.path.join(src, n)):
            shutil.copy(os.path.join(src, n), tmp)
    cfg["torch_dtype"] = "float32"
    cfg.pop("dtype", None)
    json.dump(cfg, open(os.path.join(tmp, "config.json"), "w"), indent=2)
    save_file(tensors, os.path.join(tmp, "model.safetensors"), metadata={"format": "pt"})
    shutil.rmtree(dst, ignore_errors=True)
    os.rename(tmp, dst)


if __name__ == "__main__":
    main()
