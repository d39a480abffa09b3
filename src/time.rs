//! The crate's one calendar: RFC 3339 timestamps (`2026-01-01T00:00:00.000Z`) for events,
//! history and transcripts, `YYYY-MM-DD` dates for the system prompt, and HTTP dates for
//! `Retry-After`; formatted and parsed by hand (proleptic Gregorian, UTC).
//!
//! UTC only, millisecond precision. This module never reads the clock's time zone or the
//! environment.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Formats `time` as `YYYY-MM-DDTHH:MM:SS.mmmZ` (UTC). Times before 1970 print as the epoch.
pub(crate) fn format_rfc3339(time: SystemTime) -> String {
    let mut buffer = [0; RFC3339_LEN];
    write_rfc3339(time, &mut buffer).to_string()
}

/// The length of [`write_rfc3339`]'s text up to year 9999.
const RFC3339_LEN: usize = 24;

/// [`format_rfc3339`] into `buffer`, digit by digit: every event carries a timestamp, and
/// `format!` took 3 000 instructions for one. A year past 9999 takes the slow way.
fn write_rfc3339(time: SystemTime, buffer: &mut [u8; RFC3339_LEN]) -> std::borrow::Cow<'_, str> {
    let since = time.duration_since(UNIX_EPOCH).unwrap_or(Duration::ZERO);
    let secs = since.as_secs();
    let millis = since.subsec_millis();
    let (year, month, day) = civil_from_days((secs / 86_400) as i64);
    let rem = secs % 86_400;
    let (hour, minute, second) = (rem / 3600, (rem / 60) % 60, rem % 60);
    if year > 9999 {
        return std::borrow::Cow::Owned(format!(
            "{year:04}-{month:02}-{day:02}T{hour:02}:{minute:02}:{second:02}.{millis:03}Z"
        ));
    }
    let mut put = |at: usize, value: u64, digits: u32| {
        for i in 0..digits {
            let place = 10u64.pow(digits - 1 - i);
            buffer[at + i as usize] = b'0' + ((value / place) % 10) as u8;
        }
    };
    put(0, year as u64, 4);
    put(5, u64::from(month), 2);
    put(8, u64::from(day), 2);
    put(11, hour, 2);
    put(14, minute, 2);
    put(17, second, 2);
    put(20, u64::from(millis), 3);
    for (at, separator) in [
        (4, b'-'),
        (7, b'-'),
        (10, b'T'),
        (13, b':'),
        (16, b':'),
        (19, b'.'),
        (23, b'Z'),
    ] {
        buffer[at] = separator;
    }
    // Only ASCII digits and separators were written.
    std::borrow::Cow::Borrowed(std::str::from_utf8(buffer).unwrap_or_default())
}

/// Parses an RFC 3339 timestamp (`Z` or `±HH:MM` offset, any number of fractional digits;
/// precision beyond nanoseconds is dropped).
pub(crate) fn parse_rfc3339(text: &str) -> Option<SystemTime> {
    let b = text.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't' | b' ') {
        return None;
    }
    if b[13] != b':' || b[16] != b':' {
        return None;
    }
    let num = |range: std::ops::Range<usize>| -> Option<i64> {
        let s = text.get(range)?;
        if !s.bytes().all(|c| c.is_ascii_digit()) {
            return None;
        }
        s.parse().ok()
    };
    let (year, month, day) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (hour, minute, second) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 23 || minute > 59 {
        return None;
    }
    if second > 60 {
        return None;
    }
    let mut rest = &text[19..];
    let mut nanos: u64 = 0;
    if let Some(fraction) = rest.strip_prefix('.') {
        let digits = fraction.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return None;
        }
        for (i, c) in fraction[..digits].bytes().enumerate() {
            if i < 9 {
                nanos = nanos * 10 + u64::from(c - b'0');
            }
        }
        for _ in digits..9 {
            nanos *= 10;
        }
        rest = &fraction[digits..];
    }
    let offset_secs: i64 = match rest {
        "Z" | "z" => 0,
        _ => {
            let ob = rest.as_bytes();
            if ob.len() != 6 || ob[3] != b':' || !matches!(ob[0], b'+' | b'-') {
                return None;
            }
            let h: i64 = rest[1..3].parse().ok()?;
            let m: i64 = rest[4..6].parse().ok()?;
            let sign = if ob[0] == b'-' { -1 } else { 1 };
            sign * (h * 3600 + m * 60)
        }
    };
    let days = days_from_civil(year, month as u32, day as u32);
    let secs = days * 86_400 + hour * 3600 + minute * 60 + second - offset_secs;
    if secs < 0 {
        return None;
    }
    Some(UNIX_EPOCH + Duration::new(secs as u64, nanos as u32))
}

/// Formats `time` as a UTC calendar date, `YYYY-MM-DD`. Times before 1970 give
/// `1970-01-01`.
pub(crate) fn format_date(time: SystemTime) -> String {
    let seconds = time
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let (year, month, day) = civil_from_days((seconds / 86_400) as i64);
    format!("{year:04}-{month:02}-{day:02}")
}

