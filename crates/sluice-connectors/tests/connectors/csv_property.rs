//! Property test of the CSV reader against a direct model: generated rows
//! with quoting, doubled quotes, embedded newlines and commas, non-ASCII
//! text, CRLF or LF line ends, blank lines, malformed values and records
//! with the wrong field count, read with `on_error = 'skip'` in random
//! batch sizes, with a long text column parsed or left unread.

use arrow::compute::concat_batches;
use arrow::datatypes::{DataType, TimeUnit, TimestampMillisecondType};
use proptest::prelude::*;
use sluice_connectors::{FileFormat, FileSourceReader, OnError};

use crate::support::*;

/// One generated data row and whether the reader must keep it.
#[derive(Debug, Clone)]
struct Row {
    id: Result<i64, String>,
    name: String,
    millis: i64,
    /// A long text column, read or left unparsed.
    pad: String,
    /// Quote every field of this row even where not needed.
    quote_all: bool,
    /// Write an extra field, making the record malformed.
    extra_field: bool,
}

fn row() -> impl Strategy<Value = Row> {
    let id = prop_oneof![
        8 => any::<i64>().prop_map(Ok),
        1 => "[a-z]{1,3}[0-9]?".prop_map(Err),
        1 => Just(Err("99999999999999999999".to_string())),
    ];
    let name = "[a-z ,\"\né€\r]{0,12}";
    (
        id,
        name,
        0i64..4_000_000_000_000,
        "[a-z,\"]{0,80}",
        any::<bool>(),
        prop::bool::weighted(0.05),
    )
        .prop_map(|(id, name, millis, pad, quote_all, extra_field)| Row {
            id,
            name,
            millis,
            pad,
            quote_all,
            extra_field,
        })
}

fn field(text: &str, quote_all: bool) -> String {
    if quote_all || text.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", text.replace('"', "\"\""))
    } else {
        text.to_string()
    }
}

fn timestamp(millis: i64) -> String {
    chrono::DateTime::from_timestamp_millis(millis)
        .unwrap()
        .format("%Y-%m-%d %H:%M:%S%.3f")
        .to_string()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    #[test]
    fn csv_reader_matches_model(
        rows in prop::collection::vec(row(), 0..120),
        crlf in any::<bool>(),
        blank_every in 0usize..7,
        batch_size in 1usize..40,
        pad_unread in any::<bool>(),
    ) {
        let eol = if crlf { "\r\n" } else { "\n" };
        let mut text = format!("id,pad,name,ts{eol}");
        for (i, r) in rows.iter().enumerate() {
            let id = match &r.id {
                Ok(v) => v.to_string(),
                Err(bad) => bad.clone(),
            };
            text.push_str(&field(&id, r.quote_all));
            text.push(',');
            text.push_str(&field(&r.pad, r.quote_all));
            text.push(',');
            text.push_str(&field(&r.name, r.quote_all));
            text.push(',');
            text.push_str(&field(&timestamp(r.millis), r.quote_all));
            if r.extra_field {
                text.push_str(",x");
            }
            text.push_str(eol);
            if blank_every > 0 && i % blank_every == 0 {
                text.push_str(eol);
            }
        }
        let dir = tempfile::tempdir().unwrap();
        write_file(dir.path(), "p.csv", &text);
        let schema = schema(&[
            ("id", DataType::Int64),
            ("name", DataType::Utf8),
            ("ts", DataType::Timestamp(TimeUnit::Millisecond, None)),
            ("pad", DataType::Utf8),
        ]);
        let mut config = config(dir.path(), "p.csv", FileFormat::Csv, schema.clone(), batch_size, OnError::Skip);
        if pad_unread {
            config.unread_columns = vec!["pad".to_string()];
        }
        let mut reader = FileSourceReader::open(config).unwrap();
        let batches = read_all(&mut reader, batch_size);
        let batch = concat_batches(&schema, &batches).unwrap();

        let kept: Vec<&Row> = rows.iter().filter(|r| r.id.is_ok() && !r.extra_field).collect();
        let ids: Vec<Option<i64>> = kept.iter().map(|r| r.id.clone().ok()).collect();
        let names: Vec<Option<String>> = kept
            .iter()
            .map(|r| (!r.name.is_empty()).then(|| r.name.clone()))
            .collect();
        let stamps: Vec<Option<i64>> = kept.iter().map(|r| Some(r.millis)).collect();
        let pads: Vec<Option<String>> = kept
            .iter()
            .map(|r| (!pad_unread && !r.pad.is_empty()).then(|| r.pad.clone()))
            .collect();
        prop_assert_eq!(strs(&batch, "pad"), pads);
        prop_assert_eq!(i64s(&batch, "id"), ids);
        prop_assert_eq!(strs(&batch, "name"), names);
        prop_assert_eq!(prim::<TimestampMillisecondType>(&batch, "ts"), stamps);
        prop_assert_eq!(reader.skipped_rows(), (rows.len() - kept.len()) as u64);
    }
}
