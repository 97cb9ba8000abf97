use serde_json::json;

use super::*;
use crate::conditions::Conditions;

fn spec_from(value: serde_json::Value) -> ShardedPrometheusSpec {
    serde_json::from_value(value).unwrap()
}

#[test]
fn a_minimal_spec_gets_every_default_and_round_trips() {
    let spec = spec_from(json!({}));
    assert_eq!(spec.shards, 1);
    assert_eq!(spec.replicas, 1);
    assert_eq!(spec.mode, PrometheusMode::Server);
    assert_eq!(spec.sharding_strategy.mode, ShardingMode::Topology);
    assert_eq!(
        spec.sharding_strategy.zoneless_targets,
        ZonelessTargets::Spread
    );
    let written = serde_json::to_value(&spec).unwrap();
    assert_eq!(
        written,
        json!({
            "shards": 1,
            "replicas": 1,
            "mode": "Server",
            "shardingStrategy": {"mode": "Topology", "topology": {}, "zonelessTargets": "Spread"}
        })
    );
    assert_eq!(spec_from(written), spec);
}

#[test]
fn a_full_spec_round_trips_unchanged() {
    let manifest = json!({
        "shards": 6,
        "replicas": 2,
        "mode": "Agent",
        "image": "example.com/prometheus:v3",
        "shardingStrategy": {
            "mode": "Topology",
            "topology": {"values": ["zone-a", "zone-b"], "externalLabelName": "az"},
            "zonelessTargets": "Drop"
        },
        "scrapeConfigs": [{"job_name": "pods", "kubernetes_sd_configs": [{"role": "pod"}],
                           "scrape_interval": "15s"}],
        "externalLabels": {"cluster": "prod"},
        "remoteWrite": [{"url": "https://example.com/api/v1/write", "queue_config": {"capacity": 5}}],
        "ruleFiles": [{"configMap": "rules", "key": "alerts.yaml"}, {"configMap": "more"}],
        "retention": {"time": "15d", "size": "10GB"},
        "storage": {"volumeClaimTemplate": {"spec": {
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "20Gi"}}
        }}},
        "resources": {"requests": {"cpu": "1", "memory": "2Gi"}},
        "nodeSelector": {"pool": "monitoring"},
        "tolerations": [{"key": "monitoring", "operator": "Exists", "effect": "NoSchedule"}],
        "serviceAccountName": "prom",
        "shardRetentionPolicy": {"whenScaled": "Retain", "retain": {"retentionPeriod": "2d"}},
        "terminationGracePeriodSeconds": 900
    });
    let spec = spec_from(manifest.clone());
    assert_eq!(spec.scrape_configs[0]["scrape_interval"], "15s");
    assert_eq!(serde_json::to_value(&spec).unwrap(), manifest);
}

#[test]
fn address_is_an_alias_of_classic() {
    let spec = spec_from(json!({"shardingStrategy": {"mode": "Address"}}));
    assert_eq!(spec.sharding_strategy.mode, ShardingMode::Classic);
    let spec = spec_from(json!({"shardingStrategy": {"mode": "Classic"}}));
    assert_eq!(spec.sharding_strategy.mode, ShardingMode::Classic);
}

#[test]
fn status_of_an_unexpected_shape_degrades_field_by_field() {
    let status: ShardedPrometheusStatus = serde_json::from_value(json!({
        "observedGeneration": 4,
        "shards": "three",
        "readyShards": 2,
        "selector": "app.kubernetes.io/instance=p",
        "shardStatuses": "none",
        "retainedShards": [{"index": 3, "deletionDeadline": "2030-01-01T00:00:00Z"}],
        "conditions": [{"type": "Available"}],
        "replicas": 9
    }))
    .unwrap();
    assert_eq!(status.observed_generation, 4);
    assert_eq!(status.shards, 0);
    assert_eq!(status.ready_shards, 2);
    assert_eq!(status.selector, "app.kubernetes.io/instance=p");
    assert!(status.shard_statuses.is_empty());
    assert_eq!(
        status.retained_shards,
        vec![RetainedShard {
            index: 3,
            deletion_deadline: Some("2030-01-01T00:00:00Z".into())
        }]
    );
    assert!(status.conditions.is_empty());
}

#[test]
fn status_writes_the_scale_fields_even_when_zero() {
    let status = ShardedPrometheusStatus {
        shard_statuses: vec![ShardStatus {
            index: 0,
            zone: String::new(),
            in_zone: 0,
            ready_replicas: 1,
            stateful_set: "p-shard-0".into(),
        }],
        ..ShardedPrometheusStatus::default()
    };
    assert_eq!(
        serde_json::to_value(&status).unwrap(),
        json!({
            "observedGeneration": 0,
            "shards": 0,
            "readyShards": 0,
            "shardStatuses": [{"index": 0, "inZone": 0, "readyReplicas": 1, "statefulSet": "p-shard-0"}]
        })
    );
}

#[test]
fn conditions_carry_the_observed_generation() {
    let mut status = ShardedPrometheusStatus {
        observed_generation: 7,
        ..ShardedPrometheusStatus::default()
    };
    status.set_condition(
        condition::DEGRADED,
        true,
        reason::UNEVEN_ZONES,
        "zone-a has 2 shards",
    );
    let degraded = status.condition(condition::DEGRADED).unwrap();
    assert_eq!(degraded.observed_generation, Some(7));
    assert_eq!(status.true_reason(condition::DEGRADED), Some("UnevenZones"));
    assert_eq!(condition::INVALID, "Invalid");
}
