-- Nexmark q5, hot items: bids per auction in 10-second windows sliding every
-- 2 seconds. This is q5's aggregate part; the full query, which keeps, per
-- window, the auctions with the most bids (a join against the per-window
-- maximum), is q5_full.sql.
CREATE SOURCE bid (
    auction BIGINT, bidder BIGINT, price BIGINT, channel VARCHAR, url VARCHAR,
    date_time TIMESTAMP, extra VARCHAR,
    WATERMARK FOR date_time AS date_time - INTERVAL '2' SECOND
) WITH (connector = 'nexmark', stream = 'bid', events = '1000000',
        out_of_order_ms = '2000', seed = '0');

CREATE STREAM q5 AS
SELECT auction,
       hop(date_time, INTERVAL '2' SECOND, INTERVAL '10' SECOND) AS window_start,
       hop_end(date_time, INTERVAL '2' SECOND, INTERVAL '10' SECOND) AS window_end,
       COUNT(*) AS num
FROM bid
GROUP BY auction,
         hop(date_time, INTERVAL '2' SECOND, INTERVAL '10' SECOND),
         hop_end(date_time, INTERVAL '2' SECOND, INTERVAL '10' SECOND)
EMIT ON WINDOW CLOSE;
