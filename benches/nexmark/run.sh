#!/usr/bin/env bash
# Nexmark suite on Sluice alone: throughput, latency at a fixed rate, and
# memory over a 10x longer stream; writes the tables into BENCHMARKS.md.
#
#   benches/nexmark/run.sh                    # 2,000,000 events, 100,000 rows/s
#   EVENTS=10000000 RATE=100000 benches/nexmark/run.sh
#   NO_WRITE=1 benches/nexmark/run.sh         # print only
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/sluice/target}
(cd "$ROOT" && cargo build --release -p sluice-cli)
ARGS=(--sluice "$CARGO_TARGET_DIR/release/sluice" --root "$ROOT"
      --events "${EVENTS:-2000000}" --rate "${RATE:-100000}"
      --memory-events "${MEMORY_EVENTS:-5000000}")
[ -n "${NO_WRITE:-}" ] || ARGS+=(--markdown-into "$ROOT/BENCHMARKS.md")
python3 "$ROOT/benches/nexmark/report.py" "${ARGS[@]}"
