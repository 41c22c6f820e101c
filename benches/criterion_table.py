#!/usr/bin/env python3
"""Summarize criterion results ($CARGO_TARGET_DIR/criterion) as a Markdown
table, optionally written into BENCHMARKS.md between the micro markers.

    cargo bench -p sluice-bench && python3 benches/criterion_table.py --markdown-into BENCHMARKS.md
"""

import argparse
import json
import os
import time
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__))))
from markdown_section import write_section  # noqa: E402


def rows(criterion_dir):
    out = []
    for dirpath, _, files in os.walk(criterion_dir):
        if os.path.basename(dirpath) != "new" or "estimates.json" not in files:
            continue
        with open(os.path.join(dirpath, "benchmark.json")) as f:
            meta = json.load(f)
        with open(os.path.join(dirpath, "estimates.json")) as f:
            est = json.load(f)
        ns = est["mean"]["point_estimate"]
        lo = est["mean"]["confidence_interval"]["lower_bound"]
        hi = est["mean"]["confidence_interval"]["upper_bound"]
        elements = (meta.get("throughput") or {}).get("Elements")
        out.append((meta["full_id"], ns, lo, hi, elements))
    return sorted(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--criterion-dir", default=os.path.join(
        os.environ.get("CARGO_TARGET_DIR", os.path.expanduser("~/.cache/sluice/target")), "criterion"))
    ap.add_argument("--markdown-into")
    args = ap.parse_args()
    lines = [f"Collected {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} from "
             f"`{args.criterion_dir}` (mean, 95% interval; 8,192-row batches).", "",
             "| benchmark | time per batch | rows/s |", "|---|---:|---:|"]
    for name, ns, lo, hi, elements in rows(args.criterion_dir):
        per = f"{ns / 1000:,.1f} us ({lo / 1000:,.1f} to {hi / 1000:,.1f})"
        rate = f"{elements / (ns / 1e9):,.0f}" if elements else "n/a"
        lines.append(f"| {name} | {per} | {rate} |")
    text = "\n".join(lines)
    print(text)
    if args.markdown_into:
        write_section(args.markdown_into, "micro", text)


if __name__ == "__main__":
    main()
