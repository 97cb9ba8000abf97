#![allow(clippy::unwrap_used, clippy::expect_used)]
use serde_json::json;
use zone_topology::IntOrPercent;

use k8s_openapi::api::core::v1::Pod;
use zone_topology::Zone;

use super::*;

/// The seed document's figure: 30 pods, zone-1 and zone-2 holding these ordinals.
const ZONE_1: [u32; 10] = [28, 27, 22, 19, 17, 15, 10, 8, 6, 1];
const ZONE_2: [u32; 10] = [29, 26, 23, 20, 16, 14, 11, 7, 5, 2];

fn valid() -> ValidZau {
    ValidZau {
        target: RolloutTarget::StatefulSet("web".into()),
        exponential_factor: 2.0,
        max_unavailable: IntOrPercent::Int(4),
        alert_gate: None,
        bake_time: None,
        paused: false,
    }
}

fn seed_target() -> Target {
    view::target(&valid(), vec![seed_state()]).unwrap()
}

fn seed_state() -> view::SetState {
    let set: StatefulSet = serde_json::from_value(json!({
        "metadata": {"name": "web", "generation": 2},
        "spec": {"replicas": 30, "updateStrategy": {"type": "OnDelete"}, "selector": {}, "template": {}},
        "status": {"replicas": 30, "observedGeneration": 2, "updateRevision": "web-2", "currentRevision": "web-1"},
    }))
    .unwrap();
    view::statefulset(&set).unwrap()
}

fn seed_pods() -> Vec<(Pod, Zone)> {
    (0..30u32)
        .map(|ordinal| {
            let zone = if ZONE_1.contains(&ordinal) {
                "zone-1"
            } else if ZONE_2.contains(&ordinal) {
                "zone-2"
            } else {
                "zone-3"
            };
            let pod: Pod = serde_json::from_value(json!({
                "metadata": {
                    "name": format!("web-{ordinal}"),
                    "labels": {REVISION_LABEL: "web-1"},
                    "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "web", "uid": "u", "controller": true}],
                },
                "status": {"conditions": [{"type": "Ready", "status": "True"}]},
            }))
            .unwrap();
            (pod, Zone::known(zone))
        })
        .collect()
}

/// The seed figure from live objects: the batches the controller removes, in order.
#[test]
fn the_seed_figure_from_live_objects() {
    let target = seed_target();
    let pods = seed_pods();
    let planned = view::plan_pods(
        &target,
        pods.iter().map(|(p, z)| (p, z.clone())),
        Timestamp::now(),
    );
    let status = ZoneAwareUpdateStatus::default();
    let (batches, stopped) = ahead(&status, &valid(), &target, "web-2", &planned);
    assert_eq!(stopped, None);
    // The seed document's figure (its ordinals: crates/topology's tests): the sizes grow 1, 2,
    // 4 in zone-1, stay at maxUnavailable 4 after, each zone finished before the next.
    let sizes: Vec<usize> = batches.iter().map(|b| b.pods.len()).collect();
    assert_eq!(sizes, [1, 2, 4, 3, 4, 4, 2, 4, 4, 2]);
    let zones: Vec<&str> = batches.iter().map(|b| b.zone.as_str()).collect();
    assert_eq!(
        zones,
        [["zone-1"; 4].as_slice(), &["zone-2"; 3], &["zone-3"; 3]].concat()
    );
    assert_eq!(batches[2].pods, ["web-19", "web-17", "web-15", "web-10"]);
    assert_eq!(batches[3].zone, "zone-1");
    assert_eq!(batches[3].step, 3);

    // Under way: the status's step and zone are where the plan goes on from.
    let under_way = ZoneAwareUpdateStatus {
        update_revision: "web-2".into(),
        update_step: 2,
        current_zone: Some("zone-2".into()),
        ..ZoneAwareUpdateStatus::default()
    };
    let (batches, _) = ahead(&under_way, &valid(), &target, "web-2", &planned);
    assert_eq!(batches[0].zone, "zone-2");
    assert_eq!(batches[0].pods, ["web-29", "web-26", "web-23", "web-20"]);
}

/// A rollout that has not started: a new image makes every pod old and starts at one pod, even
/// after a finished rollout's step; a revision keeps the pods already at it; a group has no one
/// revision to name.
#[test]
fn what_if_previews_a_rollout_not_started() {
    let planned_with = |what_if: &WhatIf| {
        let mut states = vec![seed_state()];
        apply_what_if(&mut states, Some(what_if)).unwrap();
        let target = view::target(&valid(), states).unwrap();
        let revision = target.update_revision.clone().unwrap();
        let pods = seed_pods();
        let planned = view::plan_pods(
            &target,
            pods.iter().map(|(p, z)| (p, z.clone())),
            Timestamp::now(),
        );
        let finished = ZoneAwareUpdateStatus {
            update_revision: "web-1".into(),
            update_step: 5,
            ..ZoneAwareUpdateStatus::default()
        };
        ahead(&finished, &valid(), &target, &revision, &planned).0
    };
    let batches = planned_with(&WhatIf::Image("registry.example/web:3".into()));
    let sizes: Vec<usize> = batches.iter().map(|b| b.pods.len()).collect();
    assert_eq!(sizes, [1, 2, 4, 3, 4, 4, 2, 4, 4, 2]);
    assert!(
        planned_with(&WhatIf::Revision("web-1".into())).is_empty(),
        "every pod at web-1"
    );
    assert_eq!(planned_with(&WhatIf::Revision("web-3".into())).len(), 10);

    let mut group = vec![seed_state(), seed_state()];
    let refused = apply_what_if(&mut group, Some(&WhatIf::Revision("web-3".into())));
    assert!(refused.unwrap_err().contains("--image"));
}

/// What holds a rollout comes from its status, in words; the table says it under the batches.
#[test]
fn holds_are_read_from_the_status() {
    let zau: ZoneAwareUpdate = serde_json::from_value(json!({
        "apiVersion": "zonecontrol.k8s.aws/v1", "kind": "ZoneAwareUpdate",
        "metadata": {"name": "web", "namespace": "apps"},
        "spec": {"statefulset": "web"},
        "status": {
            "pausedBy": "Alert",
            "conditions": [
                {"type": "Paused", "status": "True", "reason": "AlertFiring", "message": "alert AppErrors fires", "lastTransitionTime": "2026-01-01T00:00:00Z"},
                {"type": "Progressing", "status": "True", "reason": "Paused", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"},
            ],
        },
    }))
    .unwrap();
    let status = zau.status.clone().unwrap();
    let held = holds(&zau, &status);
    assert_eq!(
        held,
        [Hold {
            source: "Alert".into(),
            message: "alert AppErrors fires".into()
        }]
    );
    let plan = RolloutPlan {
        namespace: "apps".into(),
        name: "web".into(),
        update_revision: "web-2".into(),
        what_if: false,
        batches: vec![PlannedBatch {
            zone: "zone-a".into(),
            step: 0,
            pods: vec!["web-3".into()],
        }],
        stopped: None,
        held_by: held,
    };
    assert_eq!(
        table(&plan),
        "ZoneAwareUpdate apps/web to web-2: 1 batches ahead\n\
         BATCH  ZONE    STEP  SIZE  PODS\n\
         1      zone-a  0     1     web-3\n\
         held by Alert: alert AppErrors fires\n"
    );
}
