-- Nexmark q17, auction statistics report: per auction and day, the number
-- of bids overall and in three price ranges (below 10,000; 10,000 to
-- 1,000,000; 1,000,000 and above) and the minimum, maximum, average and
-- total price. Differences: the published query groups by the day as text
-- (DATE_FORMAT) in an updating aggregate and counts each range with
-- FILTER (WHERE ...); here the day is a 1-day tumbling window (its start,
-- a timestamp, as day), so each row is emitted once, final, when the day
-- closes, and each FILTER is a CASE inside the count.
CREATE SOURCE bid (
    auction BIGINT, bidder BIGINT, price BIGINT, channel VARCHAR, url VARCHAR,
    date_time TIMESTAMP, extra VARCHAR,
    WATERMARK FOR date_time AS date_time - INTERVAL '2' SECOND
) WITH (connector = 'nexmark', stream = 'bid', events = '1000000',
        out_of_order_ms = '2000', seed = '0');

CREATE STREAM q17 AS
SELECT auction, tumble(date_time, INTERVAL '1' DAY) AS day,
       COUNT(*) AS total_bids,
       COUNT(CASE WHEN price < 10000 THEN 1 END) AS rank1_bids,
       COUNT(CASE WHEN price >= 10000 AND price < 1000000 THEN 1 END) AS rank2_bids,
       COUNT(CASE WHEN price >= 1000000 THEN 1 END) AS rank3_bids,
       MIN(price) AS min_price, MAX(price) AS max_price,
       AVG(price) AS avg_price, SUM(price) AS sum_price
FROM bid
GROUP BY auction, tumble(date_time, INTERVAL '1' DAY)
EMIT ON WINDOW CLOSE;
