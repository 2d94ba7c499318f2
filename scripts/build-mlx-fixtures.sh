#!/usr/bin/env bash
# Builds MLX-quantized fixtures of SmolLM2-135M-Instruct with mlx-lm's own converter (CPU build
# of mlx), offline, into .cache/hf/ (ignored by git):
#   SmolLM2-135M-Instruct-mlx-q4-g64          affine 4-bit, group 64
#   SmolLM2-135M-Instruct-mlx-q4-g32          affine 4-bit, group 32
#   SmolLM2-135M-Instruct-mlx-mixed-4-6       --quant-predicate mixed_4_6 (4/6 bits per layer)
#   SmolLM2-135M-Instruct-mlx-q4-g64-dequant  q4-g64 dequantized back by `mlx_lm convert -d` (BF16)
#   Qwen3-Embedding-0.6B-2L-seeded-mlx-mixed-4-6  the seed A folder (scripts/build-qwen3-embedding-
#     fixture.sh, run here if missing) with --quant-predicate mixed_4_6; its tokenizer and
#     sentence-transformers files are copied back from the source folder.
# Source: .cache/hf/SmolLM2-135M-Instruct (scripts/build-smollm2-fixture.sh; run here if missing).
# Environment: .cache/venv-mlx, mlx[cpu]==0.32.4 + mlx-lm==0.32.2 and their whole dependency
# closure, every wheel pinned by sha256 in scripts/mlx-requirements.txt (cp311/cp312/cp313,
# Linux x86_64, glibc >= 2.35). Wheels are downloaded with hash checking into ~/.cache/quantgate/wheels/mlx
# and installed from there with --no-index, so a rebuild of the venv works offline.
# Tokenizer files: mlx-lm 0.32.2 re-serializes tokenizer.json/tokenizer_config.json through
# transformers 5 (which rewrites the pre_tokenizer, drops the Digits split, adds a
# post_processor, and moves chat_template to chat_template.jinja); the source folder's original
# tokenizer.json, tokenizer_config.json and special_tokens_map.json are copied over them.
# Idempotent: finished folders carry a .complete marker and are skipped. Each folder is built in
# $out.tmp and moved into place only when complete.
# Usage: scripts/build-mlx-fixtures.sh [--verify | --venv-only]
#   --venv-only  only sets up .cache/venv-mlx (build-v5-fixtures.sh's environment)
#   --verify  also re-checks the layout facts of docs/mlx-layout.md on the built folders
#             (own numpy unpacking vs mx.dequantize, formula, dtypes, GGUF Q4_1 round trip).
# fixture-key: mlx-requirements.txt build-smollm2-fixture.sh build-qwen3-embedding-fixture.sh gguf_to_hf.py seeded_qwen3.py
set -euo pipefail
cd "$(dirname "$0")/.."

MLX_VERSION=0.32.4
MLX_LM_VERSION=0.32.2
# sha256 of the top-level wheels (scripts/mlx-requirements.txt pins these and every dependency;
# pip verifies them, --require-hashes):
#   6267be0db81a9d850b3ecd9bf0cf7dd0f439408db9fbc59237e37fda3f7676b0  mlx-0.32.4-cp311-cp311-manylinux_2_35_x86_64.whl
#   0e0a24fa2ce8b6b94d2e6a90604e8813aa8e29fcb918bb2aa01cfb6d133d8cee  mlx_cpu-0.32.4-py3-none-manylinux_2_35_x86_64.whl
#   5c0991248cfff5872503d74f466d2532dd8cb7fb3670cb9be7a06d7305dadc04  mlx_lm-0.32.2-py3-none-any.whl
req=scripts/mlx-requirements.txt
venv=.cache/venv-mlx
wheels="${QUANTGATE_CACHE:-$HOME/.cache/quantgate}/wheels/mlx"   # outside the clone: CI reuses it
src=.cache/hf/SmolLM2-135M-Instruct
name=SmolLM2-135M-Instruct
verify=0 venv_only=0
[ "${1:-}" = "--verify" ] && verify=1
[ "${1:-}" = "--venv-only" ] && venv_only=1

