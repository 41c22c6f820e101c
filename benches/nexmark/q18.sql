-- Nexmark q18, find last bid: each bidder's latest bid on each auction.
-- Same computation as the published query (ROW_NUMBER() OVER (PARTITION BY
-- bidder, auction ORDER BY date_time DESC) = 1 over the bids). The output
-- is a changelog: a bidder's last bid on an auction is retracted when a
-- later one arrives; the top-N keeps one row per (bidder, auction), so
-- state grows with those pairs. Bids at the same millisecond are ordered
-- by the whole row (Flink leaves that unspecified). rank_number is not
-- selected (always 1).
CREATE SOURCE bid (
    auction BIGINT, bidder BIGINT, price BIGINT, channel VARCHAR, url VARCHAR,
    date_time TIMESTAMP, extra VARCHAR,
    WATERMARK FOR date_time AS date_time - INTERVAL '2' SECOND
) WITH (connector = 'nexmark', stream = 'bid', events = '1000000',
        out_of_order_ms = '2000', seed = '0');

CREATE STREAM q18 AS
SELECT auction, bidder, price, channel, url, date_time, extra
FROM (SELECT auction, bidder, price, channel, url, date_time, extra,
             ROW_NUMBER() OVER (PARTITION BY bidder, auction
                                ORDER BY date_time DESC) AS rank_number
      FROM bid)
WHERE rank_number <= 1;
