#!/usr/bin/env python3
"""Run every Nexmark query through the release `sluice` binary and write the
tables into BENCHMARKS.md (between the nexmark markers).

    benches/nexmark/run.sh            # builds, then runs this

* throughput: `sluice bench nexmark --query Q --events EVENTS --json`
  (generation excluded, processing only, one subscriber);
* latency: the same at RATE rows/s (`--rate`), push-to-subscriber;
* memory: peak RSS of `sluice run` on q5, q7_full and q4 reading the
  Nexmark connector directly (no input held in memory) for MEMORY_EVENTS
  (default 5,000,000, by when q7_full's join state has filled) and
  10 x MEMORY_EVENTS events;
* q3, q4 and q8 read two Nexmark streams: `sluice bench nexmark` generates
  both and pushes them merged in event-time order; they have no latency
  run (an output row of a join has an input row on each side).
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

QUERIES = ["q0", "q1", "q2", "q5", "q7", "q5_full", "q7_full", "tumble_count"]
JOIN_QUERIES = ["q3", "q4", "q8"]
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
    for q in ["q5", "q7_full", "q4"]:
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
        "Memory over a longer stream: peak RSS of `sluice run benches/nexmark/Q.sql` "
        "(the Nexmark connector generating on the fly, nothing held in memory but state; "
        "q7_full's join forgets bids and window maxima as the watermark passes them; q4 keeps "
        "one group per auction for its highest bid). The shorter run is long enough for "
        "the state to have filled (at 2 M events q7_full's join state is still growing):",
        "",
        "| query | events | peak RSS | wall time |",
        "|---|---:|---:|---:|",
    ]
    for q, small, large in memory:
        for m in (small, large):
            lines.append(f"| {q} | {m['events']:,} | {m['peak_mib']:.0f} MiB | {m['secs']:.1f} s |")
    text = "\n".join(lines)
    print(text)
    if args.markdown_into:
        write_section(args.markdown_into, "nexmark", text)


if __name__ == "__main__":
    main()
