-- Nexmark q11, user sessions: the number of bids each bidder made in each
-- of their sessions, a session ending after 10 seconds without a bid. Same
-- computation as the published query (GROUP BY bidder, SESSION(date_time,
-- INTERVAL '10' SECOND)); each session's row is emitted once, when the
-- watermark passes its last bid + 10 s. Differences: Flink's
-- SESSION_START / SESSION_END are session(...) / session_end(...) here.
CREATE SOURCE bid (
    auction BIGINT, bidder BIGINT, price BIGINT, channel VARCHAR, url VARCHAR,
    date_time TIMESTAMP, extra VARCHAR,
    WATERMARK FOR date_time AS date_time - INTERVAL '2' SECOND
) WITH (connector = 'nexmark', stream = 'bid', events = '1000000',
        out_of_order_ms = '2000', seed = '0');

CREATE STREAM q11 AS
SELECT bidder, COUNT(*) AS bid_count,
       session(date_time, INTERVAL '10' SECOND) AS starttime,
       session_end(date_time, INTERVAL '10' SECOND) AS endtime
FROM bid
GROUP BY bidder, session(date_time, INTERVAL '10' SECOND),
         session_end(date_time, INTERVAL '10' SECOND)
EMIT ON WINDOW CLOSE;