export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_HUB_DISABLE_TELEMETRY=1
export HF_HOME="$PWD/.cache/hf-home"   # keep any hub cache writes inside the repo's .cache

outs=(mlx-q4-g64 mlx-q4-g32 mlx-mixed-4-6 mlx-q4-g64-dequant)
q3=Qwen3-Embedding-0.6B-2L-seeded
all_done=1
for o in "${outs[@]}"; do
  [ -f ".cache/hf/$name-$o/.complete" ] || all_done=0
done
[ -f ".cache/hf/$q3-mlx-mixed-4-6/.complete" ] || all_done=0
if [ "$all_done" = 1 ] && [ "$verify" = 0 ] && [ "$venv_only" = 0 ]; then
  echo "build-mlx-fixtures: all outputs present, nothing to do" >&2
  exit 0
fi

if [ ! -f "$src/.complete" ] && [ "$venv_only" = 0 ]; then
  bash scripts/fetch-models.sh
  bash scripts/build-smollm2-fixture.sh
fi

# --- environment --------------------------------------------------------------------------
req_sha=$(sha256sum "$req" | cut -d' ' -f1)
if [ "$(cat "$venv/.installed" 2>/dev/null)" != "$req_sha" ]; then
  echo "build-mlx-fixtures: setting up $venv (mlx $MLX_VERSION, mlx-lm $MLX_LM_VERSION)" >&2
  rm -rf "$venv"
  python3 -m venv "$venv"
  mkdir -p "$wheels"
  # pip checks every wheel against its --hash; files already in $wheels are re-checked, not refetched.
  "$venv/bin/pip" download --quiet --disable-pip-version-check --no-deps --only-binary :all: \
    --require-hashes -d "$wheels" -r "$req"
  "$venv/bin/pip" install --quiet --disable-pip-version-check --no-index --find-links "$wheels" \
    --no-deps --only-binary :all: --require-hashes -r "$req"
  "$venv/bin/pip" check --disable-pip-version-check >/dev/null
  "$venv/bin/python" - "$MLX_VERSION" "$MLX_LM_VERSION" <<'PY'
import sys
from importlib.metadata import version
want = {"mlx": sys.argv[1], "mlx-cpu": sys.argv[1], "mlx-lm": sys.argv[2]}
got = {k: version(k) for k in want}
assert got == want, (got, want)
import mlx.core as mx
assert str(mx.default_device()).startswith("Device(cpu"), mx.default_device()
PY
  echo "$req_sha" > "$venv/.installed"
fi
py="$venv/bin/python"
[ "$venv_only" = 1 ] && exit 0

