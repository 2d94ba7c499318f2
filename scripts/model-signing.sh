#!/usr/bin/env bash
# Installs the model-signing library (hash-pinned, requirements/model-signing.txt) into
# .cache/venv-model-signing and prints the path of its `model_signing` command. Idempotent: a
# venv whose requirements match is reused.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=.cache/venv-model-signing
req=requirements/model-signing.txt
stamp="$venv/.requirements.sha256"
want="$(sha256sum "$req" | cut -d' ' -f1)"
if [ ! -x "$venv/bin/model_signing" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --no-deps --require-hashes -r "$req"
  echo "$want" >"$stamp"
fi
echo "$PWD/$venv/bin/model_signing"
