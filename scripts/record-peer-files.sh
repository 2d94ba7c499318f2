#!/usr/bin/env bash
# Records crates/quantgate/tests/fixtures/peer-files.json: the sha256 and size of the whole GGUF
# file llama.cpp's own converter (convert_hf_to_gguf.py --outtype f16) writes for each folder
# given (`.cache/hf/NAME`). tests/it/xlmr.rs requires `convert`'s F16 output to be the same file,
# byte for byte: every key, value, key order, tensor, offset and padding. Not part of the test
# command (torch is ~5.6 GB): run by hand after changing the peer or a fixture. Same peer set-up
# as scripts/record-peer-keys.sh (llama-cpp-python==0.3.36 sdist, venv with torch and
# transformers==5.24.0, cached in $QUANTGATE_CACHE, default ~/.cache/quantgate).
# Usage: scripts/record-peer-files.sh .cache/hf/bge-m3-2L-seeded …
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/peer-converter.sh
mkdir -p out/peer
for dir in "$@"; do
  name=$(basename "$dir")
  (cd "$llama" && "$venv/bin/python" convert_hf_to_gguf.py "$OLDPWD/$dir" --outtype f16 \
    --outfile "$OLDPWD/out/peer/$name.gguf" >"$OLDPWD/out/peer/$name.log" 2>&1) \
    || { tail -20 "out/peer/$name.log" >&2; exit 1; }
done
python3 - "$@" <<'PY'
import hashlib, json, os, sys
p = "crates/quantgate/tests/fixtures/peer-files.json"
out = json.load(open(p)) if os.path.exists(p) else {"provenance": {}, "models": {}}
out["provenance"] = {
    "tool": "convert_hf_to_gguf.py and gguf-py as vendored in the llama-cpp-python==0.3.36 sdist (vendor/llama.cpp)",
    "python": "transformers 5.24.0, torch (CPU), sentencepiece 0.2.3 from PyPI, in $QUANTGATE_CACHE/venv-torch",
    "command": "python convert_hf_to_gguf.py FOLDER --outtype f16 --outfile OUT.gguf, run from vendor/llama.cpp",
    "script": "scripts/record-peer-files.sh",
}
for d in sys.argv[1:]:
    name = os.path.basename(d.rstrip("/"))
    f = f"out/peer/{name}.gguf"
    h = hashlib.sha256()
    with open(f, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    out["models"][name] = {"sha256": h.hexdigest(), "bytes": os.path.getsize(f)}
json.dump(out, open(p, "w"), indent=1)
print(out["models"])
PY
