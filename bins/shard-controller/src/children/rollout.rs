//! The shards' zone-by-zone rollout (`spec.rollout`, strategy ZoneAware): the shards'
//! StatefulSets are `OnDelete` (children::build) and a ZoneAwareUpdate `<name>-shards` over
//! them, owned by the ShardedPrometheus, replaces their pods through the zau-controller's one
//! planner — zone by zone, in growing batches, by eviction, so the shards' disruption budgets
//! hold it as they hold a drain. The shard-controller pauses it while a shard of the zone being
//! rolled does not load its configuration (the prober's verdicts), which the planner cannot see,
//! and mirrors its progress into `status.rollout`.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use zone_api::sprom::ShardRolloutStatus;
use zone_api::sprom::contract::children_labels;
use zone_api::zau::{PAUSED_BECAUSE_ANNOTATION, condition};
use zone_api::{ZoneAwareUpdate, ZoneAwareUpdateSpec};
use zone_topology::sharding::ShardLayout;

use super::build::{BuildInput, instance_labels};
use crate::health::verdict::{PodVerdict, ShardConfig};

/// The ZoneAwareUpdate's name: the ZoneDisruptionBudget's too (another kind).
pub fn name(sprom: &str) -> String {
    format!("{sprom}-shards")
}

/// The ZoneAwareUpdate rolling `input`'s shards, with its spec (`spec.rollout` as validated),
/// paused while `held` says why.
pub fn build(
    input: &BuildInput<'_>,
    spec: &ZoneAwareUpdateSpec,
    held: Option<&str>,
) -> ZoneAwareUpdate {
    let labels = instance_labels(input.name);
    // Every StatefulSet of this ShardedPrometheus's shards, and nothing else: the admission
    // policy lets the controller's token write only a selector of its own StatefulSets.
    let selector = children_labels(input.name);
    ZoneAwareUpdate {
        metadata: ObjectMeta {
            name: Some(name(input.name)),
            namespace: Some(input.namespace.to_string()),
            labels: Some(labels),
            annotations: held.map(|why| {
                BTreeMap::from([(PAUSED_BECAUSE_ANNOTATION.to_string(), why.to_string())])
            }),
            ..ObjectMeta::default()
        },
        spec: ZoneAwareUpdateSpec {
            selector: Some(LabelSelector {
                match_labels: Some(selector),
                ..LabelSelector::default()
            }),
            paused: held.is_some(),
            ..spec.clone()
        },
        status: None,
    }
}

/// Why the rollout must wait (None: it need not): a shard of the zone being rolled (`zone`;
/// every shard when no zone is, or in Classic sharding, whose shards have no zone) has a pod
/// that refused its configuration or runs another one past the grace. A pod not ready or not
/// answering is the planner's to wait for (it removes no more pods while an updated one is not
/// Ready).
pub fn hold(
    verdicts: Option<&[ShardConfig]>,
    layout: &ShardLayout,
    zone: Option<&str>,
) -> Option<String> {
    let failing: Vec<String> = verdicts?
        .iter()
        .filter_map(|shard| {
            let shard_zone = layout.zone(shard.index);
            if zone.is_some() && shard_zone.is_some() && shard_zone != zone {
                return None;
            }
            let pod = shard.pods.iter().find_map(|(pod, verdict)| match verdict {
                PodVerdict::Refused { .. } => Some(format!("{pod} refused it")),
                PodVerdict::NotLoaded { differs } => {
                    Some(format!("{pod} runs another ({differs})"))
                }
                _ => None,
            })?;
            let zone = shard_zone.map(|z| format!(" ({z})")).unwrap_or_default();
            Some(format!("shard {}{zone}: {pod}", shard.index))
        })
        .collect();
    (!failing.is_empty()).then(|| {
        format!(
            "held by the shard-controller: not every shard of the zone loads its configuration: {}",
            failing.join("; ")
        )
    })
}

