//! The fingerprint is pinned, covers every component of the catalog, and
//! follows declaration order as documented.

use std::path::PathBuf;
use std::sync::Arc;

use sluice_sql::{parse_sql, Statement, StreamPlanner};

use super::{fingerprint, fingerprint_version, object_fingerprints, FINGERPRINT_VERSION};
use crate::catalog::{Catalog, SinkConnector, SinkDef, SourceDef, StreamDef, StreamKind};
use crate::options::PipelineOptions;

/// A catalog from statements, built as the database builds it.
async fn catalog(sql: &str) -> Catalog {
    let mut c = Catalog::default();
    for stmt in parse_sql(sql).unwrap() {
        match stmt {
            Statement::CreateSource(s) => {
                let late = s.late_data_to.clone();
                let def = SourceDef::from_statement(s, &PipelineOptions::default(), None).unwrap();
                if let Some(late) = late {
                    c.streams.push(StreamDef {
                        name: late,
                        schema: Arc::clone(&def.schema),
                        changelog: false,
                        materialized: false,
                        kind: StreamKind::LateData {
                            source: def.name.clone(),
                        },
                    });
                }
                c.sources.push(def);
            }
            Statement::CreateStream(cs) => {
                let plan = StreamPlanner::plan_stream(&c, &cs).await.unwrap();
                c.streams.push(StreamDef {
                    name: plan.name.clone(),
                    schema: Arc::clone(&plan.schema),
                    changelog: plan.changelog,
                    materialized: plan.materialized,
                    kind: StreamKind::Query(Box::new(plan)),
                });
            }
            Statement::CreateSink(cs) => {
                let (schema, _) = c.readable(&cs.from, "sink").unwrap();
                let filter = match &cs.filter {
                    Some(f) => Some(StreamPlanner::plan_filter(&c, &cs.from, f).await.unwrap()),
                    None => None,
                };
                let mut with = cs.options;
                let path = with.take("path").unwrap();
                let format = crate::options::take_format(&mut with, &path, "sink").unwrap();
                c.sinks.push(SinkDef {
                    name: cs.name,
                    from: cs.from,
                    schema,
                    filter,
                    connector: SinkConnector::File {
                        path: PathBuf::from(&path),
                        declared: PathBuf::from(&path),
                        format,
                    },
                });
            }
            other => panic!("not a CREATE: {other:?}"),
        }
    }
    c
}

const SOURCE: &str = "CREATE SOURCE bids (auction BIGINT, price BIGINT NOT NULL, ts TIMESTAMP, \
                      WATERMARK FOR ts AS ts - INTERVAL '1' SECOND);";
const STREAM: &str = "CREATE STREAM per_auction AS SELECT auction, \
                      tumble(ts, INTERVAL '10' SECOND) AS ws, COUNT(*) AS n, SUM(price) AS total \
                      FROM bids WHERE price > 10 GROUP BY auction, tumble(ts, INTERVAL '10' SECOND);";
const SINK: &str = "CREATE SINK out FROM per_auction WHERE n > 1 \
                    WITH (connector = 'file', path = 'out.csv', format = 'csv');";

fn base() -> String {
    format!("{SOURCE}\n{STREAM}\n{SINK}")
}

/// The exact fingerprint of a fixed catalog: it changes only when the
/// encoding does (and then [`FINGERPRINT_VERSION`] must change with it).
#[tokio::test]
async fn the_fingerprint_of_a_fixed_catalog_is_pinned() {
    let c = catalog(&base()).await;
    let text = super::canonical(&c);
    assert!(
        text.starts_with(
            "source 4:bids push [(7:auction (i64) t) (5:price (i64) f) (2:ts (timestamp ms -) t)] \
             (2:ts 1000) -\n"
        ),
        "{text}"
    );
    assert_eq!(
        fingerprint(&c),
        "v1:7e1d0c58073dd50413b34c8c063c3d505fc76fbf3120198f9bba4615989a4ef4"
    );
    assert_eq!(FINGERPRINT_VERSION, "v1");
}

/// Each component of the catalog, changed alone, changes the fingerprint.
#[tokio::test]
async fn every_component_of_the_catalog_changes_the_fingerprint() {
    let base_sql = base();
    let base_fp = fingerprint(&catalog(&base_sql).await);
    let mut seen = vec![("base", base_fp.clone())];
    for (what, sql) in &variants(&base_sql) {
        assert_ne!(sql, &base_sql, "{what}: the variant changes the SQL");
        let fp = fingerprint(&catalog(sql).await);
        for (other, earlier) in &seen {
            assert_ne!(&fp, earlier, "{what} gives the fingerprint of {other}");
        }
        seen.push((what, fp));
    }
}

