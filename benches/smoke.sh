#!/usr/bin/env bash
# Benchmark smoke test for CI: every Nexmark query for 2,000 events through
# `sluice bench` (debug build), a paced run, the CSV writer, the live-groups
# memory workload, the process-runtimes benchmark, the query tests
# (each query against its DataFusion oracle), the Nexmark connector's tests,
# and one pass of every criterion micro-benchmark. No peers. Well under a
# minute once the debug build is cached.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/sluice/target}
# Every cargo command here selects the whole workspace with its dev
# targets, as `cargo test --workspace` does: the features of every
# dependency then resolve as in that build, and nothing is compiled again
# after it. A command of one package (`-p`) resolves them for that package
# alone and rebuilt DataFusion and the engine once per such command (three
# times, about ten minutes of a cold CI run).
cargo build -q --locked --workspace --bins --examples
SLUICE=$CARGO_TARGET_DIR/debug/sluice
for q in q0 q1 q2 q3 q4 q5 q7 q8 q5_full q7_full tumble_count; do
  "$SLUICE" bench nexmark --query "$q" --events 2000 --json > /dev/null
done
"$SLUICE" bench nexmark --query q5 --events 2000 --rate 20000 > /dev/null
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
"$SLUICE" bench csv --events 2000 --out "$TMP/bids.csv" > /dev/null
test "$(wc -l < "$TMP/bids.csv")" -eq 1841
# The live-groups workload: 12 slides over 1,000 keys close 16 windows.
"$SLUICE" bench groups --keys 1000 --slides 12 --json > "$TMP/groups.json"
grep -q '"output_rows": 16000' "$TMP/groups.json"
grep -q '"expected_output_rows": 16000' "$TMP/groups.json"
cargo test -q --locked --workspace --lib nexmark
cargo test -q --locked --workspace --test nexmark_queries --test nexmark_source
# One iteration of each micro-benchmark, in the test profile.
cargo test -q --locked --workspace --benches
# The process-runtimes benchmark (native, remote Rust, Python) on a few
# thousand activations: every runtime gives a rate and a round trip
# (built above with the other examples).
ACTIVATIONS=3000 LATENCY_ROUNDS=5 "$CARGO_TARGET_DIR/debug/examples/process_runtimes_bench" 100 > "$TMP/process.md"
test "$(grep -c '^| Sluice |' "$TMP/process.md")" -eq 6
echo "bench smoke: ok"
