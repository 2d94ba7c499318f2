"""Builds seeded XLMRobertaModel embedders with the real XLM-R tokenizer.

For each model: the published config.json with `num_hidden_layers` cut to 2 (every other field
as published), the published sentence-transformers files (pooling, Normalize), tokenizer_config
and special_tokens_map as published, the real tokenizer files of the multilingual-e5-small
fixture (XLM-R's sentencepiece.bpe.model and tokenizer.json: bge-m3 and multilingual-e5-base
ship the same 250002-entry tokenizer), and weights drawn from a fixed seed (normal,
std = initializer_range; LayerNorm weights 1 + noise), stored as F16 to halve the folder.

The configs are not bytes fetched from the hub (no reachable registry carries them): each is
the published field set, checked against public copies (testdata/xlmr/PROVENANCE.md).

Usage: python seeded_xlmr.py TOKENIZER_DIR OUT_ROOT
"""
import json
import shutil
import sys
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import save_file

XLMR_LARGE = {
    "architectures": ["XLMRobertaModel"],
    "attention_probs_dropout_prob": 0.1,
    "bos_token_id": 0,
    "classifier_dropout": None,
    "eos_token_id": 2,
    "hidden_act": "gelu",
    "hidden_dropout_prob": 0.1,
    "hidden_size": 1024,
    "initializer_range": 0.02,
    "intermediate_size": 4096,
    "layer_norm_eps": 1e-05,
    "max_position_embeddings": 8194,
    "model_type": "xlm-roberta",
    "num_attention_heads": 16,
    "num_hidden_layers": 24,
    "output_past": True,
    "pad_token_id": 1,
    "position_embedding_type": "absolute",
    "torch_dtype": "float32",
    "transformers_version": "4.33.0",
    "type_vocab_size": 1,
    "use_cache": True,
    "vocab_size": 250002,
}

XLMR_BASE = dict(
    XLMR_LARGE,
    hidden_size=768,
    intermediate_size=3072,
    max_position_embeddings=514,
    num_attention_heads=12,
    num_hidden_layers=12,
    transformers_version="4.29.0.dev0",
)

SPECIAL = {
    "bos_token": "<s>",
    "cls_token": "<s>",
    "eos_token": "</s>",
    "mask_token": {"content": "<mask>", "lstrip": True, "normalized": False,
                   "rstrip": False, "single_word": False},
    "pad_token": "<pad>",
    "sep_token": "</s>",
    "unk_token": "<unk>",
}

MODELS = {
    # BAAI/bge-m3: CLS pooling, then Normalize; 8192-token context.
    "bge-m3-2L-seeded": (XLMR_LARGE, "cls", 8192, 1),
    # intfloat/multilingual-e5-base: mean pooling, then Normalize; 512-token context.
    "multilingual-e5-base-2L-seeded": (XLMR_BASE, "mean", 512, 2),
}


def write_json(path: Path, obj) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj, indent=2, ensure_ascii=False) + "\n")


def weights(cfg: dict, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    std = cfg["initializer_range"]
    h, ff = cfg["hidden_size"], cfg["intermediate_size"]

    def normal(*shape):
        return torch.from_numpy((rng.standard_normal(shape, dtype=np.float32) * std).astype(np.float16))

    def norm(prefix: str, out: dict):
        out[f"{prefix}.weight"] = torch.from_numpy(
            (1.0 + rng.standard_normal(h, dtype=np.float32) * 0.05).astype(np.float16))
        out[f"{prefix}.bias"] = normal(h)

    t = {
        "embeddings.word_embeddings.weight": normal(cfg["vocab_size"], h),
        "embeddings.position_embeddings.weight": normal(cfg["max_position_embeddings"], h),
        "embeddings.token_type_embeddings.weight": normal(cfg["type_vocab_size"], h),
    }
    norm("embeddings.LayerNorm", t)
    for i in range(cfg["num_hidden_layers"]):
        p = f"encoder.layer.{i}"
        for name, (o, n) in {
            "attention.self.query": (h, h),
            "attention.self.key": (h, h),
            "attention.self.value": (h, h),
            "attention.output.dense": (h, h),
            "intermediate.dense": (ff, h),
            "output.dense": (h, ff),
        }.items():
            t[f"{p}.{name}.weight"] = normal(o, n)
            t[f"{p}.{name}.bias"] = normal(o)
        norm(f"{p}.attention.output.LayerNorm", t)
        norm(f"{p}.output.LayerNorm", t)
    t["pooler.dense.weight"] = normal(h, h)
    t["pooler.dense.bias"] = normal(h)
    return t


def build(tok_dir: Path, out: Path, published: dict, pooling: str, max_len: int, seed: int):
    cfg = dict(published, num_hidden_layers=2)
    write_json(out / "config.json", cfg)
    for f in ["sentencepiece.bpe.model", "tokenizer.json"]:
        shutil.copyfile(tok_dir / f, out / f)
    write_json(out / "tokenizer_config.json", dict(
        SPECIAL, clean_up_tokenization_spaces=True, model_max_length=max_len,
        sp_model_kwargs={}, tokenizer_class="XLMRobertaTokenizer"))
    write_json(out / "special_tokens_map.json", SPECIAL)
    write_json(out / "modules.json", [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"},
    ])
    write_json(out / "sentence_bert_config.json", {"max_seq_length": max_len, "do_lower_case": False})
    h = cfg["hidden_size"]
    write_json(out / "1_Pooling" / "config.json", {
        "word_embedding_dimension": h,
        "pooling_mode_cls_token": pooling == "cls",
        "pooling_mode_mean_tokens": pooling == "mean",
        "pooling_mode_max_tokens": False,
        "pooling_mode_mean_sqrt_len_tokens": False,
    })
    save_file(weights(cfg, seed), str(out / "model.safetensors"), metadata={"format": "pt"})


def main():
    tok_dir, root = Path(sys.argv[1]), Path(sys.argv[2])
    for name, (published, pooling, max_len, seed) in MODELS.items():
        build(tok_dir, root / name, published, pooling, max_len, seed)
        print(name)


if __name__ == "__main__":
    main()
