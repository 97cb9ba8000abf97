//! The shards' disruption budgets (`spec.disruptionBudgets`): a ZoneDisruptionBudget over every
//! pod of the shards, so evictions (a drain, a rollout that evicts) take the shards of one zone
//! at a time, and a PodDisruptionBudget per shard of two or more replicas, so they never take
//! both replicas of a shard. Written on full applies only (no cache watches them): a deleted
//! budget is back within the resync period.

use std::collections::BTreeMap;

use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use zone_api::sprom::contract::shard_name;
use zone_api::sprom::contract::{INSTANCE_LABEL, MANAGED_BY, MANAGED_BY_LABEL, SHARD_POD_LABEL};
use zone_api::{ValidSprom, ZoneDisruptionBudget, ZoneDisruptionBudgetSpec};

/// The name of the ShardedPrometheus `name`'s ZoneDisruptionBudget. Never a shard's name
/// (`<name>-shard-<i>`), which the per-shard PodDisruptionBudgets take.
pub fn zone_budget_name(name: &str) -> String {
    format!("{name}-shards")
}

/// The budgets wanted for the shards `indices` (active and retained) of the ShardedPrometheus
/// `name` in `namespace`.
#[derive(Debug, Clone, PartialEq)]
pub struct Budgets {
    pub zone: Option<ZoneDisruptionBudget>,
    pub shards: Vec<PodDisruptionBudget>,
}

/// The budgets `valid` asks for over the shards `indices`.
pub fn build(
    name: &str,
    namespace: &str,
    valid: &ValidSprom,
    indices: impl IntoIterator<Item = u32>,
) -> Budgets {
    let zone = valid.zone_budget.then(|| zone_budget(name, namespace));
    let shards = match valid.shard_budgets && valid.replicas >= 2 {
        true => indices
            .into_iter()
            .map(|index| shard_budget(name, namespace, index))
            .collect(),
        false => Vec::new(),
    };
    Budgets { zone, shards }
}

fn labels(name: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (INSTANCE_LABEL.to_string(), name.to_string()),
        (MANAGED_BY_LABEL.to_string(), MANAGED_BY.to_string()),
    ])
}

fn meta(name: String, namespace: &str, labels: BTreeMap<String, String>) -> ObjectMeta {
    ObjectMeta {
        name: Some(name),
        namespace: Some(namespace.to_string()),
        labels: Some(labels),
        ..ObjectMeta::default()
    }
}

/// Every pod of every shard, `maxUnavailable: 100%`: within one zone the ZDB lets any number go
/// (the per-shard budgets keep one replica of each), while another zone has none unready or
/// being evicted. Evicting an unready pod is always allowed: it removes no availability.
fn zone_budget(name: &str, namespace: &str) -> ZoneDisruptionBudget {
    ZoneDisruptionBudget {
        metadata: meta(zone_budget_name(name), namespace, labels(name)),
        spec: ZoneDisruptionBudgetSpec {
            selector: Some(LabelSelector {
                match_labels: Some(labels(name)),
                ..LabelSelector::default()
            }),
            max_unavailable: Some(IntOrString::String("100%".into())),
            ..ZoneDisruptionBudgetSpec::default()
        },
        status: None,
    }
}

/// Shard `index`'s pods, one at a time; an unready pod may always be evicted (a drain never
/// waits on a crash-looping Prometheus).
fn shard_budget(name: &str, namespace: &str, index: u32) -> PodDisruptionBudget {
    let mut labels = labels(name);
    labels.insert(SHARD_POD_LABEL.to_string(), index.to_string());
    PodDisruptionBudget {
        metadata: meta(shard_name(name, index), namespace, labels.clone()),
        spec: Some(PodDisruptionBudgetSpec {
            selector: Some(LabelSelector {
                match_labels: Some(labels),
                ..LabelSelector::default()
            }),
            max_unavailable: Some(IntOrString::Int(1)),
            unhealthy_pod_eviction_policy: Some("AlwaysAllow".into()),
            ..PodDisruptionBudgetSpec::default()
        }),
        status: None,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn valid(mut spec: serde_json::Value) -> ValidSprom {
        spec["shardingStrategy"] = serde_json::json!({"topology": {"values": ["a", "b", "c"]}});
        let spec: zone_api::ShardedPrometheusSpec = serde_json::from_value(spec).unwrap();
        spec.validate("topology.kubernetes.io/zone").unwrap()
    }

    #[test]
    fn both_budgets_by_default() {
        let valid = valid(serde_json::json!({"shards": 3, "replicas": 2}));
        let built = build("prom", "ns", &valid, 0..3);
        let zone = built.zone.unwrap();
        assert_eq!(zone.metadata.name.as_deref(), Some("prom-shards"));
        assert_eq!(
            zone.spec.max_unavailable,
            Some(IntOrString::String("100%".into()))
        );
        let selected = zone.spec.selector.unwrap().match_labels.unwrap();
        assert_eq!(selected, labels("prom"));
        let names: Vec<_> = built
            .shards
            .iter()
            .map(|pdb| pdb.metadata.name.clone().unwrap())
            .collect();
        assert_eq!(names, ["prom-shard-0", "prom-shard-1", "prom-shard-2"]);
        let spec = built.shards[2].spec.clone().unwrap();
        assert_eq!(spec.max_unavailable, Some(IntOrString::Int(1)));
        let selected = spec.selector.unwrap().match_labels.unwrap();
        assert_eq!(selected[SHARD_POD_LABEL], "2");
        assert_eq!(selected[INSTANCE_LABEL], "prom");
    }

    #[test]
    fn one_replica_has_no_shard_budget() {
        let valid = valid(serde_json::json!({"shards": 2, "replicas": 1}));
        let built = build("prom", "ns", &valid, 0..2);
        assert!(built.zone.is_some());
        assert!(built.shards.is_empty());
    }

    #[test]
    fn each_budget_can_be_turned_off() {
        let spec = |zones: bool, shards: bool| {
            serde_json::json!({"shards": 2, "replicas": 2,
                "disruptionBudgets": {"zones": zones, "shards": shards}})
        };
        let off = build("prom", "ns", &valid(spec(false, false)), 0..2);
        assert_eq!(off.zone, None);
        assert!(off.shards.is_empty());
        let zones_only = build("prom", "ns", &valid(spec(true, false)), 0..2);
        assert!(zones_only.zone.is_some() && zones_only.shards.is_empty());
        let shards_only = build("prom", "ns", &valid(spec(false, true)), 0..2);
        assert!(shards_only.zone.is_none() && shards_only.shards.len() == 2);
    }
}
