#!/usr/bin/env python3
"""Side-by-side: Sluice, LaminarDB and Apache Flink on the same generated bids.

Run through ``benches/peers/run.sh``, which builds Sluice, installs the peers,
and writes the bids CSV once. This driver then measures, in one run:

* Sluice, in-memory Arrow batches: ``sluice bench nexmark --json`` (the
  same generator, seed and disorder as the CSV, so the very same rows),
  processing only.
* Sluice, from the CSV file: ``sluice run`` with a file source, parsing
  included; the seconds are the ones ``sluice run`` reports (process start
  and script parsing included, a few milliseconds).
* LaminarDB 0.33 (crates.io ``laminar-db``), in-memory Arrow batches:
  ``benches/peers/laminardb-rs``, a small Rust binary built outside the
  Sluice workspace, loads the CSV into Arrow batches of 8,192 rows first
  (not timed), then pushes every batch into a LaminarDB source while a
  subscriber counts the output, until it has the expected rows; its CPU
  seconds are its process's over the same interval. Its output rows are
  then compared, as a multiset, with the rows ``sluice run`` writes for the
  same query into a CSV sink (an untimed extra run).
* Flink (PyFlink, local mini-cluster, parallelism 1): a filesystem CSV
  source into a blackhole sink; the job's net runtime (JVM and mini-cluster
  startup excluded, task deployment and CSV parsing included).

"Per core" divides the rows by the CPU seconds (user + system, all
threads) the engine's process spent running the query once it was
planned: for Sluice what ``sluice run`` reports, from the moment its
script was executed (statements planned, sources opened) to the end of the
run, sinks closed; for Flink the JVM from the moment the job was submitted
(SQL planned) until its result arrived. Process start-up and SQL planning
are left out on both sides. Parallelism 1 does not mean one
core: Flink's split reader, task thread, JIT compiler and garbage collector
run in parallel, as do Sluice's source reader and compute threads.

From CSV, every query runs ``--repeat`` times (default 3) on each engine
and the best rows/s and best rows per CPU second are reported: load from
other tenants of a shared machine only ever slows a run down.

``sluice run`` seals its pipeline, so its CSV sources leave the columns no
statement reads unparsed; Flink's filesystem table source likewise takes
the query's projection (it supports projection push-down).

Expected output row counts come from Sluice's run, whose results the query
tests check against DataFusion; a peer returning another count is flagged,
and so is LaminarDB returning other rows.
"""

import argparse
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from markdown_section import write_section  # noqa: E402

QUERIES = ["q0", "q1", "q2", "q5", "q7", "q5_full", "q7_full", "tumble_count",
           "q10", "q11", "q12", "q14", "q15", "q16", "q17", "q18", "q19", "q21", "q22"]
# Queries over the person and auction streams as well (Flink and Sluice
# from CSV only: the in-memory runner drives one source).
JOIN_QUERIES = ["q3", "q4", "q8", "q9", "q13", "q20"]
# Queries whose output is a changelog in both engines: their row count
# (inserts and retractions) is not a final result, so it is not compared.
# q6 is not here: Flink refuses it (an OVER aggregation over an updating
# input), so there is no peer run to compare Sluice's changelog with.
CHANGELOG = {"q4", "q9", "q18", "q19"}

BID_COLUMNS = [
    ("auction", "BIGINT"),
    ("bidder", "BIGINT"),
    ("price", "BIGINT"),
    ("channel", "VARCHAR"),
    ("url", "VARCHAR"),
    ("date_time", "TIMESTAMP"),
    ("extra", "VARCHAR"),
]

# q15 to q17's counts of bids per price rank, and q15 and q16's distinct
# bidders and auctions overall and per rank, as benches/nexmark/q15.sql
# spells them.
_RANKS = [("rank1", "price < 10000"), ("rank2", "price >= 10000 AND price < 1000000"),
          ("rank3", "price >= 1000000")]
_RANK_COUNTS = ", ".join(f"COUNT(CASE WHEN {c} THEN 1 END) AS {r}_bids" for r, c in _RANKS)


def _distinct(column):
    return ", ".join([f"COUNT(DISTINCT {column}) AS total_{column}s"] + [
        f"COUNT(DISTINCT CASE WHEN {c} THEN {column} END) AS {r}_{column}s" for r, c in _RANKS])


# The queries of benches/nexmark/*.sql in each peer's dialect.
LAMINAR_SQL = {
    "q0": "SELECT auction, bidder, price, date_time, extra FROM bid",
    "q1": "SELECT auction, bidder, 0.908 * price AS price, date_time, extra FROM bid",
    "q2": "SELECT auction, price FROM bid WHERE auction % 123 = 0",
    "q5": "SELECT auction, COUNT(*) AS num FROM bid "
    "GROUP BY auction, HOP(date_time, INTERVAL '2' SECOND, INTERVAL '10' SECOND) "
    "EMIT ON WINDOW CLOSE",
    "q7": "SELECT MAX(price) AS maxprice FROM bid "
    "GROUP BY TUMBLE(date_time, INTERVAL '10' SECOND) EMIT ON WINDOW CLOSE",
    "tumble_count": "SELECT auction, COUNT(*) AS bids, MAX(price) AS maxprice FROM bid "
    "GROUP BY auction, TUMBLE(date_time, INTERVAL '10' SECOND) EMIT ON WINDOW CLOSE",
    # q10 to q22 as in benches/nexmark/*.sql: LaminarDB plans with
    # DataFusion too, so the scalar functions are the same.
    "q10": "SELECT auction, bidder, price, date_time, extra, "
    "to_char(date_time, '%Y-%m-%d') AS dt, to_char(date_time, '%H:%M') AS hm FROM bid",
    "q11": "SELECT bidder, COUNT(*) AS bid_count FROM bid "
    "GROUP BY bidder, SESSION(date_time, INTERVAL '10' SECOND) EMIT ON WINDOW CLOSE",
    "q12": "SELECT bidder, COUNT(*) AS bid_count FROM bid "
    "GROUP BY bidder, TUMBLE(date_time, INTERVAL '10' SECOND) EMIT ON WINDOW CLOSE",
    "q14": "SELECT auction, bidder, 0.908 * price AS price, CASE "
    "WHEN EXTRACT(HOUR FROM date_time) >= 8 AND EXTRACT(HOUR FROM date_time) <= 18 "
    "THEN 'dayTime' "
    "WHEN EXTRACT(HOUR FROM date_time) <= 6 OR EXTRACT(HOUR FROM date_time) >= 20 "
    "THEN 'nightTime' ELSE 'otherTime' END AS bid_time_type, date_time, extra, "
    "length(extra) - length(replace(extra, 'c', '')) AS c_counts FROM bid "
    "WHERE 0.908 * price > 1000000 AND 0.908 * price < 50000000",
    "q15": "SELECT COUNT(*) AS total_bids, "
    + _RANK_COUNTS + ", " + _distinct("bidder") + ", " + _distinct("auction")
    + " FROM bid GROUP BY TUMBLE(date_time, INTERVAL '1' DAY) EMIT ON WINDOW CLOSE",
    "q16": "SELECT channel, MAX(to_char(date_time, '%H:%M')) AS minute, COUNT(*) AS total_bids, "
    + _RANK_COUNTS + ", " + _distinct("bidder") + ", " + _distinct("auction")
    + " FROM bid GROUP BY channel, TUMBLE(date_time, INTERVAL '1' DAY) EMIT ON WINDOW CLOSE",
    "q17": "SELECT auction, COUNT(*) AS total_bids, " + _RANK_COUNTS + ", "
    "MIN(price) AS min_price, MAX(price) AS max_price, AVG(price) AS avg_price, "
    "SUM(price) AS sum_price FROM bid "
    "GROUP BY auction, TUMBLE(date_time, INTERVAL '1' DAY) EMIT ON WINDOW CLOSE",
    "q18": "SELECT auction, bidder, price, channel, url, date_time, extra FROM ("
    "SELECT auction, bidder, price, channel, url, date_time, extra, ROW_NUMBER() OVER "
    "(PARTITION BY bidder, auction ORDER BY date_time DESC) AS rank_number FROM bid) "
    "WHERE rank_number <= 1",
    "q19": "SELECT * FROM (SELECT auction, bidder, price, channel, url, date_time, extra, "
    "ROW_NUMBER() OVER (PARTITION BY auction ORDER BY price DESC) AS rank_number FROM bid) "
    "WHERE rank_number <= 10",
    "q21": "SELECT auction, bidder, price, channel, CASE "
    "WHEN lower(channel) = 'apple' THEN '0' WHEN lower(channel) = 'google' THEN '1' "
    "WHEN lower(channel) = 'facebook' THEN '2' WHEN lower(channel) = 'baidu' THEN '3' "
    "WHEN strpos(url, '&channel_id=') > 0 "
    "THEN split_part(split_part(url, '&channel_id=', 2), '&', 1) END AS channel_id FROM bid "
    "WHERE strpos(url, '&channel_id=') > 0 "
    "OR lower(channel) IN ('apple', 'google', 'facebook', 'baidu')",
    "q22": "SELECT auction, bidder, price, channel, split_part(url, '/', 4) AS dir1, "
    "split_part(url, '/', 5) AS dir2, split_part(url, '/', 6) AS dir3 FROM bid",
}
# LaminarDB emits a window only once a WATERMARK passes it (with `EMIT ON
# WINDOW CLOSE`; without an EMIT clause it emitted nothing at all in 0.33),
# so these run only with the source's WATERMARK; the driver ends the input
# with a later event that closes the last windows (laminardb-rs input.rs).
LAMINAR_NEEDS_WATERMARK = {"q5", "q7", "tumble_count", "q11", "q12", "q15", "q16", "q17"}

