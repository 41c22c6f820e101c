//! Record size cap (`max_record_bytes`), batch size range, JSON byte order
//! mark, and the empty-file warning.

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arrow::datatypes::DataType;
use sluice_connectors::{
    parse_max_record_bytes, ConnectorError, FileFormat, FileSourceConfig, FileSourceReader,
    OnError, DEFAULT_MAX_RECORD_BYTES,
};

use crate::support::*;

/// Run `f` on a thread; fail the test if it takes more than a minute
/// (a reader that hangs on an endless record must not hang the suite).
fn within_a_minute<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(60))
        .expect("timed out or panicked")
}

fn too_long(file: &std::path::Path, line: u64, limit: usize) -> String {
    format!(
        "{}:{line}: record is longer than max_record_bytes = {limit} bytes (allowed: 1024 to \
         1073741824 bytes); a file without line ends, or an unclosed quote, reads as one \
         endless record",
        file.display()
    )
}

fn capped(dir: &std::path::Path, file: &str, format: FileFormat, max: usize) -> FileSourceConfig {
    let mut cfg = config(
        dir,
        file,
        format,
        schema(&[("id", DataType::Int64), ("name", DataType::Utf8)]),
        100,
        OnError::Skip,
    );
    cfg.max_record_bytes = max;
    cfg
}

#[test]
fn max_record_bytes_option_values_and_range() {
    for (text, bytes) in [
        ("1024", 1024),
        (" 4096 ", 4096),
        ("1KiB", 1024),
        ("16 MiB", 16 << 20),
        ("16mib", 16 << 20),
        ("1GiB", 1 << 30),
        ("1073741824", 1 << 30),
    ] {
        assert_eq!(parse_max_record_bytes(text).unwrap(), bytes, "{text}");
    }
    assert_eq!(DEFAULT_MAX_RECORD_BYTES, 16 << 20);
    for text in [
        "0",
        "1023",
        "1073741825",
        "2GiB",
        "-1",
        "abc",
        "",
        "1.5MiB",
        "16MB",
    ] {
        let err = parse_max_record_bytes(text).unwrap_err();
        assert_eq!(err.code(), "SLC-CONN-004");
        assert_eq!(
            err.to_string(),
            format!(
                "invalid value for option 'max_record_bytes': '{}' is not a size from 1024 \
                 bytes (1 KiB) to 1073741824 bytes (1 GiB); write bytes, or a number with KiB, \
                 MiB or GiB",
                text.trim()
            )
        );
    }
    // A value set directly is checked when the reader opens.
    let dir = tempfile::tempdir().unwrap();
    write_file(dir.path(), "a.csv", "id,name\n1,a\n");
    for bad in [0, 1023, (1 << 30) + 1] {
        let err = open_err(capped(dir.path(), "a.csv", FileFormat::Csv, bad));
        assert_eq!(err.code(), "SLC-CONN-004");
        assert!(
            err.to_string().starts_with(&format!(
                "invalid value for option 'max_record_bytes': '{bad}'"
            )),
            "{err}"
        );
    }
}

#[test]
fn batch_size_range_is_checked() {
    let dir = tempfile::tempdir().unwrap();
    write_file(dir.path(), "a.csv", "id,name\n1,a\n");
    for (size, ok) in [
        (0, false),
        (1, true),
        (1 << 20, true),
        ((1 << 20) + 1, false),
    ] {
        let mut cfg = capped(dir.path(), "a.csv", FileFormat::Csv, 1024);
        cfg.batch_size = size;
        match FileSourceReader::open(cfg) {
            Ok(_) => assert!(ok, "{size} accepted"),
            Err(e) => {
                assert!(!ok, "{size}: {e}");
                assert_eq!(
                    e.to_string(),
                    format!(
                        "invalid value for option 'batch_size': {size} is not from 1 to 1048576"
                    )
                );
            }
        }
    }
}

/// A record of exactly the limit is read; one byte more is an error naming
/// file, line and limit, whatever `on_error` says, in both text formats.
#[test]
fn record_over_the_limit_is_an_error_naming_file_line_and_limit() {
    let dir = tempfile::tempdir().unwrap();
    let at_limit_csv = format!("2,{}", "n".repeat(1022));
    let over_csv = format!("3,{}", "n".repeat(1023));
    let csv = format!("id,name\n1,a\n\n{at_limit_csv}\n{over_csv}\n4,b\n");
    let csv_path = write_file(dir.path(), "a.csv", &csv);
    // {"id":2,"name":"…"} is 18 bytes of syntax around the name.
    let at_limit_json = format!("{{\"id\":2,\"name\":\"{}\"}}", "n".repeat(1024 - 18));
    let over_json = format!("{{\"id\":3,\"name\":\"{}\"}}", "n".repeat(1025 - 18));
    assert_eq!((at_limit_json.len(), over_json.len()), (1024, 1025));
    let json = format!("{{\"id\":1,\"name\":\"a\"}}\n\n{at_limit_json}\r\n{over_json}\n");
    let json_path = write_file(dir.path(), "a.jsonl", &json);
    for (file, format, path, line) in [
        ("a.csv", FileFormat::Csv, &csv_path, 5),
        ("a.jsonl", FileFormat::JsonLines, &json_path, 4),
    ] {
        for on_error in [OnError::Fail, OnError::Skip] {
            let mut cfg = capped(dir.path(), file, format, 1024);
            cfg.on_error = on_error;
            cfg.batch_size = 1;
            let mut reader = FileSourceReader::open(cfg).unwrap();
            let mut ids = Vec::new();
            let err = loop {
                match reader.next_batch() {
                    Ok(Some(b)) => ids.extend(i64s(&b, "id")),
                    Ok(None) => panic!("{file}: no error"),
                    Err(e) => break e,
                }
            };
            assert_eq!(ids, [Some(1), Some(2)], "{file}");
            assert!(matches!(err, ConnectorError::RecordTooLong { .. }));
            assert_eq!(err.code(), "SLC-CONN-009");
            assert_eq!(err.to_string(), too_long(path, line, 1024), "{file}");
        }
    }
}

