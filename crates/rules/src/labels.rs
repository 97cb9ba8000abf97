//! A label set as a sorted vector of pairs: what Prometheus writes as a JSON object sorted by
//! name, held in one allocation (a B-tree map takes a node of eleven slots for every set, and
//! the merged answer of 100 backends holds hundreds of thousands of sets).

use std::fmt;

use serde::de::{MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Sorted by name, names unique.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Labels(Vec<(String, String)>);

impl Labels {
    pub fn new() -> Self {
        Self::default()
    }

    fn position(&self, name: &str) -> Result<usize, usize> {
        self.0.binary_search_by(|(key, _)| key.as_str().cmp(name))
    }

    pub fn get(&self, name: &str) -> Option<&String> {
        self.position(name).ok().map(|i| &self.0[i].1)
    }

    pub fn contains_key(&self, name: &str) -> bool {
        self.position(name).is_ok()
    }

    /// Sets `name` to `value`; returns the value it replaced.
    pub fn insert(&mut self, name: String, value: String) -> Option<String> {
        match self.position(&name) {
            Ok(i) => Some(std::mem::replace(&mut self.0[i].1, value)),
            Err(i) => {
                self.0.insert(i, (name, value));
                None
            }
        }
    }

    pub fn retain(&mut self, mut keep: impl FnMut(&String, &String) -> bool) {
        self.0.retain(|(name, value)| keep(name, value));
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn iter(&self) -> impl Iterator<Item = (&String, &String)> {
        self.0.iter().map(|(name, value)| (name, value))
    }
}

impl FromIterator<(String, String)> for Labels {
    fn from_iter<I: IntoIterator<Item = (String, String)>>(pairs: I) -> Self {
        let mut labels: Vec<(String, String)> = pairs.into_iter().collect();
        // The last of a repeated name wins, as in a JSON object read into a map.
        labels.reverse();
        labels.sort_by(|a, b| a.0.cmp(&b.0));
        labels.dedup_by(|later, earlier| later.0 == earlier.0);
        labels.shrink_to_fit();
        Labels(labels)
    }
}

impl std::ops::Index<&str> for Labels {
    type Output = String;

    /// Panics when `name` is not set, like a map's index.
    fn index(&self, name: &str) -> &String {
        match self.get(name) {
            Some(value) => value,
            None => panic!("no label {name:?}"),
        }
    }
}

impl Serialize for Labels {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.0.len()))?;
        for (name, value) in &self.0 {
            map.serialize_entry(name, value)?;
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for Labels {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct LabelsVisitor;

        impl<'de> Visitor<'de> for LabelsVisitor {
            type Value = Labels;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object of label names to values")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Labels, A::Error> {
                let mut pairs = Vec::with_capacity(map.size_hint().unwrap_or(0));
                while let Some(pair) = map.next_entry::<String, String>()? {
                    pairs.push(pair);
                }
                // Prometheus writes them sorted: then this only checks.
                if pairs.windows(2).all(|w| w[0].0 < w[1].0) {
                    pairs.shrink_to_fit();
                    Ok(Labels(pairs))
                } else {
                    Ok(pairs.into_iter().collect())
                }
            }
        }

        deserializer.deserialize_map(LabelsVisitor)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_sorted_set_that_reads_and_writes_as_a_json_object() {
        let labels: Labels = serde_json::from_str(r#"{"b":"2","a":"1","b":"3"}"#).unwrap();
        assert_eq!(
            serde_json::to_string(&labels).unwrap(),
            r#"{"a":"1","b":"3"}"#
        );
        let mut labels = labels;
        assert_eq!(labels.insert("c".into(), "4".into()), None);
        assert_eq!(labels.insert("a".into(), "0".into()), Some("1".into()));
        labels.retain(|name, _| name != "b");
        assert_eq!(
            serde_json::to_string(&labels).unwrap(),
            r#"{"a":"0","c":"4"}"#
        );
        assert!(labels.contains_key("c") && !labels.contains_key("b"));
        assert_eq!(labels["c"], "4");
        assert_eq!(labels.get("zz"), None);
    }

    #[test]
    fn order_is_the_map_order() {
        let a: Labels = [("x".to_string(), "1".to_string())].into_iter().collect();
        let b: Labels = [
            ("x".to_string(), "1".to_string()),
            ("y".to_string(), "0".to_string()),
        ]
        .into_iter()
        .collect();
        assert!(a < b);
    }
}
