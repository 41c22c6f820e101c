-- Sluice quickstart: live auction analytics over a file of bids.
--
-- Run it from the repository root:
--
--     cargo run -p sluice-cli -- run examples/quickstart.sql
--
-- Relative paths below resolve against this file's directory, so the input
-- is examples/data/bids.csv and the results appear under examples/out/.

-- The input: one row per bid. Event time is date_time; bids may arrive up to
-- 4 seconds out of order, so the watermark trails the latest bid by 4 s. A
-- bid older than the watermark is late: instead of being dropped silently it
-- is diverted to the stream late_bids. The file is read 10 rows at a time,
-- so the watermark advances while this small file is read (with one big
-- batch, every row would arrive before the first watermark and none would be
-- late).
CREATE SOURCE bids (
    auction BIGINT,
    bidder BIGINT,
    price BIGINT,
    channel VARCHAR,
    date_time TIMESTAMP,
    WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND
) LATE DATA TO late_bids
WITH (connector = 'file', path = 'data/bids.csv', format = 'csv', batch_size = '10');

-- A filtered projection: big bids, with the channel upper-cased. Rows flow
-- straight through, in arrival order.
CREATE STREAM big_bids AS
SELECT auction, bidder, price, upper(channel) AS channel, date_time
FROM bids
WHERE price >= 1000;

-- Tumbling windows: per auction and 10-second window, the number of bids,
-- their average and their highest price. EMIT ON WINDOW CLOSE writes each
-- window once, final, when the watermark passes its end.
CREATE STREAM avg_price AS
SELECT auction,
       tumble(date_time, INTERVAL '10' SECOND) AS window_start,
       COUNT(*) AS bids,
       AVG(price) AS avg_price,
       MAX(price) AS max_price
FROM bids
GROUP BY auction, tumble(date_time, INTERVAL '10' SECOND)
EMIT ON WINDOW CLOSE;

-- Hopping windows: bids per auction over the last 30 seconds, every 10
-- seconds (so each bid counts in three overlapping windows).
CREATE STREAM activity AS
SELECT auction,
       hop(date_time, INTERVAL '10' SECOND, INTERVAL '30' SECOND) AS window_start,
       COUNT(*) AS bids,
       SUM(price) AS volume
FROM bids
GROUP BY auction, hop(date_time, INTERVAL '10' SECOND, INTERVAL '30' SECOND)
EMIT ON WINDOW CLOSE;

-- Sinks write files that appear atomically when the run completes
-- successfully (never half-written, and not at all if the run fails).
CREATE SINK avg_price_csv FROM avg_price
WITH (connector = 'file', path = 'out/avg_price.csv', format = 'csv');

-- The late bids, kept for inspection instead of lost.
CREATE SINK late_bids_csv FROM late_bids
WITH (connector = 'file', path = 'out/late_bids.csv', format = 'csv');

CREATE SINK big_bids_csv FROM big_bids
WITH (connector = 'file', path = 'out/big_bids.csv', format = 'csv');

-- A sink can filter: only busy 30-second windows, as JSON lines.
CREATE SINK hot_auctions_json FROM activity WHERE bids >= 8
WITH (connector = 'file', path = 'out/hot_auctions.jsonl', format = 'json');

-- Print what was declared.
SHOW SINKS;