FLINK_SQL = {
    "q0": ("auction BIGINT, bidder BIGINT, price BIGINT, date_time TIMESTAMP(3), extra STRING",
           "SELECT auction, bidder, price, date_time, extra FROM bid"),
    "q1": ("auction BIGINT, bidder BIGINT, price DECIMAL(23, 3), date_time TIMESTAMP(3), extra STRING",
           "SELECT auction, bidder, 0.908 * price AS price, date_time, extra FROM bid"),
    "q2": ("auction BIGINT, price BIGINT",
           "SELECT auction, price FROM bid WHERE MOD(auction, 123) = 0"),
    "q5": (
        "auction BIGINT, window_start TIMESTAMP(3), window_end TIMESTAMP(3), num BIGINT",
        "SELECT auction, window_start, window_end, COUNT(*) AS num "
        "FROM TABLE(HOP(TABLE bid, DESCRIPTOR(date_time), INTERVAL '2' SECOND, INTERVAL '10' SECOND)) "
        "GROUP BY auction, window_start, window_end"),
    "q7": (
        "window_start TIMESTAMP(3), window_end TIMESTAMP(3), maxprice BIGINT",
        "SELECT window_start, window_end, MAX(price) AS maxprice "
        "FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(date_time), INTERVAL '10' SECOND)) "
        "GROUP BY window_start, window_end"),
    "q5_full": (
        "auction BIGINT, window_start TIMESTAMP(3), window_end TIMESTAMP(3), num BIGINT",
        "SELECT C.auction, C.window_start, C.window_end, C.num FROM ("
        "SELECT auction, window_start, window_end, COUNT(*) AS num "
        "FROM TABLE(HOP(TABLE bid, DESCRIPTOR(date_time), INTERVAL '2' SECOND, INTERVAL '10' SECOND)) "
        "GROUP BY auction, window_start, window_end) C JOIN ("
        "SELECT window_end, MAX(num) AS maxnum FROM ("
        "SELECT auction, window_start, window_end, COUNT(*) AS num "
        "FROM TABLE(HOP(TABLE bid, DESCRIPTOR(date_time), INTERVAL '2' SECOND, INTERVAL '10' SECOND)) "
        "GROUP BY auction, window_start, window_end) GROUP BY window_end) T "
        "ON C.window_end = T.window_end AND C.num = T.maxnum"),
    "q7_full": (
        "auction BIGINT, price BIGINT, bidder BIGINT, date_time TIMESTAMP(3), extra STRING",
        "SELECT B.auction, B.price, B.bidder, CAST(B.date_time AS TIMESTAMP(3)) AS date_time, "
        "B.extra FROM bid AS B JOIN ("
        "SELECT window_start, window_end, MAX(price) AS maxprice "
        "FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(date_time), INTERVAL '10' SECOND)) "
        "GROUP BY window_start, window_end) AS M "
        "ON B.price = M.maxprice AND CAST(B.date_time AS TIMESTAMP(3)) >= M.window_start "
        "AND CAST(B.date_time AS TIMESTAMP(3)) < M.window_end"),
    "q3": ("name STRING, city STRING, state STRING, id BIGINT",
           "SELECT P.name, P.city, P.state, A.id FROM auction AS A "
           "INNER JOIN person AS P ON A.seller = P.id WHERE A.category = 10 "
           "AND (P.state = 'or' OR P.state = 'id' OR P.state = 'ca')"),
    "q4": ("category BIGINT, avg_price DOUBLE",
           "SELECT Q.category, AVG(CAST(Q.final AS DOUBLE)) AS avg_price FROM ("
           "SELECT A.id, A.category, MAX(B.price) AS final FROM auction AS A "
           "JOIN bid AS B ON A.id = B.auction "
           "WHERE B.date_time >= A.date_time AND B.date_time <= A.expires "
           "GROUP BY A.id, A.category) Q GROUP BY Q.category"),
    "q8": ("id BIGINT, name STRING, starttime TIMESTAMP(3)",
           "SELECT P.id, P.name, P.starttime FROM ("
           "SELECT id, name, window_start AS starttime, window_end AS endtime "
           "FROM TABLE(TUMBLE(TABLE person, DESCRIPTOR(date_time), INTERVAL '10' SECOND)) "
           "GROUP BY id, name, window_start, window_end) P JOIN ("
           "SELECT seller, window_start AS starttime, window_end AS endtime "
           "FROM TABLE(TUMBLE(TABLE auction, DESCRIPTOR(date_time), INTERVAL '10' SECOND)) "
           "GROUP BY seller, window_start, window_end) A "
           "ON P.id = A.seller AND P.starttime = A.starttime AND P.endtime = A.endtime"),
    "tumble_count": (
        "auction BIGINT, window_start TIMESTAMP(3), window_end TIMESTAMP(3), bids BIGINT, maxprice BIGINT",
        "SELECT auction, window_start, window_end, COUNT(*) AS bids, MAX(price) AS maxprice "
        "FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(date_time), INTERVAL '10' SECOND)) "
        "GROUP BY auction, window_start, window_end"),
    # q9 to q22 as in benches/nexmark/*.sql (each file's header says how it
    # differs from the published query); Flink gets the same computation.
    "q9": (
        "id BIGINT, item_name STRING, description STRING, initial_bid BIGINT, reserve BIGINT, "
        "date_time TIMESTAMP(3), expires TIMESTAMP(3), seller BIGINT, category BIGINT, "
        "extra STRING, auction BIGINT, bidder BIGINT, price BIGINT, "
        "bid_date_time TIMESTAMP(3), bid_extra STRING",
        "SELECT id, item_name, description, initial_bid, reserve, date_time, expires, seller, "
        "category, extra, auction, bidder, price, bid_date_time, bid_extra FROM ("
        "SELECT A.id, A.item_name, A.description, A.initial_bid, A.reserve, "
        "CAST(A.date_time AS TIMESTAMP(3)) AS date_time, A.expires, A.seller, A.category, "
        "A.extra, B.auction, B.bidder, B.price, CAST(B.date_time AS TIMESTAMP(3)) AS bid_date_time, "
        "B.extra AS bid_extra, ROW_NUMBER() OVER (PARTITION BY A.id "
        "ORDER BY B.price DESC, B.date_time ASC) AS rownum "
        "FROM auction AS A JOIN bid AS B ON A.id = B.auction "
        "WHERE B.date_time BETWEEN A.date_time AND A.expires) WHERE rownum <= 1"),
    "q10": (
        "auction BIGINT, bidder BIGINT, price BIGINT, date_time TIMESTAMP(3), extra STRING, "
        "dt STRING, hm STRING",
        "SELECT auction, bidder, price, date_time, extra, DATE_FORMAT(date_time, 'yyyy-MM-dd') "
        "AS dt, DATE_FORMAT(date_time, 'HH:mm') AS hm FROM bid"),
    "q11": (
        "bidder BIGINT, bid_count BIGINT, starttime TIMESTAMP(3), endtime TIMESTAMP(3)",
        # Flink 2 plans no legacy GROUP BY SESSION(...) here ("Cannot
        # generate a valid execution plan"); its session window TVF is the
        # same computation.
        "SELECT bidder, COUNT(*) AS bid_count, window_start AS starttime, "
        "window_end AS endtime FROM TABLE(SESSION(TABLE bid PARTITION BY bidder, "
        "DESCRIPTOR(date_time), INTERVAL '10' SECOND)) GROUP BY bidder, window_start, window_end"),
    "q12": (
        "bidder BIGINT, bid_count BIGINT, window_start TIMESTAMP(3), window_end TIMESTAMP(3)",
        "SELECT bidder, COUNT(*) AS bid_count, window_start, window_end "
        "FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(date_time), INTERVAL '10' SECOND)) "
        "GROUP BY bidder, window_start, window_end"),
    "q13": (
        "auction BIGINT, bidder BIGINT, price BIGINT, date_time TIMESTAMP(3), `value` STRING",
        "SELECT B.auction, B.bidder, B.price, CAST(B.date_time AS TIMESTAMP(3)) AS date_time, "
        "S.name AS `value` FROM bid AS B JOIN person AS S ON B.bidder = S.id"),
    "q14": (
        "auction BIGINT, bidder BIGINT, price DECIMAL(23, 3), bid_time_type STRING, "
        "date_time TIMESTAMP(3), extra STRING, c_counts BIGINT",
        "SELECT auction, bidder, 0.908 * price AS price, CASE "
        "WHEN HOUR(date_time) >= 8 AND HOUR(date_time) <= 18 THEN 'dayTime' "
        "WHEN HOUR(date_time) <= 6 OR HOUR(date_time) >= 20 THEN 'nightTime' "
        "ELSE 'otherTime' END AS bid_time_type, date_time, extra, "
        "CAST(CHAR_LENGTH(extra) - CHAR_LENGTH(REPLACE(extra, 'c', '')) AS BIGINT) AS c_counts "
        "FROM bid WHERE 0.908 * price > 1000000 AND 0.908 * price < 50000000"),
    "q18": (
        "auction BIGINT, bidder BIGINT, price BIGINT, channel STRING, url STRING, "
        "date_time TIMESTAMP(3), extra STRING",
        "SELECT auction, bidder, price, channel, url, date_time, extra FROM ("
        "SELECT *, ROW_NUMBER() OVER (PARTITION BY bidder, auction ORDER BY date_time DESC) "
        "AS rank_number FROM bid) WHERE rank_number <= 1"),
    "q19": (
        "auction BIGINT, bidder BIGINT, price BIGINT, channel STRING, url STRING, "
        "date_time TIMESTAMP(3), extra STRING, rank_number BIGINT",
        "SELECT * FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY auction ORDER BY price DESC) "
        "AS rank_number FROM bid) WHERE rank_number <= 10"),
    "q20": (
        "auction BIGINT, bidder BIGINT, price BIGINT, channel STRING, url STRING, "
        "date_time TIMESTAMP(3), extra STRING, item_name STRING, description STRING, "
        "initial_bid BIGINT, reserve BIGINT, auction_date_time TIMESTAMP(3), "
        "expires TIMESTAMP(3), seller BIGINT, category BIGINT, auction_extra STRING",
        "SELECT B.auction, B.bidder, B.price, B.channel, B.url, "
        "CAST(B.date_time AS TIMESTAMP(3)) AS date_time, B.extra, A.item_name, A.description, "
        "A.initial_bid, A.reserve, CAST(A.date_time AS TIMESTAMP(3)) AS auction_date_time, "
        "A.expires, A.seller, A.category, A.extra AS auction_extra "
        "FROM bid AS B JOIN auction AS A ON B.auction = A.id WHERE A.category = 10"),
    "q21": (
        "auction BIGINT, bidder BIGINT, price BIGINT, channel STRING, channel_id STRING",
        "SELECT auction, bidder, price, channel, CASE "
        "WHEN LOWER(channel) = 'apple' THEN '0' WHEN LOWER(channel) = 'google' THEN '1' "
        "WHEN LOWER(channel) = 'facebook' THEN '2' WHEN LOWER(channel) = 'baidu' THEN '3' "
        "ELSE REGEXP_EXTRACT(url, '(&|^)channel_id=([^&]*)', 2) END AS channel_id FROM bid "
        "WHERE REGEXP_EXTRACT(url, '(&|^)channel_id=([^&]*)', 2) IS NOT NULL "
        "OR LOWER(channel) IN ('apple', 'google', 'facebook', 'baidu')"),
    "q22": (
        "auction BIGINT, bidder BIGINT, price BIGINT, channel STRING, dir1 STRING, "
        "dir2 STRING, dir3 STRING",
        "SELECT auction, bidder, price, channel, SPLIT_INDEX(url, '/', 3) AS dir1, "
        "SPLIT_INDEX(url, '/', 4) AS dir2, SPLIT_INDEX(url, '/', 5) AS dir3 FROM bid"),
}


