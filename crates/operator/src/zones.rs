//! The zone of every node, for placing pods, and the zones that are dark: a watch of nodes that
//! keeps the zone label, the Ready condition and the unreachable taint alone (a node object is
//! kilobytes; what is kept, a few dozen bytes).

use std::collections::{BTreeMap, BTreeSet};
use std::future::ready;

use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::{Node, NodeSpec, NodeStatus, Pod};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use zone_topology::Zone;
use zone_views::nodes::{UNREACHABLE_TAINT, dark_zones};

use crate::controller::log_watch_error;
use crate::metrics::MetricsError;
use crate::watch::InitialList;

/// Read side of the node cache: which zone a pod runs in. Cheap to clone.
#[derive(Clone)]
pub struct NodeZones {
    nodes: Store<Node>,
    zone_label: String,
}

impl NodeZones {
    /// Starts the cache: returns its read side and the stream that keeps it (drive it for as
    /// long as the cache is read; it yields once per node change).
    pub fn watch(
        client: &Client,
        zone_label: &str,
        initial_list: InitialList,
    ) -> (Self, impl Stream<Item = ()> + Send + use<>) {
        let (nodes, writer) = reflector::store();
        let label = zone_label.to_owned();
        let stream = watcher(Api::<Node>::all(client.clone()), initial_list.config())
            .modify(move |node| strip_node(node, &label))
            .backoff(crate::backoff::WatchBackoff::default())
            .reflect(writer)
            .touched_objects()
            .filter_map(|result| ready(log_watch_error("nodes", result)))
            .map(|_| ());
        let zones = Self {
            nodes,
            zone_label: zone_label.to_owned(),
        };
        (zones, stream)
    }

    /// A cache over an existing store (tests, or a binary that fills the store itself).
    pub fn from_store(nodes: Store<Node>, zone_label: &str) -> Self {
        Self {
            nodes,
            zone_label: zone_label.to_owned(),
        }
    }

    /// Resolves once the first list is complete.
    pub async fn wait_until_ready(&self) -> Result<(), reflector::store::WriterDropped> {
        self.nodes.wait_until_ready().await
    }

    /// The zones that have at least one node and no Ready one, with their number of nodes.
    pub fn dark_zones(&self) -> BTreeMap<String, usize> {
        dark_zones(
            self.nodes.state().iter().map(AsRef::as_ref),
            &self.zone_label,
        )
    }

    /// The zones coming back from an outage: some node Ready again, none for `settle` yet; with
    /// when the first turned Ready.
    pub fn returning_zones(
        &self,
        settle: std::time::Duration,
    ) -> BTreeMap<String, k8s_openapi::jiff::Timestamp> {
        zone_views::nodes::returning_zones(
            self.nodes.state().iter().map(AsRef::as_ref),
            &self.zone_label,
            k8s_openapi::jiff::Timestamp::now(),
            settle,
        )
    }

    /// Each zone's nodes and Ready nodes.
    pub fn zone_nodes(&self) -> BTreeMap<String, (usize, usize)> {
        zone_views::nodes::zone_nodes(
            self.nodes.state().iter().map(AsRef::as_ref),
            &self.zone_label,
        )
    }

    /// Registers `zone_aware_zone_nodes{zone, ready}` in `registry`: the nodes of each zone,
    /// Ready or not, read from this cache when scraped (a zone with nodes and none Ready is
    /// dark, docs/outages.md).
    pub fn register_metrics(&self, registry: &prometheus::Registry) -> Result<(), MetricsError> {
        let collector = ZoneNodes::new(self.clone()).map_err(|source| MetricsError::Create {
            metric: ZONE_NODES,
            source,
        })?;
        registry
            .register(Box::new(collector))
            .map_err(|source| MetricsError::Register {
                metric: ZONE_NODES,
                source,
            })
    }

    /// The zones that have at least one node.
    pub fn zones_present(&self) -> BTreeSet<String> {
        self.nodes
            .state()
            .iter()
            .filter_map(|node| {
                let labels = node.metadata.labels.as_ref()?;
                Zone::from_label(labels, &self.zone_label)
                    .name()
                    .map(str::to_owned)
            })
            .collect()
    }

    /// The zone of the node `pod` is bound to: unknown when unscheduled, when the node is not
    /// (yet) in the cache, or when it has no zone label.
    pub fn zone_of(&self, pod: &Pod) -> Zone {
        match pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) {
            Some(node_name) => self.zone_of_node(node_name),
            None => Zone::Unknown,
        }
    }

    /// The zone of the node `node_name`: unknown when it is not (yet) in the cache or has no
    /// zone label.
    pub fn zone_of_node(&self, node_name: &str) -> Zone {
        self.nodes
            .get(&ObjectRef::new(node_name))
            .map_or(Zone::Unknown, |node| {
                Zone::from_label(
                    node.metadata.labels.as_ref().unwrap_or(&Default::default()),
                    &self.zone_label,
                )
            })
    }
}

const ZONE_NODES: &str = "zone_aware_zone_nodes";

/// The nodes of each zone, Ready or not, computed from the cache at each scrape.
#[derive(Clone)]
struct ZoneNodes {
    zones: NodeZones,
    desc: prometheus::core::Desc,
}

impl ZoneNodes {
    fn opts() -> prometheus::Opts {
        prometheus::Opts::new(
            ZONE_NODES,
            "Nodes of each zone, by readiness (ready=\"true\": Ready and not tainted unreachable). \
             A zone with nodes and none Ready is dark: rollouts hold (docs/outages.md).",
        )
    }

