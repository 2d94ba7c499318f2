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
cargo test --release --workspace --no-fail-fast
# Style last, so a formatting nit never hides test results.
cargo fmt --all -- --check
