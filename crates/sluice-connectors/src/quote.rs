//! Quoting input in error messages, bounded.
//!
//! An error that quotes a value from the user's data must stay readable
//! when the value is a runaway field (a 20 MB line without a newline, a
//! binary file read as text): every quote goes through [`bounded`], which
//! keeps the first [`MAX_QUOTED_CHARS`] characters and says how long the
//! whole value was.

/// Characters of an input value an error message quotes at most.
pub const MAX_QUOTED_CHARS: usize = 200;

/// `text` as quoted in an error: whole if it has at most
/// [`MAX_QUOTED_CHARS`] characters, else its first ones followed by
/// `… (N bytes)`, N being the length of the whole value.
pub fn bounded(text: &str) -> String {
    match text.char_indices().nth(MAX_QUOTED_CHARS) {
        None => text.to_string(),
        Some((cut, _)) => format!("{}… ({} bytes)", &text[..cut], text.len()),
    }
}

/// [`bounded`] for raw bytes; invalid UTF-8 is shown as U+FFFD. Only the
/// bytes that can be quoted are decoded, so a huge value costs nothing.
pub fn bounded_bytes(bytes: &[u8]) -> String {
    // A character is at most 4 bytes: this prefix holds every quoted one.
    let prefix = &bytes[..bytes.len().min(MAX_QUOTED_CHARS * 4)];
    let text = String::from_utf8_lossy(prefix);
    match text.char_indices().nth(MAX_QUOTED_CHARS) {
        None if prefix.len() == bytes.len() => text.into_owned(),
        None => format!("{text}… ({} bytes)", bytes.len()),
        Some((cut, _)) => format!("{}… ({} bytes)", &text[..cut], bytes.len()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_values_are_quoted_whole() {
        assert_eq!(bounded(""), "");
        assert_eq!(bounded("abc"), "abc");
        let exact = "é".repeat(MAX_QUOTED_CHARS);
        assert_eq!(bounded(&exact), exact);
        assert_eq!(bounded_bytes(exact.as_bytes()), exact);
        assert_eq!(bounded_bytes(b"a\xffb"), "a\u{fffd}b");
    }

    #[test]
    fn long_values_are_cut_at_200_chars_with_their_length() {
        let long = "x".repeat(20_000_000);
        let want = format!("{}… (20000000 bytes)", "x".repeat(200));
        assert_eq!(bounded(&long), want);
        assert_eq!(bounded_bytes(long.as_bytes()), want);
        // Multi-byte characters are never split.
        let wide = "é".repeat(201);
        assert_eq!(bounded(&wide), format!("{}… (402 bytes)", "é".repeat(200)));
        assert_eq!(
            bounded_bytes(wide.as_bytes()),
            format!("{}… (402 bytes)", "é".repeat(200))
        );
        // Invalid bytes count as one character each.
        let binary = vec![0xffu8; 5000];
        assert_eq!(
            bounded_bytes(&binary),
            format!("{}… (5000 bytes)", "\u{fffd}".repeat(200))
        );
    }
}
