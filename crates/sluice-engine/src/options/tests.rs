//! Every pipeline option, enumerated: values at and just past each bound,
//! zero, huge and garbage, each accepted or refused with its exact message.

use std::collections::BTreeSet;
use std::time::Duration;

use super::*;

/// Why a value is refused.
#[derive(Debug, Clone, Copy)]
enum Refusal {
    /// `option 'x': 'v' is out of range (<allowed>)`.
    Range,
    /// Not parseable as the option's kind at all.
    Garbage,
}

use Refusal::{Garbage, Range};

const HUGE_COUNT: &str = "2305843009213693952";
const HUGER_THAN_U64: &str = "340282366920938463463374607431768211456";

/// (option, values that must be accepted, values that must be refused).
type Row = (
    &'static str,
    Vec<&'static str>,
    Vec<(&'static str, Refusal)>,
);

/// Every option's row.
fn table() -> Vec<Row> {
    let durations_10ms = |off: bool| {
        let mut ok = vec!["10ms", "11ms", "1s", "1h", "24h", "1day", " 5s "];
        if off {
            ok.extend(["off", "none", "0", "OFF"]);
        }
        let mut bad = vec![
            ("9ms", Range),
            ("0ms", Range),
            ("1ns", Range),
            ("86400001ms", Range),
            ("2days", Range),
            ("300000000000y", Range),
            ("99999999999999999999999999s", Range),
            ("fast", Garbage),
            ("", Garbage),
            ("-1s", Garbage),
        ];
        if !off {
            bad.extend([("0s", Range), ("off", Garbage)]);
        } else {
            bad.push(("0s", Range));
        }
        (ok, bad)
    };
    let counts = |max: &'static str, max_plus_1: &'static str, also_ok: &'static str| {
        (
            vec!["1", "2", also_ok, max, " 3 "],
            vec![
                ("0", Range),
                ("-1", Range),
                (max_plus_1, Range),
                (HUGE_COUNT, Range),
                (HUGER_THAN_U64, Range),
                ("lots", Garbage),
                ("", Garbage),
                ("1.5", Garbage),
                ("1e3", Garbage),
            ],
        )
    };
    let (ci_ok, ci_bad) = durations_10ms(true);
    let (cat_ok, cat_bad) = durations_10ms(false);
    let (ct_ok, ct_bad) = durations_10ms(false);
    let (retain_ok, retain_bad) = counts("10000", "10001", "3");
    let (share_ok, share_bad) = counts("100", "101", "25");
    let (batch_ok, batch_bad) = counts("1048576", "1048577", "8192");
    let (chan_ok, chan_bad) = counts("65536", "65537", "16");
    let (sb_ok, sb_bad) = counts("16777216", "16777217", "1000000");
    let (sh_ok, sh_bad) = counts("65536", "65537", "16");
    let (shb_ok, shb_bad) = counts("1099511627776", "1099511627777", "67108864");
    let (mb_ok, mb_bad) = counts("65536", "65537", "64");
    // Byte budgets start at 1 KiB.
    let bytes = || {
        (
            vec!["1024", "1025", "67108864", "1099511627776", " 4096 "],
            vec![
                ("1023", Range),
                ("1", Range),
                ("0", Range),
                ("-1", Range),
                ("1099511627777", Range),
                (HUGE_COUNT, Range),
                (HUGER_THAN_U64, Range),
                ("64MiB", Garbage),
                ("", Garbage),
                ("1.5", Garbage),
            ],
        )
    };
    let (sq_ok, sq_bad) = bytes();
    let (kq_ok, kq_bad) = bytes();
    let (sbb_ok, sbb_bad) = bytes();
    let (phb_ok, phb_bad) = bytes();
    vec![
        ("checkpoint_interval", ci_ok, ci_bad),
        (
            "delivery",
            vec![
                "at_least_once",
                "exactly_once",
                "EXACTLY_ONCE",
                " exactly_once ",
            ],
            vec![("exactly-once", Garbage), ("", Garbage), ("0", Garbage)],
        ),
        (
            "checkpoint_store",
            vec!["file:///tmp/x", "s3://bucket/path", "relative/dir"],
            vec![("", Garbage), ("   ", Garbage)],
        ),
        ("checkpoint_retain", retain_ok, retain_bad),
        ("checkpoint_tail_share", share_ok, share_bad),
        ("checkpoint_alignment_timeout", cat_ok, cat_bad),
        ("checkpoint_timeout", ct_ok, ct_bad),
        (
            "checkpoint_store_lease",
            vec!["1s", "1001ms", "30s", "1h", " 10s "],
            vec![
                ("999ms", Range),
                ("0s", Range),
                ("3600001ms", Range),
                ("1day", Range),
                ("off", Garbage),
                ("soon", Garbage),
                ("", Garbage),
            ],
        ),
        (
            "idle_timeout",
            vec!["1ms", "2ms", "250ms", "5s", "1day"],
            vec![
                ("0s", Range),
                ("999us", Range),
                ("86400001ms", Range),
                ("300000000000y", Range),
                ("soon", Garbage),
                ("", Garbage),
                ("off", Garbage),
            ],
        ),
        (
            "watermark_max_drift",
            vec!["off", "0", "1ms", "2ms", "10s", "1day", " 5s "],
            vec![
                ("0s", Range),
                ("999us", Range),
                ("86400001ms", Range),
                ("300000000000y", Range),
                ("soon", Garbage),
                ("", Garbage),
                ("-1s", Garbage),
            ],
        ),
        ("batch_size", batch_ok, batch_bad),
        ("channel_capacity", chan_ok, chan_bad),
        ("subscription_buffer", sb_ok, sb_bad),
        ("subscription_history", sh_ok, sh_bad),
        ("subscription_history_bytes", shb_ok, shb_bad),
        ("max_batches_per_cycle", mb_ok, mb_bad),
        (
            "restart_budget",
            vec!["0", "1", "3", "1000", " 2 "],
            vec![
                ("1001", Range),
                ("-1", Range),
                (HUGE_COUNT, Range),
                ("many", Garbage),
                ("", Garbage),
                ("1.5", Garbage),
            ],
        ),
        (
            "restart_backoff",
            vec!["1ms", "100ms", "5s", "1min", " 2s "],
            vec![
                ("0s", Range),
                ("999us", Range),
                ("60001ms", Range),
                ("1h", Range),
                ("off", Garbage),
                ("soon", Garbage),
                ("", Garbage),
            ],
        ),
        ("source_queue_bytes", sq_ok, sq_bad),
        ("sink_queue_bytes", kq_ok, kq_bad),
        ("subscription_buffer_bytes", sbb_ok, sbb_bad),
        ("process_held_input_bytes", phb_ok, phb_bad),
        (
            "subscription_on_lag",
            vec!["backpressure", "disconnect", "DISCONNECT", " backpressure "],
            vec![("drop", Garbage), ("", Garbage), ("0", Garbage)],
        ),
    ]
}

