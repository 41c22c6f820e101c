#!/usr/bin/env python3
"""Cluster benchmark: Nexmark q5 and q7 through `sluice run --cluster` on 1,
2 and 3 local nodes, active-standby (the leader runs the pipeline) and as a
shuffled split (`--split` with `--shuffle`: each node generates its share
of the Nexmark partitions and every row crosses to its key's owner),
against the same query on a single node without a cluster, plus the
failover time when the leader is killed mid-run (and, on a shuffled split,
when a node is killed for good and the others go on without it after
`--failover-after`). A split row's *shuffle
bytes* are the Arrow IPC frames (and watermarks and barriers) every node
sent to the others, from each node's summary.

All nodes run on this machine, so the figures are per-core efficiency (events
per CPU second of every node together), the etcd control-plane bytes per
event (etcd's own gRPC byte counters, all nodes together; no data crosses
between nodes in active-standby), and failover: from the leader's SIGKILL to
the first progress report of the node that took over. Checkpoint duration
is from the attempt's start to its durable commit (on a cluster: etcd
admission, Prepare, the leader's ack and the commit decision included), read
from the engine's debug log line for each committed checkpoint.

    benches/cluster/cluster_bench.py --sluice target/release/sluice \
        [--events 2000000] [--write BENCHMARKS.md]

Needs `etcd` on PATH (Debian's etcd-server).
"""

import argparse
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "benches"))
from markdown_section import write_section  # noqa: E402

SUMMARY = re.compile(
    r"sluice: (\d+) rows in, (\d+) rows out, \d+ late rows dropped, ([\d.]+)s, ([\d.]+)s CPU")
SHUFFLE = re.compile(r"sluice: shuffle: \d+ rows kept, \d+ rows sent \((\d+) bytes\)")
COMMITTED = re.compile(r"checkpoint committed.*duration_ms=(\d+)")
# Only the line of each committed checkpoint, besides warnings.
LOG_ENV = dict(os.environ, RUST_LOG="warn,sluice_engine::coordinator::checkpointing=debug")


def durations(text):
    """Milliseconds of every committed checkpoint in a log."""
    return [int(m.group(1)) for m in COMMITTED.finditer(text)]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Etcd:
    def __init__(self, work):
        self.client = free_port()
        peer = free_port()
        self.endpoint = f"http://127.0.0.1:{self.client}"
        self.log = open(os.path.join(work, "etcd.log"), "w")
        self.proc = subprocess.Popen(
            ["etcd", "--name=bench", f"--data-dir={work}/etcd",
             f"--listen-client-urls={self.endpoint}",
             f"--advertise-client-urls={self.endpoint}",
             f"--listen-peer-urls=http://127.0.0.1:{peer}",
             f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
             f"--initial-cluster=bench=http://127.0.0.1:{peer}",
             "--heartbeat-interval=50", "--election-timeout=500"],
            stdout=self.log, stderr=self.log)
        deadline = time.time() + 30
        while True:
            try:
                urllib.request.urlopen(self.endpoint + "/health", timeout=1).read()
                return
            except OSError:
                if time.time() > deadline:
                    raise RuntimeError("etcd did not start")
                time.sleep(0.1)

    def grpc_bytes(self):
        """Bytes etcd received plus sent over client gRPC so far."""
        text = urllib.request.urlopen(self.endpoint + "/metrics", timeout=5).read().decode()
        total = 0.0
        for line in text.splitlines():
            if line.startswith(("etcd_network_client_grpc_received_bytes_total",
                                "etcd_network_client_grpc_sent_bytes_total")):
                total += float(line.split()[-1])
        return total

    def stop(self):
        self.proc.terminate()
        self.proc.wait()
        self.log.close()


def query_sql(query, events, rate=None):
    with open(os.path.join(ROOT, "benches", "nexmark", f"{query}.sql")) as f:
        text = f.read()
    paced = f", rate = '{rate}'" if rate else ""
    text = re.sub(r"events = '\d+'", f"events = '{events}'{paced}", text)
    return text + (f"\nCREATE SINK out FROM {query} "
                   f"WITH (connector = 'file', path = 'out/{query}.csv');\n")


