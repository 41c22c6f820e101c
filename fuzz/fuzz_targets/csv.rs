//! Arbitrary bytes read as a csv file source under every fixed schema and
//! reader configuration of `sluice_connectors::fuzzing`: only batches of
//! the declared schema or clean, coded errors may come out.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_connectors::{fuzzing, FileFormat};

fuzz_target!(|data: &[u8]| {
    fuzzing::check_file_input(FileFormat::Csv, data);
});