# --- conversions --------------------------------------------------------------------------
# convert OUT_SUFFIX INPUT_DIR [mlx_lm convert options...]
convert() {
  local out=".cache/hf/$name-$1" in="$2"
  shift 2
  [ -f "$out/.complete" ] && return 0
  echo "build-mlx-fixtures: $out <- mlx_lm convert $*" >&2
  rm -rf "$out.tmp"   # mlx_lm convert refuses an existing --mlx-path
  "$py" -m mlx_lm convert --hf-path "$in" --mlx-path "$out.tmp" "$@" >"$out.log" 2>&1 \
    || { cat "$out.log" >&2; exit 1; }
  mv "$out.log" "$out.tmp/convert.log"
  cp -f "$src/tokenizer.json" "$src/tokenizer_config.json" "$src/special_tokens_map.json" "$out.tmp/"
  chmod u+w "$out.tmp"/*
  "$py" - "$out.tmp" <<'PY'
import json, sys
d = sys.argv[1]
json.load(open(f"{d}/config.json"))
tpl = json.load(open(f"{d}/tokenizer_config.json")).get("chat_template")
try:
    jinja = open(f"{d}/chat_template.jinja").read()
except FileNotFoundError:
    jinja = tpl
assert jinja == tpl, "chat_template.jinja differs from tokenizer_config.json's chat_template"
with open(f"{d}/model.safetensors", "rb") as f:
    n = int.from_bytes(f.read(8), "little")
    assert len(json.loads(f.read(n))) > 1
PY
  touch "$out.tmp/.complete"
  rm -rf "$out"
  mv "$out.tmp" "$out"
}

convert mlx-q4-g64 "$src" -q --q-bits 4 --q-group-size 64
convert mlx-q4-g32 "$src" -q --q-bits 4 --q-group-size 32
# No --q-group-size on purpose: mlx-lm 0.32.2 then writes "group_size": null in every per-layer
# override (as real checkpoints made this way do); the effective group size is 64.
convert mlx-mixed-4-6 "$src" -q --quant-predicate mixed_4_6
convert mlx-q4-g64-dequant ".cache/hf/$name-mlx-q4-g64" -d

# Seed A, mixed 4/6 bits (mlx-lm quantizes qwen3 on CPU).
q3_out=".cache/hf/$q3-mlx-mixed-4-6"
if [ ! -f "$q3_out/.complete" ]; then
  bash scripts/build-qwen3-embedding-fixture.sh >/dev/null
  rm -rf "$q3_out.tmp"
  "$py" -m mlx_lm convert --hf-path ".cache/hf/$q3" --mlx-path "$q3_out.tmp" -q \
    --quant-predicate mixed_4_6 >"$q3_out.log" 2>&1 || { cat "$q3_out.log" >&2; exit 1; }
  mv "$q3_out.log" "$q3_out.tmp/convert.log"
  rm -f "$q3_out.tmp/chat_template.jinja"
  cp -rf ".cache/hf/$q3"/{tokenizer.json,tokenizer_config.json,modules.json,config_sentence_transformers.json,1_Pooling} "$q3_out.tmp/"
  chmod -R u+w "$q3_out.tmp"
  touch "$q3_out.tmp/.complete"
  rm -rf "$q3_out"
  mv "$q3_out.tmp" "$q3_out"
fi

[ "$verify" = 1 ] || exit 0

# --- verification (docs/mlx-layout.md) ----------------------------------------------------
"$py" - .cache/hf <<'PY'
import json, struct, sys
import numpy as np
import mlx.core as mx

base = f"{sys.argv[1]}/SmolLM2-135M-Instruct"
names = {t: f"{base}-mlx-{t}" for t in ["q4-g64", "q4-g32", "mixed-4-6", "q4-g64-dequant"]}

def read_st(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    dts = {"BF16": np.uint16, "F16": np.float16, "F32": np.float32, "U32": np.uint32}
    return {k: (v["dtype"], np.frombuffer(data[v["data_offsets"][0]:v["data_offsets"][1]],
                                          dtype=dts[v["dtype"]]).reshape(v["shape"]))
            for k, v in header.items() if k != "__metadata__"}

def bf16_to_f32(u16):
    return (u16.astype(np.uint32) << 16).view(np.float32)

def to_bf16_bits(x):  # f32 -> bf16, round to nearest even
    u = x.astype(np.float32).view(np.uint32)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)

def rbf(x):
    return bf16_to_f32(to_bf16_bits(x))

def unpack_stream(words, bits):
    # code i of a row = bits [i*bits, (i+1)*bits) of the row's little-endian bytes, LSB first
    by = np.ascontiguousarray(words).view(np.uint8).reshape(words.shape[0], -1)
    st = np.unpackbits(by, axis=1, bitorder="little")
    n = st.shape[1] // bits
    b = st[:, :n * bits].reshape(words.shape[0], n, bits).astype(np.uint32)
    return (b << np.arange(bits, dtype=np.uint32)).sum(axis=2).astype(np.uint32)

def unpack_per_word(words, bits):
    # hypothesis: floor(32/bits) whole codes per uint32 word, LSB first, no straddling
    sh = np.arange(32 // bits, dtype=np.uint32) * bits
    return ((words[..., None] >> sh) & ((1 << bits) - 1)).reshape(words.shape[0], -1)

def mxdq(w, s, b, gs, bits, f32=False):
    s, b = mx.array(s).view(mx.bfloat16), mx.array(b).view(mx.bfloat16)
    if f32:
        s, b = s.astype(mx.float32), b.astype(mx.float32)
    r = mx.dequantize(mx.array(w), s, b, group_size=gs, bits=bits)
    return np.array(r) if f32 else np.array(r.view(mx.uint16))

src = read_st(f"{base}/model.safetensors")
report = {}
for tag in ["q4-g64", "q4-g32", "mixed-4-6"]:
    cfg = json.load(open(f"{names[tag]}/config.json"))
    qc = cfg["quantization"]
    assert cfg["quantization_config"] == qc
    t = read_st(f"{names[tag]}/model.safetensors")
    stats = {}
    for k in sorted(t):
        if not k.endswith(".scales"):
            continue
        p = k[:-len(".scales")]
        w, (s_dt, s), (b_dt, b) = t[p + ".weight"][1], t[p + ".scales"], t[p + ".biases"]
        orig = bf16_to_f32(src[p + ".weight"][1])
        in_dim = orig.shape[1]
        gs, bits = in_dim // s.shape[1], w.shape[1] * 32 // in_dim
        ov = qc.get(p, {})
        assert ov.get("bits", qc["bits"]) == bits and (ov.get("group_size") or qc["group_size"]) == gs
        q = unpack_stream(w, bits)
        sf, bf = (np.repeat(bf16_to_f32(a), gs, axis=1) for a in (s, b))
        qf = q.astype(np.float32)
        ref_bf16, ref_f32 = mxdq(w, s, b, gs, bits), mxdq(w, s, b, gs, bits, f32=True)
        e = stats.setdefault(str(bits), {"tensors": 0, "group_sizes": set(), "scale_bias_dtypes": set(),
                                         "stream_unpack_eq_mx_f32": True, "per_word_unpack_ok": True,
                                         "bf16_eq_bf16(bf16(s*q)+b)": True, "bf16_eq_bf16(s*q+b)": True,
                                         "bias_is_group_edge": True, "neg_scale_iff_bias_is_max": True,
                                         "groups": 0, "negative_scales": 0, "scale_bias_f16_exact": True,
                                         "max_abs_err_vs_bf16_src": 0.0, "mean_abs_err_vs_bf16_src": []})
        e["tensors"] += 1
        e["group_sizes"].add(gs)
        e["scale_bias_dtypes"].add(f"{s_dt}/{b_dt}")
        e["stream_unpack_eq_mx_f32"] &= bool(np.array_equal((sf * qf + bf).view(np.uint32), ref_f32.view(np.uint32)))
        e["per_word_unpack_ok"] &= bool(np.array_equal(unpack_per_word(w, bits)[:, :in_dim], q))
        e["bf16_eq_bf16(bf16(s*q)+b)"] &= bool(np.array_equal(to_bf16_bits(rbf(sf * qf) + bf), ref_bf16))
        e["bf16_eq_bf16(s*q+b)"] &= bool(np.array_equal(to_bf16_bits(sf * qf + bf), ref_bf16))
        og = orig.reshape(orig.shape[0], -1, gs)
        bs, ss = bf16_to_f32(b), bf16_to_f32(s)
        e["bias_is_group_edge"] &= bool(np.all((bs == og.min(2)) | (bs == og.max(2))))
        e["neg_scale_iff_bias_is_max"] &= bool(np.array_equal(ss < 0, (bs == og.max(2)) & (bs != og.min(2))))
        e["groups"] += int(bs.size)
        e["negative_scales"] += int((bf16_to_f32(s) < 0).sum())
        for a in (s, b):
            f = bf16_to_f32(a)
            e["scale_bias_f16_exact"] &= bool(np.array_equal(f.astype(np.float16).astype(np.float32), f))
        err = np.abs(bf16_to_f32(ref_bf16) - orig)
        e["max_abs_err_vs_bf16_src"] = max(e["max_abs_err_vs_bf16_src"], float(err.max()))
        e["mean_abs_err_vs_bf16_src"].append(float(err.mean()))
    for e in stats.values():
        e["group_sizes"], e["scale_bias_dtypes"] = sorted(e["group_sizes"]), sorted(e["scale_bias_dtypes"])
        e["mean_abs_err_vs_bf16_src"] = round(float(np.mean(e["mean_abs_err_vs_bf16_src"])), 6)
    report[tag] = {"config_quantization_keys": len(qc), "per_bits": stats,
                   "unquantized": sorted({k.split(".", 3)[3] if k.startswith("model.layers.") else k for k in t
                                          if k.endswith(".weight") and k[:-7] + ".scales" not in t})}

dq = read_st(f"{names['q4-g64-dequant']}/model.safetensors")
q4 = read_st(f"{names['q4-g64']}/model.safetensors")
same = True
for k, (dt, a) in dq.items():
    p = k[:-len(".weight")]
    if p + ".scales" in q4:
        s, b = q4[p + ".scales"][1], q4[p + ".biases"][1]
        same &= bool(np.array_equal(mxdq(q4[k][1], s, b, a.shape[1] // s.shape[1], 4), a))
    else:
        same &= bool(np.array_equal(q4[k][1], a))
dcfg = json.load(open(f"{names['q4-g64-dequant']}/config.json"))
report["q4-g64-dequant"] = {"dtypes": sorted({dt for dt, _ in dq.values()}), "tensors": len(dq),
                            "bit_equal_to_mx.dequantize(q4-g64)_bf16": same,
                            "config_has_quantization": "quantization" in dcfg or "quantization_config" in dcfg}
print(json.dumps(report, indent=1))
PY

# GGUF Q4_1 round trip of the quantized embed_tokens with gguf-py (independent reader, in the
# .cache/venv of scripts/build-smollm2-fixture.sh): an MLX 4-bit group of 32 is one Q4_1 block
# (d = scale, m = bias as f16); a group of 64 is two blocks sharing d and m.
.cache/venv/bin/python - .cache/hf <<'PY'
import json, struct, sys
import numpy as np
from gguf import GGMLQuantizationType
from gguf.quants import dequantize

base = f"{sys.argv[1]}/SmolLM2-135M-Instruct"
def read(path, keys):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        h = json.loads(f.read(n))
        data = f.read()
    return {k: np.frombuffer(data[h[k]["data_offsets"][0]:h[k]["data_offsets"][1]],
                             dtype=np.uint32 if h[k]["dtype"] == "U32" else np.uint16).reshape(h[k]["shape"])
            for k in keys}
bf = lambda u: (u.astype(np.uint32) << 16).view(np.float32)
for tag in ["q4-g32", "q4-g64"]:
    p = "model.embed_tokens"
    t = read(f"{base}-mlx-{tag}/model.safetensors", [p + ".weight", p + ".scales", p + ".biases"])
    s, b = bf(t[p + ".scales"]), bf(t[p + ".biases"])
    rows, in_dim = t[p + ".weight"].shape[0], t[p + ".weight"].shape[1] * 8
    gs = in_dim // s.shape[1]
    q = ((t[p + ".weight"][..., None] >> (np.arange(8, dtype=np.uint32) * 4)) & 15).reshape(rows, in_dim).astype(np.uint8)
    want = np.repeat(s, gs, 1) * q + np.repeat(b, gs, 1)          # exact f32 affine values
    rep = gs // 32
    qb = q.reshape(rows, in_dim // 32, 32)
    qs = qb[..., :16] | (qb[..., 16:] << 4)                        # Q4_1: j low nibble, j+16 high
    d = np.repeat(s, rep, 1).astype(np.float16)[..., None].view(np.uint8)
    m = np.repeat(b, rep, 1).astype(np.float16)[..., None].view(np.uint8)
    blocks = np.concatenate([d.reshape(rows, -1, 2), m.reshape(rows, -1, 2), qs], axis=2)  # 20 bytes
    got = dequantize(blocks.reshape(rows, -1), GGMLQuantizationType.Q4_1).reshape(rows, in_dim)
    print(json.dumps({"gguf_q4_1_roundtrip": tag, "tensor": p, "bit_equal_f32": bool(np.array_equal(got.view(np.uint32), want.view(np.uint32)))}))
PY
