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

use crate::error::EngineError;

/// The message a panic was raised with (`panic!("...")` payloads are a
/// `&str` or a `String`; anything else has no readable message).
pub fn panic_message(payload: &(dyn Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".into())
}

/// Run `f`; a panic becomes [`EngineError::Panicked`] with the text
/// `<component> panicked: <message>`.
///
/// Unwind safety is asserted: after a panic the component's state may be
/// torn, which is why every caller stops the pipeline (halt or fault) and
/// never uses the component again before recovery rebuilds it.
pub fn contain<T>(
    component: impl FnOnce() -> String,
    f: impl FnOnce() -> T,
) -> Result<T, EngineError> {
    catch_unwind(AssertUnwindSafe(f)).map_err(|p| {
        EngineError::Panicked(format!("{} panicked: {}", component(), panic_message(&*p)))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(r: Result<(), EngineError>) -> (String, String) {
        let e = r.unwrap_err();
        (e.code().to_string(), e.to_string())
    }

    #[test]
    fn contain_names_the_component_and_the_message() {
        let r = contain(|| "sink 'out'".into(), || panic!("disk on fire"));
        let want = ("SLC-ENG-015", "sink 'out' panicked: disk on fire");
        assert_eq!(text(r), (want.0.into(), want.1.into()));
        let owned = format!("row {}", 7);
        let r = contain(|| "stream 's'".into(), move || panic!("{owned}"));
        assert_eq!(text(r).1, "stream 's' panicked: row 7");
        let r = contain(|| "x".into(), || std::panic::panic_any(42_u8));
        assert_eq!(text(r).1, "x panicked: a panic without a message");
        assert_eq!(contain(|| "x".into(), || 5).ok(), Some(5));
    }
}
