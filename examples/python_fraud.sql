-- A process function written in Python, declared and run from SQL alone.
--
-- Run it from the repository root (needs python3 with the SDK,
-- `pip install ./python/sluice-worker`, and bubblewrap):
--
--     cargo run -p sluice-cli -- run examples/python_fraud.sql
--
-- The handler is python/examples/fraud/fraud.py: it flags a bidder whose
-- second bid of at least 1000 comes within 10 seconds of the first. Sluice
-- starts it in a sandbox (no network, read-only files, an unprivileged
-- user), supervises it and restarts it if it dies; its state and timers
-- live in the engine. Relative paths resolve against this file's directory.
CREATE PROCESS FUNCTION big_spender VERSION 1 (key BIGINT NOT NULL, amount BIGINT NOT NULL)
    KEY (key)
    RETURNS (value BIGINT NOT NULL)
    WITH (runtime = 'python', path = '../python/examples/fraud', entry = 'fraud:Detector');

CREATE SOURCE bids (
    auction BIGINT,
    bidder BIGINT,
    price BIGINT,
    channel VARCHAR,
    date_time TIMESTAMP,
    WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND
)
WITH (connector = 'file', path = 'data/bids.csv', format = 'csv', batch_size = '10');

-- The function reads (key, amount): the bidder and the price.
CREATE STREAM bid_amounts AS
SELECT bidder AS key, price AS amount FROM bids WHERE bidder IS NOT NULL AND price IS NOT NULL;

CREATE STREAM alerts AS PROCESS big_spender FROM bid_amounts;

CREATE SINK alerts_out FROM alerts
WITH (connector = 'file', path = 'out/python_alerts.csv', format = 'csv');
