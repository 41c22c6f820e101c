#!/usr/bin/env python3
"""Throughput of two `sluice` binaries on the same Nexmark queries, in the
same run, alternating between them so that machine load hits both alike.

    benches/regression/compare.py --before OLD/sluice --after NEW/sluice
    benches/regression/compare.py ... --events 2000000 --runs 3 --queries q0,q5

Each query runs `sluice bench nexmark --query Q --events N --json` (events
generated in memory first; processing only) `--runs` times per binary and
keeps the best input rows/s of each. Used to check that a change keeps the
engine's speed (a regression check); peers are compared by benches/peers.
"""

import argparse
import json
import subprocess

DEFAULT_QUERIES = "q0,q1,q2,q5,q7,q5_full,q7_full,tumble_count,q3,q4,q8"


def rows_per_sec(sluice, query, events):
    out = subprocess.run(
        [sluice, "bench", "nexmark", "--query", query, "--events", str(events), "--json"],
        check=True, capture_output=True, text=True).stdout
    return float(json.loads(out)["processing"]["rows_per_sec"])


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--before", required=True)
    p.add_argument("--after", required=True)
    p.add_argument("--events", type=int, default=2_000_000)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--queries", default=DEFAULT_QUERIES)
    a = p.parse_args()
    print("| query | before (M rows/s) | after (M rows/s) | after / before |")
    print("|---|---:|---:|---:|")
    for q in a.queries.split(","):
        best = {"before": 0.0, "after": 0.0}
        for _ in range(a.runs):
            for side in ("before", "after"):
                best[side] = max(best[side], rows_per_sec(getattr(a, side), q, a.events))
        ratio = best["after"] / best["before"] if best["before"] else float("nan")
        print(f"| {q} | {best['before'] / 1e6:.2f} | {best['after'] / 1e6:.2f} | {ratio:.2f} |",
              flush=True)


if __name__ == "__main__":
    main()
