#!/usr/bin/env python3
"""Run every Nexmark query through the release `sluice` binary and write the
tables into BENCHMARKS.md (between the nexmark markers).

    benches/nexmark/run.sh            # builds, then runs this

* throughput: `sluice bench nexmark --query Q --events EVENTS --json`
  (generation excluded, processing only, one subscriber);
* latency: the same at RATE rows/s (`--rate`), push-to-subscriber;
* memory: peak RSS of `sluice run` on every query, reading the Nexmark
  connector directly (no input held in memory) for MEMORY_EVENTS
  (default 5,000,000) and 10 x MEMORY_EVENTS events: a query whose state
  the watermark bounds peaks at about the same RSS in both;
* the two-stream queries (q3, q4, q6, q8, q9, q13, q20): `sluice bench
  nexmark` generates both streams and pushes them merged in event-time
  order; they have no latency run (an output row of a join has an input
  row on each side).
"""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from markdown_section import write_section  # noqa: E402

# Every query file under benches/nexmark/ (the list `sluice bench nexmark`
# embeds, crates/sluice-bench/src/queries.rs).
QUERIES = ["q0", "q1", "q2", "q5", "q7", "q5_full", "q7_full", "q10", "q11", "q12",
           "q14", "q15", "q16", "q17", "q18", "q19", "q21", "q22", "tumble_count"]
JOIN_QUERIES = ["q3", "q4", "q6", "q8", "q9", "q13", "q20"]
# Queries whose output rows are attributed to input rows for latency. The
# join outputs (q5_full, q7_full and the two-stream queries) are left out: a
# joined row waits for the other side (q7_full's bids wait for their window
# to close), so push-to-delivery would measure the window, not the engine.
LATENCY_QUERIES = ["q0", "q1", "q2", "q5", "q7", "tumble_count"]


def bench(sluice, args):
    out = subprocess.run([sluice, "bench", "nexmark", *args, "--json"], check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out)


def run_peak_rss(sluice, root, query, events):
    """Peak RSS of one `sluice run` of `query` with `events` events."""
    with open(os.path.join(root, "benches", "nexmark", f"{query}.sql")) as f:
        text = f.read()
    text, n = re.subn(r"events = '\d+'", f"events = '{events}'", text)
    assert n >= 1, f"{query}.sql: no events option"
    with tempfile.TemporaryDirectory() as tmp:
        script = os.path.join(tmp, "q.sql")
        with open(script, "w") as f:
            f.write(text)
        with open(os.path.join(tmp, "out"), "w+") as out:
            started = time.perf_counter()
            child = subprocess.Popen([sluice, "run", script], stdout=out, stderr=out)
            _, status, usage = os.wait4(child.pid, 0)
            secs = time.perf_counter() - started
            child.returncode = os.waitstatus_to_exitcode(status)
            out.seek(0)
            printed = out.read()
    if child.returncode != 0:
        raise RuntimeError(f"sluice run failed: {printed}")
    # ru_maxrss is in KiB on Linux.
    return {"events": events, "peak_mib": usage.ru_maxrss / 1024, "secs": secs,
            "summary": printed.strip().splitlines()[-1]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sluice", required=True)
    ap.add_argument("--root", required=True)
    ap.add_argument("--events", type=int, default=2_000_000)
    ap.add_argument("--rate", type=int, default=100_000)
    ap.add_argument("--latency-events", type=int, default=1_000_000)
    ap.add_argument("--memory-events", type=int, default=5_000_000,
                    help="stream length of the memory runs (and 10x that)")
    ap.add_argument("--markdown-into")
    args = ap.parse_args()

    rows = []
    for q in QUERIES + JOIN_QUERIES:
        print(f"throughput {q}", file=sys.stderr, flush=True)
        t = bench(args.sluice, ["--query", q, "--events", str(args.events)])
        lat = None
        if q in LATENCY_QUERIES:
            print(f"latency {q}", file=sys.stderr, flush=True)
            lat = bench(args.sluice, ["--query", q, "--events", str(args.latency_events),
                                      "--rate", str(args.rate)])
        rows.append((q, t, lat))

    memory = []
    for q in QUERIES + JOIN_QUERIES:
        print(f"memory {q} (sluice run)", file=sys.stderr, flush=True)
        memory.append((q, run_peak_rss(args.sluice, args.root, q, args.memory_events),
                       run_peak_rss(args.sluice, args.root, q, args.memory_events * 10)))

    t0 = rows[0][1]
    lines = [
        f"Measured {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {t0['build']} build, "
        f"{t0['machine']['cpus']} CPUs ({t0['machine']['cpu_model']}), load average "
        f"{os.getloadavg()[0]:.1f} at the end; seed 0, "
        f"{t0['out_of_order_ms']} ms disorder, batches of {t0['batch_size']} rows.",
        "",
        f"Throughput: {args.events:,} generator events ({t0['input_rows']:,} bids) generated "
        "in memory first, then pushed; input rows/s of processing only, until the last window "
        "closed and the subscriber had every output row. q3, q4 and q8 read two streams, "
        "generated separately and pushed merged in event-time order; q4's output is a "
        "changelog (its rows include retractions).",
        "",
        "| query | streams | input rows | generation rows/s (excluded) | processing rows/s | output rows | peak RSS (input included) |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for q, t, _ in rows:
        lines.append(
            f"| {q} | {t['stream']} | {t['input_rows']:,} | {t['generation']['rows_per_sec']:,.0f} | "
            f"{t['processing']['rows_per_sec']:,.0f} | "
            f"{t['output_rows']:,} | {t['memory']['peak_rss_mib']:.0f} MiB |")
    lines += [
        "",
        f"Latency: {args.latency_events:,} events pushed at {args.rate:,} rows/s in batches of "
        f"{rows[0][2]['batch_size']} rows; push to subscriber delivery, per output row.",
        "",
        "| query | p50 | p99 | p99.9 | max | rows measured |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for q, _, lat in rows:
        if lat is None:
            continue
        l = (lat.get("rate") or {}).get("latency")
        if not l:
            lines.append(f"| {q} | n/a | n/a | n/a | n/a | 0 |")
            continue
        lines.append(
            f"| {q} | {l['p50_us']:,.0f} us | {l['p99_us']:,.0f} us | {l['p999_us']:,.0f} us | "
            f"{l['max_us']:,.0f} us | {l['samples']:,} |")
    lines += [
        "",
        "Memory over a 10x longer stream: peak RSS of `sluice run benches/nexmark/Q.sql` "
        "(the Nexmark connector generating on the fly, nothing held in memory but state). "
        "Where the watermark bounds a query's state (its EXPLAIN says so, and "
        "`crates/sluice-bench/tests/nexmark_queries.rs` pins each plan's bound) the two "
        "peaks are about equal; where EXPLAIN says the state grows with distinct keys "
        "(never freed), the ratio shows how fast:",
        "",
        f"| query | peak RSS, {args.memory_events:,} events | wall time | "
        f"peak RSS, {args.memory_events * 10:,} events | wall time | 10x / 1x |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for q, small, large in memory:
        lines.append(
            f"| {q} | {small['peak_mib']:.0f} MiB | {small['secs']:.1f} s | "
            f"{large['peak_mib']:.0f} MiB | {large['secs']:.1f} s | "
            f"{large['peak_mib'] / small['peak_mib']:.2f} |")
    text = "\n".join(lines)
    print(text)
    if args.markdown_into:
        write_section(args.markdown_into, "nexmark", text)


if __name__ == "__main__":
    main()
