//! Faults at the Database level, driven by the engine's fault-injection
//! layer (feature `fault-injection`, enabled for these tests only): failed
//! cycles never drop input, panics anywhere become halts or faults naming
//! the component, and sink files on failure hold exactly what the delivery
//! mode promises. Every run is bounded by a timeout.

mod common;
mod loss;
mod panics;
mod restart;
mod seam;
mod sinks;
mod stateful;
