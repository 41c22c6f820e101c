-- Nexmark q5 in full, hot items: per 10-second window sliding by 2 seconds,
-- the auction(s) with the most bids. The counts per auction and window
-- (q5.sql) are final when their window closes, so the highest count per
-- window is a tumble over their window end (every hop window ends on a
-- multiple of the slide), and joining the two on window and count keeps the
-- winners. The join forgets rows of a window once the watermark passes it.
CREATE SOURCE bid (
    auction BIGINT, bidder BIGINT, price BIGINT, channel VARCHAR, url VARCHAR,
    date_time TIMESTAMP, extra VARCHAR,
    WATERMARK FOR date_time AS date_time - INTERVAL '2' SECOND
) WITH (connector = 'nexmark', stream = 'bid', events = '1000000',
        out_of_order_ms = '2000', seed = '0');

CREATE STREAM counts AS
SELECT auction,
       hop(date_time, INTERVAL '2' SECOND, INTERVAL '10' SECOND) AS window_start,
       hop_end(date_time, INTERVAL '2' SECOND, INTERVAL '10' SECOND) AS window_end,
       COUNT(*) AS num
FROM bid
GROUP BY auction,
         hop(date_time, INTERVAL '2' SECOND, INTERVAL '10' SECOND),
         hop_end(date_time, INTERVAL '2' SECOND, INTERVAL '10' SECOND);

CREATE STREAM top_count AS
SELECT tumble(window_end, INTERVAL '2' SECOND) AS slot, MAX(num) AS maxnum
FROM counts
GROUP BY tumble(window_end, INTERVAL '2' SECOND);

CREATE STREAM q5_full AS
SELECT C.auction, C.window_start, C.window_end, C.num
FROM counts AS C JOIN top_count AS T
  ON C.window_end = T.slot AND C.num = T.maxnum;
