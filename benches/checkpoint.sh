#!/usr/bin/env bash
# Checkpoint cost against state size: checkpoint duration, recovery time,
# and what checkpoints cost the rows flowing through (probe latency p50/p99,
# the longest compute-thread stall, throughput with checkpoints every 1 s
# against none). Release build.
# Usage: benches/checkpoint.sh [SIZE_MB ...]   (default: 100 1000)
#   CHECKPOINT_BENCH=pause      only the pause/latency/throughput table
#   PAUSE_SECS=N                length of each probe and full-speed phase (15)
#   CHECKPOINT_BENCH_EVENTS=N   also the throughput table over N events
#   CHECKPOINT_BENCH=throughput only that table; CHECKPOINT_BENCH_INTERVAL its interval (1s)
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/sluice/target}"
sizes=("$@")
[ ${#sizes[@]} -gt 0 ] || sizes=(100 1000)
cargo run --release -q -p sluice --example checkpoint_bench -- "${sizes[@]}"
