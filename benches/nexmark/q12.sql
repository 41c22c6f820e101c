-- Nexmark q12, processing-time windows: bids per bidder in 10-second
-- tumbling windows. The published query windows on processing time
-- (PROCTIME()); Sluice has only event time, so this windows on the bid's
-- date_time instead, and its result is deterministic (the published one
-- depends on when the engine sees each row). Written with Flink's window
-- table-valued function, as published.
CREATE SOURCE bid (
    auction BIGINT, bidder BIGINT, price BIGINT, channel VARCHAR, url VARCHAR,
    date_time TIMESTAMP, extra VARCHAR,
    WATERMARK FOR date_time AS date_time - INTERVAL '2' SECOND
) WITH (connector = 'nexmark', stream = 'bid', events = '1000000',
        out_of_order_ms = '2000', seed = '0');

CREATE STREAM q12 AS
SELECT bidder, COUNT(*) AS bid_count, window_start, window_end
FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(date_time), INTERVAL '10' SECOND))
GROUP BY bidder, window_start, window_end;