    fn new(zones: NodeZones) -> prometheus::Result<Self> {
        let opts = Self::opts();
        let desc = prometheus::core::Desc::new(
            opts.fq_name(),
            opts.help.clone(),
            vec!["zone".to_string(), "ready".to_string()],
            Default::default(),
        )?;
        Ok(Self { zones, desc })
    }
}

impl prometheus::core::Collector for ZoneNodes {
    fn desc(&self) -> Vec<&prometheus::core::Desc> {
        vec![&self.desc]
    }

    fn collect(&self) -> Vec<prometheus::proto::MetricFamily> {
        let Ok(gauge) = prometheus::IntGaugeVec::new(Self::opts(), &["zone", "ready"]) else {
            return Vec::new();
        };
        let count = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
        for (zone, (nodes, ready)) in self.zones.zone_nodes() {
            gauge
                .with_label_values(&[zone.as_str(), "true"])
                .set(count(ready));
            gauge
                .with_label_values(&[zone.as_str(), "false"])
                .set(count(nodes.saturating_sub(ready)));
        }
        prometheus::core::Collector::collect(&gauge)
    }
}

/// Keeps only what the cache is read for: the zone label, the Ready condition's status and the
/// unreachable taint.
pub fn strip_node(node: &mut Node, zone_label: &str) {
    let meta = &mut node.metadata;
    meta.annotations = None;
    meta.managed_fields = None;
    meta.owner_references = None;
    if let Some(labels) = meta.labels.as_mut() {
        labels.retain(|key, _| key == zone_label);
    }
    let taints = node
        .spec
        .take()
        .and_then(|spec| spec.taints)
        .map(|mut taints| {
            taints.retain(|t| t.key == UNREACHABLE_TAINT);
            taints
        })
        .filter(|taints| !taints.is_empty());
    node.spec = taints.map(|taints| NodeSpec {
        taints: Some(taints),
        ..NodeSpec::default()
    });
    let conditions =
        node.status
            .take()
            .and_then(|status| status.conditions)
            .map(|mut conditions| {
                conditions.retain(|c| c.type_ == "Ready");
                for c in &mut conditions {
                    c.message = None;
                    c.reason = None;
                    c.last_heartbeat_time = None;
                }
                conditions
            });
    node.status = conditions.map(|conditions| NodeStatus {
        conditions: Some(conditions),
        ..NodeStatus::default()
    });
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use kube::runtime::watcher::Event;
    use serde_json::json;

    fn node(name: &str, labels: serde_json::Value, ready: &str) -> Node {
        serde_json::from_value(json!({
            "metadata": {"name": name, "labels": labels, "annotations": {"big": "x"}},
            "spec": {"podCIDR": "10.0.0.0/24", "taints": [
                {"key": "node.kubernetes.io/unreachable", "effect": "NoSchedule"},
                {"key": "dedicated", "effect": "NoSchedule"},
            ]},
            "status": {
                "conditions": [
                    {"type": "MemoryPressure", "status": "False"},
                    {"type": "Ready", "status": ready, "message": "kubelet stopped posting",
                     "lastTransitionTime": "2026-01-01T00:00:00Z"},
                ],
                "images": [{"names": ["a-big-image"], "sizeBytes": 1}],
            },
        }))
        .unwrap()
    }

    fn pod_on(node: Option<&str>) -> Pod {
        serde_json::from_value(
            json!({"metadata": {"name": "p"}, "spec": {"containers": [], "nodeName": node}}),
        )
        .unwrap()
    }

    #[test]
    fn pods_get_the_zone_of_their_node() {
        let label = "topology.kubernetes.io/zone";
        let (store, mut writer) = reflector::store();
        let mut a = node("node-a", json!({label: "zone-a", "other": "x"}), "True");
        strip_node(&mut a, label);
        assert_eq!(a.metadata.labels.as_ref().unwrap().len(), 1);
        assert!(a.metadata.annotations.is_none());
        let kept = serde_json::to_value(&a).unwrap();
        assert_eq!(
            (&kept["spec"], &kept["status"]),
            (
                &json!({"taints": [{"key": "node.kubernetes.io/unreachable", "effect": "NoSchedule"}]}),
                &json!({"conditions": [{"type": "Ready", "status": "True",
                    "lastTransitionTime": "2026-01-01T00:00:00Z"}]}),
            ),
            "the Ready condition and the unreachable taint alone"
        );
        writer.apply_watcher_event(&Event::Apply(a));
        writer.apply_watcher_event(&Event::Apply(node("node-x", json!({}), "True")));
        let zones = NodeZones::from_store(store, label);
        assert_eq!(
            zones.zone_of(&pod_on(Some("node-a"))),
            Zone::known("zone-a")
        );
        assert_eq!(zones.zone_of(&pod_on(Some("node-x"))), Zone::Unknown);
        assert_eq!(zones.zone_of(&pod_on(Some("gone"))), Zone::Unknown);
        assert_eq!(zones.zone_of(&pod_on(None)), Zone::Unknown);
        assert_eq!(
            zones.zones_present(),
            std::collections::BTreeSet::from(["zone-a".to_string()]),
            "a node without the label adds no zone"
        );
        assert_eq!(
            zones.dark_zones(),
            BTreeMap::from([("zone-a".to_string(), 1)]),
            "its only node is tainted unreachable"
        );
    }
}
