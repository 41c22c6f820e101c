-- Nexmark q7 in full, highest bid: the bid(s) carrying the highest price of
-- each 10-second tumbling window. The window's maximum (q7.sql) is joined
-- back to the bids on price and window. The join forgets a bid once the
-- watermark is 10 s past it (its window's maximum has come by then) and a
-- maximum once its window ends.
CREATE SOURCE bid (
    auction BIGINT, bidder BIGINT, price BIGINT, channel VARCHAR, url VARCHAR,
    date_time TIMESTAMP, extra VARCHAR,
    WATERMARK FOR date_time AS date_time - INTERVAL '2' SECOND
) WITH (connector = 'nexmark', stream = 'bid', events = '1000000',
        out_of_order_ms = '2000', seed = '0');

CREATE STREAM max_per_window AS
SELECT tumble(date_time, INTERVAL '10' SECOND) AS window_start,
       tumble_end(date_time, INTERVAL '10' SECOND) AS window_end,
       MAX(price) AS maxprice
FROM bid
GROUP BY tumble(date_time, INTERVAL '10' SECOND),
         tumble_end(date_time, INTERVAL '10' SECOND);

CREATE STREAM q7_full AS
SELECT B.auction, B.price, B.bidder, B.date_time, B.extra
FROM bid AS B JOIN max_per_window AS M
  ON B.price = M.maxprice
 AND B.date_time >= M.window_start AND B.date_time < M.window_end;
