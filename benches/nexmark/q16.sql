-- Nexmark q16, channel statistics report: per channel and day, the number of bids, of
-- distinct bidders and of distinct auctions, overall and in three price
-- ranges (below 10,000; 10,000 to 1,000,000; 1,000,000 and above).
-- minute is the latest 'HH:MM' at which the channel saw a bid that day.
-- Differences: the published query groups by the day as text
-- (DATE_FORMAT) in an updating aggregate and counts each range with
-- FILTER (WHERE ...); here the day is a 1-day tumbling window (its start,
-- a timestamp, as day), so each day's row is emitted once, final, when the
-- day closes, and each FILTER is written as a CASE inside the count
-- (COUNT(CASE WHEN p THEN x END) counts the rows where p holds).
CREATE SOURCE bid (
    auction BIGINT, bidder BIGINT, price BIGINT, channel VARCHAR, url VARCHAR,
    date_time TIMESTAMP, extra VARCHAR,
    WATERMARK FOR date_time AS date_time - INTERVAL '2' SECOND
) WITH (connector = 'nexmark', stream = 'bid', events = '1000000',
        out_of_order_ms = '2000', seed = '0');

CREATE STREAM q16 AS
SELECT channel, tumble(date_time, INTERVAL '1' DAY) AS day,
       MAX(to_char(date_time, '%H:%M')) AS minute,
       COUNT(*) AS total_bids,
       COUNT(CASE WHEN price < 10000 THEN 1 END) AS rank1_bids,
       COUNT(CASE WHEN price >= 10000 AND price < 1000000 THEN 1 END) AS rank2_bids,
       COUNT(CASE WHEN price >= 1000000 THEN 1 END) AS rank3_bids,
       COUNT(DISTINCT bidder) AS total_bidders,
       COUNT(DISTINCT CASE WHEN price < 10000 THEN bidder END) AS rank1_bidders,
       COUNT(DISTINCT CASE WHEN price >= 10000 AND price < 1000000 THEN bidder END) AS rank2_bidders,
       COUNT(DISTINCT CASE WHEN price >= 1000000 THEN bidder END) AS rank3_bidders,
       COUNT(DISTINCT auction) AS total_auctions,
       COUNT(DISTINCT CASE WHEN price < 10000 THEN auction END) AS rank1_auctions,
       COUNT(DISTINCT CASE WHEN price >= 10000 AND price < 1000000 THEN auction END) AS rank2_auctions,
       COUNT(DISTINCT CASE WHEN price >= 1000000 THEN auction END) AS rank3_auctions
FROM bid
GROUP BY channel, tumble(date_time, INTERVAL '1' DAY)
EMIT ON WINDOW CLOSE;
