#!/usr/bin/env bash
# Runs one fixture script (scripts/build-*.sh), its outputs cached outside the clone, keyed by
# sha256: `scripts/fixture.sh build-quant-fixtures.sh`.
#
# The key covers every file that decides what a fixture script builds: every fixture script
# (some build on another's outputs or environment), the Python drivers and the hash-pinned
# requirement files under scripts/, and the pinned inputs (scripts/fetch-models.sh names every
# wheel by sha256). The folders the script adds to
# .cache/hf are stored in ${QUANTGATE_CACHE:-~/.cache/quantgate}/fixtures/KEY; a later clone on
# the same machine (CI) restores them instead of building them again (the quantization
# fixtures alone take minutes of torch on 2 cores). Any change to those files builds anew.
set -euo pipefail
cd "$(dirname "$0")/.."
script=$1
cache=${QUANTGATE_CACHE:-$HOME/.cache/quantgate}/fixtures
key=$(cat scripts/build-*.sh scripts/fixture.sh scripts/fetch-models.sh scripts/*.py \
  scripts/*requirements*.txt | sha256sum | cut -d' ' -f1)
store=$cache/$script-$key
mkdir -p .cache/hf
if [ -f "$store/.complete" ]; then
  cp -a "$store/hf/." .cache/hf/
  echo "fixture: $script restored from $store" >&2
  exit 0
fi
before=$(ls .cache/hf)
bash "scripts/$script"
# Store what the script added (a script that found everything built adds nothing: then the
# store is made from a later clean build).
new=$(comm -13 <(echo "$before") <(ls .cache/hf))
if [ -n "$new" ]; then
  mkdir -p "$cache"
  tmp=$(mktemp -d "$cache/.tmp.XXXXXX")
  mkdir -p "$tmp/hf"
  for d in $new; do cp -a ".cache/hf/$d" "$tmp/hf/"; done
  touch "$tmp/.complete"
  # One store per script: an older key's outputs are never restored again.
  rm -rf "${cache:?}/$script-"*
  mv "$tmp" "$store"
fi
