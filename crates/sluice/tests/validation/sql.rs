//! The SQL front end's refusals: exact codes and messages for bad types,
//! unknown words, errors at the end of the input, function signatures and
//! window arguments.

async fn db() -> sluice::Database {
    sluice::Database::open_in_memory().await.unwrap()
}

async fn refused(db: &sluice::Database, sql: &str, code: &str) -> String {
    let e = db
        .execute(sql)
        .await
        .expect_err(&format!("{sql} must be refused"));
    assert_eq!(e.code(), code, "{sql}: {e}");
    e.to_string()
}

#[tokio::test]
async fn decimal_beyond_38_digits_is_refused_at_create_naming_column_and_type() {
    let db = db().await;
    let msg = refused(
        &db,
        "CREATE SOURCE d (id BIGINT, amount DECIMAL(50, 2))",
        "SLC-SQL-004",
    )
    .await;
    assert_eq!(
        msg,
        "type error: column 'amount': DECIMAL(50,2) is not supported: the precision must be 1 to 38 and the scale 0 to the precision"
    );
    let msg = refused(&db, "CREATE SOURCE d (amount DECIMAL(4, 5))", "SLC-SQL-004").await;
    assert_eq!(
        msg,
        "type error: column 'amount': DECIMAL(4,5) is not supported: the precision must be 1 to 38 and the scale 0 to the precision"
    );
    db.execute("CREATE SOURCE d (amount DECIMAL(38, 2))")
        .await
        .unwrap();
    db.shutdown().await.unwrap();
}

const SUM_VARCHAR: &str = "type error: function sum(VARCHAR) cannot take these argument types (it takes sum(DECIMAL), sum(BIGINT UNSIGNED), sum(BIGINT), sum(DOUBLE), sum(Duration), sum(Interval)); CAST the arguments to a type it takes";

#[tokio::test]
async fn sum_of_varchar_is_a_type_error_in_streams_and_in_select() {
    let db = db().await;
    db.execute("CREATE SOURCE s (name VARCHAR, ts TIMESTAMP, WATERMARK FOR ts AS ts)")
        .await
        .unwrap();
    let msg = refused(
        &db,
        "CREATE STREAM total AS SELECT SUM(name) AS t FROM s GROUP BY tumble(ts, INTERVAL '1' SECOND)",
        "SLC-SQL-004",
    )
    .await;
    assert_eq!(msg, SUM_VARCHAR);
    db.execute("CREATE MATERIALIZED VIEW names AS SELECT name, COUNT(*) AS n FROM s GROUP BY name")
        .await
        .unwrap();
    let msg = refused(&db, "SELECT SUM(name) FROM names", "SLC-SQL-004").await;
    assert_eq!(msg, SUM_VARCHAR);
    db.shutdown().await.unwrap();
}

