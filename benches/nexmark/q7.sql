-- Nexmark q7, highest bid: the highest price in each 10-second tumbling
-- window. This is q7's aggregate part; the full query, which joins back to
-- the bids to return the bid(s) carrying that price, is q7_full.sql.
CREATE SOURCE bid (
    auction BIGINT, bidder BIGINT, price BIGINT, channel VARCHAR, url VARCHAR,
    date_time TIMESTAMP, extra VARCHAR,
    WATERMARK FOR date_time AS date_time - INTERVAL '2' SECOND
) WITH (connector = 'nexmark', stream = 'bid', events = '1000000',
        out_of_order_ms = '2000', seed = '0');

CREATE STREAM q7 AS
SELECT tumble(date_time, INTERVAL '10' SECOND) AS window_start,
       tumble_end(date_time, INTERVAL '10' SECOND) AS window_end,
       MAX(price) AS maxprice
FROM bid
GROUP BY tumble(date_time, INTERVAL '10' SECOND),
         tumble_end(date_time, INTERVAL '10' SECOND)
EMIT ON WINDOW CLOSE;
