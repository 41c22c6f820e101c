//! Allocation-free parsers for the textual value formats found in CSV and
//! JSON files.
//!
//! These work directly on byte slices because the CSV hot path hands us raw
//! fields; going through `str` and the generic std/chrono parsers would cost
//! UTF-8 validation plus format-string interpretation on every value.  All
//! functions return `None` on malformed input and leave error wording to the
//! caller, which knows the column and the declared type.

use arrow::datatypes::TimeUnit;

/// Strip leading and trailing ASCII whitespace.
pub(crate) fn trim(bytes: &[u8]) -> &[u8] {
    bytes.trim_ascii()
}

/// Parse an optionally signed decimal integer into an `i128`, which is wide
/// enough to range-check against every Arrow integer type (including `u64`)
/// in one place.
pub(crate) fn parse_integer(bytes: &[u8]) -> Option<i128> {
    let (negative, digits) = match bytes.first()? {
        b'-' => (true, &bytes[1..]),
        b'+' => (false, &bytes[1..]),
        _ => (false, bytes),
    };
    if digits.is_empty() {
        return None;
    }
    let mut magnitude: u64 = 0;
    for &b in digits {
        let d = b.wrapping_sub(b'0');
        if d > 9 {
            return None;
        }
        magnitude = magnitude.checked_mul(10)?.checked_add(u64::from(d))?;
    }
    let value = i128::from(magnitude);
    Some(if negative { -value } else { value })
}

/// Fast path for the common BIGINT field: 1 to 18 plain ASCII digits,
/// optionally after a `-`, which cannot overflow. Anything else (signs,
/// spaces, long or malformed numbers) returns `None` for the general parser
/// to handle or reject.
#[inline]
pub(crate) fn parse_plain_i64(bytes: &[u8]) -> Option<i64> {
    let (negative, digits) = match bytes.first()? {
        b'-' => (true, &bytes[1..]),
        _ => (false, bytes),
    };
    if digits.is_empty() || digits.len() > 18 {
        return None;
    }
    let mut value: i64 = 0;
    for &b in digits {
        let d = b.wrapping_sub(b'0');
        if d > 9 {
            return None;
        }
        value = value * 10 + i64::from(d);
    }
    Some(if negative { -value } else { value })
}

/// Fast path for the common timestamp field: `YYYY-MM-DD HH:MM:SS` (or
/// with `T`) and up to nine fraction digits, no zone, as ticks of `unit`.
/// Anything else returns `None` for the general parser to handle or reject.
#[inline]
pub(crate) fn parse_plain_timestamp(
    bytes: &[u8],
    dates: &mut DateCache,
    unit: TimeUnit,
) -> Option<i64> {
    if bytes.len() < 19
        || !matches!(bytes[10], b' ' | b'T')
        || bytes[13] != b':'
        || bytes[16] != b':'
    {
        return None;
    }
    let days = dates.days(bytes)?;
    let (hour, minute, second) = (
        digits(bytes, 11, 2)?,
        digits(bytes, 14, 2)?,
        digits(bytes, 17, 2)?,
    );
    if hour > 23 || minute > 59 || second > 59 {
        return None;
    }
    let mut nanos = 0u32;
    if bytes.len() > 19 {
        let fraction = &bytes[20..];
        if bytes[19] != b'.' || fraction.is_empty() || fraction.len() > 9 {
            return None;
        }
        let mut scale = 100_000_000u32;
        for &b in fraction {
            let d = b.wrapping_sub(b'0');
            if d > 9 {
                return None;
            }
            nanos += u32::from(d) * scale;
            scale /= 10;
        }
    }
    let seconds = days * 86_400 + i64::from(hour * 3600 + minute * 60 + second);
    to_unit(seconds, nanos, unit)
}

