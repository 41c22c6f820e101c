//! Panic containment.
//!
//! A panic in a source reader, an operator, a sink or a subscription must
//! never take the pipeline down silently: it is caught where the component
//! that panicked is known, and becomes an ordinary error naming that
//! component and carrying the panic message. The coordinator turns it into a
//! halt (no checkpoints) or a fault (recovery replays from the last
//! checkpoint), like any other failure.

use std::any::Any;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// The message a panic was raised with (`panic!("...")` payloads are a
/// `&str` or a `String`; anything else has no readable message).
pub fn panic_message(payload: &(dyn Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".into())
}

/// Run `f`; a panic becomes `Err("<component> panicked: <message>")`.
///
/// Unwind safety is asserted: after a panic the component's state may be
/// torn, which is why every caller stops the pipeline (halt or fault) and
/// never uses the component again before recovery rebuilds it.
pub fn contain<T>(component: impl FnOnce() -> String, f: impl FnOnce() -> T) -> Result<T, String> {
    catch_unwind(AssertUnwindSafe(f))
        .map_err(|p| format!("{} panicked: {}", component(), panic_message(&*p)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contain_names_the_component_and_the_message() {
        let r: Result<(), String> = contain(|| "sink 'out'".into(), || panic!("disk on fire"));
        assert_eq!(r, Err("sink 'out' panicked: disk on fire".to_string()));
        let owned = format!("row {}", 7);
        let r: Result<(), String> = contain(|| "stream 's'".into(), move || panic!("{owned}"));
        assert_eq!(r, Err("stream 's' panicked: row 7".to_string()));
        let r: Result<(), String> = contain(|| "x".into(), || std::panic::panic_any(42_u8));
        assert_eq!(r, Err("x panicked: a panic without a message".to_string()));
        assert_eq!(contain(|| "x".into(), || 5), Ok(5));
    }
}
