-- Nexmark q19, auction top-10 price: the 10 highest bids of each auction,
-- numbered. Same computation as the published query (ROW_NUMBER() OVER
-- (PARTITION BY auction ORDER BY price DESC) <= 10 over the bids). The
-- output is a changelog: a bid entering an auction's top 10 is inserted,
-- one pushed out or renumbered is retracted; state is 10 rows per auction
-- (it grows with auctions). Bids of equal price are numbered in an order
-- fixed by the whole row (Flink leaves that unspecified).
CREATE SOURCE bid (
    auction BIGINT, bidder BIGINT, price BIGINT, channel VARCHAR, url VARCHAR,
    date_time TIMESTAMP, extra VARCHAR,
    WATERMARK FOR date_time AS date_time - INTERVAL '2' SECOND
) WITH (connector = 'nexmark', stream = 'bid', events = '1000000',
        out_of_order_ms = '2000', seed = '0');

CREATE STREAM q19 AS
SELECT *
FROM (SELECT auction, bidder, price, channel, url, date_time, extra,
             ROW_NUMBER() OVER (PARTITION BY auction ORDER BY price DESC) AS rank_number
      FROM bid)
WHERE rank_number <= 10;