/// Parse a boolean in the spellings commonly produced by databases and
/// spreadsheets.
pub(crate) fn parse_bool(bytes: &[u8]) -> Option<bool> {
    const TRUE: [&[u8]; 5] = [b"true", b"t", b"1", b"yes", b"y"];
    const FALSE: [&[u8]; 5] = [b"false", b"f", b"0", b"no", b"n"];
    if TRUE.iter().any(|t| t.eq_ignore_ascii_case(bytes)) {
        Some(true)
    } else if FALSE.iter().any(|f| f.eq_ignore_ascii_case(bytes)) {
        Some(false)
    } else {
        None
    }
}

/// Parse a float; std's parser is correctly rounded and fast, so only the
/// UTF-8 step is ours (floats are always ASCII).
pub(crate) fn parse_f64(bytes: &[u8]) -> Option<f64> {
    std::str::from_utf8(bytes).ok()?.parse().ok()
}

/// Parse a float directly as `f32` (parsing as f64 then narrowing would
/// double-round).
pub(crate) fn parse_f32(bytes: &[u8]) -> Option<f32> {
    std::str::from_utf8(bytes).ok()?.parse().ok()
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's
/// `days_from_civil`), exact for any `i32` year.
pub(crate) fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let m = i64::from(month);
    let mp = if m > 2 { m - 3 } else { m + 9 };
    let doy = (153 * mp + 2) / 5 + i64::from(day) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn is_leap(year: i64) -> bool {
    (year % 4 == 0 && year % 100 != 0) || year % 400 == 0
}

fn days_in_month(year: i64, month: u32) -> u32 {
    match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        _ if is_leap(year) => 29,
        _ => 28,
    }
}

/// Read exactly `n` ASCII digits at `pos`.
fn digits(bytes: &[u8], pos: usize, n: usize) -> Option<u32> {
    let slice = bytes.get(pos..pos + n)?;
    let mut v = 0u32;
    for &b in slice {
        let d = b.wrapping_sub(b'0');
        if d > 9 {
            return None;
        }
        v = v * 10 + u32::from(d);
    }
    Some(v)
}

/// Parse the `YYYY-MM-DD` prefix of `bytes` into days since the epoch.
fn date_prefix(bytes: &[u8]) -> Option<i64> {
    let year = digits(bytes, 0, 4)?;
    if bytes.get(4) != Some(&b'-') || bytes.get(7) != Some(&b'-') {
        return None;
    }
    let month = digits(bytes, 5, 2)?;
    let day = digits(bytes, 8, 2)?;
    let year = i64::from(year);
    if !(1..=12).contains(&month) || day == 0 || day > days_in_month(year, month) {
        return None;
    }
    Some(days_from_civil(year, month, day))
}

/// Parse a `YYYY-MM-DD` date into days since the epoch.
pub(crate) fn parse_date32(bytes: &[u8]) -> Option<i32> {
    if bytes.len() != 10 {
        return None;
    }
    i32::try_from(date_prefix(bytes)?).ok()
}

/// A timestamp as written in the file, before applying the column's unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ParsedTimestamp {
    /// Seconds since the epoch of the wall-clock reading (UTC if `offset` is
    /// `Some`, i.e. the offset has already been subtracted).
    pub seconds: i64,
    /// Sub-second part in nanoseconds.
    pub nanos: u32,
    /// Whether the text carried an explicit `Z`/offset. Without one the value
    /// is a local wall-clock time in the column's time zone.
    pub has_offset: bool,
}

/// The last `YYYY-MM-DD` prefix parsed and its day number: the timestamps
/// of a stream mostly share their date, and the calendar arithmetic is a
/// good part of parsing one.
#[derive(Debug, Default)]
pub(crate) struct DateCache {
    last: Option<([u8; 10], i64)>,
}

impl DateCache {
    fn days(&mut self, bytes: &[u8]) -> Option<i64> {
        let key: [u8; 10] = bytes.get(..10)?.try_into().ok()?;
        if let Some((last, days)) = self.last {
            if last == key {
                return Some(days);
            }
        }
        let days = date_prefix(bytes)?;
        self.last = Some((key, days));
        Some(days)
    }
}

