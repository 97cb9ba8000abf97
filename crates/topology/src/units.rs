//! Prometheus's own duration and size syntax, checked here so that a bad value is reported on the
//! resource instead of crash-looping every Prometheus pod at start-up.

use std::time::Duration;

/// A value that Prometheus would refuse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UnitError {
    #[error("it is empty")]
    Empty,
    #[error("expected numbers each followed by a unit (y, w, d, h, m, s, ms), like 15d or 1d12h")]
    MalformedDuration,
    #[error("units must go from the largest to the smallest, each at most once (y w d h m s ms)")]
    UnitOrder,
    #[error("it is longer than Prometheus can represent (about 292 years)")]
    DurationOverflow,
    #[error(
        "expected a number followed by a unit (B, KB, MB, GB, TB, PB, EB or KiB … EiB), like 10GB"
    )]
    MalformedSize,
    #[error("it is larger than Prometheus can represent (8 EiB)")]
    SizeOverflow,
}

/// Duration units in the only order Prometheus accepts them, with their length in milliseconds.
const DURATION_UNITS: [(&str, u64); 7] = [
    ("y", 365 * 24 * 3_600_000),
    ("w", 7 * 24 * 3_600_000),
    ("d", 24 * 3_600_000),
    ("h", 3_600_000),
    ("m", 60_000),
    ("s", 1_000),
    ("ms", 1),
];

/// Prometheus stores durations as nanoseconds in an i64.
const MAX_DURATION_MS: u64 = i64::MAX as u64 / 1_000_000;

/// Parses a Prometheus duration (`model.ParseDuration`): `0`, or one or more `<digits><unit>`
/// with units `y` (365 days), `w`, `d`, `h`, `m`, `s`, `ms`, largest first, each at most once:
/// `15d`, `1d12h`, `90s`, `1h30m500ms`.
pub fn parse_prometheus_duration(text: &str) -> Result<Duration, UnitError> {
    if text.is_empty() {
        return Err(UnitError::Empty);
    }
    if text == "0" {
        return Ok(Duration::ZERO);
    }
    let mut rest = text;
    let mut smallest_allowed = 0;
    let mut total_ms: u64 = 0;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return Err(UnitError::MalformedDuration);
        }
        let number: u64 = rest[..digits]
            .parse()
            .map_err(|_| UnitError::DurationOverflow)?;
        rest = &rest[digits..];
        // `ms` before `m`: the longest unit that matches.
        let (unit, (name, unit_ms)) = DURATION_UNITS
            .iter()
            .enumerate()
            .filter(|(_, (name, _))| rest.starts_with(name))
            .max_by_key(|(_, (name, _))| name.len())
            .ok_or(UnitError::MalformedDuration)?;
        if unit < smallest_allowed {
            return Err(UnitError::UnitOrder);
        }
        smallest_allowed = unit + 1;
        total_ms = number
            .checked_mul(*unit_ms)
            .and_then(|ms| ms.checked_add(total_ms))
            .filter(|ms| *ms <= MAX_DURATION_MS)
            .ok_or(UnitError::DurationOverflow)?;
        rest = &rest[name.len()..];
    }
    Ok(Duration::from_millis(total_ms))
}

/// Size units Prometheus accepts (`units.ParseBase2Bytes`): all powers of 1024, whether written
/// `KB` or `KiB`.
const SIZE_UNITS: [(&str, u32); 13] = [
    ("B", 0),
    ("KB", 1),
    ("MB", 2),
    ("GB", 3),
    ("TB", 4),
    ("PB", 5),
    ("EB", 6),
    ("KiB", 1),
    ("MiB", 2),
    ("GiB", 3),
    ("TiB", 4),
    ("PiB", 5),
    ("EiB", 6),
];

