-- Nexmark q13, bounded side input join: every bid with a value looked up
-- in a side table. The published query joins a static side table (key,
-- value) FOR SYSTEM_TIME AS OF the bid's processing time, on the bid's
-- auction id modulo 10,000. Sluice has neither processing time nor a
-- lookup table connector in this benchmark, so the side input is a second,
-- smaller source joined as a stream: the generator's persons (one event in
-- 50), with the person id as key and the name as value. The generator's
-- ids carry a large per-run offset, so auction id modulo 10,000 would match
-- no person id; the lookup key is the bid's bidder instead, which is a
-- person id, so each bid finds exactly one side row, as in the published
-- query. Differences: it is an inner join of two streams, so a bid meets
-- its side row whichever arrives first (the published one sees the side
-- table as it is when the bid is processed), and the join keeps every row
-- of both sides (no time bound; EXPLAIN: "left rows: kept; right rows:
-- kept").
CREATE SOURCE side_input (
    id BIGINT, name VARCHAR, date_time TIMESTAMP,
    WATERMARK FOR date_time AS date_time - INTERVAL '2' SECOND
) WITH (connector = 'nexmark', stream = 'person', events = '1000000',
        out_of_order_ms = '2000', seed = '0');

CREATE SOURCE bid (
    auction BIGINT, bidder BIGINT, price BIGINT, channel VARCHAR, url VARCHAR,
    date_time TIMESTAMP, extra VARCHAR,
    WATERMARK FOR date_time AS date_time - INTERVAL '2' SECOND
) WITH (connector = 'nexmark', stream = 'bid', events = '1000000',
        out_of_order_ms = '2000', seed = '0');

CREATE STREAM q13 AS
SELECT B.auction, B.bidder, B.price, B.date_time, S.name AS value
FROM bid AS B JOIN side_input AS S ON B.bidder = S.id;
