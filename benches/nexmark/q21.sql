-- Nexmark q21, add channel id: bids from a known channel (apple, google,
-- facebook, baidu: ids 0 to 3) or whose url carries a channel_id query
-- parameter, with that id. The published query extracts the parameter with
-- REGEXP_EXTRACT(url, '(&|^)channel_id=([^&]*)', 2); here it is
-- split_part(split_part(url, '&channel_id=', 2), '&', 1) when the url
-- contains '&channel_id=' and NULL otherwise. The generator's urls start
-- with 'https://', so the regular expression's '^channel_id=' alternative
-- never matches and the two agree on every generated url.
CREATE SOURCE bid (
    auction BIGINT, bidder BIGINT, price BIGINT, channel VARCHAR, url VARCHAR,
    date_time TIMESTAMP, extra VARCHAR,
    WATERMARK FOR date_time AS date_time - INTERVAL '2' SECOND
) WITH (connector = 'nexmark', stream = 'bid', events = '1000000',
        out_of_order_ms = '2000', seed = '0');

CREATE STREAM q21 AS
SELECT auction, bidder, price, channel,
       CASE
           WHEN lower(channel) = 'apple' THEN '0'
           WHEN lower(channel) = 'google' THEN '1'
           WHEN lower(channel) = 'facebook' THEN '2'
           WHEN lower(channel) = 'baidu' THEN '3'
           WHEN strpos(url, '&channel_id=') > 0
               THEN split_part(split_part(url, '&channel_id=', 2), '&', 1)
       END AS channel_id
FROM bid
WHERE strpos(url, '&channel_id=') > 0
   OR lower(channel) IN ('apple', 'google', 'facebook', 'baidu');