/// Parse `YYYY-MM-DD`, `YYYY-MM-DD[T ]HH:MM[:SS[.fffffffff]]` with an
/// optional `Z` or `±HH[:MM]` / `±HHMM` suffix.
#[cfg(test)]
pub(crate) fn parse_timestamp_text(bytes: &[u8]) -> Option<ParsedTimestamp> {
    parse_timestamp_text_cached(bytes, &mut DateCache::default())
}

/// [`parse_timestamp_text`], reusing the day number of the previous call's
/// date when it is the same.
pub(crate) fn parse_timestamp_text_cached(
    bytes: &[u8],
    dates: &mut DateCache,
) -> Option<ParsedTimestamp> {
    let days = dates.days(bytes)?;
    let mut seconds = days.checked_mul(86_400)?;
    if bytes.len() == 10 {
        return Some(ParsedTimestamp {
            seconds,
            nanos: 0,
            has_offset: false,
        });
    }
    if !matches!(bytes[10], b'T' | b't' | b' ') {
        return None;
    }
    let hour = digits(bytes, 11, 2)?;
    if bytes.get(13) != Some(&b':') {
        return None;
    }
    let minute = digits(bytes, 14, 2)?;
    let mut pos = 16;
    let mut second = 0;
    if bytes.get(pos) == Some(&b':') {
        second = digits(bytes, pos + 1, 2)?;
        pos += 3;
    }
    if hour > 23 || minute > 59 || second > 59 {
        return None;
    }
    let mut nanos = 0u32;
    if bytes.get(pos) == Some(&b'.') {
        pos += 1;
        let start = pos;
        let mut scale = 100_000_000u32;
        while let Some(&b) = bytes.get(pos) {
            let d = b.wrapping_sub(b'0');
            if d > 9 {
                break;
            }
            // Digits beyond nanosecond precision are accepted and truncated.
            nanos += u32::from(d) * scale;
            scale /= 10;
            pos += 1;
        }
        if pos == start {
            return None;
        }
    }
    seconds += i64::from(hour * 3600 + minute * 60 + second);
    let mut rest = &bytes[pos..];
    if rest.first() == Some(&b' ') {
        rest = &rest[1..];
    }
    let has_offset = match rest {
        [] => false,
        [b'Z' | b'z'] => true,
        [sign @ (b'+' | b'-'), tail @ ..] => {
            let (h, m) = match tail.len() {
                2 => (digits(tail, 0, 2)?, 0),
                4 => (digits(tail, 0, 2)?, digits(tail, 2, 2)?),
                5 if tail[2] == b':' => (digits(tail, 0, 2)?, digits(tail, 3, 2)?),
                _ => return None,
            };
            if h > 23 || m > 59 {
                return None;
            }
            let offset = i64::from(h * 3600 + m * 60);
            // Local = UTC + offset, so UTC = local - offset.
            seconds = if *sign == b'+' {
                seconds - offset
            } else {
                seconds + offset
            };
            true
        }
        _ => return None,
    };
    Some(ParsedTimestamp {
        seconds,
        nanos,
        has_offset,
    })
}

/// Number of `unit` ticks per second.
pub(crate) fn ticks_per_second(unit: TimeUnit) -> i64 {
    match unit {
        TimeUnit::Second => 1,
        TimeUnit::Millisecond => 1_000,
        TimeUnit::Microsecond => 1_000_000,
        TimeUnit::Nanosecond => 1_000_000_000,
    }
}

/// Convert seconds + nanoseconds to `unit` ticks, truncating precision the
/// unit cannot hold; `None` on overflow (e.g. year 3000 in nanoseconds).
pub(crate) fn to_unit(seconds: i64, nanos: u32, unit: TimeUnit) -> Option<i64> {
    let per_second = ticks_per_second(unit);
    let sub = i64::from(nanos) / (1_000_000_000 / per_second);
    seconds.checked_mul(per_second)?.checked_add(sub)
}

