#!/usr/bin/env bash
# Builds .cache/hf/bge-m3-2L-seeded and .cache/hf/multilingual-e5-base-2L-seeded (ignored):
# XLMRobertaModel embedders with the real XLM-R tokenizer (from the multilingual-e5-small
# fixture), bge-m3's and multilingual-e5-base's configs cut to 2 layers, their pooling files, and
# seeded F16 weights (scripts/seeded_xlmr.py says what is real). Idempotent.
# fixture-key: seeded_xlmr.py build-xlmr-fixture.sh xlmr_fixture.py quant-requirements.txt build-quant-fixtures.sh
set -euo pipefail
cd "$(dirname "$0")/.."
root=.cache/hf
names=(bge-m3-2L-seeded multilingual-e5-base-2L-seeded)
done_all=1
for n in "${names[@]}"; do [ -f "$root/$n/.complete" ] || done_all=0; done
[ "$done_all" = 1 ] && exit 0
qvenv=${QUANTGATE_CACHE:-$HOME/.cache/quantgate}/venv-quant
[ -f "$root/multilingual-e5-small-q4w/.complete" ] || bash scripts/build-xlmr-fixture.sh
tmp=$root/xlmr-seeded.tmp
rm -rf "$tmp"
mkdir -p "$tmp"
"$qvenv/bin/python" scripts/seeded_xlmr.py "$root/multilingual-e5-small-q4w" "$tmp"
for n in "${names[@]}"; do
  touch "$tmp/$n/.complete"
  rm -rf "${root:?}/$n"
  mv "$tmp/$n" "$root/$n"
  sha256sum "$root/$n/model.safetensors"
done
rmdir "$tmp"
