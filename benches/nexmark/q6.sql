-- Nexmark q6, average selling price by seller: for each seller, the average
-- final price of their last 10 closed auctions. The published query takes
-- each auction's highest bid placed while it was open (an inner join of
-- auctions and bids, GROUP BY auction) and averages it over the seller's
-- last rows with AVG(...) OVER (PARTITION BY seller ORDER BY date_time
-- ROWS BETWEEN 10 PRECEDING AND CURRENT ROW). Flink itself cannot run it:
-- it refuses an OVER aggregation over an updating input.
--
-- Sluice runs it. The per-auction maximum is an updating aggregate (a
-- changelog: an auction's row is retracted and inserted again as higher
-- bids arrive), and an OVER aggregation over a changelog is a changelog
-- too, as in RisingWave: each seller's live auction rows are kept sorted by
-- date_time (ties by the whole row, where batch SQL leaves their order
-- arbitrary), and when an auction's row changes, that row and the 10 rows
-- after it retract their previous average and insert the new one, at the
-- end of each cycle. The folded changelog equals the query in batch
-- (crates/sluice-bench/tests/nexmark_queries.rs checks it against
-- DataFusion). Nothing is ever final, and the state is every auction's
-- row, never freed: it grows with the number of auctions (EXPLAIN says so).
-- Watermark alignment: read side by side, the auction stream (15 times the
-- event time per row of the bid stream, 3 times that of the person stream)
-- would run far ahead, and the join would keep its rows until the other
-- side caught up; holding its reader within 10 s keeps that state flat over
-- a longer replay (BENCHMARKS.md, memory table). The answer is the same.
SET watermark_max_drift = '10s';

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

CREATE STREAM q6 AS
SELECT seller,
       AVG(final) OVER (PARTITION BY seller ORDER BY date_time
                        ROWS BETWEEN 10 PRECEDING AND CURRENT ROW) AS avg_final
FROM (SELECT A.id, A.seller, MAX(B.date_time) AS date_time, MAX(B.price) AS final
      FROM auction AS A JOIN bid AS B ON A.id = B.auction
      WHERE B.date_time BETWEEN A.date_time AND A.expires
      GROUP BY A.id, A.seller) AS Q;
