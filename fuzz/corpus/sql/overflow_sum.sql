CREATE STREAM o AS SELECT name, SUM(big * big) AS sq, SUM(CAST(ubig AS BIGINT)) FROM t GROUP BY name;
