"""Makes GPTQ, AWQ and compressed-tensors checkpoints of an HF folder with the producing
libraries themselves (auto-round for GPTQ/AWQ, llm-compressor for compressed-tensors), on CPU,
round-to-nearest (auto-round iters=0 without its RTN optimization; llm-compressor's
QuantizationModifier without calibration). Used by scripts/build-quant-fixtures.sh.

Usage: quant_fixtures.py SRC_DIR OUT_DIR TOOL FORMAT BITS GROUP SYM|ASYM
  TOOL auto-round: FORMAT auto_gptq | auto_awq; GROUP 32/128
  TOOL llm-compressor: FORMAT pack-quantized; GROUP 32/128, or 0 for per-channel
"""
import glob
import os
import shutil
import sys


def auto_round(src, out, fmt, bits, group, sym):
    from auto_round import AutoRound

    # auto-round wants calibration texts even at iters=0; none are used without optimization.
    texts = ["The quick brown fox jumps over the lazy dog. " * 20] * 2
    ar = AutoRound(src, bits=bits, group_size=group, sym=sym, iters=0, device_map="cpu", seed=42,
                   nsamples=2, seqlen=64, dataset=texts, disable_opt_rtn=True)
    tmp = out + ".ar"
    ar.quantize_and_save(tmp, format=fmt)
    # auto-round writes into a sub-folder named after the model and scheme.
    (inner,) = [d for d in glob.glob(os.path.join(tmp, "*")) if os.path.isdir(d)]
    shutil.move(inner, out)
    shutil.rmtree(tmp)


def llm_compressor(src, out, bits, group, sym):
    from llmcompressor import oneshot
    from llmcompressor.modifiers.quantization import QuantizationModifier
    from transformers import AutoModelForCausalLM, AutoTokenizer

    weights = {"num_bits": bits, "type": "int", "symmetric": sym}
    if group:
        weights.update(strategy="group", group_size=group)
    else:
        weights.update(strategy="channel")
    recipe = QuantizationModifier(config_groups={"group_0": {"targets": ["Linear"], "weights": weights}},
                                  ignore=["lm_head"])
    model = AutoModelForCausalLM.from_pretrained(src, dtype="auto")
    oneshot(model=model, recipe=recipe)
    model.save_pretrained(out, save_compressed=True)
    AutoTokenizer.from_pretrained(src).save_pretrained(out)


def main():
    src, out, tool, fmt, bits, group, sym = sys.argv[1:]
    bits, group, sym = int(bits), int(group), sym == "SYM"
    if tool == "auto-round":
        auto_round(src, out, fmt, bits, group, sym)
    elif tool == "llm-compressor":
        assert fmt == "pack-quantized", fmt
        llm_compressor(src, out, bits, group, sym)
    else:
        raise SystemExit(f"unknown tool {tool}")


if __name__ == "__main__":
    main()
