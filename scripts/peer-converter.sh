# Sourced by scripts/record-peer-*.sh: sets $venv (torch + transformers==5.24.0 from PyPI) and
# $llama (the llama.cpp sources of the llama-cpp-python==0.3.36 sdist, convert_hf_to_gguf.py
# and gguf-py), both fetched once into $QUANTGATE_CACHE (default ~/.cache/quantgate) / out/peer.
cache=${QUANTGATE_CACHE:-$HOME/.cache/quantgate}
mkdir -p "$cache/sdist" out/peer
sdist=$cache/sdist/llama_cpp_python-0.3.36.tar.gz
[ -f "$sdist" ] || python3 -m pip download --no-deps --no-binary :all: llama-cpp-python==0.3.36 -d "$cache/sdist"
venv=$cache/venv-torch
[ -x "$venv/bin/python" ] || { python3 -m venv "$venv"; "$venv/bin/pip" install -q torch transformers==5.24.0 safetensors sentencepiece protobuf numpy; }
src=out/peer/src
[ -d "$src" ] || { mkdir -p "$src"; tar xzf "$sdist" -C "$src"; }
llama=$(ls -d "$src"/*/vendor/llama.cpp)