def cpu_of(pid):
    """User + system CPU seconds of a live process."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / tick


def run_single(sluice, work, query, events, rate=None):
    d = tempfile.mkdtemp(dir=work)
    with open(os.path.join(d, "pipeline.sql"), "w") as f:
        f.write(query_sql(query, events, rate))
    out = subprocess.run(
        [sluice, "run", "--state", f"file://{d}/state", "--set", "delivery=exactly_once",
         "--set", "checkpoint_interval=1s", "pipeline.sql"],
        cwd=d, capture_output=True, text=True, check=True, env=LOG_ENV)
    m = SUMMARY.search(out.stdout)
    return {"wall": float(m.group(3)), "cpu": float(m.group(4)),
            "checkpoints": durations(out.stderr),
            "output": open(os.path.join(d, "out", f"{query}.csv")).read()}


def start_node(sluice, d, etcd, cluster, node):
    log = open(os.path.join(d, f"{node}.out"), "w")
    proc = subprocess.Popen(
        [sluice, "run", "--cluster", f"etcd={etcd.endpoint}", "--cluster-id", cluster,
         "--node-id", node, "--lease-ttl", "1s", "--state", f"file://{d}/state",
         "--set", "checkpoint_interval=1s", "pipeline.sql"],
        cwd=d, stdout=log, stderr=subprocess.STDOUT, env=LOG_ENV)
    return proc, log


def status(sluice, etcd, cluster):
    return subprocess.run(
        [sluice, "cluster", "status", "--cluster", f"etcd={etcd.endpoint}",
         "--cluster-id", cluster], capture_output=True, text=True).stdout


def leader_rows(text):
    """(leader node, rows_in it reported) from `sluice cluster status`."""
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) >= 6 and cells[1] == "leader":
            return cells[0], int(cells[5]) if cells[5] else None
    return None, None


def run_cluster(sluice, work, etcd, query, events, nodes, kill_at=None, rate=None):
    d = tempfile.mkdtemp(dir=work)
    with open(os.path.join(d, "pipeline.sql"), "w") as f:
        f.write(query_sql(query, events, rate))
    cluster = os.path.basename(d).replace("_", "-")
    before = etcd.grpc_bytes()
    started = time.time()
    procs = {f"n{i + 1}": start_node(sluice, d, etcd, cluster, f"n{i + 1}")
             for i in range(nodes)}
    cpu = {}

    def sample():
        for name, (p, _) in procs.items():
            if p.poll() is None:
                try:
                    cpu[name] = cpu_of(p.pid)
                except OSError:
                    pass

    failover = None
    if kill_at is not None:
        # Kill the leader once it reported `kill_at` of the events, then
        # time until another node reports progress.
        victim = None
        while victim is None:
            leader, rows = leader_rows(status(sluice, etcd, cluster))
            if leader and rows is not None and rows >= kill_at * events:
                victim = leader
            if all(p.poll() is not None for p, _ in procs.values()):
                raise RuntimeError("the run ended before the kill")
            sample()
            time.sleep(0.05)
        killed = time.time()
        sample()
        procs[victim][0].send_signal(signal.SIGKILL)
        procs[victim][0].wait()
        procs[victim][1].close()
        while True:
            leader, rows = leader_rows(status(sluice, etcd, cluster))
            if leader and leader != victim and rows is not None:
                failover = time.time() - killed
                break
            time.sleep(0.02)
        del procs[victim]
    while any(p.poll() is None for p, _ in procs.values()):
        sample()
        time.sleep(0.05)
    wall = time.time() - started
    checkpoints = []
    for name, (p, log) in procs.items():
        log.close()
        if p.returncode != 0:
            raise RuntimeError(f"node {name} failed: {open(log.name).read()}")
    for name in sorted(os.listdir(d)):
        if name.endswith(".out"):
            checkpoints += durations(open(os.path.join(d, name)).read())
    return {"wall": wall, "cpu": sum(cpu.values()), "checkpoints": checkpoints,
            "control_bytes": etcd.grpc_bytes() - before,
            "failover": failover,
            "output": open(os.path.join(d, "out", f"{query}.csv")).read()}


RESTARTED = re.compile(
    r"^(\S+Z) .*starting again with the new list", re.MULTILINE)


def log_time(stamp):
    """Seconds since the epoch of a log line's RFC 3339 UTC timestamp."""
    from datetime import datetime
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def run_split(sluice, work, etcd, query, events, nodes, rate=None, fail=None):
    """The query on a shuffled split of `nodes` processes (`--split` with
    `--shuffle`): each generates its share of the Nexmark partitions and
    every row crosses to its key's vnode owner; one checkpoint cut across
    all of them under n1. Returns the summary figures and the union of the
    nodes' outputs (sorted rows, header first).

    With `fail` = (seconds, node, failover_after): every node runs with
    `--failover-after`, `node` is SIGKILLed `seconds` after the start and
    not restarted until the others ended; *failover* is from the kill to
    the last survivor's start with the list without it. The killed node
    is then started once with its old list, as a dropped node, to publish
    what its last committed checkpoint staged."""
    d = tempfile.mkdtemp(dir=work)
    with open(os.path.join(d, "pipeline.sql"), "w") as f:
        f.write(query_sql(query, events, rate))
    cluster = os.path.basename(d).replace("_", "-")
    members = [f"n{i + 1}" for i in range(nodes)]
    shuffle = ",".join(f"{n}=127.0.0.1:{free_port()}" for n in members)
    extra = ["--failover-after", fail[2]] if fail else []
    before = etcd.grpc_bytes()
    started = time.time()

    def start(n, tag=""):
        out = open(os.path.join(d, f"{n}{tag}.stdout"), "w")
        err = open(os.path.join(d, f"{n}{tag}.stderr"), "w")
        return (subprocess.Popen(
            [sluice, "run", "--cluster", f"etcd={etcd.endpoint}", "--cluster-id", cluster,
             "--node-id", n, "--split", ",".join(members), "--shuffle", shuffle,
             "--lease-ttl", "1s", "--state", f"file://{d}/state",
             "--set", "checkpoint_interval=1s", *extra, "pipeline.sql"],
            cwd=d, stdout=out, stderr=err, env=LOG_ENV), out, err)

    procs = {n: start(n) for n in members}
    killed = None
    if fail:
        time.sleep(max(0.0, started + fail[0] - time.time()))
        victim = procs.pop(fail[1])
        victim[0].send_signal(signal.SIGKILL)
        victim[0].wait()
        killed = time.time()
    cpu, shuffled = 0.0, 0
    restarted = []
    for n, (p, out, err) in procs.items():
        p.wait()
        out.close()
        err.close()
        text = open(out.name).read()
        if p.returncode != 0:
            raise RuntimeError(f"node {n} failed: {open(err.name).read()}")
        cpu += float(SUMMARY.search(text).group(4))
        m = SHUFFLE.search(text)
        shuffled += int(m.group(1)) if m else 0
        restarted += [log_time(t) for t in RESTARTED.findall(open(err.name).read())]
    wall = time.time() - started
    failover = None
    if fail:
        failover = max(restarted) - killed
        p, out, err = start(fail[1], ".dropped")
        p.wait()
        if p.returncode != 0:
            raise RuntimeError(f"node {fail[1]} (dropped) failed: {open(err.name).read()}")
    rows = []
    header = None
    for n in members:
        path = os.path.join(d, "out", n, f"{query}.csv")
        if os.path.exists(path):
            lines = open(path).read().splitlines()
            header, rows = lines[0], rows + lines[1:]
    return {"wall": wall, "cpu": cpu, "shuffle_bytes": shuffled,
            "checkpoints": durations(open(os.path.join(d, "n1.stderr")).read()),
            "control_bytes": etcd.grpc_bytes() - before,
            "failover": failover,
            "rows": [header] + sorted(rows)}


