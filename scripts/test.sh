#!/usr/bin/env bash
# The test command (README): installs build needs, fetches the real inputs, runs every test in
# release mode (a debug build would compile llama.cpp again), then checks formatting.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
CARGO_TARGET_DIR="$(scripts/cargo-target.sh)"
export CARGO_TARGET_DIR
scripts/fetch-models.sh
# Each fixture script through scripts/fixture.sh: its outputs cached outside the clone by sha256
# of what decides them (restored on a second clone, e.g. CI).
for f in smollm2-fixture qwen2-fixture qwen3-embedding-fixture mlx-fixtures quant-fixtures \
  gemma3-fixture v5-fixtures llama3-fixture qwen3moe-fixture phi3-fixture xlmr-fixture \
  xlmr-seeded-fixture; do
  scripts/fixture.sh "build-$f.sh"
done
# The sweep tests (tests/it/sweep*.rs): kubernetes-validate with Kubernetes 1.37's schemas
# (hash-pinned), and a real single-node Slurm (munge, slurmctld, slurmd), stopped on exit.
scripts/kubernetes-validate.sh >/dev/null
# The signing interop test (tests/it/signing.rs): the model-signing library, hash-pinned.
scripts/model-signing.sh >/dev/null
# Build every test target once (not the examples: debugging tools no test runs), then run each test executable from its package folder (as
# cargo test does) with libtest's --report-time, which prints each test's wall time. The flag is
# unstable: RUSTC_BOOTSTRAP=1 is set for the test processes only, never for cargo, so nothing
# is compiled differently (set for cargo it would rebuild crates whose build scripts probe it).
# The target folder is shared by every checkout on this machine (keyed by Cargo.lock), and cargo's
# fingerprints of the workspace crates name the source paths of whichever checkout built last: a
# second checkout could be taken as fresh and its tests run the other's binaries. Touching this
# checkout's sources makes cargo rebuild the workspace crates from them (the dependencies and
# llama.cpp stay cached; build scripts are left alone).
find crates/*/src crates/*/tests -name '*.rs' -exec touch {} +
log="$(mktemp)"
bins="$(mktemp)"
least="$(mktemp)"
sampler=""
trap 'rm -f "$log" "$bins" "$least"; kill "$sampler" 2>/dev/null || true; scripts/slurm.sh stop' EXIT
scripts/slurm.sh start
# The tests write their GGUFs to TMPDIR and to out/; a step short of space refuses up front and
# names both figures (quantgate::disk), so a full disk shows as failures naming "needs … free".
# The least free space seen while they run is printed with the totals, so that such failures are
# read at once (stop 40's CI: 17 failures from a disk the fixtures had filled).
scratch="${TMPDIR:-/tmp}"
free_gb() { df -Pk "$1" | awk 'NR == 2 { printf "%.1f", $4 * 1024 / 1e9 }'; }
echo "disk: $(free_gb "$scratch") GB free in $scratch, $(free_gb .) GB in the clone"
free_gb "$scratch" >"$least"
( while sleep 2; do
    f="$(free_gb "$scratch")"
    awk -v f="$f" '{ exit !(f < $1) }' "$least" && echo "$f" >"$least"
  done ) &
sampler=$!
cargo test --release --workspace --lib --bins --tests --no-run \
  --message-format=json-render-diagnostics \
  | python3 -c '
import json, os, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"]["test"]:
        print(os.path.dirname(m["manifest_path"]) + "\t" + m["executable"])
' >"$bins"
status=0
while IFS=$'\t' read -r dir exe; do
  echo "== $(basename "$exe")"
  # One test at a time: llama.cpp's CPU threads spin while they wait, so two tests of 2 threads
  # each on 2 cores slow each other far more than 2x (HellaSwag's first 100 tasks: 74 s alone,
  # 304 s beside the CPU-variant test).
  # The integration tests' recorded llama.cpp figures are for one CPU variant (its kernels
  # differ in the last digits from the host's best): their whole process is pinned to it
  # (tests/it/common TEST_CPU_VARIANT). llama-runtime's own tests load the host's best.
  case "$dir" in */crates/quantgate) pin=haswell ;; *) pin="" ;; esac
  (cd "$dir" && QUANTGATE_CPU_VARIANT="$pin" RUSTC_BOOTSTRAP=1 "$exe" --test-threads=1 -Zunstable-options --report-time) \
    2>&1 | tee -a "$log" || status=1
done <"$bins"
echo "disk: least free in $scratch while the tests ran: $(cat "$least") GB"
echo "tests: $(grep -cE '^test .* \.\.\. ok' "$log") passed, $(grep -cE '^test .* \.\.\. FAILED' "$log") failed"
echo "10 slowest tests (s):"
sed -nE 's/^test (.*) \.\.\. [a-zA-Z]+ <([0-9.]+)s>$/\2 \1/p' "$log" | sort -rn | awk 'NR <= 10'  # awk reads all: head would SIGPIPE sort (exit 141 under pipefail)
[ "$status" -eq 0 ] || exit "$status"
# Style last, so a formatting nit never hides test results.
cargo fmt --all -- --check
