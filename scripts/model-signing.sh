#!/usr/bin/env bash
# Installs the model-signing library (hash-pinned, requirements/model-signing.txt) into
# .cache/venv-model-signing and prints the path of its `model_signing` command. Idempotent: a
# venv whose requirements match is reused.
set -euo pipefail
cd "$(dirname "$0")/.."
exec scripts/pinned-venv.sh .cache/venv-model-signing requirements/model-signing.txt model_signing
