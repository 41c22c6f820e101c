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

echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy"
cargo clippy --workspace --all-targets --locked -- -D warnings
echo "== cargo test"
cargo test --workspace --locked
echo "== benchmark smoke (tiny event counts, no peers)"
bash benches/smoke.sh
