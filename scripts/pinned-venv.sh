#!/usr/bin/env bash
# Usage: scripts/pinned-venv.sh VENV REQUIREMENTS COMMAND
# Installs REQUIREMENTS (hash-pinned, --require-hashes, no other dependencies) into VENV (under
# the clone's .cache/) and prints the absolute path of VENV/bin/COMMAND. Idempotent: a venv whose
# requirements file has the recorded sha256 and holds COMMAND is reused; any other is rebuilt.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=$1 req=$2 cmd=$3
stamp="$venv/.requirements.sha256"
want="$(sha256sum "$req" | cut -d' ' -f1)"
if [ ! -x "$venv/bin/$cmd" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --no-deps --require-hashes -r "$req"
  echo "$want" >"$stamp"
fi
echo "$PWD/$venv/bin/$cmd"
