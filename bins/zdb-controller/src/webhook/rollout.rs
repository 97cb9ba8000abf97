//! Which evictions are a ZoneAwareUpdate rollout's own: budgets let them past the zone's limit in
//! the zone being rolled (see `zone_topology::budget::EvictedPod::rollout`).
//!
//! Two facts, neither of which another caller can supply:
//!
//! - **Who asks.** The API server puts the authenticated user of the eviction in the
//!   AdmissionReview (`userInfo.username`); only the zau-controller's own ServiceAccount token
//!   makes it `system:serviceaccount:<its namespace>:zau-controller` (`--rollout-user`). A
//!   caller copying the controller's request body is still itself.
//! - **What is rolled.** The pod must belong to the rollout that ZoneAwareUpdate's status says
//!   is in progress: a pod of its StatefulSet (the pod's controller; for a rollout group, one of
//!   the StatefulSets its status lists), in the zone its status rolls (`currentZone`), on a
//!   revision other than the one rolled out (`updateRevision`, the StatefulSet's own in a
//!   group), the rollout not paused nor a dry run. Only the controller writes that status (the
//!   status subresource); a group's selector in the spec is not trusted.

use k8s_openapi::api::core::v1::Pod;
use zone_api::ZoneAwareUpdate;
use zone_topology::Zone;
use zone_topology::rollout::REVISION_LABEL;

/// The ZoneAwareUpdate of `zaus` whose rollout in progress may remove `pod`, in `zone`, now.
pub fn rolling<'a>(zaus: &'a [ZoneAwareUpdate], pod: &Pod, zone: &Zone) -> Option<&'a str> {
    let statefulset = pod
        .metadata
        .owner_references
        .as_deref()
        .unwrap_or_default()
        .iter()
        .find(|owner| owner.controller == Some(true) && owner.kind == "StatefulSet")?;
    let revision = pod
        .metadata
        .labels
        .as_ref()
        .and_then(|labels| labels.get(REVISION_LABEL))?;
    let Zone::Known(zone) = zone else {
        return None;
    };
    zaus.iter()
        .find(|zau| {
            let Some(status) = &zau.status else {
                return false;
            };
            let update_revision = if status.stateful_sets.is_empty() {
                Some(&status.update_revision).filter(|_| zau.spec.statefulset == statefulset.name)
            } else {
                status
                    .stateful_sets
                    .iter()
                    .find(|set| set.name == statefulset.name)
                    .map(|set| &set.update_revision)
            };
            !zau.spec.dry_run
                && !status.paused_rollout
                && status.current_zone.as_deref() == Some(zone.as_str())
                && update_revision.is_some_and(|update| !update.is_empty() && update != revision)
        })
        .and_then(|zau| zau.metadata.name.as_deref())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;
    use zone_api::zau::StatefulSetProgress;

    fn pod(owner: &str, revision: &str) -> Pod {
        serde_json::from_value(json!({
            "metadata": {
                "name": format!("{owner}-0"),
                "labels": {REVISION_LABEL: revision},
                "ownerReferences": [{
                    "apiVersion": "apps/v1", "kind": "StatefulSet", "name": owner,
                    "uid": "u", "controller": true,
                }],
            },
        }))
        .unwrap()
    }

    fn zau(statefulset: &str, zone: &str, update_revision: &str) -> ZoneAwareUpdate {
        serde_json::from_value(json!({
            "apiVersion": "zonecontrol.k8s.aws/v1",
            "kind": "ZoneAwareUpdate",
            "metadata": {"name": statefulset, "namespace": "apps"},
            "spec": {"statefulset": statefulset},
            "status": {"currentZone": zone, "updateRevision": update_revision},
        }))
        .unwrap()
    }

    #[test]
    fn only_an_old_pod_of_the_rolled_statefulset_in_the_rolled_zone() {
        let zone_a = Zone::known("zone-a");
        let zaus = [zau("db", "zone-b", "db-2"), zau("web", "zone-a", "web-2")];
        assert_eq!(rolling(&zaus, &pod("web", "web-1"), &zone_a), Some("web"));
        // Already on the new revision: the rollout has nothing to remove.
        assert_eq!(rolling(&zaus, &pod("web", "web-2"), &zone_a), None);
        // Another zone than the one rolled.
        assert_eq!(
            rolling(&zaus, &pod("web", "web-1"), &Zone::known("zone-b")),
            None
        );
        assert_eq!(rolling(&zaus, &pod("web", "web-1"), &Zone::Unknown), None);
        // No update of its StatefulSet in this zone.
        assert_eq!(rolling(&zaus, &pod("db", "db-1"), &zone_a), None);
        assert_eq!(rolling(&zaus, &pod("cache", "cache-1"), &zone_a), None);

        let mut paused = zau("web", "zone-a", "web-2");
        if let Some(status) = paused.status.as_mut() {
            status.paused_rollout = true;
        }
        assert_eq!(rolling(&[paused], &pod("web", "web-1"), &zone_a), None);
        let mut dry = zau("web", "zone-a", "web-2");
        dry.spec.dry_run = true;
        assert_eq!(rolling(&[dry], &pod("web", "web-1"), &zone_a), None);
        let mut unlabelled = pod("web", "web-1");
        unlabelled.metadata.labels = None;
        assert_eq!(rolling(&zaus, &unlabelled, &zone_a), None);
    }

    /// A rollout group: the StatefulSets its status lists, each with its own revision.
    #[test]
    fn a_groups_statefulsets_are_those_of_its_status() {
        let zone_a = Zone::known("zone-a");
        let mut group = zau("", "zone-a", "ing-a=a-2,ing-b=b-2");
        group.metadata.name = Some("ingesters".into());
        if let Some(status) = group.status.as_mut() {
            status.stateful_sets = ["a", "b"]
                .map(|set| StatefulSetProgress {
                    name: format!("ing-{set}"),
                    update_revision: format!("{set}-2"),
                    ..StatefulSetProgress::default()
                })
                .into();
        }
        let zaus = [group];
        assert_eq!(
            rolling(&zaus, &pod("ing-a", "a-1"), &zone_a),
            Some("ingesters")
        );
        assert_eq!(
            rolling(&zaus, &pod("ing-b", "b-1"), &zone_a),
            Some("ingesters")
        );
        // Updated to its own StatefulSet's revision; another's is not its.
        assert_eq!(rolling(&zaus, &pod("ing-a", "a-2"), &zone_a), None);
        assert_eq!(
            rolling(&zaus, &pod("ing-b", "a-2"), &zone_a),
            Some("ingesters")
        );
        // Not in the group's status (whatever the spec's selector).
        assert_eq!(rolling(&zaus, &pod("ing-c", "c-1"), &zone_a), None);
        assert_eq!(
            rolling(&zaus, &pod("ing-a", "a-1"), &Zone::known("zone-b")),
            None
        );
    }
}
