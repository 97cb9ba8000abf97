//! An instant of an answer (a group's or rule's `lastEvaluation`, an alert's `activeAt` and
//! `keepFiringSince`). Prometheus writes them as Go's RFC 3339 with nanoseconds in UTC
//! (`2026-11-25T12:00:01.123456789Z`, trailing zeros of the fraction dropped): such a text is held
//! as the instant itself, neither allocated nor read again when copies are ranked. Any other
//! text (an offset, another precision, not an instant at all) is held as written. Either way
//! what was read is written back byte for byte: a text is held as the instant only when the
//! instant writes back as exactly that text.

use std::fmt;

use serde::de::{Deserializer, Visitor};
use serde::{Deserialize, Serialize, Serializer};

#[derive(Clone, Default, PartialEq, Eq)]
pub struct Stamp(Repr);

#[derive(Clone, PartialEq, Eq)]
enum Repr {
    /// Seconds since 1970-01-01T00:00:00Z and the nanoseconds past them, of a text in
    /// [`utc_text`]'s form.
    Utc { seconds: i64, nanos: u32 },
    /// Any other text.
    Text(String),
}

impl Default for Repr {
    fn default() -> Self {
        Repr::Text(String::new())
    }
}

/// The longest text in [`utc_text`]'s form: `YYYY-MM-DDTHH:MM:SS.nnnnnnnnnZ`.
const UTC_LEN: usize = 30;

impl Stamp {
    /// The instant the text names, if it names one (RFC 3339, as jiff reads it).
    pub fn instant(&self) -> Option<jiff::Timestamp> {
        match &self.0 {
            Repr::Utc { seconds, nanos } => {
                jiff::Timestamp::new(*seconds, i32::try_from(*nanos).ok()?).ok()
            }
            Repr::Text(text) => timestamp(text),
        }
    }

    /// The instant `seconds` since 1970-01-01T00:00:00Z and `nanos` past them, written as
    /// Prometheus writes it (Go's RFC 3339 in UTC, trailing zeros of the fraction dropped);
    /// `None` outside years 0000 to 9999 or with `nanos` past a second. For instants read from
    /// another encoding (Thanos's gRPC answers carry them as protobuf Timestamps).
    pub fn from_unix(seconds: i64, nanos: u32) -> Option<Stamp> {
        // 0000-01-01T00:00:00Z and 9999-12-31T23:59:59Z.
        const RANGE: std::ops::RangeInclusive<i64> = -62_167_219_200..=253_402_300_799;
        (RANGE.contains(&seconds) && nanos < 1_000_000_000)
            .then_some(Stamp(Repr::Utc { seconds, nanos }))
    }

    /// `f` of the text, as it was read.
    pub fn with_text<R>(&self, f: impl FnOnce(&str) -> R) -> R {
        match &self.0 {
            Repr::Text(text) => f(text),
            Repr::Utc { seconds, nanos } => {
                let (bytes, len) = utc_text(*seconds, *nanos);
                // Digits and punctuation, always UTF-8.
                f(std::str::from_utf8(&bytes[..len]).unwrap_or_default())
            }
        }
    }

    /// The instant of `text` when it writes back as exactly `text`: [`utc`] reads it (so its
    /// fields are in range and name that instant, which writes them back the same) and its
    /// fraction, if any, does not end in a zero (which Go drops).
    fn as_instant(text: &str) -> Option<Repr> {
        let (seconds, nanos) = utc(text.as_bytes())?;
        let bytes = text.as_bytes();
        let whole = bytes.len() == 20 || bytes[bytes.len() - 2] != b'0';
        whole.then_some(Repr::Utc { seconds, nanos })
    }
}

impl From<&str> for Stamp {
    fn from(text: &str) -> Self {
        Stamp(Stamp::as_instant(text).unwrap_or_else(|| Repr::Text(text.to_string())))
    }
}

impl From<String> for Stamp {
    fn from(text: String) -> Self {
        Stamp(Stamp::as_instant(&text).unwrap_or(Repr::Text(text)))
    }
}