/// The rollout's state for `status.rollout`, from the ZoneAwareUpdate as last read (None: not
/// created yet) and the hold decided now.
pub fn status(
    sprom: &str,
    existing: Option<&ZoneAwareUpdate>,
    held: Option<&str>,
) -> ShardRolloutStatus {
    let zau_status = existing.and_then(|zau| zau.status.as_ref());
    let condition_message = |kind: &str| {
        zau_status?
            .conditions
            .iter()
            .find(|c| c.type_ == kind && c.status == "True")
            .map(|c| c.message.clone())
    };
    ShardRolloutStatus {
        zone_aware_update: name(sprom),
        current_zone: zau_status.and_then(|s| s.current_zone.clone()),
        old_replicas: zau_status.map_or(0, |s| s.total_old_replicas),
        paused_by: zau_status.map(|s| s.paused_by.clone()).unwrap_or_default(),
        held_by: held.map(str::to_string),
        message: condition_message(condition::PAUSED)
            .or_else(|| condition_message(condition::PROGRESSING))
            .or_else(|| condition_message(condition::COMPLETE)),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::monitoring::Monitoring;
    use serde_json::json;
    use zone_api::ShardedPrometheus;
    use zone_api::sprom::contract::{MANAGED_BY, MANAGED_BY_LABEL};

    fn valid(rollout: serde_json::Value) -> zone_api::ValidSprom {
        let sprom: ShardedPrometheus = serde_json::from_value(json!({
            "apiVersion": "zonecontrol.k8s.aws/v1", "kind": "ShardedPrometheus",
            "metadata": {"name": "prom", "namespace": "ns"},
            "spec": {"shards": 3, "replicas": 2, "rollout": rollout,
                "shardingStrategy": {"mode": "Topology", "topology": {"values": ["zone-a", "zone-b", "zone-c"]}}},
        }))
        .unwrap();
        sprom.spec.validate("topology.kubernetes.io/zone").unwrap()
    }

    #[test]
    fn the_rollout_selects_the_shards_and_carries_the_spec() {
        let valid = valid(json!({"maxUnavailable": "50%", "bakeTime": "2m"}));
        let monitoring = Monitoring::default();
        let input = BuildInput {
            name: "prom",
            namespace: "ns",
            valid: &valid,
            monitoring: &monitoring,
        };
        let spec = valid.rollout.clone().unwrap();
        let zau = build(&input, &spec, None);
        assert_eq!(zau.metadata.name.as_deref(), Some("prom-shards"));
        let selector = zau.spec.selector.clone().unwrap().match_labels.unwrap();
        assert_eq!(
            selector
                .get("app.kubernetes.io/instance")
                .map(String::as_str),
            Some("prom")
        );
        assert_eq!(
            selector.get(MANAGED_BY_LABEL).map(String::as_str),
            Some(MANAGED_BY)
        );
        assert_eq!(zau.spec.bake_time.as_deref(), Some("2m"));
        assert_eq!(zau.spec.exponential_factor, "2.0");
        assert!(!zau.spec.paused);
        assert!(zau.spec.validate().is_ok());

        let held = build(
            &input,
            &spec,
            Some("shard 1 (zone-b): prom-shard-1-0 refused it"),
        );
        assert!(held.spec.paused);
        let annotations = held.metadata.annotations.unwrap();
        assert!(annotations[PAUSED_BECAUSE_ANNOTATION].contains("shard 1"));
    }

    #[test]
    fn rolling_update_writes_no_rollout() {
        assert_eq!(valid(json!({"strategy": "RollingUpdate"})).rollout, None);
        assert!(valid(json!(null)).rollout.is_some(), "ZoneAware by default");
        let sprom: ShardedPrometheus = serde_json::from_value(json!({
            "apiVersion": "zonecontrol.k8s.aws/v1", "kind": "ShardedPrometheus",
            "metadata": {"name": "prom"},
            "spec": {"shards": 1, "rollout": {"bakeTime": "soon"},
                "shardingStrategy": {"mode": "Classic"}},
        }))
        .unwrap();
        let error = sprom.spec.validate("zone").unwrap_err().to_string();
        assert!(error.starts_with("spec.rollout.bakeTime"), "{error}");
    }

    #[test]
    fn only_a_shard_of_the_rolled_zone_that_refuses_its_configuration_holds() {
        let zones = valid(json!(null)).layout;
        let shard = |index: u32, verdict: PodVerdict| ShardConfig {
            index,
            pods: vec![(format!("prom-shard-{index}-0"), verdict)],
        };
        let refused = PodVerdict::Refused { since: None };
        let verdicts = vec![
            shard(0, PodVerdict::Loaded),
            shard(1, refused.clone()),
            shard(
                2,
                PodVerdict::Loading {
                    left: std::time::Duration::from_secs(9),
                },
            ),
        ];
        let held = hold(Some(&verdicts), &zones, Some("zone-b")).unwrap();
        assert!(
            held.contains("shard 1 (zone-b): prom-shard-1-0 refused it"),
            "{held}"
        );
        assert_eq!(hold(Some(&verdicts), &zones, Some("zone-a")), None);
        assert!(
            hold(Some(&verdicts), &zones, None).is_some(),
            "no zone yet: every shard"
        );
        assert_eq!(hold(None, &zones, None), None, "nothing probed");
        let sprom: ShardedPrometheus = serde_json::from_value(json!({
            "apiVersion": "zonecontrol.k8s.aws/v1", "kind": "ShardedPrometheus",
            "metadata": {"name": "prom"},
            "spec": {"shards": 3, "shardingStrategy": {"mode": "Classic"}},
        }))
        .unwrap();
        let classic = sprom.spec.validate("zone").unwrap().layout;
        let held = hold(Some(&verdicts), &classic, Some("zone-a")).unwrap();
        assert!(held.contains("shard 1: prom-shard-1-0"), "{held}");
        let not_ready = vec![shard(
            1,
            PodVerdict::NotProbed(crate::health::verdict::ProbeError::Connect),
        )];
        assert_eq!(
            hold(Some(&not_ready), &zones, Some("zone-b")),
            None,
            "the planner's to wait for"
        );
    }

    #[test]
    fn the_status_mirrors_the_rollout() {
        let zau: ZoneAwareUpdate = serde_json::from_value(json!({
            "apiVersion": "zonecontrol.k8s.aws/v1", "kind": "ZoneAwareUpdate",
            "metadata": {"name": "prom-shards"},
            "spec": {},
            "status": {"currentZone": "zone-b", "totalOldReplicas": 3, "pausedBy": "Manual",
                "conditions": [
                    {"type": "Progressing", "status": "True", "reason": "InProgress", "message": "rolling", "lastTransitionTime": "2026-12-07T00:00:00Z"},
                    {"type": "Paused", "status": "True", "reason": "ManuallyPaused", "message": "held", "lastTransitionTime": "2026-12-07T00:00:00Z"}]},
        }))
        .unwrap();
        let status = status("prom", Some(&zau), Some("why"));
        assert_eq!(status.zone_aware_update, "prom-shards");
        assert_eq!(status.current_zone.as_deref(), Some("zone-b"));
        assert_eq!(status.old_replicas, 3);
        assert_eq!(status.paused_by, "Manual");
        assert_eq!(status.held_by.as_deref(), Some("why"));
        assert_eq!(status.message.as_deref(), Some("held"));
        let fresh = super::status("prom", None, None);
        assert_eq!((fresh.old_replicas, fresh.message), (0, None));
    }
}