/// Parses a Prometheus size (`--storage.tsdb.retention.size`): `0`, or a number (decimals
/// allowed) and a unit, all units being powers of 1024: `512MB`, `10GB`, `1.5TiB`. Returns bytes.
pub fn parse_prometheus_size(text: &str) -> Result<u64, UnitError> {
    if text.is_empty() {
        return Err(UnitError::Empty);
    }
    if text == "0" {
        return Ok(0);
    }
    let number_len = text
        .bytes()
        .take_while(|b| b.is_ascii_digit() || *b == b'.')
        .count();
    let (number, unit) = text.split_at(number_len);
    let well_formed = number
        .split_once('.')
        .map_or(!number.is_empty(), |(whole, fraction)| {
            !whole.is_empty() && !fraction.is_empty() && !fraction.contains('.')
        });
    let power = SIZE_UNITS
        .iter()
        .find(|(name, _)| *name == unit)
        .map(|(_, power)| *power)
        .filter(|_| well_formed)
        .ok_or(UnitError::MalformedSize)?;
    let number: f64 = number.parse().map_err(|_| UnitError::MalformedSize)?;
    let bytes = number * 1024f64.powi(power as i32);
    if bytes >= i64::MAX as f64 {
        return Err(UnitError::SizeOverflow);
    }
    Ok(bytes as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prometheus_durations() {
        let ok = [
            ("0", 0),
            ("0s", 0),
            ("15d", 15 * 86_400_000),
            ("1d12h", 36 * 3_600_000),
            ("1y", 365 * 86_400_000),
            ("2w", 14 * 86_400_000),
            ("1h30m", 90 * 60_000),
            ("90s", 90_000),
            ("1m500ms", 60_500),
            ("250ms", 250),
            (
                "1y2w3d4h5m6s7ms",
                382 * 86_400_000 + 4 * 3_600_000 + 5 * 60_000 + 6_000 + 7,
            ),
        ];
        for (text, ms) in ok {
            assert_eq!(
                parse_prometheus_duration(text),
                Ok(Duration::from_millis(ms)),
                "{text}"
            );
        }
        let bad = [
            ("", UnitError::Empty),
            ("15", UnitError::MalformedDuration),
            ("d", UnitError::MalformedDuration),
            ("15x", UnitError::MalformedDuration),
            ("1.5h", UnitError::MalformedDuration),
            ("-1h", UnitError::MalformedDuration),
            ("1h ", UnitError::MalformedDuration),
            ("15D", UnitError::MalformedDuration),
            ("12h1d", UnitError::UnitOrder),
            ("1h1h", UnitError::UnitOrder),
            ("1ms1s", UnitError::UnitOrder),
            ("300y", UnitError::DurationOverflow),
            ("99999999999999999999999s", UnitError::DurationOverflow),
        ];
        for (text, error) in bad {
            assert_eq!(parse_prometheus_duration(text), Err(error), "{text}");
        }
    }

    #[test]
    fn prometheus_sizes() {
        let ok = [
            ("0", 0),
            ("512B", 512),
            ("1KB", 1024),
            ("1KiB", 1024),
            ("10GB", 10 << 30),
            ("1.5TiB", 3 << 39),
            ("2EB", 2 << 60),
        ];
        for (text, bytes) in ok {
            assert_eq!(parse_prometheus_size(text), Ok(bytes), "{text}");
        }
        let bad = [
            ("", UnitError::Empty),
            ("10", UnitError::MalformedSize),
            ("GB", UnitError::MalformedSize),
            ("10gb", UnitError::MalformedSize),
            ("10 GB", UnitError::MalformedSize),
            ("1.GB", UnitError::MalformedSize),
            (".5GB", UnitError::MalformedSize),
            ("1.2.3GB", UnitError::MalformedSize),
            ("10GBB", UnitError::MalformedSize),
            ("8EiB", UnitError::SizeOverflow),
        ];
        for (text, error) in bad {
            assert_eq!(parse_prometheus_size(text), Err(error), "{text}");
        }
    }
}