#[test]
fn the_table_covers_every_pipeline_option_and_every_spec() {
    let tabled: BTreeSet<&str> = table().iter().map(|(n, _, _)| *n).collect();
    let listed: BTreeSet<&str> = PIPELINE_OPTIONS.iter().copied().collect();
    let specced: BTreeSet<&str> = PIPELINE_OPTION_SPECS.iter().map(|s| s.name).collect();
    assert_eq!(tabled, listed, "the test table must cover PIPELINE_OPTIONS");
    assert_eq!(specced, listed, "every option needs a spec");
    assert_eq!(PIPELINE_OPTIONS.len(), PIPELINE_OPTION_SPECS.len());
}

#[test]
fn every_option_accepts_its_range_and_refuses_the_rest_with_the_range() {
    for (name, ok, bad) in table() {
        let spec = spec(name).unwrap();
        for v in ok {
            let mut o = PipelineOptions::default();
            o.set(name, v)
                .unwrap_or_else(|e| panic!("{name} = '{v}' must be accepted: {e}"));
            // Upper-case names are the same option.
            PipelineOptions::default()
                .set(&name.to_ascii_uppercase(), v)
                .unwrap();
        }
        for (v, why) in bad {
            let mut o = PipelineOptions::default();
            let before = o.clone();
            let e = o.set(name, v).unwrap_err();
            assert_eq!(e.code(), "SLC-ENG-003", "{name} = '{v}': {e}");
            let msg = e.to_string();
            match why {
                Range => assert_eq!(
                    msg,
                    format!(
                        "invalid option: option '{name}': '{v}' is out of range ({})",
                        spec.allowed()
                    )
                ),
                Garbage => {
                    assert!(msg.contains(&format!("option '{name}'")), "{msg}");
                    assert!(
                        msg.contains(&format!("'{v}'")) || v.trim().is_empty(),
                        "{msg}"
                    );
                    if !matches!(spec.kind, OptionKind::Text) {
                        assert!(msg.contains(&spec.allowed()), "{msg}");
                    }
                }
            }
            assert_eq!(o, before, "a refused value must change nothing");
        }
    }
}

