//! The zone of a pod: the zone label of the node it is bound to, or *unknown*.

use std::collections::BTreeMap;
use std::fmt;

/// The well-known node label that names a node's zone.
pub const ZONE_LABEL: &str = "topology.kubernetes.io/zone";

/// A zone, or the fact that it is not known (pod not scheduled, node gone, label missing).
///
/// Unknown is a first-class value: it sorts after every known zone and is never silently
/// dropped, so a pod whose node vanished still counts.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Zone {
    Known(String),
    Unknown,
}

impl Zone {
    /// The zone of a pod bound to `node_name`, looked up in `node_labels` (node name → labels)
    /// under `label_key`. No node, no such node or no label all mean [`Zone::Unknown`]; an empty
    /// label value is not a zone either.
    pub fn of_pod(
        node_name: Option<&str>,
        node_labels: &BTreeMap<String, BTreeMap<String, String>>,
        label_key: &str,
    ) -> Zone {
        node_name
            .and_then(|node| node_labels.get(node))
            .map_or(Zone::Unknown, |labels| Zone::from_label(labels, label_key))
    }

    /// The zone named by `label_key` in a node's labels.
    pub fn from_label(labels: &BTreeMap<String, String>, label_key: &str) -> Zone {
        match labels.get(label_key) {
            Some(value) if !value.is_empty() => Zone::Known(value.clone()),
            _ => Zone::Unknown,
        }
    }

    pub fn known(name: impl Into<String>) -> Zone {
        Zone::Known(name.into())
    }

    pub fn name(&self) -> Option<&str> {
        match self {
            Zone::Known(name) => Some(name),
            Zone::Unknown => None,
        }
    }

    pub fn is_known(&self) -> bool {
        matches!(self, Zone::Known(_))
    }
}

/// The text used for an unknown zone in status maps, events and messages.
pub const UNKNOWN_ZONE: &str = "unknown";

impl fmt::Display for Zone {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Zone::Known(name) => f.write_str(name),
            Zone::Unknown => f.write_str(UNKNOWN_ZONE),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nodes() -> BTreeMap<String, BTreeMap<String, String>> {
        let mut nodes = BTreeMap::new();
        nodes.insert(
            "node-a".to_string(),
            BTreeMap::from([(ZONE_LABEL.to_string(), "zone-a".to_string())]),
        );
        nodes.insert("node-bare".to_string(), BTreeMap::new());
        nodes.insert(
            "node-empty".to_string(),
            BTreeMap::from([(ZONE_LABEL.to_string(), String::new())]),
        );
        nodes
    }

    #[test]
    fn zone_comes_from_the_node_label() {
        assert_eq!(
            Zone::of_pod(Some("node-a"), &nodes(), ZONE_LABEL),
            Zone::known("zone-a")
        );
    }

    #[test]
    fn missing_node_label_or_binding_is_unknown() {
        let nodes = nodes();
        assert_eq!(Zone::of_pod(None, &nodes, ZONE_LABEL), Zone::Unknown);
        assert_eq!(
            Zone::of_pod(Some("gone"), &nodes, ZONE_LABEL),
            Zone::Unknown
        );
        assert_eq!(
            Zone::of_pod(Some("node-bare"), &nodes, ZONE_LABEL),
            Zone::Unknown
        );
        assert_eq!(
            Zone::of_pod(Some("node-empty"), &nodes, ZONE_LABEL),
            Zone::Unknown
        );
    }

    #[test]
    fn label_key_is_configurable() {
        let nodes = BTreeMap::from([(
            "n".to_string(),
            BTreeMap::from([("example.com/rack".to_string(), "r1".to_string())]),
        )]);
        assert_eq!(
            Zone::of_pod(Some("n"), &nodes, "example.com/rack"),
            Zone::known("r1")
        );
        assert_eq!(Zone::of_pod(Some("n"), &nodes, ZONE_LABEL), Zone::Unknown);
    }

    #[test]
    fn unknown_sorts_last_and_displays_as_unknown() {
        let mut zones = vec![Zone::Unknown, Zone::known("zone-b"), Zone::known("zone-a")];
        zones.sort();
        assert_eq!(
            zones,
            vec![Zone::known("zone-a"), Zone::known("zone-b"), Zone::Unknown]
        );
        assert_eq!(Zone::Unknown.to_string(), "unknown");
    }
}