#[tokio::test]
async fn an_unknown_word_after_create_drop_or_show_is_named_with_its_position() {
    let db = db().await;
    let cases = [
        (
            "CREATE SORUCE s (a BIGINT)",
            "syntax error: unknown word 'SORUCE' at Line: 1, Column: 8 after CREATE: expected SOURCE, STREAM, MATERIALIZED VIEW, SINK",
        ),
        (
            "CREATE\n  TABEL t (a BIGINT)",
            "syntax error: unknown word 'TABEL' at Line: 2, Column: 3 after CREATE: expected SOURCE, STREAM, MATERIALIZED VIEW, SINK",
        ),
        (
            "DROP SORUCE s",
            "syntax error: unknown word 'SORUCE' at Line: 1, Column: 6 after DROP: expected SOURCE, STREAM, MATERIALIZED VIEW, SINK",
        ),
        (
            "SHOW SORUCES",
            "syntax error: unknown word 'SORUCES' at Line: 1, Column: 6 after SHOW: expected SOURCES, STREAMS, MATERIALIZED VIEWS, SINKS",
        ),
        (
            "CREATE",
            "syntax error: the end of the statement at Line: 1, Column: 7 after CREATE: expected SOURCE, STREAM, MATERIALIZED VIEW, SINK",
        ),
    ];
    for (sql, want) in cases {
        assert_eq!(refused(&db, sql, "SLC-SQL-001").await, want, "{sql}");
    }
    db.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_syntax_error_at_the_end_of_the_input_has_a_line_and_column() {
    let db = db().await;
    let cases = [
        (
            "CREATE SOURCE s (a BIGINT,\n  b BIGINT",
            "syntax error: sql parser error: Expected: ), found: EOF at Line: 2, Column: 11",
        ),
        (
            "CREATE SOURCE s (a BIGINT);\nSELECT 1 +",
            "syntax error: sql parser error: Expected: an expression, found: EOF at Line: 2, Column: 11",
        ),
        (
            "CREATE SOURCE s (a BIGINT) WITH (connector = 'file'  \n\n",
            "syntax error: sql parser error: Expected: ), found: EOF at Line: 1, Column: 52",
        ),
    ];
    for (sql, want) in cases {
        assert_eq!(refused(&db, sql, "SLC-SQL-001").await, want, "{sql}");
    }
    db.shutdown().await.unwrap();
}

#[tokio::test]
async fn window_arguments_are_checked_and_hop_is_capped_at_1000_windows_per_row() {
    let db = db().await;
    db.execute("CREATE SOURCE s (k BIGINT, ts TIMESTAMP, WATERMARK FOR ts AS ts)")
        .await
        .unwrap();
    let stream =
        |group: &str| format!("CREATE STREAM w AS SELECT COUNT(*) AS n FROM s GROUP BY {group}");
    let cases = [
        (
            "hop(ts, INTERVAL '1' MILLISECOND, INTERVAL '1' DAY)",
            "SLC-SQL-002",
            "unsupported: hop(): a size of 86400000 ms with a slide of 1 ms puts a row in up to 86400000 windows; at most 1000 windows per row are allowed (use a slide of at least size / 1000)",
        ),
        (
            "hop(ts, INTERVAL '1' SECOND, INTERVAL '1001' SECOND)",
            "SLC-SQL-002",
            "unsupported: hop(): a size of 1001000 ms with a slide of 1000 ms puts a row in up to 1001 windows; at most 1000 windows per row are allowed (use a slide of at least size / 1000)",
        ),
        (
            // Not a multiple: a row falls in 1000 or 1001 windows.
            "hop(ts, INTERVAL '2' MILLISECOND, INTERVAL '2001' MILLISECOND)",
            "SLC-SQL-002",
            "unsupported: hop(): a size of 2001 ms with a slide of 2 ms puts a row in up to 1001 windows; at most 1000 windows per row are allowed (use a slide of at least size / 1000)",
        ),
        (
            "hop(ts, INTERVAL '0' SECOND, INTERVAL '1' SECOND)",
            "SLC-SQL-004",
            "type error: hop(): the slide must be positive, found 0 ms",
        ),
        (
            "hop(ts, INTERVAL '1' SECOND, INTERVAL '-1' SECOND)",
            "SLC-SQL-004",
            "type error: hop(): the size must be positive, found -1000 ms",
        ),
        (
            "tumble(ts, INTERVAL '0' SECOND)",
            "SLC-SQL-004",
            "type error: tumble(): the size must be positive, found 0 ms",
        ),
        (
            "session(ts, INTERVAL '0' SECOND)",
            "SLC-SQL-004",
            "type error: session(): the gap must be positive, found 0 ms",
        ),
    ];
    for (group, code, want) in cases {
        let sql = stream(group);
        assert_eq!(refused(&db, &sql, code).await, want, "{sql}");
    }
    // Exactly at the cap is fine, and so is a size that is not a multiple
    // of the slide (larger or smaller than it).
    for (i, group) in [
        "hop(ts, INTERVAL '1' SECOND, INTERVAL '1000' SECOND)",
        "hop(ts, INTERVAL '2' MILLISECOND, INTERVAL '1999' MILLISECOND)",
        "hop(ts, INTERVAL '2' SECOND, INTERVAL '3' SECOND)",
        "hop(ts, INTERVAL '2' SECOND, INTERVAL '1' SECOND)",
    ]
    .into_iter()
    .enumerate()
    {
        let sql = stream(group).replace("STREAM w ", &format!("STREAM w{i} "));
        db.execute(&sql).await.unwrap();
    }
    db.shutdown().await.unwrap();
}