def _statistics(keys, extra=""):
    """q15, q16: counts per price range over 1-day tumbling windows."""
    ranges = ("price < 10000", "price >= 10000 AND price < 1000000", "price >= 1000000")
    cols = ["COUNT(*) AS total_bids"]
    cols += [f"COUNT(*) FILTER (WHERE {r}) AS rank{i}_bids" for i, r in enumerate(ranges, 1)]
    for what, name in (("bidder", "bidders"), ("auction", "auctions")):
        cols.append(f"COUNT(DISTINCT {what}) AS total_{name}")
        cols += [f"COUNT(DISTINCT {what}) FILTER (WHERE {r}) AS rank{i}_{name}"
                 for i, r in enumerate(ranges, 1)]
    group = "".join(f"{k}, " for k in keys)
    return (f"SELECT {group}window_start AS `day`{extra}, {', '.join(cols)} "
            "FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(date_time), INTERVAL '1' DAY)) "
            f"GROUP BY {group}window_start, window_end")


_COUNTS = ("total_bids BIGINT, rank1_bids BIGINT, rank2_bids BIGINT, rank3_bids BIGINT")
_DISTINCT = ("total_bidders BIGINT, rank1_bidders BIGINT, rank2_bidders BIGINT, "
             "rank3_bidders BIGINT, total_auctions BIGINT, rank1_auctions BIGINT, "
             "rank2_auctions BIGINT, rank3_auctions BIGINT")
