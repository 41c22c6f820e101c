#!/usr/bin/env bash
# Checkpoint duration and recovery time against state size, and the
# throughput cost of a 1 s checkpoint interval. Release build.
# Usage: benches/checkpoint.sh [SIZE_MB ...]   (default: 10 100 1000)
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/sluice/target}"
sizes=("$@")
[ ${#sizes[@]} -gt 0 ] || sizes=(10 100 1000)
cargo run --release -q -p sluice --example checkpoint_bench -- "${sizes[@]}"
