//! Which zones are dark: every node of the zone not Ready, as the node lifecycle controller
//! sees them (a kubelet that stopped renewing its Lease leaves its node `Ready: Unknown` and
//! tainted unreachable after the controller's grace period). One node down is a node failure,
//! which the budgets and rollouts already count through its pods; a whole zone without a Ready
//! node is an outage, and the controllers act on it (docs/outages.md).

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::jiff::Timestamp;
use zone_topology::Zone;

/// The taint the node lifecycle controller puts on a node whose kubelet stopped reporting.
pub const UNREACHABLE_TAINT: &str = "node.kubernetes.io/unreachable";

fn ready_condition(node: &Node) -> Option<&k8s_openapi::api::core::v1::NodeCondition> {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|conditions| conditions.iter().find(|c| c.type_ == "Ready"))
}

/// Whether `node` is Ready: its Ready condition True and not tainted unreachable.
pub fn ready(node: &Node) -> bool {
    let condition = ready_condition(node);
    let unreachable = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|taints| taints.iter().any(|t| t.key == UNREACHABLE_TAINT));
    condition.is_some_and(|c| c.status == "True") && !unreachable
}

/// The zone of `node` by `zone_label`; none without the label.
pub fn zone_of(node: &Node, zone_label: &str) -> Option<String> {
    let labels = node.metadata.labels.as_ref()?;
    Zone::from_label(labels, zone_label)
        .name()
        .map(str::to_owned)
}

/// Each zone's nodes and Ready nodes. Nodes without the zone label belong to no zone.
pub fn zone_nodes<'a>(
    nodes: impl IntoIterator<Item = &'a Node>,
    zone_label: &str,
) -> BTreeMap<String, (usize, usize)> {
    let mut zones: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    for node in nodes {
        let Some(zone) = zone_of(node, zone_label) else {
            continue;
        };
        let counts = zones.entry(zone).or_default();
        counts.0 += 1;
        counts.1 += usize::from(ready(node));
    }
    zones
}

/// The zones with at least one node and no Ready node, with their number of nodes.
pub fn dark_zones<'a>(
    nodes: impl IntoIterator<Item = &'a Node>,
    zone_label: &str,
) -> BTreeMap<String, usize> {
    zone_nodes(nodes, zone_label)
        .into_iter()
        .filter(|(_, (_, ready))| *ready == 0)
        .map(|(zone, (nodes, _))| (zone, nodes))
        .collect()
}

/// The zones coming back from an outage: some node Ready again, none Ready for `settle` yet
/// (its Ready condition's last transition; a node Ready within `settle` of its creation is new,
/// not returning), with when the first turned Ready. A zone returns
/// node by node (a kubelet thawed here, another there) and its pods report Ready within
/// seconds of theirs; a zone where some node has been Ready for long is not returning, whatever
/// its other nodes do (one broken or new node is no outage).
pub fn returning_zones<'a>(
    nodes: impl IntoIterator<Item = &'a Node>,
    zone_label: &str,
    now: Timestamp,
    settle: Duration,
) -> BTreeMap<String, Timestamp> {
    // zone -> (the first Ready transition among recent ones, a node Ready for long)
    let mut zones: BTreeMap<String, (Option<Timestamp>, bool)> = BTreeMap::new();
    for node in nodes {
        let Some(zone) = zone_of(node, zone_label) else {
            continue;
        };
        let entry = zones.entry(zone).or_default();
        if !ready(node) {
            continue;
        }
        let since = ready_condition(node)
            .and_then(|c| c.last_transition_time.as_ref())
            .map(|t| t.0);
        // A node Ready within `settle` of its creation is a new node, not one coming back.
        let new = node
            .metadata
            .creation_timestamp
            .as_ref()
            .zip(since)
            .is_some_and(|(created, since)| {
                Duration::try_from(since.duration_since(created.0)).is_ok_and(|d| d < settle)
            });
        match since {
            Some(since)
                if !new
                    && Duration::try_from(now.duration_since(since))
                        .is_ok_and(|age| age < settle) =>
            {
                entry.0 = Some(entry.0.map_or(since, |first| first.min(since)));
            }
            // Ready for long, since an unknown time, or new.
            _ => entry.1 = true,
        }
    }
    zones
        .into_iter()
        .filter_map(|(zone, (first, settled))| Some((zone, first.filter(|_| !settled)?)))
        .collect()
}