# `day` and `minute` are reserved words in Flink SQL: quoted.
FLINK_SQL["q15"] = (f"`day` TIMESTAMP(3), {_COUNTS}, {_DISTINCT}", _statistics([]))
FLINK_SQL["q16"] = (
    f"channel STRING, `day` TIMESTAMP(3), `minute` STRING, {_COUNTS}, {_DISTINCT}",
    _statistics(["channel"], ", MAX(DATE_FORMAT(date_time, 'HH:mm')) AS `minute`"))
FLINK_SQL["q17"] = (
    f"auction BIGINT, `day` TIMESTAMP(3), {_COUNTS}, min_price BIGINT, max_price BIGINT, "
    "avg_price DOUBLE, sum_price BIGINT",
    "SELECT auction, window_start AS `day`, COUNT(*) AS total_bids, "
    "COUNT(*) FILTER (WHERE price < 10000) AS rank1_bids, "
    "COUNT(*) FILTER (WHERE price >= 10000 AND price < 1000000) AS rank2_bids, "
    "COUNT(*) FILTER (WHERE price >= 1000000) AS rank3_bids, MIN(price) AS min_price, "
    "MAX(price) AS max_price, AVG(CAST(price AS DOUBLE)) AS avg_price, SUM(price) AS sum_price "
    "FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(date_time), INTERVAL '1' DAY)) "
    "GROUP BY auction, window_start, window_end")


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def describe(e, width=200):
    """One line saying what failed. A Java exception (py4j's error says only
    which call failed) is named by its root cause, whose message says why."""
    cause = getattr(e, "java_exception", None)
    if cause is None:
        return str(e).splitlines()[0][:width]
    while cause.getCause() is not None:
        cause = cause.getCause()
    message = (cause.getMessage() or "").strip().splitlines()
    return f"{cause.getClass().getSimpleName()}: {message[0] if message else ''}"[:width]


# --------------------------------------------------------------------- Sluice

def sluice_memory(sluice, query, events, disorder):
    out = subprocess.run(
        [sluice, "bench", "nexmark", "--query", query, "--events", str(events),
         "--out-of-order-ms", str(disorder), "--seed", "0", "--json"],
        check=True, capture_output=True, text=True).stdout
    r = json.loads(out)
    return {"rows": r["input_rows"], "secs": r["processing"]["secs"],
            "eps": r["processing"]["rows_per_sec"], "out_rows": r["output_rows"],
            "peak_rss_mib": r["memory"]["peak_rss_mib"]}


def sluice_csv(sluice, root, query, csvs, repeat):
    """`csvs` maps a Nexmark stream name (bid, person, auction) to its CSV;
    best of `repeat` runs."""
    return best_of([sluice_csv_once(sluice, root, query, csvs) for _ in range(repeat)])


def sluice_csv_once(sluice, root, query, csvs):
    with open(os.path.join(root, "benches", "nexmark", f"{query}.sql")) as f:
        text = f.read()

    def file_source(m):
        stream = re.search(r"stream = '(\w+)'", m.group(0)).group(1)
        return f"WITH (connector = 'file', path = '{csvs[stream]}', format = 'csv');"
    text, n = re.subn(r"WITH \(connector = 'nexmark'.*?\);", file_source, text, flags=re.S)
    assert n >= 1, f"{query}.sql: expected a Nexmark source"
    with tempfile.NamedTemporaryFile("w", suffix=".sql", delete=False) as f:
        f.write(text)
        script = f.name
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    try:  # the whole process's CPU, for the record
        out = subprocess.run([sluice, "run", script], check=True, capture_output=True,
                             text=True).stdout
    finally:
        os.unlink(script)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    process_cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    m = re.search(r"sluice: (\d+) rows in, (\d+) rows out, (\d+) late rows dropped, ([\d.]+)s, "
                  r"([\d.]+)s CPU", out)
    if not m:
        raise RuntimeError(f"unexpected sluice run output: {out}")
    rows, out_rows, secs = int(m.group(1)), int(m.group(2)), float(m.group(4))
    cpu = float(m.group(5))
    # `sluice run` reports the rows of every stream together: with more than
    # one stream in the file that is not the final stream's count (q5_full's
    # per-window counts outnumber its winners), so it is not compared.
    if len(re.findall(r"CREATE\s+(?:STREAM|MATERIALIZED\s+VIEW)", text, flags=re.I)) > 1:
        out_rows = None
    return {"rows": rows, "secs": secs, "eps": rows / secs if secs else 0.0, "out_rows": out_rows,
            "cpu_secs": cpu, "process_cpu_secs": process_cpu,
            "eps_per_core": rows / cpu if cpu else 0.0}


# ------------------------------------------------------------------ LaminarDB

PERSON_COLUMNS = [("id", "BIGINT"), ("name", "VARCHAR"), ("email_address", "VARCHAR"),
                  ("credit_card", "VARCHAR"), ("city", "VARCHAR"), ("state", "VARCHAR"),
                  ("date_time", "TIMESTAMP"), ("extra", "VARCHAR")]
