//! Prometheus durations (`model.ParseDuration`): units y, w, d, h, m, s, ms, each at most
//! once, largest first (`1h30m`, not `30m1h` nor `1.5h`); `0` alone needs no unit. Rules with
//! any other spelling make Prometheus refuse the whole file.

/// The units, largest first, with their length in milliseconds.
const UNITS: [(&str, u64); 7] = [
    ("y", 365 * 24 * 3_600_000),
    ("w", 7 * 24 * 3_600_000),
    ("d", 24 * 3_600_000),
    ("h", 3_600_000),
    ("m", 60_000),
    ("s", 1_000),
    ("ms", 1),
];

/// Prometheus stores durations as Go `time.Duration` nanoseconds: at most about 292 years.
const MAX_NANOS: u64 = i64::MAX as u64;
const NANOS_PER_MILLI: u64 = 1_000_000;

/// The duration in milliseconds, or Prometheus's reason for refusing it.
pub(super) fn parse(text: &str) -> Result<u64, String> {
    match text {
        "0" => return Ok(0),
        "" => return Err("empty duration string".to_string()),
        _ => {}
    }
    let invalid = || format!("not a valid duration string: {text:?}");
    let mut rest = text;
    let mut nanos: u64 = 0;
    // Index in UNITS of the last unit seen: the next one must come strictly later.
    let mut last: Option<usize> = None;
    while !rest.is_empty() {
        let digits = rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_digit()).len();
        if digits == 0 {
            return Err(invalid());
        }
        let value: u64 = rest[..digits].parse().map_err(|_| invalid())?;
        rest = &rest[digits..];
        let unit_len = rest.len() - rest.trim_start_matches(|c: char| !c.is_ascii_digit()).len();
        if unit_len == 0 {
            return Err(invalid());
        }
        let unit = &rest[..unit_len];
        rest = &rest[unit_len..];
        let Some(position) = UNITS.iter().position(|(name, _)| *name == unit) else {
            return Err(format!("unknown unit {unit:?} in duration {text:?}"));
        };
        if last.is_some_and(|last| position <= last) {
            return Err(invalid());
        }
        last = Some(position);
        let unit_nanos = UNITS[position].1 * NANOS_PER_MILLI;
        let out_of_range = || "duration out of range".to_string();
        let add = value
            .checked_mul(unit_nanos)
            .filter(|add| *add <= MAX_NANOS)
            .ok_or_else(out_of_range)?;
        nanos = nanos
            .checked_add(add)
            .filter(|sum| *sum <= MAX_NANOS)
            .ok_or_else(out_of_range)?;
    }
    Ok(nanos / NANOS_PER_MILLI)
}

#[cfg(test)]
mod tests {
    use super::parse;

    #[test]
    fn prometheus_durations() {
        let cases: &[(&str, Result<u64, &str>)] = &[
            ("0", Ok(0)),
            ("0s", Ok(0)),
            ("5m", Ok(300_000)),
            ("1h30m", Ok(5_400_000)),
            (
                "1y2w3d4h5m6s7ms",
                Ok(((((365 + 14 + 3) * 24 + 4) * 60 + 5) * 60 + 6) * 1000 + 7),
            ),
            ("250ms", Ok(250)),
            ("90s", Ok(90_000)),
            ("292y", Ok(292 * 365 * 24 * 3_600_000)),
            ("", Err("empty duration string")),
            ("5", Err("not a valid duration string: \"5\"")),
            ("00", Err("not a valid duration string: \"00\"")),
            ("m", Err("not a valid duration string: \"m\"")),
            ("-5m", Err("not a valid duration string: \"-5m\"")),
            ("1.5h", Err("unknown unit \".\" in duration \"1.5h\"")),
            ("5 m", Err("unknown unit \" m\" in duration \"5 m\"")),
            ("5min", Err("unknown unit \"min\" in duration \"5min\"")),
            ("5M", Err("unknown unit \"M\" in duration \"5M\"")),
            ("30m1h", Err("not a valid duration string: \"30m1h\"")),
            ("1m1m", Err("not a valid duration string: \"1m1m\"")),
            ("293y", Err("duration out of range")),
            (
                "99999999999999999999s",
                Err("not a valid duration string: \"99999999999999999999s\""),
            ),
            ("292y292w", Err("duration out of range")),
        ];
        for (text, expected) in cases {
            assert_eq!(parse(text), expected.map_err(str::to_string), "{text:?}");
        }
    }
}
