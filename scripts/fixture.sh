#!/usr/bin/env bash
# Runs one fixture script (scripts/build-*.sh), its outputs cached outside the clone, keyed by
# sha256: `scripts/fixture.sh build-quant-fixtures.sh`.
#
# The key covers every file that decides what the script builds: the script itself, this file,
# scripts/fetch-models.sh (it names every input wheel by sha256), and the files the script lists
# on its `# fixture-key:` line (its Python drivers, hash-pinned requirement files, and the fixture
# scripts whose outputs or environment it builds on). A new fixture script therefore leaves the
# other scripts' keys alone. The folders the script adds to .cache/hf are stored in
# ${QUANTGATE_CACHE:-~/.cache/quantgate}/fixtures/SCRIPT-KEY; a later clone on the same machine
# (CI) restores them instead of building them again (the quantization fixtures alone take minutes
# of torch on 2 cores). Any change to those files builds anew.
#
# A restore hard-links the stored files (a copy only across filesystems): the fixtures are about
# 10 GB, and a clone that copied them onto a nearly full disk left too little for the tests, so
# that every test writing more than a few hundred MB refused for space (17 of them in stop 40's
# CI). The tests never write into .cache/hf: they edit copies (tests/it/common copy_hf).
set -euo pipefail
cd "$(dirname "$0")/.."
script=$1
cache=${QUANTGATE_CACHE:-$HOME/.cache/quantgate}/fixtures
deps=$(sed -n 's/^# fixture-key: *//p' "scripts/$script")
[ -n "$deps" ] || { echo "fixture: scripts/$script has no '# fixture-key:' line" >&2; exit 2; }
files=(scripts/fixture.sh scripts/fetch-models.sh "scripts/$script")
for d in $deps; do
  [ -f "scripts/$d" ] || { echo "fixture: scripts/$script: fixture-key names missing scripts/$d" >&2; exit 2; }
  files+=("scripts/$d")
done
key=$(cat "${files[@]}" | sha256sum | cut -d' ' -f1)
store=$cache/$script-$key
mkdir -p .cache/hf
if [ -f "$store/.complete" ]; then
  cp -alf "$store/hf/." .cache/hf/ 2>/dev/null || cp -af "$store/hf/." .cache/hf/
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
