CREATE SOURCE f1 (a BIGINT, b VARCHAR) WITH (connector = 'file', path = 'missing/*.csv', format = 'csv', on_error = 'skip', batch_size = '10');
CREATE SOURCE f2 (a BIGINT) WITH (connector = 'file', path = 'x.parquet', idle_timeout = '1s');
