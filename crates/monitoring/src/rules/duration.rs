//! Prometheus durations (`model.ParseDuration`): units y, w, d, h, m, s, ms, each at most
//! once, largest first (`1h30m`, not `30m1h` nor `1.5h`); `0` alone needs no unit. Rules with
//! any other spelling make Prometheus refuse the whole file.

/// The duration in milliseconds, or why Prometheus would refuse it.
pub(super) fn parse(text: &str) -> Result<u64, String> {
    zone_topology::units::parse_prometheus_duration(text)
        .map(|duration| u64::try_from(duration.as_millis()).unwrap_or(u64::MAX))
        .map_err(|error| format!("{text:?} is not a Prometheus duration: {error}"))
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
            ("", Err("")),
            ("5", Err("")),
            ("00", Err("")),
            ("m", Err("")),
            ("-5m", Err("")),
            ("1.5h", Err("")),
            ("5 m", Err("")),
            ("5min", Err("")),
            ("5M", Err("")),
            ("30m1h", Err("")),
            ("1m1m", Err("")),
            ("293y", Err("")),
            ("99999999999999999999s", Err("")),
            ("292y292w", Err("")),
        ];
        for (text, expected) in cases {
            match expected {
                Ok(ms) => assert_eq!(parse(text), Ok(*ms), "{text:?}"),
                Err(_) => {
                    let error = parse(text).unwrap_err();
                    let quoted = format!("{text:?} is not a Prometheus duration: ");
                    assert!(error.starts_with(&quoted), "{error}");
                }
            }
        }
    }
}