/// Each component changed alone changes the fingerprint of an object that
/// exists in both catalogs, or the set of objects (what a cluster names
/// when it refuses a node), and only the objects that own the component.
#[tokio::test]
async fn every_component_changes_an_object_fingerprint() {
    let base_sql = base();
    let base_objects = object_fingerprints(&catalog(&base_sql).await);
    assert_eq!(
        base_objects.keys().collect::<Vec<_>>(),
        ["sink out", "source bids", "stream per_auction"]
    );
    for (what, sql) in &variants(&base_sql) {
        let objects = object_fingerprints(&catalog(sql).await);
        assert_ne!(objects, base_objects, "{what}");
    }
    let base_objects = &base_objects;
    let changed = |sql: String| async move {
        let objects = object_fingerprints(&catalog(&sql).await);
        objects
            .iter()
            .filter(|(k, v)| base_objects.get(*k) != Some(*v))
            .map(|(k, _)| k.clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        changed(base_sql.replace("out.csv", "other.csv")).await,
        ["sink out"]
    );
    assert_eq!(
        changed(base_sql.replace("price > 10", "price > 11")).await,
        ["stream per_auction"]
    );
}

/// One variant per component of the catalog (see the test above).
fn variants(base_sql: &str) -> Vec<(&'static str, String)> {
    vec![
        ("source name", base_sql.replace("bids", "offers")),
        ("column name", base_sql.replace("auction", "item")),
        (
            "column type",
            base_sql.replace("price BIGINT NOT NULL", "price INT NOT NULL"),
        ),
        ("nullability", base_sql.replace(" NOT NULL", "")),
        (
            "watermark delay",
            base_sql.replace("ts - INTERVAL '1' SECOND", "ts - INTERVAL '2' SECOND"),
        ),
        (
            "watermark absent",
            base_sql.replace(
                "price BIGINT NOT NULL, ts TIMESTAMP, \
                 WATERMARK FOR ts AS ts - INTERVAL '1' SECOND)",
                "price BIGINT NOT NULL, ts TIMESTAMP)",
            ),
        ),
        (
            "late data stream",
            base_sql.replace(
                "INTERVAL '1' SECOND);",
                "INTERVAL '1' SECOND) LATE DATA TO late_bids;",
            ),
        ),
        (
            "source connector",
            base_sql.replace(
                "INTERVAL '1' SECOND);",
                "INTERVAL '1' SECOND) WITH (connector = 'file', path = 'in.csv');",
            ),
        ),
        ("stream name", base_sql.replace("per_auction", "by_auction")),
        (
            "materialized",
            base_sql.replace("CREATE STREAM", "CREATE MATERIALIZED VIEW"),
        ),
        (
            "filter literal",
            base_sql.replace("price > 10", "price > 11"),
        ),
        (
            "filter operator",
            base_sql.replace("price > 10", "price >= 10"),
        ),
        (
            "aggregate function",
            base_sql.replace("SUM(price)", "MAX(price)"),
        ),
        (
            "output column alias",
            base_sql.replace("AS total", "AS sum_price"),
        ),
        (
            "window size",
            base_sql.replace("INTERVAL '10' SECOND", "INTERVAL '20' SECOND"),
        ),
        (
            "emit mode",
            base_sql.replace(
                "GROUP BY auction, tumble(ts, INTERVAL '10' SECOND);",
                "GROUP BY auction, tumble(ts, INTERVAL '10' SECOND) EMIT CHANGES;",
            ),
        ),
        ("sink name", base_sql.replace("SINK out", "SINK result")),
        ("sink path", base_sql.replace("out.csv", "other.csv")),
        (
            "sink format",
            base_sql.replace("format = 'csv'", "format = 'json'"),
        ),
        (
            "sink filter",
            base_sql.replace("WHERE n > 1", "WHERE n > 2"),
        ),
        ("sink filter absent", base_sql.replace(" WHERE n > 1", "")),
        (
            "another object",
            format!("{base_sql}\nCREATE STREAM cheap AS SELECT * FROM bids WHERE price < 5;"),
        ),
    ]
}

/// Declaration order counts, even between objects that do not depend on
/// each other (state and blob names follow it); the same statements in
/// the same order always give the same fingerprint.
#[tokio::test]
async fn declaration_order_is_part_of_the_fingerprint_as_documented() {
    let a = "CREATE SOURCE a (k BIGINT);";
    let b = "CREATE SOURCE b (k BIGINT);";
    let sa = "CREATE STREAM fa AS SELECT k FROM a WHERE k > 0;";
    let sb = "CREATE STREAM fb AS SELECT k FROM b WHERE k > 0;";
    let ordered = fingerprint(&catalog(&format!("{a}{b}{sa}{sb}")).await);
    assert_eq!(
        ordered,
        fingerprint(&catalog(&format!("{a}{b}{sa}{sb}")).await),
        "deterministic"
    );
    assert_ne!(
        ordered,
        fingerprint(&catalog(&format!("{b}{a}{sa}{sb}")).await),
        "sources swapped"
    );
    assert_ne!(
        ordered,
        fingerprint(&catalog(&format!("{a}{b}{sb}{sa}")).await),
        "streams swapped"
    );
}

#[test]
fn the_version_is_read_from_the_prefix() {
    assert_eq!(fingerprint_version("v1:00ff"), "v1");
    assert_eq!(fingerprint_version("v2:00ff"), "v2");
    // Fingerprints of earlier releases: CRC-32 and length, no version.
    assert_eq!(fingerprint_version("1a2b3c4d-120"), "v0");
}
