-- Nexmark q3, local item suggestion: auctions in category 10 with the
-- name, city and state of their seller, for sellers in Oregon, Idaho or
-- California. An inner join of two append-only streams: every auction meets
-- its seller whichever arrives first. Both sources read the same generator
-- (same seed and event count), so auction sellers are persons it produced.
-- The `nexmark` crate writes states in lower case ('or', not 'OR').
CREATE SOURCE person (
    id BIGINT, name VARCHAR, city VARCHAR, state VARCHAR, date_time TIMESTAMP,
    WATERMARK FOR date_time AS date_time - INTERVAL '2' SECOND
) WITH (connector = 'nexmark', stream = 'person', events = '1000000',
        out_of_order_ms = '2000', seed = '0');

CREATE SOURCE auction (
    id BIGINT, seller BIGINT, category BIGINT, date_time TIMESTAMP,
    WATERMARK FOR date_time AS date_time - INTERVAL '2' SECOND
) WITH (connector = 'nexmark', stream = 'auction', events = '1000000',
        out_of_order_ms = '2000', seed = '0');

CREATE STREAM q3 AS
SELECT P.name, P.city, P.state, A.id
FROM auction AS A JOIN person AS P ON A.seller = P.id
WHERE A.category = 10 AND (P.state = 'or' OR P.state = 'id' OR P.state = 'ca');