/// How a dark zone is named in messages: `zone-b (3 nodes, none Ready)`.
pub fn describe_dark(dark: &BTreeMap<String, usize>) -> String {
    dark.iter()
        .map(|(zone, nodes)| {
            let s = if *nodes == 1 { "" } else { "s" };
            format!("{zone} ({nodes} node{s}, none Ready)")
        })
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use serde_json::json;

    const LABEL: &str = "topology.kubernetes.io/zone";

    fn node(name: &str, zone: Option<&str>, ready: &str, unreachable: bool) -> Node {
        node_since(name, zone, ready, unreachable, "2026-01-01T00:00:00Z")
    }

    fn node_since(
        name: &str,
        zone: Option<&str>,
        ready: &str,
        unreachable: bool,
        since: &str,
    ) -> Node {
        let labels = zone.map_or(json!({}), |zone| json!({LABEL: zone}));
        let taints = if unreachable {
            json!([{"key": UNREACHABLE_TAINT, "effect": "NoExecute"}])
        } else {
            json!([])
        };
        serde_json::from_value(json!({
            "metadata": {"name": name, "labels": labels,
                "creationTimestamp": if name.starts_with("new") { since } else { "2025-01-01T00:00:00Z" }},
            "spec": {"taints": taints},
            "status": {"conditions": [
                {"type": "Ready", "status": ready, "lastTransitionTime": since},
            ]},
        }))
        .unwrap()
    }

    #[test]
    fn a_zone_is_dark_when_none_of_its_nodes_is_ready() {
        let nodes = [
            node("a-1", Some("zone-a"), "True", false),
            node("a-2", Some("zone-a"), "Unknown", true),
            node("b-1", Some("zone-b"), "Unknown", true),
            node("b-2", Some("zone-b"), "False", false),
            node("b-3", Some("zone-b"), "True", true),
            node("c-1", Some("zone-c"), "True", false),
            node("x", None, "Unknown", true),
        ];
        let dark = dark_zones(&nodes, LABEL);
        assert_eq!(dark, BTreeMap::from([("zone-b".to_string(), 3)]));
        assert_eq!(describe_dark(&dark), "zone-b (3 nodes, none Ready)");
        assert!(
            dark_zones(&nodes[..2], LABEL).is_empty(),
            "one node down is no outage"
        );
        assert!(
            !ready(&node("n", None, "True", true)),
            "tainted unreachable"
        );
        let no_condition: Node =
            serde_json::from_value(json!({"metadata": {"name": "n"}})).unwrap();
        assert!(!ready(&no_condition));
    }

    #[test]
    fn a_zone_returns_while_none_of_its_nodes_has_been_ready_for_the_settle_time() {
        let now: Timestamp = "2026-01-01T01:00:00Z".parse().unwrap();
        let settle = Duration::from_secs(60);
        let nodes = [
            // zone-a: one new node among old ones.
            node_since("a-1", Some("zone-a"), "True", false, "2026-01-01T00:10:00Z"),
            node_since("a-2", Some("zone-a"), "True", false, "2026-01-01T00:59:30Z"),
            // zone-b: back 10 and 20 s ago.
            node_since("b-1", Some("zone-b"), "True", false, "2026-01-01T00:59:40Z"),
            node_since("b-2", Some("zone-b"), "True", false, "2026-01-01T00:59:50Z"),
            // zone-c: one back, one still down: returning too.
            node_since("c-1", Some("zone-c"), "True", false, "2026-01-01T00:59:50Z"),
            node_since(
                "c-2",
                Some("zone-c"),
                "Unknown",
                true,
                "2026-01-01T00:50:00Z",
            ),
            // zone-d: back 2 minutes ago.
            node_since("d-1", Some("zone-d"), "True", false, "2026-01-01T00:58:00Z"),
            // zone-f: a new zone's first node, Ready 5 s ago.
            node_since(
                "new-f-1",
                Some("zone-f"),
                "True",
                false,
                "2026-01-01T00:59:55Z",
            ),
            // zone-e: a broken node beside one Ready for long.
            node_since("e-1", Some("zone-e"), "True", false, "2026-01-01T00:00:00Z"),
            node_since(
                "e-2",
                Some("zone-e"),
                "Unknown",
                true,
                "2026-01-01T00:50:00Z",
            ),
        ];
        let returning = returning_zones(&nodes, LABEL, now, settle);
        let at = |t: &str| t.parse::<Timestamp>().unwrap();
        assert_eq!(
            returning,
            BTreeMap::from([
                ("zone-b".to_string(), at("2026-01-01T00:59:40Z")),
                ("zone-c".to_string(), at("2026-01-01T00:59:50Z")),
            ])
        );
    }
}
