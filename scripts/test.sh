#!/usr/bin/env bash
# The test command (README): installs build needs, fetches the real inputs, runs every test in
# release mode (a debug build would compile llama.cpp again), then checks formatting.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/fetch-models.sh
scripts/build-smollm2-fixture.sh
scripts/build-qwen2-fixture.sh
scripts/build-qwen3-embedding-fixture.sh
scripts/build-mlx-fixtures.sh
scripts/build-quant-fixtures.sh
scripts/build-gemma3-fixture.sh
scripts/build-v5-fixtures.sh
# --report-time gives each test's wall time (libtest's flag is unstable: RUSTC_BOOTSTRAP=1 lets
# the stable harness accept it; nothing is compiled with unstable features).
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
status=0
RUSTC_BOOTSTRAP=1 cargo test --release --workspace --no-fail-fast -- -Zunstable-options --report-time \
  2>&1 | tee "$log" || status=$?
echo "10 slowest tests (s):"
sed -nE 's/^test (.*) \.\.\. [a-zA-Z]+ <([0-9.]+)s>$/\2 \1/p' "$log" | sort -rn | head -10
[ "$status" -eq 0 ] || exit "$status"
# Style last, so a formatting nit never hides test results.
cargo fmt --all -- --check
