#!/usr/bin/env bash
# Installs kubernetes-validate (hash-pinned, requirements/kubernetes-validate.txt) into
# .cache/venv-k8s and prints its path. Idempotent: a venv whose requirements match is reused.
set -euo pipefail
cd "$(dirname "$0")/.."
exec scripts/pinned-venv.sh .cache/venv-k8s requirements/kubernetes-validate.txt kubernetes-validate
