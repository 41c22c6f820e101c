-- Nexmark q20, expand bid with auction: every bid with the columns of its
-- auction, for auctions in category 10. Same computation as the published
-- query (an inner join of bids and auctions on the auction id, filtered on
-- category). Differences: both inputs have date_time and extra, which the
-- published query selects twice; here the auction's are named
-- auction_date_time and auction_extra. The condition does not bound time,
-- so the join keeps every row of both sides (EXPLAIN: "left rows: kept;
-- right rows: kept").
CREATE SOURCE auction (
    id BIGINT, item_name VARCHAR, description VARCHAR, initial_bid BIGINT,
    reserve BIGINT, date_time TIMESTAMP, expires TIMESTAMP, seller BIGINT,
    category BIGINT, extra VARCHAR,
    WATERMARK FOR date_time AS date_time - INTERVAL '2' SECOND
) WITH (connector = 'nexmark', stream = 'auction', events = '1000000',
        out_of_order_ms = '2000', seed = '0');

CREATE SOURCE bid (
    auction BIGINT, bidder BIGINT, price BIGINT, channel VARCHAR, url VARCHAR,
    date_time TIMESTAMP, extra VARCHAR,
    WATERMARK FOR date_time AS date_time - INTERVAL '2' SECOND
) WITH (connector = 'nexmark', stream = 'bid', events = '1000000',
        out_of_order_ms = '2000', seed = '0');

CREATE STREAM q20 AS
SELECT B.auction, B.bidder, B.price, B.channel, B.url, B.date_time, B.extra,
       A.item_name, A.description, A.initial_bid, A.reserve,
       A.date_time AS auction_date_time, A.expires, A.seller, A.category,
       A.extra AS auction_extra
FROM bid AS B JOIN auction AS A ON B.auction = A.id
WHERE A.category = 10;
