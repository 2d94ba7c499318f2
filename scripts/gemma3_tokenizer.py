"""Rebuilds gemma-3-270m's tokenizer files from its GGUF (no original tokenizer files are
reachable offline): the SentencePiece model `tokenizer.model` from tokenizer.ggml.tokens/scores/
token_type and the add_space_prefix flag (BPE with byte fallback, as Gemma 3's), then
transformers' own slow → fast conversion (GemmaTokenizer, GemmaConverter) writes
tokenizer.json, tokenizer_config.json and special_tokens_map.json. Used by
scripts/build-gemma3-fixture.sh (run with the peer venv: transformers, sentencepiece, protobuf).

Usage: gemma3_tokenizer.py GGUF OUT_DIR GGUF_PY_DIR
"""
import sys

sys.path.insert(0, sys.argv[3])
from gguf import GGUFReader  # noqa: E402
from sentencepiece import sentencepiece_model_pb2 as sp  # noqa: E402


def field(r, key):
    return r.fields[key].contents()


def main():
    src, out = sys.argv[1], sys.argv[2]
    r = GGUFReader(src)
    assert field(r, "tokenizer.ggml.model") == "llama", "a SentencePiece vocab is expected"
    tokens = field(r, "tokenizer.ggml.tokens")
    scores = field(r, "tokenizer.ggml.scores")
    types = field(r, "tokenizer.ggml.token_type")
    m = sp.ModelProto()
    for t, s, ty in zip(tokens, scores, types):
        # GGUF's token types are SentencePiece's (1 normal … 6 byte).
        m.pieces.add(piece=t, score=s, type=ty)
    ts = m.trainer_spec
    ts.model_type = sp.TrainerSpec.BPE
    ts.vocab_size = len(tokens)
    ts.byte_fallback = True
    ts.unk_id = field(r, "tokenizer.ggml.unknown_token_id")
    ts.bos_id = field(r, "tokenizer.ggml.bos_token_id")
    ts.eos_id = field(r, "tokenizer.ggml.eos_token_id")
    ts.pad_id = field(r, "tokenizer.ggml.padding_token_id")
    ns = m.normalizer_spec
    ns.name = "identity"
    ns.add_dummy_prefix = bool(field(r, "tokenizer.ggml.add_space_prefix"))
    ns.remove_extra_whitespaces = False
    ns.escape_whitespaces = True
    with open(f"{out}/tokenizer.model", "wb") as f:
        f.write(m.SerializeToString())

    from transformers import GemmaTokenizer

    # from_pretrained on a folder holding only tokenizer.model runs the slow → fast conversion.
    tok = GemmaTokenizer.from_pretrained(out,
                                         add_bos_token=bool(field(r, "tokenizer.ggml.add_bos_token")),
                                         add_eos_token=bool(field(r, "tokenizer.ggml.add_eos_token")))
    tok.save_pretrained(out)

    # transformers 5 writes a tokenizer_config.json without `added_tokens_decoder` and with local
    # paths. Rewrite it in the form published Gemma 3 folders have: readers such as
    # convert_hf_to_gguf.py take the USER_DEFINED type of the 165 non-special added tokens
    # (newline runs, [multimodal], …) from `added_tokens_decoder`.
    import json
    tj = json.load(open(f"{out}/tokenizer.json"))
    decoder = {str(t["id"]): {k: t[k] for k in ("content", "lstrip", "normalized", "rstrip",
                                                "single_word", "special")}
               for t in tj["added_tokens"]}
    cfg = {
        "add_bos_token": bool(field(r, "tokenizer.ggml.add_bos_token")),
        "add_eos_token": bool(field(r, "tokenizer.ggml.add_eos_token")),
        "added_tokens_decoder": decoder,
        "bos_token": "<bos>",
        "clean_up_tokenization_spaces": False,
        "eos_token": "<eos>",
        "mask_token": "<mask>",
        "model_max_length": 1000000000000000019884624838656,
        "pad_token": "<pad>",
        "sp_model_kwargs": {},
        "spaces_between_special_tokens": False,
        "tokenizer_class": "GemmaTokenizer",
        "unk_token": "<unk>",
        "use_default_system_prompt": False,
    }
    json.dump(cfg, open(f"{out}/tokenizer_config.json", "w"), indent=2, ensure_ascii=False)


if __name__ == "__main__":
    main()
