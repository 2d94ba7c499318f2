#!/usr/bin/env bash
# The test command (README): installs build needs, fetches the real inputs, checks
# formatting and runs every test in release mode (a debug build would compile llama.cpp again).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/fetch-models.sh
cargo fmt --all -- --check
cargo test --release --workspace
