//! Declarations that would destroy or mix data are refused at `CREATE`
//! with error code SLC-ENG-012 and both names.

use std::path::{Path, PathBuf};

use crate::LIMIT;

const CONFLICT: &str = "SLC-ENG-012";

struct Fixture {
    _dir: tempfile::TempDir,
    /// The base directory, canonical (as the messages print it).
    base: PathBuf,
    db: sluice::Database,
}

async fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().canonicalize().unwrap();
    std::fs::create_dir_all(base.join("in")).unwrap();
    std::fs::write(base.join("in/a.csv"), "k,ts\n1,1970-01-01T00:00:00\n").unwrap();
    std::fs::write(base.join("input.csv"), "k,ts\n1,1970-01-01T00:00:00\n").unwrap();
    let db = sluice::Database::builder()
        .base_dir(dir.path())
        .open()
        .await
        .unwrap();
    Fixture {
        _dir: dir,
        base,
        db,
    }
}

fn shown(p: &Path) -> String {
    p.display().to_string()
}

async fn refused(db: &sluice::Database, sql: &str) -> String {
    let e = db
        .execute(sql)
        .await
        .expect_err(&format!("{sql} must be refused"));
    assert_eq!(e.code(), CONFLICT, "{sql}: {e}");
    e.to_string()
}

const SOURCE_COLS: &str = "(k BIGINT, ts TIMESTAMP, WATERMARK FOR ts AS ts)";

#[tokio::test]
async fn two_sinks_on_one_file_are_refused_whatever_the_spelling() {
    tokio::time::timeout(LIMIT, async {
        let f = fixture().await;
        f.db.execute(&format!("CREATE SOURCE s {SOURCE_COLS}"))
            .await
            .unwrap();
        f.db.execute("CREATE SINK first FROM s WITH (connector = 'file', path = 'out/o.csv')")
            .await
            .unwrap();
        let out = shown(&f.base.join("out/o.csv"));
        let absolute = format!("{}/out/./o.csv", f.base.display());
        for path in ["out/o.csv", "./out/o.csv", "in/../out/o.csv", absolute.as_str()] {
            let msg = refused(
                &f.db,
                &format!("CREATE SINK second FROM s WITH (connector = 'file', path = '{path}', format = 'csv')"),
            )
            .await;
            assert_eq!(
                msg,
                format!("conflict: sink 'second' would write '{out}', which sink 'first' already writes; each sink needs its own file"),
                "{path}"
            );
        }
        // Another file in the same folder is fine.
        f.db.execute("CREATE SINK second FROM s WITH (connector = 'file', path = 'out/p.csv')")
            .await
            .unwrap();
        f.db.shutdown().await.unwrap();
    })
    .await
    .expect("timed out");
}

#[tokio::test]
async fn a_sink_on_a_source_input_file_is_refused() {
    tokio::time::timeout(LIMIT, async {
        let f = fixture().await;
        f.db.execute(&format!(
            "CREATE SOURCE lit {SOURCE_COLS} WITH (connector = 'file', path = 'input.csv')"
        ))
        .await
        .unwrap();
        let input = shown(&f.base.join("input.csv"));
        let msg = refused(
            &f.db,
            "CREATE SINK clobber FROM lit WITH (connector = 'file', path = './input.csv')",
        )
        .await;
        assert_eq!(
            msg,
            format!("conflict: sink 'clobber' would write '{input}', which source 'lit' reads '{input}'; a sink must not replace a source's input")
        );
        f.db.shutdown().await.unwrap();
    })
    .await
    .expect("timed out");
}

#[tokio::test]
async fn a_sink_on_a_file_a_source_glob_matches_is_refused_even_before_it_exists() {
    tokio::time::timeout(LIMIT, async {
        let f = fixture().await;
        f.db.execute(&format!(
            "CREATE SOURCE many {SOURCE_COLS} WITH (connector = 'file', path = 'in/*.csv')"
        ))
        .await
        .unwrap();
        let pattern = format!("{}/in/*.csv", f.base.display());
        for (path, file) in [("in/a.csv", "in/a.csv"), ("in/new.csv", "in/new.csv")] {
            let msg = refused(
                &f.db,
                &format!("CREATE SINK clobber FROM many WITH (connector = 'file', path = '{path}')"),
            )
            .await;
            let target = shown(&f.base.join(file));
            assert_eq!(
                msg,
                format!("conflict: sink 'clobber' would write '{target}', which source 'many' reads the files matching '{pattern}'; a sink must not replace a source's input")
            );
        }
        // A file the glob does not match (other extension, hidden, or a
        // sub-folder) is fine.
        for path in ["in/out.json", "in/.hidden.csv", "in/sub/x.csv"] {
            f.db.execute(&format!(
                "CREATE SINK ok_{} FROM many WITH (connector = 'file', path = '{path}', format = 'csv')",
                path.len()
            ))
            .await
            .unwrap();
        }
        f.db.shutdown().await.unwrap();
    })
    .await
    .expect("timed out");
}

#[tokio::test]
async fn a_source_reading_a_sink_output_file_is_refused() {
    tokio::time::timeout(LIMIT, async {
        let f = fixture().await;
        f.db.execute(&format!("CREATE SOURCE s {SOURCE_COLS}"))
            .await
            .unwrap();
        f.db.execute("CREATE SINK out FROM s WITH (connector = 'file', path = 'input.csv')")
            .await
            .unwrap();
        let input = shown(&f.base.join("input.csv"));
        let msg = refused(
            &f.db,
            &format!("CREATE SOURCE back {SOURCE_COLS} WITH (connector = 'file', path = 'input.csv')"),
        )
        .await;
        assert_eq!(
            msg,
            format!("conflict: source 'back' reads '{input}', which includes '{input}' that sink 'out' writes; a source must not read a file a sink replaces")
        );
        f.db.shutdown().await.unwrap();
    })
    .await
    .expect("timed out");
}

#[tokio::test]
async fn late_data_to_must_name_a_new_stream() {
    tokio::time::timeout(LIMIT, async {
        let f = fixture().await;
        f.db.execute(&format!("CREATE SOURCE other {SOURCE_COLS}"))
            .await
            .unwrap();
        f.db.execute("CREATE STREAM st AS SELECT k FROM other")
            .await
            .unwrap();
        f.db.execute("CREATE SINK sk FROM other WITH (connector = 'file', path = 'sk.csv')")
            .await
            .unwrap();
        let cases = [
            ("s", "conflict: source 's': LATE DATA TO 's' names the source itself; it must name a new stream"),
            ("other", "conflict: source 's': LATE DATA TO 'other' names an existing source; it must name a new stream"),
            ("st", "conflict: source 's': LATE DATA TO 'st' names an existing stream; it must name a new stream"),
            ("sk", "conflict: source 's': LATE DATA TO 'sk' names an existing sink; it must name a new stream"),
        ];
        for (late, want) in cases {
            let msg = refused(
                &f.db,
                &format!("CREATE SOURCE s {SOURCE_COLS} LATE DATA TO {late}"),
            )
            .await;
            assert_eq!(msg, want);
        }
        // Nothing was half-created: a new name works.
        f.db.execute(&format!("CREATE SOURCE s {SOURCE_COLS} LATE DATA TO s_late"))
            .await
            .unwrap();
        f.db.shutdown().await.unwrap();
    })
    .await
    .expect("timed out");
}
