-- Nexmark q22, get URL directories: every bid with the first three
-- directories of its url. The published query uses Flink's SPLIT_INDEX (a
-- 0-based index; the URL 'https://www.nexmark.com/a/b/c/item.htm' splits
-- on '/' into 'https:', '', 'www.nexmark.com', 'a', ...); here it is
-- split_part with 1-based positions 4, 5 and 6. Difference: SPLIT_INDEX
-- returns NULL past the last part where split_part returns ''; every
-- generated url has more than six parts, so the results agree.
CREATE SOURCE bid (
    auction BIGINT, bidder BIGINT, price BIGINT, channel VARCHAR, url VARCHAR,
    date_time TIMESTAMP, extra VARCHAR,
    WATERMARK FOR date_time AS date_time - INTERVAL '2' SECOND
) WITH (connector = 'nexmark', stream = 'bid', events = '1000000',
        out_of_order_ms = '2000', seed = '0');

CREATE STREAM q22 AS
SELECT auction, bidder, price, channel,
       split_part(url, '/', 4) AS dir1,
       split_part(url, '/', 5) AS dir2,
       split_part(url, '/', 6) AS dir3
FROM bid;
