#!/usr/bin/env bash
# Re-records crates/quantgate/tests/fixtures/peer-keys.json: the metadata key sets that
# llama.cpp's own converter writes for the test folders, and its general.* values. Not part of the test command (torch is
# ~5.6 GB): run by hand after changing the peer, with the folders of scripts/test.sh in place.
# Needs the llama-cpp-python==0.3.36 sdist (full llama.cpp sources) and a venv with torch and
# transformers==5.24.0 from PyPI, both cached in $QUANTGATE_CACHE (default ~/.cache/quantgate).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/peer-converter.sh
run() { # name folder [--vocab-only]
  (cd "$llama" && "$venv/bin/python" convert_hf_to_gguf.py "$OLDPWD/$2" ${3:-} --outtype f16 --outfile "$OLDPWD/out/peer/$1.gguf" >/dev/null)
}
run SmolLM2-135M-Instruct .cache/hf/SmolLM2-135M-Instruct
run SmolLM2-135M-Instruct-v5 .cache/hf/SmolLM2-135M-Instruct-v5
run all-MiniLM-L6-v2 .cache/hf/all-MiniLM-L6-v2
run Qwen2.5-0.5B-Instruct testdata/hf/Qwen2.5-0.5B-Instruct --vocab-only
run Qwen2.5-0.5B-Instruct-v5 .cache/hf/Qwen2.5-0.5B-Instruct-v5 --vocab-only
run Qwen2.5-Coder-0.5B-Instruct .cache/hf/Qwen2.5-Coder-0.5B-Instruct
run gemma-3-270m .cache/hf/gemma-3-270m
run Llama-3.2-1B-Instruct-2L-seeded .cache/hf/Llama-3.2-1B-Instruct-2L-seeded
run Qwen3-30B-A3B-2L-seeded .cache/hf/Qwen3-30B-A3B-2L-seeded
run Phi-4-mini-2L-seeded .cache/hf/Phi-4-mini-2L-seeded
.cache/venv/bin/python - <<'PY'
import json
from gguf import GGUFReader
p = "crates/quantgate/tests/fixtures/peer-keys.json"
out = json.load(open(p))
for name in out["keys"]:
    r = GGUFReader(f"out/peer/{name}.gguf")
    out["keys"][name]["keys"] = sorted(k for k in r.fields if not k.startswith("GGUF."))
    # The provenance values (general.*, sampling apart), to compare ours with value by value.
    general = {}
    for k, f in r.fields.items():
        if not k.startswith("general.") or k.startswith("general.sampling."):
            continue
        v = f.contents()
        general[k] = v
    out["keys"][name]["general"] = dict(sorted(general.items()))
json.dump(out, open(p, "w"), indent=1)
print({k: len(v["keys"]) for k, v in out["keys"].items()})
PY
