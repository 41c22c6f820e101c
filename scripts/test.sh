#!/usr/bin/env bash
# The whole test suite: formatting, lints, unit, integration, differential
# and end-to-end tests. Safe to run on a fresh machine with Rust installed.
set -euo pipefail
cd "$(dirname "$0")/.."

# Build artifacts live outside the clone so repeated runs (and fresh clones)
# reuse them.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/sluice/target}"
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"

if ! command -v cargo >/dev/null 2>&1; then
    echo "error: cargo not found; install Rust 1.95 (https://rustup.rs)" >&2
    exit 1
fi
for component in rustfmt clippy; do
    if ! cargo "${component/rustfmt/fmt}" --version >/dev/null 2>&1; then
        rustup component add "$component"
    fi
done

# The shared cache grows with every rebuilt test binary; when the disk runs
# low, drop what cargo can regenerate cheaply (incremental state) rather than
# fail at link time.
mkdir -p "$CARGO_TARGET_DIR"
free_kb=$(df -Pk "$CARGO_TARGET_DIR" | awk 'NR == 2 {print $4}')
if [ "${free_kb:-0}" -lt $((8 * 1024 * 1024)) ]; then
    echo "== low disk space ($((free_kb / 1024)) MiB free): removing incremental build state"
    rm -rf "$CARGO_TARGET_DIR"/*/incremental
fi

echo "== import cycles between modules"
python3 scripts/test_check_module_cycles.py
python3 scripts/check_module_cycles.py
echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy"
cargo clippy --workspace --all-targets --locked -- -D warnings
echo "== cargo test"
cargo test --workspace --locked
echo "== benchmark smoke (tiny event counts, no peers)"
bash benches/smoke.sh
