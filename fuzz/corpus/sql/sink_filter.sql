CREATE SINK out1 FROM per_auction WHERE bids >= 8 WITH (connector = 'file', path = 'out/x.csv', format = 'csv');
EXPLAIN CREATE SINK out2 FROM bids WHERE price > 1 WITH (connector = 'file', path = 'out/y.jsonl');
