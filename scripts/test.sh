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

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
apt_updated=
apt_install() {
    if [ -z "$apt_updated" ]; then as_root apt-get update -qq; apt_updated=1; fi
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

echo "== cluster: etcd and protoc"
# sluice-cluster's tests start a real etcd on loopback and fail without it;
# its etcd client (etcd-client) compiles etcd's .proto files with protoc.
if ! command -v etcd >/dev/null 2>&1; then
    apt_install etcd-server
fi
if [ -z "${PROTOC:-}" ] && ! command -v protoc >/dev/null 2>&1; then
    apt_install protobuf-compiler
fi

echo "== shared state: an S3-compatible server (moto) for the cluster tests"
# `sluice run --cluster` tests keep checkpoints on S3 through a real
# S3-compatible server on loopback; they fail without `moto_server`.
python_for_moto="${SLUICE_PYTHON:-python3}"
if ! command -v moto_server >/dev/null 2>&1 && [ -z "${SLUICE_MOTO:-}" ]; then
    "$python_for_moto" -m pip install -q --disable-pip-version-check --root-user-action=ignore 'moto[server]'
    hash -r
fi

echo "== python workers: bubblewrap and the sluice_worker SDK"
# Python process functions run in a bubblewrap sandbox, with the SDK
# installed for the interpreter the tests use (python3, or SLUICE_PYTHON).
# The tests fail without them, so install them here.
if ! command -v bwrap >/dev/null 2>&1; then
    apt_install bubblewrap
fi
python="${SLUICE_PYTHON:-python3}"
# The stub generator is pinned: each grpcio-tools release stamps its own
# version into the stubs, so an unpinned one breaks the check below on the
# day a new release appears (1.85.4 did).
"$python" -m pip install -q --disable-pip-version-check --root-user-action=ignore \
    'grpcio-tools==1.85.1' ./python/sluice-worker
# The committed protocol stubs must be what the .proto generates.
stubs=$(mktemp -d)
cp -r python/sluice-worker "$stubs/sdk"
mkdir -p "$stubs/crates/sluice-remote" && cp -r crates/sluice-remote/proto "$stubs/crates/sluice-remote/"
mkdir -p "$stubs/python" && mv "$stubs/sdk" "$stubs/python/sluice-worker"
(cd "$stubs/python/sluice-worker" && bash generate.sh)
diff -r python/sluice-worker/sluice_worker/_proto "$stubs/python/sluice-worker/sluice_worker/_proto" \
    -x __pycache__ || { echo "error: python/sluice-worker stubs are stale; run python/sluice-worker/generate.sh" >&2; exit 1; }
rm -rf "$stubs"

echo "== import cycles between modules"
python3 scripts/test_check_module_cycles.py
python3 scripts/check_module_cycles.py
echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy"
cargo clippy --workspace --all-targets --locked -- -D warnings
echo "== cargo test"
cargo test --workspace --locked
echo "== loom: every interleaving of the thread handshakes (crates/sluice-sync)"
# Its own target directory: --cfg loom would otherwise invalidate the
# workspace build above. Only sluice-sync and loom compile (under a minute).
RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR="$CARGO_TARGET_DIR/loom" \
    cargo test -p sluice-sync --release --locked --test loom
echo "== benchmark smoke (tiny event counts, no peers)"
bash benches/smoke.sh