impl PartialEq<str> for Stamp {
    fn eq(&self, other: &str) -> bool {
        self.with_text(|text| text == other)
    }
}

impl PartialEq<&str> for Stamp {
    fn eq(&self, other: &&str) -> bool {
        self == *other
    }
}

impl fmt::Display for Stamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.with_text(|text| f.write_str(text))
    }
}

impl fmt::Debug for Stamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.with_text(|text| fmt::Debug::fmt(text, f))
    }
}

impl Serialize for Stamp {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.with_text(|text| serializer.serialize_str(text))
    }
}

impl<'de> Deserialize<'de> for Stamp {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct StampVisitor;

        impl Visitor<'_> for StampVisitor {
            type Value = Stamp;

            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string")
            }

            fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<Stamp, E> {
                Ok(Stamp::from(text))
            }

            fn visit_string<E: serde::de::Error>(self, text: String) -> Result<Stamp, E> {
                Ok(Stamp::from(text))
            }
        }

        deserializer.deserialize_str(StampVisitor)
    }
}

/// The instant `text` (RFC 3339) names. The form Prometheus writes is read directly, a few times
/// faster than the general parser; any other (an offset, a leap second, a date that does not
/// exist, anything unexpected) is left to jiff, so both agree on every text.
pub(crate) fn timestamp(text: &str) -> Option<jiff::Timestamp> {
    match utc(text.as_bytes()) {
        Some((seconds, nanos)) => jiff::Timestamp::new(seconds, i32::try_from(nanos).ok()?).ok(),
        None => text.parse().ok(),
    }
}

/// `YYYY-MM-DDTHH:MM:SS[.fraction]Z`, its fields in range: (seconds since the epoch,
/// nanoseconds), else None.
fn utc(text: &[u8]) -> Option<(i64, u32)> {
    let digits = |range: std::ops::Range<usize>| -> Option<i64> {
        text.get(range)?.iter().try_fold(0i64, |n, &b| {
            b.is_ascii_digit().then(|| n * 10 + i64::from(b - b'0'))
        })
    };
    if text.len() < 20
        || text[4] != b'-'
        || text[7] != b'-'
        || text[10] != b'T'
        || text[13] != b':'
        || text[16] != b':'
        || text.last() != Some(&b'Z')
    {
        return None;
    }
    let (year, month, day) = (digits(0..4)?, digits(5..7)?, digits(8..10)?);
    let (hour, minute, second) = (digits(11..13)?, digits(14..16)?, digits(17..19)?);
    let nanos = match text.len() - 20 {
        0 => 0,
        // A dot and one to nine digits.
        n @ 2..=10 if text[19] == b'.' => digits(20..19 + n)? * 10i64.pow(10 - n as u32),
        _ => return None,
    };
    let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    let days_in_month = match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if leap => 29,
        2 => 28,
        _ => return None,
    };
    if day < 1 || day > days_in_month || hour > 23 || minute > 59 || second > 59 {
        return None;
    }
    // Days since 1970-01-01 of a proleptic Gregorian date (years counted from March).
    let (y, m) = if month <= 2 {
        (year - 1, month + 9)
    } else {
        (year, month - 3)
    };
    let era = y.div_euclid(400);
    let year_of_era = y - era * 400;
    let day_of_year = (153 * m + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    let days = era * 146_097 + day_of_era - 719_468;
    let seconds = days * 86_400 + hour * 3600 + minute * 60 + second;
    Some((seconds, u32::try_from(nanos).ok()?))
}