AUCTION_COLUMNS = [("id", "BIGINT"), ("item_name", "VARCHAR"), ("description", "VARCHAR"),
                   ("initial_bid", "BIGINT"), ("reserve", "BIGINT"), ("date_time", "TIMESTAMP"),
                   ("expires", "TIMESTAMP"), ("seller", "BIGINT"), ("category", "BIGINT"),
                   ("extra", "VARCHAR")]
COLUMNS = {"bid": BID_COLUMNS, "person": PERSON_COLUMNS, "auction": AUCTION_COLUMNS}

# The join queries in LaminarDB's dialect (q8 joins two windowed
# aggregates, whose windows LaminarDB does not emit). q4's and q9's outputs
# are changelogs: they are timed, their rows not compared.
LAMINAR_JOIN_SQL = {
    "q3": ("SELECT P.name, P.city, P.state, A.id FROM auction AS A JOIN person AS P "
           "ON A.seller = P.id WHERE A.category = 10 "
           "AND (P.state = 'or' OR P.state = 'id' OR P.state = 'ca')", ["person", "auction"]),
    "q4": ("SELECT Q.category, AVG(Q.final) AS avg_price FROM (SELECT A.id, A.category, "
           "MAX(B.price) AS final FROM auction AS A JOIN bid AS B ON A.id = B.auction "
           "WHERE B.date_time >= A.date_time AND B.date_time <= A.expires "
           "GROUP BY A.id, A.category) Q GROUP BY Q.category", ["auction", "bid"]),
    "q9": ("SELECT id, item_name, description, initial_bid, reserve, date_time, expires, seller, "
           "category, extra, auction, bidder, price, bid_date_time, bid_extra FROM ("
           "SELECT A.id, A.item_name, A.description, A.initial_bid, A.reserve, A.date_time, "
           "A.expires, A.seller, A.category, A.extra, B.auction, B.bidder, B.price, "
           "B.date_time AS bid_date_time, B.extra AS bid_extra, ROW_NUMBER() OVER "
           "(PARTITION BY A.id ORDER BY B.price DESC, B.date_time ASC) AS rownum "
           "FROM auction AS A JOIN bid AS B ON A.id = B.auction "
           "WHERE B.date_time BETWEEN A.date_time AND A.expires) WHERE rownum <= 1",
           ["auction", "bid"]),
    # q13's side input is the generator's persons (benches/nexmark/q13.sql).
    "q13": ("SELECT B.auction, B.bidder, B.price, B.date_time, S.name AS value "
            "FROM bid AS B JOIN person AS S ON B.bidder = S.id", ["person", "bid"]),
    "q20": ("SELECT B.auction, B.bidder, B.price, B.channel, B.url, B.date_time, B.extra, "
            "A.item_name, A.description, A.initial_bid, A.reserve, "
            "A.date_time AS auction_date_time, A.expires, A.seller, A.category, "
            "A.extra AS auction_extra FROM bid AS B JOIN auction AS A ON B.auction = A.id "
            "WHERE A.category = 10", ["auction", "bid"]),
}


def laminar(binary, query, csvs, expected_rows, watermark, dump=None, idle_timeout=10.0):
    """One run of the LaminarDB 0.33 driver (benches/peers/laminardb-rs):
    it loads the CSV of every stream the query reads into Arrow batches of
    8,192 rows (untimed), pushes them (a join's streams merged by each
    batch's latest event time) and counts the output rows until
    `expected_rows` arrived or `idle_timeout` passed without output. With
    `dump`, it also writes the output rows there as CSV."""
    if query in LAMINAR_JOIN_SQL:
        sql, streams = LAMINAR_JOIN_SQL[query]
    else:
        sql, streams = LAMINAR_SQL[query], ["bid"]
    cmd = [binary, "--query", query, "--sql", sql]
    for stream in streams:
        cmd += ["--source", stream,
                "--columns", ", ".join(f"{n} {t}" for n, t in COLUMNS[stream]),
                "--csv", csvs[stream]]
    if watermark:
        cmd += ["--watermark", "date_time:2"]
    if len(streams) > 1:
        cmd += ["--interleave-by", "date_time"]
    if expected_rows is not None:
        cmd += ["--expected", str(expected_rows)]
    cmd += ["--idle-timeout", str(idle_timeout)]
    if dump:
        cmd += ["--dump", dump]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        # The driver prints only its error there, LaminarDB's message first.
        raise RuntimeError(" ".join(p.stderr.split()) or f"exit status {p.returncode}")
    r = json.loads(p.stdout.splitlines()[-1])
    return {k: r[k] for k in ("rows", "secs", "eps", "out_rows", "cpu_secs", "eps_per_core")}


def expected_plus_one(r, result):
    """Whether a run gave exactly one row more than Sluice's count."""
    return result["expected"] is not None and r["out_rows"] == result["expected"] + 1


def laminar_version(root):
    """The laminar-db version the driver's lock file pins."""
    with open(os.path.join(root, "benches", "peers", "laminardb-rs", "Cargo.lock")) as f:
        m = re.search(r'name = "laminar-db"\nversion = "([^"]+)"', f.read())
    return m.group(1) if m else "unknown"


# ------------------------------------------------------- comparing the outputs

def sluice_output(sluice, root, query, csvs, out_csv):
    """Run the query once more (untimed) with a CSV sink on its final
    stream, for comparing the rows themselves."""
    with open(os.path.join(root, "benches", "nexmark", f"{query}.sql")) as f:
        text = f.read()

    def file_source(m):
        stream = re.search(r"stream = '(\w+)'", m.group(0)).group(1)
        return f"WITH (connector = 'file', path = '{csvs[stream]}', format = 'csv');"
    text = re.sub(r"WITH \(connector = 'nexmark'.*?\);", file_source, text, flags=re.S)
    final = re.findall(r"CREATE\s+STREAM\s+(\w+)", text, flags=re.I)[-1]
    text += (f"\nCREATE SINK peers_compare FROM {final} "
             f"WITH (connector = 'file', path = '{out_csv}', format = 'csv');\n")
    with tempfile.NamedTemporaryFile("w", suffix=".sql", delete=False) as f:
        f.write(text)
        script = f.name
    try:
        subprocess.run([sluice, "run", script], check=True, capture_output=True, text=True)
    finally:
        os.unlink(script)


_NUMBER = re.compile(r"^-?\d+(\.\d+)?([eE][-+]?\d+)?$")
_TIMESTAMP = re.compile(r"^(\d{4}-\d\d-\d\d)[T ](\d\d:\d\d:\d\d)(\.\d+)?Z?$")


def normalize(value):
    """One CSV cell in a spelling both engines share: numbers to 12
    significant digits (q1's `0.908 * price` is a float in both, printed
    with different rounding noise), timestamps to microseconds with a
    space separator."""
    if _NUMBER.match(value):
        f = float(value)
        return str(int(f)) if f.is_integer() and abs(f) < 2**53 else f"{f:.12g}"
    m = _TIMESTAMP.match(value)
    if m:
        frac = (m.group(3) or ".")[1:].ljust(6, "0")[:6]
        return f"{m.group(1)} {m.group(2)}.{frac}"
    return value


