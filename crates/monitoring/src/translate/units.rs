//! Parsing of the unit-bearing strings the CRDs carry (durations, byte sizes, quantities), with
//! the grammars Prometheus and Kubernetes use, so a value Prometheus would refuse is rejected
//! on the object instead of breaking the whole configuration.

use std::sync::LazyLock;

use regex::Regex;

/// A Prometheus duration (`1h30m`, `15s`, `0`), in milliseconds. Empty is invalid.
pub fn duration_ms(text: &str) -> Result<u128, String> {
    zone_topology::units::parse_prometheus_duration(text)
        .map(|duration| duration.as_millis())
        .map_err(|error| format!("{text:?} is not a valid duration: {error}"))
}

static BYTE_SIZE: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r"^([0-9]*\.?[0-9]+)([KMGTPE]?)(i?)B$").ok());

/// A byte size as Prometheus reads `body_size_limit` (`10MB`, `1GiB`, `0`): every multiple is
/// base 2, with or without the `i`.
pub fn byte_size(text: &str) -> Result<f64, String> {
    if text == "0" {
        return Ok(0.0);
    }
    let invalid = || format!("{text:?} is not a valid byte size");
    let captures = BYTE_SIZE
        .as_ref()
        .and_then(|re| re.captures(text))
        .ok_or_else(invalid)?;
    let number: f64 = captures[1].parse().map_err(|_| invalid())?;
    let power = match &captures[2] {
        "" if !captures[3].is_empty() => return Err(invalid()),
        "" => 0,
        "K" => 1,
        "M" => 2,
        "G" => 3,
        "T" => 4,
        "P" => 5,
        _ => 6,
    };
    Ok(number * 1024f64.powi(power))
}

static QUANTITY: LazyLock<Option<Regex>> = LazyLock::new(|| {
    Regex::new(
        r"^([+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+))(Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E|[eE][+-]?[0-9]+)?$",
    )
    .ok()
});

/// A Kubernetes quantity as a float (`AsApproximateFloat64`): `1.1`, `1100m`, `2k`, `1e3`.
pub fn quantity(text: &str) -> Result<f64, String> {
    let invalid = || format!("{text:?} is not a valid quantity");
    let captures = QUANTITY
        .as_ref()
        .and_then(|re| re.captures(text))
        .ok_or_else(invalid)?;
    let number: f64 = captures[1].parse().map_err(|_| invalid())?;
    // Scaling down divides, so `1100m` is exactly the float nearest 1.1.
    let factor = match captures.get(2).map_or("", |m| m.as_str()) {
        "" => 1.0,
        "m" => return Ok(number / 1e3),
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        "Ki" => 1024.0,
        "Mi" => 1024f64.powi(2),
        "Gi" => 1024f64.powi(3),
        "Ti" => 1024f64.powi(4),
        "Pi" => 1024f64.powi(5),
        "Ei" => 1024f64.powi(6),
        exponent => {
            let power: i32 = exponent[1..].parse().map_err(|_| invalid())?;
            if power < 0 {
                return Ok(number / 10f64.powi(-power));
            }
            10f64.powi(power)
        }
    };
    Ok(number * factor)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_follow_prometheus_grammar() {
        assert_eq!(duration_ms("0"), Ok(0));
        assert_eq!(duration_ms("30s"), Ok(30_000));
        assert_eq!(duration_ms("1h30m"), Ok(5_400_000));
        assert_eq!(duration_ms("1d"), Ok(86_400_000));
        assert_eq!(duration_ms("500ms"), Ok(500));
        for bad in ["", "30", "1.5s", "30m1h", "-1s", "1 s"] {
            assert!(duration_ms(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn byte_sizes_are_base_two() {
        assert_eq!(byte_size("0"), Ok(0.0));
        assert_eq!(byte_size("1KB"), Ok(1024.0));
        assert_eq!(byte_size("1KiB"), Ok(1024.0));
        assert_eq!(byte_size("2MB"), Ok(2.0 * 1024.0 * 1024.0));
        assert_eq!(byte_size("1.5GB"), Ok(1.5 * 1024f64.powi(3)));
        assert_eq!(byte_size("10B"), Ok(10.0));
        for bad in ["", "10", "1iB", "1kb", "MB"] {
            assert!(byte_size(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn quantities_scale_by_suffix() {
        assert_eq!(quantity("1.1"), Ok(1.1));
        assert_eq!(quantity("1100m"), Ok(1.1));
        assert_eq!(quantity("2k"), Ok(2000.0));
        assert_eq!(quantity("1e3"), Ok(1000.0));
        assert_eq!(quantity("1Ki"), Ok(1024.0));
        assert!(quantity("abc").is_err());
        assert!(quantity("").is_err());
    }
}
