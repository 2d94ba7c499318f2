#!/usr/bin/env bash
# Installs kubernetes-validate (hash-pinned, requirements/kubernetes-validate.txt) into
# .cache/venv-k8s and prints its path. Idempotent: a venv whose requirements match is reused.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=.cache/venv-k8s
req=requirements/kubernetes-validate.txt
stamp="$venv/.requirements.sha256"
want="$(sha256sum "$req" | cut -d' ' -f1)"
if [ ! -x "$venv/bin/kubernetes-validate" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --no-deps --require-hashes -r "$req"
  echo "$want" >"$stamp"
fi
echo "$PWD/$venv/bin/kubernetes-validate"
