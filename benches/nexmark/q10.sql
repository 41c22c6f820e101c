-- Nexmark q10, log to file system: every bid with its date ('YYYY-MM-DD')
-- and its time of day ('HH:MM') as text, the columns the published query
-- partitions its file sink by. Differences: the published query writes to
-- a partitioned filesystem sink; here the result is a stream (add a
-- CREATE SINK ... WITH (connector = 'file') to write it, unpartitioned).
-- Flink's DATE_FORMAT(ts, 'yyyy-MM-dd') is to_char(ts, '%Y-%m-%d') here.
CREATE SOURCE bid (
    auction BIGINT, bidder BIGINT, price BIGINT, channel VARCHAR, url VARCHAR,
    date_time TIMESTAMP, extra VARCHAR,
    WATERMARK FOR date_time AS date_time - INTERVAL '2' SECOND
) WITH (connector = 'nexmark', stream = 'bid', events = '1000000',
        out_of_order_ms = '2000', seed = '0');

CREATE STREAM q10 AS
SELECT auction, bidder, price, date_time, extra,
       to_char(date_time, '%Y-%m-%d') AS dt,
       to_char(date_time, '%H:%M') AS hm
FROM bid;
