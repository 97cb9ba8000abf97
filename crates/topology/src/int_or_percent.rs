//! `maxUnavailable`-style values: an absolute count or a percentage of a base, rounded up.

use std::fmt;

use serde::{Deserialize, Serialize};

/// An integer or a `"N%"` string, as Kubernetes' `IntOrString` is used for budgets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IntOrPercent {
    Int(i64),
    Percent(u32),
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IntOrPercentError {
    #[error("{0:?} is neither an integer nor a percentage like \"25%\"")]
    Malformed(String),
    #[error("{0} is negative")]
    Negative(i64),
}

impl IntOrPercent {
    /// Parses the string form: `"25%"` or `"3"` (an integer written as a string, which the
    /// Kubernetes helpers accept too).
    pub fn parse(text: &str) -> Result<IntOrPercent, IntOrPercentError> {
        let trimmed = text.trim();
        if let Some(number) = trimmed.strip_suffix('%') {
            return number
                .parse::<u32>()
                .map(IntOrPercent::Percent)
                .map_err(|_| IntOrPercentError::Malformed(text.to_string()));
        }
        let value = trimmed
            .parse::<i64>()
            .map_err(|_| IntOrPercentError::Malformed(text.to_string()))?;
        IntOrPercent::int(value)
    }

    /// An absolute count; negative counts are rejected.
    pub fn int(value: i64) -> Result<IntOrPercent, IntOrPercentError> {
        if value < 0 {
            return Err(IntOrPercentError::Negative(value));
        }
        Ok(IntOrPercent::Int(value))
    }

    /// `0` or `0%`: as a budget, no voluntary disruption at all (a freeze), whatever the base.
    pub fn is_zero(self) -> bool {
        matches!(self, IntOrPercent::Int(0) | IntOrPercent::Percent(0))
    }

    /// The value against `base`: integers as given, percentages of `base` rounded up.
    pub fn resolve(self, base: u32) -> u32 {
        match self {
            IntOrPercent::Int(value) => u32::try_from(value).unwrap_or(u32::MAX),
            IntOrPercent::Percent(percent) => {
                let scaled = u64::from(base) * u64::from(percent);
                u32::try_from(scaled.div_ceil(100)).unwrap_or(u32::MAX)
            }
        }
    }
}

impl fmt::Display for IntOrPercent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IntOrPercent::Int(value) => write!(f, "{value}"),
            IntOrPercent::Percent(percent) => write!(f, "{percent}%"),
        }
    }
}

/// Serialised the way Kubernetes does: a JSON number or a `"N%"` string.
impl Serialize for IntOrPercent {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            IntOrPercent::Int(value) => serializer.serialize_i64(*value),
            IntOrPercent::Percent(_) => serializer.serialize_str(&self.to_string()),
        }
    }
}

impl<'de> Deserialize<'de> for IntOrPercent {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Int(i64),
            Text(String),
        }
        match Raw::deserialize(deserializer)? {
            Raw::Int(value) => IntOrPercent::int(value),
            Raw::Text(text) => IntOrPercent::parse(&text),
        }
        .map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentages_round_up() {
        assert_eq!(IntOrPercent::Percent(25).resolve(30), 8);
        assert_eq!(IntOrPercent::Percent(33).resolve(9), 3);
        assert_eq!(IntOrPercent::Percent(10).resolve(1), 1);
        assert_eq!(IntOrPercent::Percent(0).resolve(30), 0);
        assert_eq!(IntOrPercent::Percent(100).resolve(7), 7);
        assert_eq!(IntOrPercent::Percent(25).resolve(12), 3);
    }

    #[test]
    fn only_zero_and_zero_percent_are_zero() {
        assert!(IntOrPercent::Int(0).is_zero());
        assert!(IntOrPercent::Percent(0).is_zero());
        // 10% of 3 pods rounds up to 1; even of 0 pods it is a budget, not a freeze.
        assert!(!IntOrPercent::Percent(10).is_zero());
        assert!(!IntOrPercent::Int(1).is_zero());
    }

    #[test]
    fn integers_are_taken_as_given() {
        assert_eq!(IntOrPercent::Int(4).resolve(30), 4);
        assert_eq!(IntOrPercent::Int(40).resolve(30), 40);
    }

    #[test]
    fn parses_both_forms_and_rejects_garbage() {
        assert_eq!(IntOrPercent::parse("25%"), Ok(IntOrPercent::Percent(25)));
        assert_eq!(IntOrPercent::parse("3"), Ok(IntOrPercent::Int(3)));
        assert!(matches!(
            IntOrPercent::parse("abc"),
            Err(IntOrPercentError::Malformed(_))
        ));
        assert!(matches!(
            IntOrPercent::parse("-1%"),
            Err(IntOrPercentError::Malformed(_))
        ));
        assert!(matches!(
            IntOrPercent::parse("1.5%"),
            Err(IntOrPercentError::Malformed(_))
        ));
        assert_eq!(
            IntOrPercent::parse("-2"),
            Err(IntOrPercentError::Negative(-2))
        );
    }

    #[test]
    fn serde_round_trip_matches_kubernetes_shapes() {
        let int: IntOrPercent = serde_norway::from_str("4").unwrap();
        let pct: IntOrPercent = serde_norway::from_str("\"25%\"").unwrap();
        assert_eq!(
            (int, pct),
            (IntOrPercent::Int(4), IntOrPercent::Percent(25))
        );
        assert_eq!(serde_norway::to_string(&int).unwrap().trim(), "4");
        assert_eq!(serde_norway::to_string(&pct).unwrap().trim(), "25%");
        assert!(serde_norway::from_str::<IntOrPercent>("\"x%\"").is_err());
    }
}