def read_rows(path):
    import csv
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    return (rows[0], rows[1:]) if rows else ([], [])


def final_rows(path):
    """A CSV output as its final rows: a changelog (Sluice's `__change`
    column, `insert` / `retract`) folded into what it leaves standing, any
    other file as its rows. Returns the header (without `__change`) and a
    Counter of rows."""
    from collections import Counter
    head, rows = read_rows(path)
    if "__change" not in head:
        return head, Counter(tuple(r) for r in rows)
    at = head.index("__change")
    standing = Counter()
    for r in rows:
        row = tuple(v for i, v in enumerate(r) if i != at)
        if r[at] == "retract":
            standing[row] -= 1
        else:
            standing[row] += 1
    return [c for i, c in enumerate(head) if i != at], +standing


def compare_rows(laminar_csv, sluice_csv):
    """The final rows of LaminarDB's output against Sluice's (a changelog
    folded into what it leaves standing, see `final_rows`), as multisets on
    LaminarDB's columns (its spellings of q5, q7 and tumble_count leave out
    the window bounds Sluice outputs). Returns (None, 0, 0) when they are
    equal, else (what differs, rows only LaminarDB has, rows only Sluice
    has)."""
    from collections import Counter
    lam_head, lam_rows = final_rows(laminar_csv)
    slu_head, slu_rows = final_rows(sluice_csv)
    if not lam_rows:
        n = sum(slu_rows.values())
        return (None, 0, 0) if not n else (f"no rows, Sluice {n:,}", 0, n)
    missing = [c for c in lam_head if c not in slu_head]
    if missing:
        return f"columns {missing} not in Sluice's output", 0, 0
    idx = [slu_head.index(c) for c in lam_head]
    lam = Counter()
    for r, n in lam_rows.items():
        lam[tuple(normalize(v) for v in r)] += n
    slu = Counter()
    for r, n in slu_rows.items():
        slu[tuple(normalize(r[i]) for i in idx)] += n
    if lam == slu:
        return None, 0, 0
    extra, lost = sum((lam - slu).values()), sum((slu - lam).values())
    return f"{extra:,} rows not in Sluice's, {lost:,} of Sluice's missing", extra, lost


# ---------------------------------------------------------------------- Flink

def flink_env(batch=False):
    from pyflink.table import EnvironmentSettings, TableEnvironment
    mode = EnvironmentSettings.in_batch_mode() if batch else EnvironmentSettings.in_streaming_mode()
    env = TableEnvironment.create(mode)
    env.get_config().set("parallelism.default", "1")
    env.get_config().set("table.exec.resource.default-parallelism", "1")
    return env


FLINK_TABLES = {
    "bid": "auction BIGINT, bidder BIGINT, price BIGINT, channel STRING, url STRING, "
           "date_time TIMESTAMP(3), extra STRING",
    "person": "id BIGINT, name STRING, email_address STRING, credit_card STRING, city STRING, "
              "state STRING, date_time TIMESTAMP(3), extra STRING",
    "auction": "id BIGINT, item_name STRING, description STRING, initial_bid BIGINT, "
               "reserve BIGINT, date_time TIMESTAMP(3), expires TIMESTAMP(3), seller BIGINT, "
               "category BIGINT, extra STRING",
}


def flink_source(env, headerless):
    """`headerless` maps a stream name to its CSV without a header line."""
    for name, path in headerless.items():
        env.execute_sql(f"DROP TEMPORARY TABLE IF EXISTS {name}")
        env.execute_sql(f"""
            CREATE TEMPORARY TABLE {name} ({FLINK_TABLES[name]},
                WATERMARK FOR date_time AS date_time - INTERVAL '2' SECOND
            ) WITH ('connector' = 'filesystem', 'path' = '{path}', 'format' = 'csv')""")


def jvm_pids():
    """PyFlink's JVM: the child processes of this Python process."""
    me, pids = os.getpid(), []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == me:
            pids.append(int(entry))
    return pids


def cpu_seconds(pids):
    """User + system CPU seconds of `pids`, all threads (Linux /proc)."""
    ticks = 0
    for pid in pids:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        ticks += int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


def wait_quiet(pids, idle_share=0.1, window=0.25, limit=15.0):
    """Wait until `pids` use under `idle_share` of a core over `window`
    seconds (at most `limit` seconds). After a job ends, Flink's JVM goes on
    working (garbage collection, tearing the job down) outside the job's
    measured CPU time; a Sluice run started then shares the machine with it
    and was measured at up to twice its CPU seconds (q19, session 27)."""
    deadline = time.perf_counter() + limit
    while time.perf_counter() < deadline:
        before = cpu_seconds(pids)
        time.sleep(window)
        if cpu_seconds(pids) - before < idle_share * window:
            return True
    return False


def best_of(runs):
    """The best of repeated runs, each measure on its own: the highest
    rows/s and the highest rows per CPU second (a shared machine only ever
    makes a run slower)."""
    best = dict(runs[-1])
    best["eps"] = max(r["eps"] for r in runs)
    best["eps_per_core"] = max(r["eps_per_core"] for r in runs)
    best["runs"] = len(runs)
    return best


# Queries whose output rows Flink counts in streaming mode (see `flink`).
FLINK_COUNT_STREAMING = {"q11"}


def flink(env, count_env, query, headerless, rows, repeat, before_each=None):
    """Timed streaming jobs into a blackhole sink (best of `repeat`), then
    an untimed batch job counting the query's rows. `before_each` (if any)
    runs before each timed job: the other engine's run of the same query,
    so that a slow spell of this shared machine hits both engines."""
    schema, sql = FLINK_SQL[query]
    flink_source(env, headerless)
    env.execute_sql("DROP TEMPORARY TABLE IF EXISTS sink_t")
    env.execute_sql(f"CREATE TEMPORARY TABLE sink_t ({schema}) WITH ('connector' = 'blackhole')")
    pids = jvm_pids()
    runs = []
    for _ in range(repeat):
        if before_each:
            wait_quiet(pids)
            before_each()
        wait_quiet(pids)
        wall = time.perf_counter()
        result = env.execute_sql(f"INSERT INTO sink_t {sql}")
        cpu = cpu_seconds(pids)
        job = result.get_job_client().get_job_execution_result().result()
        cpu = cpu_seconds(pids) - cpu
        wall = time.perf_counter() - wall
        secs = job.get_net_runtime() / 1000.0
        runs.append({"rows": rows, "secs": secs, "wall_secs": wall,
                     "eps": rows / secs if secs else 0.0, "cpu_secs": cpu,
                     "eps_per_core": rows / cpu if cpu else 0.0})
    # Flink's batch mode plans no session windows: count those in
    # streaming mode, whose last count (the source is bounded) is final.
    counting = env if query in FLINK_COUNT_STREAMING else count_env
    flink_source(counting, headerless)
    with counting.execute_sql(f"SELECT COUNT(*) FROM ({sql})").collect() as it:
        out_rows = [row[0] for row in it][-1]
    return dict(best_of(runs), out_rows=out_rows)


# --------------------------------------------------------------------- report

