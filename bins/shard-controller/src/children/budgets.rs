//! The shards' disruption budgets (`spec.disruptionBudgets`): a ZoneDisruptionBudget over every
//! pod of the shards, so evictions (a drain, a rollout that evicts) take the shards of one zone
//! at a time, and a PodDisruptionBudget per shard of two or more replicas, so they never take
//! both replicas of a shard. Written on full applies only (no cache watches them): a deleted
//! budget is back within the resync period.

use std::collections::BTreeMap;

use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use zone_api::{ZoneDisruptionBudget, ZoneDisruptionBudgetSpec};

use super::build::{BuildInput, child_meta, instance_labels, shard_labels};

/// The budgets wanted for the shards `indices` (active and retained) of one ShardedPrometheus.
#[derive(Debug, Clone, PartialEq)]
pub struct Budgets {
    pub zone: Option<ZoneDisruptionBudget>,
    pub shards: Vec<PodDisruptionBudget>,
}

/// The budgets `input`'s spec asks for over the shards `indices`.
pub fn build(input: &BuildInput<'_>, indices: impl IntoIterator<Item = u32>) -> Budgets {
    let valid = input.valid;
    let zone = valid.zone_budget.then(|| zone_budget(input));
    let shards = match valid.shard_budgets && valid.replicas >= 2 {
        true => indices
            .into_iter()
            .map(|index| shard_budget(input, index))
            .collect(),
        false => Vec::new(),
    };
    Budgets { zone, shards }
}

fn selecting(labels: BTreeMap<String, String>) -> Option<LabelSelector> {
    Some(LabelSelector {
        match_labels: Some(labels),
        ..LabelSelector::default()
    })
}

/// `<name>-shards` (never a shard's name, `<name>-shard-<i>`, which the per-shard budgets
/// take) over every pod of every shard, `maxUnavailable: 100%`: within one zone the ZDB lets
/// any number go (the per-shard budgets keep one replica of each), while another zone has none
/// unready or being evicted. Evicting an unready pod is always allowed: it removes no
/// availability.
fn zone_budget(input: &BuildInput<'_>) -> ZoneDisruptionBudget {
    let labels = instance_labels(input.name);
    ZoneDisruptionBudget {
        metadata: ObjectMeta {
            name: Some(format!("{}-shards", input.name)),
            namespace: Some(input.namespace.to_string()),
            labels: Some(labels.clone()),
            ..ObjectMeta::default()
        },
        spec: ZoneDisruptionBudgetSpec {
            selector: selecting(labels),
            max_unavailable: Some(IntOrString::String("100%".into())),
            ..ZoneDisruptionBudgetSpec::default()
        },
        status: None,
    }
}

/// Shard `index`'s pods (as its StatefulSet selects them), one at a time; an unready pod may
/// always be evicted (a drain never waits on a crash-looping Prometheus).
fn shard_budget(input: &BuildInput<'_>, index: u32) -> PodDisruptionBudget {
    PodDisruptionBudget {
        metadata: child_meta(input, index),
        spec: Some(PodDisruptionBudgetSpec {
            selector: selecting(shard_labels(input.name, index)),
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
    use zone_api::ValidSprom;
    use zone_api::sprom::contract::{INSTANCE_LABEL, SHARD_POD_LABEL};

    use super::*;
    use crate::monitoring::Monitoring;

    fn budgets(valid: &ValidSprom, shards: u32) -> Budgets {
        let monitoring = Monitoring::default();
        let input = BuildInput {
            name: "prom",
            namespace: "ns",
            valid,
            monitoring: &monitoring,
        };
        build(&input, 0..shards)
    }

    fn valid(mut spec: serde_json::Value) -> ValidSprom {
        spec["shardingStrategy"] = serde_json::json!({"topology": {"values": ["a", "b", "c"]}});
        let spec: zone_api::ShardedPrometheusSpec = serde_json::from_value(spec).unwrap();
        spec.validate("topology.kubernetes.io/zone").unwrap()
    }

    #[test]
    fn both_budgets_by_default() {
        let valid = valid(serde_json::json!({"shards": 3, "replicas": 2}));
        let built = budgets(&valid, 3);
        let zone = built.zone.unwrap();
        assert_eq!(zone.metadata.name.as_deref(), Some("prom-shards"));
        assert_eq!(
            zone.spec.max_unavailable,
            Some(IntOrString::String("100%".into()))
        );
        let selected = zone.spec.selector.unwrap().match_labels.unwrap();
        assert_eq!(selected, instance_labels("prom"));
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
        let built = budgets(&valid, 2);
        assert!(built.zone.is_some());
        assert!(built.shards.is_empty());
    }

    #[test]
    fn each_budget_can_be_turned_off() {
        let spec = |zones: bool, shards: bool| {
            serde_json::json!({"shards": 2, "replicas": 2,
                "disruptionBudgets": {"zones": zones, "shards": shards}})
        };
        let off = budgets(&valid(spec(false, false)), 2);
        assert_eq!(off.zone, None);
        assert!(off.shards.is_empty());
        let zones_only = budgets(&valid(spec(true, false)), 2);
        assert!(zones_only.zone.is_some() && zones_only.shards.is_empty());
        let shards_only = budgets(&valid(spec(false, true)), 2);
        assert!(shards_only.zone.is_none() && shards_only.shards.len() == 2);
    }
}
