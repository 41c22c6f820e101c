CREATE STREAM s3 AS SELECT bidder, session(date_time, INTERVAL '30' SECOND) AS w, COUNT(*) FROM bids GROUP BY bidder, session(date_time, INTERVAL '30' SECOND) EMIT ON WINDOW CLOSE;