/// Convert epoch milliseconds (the integer timestamp convention) to `unit`.
pub(crate) fn millis_to_unit(millis: i64, unit: TimeUnit) -> Option<i64> {
    match unit {
        TimeUnit::Second => Some(millis.div_euclid(1_000)),
        TimeUnit::Millisecond => Some(millis),
        TimeUnit::Microsecond => millis.checked_mul(1_000),
        TimeUnit::Nanosecond => millis.checked_mul(1_000_000),
    }
}

/// Parse a plain decimal number (`-12.345`) into the unscaled `i128` of a
/// `Decimal128(precision, scale)`. Extra fractional digits are rounded half
/// away from zero (as SQL databases do); values needing more than
/// `precision` digits are rejected.
pub(crate) fn parse_decimal(bytes: &[u8], precision: u8, scale: u8) -> Option<i128> {
    let (negative, body) = match bytes.first()? {
        b'-' => (true, &bytes[1..]),
        b'+' => (false, &bytes[1..]),
        _ => (false, bytes),
    };
    let mut value: i128 = 0;
    let mut seen_digit = false;
    let mut seen_dot = false;
    let mut frac_digits: u8 = 0;
    let mut round_up = false;
    let mut dropped = false;
    for &b in body {
        if b == b'.' {
            if seen_dot {
                return None;
            }
            seen_dot = true;
            continue;
        }
        let d = b.wrapping_sub(b'0');
        if d > 9 {
            return None;
        }
        seen_digit = true;
        if seen_dot {
            if frac_digits == scale {
                if !dropped {
                    round_up = d >= 5;
                    dropped = true;
                }
                continue;
            }
            frac_digits += 1;
        }
        value = value.checked_mul(10)?.checked_add(i128::from(d))?;
    }
    if !seen_digit {
        return None;
    }
    for _ in frac_digits..scale {
        value = value.checked_mul(10)?;
    }
    if round_up {
        value = value.checked_add(1)?;
    }
    if value >= 10i128.checked_pow(u32::from(precision))? {
        return None;
    }
    Some(if negative { -value } else { value })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers() {
        assert_eq!(parse_integer(b"0"), Some(0));
        assert_eq!(parse_integer(b"-42"), Some(-42));
        assert_eq!(parse_integer(b"+7"), Some(7));
        assert_eq!(
            parse_integer(b"18446744073709551615"),
            Some(i128::from(u64::MAX))
        );
        assert_eq!(parse_integer(b"18446744073709551616"), None);
        assert_eq!(parse_integer(b""), None);
        assert_eq!(parse_integer(b"-"), None);
        assert_eq!(parse_integer(b"1a"), None);
        assert_eq!(parse_integer(b"1.0"), None);
    }

    #[test]
    fn dates() {
        assert_eq!(parse_date32(b"1970-01-01"), Some(0));
        assert_eq!(parse_date32(b"2024-03-01"), Some(19_783));
        assert_eq!(parse_date32(b"1969-12-31"), Some(-1));
        assert_eq!(parse_date32(b"2024-02-29"), Some(19_782));
        assert_eq!(parse_date32(b"2023-02-29"), None);
        assert_eq!(parse_date32(b"2024-13-01"), None);
        assert_eq!(parse_date32(b"2024-1-01"), None);
    }

    #[test]
    fn plain_timestamps_agree_with_the_general_parser() {
        let mut dates = DateCache::default();
        for s in [
            "2024-01-01 00:00:00",
            "2024-01-01T23:59:59.5",
            "2023-12-31 23:59:59.955",
            "1969-12-31 23:59:59.123456789",
            "2024-02-29 12:00:00.000001",
        ] {
            let Some(general) = parse_timestamp_text(s.as_bytes()) else {
                panic!("{s} must parse");
            };
            for unit in [
                TimeUnit::Second,
                TimeUnit::Millisecond,
                TimeUnit::Nanosecond,
            ] {
                assert_eq!(
                    parse_plain_timestamp(s.as_bytes(), &mut dates, unit),
                    to_unit(general.seconds, general.nanos, unit),
                    "{s} {unit:?}"
                );
            }
        }
        // Left to the general parser (or to be rejected by it).
        for s in [
            "2024-01-01 00:00",
            "2024-01-01 00:00:00Z",
            "2024-01-01 00:00:00+02:00",
            "2024-01-01 00:00:00.",
            "2024-01-01 00:00:00.1234567891",
            "2024-01-01 24:00:00",
            "2024-02-30 00:00:00",
            "2024-01-01 00:00:0x",
        ] {
            assert_eq!(
                parse_plain_timestamp(s.as_bytes(), &mut dates, TimeUnit::Millisecond),
                None,
                "{s}"
            );
        }
    }

    #[test]
    fn timestamps() {
        let ts = |s: &str| parse_timestamp_text(s.as_bytes());
        let base = 1_704_067_200; // 2024-01-01T00:00:00Z
        for s in [
            "2024-01-01 00:00:00",
            "2024-01-01T00:00:00",
            "2024-01-01t00:00",
            "2024-01-01",
        ] {
            assert_eq!(
                ts(s),
                Some(ParsedTimestamp {
                    seconds: base,
                    nanos: 0,
                    has_offset: false
                }),
                "{s}"
            );
        }
        assert_eq!(
            ts("2024-01-01T00:00:10.5Z"),
            Some(ParsedTimestamp {
                seconds: base + 10,
                nanos: 500_000_000,
                has_offset: true
            })
        );
        assert_eq!(
            ts("2024-01-01T02:00:00.123456789123+02:00").map(|t| (t.seconds, t.nanos)),
            Some((base, 123_456_789))
        );
        assert_eq!(
            ts("2024-01-01 00:00:00 -0130").map(|t| t.seconds),
            Some(base + 5400)
        );
        for bad in [
            "2024-01-01T",
            "2024-01-01T24:00:00",
            "2024-01-01T00:00:00.",
            "2024-01-01T00:00:00+1",
            "2024-01-01T00:00:00Zx",
            "abc",
        ] {
            assert_eq!(ts(bad), None, "{bad}");
        }
    }

    #[test]
    fn units() {
        assert_eq!(to_unit(1, 999_999_999, TimeUnit::Millisecond), Some(1999));
        assert_eq!(
            to_unit(-1, 500_000_000, TimeUnit::Microsecond),
            Some(-500_000)
        );
        assert_eq!(to_unit(i64::MAX / 10, 0, TimeUnit::Nanosecond), None);
        assert_eq!(millis_to_unit(-1, TimeUnit::Second), Some(-1));
        assert_eq!(
            millis_to_unit(1500, TimeUnit::Nanosecond),
            Some(1_500_000_000)
        );
    }

    #[test]
    fn decimals() {
        assert_eq!(parse_decimal(b"12.34", 10, 2), Some(1234));
        assert_eq!(parse_decimal(b"-12.3", 10, 2), Some(-1230));
        assert_eq!(parse_decimal(b"12", 10, 2), Some(1200));
        assert_eq!(parse_decimal(b".5", 10, 2), Some(50));
        assert_eq!(parse_decimal(b"1.005", 10, 2), Some(101));
        assert_eq!(parse_decimal(b"-1.0049", 10, 2), Some(-100));
        assert_eq!(parse_decimal(b"99.995", 4, 2), None);
        assert_eq!(parse_decimal(b"123.4", 4, 2), None);
        assert_eq!(parse_decimal(b"1.2.3", 10, 2), None);
        assert_eq!(parse_decimal(b".", 10, 2), None);
        assert_eq!(parse_decimal(b"1e5", 10, 2), None);
    }

    #[test]
    fn booleans() {
        assert_eq!(parse_bool(b"TRUE"), Some(true));
        assert_eq!(parse_bool(b"f"), Some(false));
        assert_eq!(parse_bool(b"maybe"), None);
    }
}