#[test]
fn the_ranges_read_as_documented() {
    let allowed = |n: &str| spec(n).unwrap().allowed();
    assert_eq!(allowed("checkpoint_interval"), "10ms to 1day, or off");
    assert_eq!(allowed("checkpoint_alignment_timeout"), "10ms to 1day");
    assert_eq!(allowed("idle_timeout"), "1ms to 1day");
    assert_eq!(allowed("channel_capacity"), "1 to 65536");
    let e = PipelineOptions::default()
        .set("checkpoint_interval", "0s")
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "invalid option: option 'checkpoint_interval': '0s' is out of range (10ms to 1day, or off)"
    );
}

#[test]
fn accepted_values_land_in_their_fields() {
    let mut o = PipelineOptions::default();
    o.set("checkpoint_interval", "1day").unwrap();
    assert_eq!(o.checkpoint_interval, Some(Duration::from_secs(86_400)));
    o.set("checkpoint_interval", "off").unwrap();
    assert_eq!(o.checkpoint_interval, None);
    o.set("idle_timeout", "250ms").unwrap();
    assert_eq!(o.idle_timeout, Duration::from_millis(250));
    o.set("delivery", "EXACTLY_ONCE").unwrap();
    assert_eq!(o.delivery, Delivery::ExactlyOnce);
    o.set("channel_capacity", "65536").unwrap();
    assert_eq!(o.channel_capacity, 65_536);
    o.set("checkpoint_store", " s3://b/p ").unwrap();
    assert_eq!(o.source_queue_bytes, 64 << 20, "default: 64 MiB");
    o.set("source_queue_bytes", "1024").unwrap();
    assert_eq!(o.source_queue_bytes, 1024);
    o.set("sink_queue_bytes", "2048").unwrap();
    assert_eq!(o.sink_queue_bytes, 2048);
    o.set("subscription_buffer_bytes", "4096").unwrap();
    assert_eq!(o.subscription_buffer_bytes, 4096);
    assert_eq!(o.process_held_input_bytes, 256 << 20, "default: 256 MiB");
    o.set("process_held_input_bytes", "8192").unwrap();
    assert_eq!(o.process_held_input_bytes, 8192);
    assert_eq!(
        o.subscription_on_lag,
        crate::output::subscription::OnLag::Backpressure,
        "default: backpressure"
    );
    o.set("subscription_on_lag", "disconnect").unwrap();
    assert_eq!(
        o.subscription_on_lag,
        crate::output::subscription::OnLag::Disconnect
    );
    assert_eq!(o.checkpoint_store.as_deref(), Some("s3://b/p"));
}

#[test]
fn unknown_option_is_refused_with_the_known_list() {
    let mut o = PipelineOptions::default();
    let e = o.set("checkpoint_intervall", "1s").unwrap_err();
    assert_eq!(e.code(), "SLC-ENG-003");
    let e = e.to_string();
    assert!(e.contains("unknown option 'checkpoint_intervall'"), "{e}");
    for name in PIPELINE_OPTIONS {
        assert!(e.contains(name), "{e}");
    }
}

#[test]
fn source_options_share_the_pipeline_ranges() {
    assert_eq!(parse_count("batch_size", "1048576").unwrap(), 1 << 20);
    let e = parse_count("batch_size", "0").unwrap_err().to_string();
    assert_eq!(
        e,
        "invalid option: option 'batch_size': '0' is out of range (1 to 1048576)"
    );
    let e = parse_duration("idle_timeout", "0s")
        .unwrap_err()
        .to_string();
    assert_eq!(
        e,
        "invalid option: option 'idle_timeout': '0s' is out of range (1ms to 1day)"
    );
}