def sorted_rows(output):
    lines = output.splitlines()
    return lines[:1] + sorted(lines[1:])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sluice", required=True)
    ap.add_argument("--events", type=int, default=2_000_000)
    ap.add_argument("--write", help="write the table into this Markdown file")
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="sluice-cluster-bench-")
    etcd = Etcd(work)
    rows = []
    try:
        for query in ["q5", "q7"]:
            single = run_single(args.sluice, work, query, args.events)
            rows.append((query, "single node, no cluster", single, None))
            for n in (1, 2, 3):
                r = run_cluster(args.sluice, work, etcd, query, args.events, n)
                assert r["output"] == single["output"], f"{query} on {n} nodes differs"
                rows.append((query, f"cluster, {n} node{'s' if n > 1 else ''}", r, single))
            for n in (1, 2, 3):
                r = run_split(args.sluice, work, etcd, query, args.events, n)
                assert r["rows"] == sorted_rows(single["output"]), \
                    f"{query} on a shuffled split of {n} differs"
                rows.append((query, f"shuffled split, {n} node{'s' if n > 1 else ''}", r,
                             single))
            # Paced so that the run lasts about 10 s and the kill lands
            # mid-run: wall and CPU of this row are not comparable.
            rate = args.events // 10
            paced = run_single(args.sluice, work, query, args.events, rate)
            r = run_cluster(args.sluice, work, etcd, query, args.events, 2, kill_at=0.5,
                            rate=rate)
            assert r["output"] == paced["output"], f"{query} after failover differs"
            rows.append((query, "cluster, 2 nodes, paced to 10 s, leader killed at 50%", r,
                         single))
            # The same pacing on a shuffled split of three: n3 killed for
            # good at 5 s, n1 and n2 go on without it 2 s after its lease
            # lapsed (CPU: theirs only, the killed node has no summary).
            r = run_split(args.sluice, work, etcd, query, args.events, 3, rate=rate,
                          fail=(5.0, "n3", "2s"))
            assert r["rows"] == sorted_rows(paced["output"]), \
                f"{query} on a shuffled split after failover differs"
            rows.append((query, "shuffled split, 3 nodes, paced to 10 s, n3 killed for good "
                         "at 5 s, --failover-after 2s", r, single))
    finally:
        etcd.stop()
        shutil.rmtree(work, ignore_errors=True)
    lines = [
        f"`benches/cluster/cluster_bench.py --events {args.events}` "
        f"({os.cpu_count()} cores; every node on this machine; output equal to "
        "the single-node run in every row; the paced row: to a paced single-node run)", "",
        "| query | run | wall s | CPU s (all nodes) | M events / CPU s | etcd bytes / event "
        "| shuffle bytes / event | failover s | checkpoints | checkpoint ms (median / max) |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for query, what, r, _ in rows:
        per_cpu = args.events / r["cpu"] / 1e6 if r["cpu"] else 0.0
        control = r.get("control_bytes")
        control = "-" if control is None else f"{control / args.events:.3f}"
        shuffle = r.get("shuffle_bytes")
        shuffle = "-" if shuffle is None else f"{shuffle / args.events:.2f}"
        failover = r.get("failover")
        failover = "-" if failover is None else f"{failover:.2f}"
        cps = sorted(r["checkpoints"])
        spread = f"{cps[len(cps) // 2]} / {cps[-1]}" if cps else "-"
        lines.append(
            f"| {query} | {what} | {r['wall']:.2f} | {r['cpu']:.2f} | {per_cpu:.2f} | "
            f"{control} | {shuffle} | {failover} | {len(cps)} | {spread} |")
    table = "\n".join(lines)
    print(table)
    if args.write:
        write_section(args.write, "cluster", table)


if __name__ == "__main__":
    main()