/// Parses an IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`), the only HTTP date form
/// servers may send (RFC 9110 §5.6.7).
pub(crate) fn parse_http_date(value: &str) -> Option<SystemTime> {
    let rest = value.split_once(", ").map(|(_, r)| r)?;
    let mut parts = rest.split(' ');
    let day: u64 = parts.next()?.parse().ok()?;
    let month: u32 = match parts.next()? {
        "Jan" => 1,
        "Feb" => 2,
        "Mar" => 3,
        "Apr" => 4,
        "May" => 5,
        "Jun" => 6,
        "Jul" => 7,
        "Aug" => 8,
        "Sep" => 9,
        "Oct" => 10,
        "Nov" => 11,
        "Dec" => 12,
        _ => return None,
    };
    let year: i64 = parts.next()?.parse().ok()?;
    // Only plausible dates: keeps the arithmetic below far from overflow.
    if !(1970..=9999).contains(&year) {
        return None;
    }
    let mut hms = parts.next()?.split(':');
    let h: u64 = hms.next()?.parse().ok()?;
    let m: u64 = hms.next()?.parse().ok()?;
    let s: u64 = hms.next()?.parse().ok()?;
    if parts.next()? != "GMT" || !(1..=31).contains(&day) || h > 23 || m > 59 || s > 60 {
        return None;
    }
    let days = days_from_civil(year, month, day as u32);
    let secs = u64::try_from(days).ok()? * 86_400 + h * 3600 + m * 60 + s;
    UNIX_EPOCH.checked_add(Duration::from_secs(secs))
}

/// Days since 1970-01-01 to (year, month, day), proleptic Gregorian (H. Hinnant's
/// algorithm).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let m = i64::from(month);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(day) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Serde for `SystemTime` as an RFC 3339 string (`#[serde(with = "…")]`).
pub(crate) mod rfc3339 {
    use std::time::SystemTime;

    use serde::{Deserialize, Deserializer, Serializer};

    pub(crate) fn serialize<S: Serializer>(time: &SystemTime, s: S) -> Result<S::Ok, S::Error> {
        let mut buffer = [0; super::RFC3339_LEN];
        s.serialize_str(&super::write_rfc3339(*time, &mut buffer))
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<SystemTime, D::Error> {
        let text = std::borrow::Cow::<'de, str>::deserialize(d)?;
        super::parse_rfc3339(&text)
            .ok_or_else(|| serde::de::Error::custom(format!("invalid RFC 3339 timestamp `{text}`")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_known_instants() {
        assert_eq!(format_rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
        let t = UNIX_EPOCH + Duration::from_millis(1_767_225_600_123);
        assert_eq!(format_rfc3339(t), "2026-01-01T00:00:00.123Z");
        // 2024-02-29 12:34:56.789 (a leap day)
        let t = UNIX_EPOCH + Duration::from_millis(1_709_210_096_789);
        assert_eq!(format_rfc3339(t), "2024-02-29T12:34:56.789Z");
        // The last instant of year 9999, and the first after it (the slow way).
        let t = UNIX_EPOCH + Duration::from_millis(253_402_300_799_999);
        assert_eq!(format_rfc3339(t), "9999-12-31T23:59:59.999Z");
        let t = UNIX_EPOCH + Duration::from_millis(253_402_300_800_000);
        assert_eq!(format_rfc3339(t), "10000-01-01T00:00:00.000Z");
    }

    #[test]
    fn every_field_of_the_digit_writer_matches_format() {
        // Steps that move every digit of every field over the years 1970-2100.
        let mut ms: u64 = 0;
        while ms < 4_102_444_800_000 {
            let t = UNIX_EPOCH + Duration::from_millis(ms);
            let since = t.duration_since(UNIX_EPOCH).unwrap();
            let secs = since.as_secs();
            let (year, month, day) = civil_from_days((secs / 86_400) as i64);
            let rem = secs % 86_400;
            let expected = format!(
                "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
                rem / 3600,
                (rem / 60) % 60,
                rem % 60,
                since.subsec_millis()
            );
            assert_eq!(format_rfc3339(t), expected);
            ms += 1_234_567_891;
        }
    }

    #[test]
    fn parse_inverts_format_to_the_millisecond() {
        for ms in [0u64, 1, 999, 86_399_999, 951_782_400_000, 1_767_225_600_123] {
            let t = UNIX_EPOCH + Duration::from_millis(ms);
            assert_eq!(parse_rfc3339(&format_rfc3339(t)), Some(t), "{ms}");
        }
    }

    #[test]
    fn parse_accepts_offsets_and_rejects_garbage() {
        let z = parse_rfc3339("2026-01-01T01:00:00Z").unwrap();
        assert_eq!(parse_rfc3339("2026-01-01T02:00:00+01:00"), Some(z));
        assert_eq!(
            parse_rfc3339("2026-01-01T01:00:00.5Z"),
            Some(z + Duration::from_millis(500))
        );
        for bad in [
            "",
            "2026-01-01",
            "2026-13-01T00:00:00Z",
            "2026-01-01T00:00:00",
            "x",
        ] {
            assert_eq!(parse_rfc3339(bad), None, "{bad}");
        }
    }

    #[test]
    fn every_day_follows_the_previous_one_across_four_centuries() {
        // Walk 1970..2370 day by day and check the calendar advances by exactly one day.
        let mut previous = civil_from_days(0);
        for days in 1..146_097 {
            let current = civil_from_days(days);
            let (y, m, d) = previous;
            let days_in_month = match m {
                1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
                4 | 6 | 9 | 11 => 30,
                _ if (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 => 29,
                _ => 28,
            };
            let expected = if d < days_in_month {
                (y, m, d + 1)
            } else if m < 12 {
                (y, m + 1, 1)
            } else {
                (y + 1, 1, 1)
            };
            assert_eq!(current, expected, "day {days}");
            previous = current;
        }
    }
}
