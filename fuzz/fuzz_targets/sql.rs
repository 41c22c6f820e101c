//! Arbitrary text executed as SQL on an in-memory database that already
//! declares a few sources and streams (`sluice::fuzzing`): only results or
//! clean, coded errors may come out.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    sluice::fuzzing::check_sql(data);
});
