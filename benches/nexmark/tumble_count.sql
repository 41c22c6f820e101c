-- Not a Nexmark query: bids and highest price per auction in 10-second
-- tumbling windows. The windowed workload of the side-by-side comparison
-- with peers (benches/peers), since every peer can express it.
CREATE SOURCE bid (
    auction BIGINT, bidder BIGINT, price BIGINT, channel VARCHAR, url VARCHAR,
    date_time TIMESTAMP, extra VARCHAR,
    WATERMARK FOR date_time AS date_time - INTERVAL '2' SECOND
) WITH (connector = 'nexmark', stream = 'bid', events = '1000000',
        out_of_order_ms = '2000', seed = '0');

CREATE STREAM tumble_count AS
SELECT auction,
       tumble(date_time, INTERVAL '10' SECOND) AS window_start,
       tumble_end(date_time, INTERVAL '10' SECOND) AS window_end,
       COUNT(*) AS bids,
       MAX(price) AS maxprice
FROM bid
GROUP BY auction,
         tumble(date_time, INTERVAL '10' SECOND),
         tumble_end(date_time, INTERVAL '10' SECOND)
EMIT ON WINDOW CLOSE;
