CREATE STREAM стр AS SELECT '😀' AS e, name || 'é' FROM t;
