#!/usr/bin/env bash
# Side-by-side benchmark: Sluice vs LaminarDB 0.33 (crates.io `laminar-db`,
# driven by the Rust binary in benches/peers/laminardb-rs) vs Apache Flink
# (PyPI `apache-flink`) on the same generated Nexmark bids, in one run.
#
#   benches/peers/run.sh                 # 2,000,000 events, all peers
#   EVENTS=500000 benches/peers/run.sh   # smaller
#   SKIP=flink benches/peers/run.sh      # only LaminarDB (or SKIP=laminardb)
#   NO_WRITE=1 benches/peers/run.sh      # print the tables, leave BENCHMARKS.md alone
#   REPEAT=2 benches/peers/run.sh        # runs per query and engine from CSV (default 3)
#   ONLY=q9,q15 NO_WRITE=1 benches/peers/run.sh  # only these queries (tables not written)
#   SLUICE=/path/to/sluice NO_WRITE=1 benches/peers/run.sh  # measure that binary, no build
#
# Builds the release `sluice` binary and the LaminarDB driver (its own crate
# and lock file outside the workspace, target dir $LAMINAR_TARGET, default
# ~/.cache/sluice/laminardb-target; about 30 minutes the first time on 2
# cores; the CARGO_PROFILE_* overrides given for Sluice's build are not
# passed on, so they never force a rebuild of it), installs Flink into a virtualenv ($PEERS_VENV, default
# ~/.cache/sluice/peers-venv) if missing, writes the bids CSV once (reused
# while the parameters are the same), runs every query on every engine,
# prints the tables and writes them into BENCHMARKS.md between the peers
# markers. Needs Python >= 3.11 and, for Flink, Java 11 or 17.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
EVENTS=${EVENTS:-2000000}
DISORDER=${DISORDER:-2000}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/sluice/target}
VENV=${PEERS_VENV:-$HOME/.cache/sluice/peers-venv}
WORK=${PEERS_WORK:-$HOME/.cache/sluice/peers}
mkdir -p "$WORK"

if [ -n "${SLUICE:-}" ]; then
  # A saved binary (e.g. the build before a change): measured as it is.
  [ -x "$SLUICE" ] || { echo "error: SLUICE=$SLUICE is not an executable" >&2; exit 1; }
  echo "== using $SLUICE (not rebuilt)" >&2
else
  echo "== building sluice (release)" >&2
  (cd "$ROOT" && cargo build --release -p sluice-cli)
  SLUICE=$CARGO_TARGET_DIR/release/sluice
fi

LAMINAR_TARGET=${LAMINAR_TARGET:-$HOME/.cache/sluice/laminardb-target}
if [[ "${SKIP:-}" != *laminardb* ]]; then
  echo "== building benches/peers/laminardb-rs (release, LaminarDB 0.33)" >&2
  (cd "$ROOT/benches/peers/laminardb-rs" &&
    env $(env | sed -n 's/^\(CARGO_PROFILE_[A-Z_]*\)=.*/-u \1/p') \
      CARGO_TARGET_DIR=$LAMINAR_TARGET nice -n 10 cargo build --release --locked)
fi

echo "== python environment $VENV" >&2
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
if [[ "${SKIP:-}" != *flink* ]]; then
  "$VENV/bin/python" -c "import pyflink" 2>/dev/null || "$VENV/bin/pip" install -q apache-flink
fi

CSV=$WORK/bids-$EVENTS-$DISORDER.csv
if [ ! -s "$CSV" ]; then
  echo "== writing $CSV" >&2
  "$SLUICE" bench csv --stream bid --events "$EVENTS" --out-of-order-ms "$DISORDER" --seed 0 --out "$CSV.tmp" >&2
  mv "$CSV.tmp" "$CSV"
fi
# The join queries also read the person and auction streams of the same run.
for STREAM in person auction; do
  F=$WORK/$STREAM-$EVENTS-$DISORDER.csv
  if [ ! -s "$F" ]; then
    echo "== writing $F" >&2
    "$SLUICE" bench csv --stream "$STREAM" --events "$EVENTS" --out-of-order-ms "$DISORDER" --seed 0 --out "$F.tmp" >&2
    mv "$F.tmp" "$F"
  fi
done
PERSON=$WORK/person-$EVENTS-$DISORDER.csv
AUCTION=$WORK/auction-$EVENTS-$DISORDER.csv
# Flink's csv format reads no header line.
HEADERLESS=$WORK/bids-$EVENTS-$DISORDER.noheader.csv
[ -s "$HEADERLESS" ] || tail -n +2 "$CSV" > "$HEADERLESS"
[ -s "$PERSON.noheader" ] || tail -n +2 "$PERSON" > "$PERSON.noheader"
[ -s "$AUCTION.noheader" ] || tail -n +2 "$AUCTION" > "$AUCTION.noheader"

ARGS=(--sluice "$SLUICE" --root "$ROOT" --csv "$CSV" --headerless-csv "$HEADERLESS"
      --person-csv "$PERSON" --auction-csv "$AUCTION"
      --headerless-person-csv "$PERSON.noheader" --headerless-auction-csv "$AUCTION.noheader"
      --events "$EVENTS" --disorder "$DISORDER" --json-out "$WORK/peers.json"
      --repeat "${REPEAT:-3}")
if [[ "${SKIP:-}" == *laminardb* ]]; then
  ARGS+=(--skip laminardb)
else
  ARGS+=(--laminardb "$LAMINAR_TARGET/release/laminardb-bench")
fi
[[ "${SKIP:-}" == *flink* ]] && ARGS+=(--skip flink)
[ -n "${NO_WRITE:-}" ] || ARGS+=(--markdown-into "$ROOT/BENCHMARKS.md")
[ -z "${ONLY:-}" ] || ARGS+=(--only "$ONLY")
"$VENV/bin/python" "$ROOT/benches/peers/peers.py" "${ARGS[@]}"
