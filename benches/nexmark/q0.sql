-- Nexmark q0: passthrough. Measures the cost of moving bids through the
-- pipeline with no computation.
-- `sluice bench nexmark --query q0` replaces the source below by a push
-- source of the same columns and watermark; `sluice run` reads it as is.
CREATE SOURCE bid (
    auction BIGINT, bidder BIGINT, price BIGINT, channel VARCHAR, url VARCHAR,
    date_time TIMESTAMP, extra VARCHAR,
    WATERMARK FOR date_time AS date_time - INTERVAL '2' SECOND
) WITH (connector = 'nexmark', stream = 'bid', events = '1000000',
        out_of_order_ms = '2000', seed = '0');

CREATE STREAM q0 AS
SELECT auction, bidder, price, date_time, extra
FROM bid;