def fmt_eps(r):
    return f"{r['eps']:,.0f}" if r and r.get("eps") else "n/a"


def fmt_core(r):
    return f"{r['eps_per_core']:,.0f}" if r and r.get("eps_per_core") else "n/a"


def ratio(a, b, key="eps"):
    if not a or not b or not a.get(key) or not b.get(key):
        return "n/a"
    return f"{a[key] / b[key]:.1f}x"


def check(r, expected):
    if r is None:
        return "not run"
    if r.get("error"):
        return "error: " + r["error"]
    if r.get("out_rows") is None:
        return "not checked"
    # `rows_differ` (LaminarDB only): its final rows against Sluice's.
    rows = r.get("rows_differ")
    if expected is None:
        if "rows_differ" not in r:
            return f"{r['out_rows']:,} rows, not compared (changelog)"
        return (f"{r['out_rows']:,} rows; " + ("final rows same as Sluice's" if rows is None
                                                 else f"final rows differ: {rows}"))
    if r.get("sentinel"):
        # The driver's end-of-input row, passed through (see main).
        return "ok, same rows (and the driver's end-of-input row)" if rows is None else rows
    if r["out_rows"] == expected:
        if "rows_differ" not in r:
            return "ok"
        return "ok, same rows" if rows is None else f"same count, rows differ: {rows}"
    return f"differs: {r['out_rows']:,} rows, expected {expected:,}" + (f"; {rows}" if rows else "")


def machine():
    model = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    load = os.getloadavg()[0]
    return f"{os.cpu_count()} CPUs ({model}), load average {load:.1f} at the end"


def markdown(results, args, versions):
    lines = []
    lines.append(f"Measured {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} on {machine()}; "
                 f"{args.events:,} generator events = {results['rows']:,} bids "
                 f"(seed 0, {args.disorder} ms disorder, 2 s watermark delay); {versions}.")
    lines.append("")
    lines.append("In-memory Arrow batches (input already in memory; events/s of input rows, "
                 "until the subscriber received the last output row; LaminarDB per core: input "
                 "rows per CPU second of its process, all threads; its output: row count against "
                 "Sluice's, then its rows against the rows `sluice run` wrote, on LaminarDB's "
                 "columns; for a changelog (q9, q18, q19) the rows each output leaves standing):")
    lines.append("")
    lines.append("| query | Sluice | LaminarDB, no WATERMARK | Sluice/LaminarDB | LaminarDB per core "
                 "| its output | LaminarDB, WATERMARK | its output |")
    lines.append("|---|---:|---:|---:|---:|---|---:|---|")
    for q in QUERIES:
        r = results[q]
        lines.append(f"| {q} | {fmt_eps(r['sluice_mem'])} | {fmt_eps(r.get('laminar'))} | "
                     f"{ratio(r['sluice_mem'], r.get('laminar'))} | {fmt_core(r.get('laminar'))} | "
                     f"{check(r.get('laminar'), r['expected'])} "
                     f"| {fmt_eps(r.get('laminar_wm'))} | {check(r.get('laminar_wm'), r['expected'])} |")
    lines.append("")
    lines.append("From the CSV file, parsing included, parallelism 1 "
                 "(Flink: job net runtime, JVM and mini-cluster startup excluded). "
                 "Per core: rows per CPU second of the engine's process, all threads. "
                 f"Best of {args.repeat} runs per query and engine:")
    lines.append("")
    lines.append("| query | Sluice | Flink | Sluice/Flink | Sluice per core | Flink per core "
                 "| Sluice/Flink per core | Flink output |")
    lines.append("|---|---:|---:|---:|---:|---:|---:|---|")
    for q in QUERIES:
        r = results[q]
        lines.append(f"| {q} | {fmt_eps(r['sluice_csv'])} | {fmt_eps(r.get('flink'))} | "
                     f"{ratio(r['sluice_csv'], r.get('flink'))} | {fmt_core(r['sluice_csv'])} | "
                     f"{fmt_core(r.get('flink'))} | "
                     f"{ratio(r['sluice_csv'], r.get('flink'), 'eps_per_core')} | "
                     f"{check(r.get('flink'), r['expected'])} |")
    lines.append("")
    lines.append("Join queries in memory (Sluice: `sluice bench nexmark`, both streams generated "
                 "first and pushed merged in event-time order; LaminarDB: the CSVs loaded into "
                 "Arrow batches and pushed merged by each batch's latest event time, no WATERMARK "
                 "clause); input rows/s of the streams each query reads:")
    lines.append("")
    lines.append("| query | Sluice | LaminarDB | Sluice/LaminarDB | LaminarDB per core | its output |")
    lines.append("|---|---:|---:|---:|---:|---|")
    for q in JOIN_QUERIES:
        r = results[q]
        lam = r.get("laminar")
        out = check(lam, r["expected"])
        lines.append(f"| {q} | {fmt_eps(r['sluice_mem'])} | {fmt_eps(lam)} | "
                     f"{ratio(r['sluice_mem'], lam)} | {fmt_core(lam)} | {out} |")
    lines.append("")
    lines.append("Join queries from the person, auction and bid CSV files of the same "
                 "generator run, parsing included, parallelism 1; input rows/s of the streams "
                 "each query reads (q3 and q8: persons and auctions; q4, q9 and q20: auctions "
                 "and bids; q13: persons and bids). q4's and q9's outputs are changelogs in "
                 "both engines, so their row counts are not compared:")
    lines.append("")
    lines.append("| query | input rows | Sluice | Flink | Sluice/Flink | Sluice per core "
                 "| Flink per core | Sluice/Flink per core | Flink output |")
    lines.append("|---|---:|---:|---:|---:|---:|---:|---:|---|")
    for q in JOIN_QUERIES:
        r = results[q]
        out = (check(r.get("flink"), r["expected"]) if r["expected"] is not None
               else f"{(r.get('flink') or {}).get('out_rows', 'n/a')} final rows, not compared")
        lines.append(f"| {q} | {r['sluice_csv']['rows']:,} | {fmt_eps(r['sluice_csv'])} | "
                     f"{fmt_eps(r.get('flink'))} | {ratio(r['sluice_csv'], r.get('flink'))} | "
                     f"{fmt_core(r['sluice_csv'])} | {fmt_core(r.get('flink'))} | "
                     f"{ratio(r['sluice_csv'], r.get('flink'), 'eps_per_core')} | {out} |")
    return "\n".join(lines)


