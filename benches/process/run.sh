#!/usr/bin/env bash
# Process functions side by side, in one run: Sluice native, remote Rust and
# Python (vectorized), and LaminarDB 0.33 native and remote Rust, on the same
# running-total function and input, at 1K and 100K keys; activations per
# second and one event's round trip. Writes the tables into BENCHMARKS.md
# between the process-runtimes markers (NO_WRITE=1 only prints them).
#
#   benches/process/run.sh                 # 1,000 and 100,000 keys
#   ACTIVATIONS=500000 benches/process/run.sh 1000
#   SKIP=laminardb benches/process/run.sh  # Sluice only (or SKIP=python)
#
# LaminarDB is built from crates.io in benches/process/laminar, a crate
# outside the workspace with its own target directory (about 30 minutes in
# release the first time). The Python worker needs python3 with pyarrow and
# grpcio, ./python/sluice-worker installed, and bwrap (scripts/test.sh
# installs them).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
KEYS=("$@")
[ ${#KEYS[@]} -gt 0 ] || KEYS=(1000 100000)
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/sluice/target}
LAMINAR_TARGET=${LAMINAR_TARGET:-$HOME/.cache/sluice/laminar-target}
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT

echo "== building the Sluice side (release)" >&2
(cd "$ROOT" && cargo build --release -q -p sluice --example process_runtimes_bench)
if [[ "${SKIP:-}" != *laminardb* ]]; then
  echo "== building the LaminarDB side (release)" >&2
  (cd "$ROOT/benches/process/laminar" && CARGO_TARGET_DIR=$LAMINAR_TARGET cargo build --release -q)
fi

echo "== Sluice" >&2
"$CARGO_TARGET_DIR/release/examples/process_runtimes_bench" "${KEYS[@]}" | tee "$OUT/sluice.md" >&2
if [[ "${SKIP:-}" != *laminardb* ]]; then
  echo "== LaminarDB 0.33" >&2
  "$LAMINAR_TARGET/release/laminar-process-bench" "${KEYS[@]}" | tee "$OUT/laminar.md" >&2
else
  : > "$OUT/laminar.md"
fi

python3 - "$OUT/sluice.md" "$OUT/laminar.md" "$ROOT" "${KEYS[@]}" <<'PY'
import datetime, os, subprocess, sys
sys.path.insert(0, os.path.join(sys.argv[3], "benches"))
from markdown_section import write_section

def tables(path):
    """The file's tables: lists of lines, split at blank lines."""
    blocks, cur = [], []
    for line in open(path).read().splitlines():
        if line.strip():
            cur.append(line)
        elif cur:
            blocks.append(cur)
            cur = []
    if cur:
        blocks.append(cur)
    return blocks

sluice, laminar = tables(sys.argv[1]), tables(sys.argv[2])
merged = []
for i, block in enumerate(sluice):
    rows = block + (laminar[i][2:] if i < len(laminar) else [])
    merged.append("\n".join(rows))
commit = subprocess.run(["git", "-C", sys.argv[3], "rev-parse", "--short", "HEAD"],
                        capture_output=True, text=True).stdout.strip()
stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
text = f"Run {stamp} at {commit} with `benches/process/run.sh {' '.join(sys.argv[4:]) if len(sys.argv) > 4 else ''}`".rstrip() + ":\n\n" + "\n\n".join(merged)
print(text)
if not os.environ.get("NO_WRITE"):
    write_section(os.path.join(sys.argv[3], "BENCHMARKS.md"), "process-runtimes", text)
PY
