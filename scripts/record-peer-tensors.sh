#!/usr/bin/env bash
# Records crates/quantgate/tests/fixtures/peer-tensors.json: per tensor, the name, ggml type,
# shape and sha256 of the data that llama.cpp's own converter (convert_hf_to_gguf.py --outtype
# f16) writes for the real-weight test folders. tests/it/peer_tensors.rs requires `convert`'s F16
# output to hold the same tensors byte for byte. Not part of the test command (torch is ~5.6 GB):
# run by hand after changing the peer or a fixture. Same peer set-up as scripts/record-peer-keys.sh
# (llama-cpp-python==0.3.36 sdist, venv with torch and transformers==5.24.0, cached in
# $QUANTGATE_CACHE, default ~/.cache/quantgate).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/peer-converter.sh
names=()
for dir in "$@"; do
  name=$(basename "$dir")
  names+=("$name")
  (cd "$llama" && "$venv/bin/python" convert_hf_to_gguf.py "$OLDPWD/$dir" --outtype f16 \
    --outfile "$OLDPWD/out/peer/$name.tensors.gguf" >"$OLDPWD/out/peer/$name.log" 2>&1) \
    || { tail -20 "out/peer/$name.log" >&2; exit 1; }
done
"$venv/bin/python" - "$llama/gguf-py" "${names[@]}" <<'PY'
import hashlib, json, os, sys
sys.path.insert(0, sys.argv[1])
from gguf import GGUFReader
p = "crates/quantgate/tests/fixtures/peer-tensors.json"
out = json.load(open(p)) if os.path.exists(p) else {"provenance": {}, "models": {}}
out["provenance"] = {
    "tool": "convert_hf_to_gguf.py and gguf-py as vendored in the llama-cpp-python==0.3.36 sdist (vendor/llama.cpp)",
    "python": "transformers 5.24.0, torch (CPU) from PyPI, in $QUANTGATE_CACHE/venv-torch",
    "command": "python convert_hf_to_gguf.py FOLDER --outtype f16 --outfile OUT.gguf, run from vendor/llama.cpp",
    "hash": "sha256 of each tensor's data bytes (GGUFReader's ReaderTensor.data, alignment padding excluded)",
    "script": "scripts/record-peer-tensors.sh",
}
for name in sys.argv[2:]:
    r = GGUFReader(f"out/peer/{name}.tensors.gguf")
    out["models"][name] = [
        {"name": t.name, "type": t.tensor_type.name, "shape": [int(x) for x in t.shape],
         "sha256": hashlib.sha256(t.data.tobytes()).hexdigest()}
        for t in r.tensors
    ]
json.dump(out, open(p, "w"), indent=1)
print({k: len(v) for k, v in out["models"].items()})
PY
