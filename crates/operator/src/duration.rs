//! Durations on the command line, written the way Kubernetes manifests write them: `15s`, `500ms`,
//! `1m30s`.
//!
//! A bare number is rejected on purpose: `--lease-duration 15` could mean seconds or milliseconds,
//! and guessing wrong by a factor of 1000 silently breaks leader election.

use std::time::Duration;

/// Why a duration string was rejected.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DurationError {
    #[error("empty duration; write it with a unit, e.g. \"15s\"")]
    Empty,
    #[error(
        "{input:?}: expected a number at byte {at}; write durations like \"15s\", \"500ms\" or \"1m30s\""
    )]
    MissingNumber { input: String, at: usize },
    #[error("{input:?}: the number {number:?} has no unit; use ms, s, m or h (e.g. \"{number}s\")")]
    MissingUnit { input: String, number: String },
    #[error("{input:?}: unknown unit {unit:?}; use ms, s, m or h")]
    UnknownUnit { input: String, unit: String },
    #[error(
        "{input:?}: fractions are not supported; use a smaller unit (\"1500ms\", not \"1.5s\")"
    )]
    Fraction { input: String },
    #[error("{input:?}: duration is too large")]
    Overflow { input: String },
}

/// Parses `<number><unit>` groups (`ms`, `s`, `m`, `h`), e.g. `15s`, `1h30m`, `250ms`.
pub fn parse_duration(input: &str) -> Result<Duration, DurationError> {
    let text = input.trim();
    if text.is_empty() {
        return Err(DurationError::Empty);
    }
    let bytes = text.as_bytes();
    let mut total = Duration::ZERO;
    let mut pos = 0;
    while pos < bytes.len() {
        let digits_start = pos;
        while pos < bytes.len() && bytes[pos].is_ascii_digit() {
            pos += 1;
        }
        if pos == digits_start {
            return Err(DurationError::MissingNumber {
                input: input.to_owned(),
                at: pos,
            });
        }
        let number_text = &text[digits_start..pos];
        if bytes.get(pos) == Some(&b'.') {
            return Err(DurationError::Fraction {
                input: input.to_owned(),
            });
        }
        let unit_start = pos;
        while pos < bytes.len() && !bytes[pos].is_ascii_digit() {
            pos += 1;
        }
        let unit = &text[unit_start..pos];
        let overflow = || DurationError::Overflow {
            input: input.to_owned(),
        };
        let number: u64 = number_text.parse().map_err(|_| overflow())?;
        let part = match unit {
            "" => {
                return Err(DurationError::MissingUnit {
                    input: input.to_owned(),
                    number: number_text.to_owned(),
                });
            }
            "ms" => Duration::from_millis(number),
            "s" => Duration::from_secs(number),
            "m" => Duration::from_secs(number.checked_mul(60).ok_or_else(overflow)?),
            "h" => Duration::from_secs(number.checked_mul(3600).ok_or_else(overflow)?),
            other => {
                return Err(DurationError::UnknownUnit {
                    input: input.to_owned(),
                    unit: other.to_owned(),
                });
            }
        };
        total = total.checked_add(part).ok_or_else(overflow)?;
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn parses_single_units() {
        assert_eq!(parse_duration("15s"), Ok(Duration::from_secs(15)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_duration(" 5s "), Ok(Duration::from_secs(5)));
        assert_eq!(parse_duration("0s"), Ok(Duration::ZERO));
    }

    #[test]
    fn parses_compound_durations() {
        assert_eq!(parse_duration("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(
            parse_duration("1h2m3s4ms"),
            Ok(Duration::from_millis(3_723_004))
        );
    }

    #[test]
    fn rejects_a_bare_number() {
        assert_eq!(
            parse_duration("15"),
            Err(DurationError::MissingUnit {
                input: "15".into(),
                number: "15".into()
            })
        );
        assert!(matches!(
            parse_duration("1m30"),
            Err(DurationError::MissingUnit { .. })
        ));
    }

    #[test]
    fn rejects_malformed_input() {
        assert_eq!(parse_duration(""), Err(DurationError::Empty));
        assert_eq!(parse_duration("   "), Err(DurationError::Empty));
        assert!(matches!(
            parse_duration("s"),
            Err(DurationError::MissingNumber { at: 0, .. })
        ));
        assert_eq!(
            parse_duration("1.5s"),
            Err(DurationError::Fraction {
                input: "1.5s".into()
            })
        );
        assert!(matches!(
            parse_duration("5 s"),
            Err(DurationError::UnknownUnit { .. })
        ));
        assert_eq!(
            parse_duration("3d"),
            Err(DurationError::UnknownUnit {
                input: "3d".into(),
                unit: "d".into()
            })
        );
        assert!(matches!(
            parse_duration("-5s"),
            Err(DurationError::MissingNumber { .. })
        ));
    }

    #[test]
    fn rejects_overflow() {
        assert!(matches!(
            parse_duration("99999999999999999999999s"),
            Err(DurationError::Overflow { .. })
        ));
        assert!(matches!(
            parse_duration(&format!("{}h", u64::MAX)),
            Err(DurationError::Overflow { .. })
        ));
    }
}
