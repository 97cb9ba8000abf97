//! Objects written by the Go controllers deserialize unchanged, and serialising keeps their names.

#![allow(clippy::unwrap_used)]

mod go_fields;

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use zone_api::{ZoneAwareUpdate, ZoneDisruptionBudget};

fn fixture(name: &str) -> String {
    let path = format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap()
}

#[test]
fn go_zone_aware_update_is_read_field_for_field() {
    let zau: ZoneAwareUpdate = serde_norway::from_str(&fixture("go-zau.yaml")).unwrap();
    assert_eq!(zau.spec.statefulset, "web");
    assert_eq!(
        zau.spec.max_unavailable,
        Some(IntOrString::String("25%".into()))
    );
    assert_eq!(zau.spec.exponential_factor, "2.0");
    assert_eq!(zau.spec.pause_rollout_alarm, "web-canary");
    let status = zau.status.unwrap();
    assert_eq!(status.current_revision, "web-6d5f7c8b9");
    assert_eq!(status.update_revision, "web-7f8d9c6a5");
    assert_eq!(status.old_replicas["zone-b"], 3);
    assert_eq!(status.old_replicas["zone-c"], 4);
    assert_eq!((status.update_step, status.deleted_replicas), (4, 2));
    assert!(status.paused_rollout);
    assert!(status.conditions.is_empty());
    assert_eq!(status.observed_generation, None);
    let spec = zau.spec.validate().unwrap();
    assert_eq!(spec.exponential_factor, 2.0);
}

#[test]
fn go_zone_disruption_budget_is_read_field_for_field() {
    let zdb: ZoneDisruptionBudget = serde_norway::from_str(&fixture("go-zdb.yaml")).unwrap();
    assert!(zdb.spec.dry_run);
    assert_eq!(zdb.spec.max_unavailable, Some(IntOrString::Int(2)));
    let status = zdb.status.unwrap();
    assert_eq!(status.observed_generation, 2);
    assert_eq!(
        status.disrupted_pods["web-0"].0.to_string(),
        "2024-05-01T10:00:00Z"
    );
    assert!(
        status.disrupted_pod_zones.is_empty(),
        "Go never wrote zones: they are rebuilt"
    );
    assert_eq!(status.disruptions_allowed["zone-a"], 1);
    assert_eq!(status.current_unhealthy["zone-a"], 1);
    assert_eq!(status.expected_pods.values().sum::<i32>(), 9);
    assert!(zdb.spec.validate().is_ok());
}

#[test]
fn a_status_of_unexpected_shape_keeps_the_object_readable() {
    let zau: ZoneAwareUpdate = serde_norway::from_str(&fixture("odd-status.yaml")).unwrap();
    let status = zau.status.unwrap();
    assert_eq!(status.update_revision, "web-7f8d9c6a5");
    assert_eq!(
        status.update_step, 0,
        "wrong type falls back to the default"
    );
    assert!(status.old_replicas.is_empty());
    assert!(status.paused_rollout);
}

#[test]
fn serialising_keeps_the_go_field_names() {
    let zau: ZoneAwareUpdate = serde_norway::from_str(&fixture("go-zau.yaml")).unwrap();
    let json = serde_json::to_value(&zau).unwrap();
    for field in [
        "statefulset",
        "maxUnavailable",
        "exponentialFactor",
        "pauseRolloutAlarm",
    ] {
        assert!(json["spec"].get(field).is_some(), "spec.{field}");
    }
    for field in [
        "currentRevision",
        "updateRevision",
        "oldReplicas",
        "updateStep",
        "deletedReplicas",
        "pausedRollout",
    ] {
        assert!(json["status"].get(field).is_some(), "status.{field}");
    }
    let zdb: ZoneDisruptionBudget = serde_norway::from_str(&fixture("go-zdb.yaml")).unwrap();
    let json = serde_json::to_value(&zdb).unwrap();
    assert_eq!(
        json["status"]["disruptedPods"]["web-0"],
        "2024-05-01T10:00:00Z"
    );
    for field in go_fields::ZDB_STATUS {
        assert!(json["status"].get(field).is_some(), "status.{field}");
    }
}

#[test]
fn exponential_factor_defaults_to_the_go_default() {
    let zau: ZoneAwareUpdate = serde_norway::from_str(
        "apiVersion: zonecontrol.k8s.aws/v1\nkind: ZoneAwareUpdate\nmetadata: {name: x}\nspec: {statefulset: x}\n",
    )
    .unwrap();
    assert_eq!(zau.spec.exponential_factor, "2.0");
}
