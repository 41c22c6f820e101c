-- A process function served by a remote Rust worker, declared from SQL.
--
-- Start the worker first (it serves the built-in fraud detector as
-- 'remote_fraud' on a Unix socket), then run this file from the
-- repository root:
--
--     cargo run -p sluice-remote --example remote_fraud_worker -- unix:/tmp/sluice-fraud.sock &
--     cargo run -p sluice-cli -- run examples/remote_fraud.sql
--
-- The declaration must match what the worker serves (name, version,
-- columns, key): the handshake compares binding hashes and refuses a
-- mismatch, naming both sides.
CREATE PROCESS FUNCTION remote_fraud VERSION 1 (key BIGINT NOT NULL, amount BIGINT NOT NULL)
    KEY (key)
    RETURNS (value BIGINT NOT NULL)
    WITH (runtime = 'remote_rust', endpoint = 'unix:/tmp/sluice-fraud.sock');

CREATE SOURCE bids (
    auction BIGINT,
    bidder BIGINT,
    price BIGINT,
    channel VARCHAR,
    date_time TIMESTAMP,
    WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND
)
WITH (connector = 'file', path = 'data/bids.csv', format = 'csv', batch_size = '10');

CREATE STREAM bid_amounts AS
SELECT bidder AS key, price AS amount FROM bids WHERE bidder IS NOT NULL AND price IS NOT NULL;

CREATE STREAM alerts AS PROCESS remote_fraud FROM bid_amounts;

CREATE SINK alerts_out FROM alerts
WITH (connector = 'file', path = 'out/remote_alerts.csv', format = 'csv');
