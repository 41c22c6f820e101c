-- Nexmark q8, monitor new users: persons who opened an auction in the same
-- 10-second tumbling window in which they registered. Each side is a
-- windowed aggregate (append-only: each window's rows are final when it
-- closes), and the join matches them on id and window.
-- Watermark alignment: read side by side, the auction stream (15 times the
-- event time per row of the bid stream, 3 times that of the person stream)
-- would run far ahead, and the join would keep its rows until the other
-- side caught up; holding its reader within 10 s keeps that state flat over
-- a longer replay (BENCHMARKS.md, memory table). The answer is the same.
SET watermark_max_drift = '10s';

CREATE SOURCE person (
    id BIGINT, name VARCHAR, date_time TIMESTAMP,
    WATERMARK FOR date_time AS date_time - INTERVAL '2' SECOND
) WITH (connector = 'nexmark', stream = 'person', events = '1000000',
        out_of_order_ms = '2000', seed = '0');

CREATE SOURCE auction (
    seller BIGINT, date_time TIMESTAMP,
    WATERMARK FOR date_time AS date_time - INTERVAL '2' SECOND
) WITH (connector = 'nexmark', stream = 'auction', events = '1000000',
        out_of_order_ms = '2000', seed = '0');

CREATE STREAM q8 AS
SELECT P.id, P.name, P.starttime
FROM (SELECT id, name,
             tumble(date_time, INTERVAL '10' SECOND) AS starttime,
             tumble_end(date_time, INTERVAL '10' SECOND) AS endtime
      FROM person
      GROUP BY id, name, tumble(date_time, INTERVAL '10' SECOND),
               tumble_end(date_time, INTERVAL '10' SECOND)) P
JOIN (SELECT seller,
             tumble(date_time, INTERVAL '10' SECOND) AS starttime,
             tumble_end(date_time, INTERVAL '10' SECOND) AS endtime
      FROM auction
      GROUP BY seller, tumble(date_time, INTERVAL '10' SECOND),
               tumble_end(date_time, INTERVAL '10' SECOND)) A
ON P.id = A.seller AND P.starttime = A.starttime AND P.endtime = A.endtime;
