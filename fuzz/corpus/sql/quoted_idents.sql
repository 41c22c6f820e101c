CREATE SOURCE "Odd Name" ("col with space" BIGINT, "é" VARCHAR); CREATE STREAM "x""y" AS SELECT "col with space" FROM "Odd Name";