/// `/dev/zero` (no line end, ever) and a 20 MB line fail cleanly with the
/// default limit, with a short message.
#[test]
fn endless_records_fail_fast_and_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let mut big = std::fs::File::create(dir.path().join("big.csv")).unwrap();
    big.write_all(b"id,name\n1,").unwrap();
    big.write_all(&vec![b'x'; 20 << 20]).unwrap();
    drop(big);
    let mut big = std::fs::File::create(dir.path().join("big.jsonl")).unwrap();
    big.write_all(b"{\"id\": 1}\n{\"name\": \"").unwrap();
    big.write_all(&vec![b'x'; 20 << 20]).unwrap();
    drop(big);
    let mut cases = vec![
        (dir.path().join("big.csv"), FileFormat::Csv, 2),
        (dir.path().join("big.jsonl"), FileFormat::JsonLines, 2),
    ];
    if std::path::Path::new("/dev/zero").exists() {
        cases.push(("/dev/zero".into(), FileFormat::Csv, 1));
        cases.push(("/dev/zero".into(), FileFormat::JsonLines, 1));
    }
    for (path, format, line) in cases {
        let cfg = config(
            dir.path(),
            path.to_str().unwrap(),
            format,
            schema(&[("id", DataType::Int64), ("name", DataType::Utf8)]),
            100,
            OnError::Fail,
        );
        let err = within_a_minute(move || match FileSourceReader::open(cfg) {
            Err(e) => e,
            Ok(mut reader) => loop {
                match reader.next_batch() {
                    Ok(Some(_)) => {}
                    Ok(None) => panic!("no error"),
                    Err(e) => break e,
                }
            },
        });
        assert_eq!(err.code(), "SLC-CONN-009", "{}: {err}", path.display());
        assert_eq!(err.to_string(), too_long(&path, line, 16 << 20));
    }
}

#[test]
fn json_accepts_a_byte_order_mark_at_the_start_only() {
    let dir = tempfile::tempdir().unwrap();
    let id_schema = schema(&[("id", DataType::Int64)]);
    let cfg = |file: &str| {
        config(
            dir.path(),
            file,
            FileFormat::JsonLines,
            id_schema.clone(),
            10,
            OnError::Fail,
        )
    };
    write_file(
        dir.path(),
        "bom.jsonl",
        "\u{feff}{\"id\": 1}\n{\"id\": 2}\n",
    );
    write_file(
        dir.path(),
        "bom-blank.jsonl",
        "\u{feff}\n{\"id\": 1}\n{\"id\": 2}\n",
    );
    for file in ["bom.jsonl", "bom-blank.jsonl"] {
        let batch = read_one(cfg(file));
        assert_eq!(i64s(&batch, "id"), [Some(1), Some(2)], "{file}");
    }
    // The CSV source agrees.
    write_file(dir.path(), "bom.csv", "\u{feff}id\n1\n2\n");
    let batch = read_one(config(
        dir.path(),
        "bom.csv",
        FileFormat::Csv,
        id_schema.clone(),
        10,
        OnError::Fail,
    ));
    assert_eq!(i64s(&batch, "id"), [Some(1), Some(2)]);
    // Anywhere else it is not JSON.
    let path = write_file(
        dir.path(),
        "late.jsonl",
        "{\"id\": 1}\n\u{feff}{\"id\": 2}\n",
    );
    let err = read_err(cfg("late.jsonl"));
    assert_eq!(err.code(), "SLC-CONN-002");
    assert_eq!(
        err.to_string(),
        format!(
            "{}:2: invalid JSON at character 1: expected value",
            path.display()
        )
    );
}

/// A `tracing` writer into a shared buffer.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The engine opens a source several times before reading it (at CREATE,
/// when the pipeline starts, when it narrows the columns read); the
/// empty-file warning comes once per file, from the read.
#[test]
fn empty_file_warning_once_per_file() {
    let dir = tempfile::tempdir().unwrap();
    write_file(dir.path(), "a-empty.csv", "");
    write_file(dir.path(), "b.csv", "id\n1\n");
    write_file(dir.path(), "c-empty.csv", "");
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .with_max_level(tracing::Level::WARN)
        .finish();
    tracing::subscriber::with_default(subscriber, || {
        let cfg = || {
            config(
                dir.path(),
                "*.csv",
                FileFormat::Csv,
                schema(&[("id", DataType::Int64)]),
                10,
                OnError::Fail,
            )
        };
        for _ in 0..2 {
            drop(FileSourceReader::open(cfg()).unwrap());
        }
        let batch = read_one(cfg());
        assert_eq!(i64s(&batch, "id"), [Some(1)]);
    });
    let text = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    let warnings: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("CSV file is empty"))
        .collect();
    assert_eq!(warnings.len(), 2, "{text}");
    for (warning, file) in warnings.iter().zip(["a-empty.csv", "c-empty.csv"]) {
        assert!(
            warning.contains(&dir.path().join(file).display().to_string()),
            "{warning}"
        );
    }
}