def main():
    global QUERIES, JOIN_QUERIES
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sluice", required=True)
    ap.add_argument("--root", required=True)
    ap.add_argument("--csv", required=True)
    ap.add_argument("--headerless-csv", required=True)
    ap.add_argument("--person-csv", required=True)
    ap.add_argument("--auction-csv", required=True)
    ap.add_argument("--headerless-person-csv", required=True)
    ap.add_argument("--headerless-auction-csv", required=True)
    ap.add_argument("--events", type=int, required=True)
    ap.add_argument("--disorder", type=int, default=2000)
    ap.add_argument("--repeat", type=int, default=3,
                    help="runs per query and engine from CSV; the best is reported")
    ap.add_argument("--laminardb", help="the benches/peers/laminardb-rs binary")
    ap.add_argument("--skip", action="append", default=[], choices=["laminardb", "flink"])
    ap.add_argument("--markdown-into")
    ap.add_argument("--json-out")
    ap.add_argument("--only", help="comma-separated queries to run (default: every query); "
                    "not with --markdown-into, whose tables list every query")
    args = ap.parse_args()
    if args.only:
        wanted = [q.strip() for q in args.only.split(",") if q.strip()]
        unknown = [q for q in wanted if q not in QUERIES + JOIN_QUERIES]
        if unknown:
            ap.error(f"--only: unknown queries {', '.join(unknown)} "
                     f"(known: {', '.join(QUERIES + JOIN_QUERIES)})")
        if args.markdown_into:
            ap.error("--only leaves queries out of the tables; use it with NO_WRITE=1")
        QUERIES = [q for q in QUERIES if q in wanted]
        JOIN_QUERIES = [q for q in JOIN_QUERIES if q in wanted]
    if "laminardb" not in args.skip and not args.laminardb:
        ap.error("--laminardb is required unless --skip laminardb")

    csvs = {"bid": args.csv, "person": args.person_csv, "auction": args.auction_csv}
    headerless = {"bid": args.headerless_csv, "person": args.headerless_person_csv,
                  "auction": args.headerless_auction_csv}
    results = {}
    versions = []
    with_flink = "flink" not in args.skip
    # With Flink, Sluice's timed CSV runs alternate with Flink's (see the
    # Flink loop below); this first run only counts its rows.
    csv_repeat = 1 if with_flink else args.repeat
    for q in JOIN_QUERIES:
        log(f"sluice {q} (in memory)")
        mem = sluice_memory(args.sluice, q, args.events, args.disorder)
        log(f"sluice {q} (csv)")
        csv = sluice_csv(args.sluice, args.root, q, csvs, csv_repeat)
        # A changelog's row count is not a final result.
        results[q] = {"sluice_mem": mem, "sluice_csv": csv,
                      "expected": None if q in CHANGELOG else mem["out_rows"]}
        if q not in CHANGELOG and csv["out_rows"] is not None and csv["out_rows"] != mem["out_rows"]:
            log(f"warning: {q}: sluice run gave {csv['out_rows']} rows, bench {mem['out_rows']}")
    for q in QUERIES:
        log(f"sluice {q} (in memory)")
        mem = sluice_memory(args.sluice, q, args.events, args.disorder)
        log(f"sluice {q} (csv)")
        csv = sluice_csv(args.sluice, args.root, q, {"bid": args.csv}, csv_repeat)
        results[q] = {"sluice_mem": mem, "sluice_csv": csv,
                      "expected": None if q in CHANGELOG else mem["out_rows"]}
        results["rows"] = mem["rows"]
        if q not in CHANGELOG and csv["out_rows"] is not None and csv["out_rows"] != mem["out_rows"]:
            log(f"warning: {q}: sluice run gave {csv['out_rows']} rows, bench {mem['out_rows']}")

    if "laminardb" not in args.skip:
        versions.append(f"laminar-db {laminar_version(args.root)} (crates.io, Rust)")
        csvs = {"bid": args.csv, "person": args.person_csv, "auction": args.auction_csv}
        with tempfile.TemporaryDirectory(prefix="peers-compare-") as tmp:
            for q in QUERIES + JOIN_QUERIES:
                runs = (("laminar", False),) if q in JOIN_QUERIES else \
                    (("laminar", False), ("laminar_wm", True))
                if q not in LAMINAR_SQL and q not in LAMINAR_JOIN_SQL:
                    if q in ("q5_full", "q7_full"):
                        why = "joins windows, which LaminarDB does not emit"
                    elif q == "q8":
                        why = "joins windowed aggregates, whose windows LaminarDB does not emit"
                    else:
                        why = "no LaminarDB spelling here"
                    for key, _ in runs:
                        results[q][key] = {"error": f"not run: {why}", "eps": 0}
                    continue
                if q in LAMINAR_NEEDS_WATERMARK:
                    results[q]["laminar"] = {
                        "error": "not run: LaminarDB emits windows only with a WATERMARK",
                        "eps": 0}
                    runs = (("laminar_wm", True),)
                sluice_rows = os.path.join(tmp, f"{q}.sluice.csv")
                sluice_output(args.sluice, args.root, q, csvs, sluice_rows)
                for key, wm in runs:
                    log(f"laminardb {q} ({'with' if wm else 'without'} WATERMARK)")
                    dump = os.path.join(tmp, f"{q}.{key}.csv")
                    try:
                        r = laminar(args.laminardb, q, csvs, results[q]["expected"], wm, dump)
                        differ, extra, lost = compare_rows(dump, sluice_rows)
                        # With a WATERMARK the driver ends the input with one
                        # more row a day later (laminardb-rs input.rs), which
                        # a query without windows passes through.
                        if (wm and q not in LAMINAR_NEEDS_WATERMARK and extra == 1
                                and lost == 0 and expected_plus_one(r, results[q])):
                            differ, r["out_rows"] = None, r["out_rows"] - 1
                            r["sentinel"] = True
                        r["rows_differ"] = differ
                        results[q][key] = r
                    except Exception as e:  # report, do not hide
                        results[q][key] = {"error": describe(e), "eps": 0}

    if "flink" not in args.skip:
        import importlib.metadata
        versions.append(f"apache-flink {importlib.metadata.version('apache-flink')}")
        log("starting PyFlink (JVM + local mini-cluster)")
        env = flink_env()
        count_env = flink_env(batch=True)
        if "rows" not in results:  # ONLY= named join queries alone
            with open(args.headerless_csv, "rb") as f:
                results["rows"] = sum(1 for _ in f)
        log("flink warm-up job (untimed)")
        flink(env, count_env, "q2", {"bid": args.headerless_csv}, results["rows"], 1)
        bid_csv = {"bid": args.csv}
        for q in QUERIES + JOIN_QUERIES:
            log(f"flink {q}, alternating with sluice {q} (csv)")
            sluice_runs = []
            q_csvs = csvs if q in JOIN_QUERIES else bid_csv
            rows = results[q]["sluice_csv"]["rows"] if q in JOIN_QUERIES else results["rows"]
            try:
                results[q]["flink"] = flink(
                    env, count_env, q, headerless if q in JOIN_QUERIES else
                    {"bid": args.headerless_csv}, rows, args.repeat,
                    before_each=lambda: sluice_runs.append(
                        sluice_csv_once(args.sluice, args.root, q, q_csvs)))
            except Exception as e:
                results[q]["flink"] = {"error": describe(e), "eps": 0}
            if sluice_runs:
                results[q]["sluice_csv"] = dict(results[q]["sluice_csv"],
                                                **best_of(sluice_runs))

    versions.insert(0, "Sluice release build")
    text = markdown(results, args, ", ".join(versions))
    print(text)
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump(results, f, indent=2)
    if args.markdown_into:
        write_section(args.markdown_into, "peers", text)


if __name__ == "__main__":
    main()
