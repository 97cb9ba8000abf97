//! Lenient field deserialization for status types.
//!
//! Status is written by controllers, and a stored object may predate our schema (the Go
//! controllers', or an older release of ours). A field of an unexpected shape becomes its default
//! instead of failing the whole object — which, in a watch, would stall every object of the kind.

use serde::de::{Deserialize, DeserializeOwned, Deserializer};

/// `#[serde(default, deserialize_with = "lenient::or_default")]`: the value if it parses as `T`,
/// else `T::default()`.
pub fn or_default<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: DeserializeOwned + Default,
{
    let value = serde_json::Value::deserialize(deserializer)?;
    Ok(serde_json::from_value(value).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use serde::Deserialize;

    #[derive(Debug, Deserialize, Default, PartialEq)]
    struct Status {
        #[serde(default, deserialize_with = "super::or_default")]
        step: i32,
        #[serde(default, deserialize_with = "super::or_default")]
        per_zone: BTreeMap<String, i32>,
    }

    #[test]
    fn wrong_shapes_become_defaults_and_the_rest_survives() {
        let status: Status =
            serde_json::from_str(r#"{"step": "three", "per_zone": {"a": 1}, "extra": true}"#)
                .unwrap();
        assert_eq!(status.step, 0);
        assert_eq!(status.per_zone, BTreeMap::from([("a".to_string(), 1)]));
    }
}
