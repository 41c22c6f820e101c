-- Nexmark q14, calculation: bids priced (in euros, 0.908 * price) between
-- 1,000,000 and 50,000,000, with the time of day classified and the number
-- of 'c' characters in extra. The published query counts them with a
-- user-defined function (count_char); Sluice has no UDFs, so the count is
-- length(extra) - length(replace(extra, 'c', '')), the same number. Flink's
-- HOUR(ts) is EXTRACT(HOUR FROM ts) here (UTC, as the generator's times).
-- Difference: 0.908 * price is a DOUBLE here (a DECIMAL in Flink).
CREATE SOURCE bid (
    auction BIGINT, bidder BIGINT, price BIGINT, channel VARCHAR, url VARCHAR,
    date_time TIMESTAMP, extra VARCHAR,
    WATERMARK FOR date_time AS date_time - INTERVAL '2' SECOND
) WITH (connector = 'nexmark', stream = 'bid', events = '1000000',
        out_of_order_ms = '2000', seed = '0');

CREATE STREAM q14 AS
SELECT auction, bidder, 0.908 * price AS price,
       CASE
           WHEN EXTRACT(HOUR FROM date_time) >= 8 AND EXTRACT(HOUR FROM date_time) <= 18
               THEN 'dayTime'
           WHEN EXTRACT(HOUR FROM date_time) <= 6 OR EXTRACT(HOUR FROM date_time) >= 20
               THEN 'nightTime'
           ELSE 'otherTime'
       END AS bid_time_type,
       date_time, extra,
       length(extra) - length(replace(extra, 'c', '')) AS c_counts
FROM bid
WHERE 0.908 * price > 1000000 AND 0.908 * price < 50000000;
