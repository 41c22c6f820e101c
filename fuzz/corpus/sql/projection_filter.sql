CREATE STREAM f AS SELECT big * 2 AS b2, upper(name) AS n, CAST(amount AS DOUBLE) / 3 AS third, ts FROM t WHERE flag AND big > 10 OR name LIKE 'a%';
