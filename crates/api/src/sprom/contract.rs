//! The ShardedPrometheus contract between the binaries: what `shard-controller` writes on the
//! shards' children, pods and samples, and what `rules-federator` (or anyone else) reads back.
//! One definition, so a renamed label cannot make the federator lose the shards.

use std::collections::BTreeMap;

/// The most shards a ShardedPrometheus may have: targets hash into
/// [`zone_topology::sharding::BUCKETS`] buckets, and every shard must own at least one.
pub const MAX_SHARDS: u32 = zone_topology::sharding::BUCKETS;

/// Label of every child and pod: the ShardedPrometheus it belongs to (its name).
pub const INSTANCE_LABEL: &str = "app.kubernetes.io/instance";
/// Label of every child and pod: who manages it.
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
/// The value of [`MANAGED_BY_LABEL`].
pub const MANAGED_BY: &str = "shard-controller";
/// Label of every child and pod: the shard's index.
pub const SHARD_POD_LABEL: &str = "zonecontrol.k8s.aws/shard";
/// Label of a shard's pods with the zone the shard is pinned to (Topology sharding): who asks
/// a shard (the rules-federator) knows its zone without reading nodes.
pub const ZONE_POD_LABEL: &str = "zonecontrol.k8s.aws/zone";
/// The StatefulSet controller's pod-ordinal label (Kubernetes >= 1.28): replica 0 of a shard.
pub const POD_INDEX_LABEL: &str = "apps.kubernetes.io/pod-index";

/// Label of a PrometheusRule whose rules need every shard's series (`absent()`, cluster-wide
/// sums): with `spec.thanos`, no shard loads them and a Thanos Ruler evaluates them once over
/// a Querier. The value is [`GLOBAL_SCOPE`].
pub const RULE_SCOPE_LABEL: &str = "zonecontrol.k8s.aws/scope";
/// The value of [`RULE_SCOPE_LABEL`] that marks a PrometheusRule global.
pub const GLOBAL_SCOPE: &str = "global";

/// The external label naming a sample's (and a rule's, an alert's) shard: its index.
pub use zone_topology::sharding::SHARD_EXTERNAL_LABEL;
/// The external label naming a sample's Prometheus pod: replicas of a shard differ only by it.
pub const REPLICA_EXTERNAL_LABEL: &str = "prometheus_replica";
/// The external label carrying a shard's zone when `externalLabelName` is not set.
pub const DEFAULT_ZONE_EXTERNAL_LABEL: &str = "zone";

/// The name of shard `index`'s StatefulSet, Service and configuration.
pub fn shard_name(name: &str, index: u32) -> String {
    format!("{name}-shard-{index}")
}

/// The labels that select every child and pod of the ShardedPrometheus `name`
/// ([`children_selector`] as a `matchLabels`).
pub fn children_labels(name: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (INSTANCE_LABEL.to_string(), name.to_string()),
        (MANAGED_BY_LABEL.to_string(), MANAGED_BY.to_string()),
    ])
}

/// The label selector of every child and pod of the ShardedPrometheus `name`.
pub fn children_selector(name: &str) -> String {
    format!("{INSTANCE_LABEL}={name},{MANAGED_BY_LABEL}={MANAGED_BY}")
}

/// The selector of the scale subresource: replica 0 of each of `shards`, so an autoscaler
/// averages one pod per active shard and never a retained shard's. With no shard it selects
/// nothing (`in ()` would not parse; no shard is labelled `none`).
pub fn scale_selector(name: &str, shards: impl IntoIterator<Item = u32>) -> String {
    let mut indices: Vec<String> = shards.into_iter().map(|i| i.to_string()).collect();
    if indices.is_empty() {
        indices.push("none".to_string());
    }
    format!(
        "{},{POD_INDEX_LABEL}=0,{SHARD_POD_LABEL} in ({})",
        children_selector(name),
        indices.join(",")
    )
}

/// The shard index a child or pod is labelled with, if any.
pub fn shard_of(labels: &BTreeMap<String, String>) -> Option<u32> {
    labels.get(SHARD_POD_LABEL)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_shard_owns_a_bucket_at_the_limit() {
        assert_eq!(MAX_SHARDS, 1024);
        assert_eq!(
            zone_topology::sharding::buckets_of(MAX_SHARDS, MAX_SHARDS - 1).len(),
            1
        );
    }

    #[test]
    fn selectors() {
        assert_eq!(
            children_selector("prom"),
            "app.kubernetes.io/instance=prom,app.kubernetes.io/managed-by=shard-controller"
        );
        assert_eq!(
            scale_selector("prom", [0, 1]),
            "app.kubernetes.io/instance=prom,app.kubernetes.io/managed-by=shard-controller,apps.kubernetes.io/pod-index=0,zonecontrol.k8s.aws/shard in (0,1)"
        );
        assert!(scale_selector("prom", []).ends_with("zonecontrol.k8s.aws/shard in (none)"));
    }

    #[test]
    fn shard_labels_are_read_back() {
        let labels = |value: &str| BTreeMap::from([(SHARD_POD_LABEL.to_string(), value.into())]);
        assert_eq!(shard_of(&labels("7")), Some(7));
        assert_eq!(shard_of(&labels("x")), None);
        assert_eq!(shard_of(&BTreeMap::new()), None);
        assert_eq!(shard_name("prom", 3), "prom-shard-3");
    }
}