/// The instant as Go writes it with `time.RFC3339Nano` in UTC: the fraction without its
/// trailing zeros, none at all when it is zero. Only instants [`utc`] read are written (years
/// 0000-9999).
fn utc_text(seconds: i64, nanos: u32) -> ([u8; UTC_LEN], usize) {
    let days = seconds.div_euclid(86_400);
    let of_day = seconds.rem_euclid(86_400);
    // The inverse of `utc`'s day count (years counted from March).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z - era * 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let m = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * m + 2) / 5 + 1;
    let month = if m < 10 { m + 3 } else { m - 9 };
    let year = year_of_era + era * 400 + i64::from(month <= 2);

    let mut out = [0u8; UTC_LEN];
    let mut put = |at: usize, value: i64, width: usize| {
        let mut value = value.unsigned_abs();
        for digit in out[at..at + width].iter_mut().rev() {
            *digit = b'0' + (value % 10) as u8;
            value /= 10;
        }
    };
    put(0, year, 4);
    put(5, month, 2);
    put(8, day, 2);
    put(11, of_day / 3600, 2);
    put(14, of_day / 60 % 60, 2);
    put(17, of_day % 60, 2);
    let mut len = 19;
    if nanos > 0 {
        put(20, i64::from(nanos), 9);
        len = 29;
        while out[len - 1] == b'0' {
            len -= 1;
        }
        out[19] = b'.';
    }
    for (at, byte) in [(4, b'-'), (7, b'-'), (10, b'T'), (13, b':'), (16, b':')] {
        out[at] = byte;
    }
    out[len] = b'Z';
    (out, len + 1)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use proptest::prelude::*;

    /// The fast reading of Prometheus's UTC timestamps agrees with jiff's on every text:
    /// whole seconds and every length of fraction, leap days, the ends of the range, and texts
    /// it leaves to jiff (offsets, leap seconds, dates that do not exist, malformed ones).
    #[test]
    fn utc_timestamps_read_as_jiff_reads_them() {
        let texts = [
            "2026-11-25T12:00:01Z",
            "2026-11-25T12:00:01.5Z",
            "2026-11-25T12:00:01.123456789Z",
            "2026-11-25T12:00:01.000000001Z",
            "2026-11-25T12:00:01.500Z",
            "1970-01-01T00:00:00Z",
            "1969-12-31T23:59:59.999999999Z",
            "0001-01-01T00:00:00Z",
            "9999-12-31T23:59:59.999999999Z",
            "2024-02-29T00:00:00Z",
            "2000-02-29T23:59:59Z",
            "1900-03-01T00:00:00Z",
            "2026-11-25T12:00:01+02:00",
            "2026-11-25T12:00:01.25-05:30",
            "2016-12-31T23:59:60Z",
            "2023-02-29T00:00:00Z",
            "1900-02-29T00:00:00Z",
            "2026-13-01T00:00:00Z",
            "2026-11-31T00:00:00Z",
            "2026-11-25T24:00:00Z",
            "2026-11-25T12:00:01.Z",
            "2026-11-25T12:00:01.1234567891Z",
            "2026-11-25 12:00:01Z",
            "2026-11-25T12:00:01z",
            "+2026-11-25T12:00:01Z",
            "2026-1a-25T12:00:01Z",
            "",
        ];
        for text in texts {
            let jiff: Option<jiff::Timestamp> = text.parse().ok();
            assert_eq!(timestamp(text), jiff, "{text:?}");
            assert_eq!(Stamp::from(text).instant(), jiff, "{text:?}");
        }
        assert!(
            utc(b"2026-11-25T12:00:01.123456789Z").is_some(),
            "read directly"
        );
        // Every day of four years, at several times of day.
        let mut day = jiff::civil::date(2023, 1, 1);
        while day.year() < 2027 {
            for (time, fraction) in [
                ("00:00:00", ""),
                ("13:07:59", ".000123"),
                ("23:59:59", ".999999999"),
            ] {
                let text = format!("{day}T{time}{fraction}Z");
                let jiff: jiff::Timestamp = text.parse().unwrap();
                assert_eq!(timestamp(&text), Some(jiff), "{text}");
                let stamp = Stamp::from(text.as_str());
                assert!(
                    matches!(stamp.0, Repr::Utc { .. }),
                    "{text} held as the instant"
                );
                assert_eq!(stamp.to_string(), text);
            }
            day = day.tomorrow().unwrap();
        }
    }

    /// An instant given as seconds and nanoseconds (a protobuf Timestamp) is the same stamp as
    /// Prometheus's text of it, and writes that text; out of range it is refused.
    #[test]
    fn instants_from_unix_time_are_prometheus_texts() {
        for text in [
            "2026-11-25T12:00:01Z",
            "2026-11-25T12:00:01.5Z",
            "2026-11-25T12:00:01.123456789Z",
            "1969-12-31T23:59:59.999999999Z",
            "0001-01-01T00:00:00Z",
            "0000-01-01T00:00:00Z",
            "9999-12-30T12:00:00.999999999Z",
        ] {
            let instant: jiff::Timestamp = text.parse().unwrap();
            // As a protobuf Timestamp: whole seconds floored, nanoseconds never negative.
            let total = instant.as_nanosecond();
            let seconds = i64::try_from(total.div_euclid(1_000_000_000)).unwrap();
            let nanos = u32::try_from(total.rem_euclid(1_000_000_000)).unwrap();
            let stamp = Stamp::from_unix(seconds, nanos).unwrap();
            assert_eq!(stamp, Stamp::from(text), "{text}");
            assert_eq!(stamp.to_string(), text);
        }
        assert_eq!(Stamp::from_unix(-62_167_219_201, 0), None);
        assert_eq!(Stamp::from_unix(253_402_300_800, 0), None);
        assert_eq!(Stamp::from_unix(0, 1_000_000_000), None);
    }

    /// Texts in another form than Go's are kept as they were: they read as the same instant,
    /// and write back unchanged.
    #[test]
    fn other_forms_are_kept_as_written() {
        for text in [
            "2026-11-25T12:00:01.500Z",
            "2026-11-25T12:00:01.0Z",
            "2026-11-25T12:00:01+00:00",
            "2026-11-25T12:00:01.25-05:30",
            "yesterday",
            "",
        ] {
            let stamp = Stamp::from(text);
            assert!(
                matches!(&stamp.0, Repr::Text(kept) if kept == text),
                "{text}"
            );
            assert_eq!(stamp, text);
            assert_eq!(stamp.instant(), text.parse().ok(), "{text}");
        }
        assert_eq!(Stamp::default(), "");
    }

    proptest! {
        /// Every instant of years 0000-9999 Go writes in UTC is held as the instant and written
        /// back as the same text; it reads as jiff reads it.
        #[test]
        fn go_s_form_writes_back_as_read(
            seconds in -62_167_219_200i64..253_402_300_800,
            nanos in prop_oneof![Just(0u32), 0u32..1_000_000_000, (0u32..1000).prop_map(|n| n * 1_000_000)],
        ) {
            let instant = jiff::Timestamp::new(seconds, nanos as i32).unwrap();
            let text = instant.strftime("%Y-%m-%dT%H:%M:%S%.fZ").to_string();
            let stamp = Stamp::from(text.as_str());
            prop_assert!(matches!(stamp.0, Repr::Utc { .. }), "{}", text);
            prop_assert_eq!(stamp.to_string(), text.clone());
            prop_assert_eq!(serde_json::to_string(&stamp).unwrap(), serde_json::to_string(&text).unwrap());
            prop_assert_eq!(stamp.instant(), Some(instant));
            let read: Stamp = serde_json::from_str(&serde_json::to_string(&text).unwrap()).unwrap();
            prop_assert_eq!(read, stamp);
        }

        /// Any text reads and writes back unchanged.
        #[test]
        fn any_text_writes_back_as_read(text in "\\PC{0,40}|[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\\.[0-9]{1,10})?Z") {
            let stamp = Stamp::from(text.as_str());
            prop_assert_eq!(stamp.to_string(), text.clone());
            prop_assert_eq!(stamp.instant(), text.parse::<jiff::Timestamp>().ok());
        }
    }
}
