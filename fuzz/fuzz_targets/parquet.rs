//! Arbitrary bytes read as a parquet file source under every fixed schema and
//! reader configuration of `sluice_connectors::fuzzing`: only batches of
//! the declared schema or clean, coded errors may come out.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_connectors::{fuzzing, FileFormat};

fuzz_target!(
    // libfuzzer-sys aborts on every panic, even one the reader contains on
    // purpose (the Parquet decoder turns panics of the parquet crate into
    // errors). The default hook only prints; a panic that escapes still
    // aborts, since libfuzzer-sys catches it around each input and aborts.
    init: {
        let _ = std::panic::take_hook();
    },
    |data: &[u8]| {
        fuzzing::check_file_input(FileFormat::Parquet, data);
    }
);
