//! Checked arithmetic end to end: integer overflow and unrepresentable
//! windows are errors naming the stream and the column, never wrong numbers.
//!
//! `exact` pins the outcome of each case found from outside (two rows of
//! `i64::MAX` summed, `*` on BIGINT, an event time of `i64::MIN`); `model`
//! compares SUM and projected `+ - *` over random values near the ends of
//! every integer type against an `i128` model. `decimal` and
//! `decimal_model` do the same for `DECIMAL` near its 38-digit limit.

mod common;
mod decimal;
mod decimal_model;
mod exact;
mod model;
