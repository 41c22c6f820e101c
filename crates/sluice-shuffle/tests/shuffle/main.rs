//! Loopback tests of the shuffle: real gRPC servers on 127.0.0.1.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

mod alignment;
mod backpressure;
mod failures;
mod routing;
