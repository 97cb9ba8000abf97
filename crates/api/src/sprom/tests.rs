use std::time::Duration;

use k8s_openapi::api::core::v1::PersistentVolumeClaimSpec;
use serde_json::json;

use super::*;
use crate::conditions::Conditions;
use crate::shared::DurationError;

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
fn zone_failover_and_the_budgets_default_on_and_turn_off() {
    let topology = json!({"topology": {"values": ["a", "b"]}});
    let valid = spec_from(json!({"shardingStrategy": topology}))
        .validate(zone_topology::ZONE_LABEL)
        .unwrap();
    assert_eq!(valid.zone_failover_after, Some(DEFAULT_ZONE_FAILOVER_AFTER));
    assert!(valid.zone_budget && valid.shard_budgets);
    let off = spec_from(json!({
        "shardingStrategy": {"topology": {"values": ["a", "b"]}, "zoneFailover": "Disabled",
                             "zoneFailoverAfter": "1m"},
        "disruptionBudgets": {"zones": false},
    }));
    let valid = off.validate(zone_topology::ZONE_LABEL).unwrap();
    assert_eq!(valid.zone_failover_after, None);
    assert!(!valid.zone_budget && valid.shard_budgets);
    // Disabled, the duration is still checked.
    let mut bad = off;
    bad.sharding_strategy.zone_failover_after = Some("soon".into());
    assert!(bad.validate(zone_topology::ZONE_LABEL).is_err());
    // Enabled is the default and is not written back.
    let written = serde_json::to_value(spec_from(json!({"shardingStrategy": topology}))).unwrap();
    assert!(written["shardingStrategy"].get("zoneFailover").is_none());
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
            ..ShardStatus::default()
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

// --- validation ---

/// A valid Server spec over three zones with one job, changed by `change`.
fn spec(change: impl FnOnce(&mut ShardedPrometheusSpec)) -> ShardedPrometheusSpec {
    let mut spec = spec_from(json!({
        "shards": 3,
        "shardingStrategy": {"topology": {"values": ["zone-a", "zone-b", "zone-c"]}},
        "scrapeConfigs": [{"job_name": "pods", "kubernetes_sd_configs": [{"role": "pod"}]}]
    }));
    change(&mut spec);
    spec
}

fn agent(spec: &mut ShardedPrometheusSpec) {
    spec.mode = PrometheusMode::Agent;
    spec.remote_write = vec![json!({"url": "https://example.com/write"})];
}

#[test]
fn defaults_are_resolved() {
    let valid = spec(|_| {}).validate(zone_topology::ZONE_LABEL).unwrap();
    assert_eq!((valid.shards(), valid.replicas), (3, 1));
    assert_eq!(valid.mode, PrometheusMode::Server);
    assert_eq!(valid.image, DEFAULT_IMAGE);
    assert_eq!(valid.service_account_name, "prometheus");
    assert_eq!(valid.zone_external_label.as_deref(), Some("zone"));
    assert_eq!(
        valid.layout.zoneless(),
        zone_topology::sharding::ZonelessTargets::Spread
    );
    assert_eq!(valid.when_scaled, WhenScaled::Delete);
    assert_eq!(
        valid.retained_shard_period,
        Some(DEFAULT_RETAINED_SHARD_PERIOD)
    );
    assert_eq!(valid.storage, ShardStorage::EmptyDir(Default::default()));
    assert_eq!(valid.termination_grace_period_seconds, 30);
    assert_eq!((valid.retention_time, valid.retention_size), (None, None));

    let valid = spec(|s| {
        s.image = Some(String::new());
        s.service_account_name = Some(String::new());
    })
    .validate(zone_topology::ZONE_LABEL)
    .unwrap();
    assert_eq!(
        (valid.image.as_str(), valid.service_account_name.as_str()),
        (DEFAULT_IMAGE, "prometheus")
    );
}

#[test]
fn agents_get_a_long_grace_period_and_are_always_deleted() {
    let valid = spec(|s| {
        agent(s);
        s.shard_retention_policy = Some(ShardRetentionPolicy {
            when_scaled: WhenScaled::Retain,
            retain: None,
        });
    })
    .validate(zone_topology::ZONE_LABEL)
    .unwrap();
    assert_eq!(valid.termination_grace_period_seconds, 600);
    assert_eq!(valid.when_scaled, WhenScaled::Delete);
    assert_eq!(valid.remote_write[0]["url"], "https://example.com/write");
    let valid = spec(|s| {
        agent(s);
        s.termination_grace_period_seconds = Some(0);
    })
    .validate(zone_topology::ZONE_LABEL)
    .unwrap();
    assert_eq!(valid.termination_grace_period_seconds, 0);
}

#[test]
fn retained_shards_are_kept_for_the_retention_period_then_the_retention_time() {
    let period = |retention: Option<Retention>, retain: Option<&str>| {
        spec(|s| {
            s.retention = retention;
            s.shard_retention_policy = Some(ShardRetentionPolicy {
                when_scaled: WhenScaled::Retain,
                retain: Some(RetainPolicy {
                    retention_period: retain.map(Into::into),
                }),
            });
        })
        .validate(zone_topology::ZONE_LABEL)
        .unwrap()
        .retained_shard_period
    };
    let time = |time: &str| {
        Some(Retention {
            time: Some(time.into()),
            size: None,
        })
    };
    let size_only = Some(Retention {
        time: None,
        size: Some("10GB".into()),
    });
    let hours = |h: u64| Some(Duration::from_secs(h * 3600));
    assert_eq!(period(time("15d"), Some("2h")), hours(2));
    assert_eq!(period(time("15d"), None), hours(15 * 24));
    assert_eq!(period(size_only.clone(), Some("1d12h")), hours(36));
    assert_eq!(period(size_only, None), None);
    assert_eq!(period(None, None), hours(24));
}

#[test]
fn classic_sharding_ignores_the_zones() {
    for mode in ["Classic", "Address"] {
        let mut spec = spec(|s| {
            s.sharding_strategy.topology.values = vec!["a".into(), "a".into(), String::new()];
            s.external_labels = [("zone".to_string(), "all".to_string())].into();
        });
        spec.sharding_strategy.mode = serde_json::from_value(json!(mode)).unwrap();
        let valid = spec.validate(zone_topology::ZONE_LABEL).unwrap();
        assert!(!valid.layout.is_topology());
        assert!(valid.layout.zones().is_empty());
        assert_eq!(valid.zone_external_label, None);
    }
}

#[test]
fn fewer_shards_than_zones_and_a_disabled_zone_label_are_valid() {
    let valid = spec(|s| {
        s.shards = 2;
        s.sharding_strategy.topology.external_label_name = Some(String::new());
        s.external_labels = [("zone".to_string(), "mine".to_string())].into();
    })
    .validate(zone_topology::ZONE_LABEL)
    .unwrap();
    assert_eq!(valid.shards(), 2);
    assert_eq!(valid.layout.zones().len(), 3);
    assert_eq!(valid.zone_external_label, None);
    let valid = spec(|s| {
        s.sharding_strategy.topology.external_label_name = Some("az".into());
        s.external_labels = [("zone".to_string(), "mine".to_string())].into();
    })
    .validate(zone_topology::ZONE_LABEL)
    .unwrap();
    assert_eq!(valid.zone_external_label.as_deref(), Some("az"));
}

#[test]
fn storage_is_a_claim_or_an_empty_dir() {
    let claim = PersistentVolumeClaimSpec {
        storage_class_name: Some("gp3".into()),
        ..PersistentVolumeClaimSpec::default()
    };
    let valid = spec(|s| {
        s.storage = Some(PrometheusStorage {
            volume_claim_template: Some(VolumeClaimTemplate {
                spec: claim.clone(),
            }),
            empty_dir: None,
        });
    })
    .validate(zone_topology::ZONE_LABEL)
    .unwrap();
    assert_eq!(valid.storage, ShardStorage::VolumeClaim(Box::new(claim)));
}

type Change = Box<dyn FnOnce(&mut ShardedPrometheusSpec)>;

/// Each change makes the valid spec invalid with the expected error, whose message names the
/// offending value (contains the needle).
fn assert_refused(cases: Vec<(&str, Change, SpromError, &str)>) {
    for (name, change, expected, needle) in cases {
        let error = spec(change)
            .validate(zone_topology::ZONE_LABEL)
            .unwrap_err();
        assert_eq!(error, expected, "{name}");
        let message = error.to_string();
        assert!(
            message.contains(needle),
            "{name}: {message:?} lacks {needle:?}"
        );
    }
}

fn labels(name: &str) -> BTreeMap<String, String> {
    [(name.to_string(), "x".to_string())].into()
}

/// The shard count, replicas and zones, and the zone label.
#[test]
fn invalid_layouts_name_the_offending_value() {
    assert_refused(vec![
        (
            "no shards",
            Box::new(|s| s.shards = 0),
            SpromError::Shards(0),
            "spec.shards is 0",
        ),
        (
            "too many shards",
            Box::new(|s| s.shards = 1025),
            SpromError::Shards(1025),
            "1025",
        ),
        (
            "no replicas",
            Box::new(|s| s.replicas = 0),
            SpromError::Replicas(0),
            "spec.replicas is 0",
        ),
        (
            "no zones",
            Box::new(|s| s.sharding_strategy.topology.values.clear()),
            SpromError::NoZones,
            "topology.values is empty",
        ),
        (
            "empty zone",
            Box::new(|s| s.sharding_strategy.topology.values[1].clear()),
            SpromError::EmptyZone(1),
            "values[1]",
        ),
        (
            "zone not a label value",
            Box::new(|s| s.sharding_strategy.topology.values[2] = "zone c".into()),
            SpromError::ZoneNotLabelValue("zone c".into()),
            "\"zone c\"",
        ),
        (
            "duplicate zone",
            Box::new(|s| s.sharding_strategy.topology.values.push("zone-b".into())),
            SpromError::DuplicateZone("zone-b".into()),
            "\"zone-b\"",
        ),
        (
            "zone label not a label name",
            Box::new(|s| s.sharding_strategy.topology.external_label_name = Some("my-zone".into())),
            SpromError::ZoneLabelName("my-zone".into()),
            "\"my-zone\"",
        ),
        (
            "zone label reserved",
            Box::new(|s| s.sharding_strategy.topology.external_label_name = Some("shard".into())),
            SpromError::ZoneLabelNameReserved("shard".into()),
            "\"shard\"",
        ),
    ]);
}

/// External labels: label names, none the controller sets.
#[test]
fn invalid_external_labels_name_the_offending_value() {
    assert_refused(vec![
        (
            "external label not a label name",
            Box::new(|s| s.external_labels = labels("1st")),
            SpromError::ExternalLabelName("1st".into()),
            "\"1st\"",
        ),
        (
            "external label shard",
            Box::new(|s| s.external_labels = labels("shard")),
            SpromError::ReservedExternalLabel("shard".into()),
            "\"shard\"",
        ),
        (
            "external label prometheus_replica",
            Box::new(|s| s.external_labels = labels("prometheus_replica")),
            SpromError::ReservedExternalLabel("prometheus_replica".into()),
            "\"prometheus_replica\"",
        ),
        (
            "external label zone",
            Box::new(|s| s.external_labels = labels("zone")),
            SpromError::ReservedExternalLabel("zone".into()),
            "\"zone\"",
        ),
        (
            "external label named like the zone label",
            Box::new(|s| {
                s.sharding_strategy.topology.external_label_name = Some("az".into());
                s.external_labels = labels("az");
            }),
            SpromError::ReservedExternalLabel("az".into()),
            "\"az\"",
        ),
    ]);
}

/// Scrape configs, remote writes, the agent's needs and rule files.
#[test]
fn invalid_jobs_and_rule_files_name_the_offending_value() {
    assert_refused(vec![
        (
            "scrape config not an object",
            Box::new(|s| s.scrape_configs.push(json!("job_name: x"))),
            SpromError::ScrapeConfigNotObject(1),
            "scrapeConfigs[1]",
        ),
        (
            "scrape config without job_name",
            Box::new(|s| s.scrape_configs.push(json!({"static_configs": []}))),
            SpromError::ScrapeConfigJobName(1),
            "scrapeConfigs[1]",
        ),
        (
            "scrape config with an empty job_name",
            Box::new(|s| s.scrape_configs[0] = json!({"job_name": ""})),
            SpromError::ScrapeConfigJobName(0),
            "scrapeConfigs[0]",
        ),
        (
            "scrape config with a numeric job_name",
            Box::new(|s| s.scrape_configs[0] = json!({"job_name": 5})),
            SpromError::ScrapeConfigJobName(0),
            "scrapeConfigs[0]",
        ),
        (
            "duplicate job_name",
            Box::new(|s| s.scrape_configs.push(json!({"job_name": "pods"}))),
            SpromError::DuplicateJobName("pods".into()),
            "\"pods\"",
        ),
        (
            "remote write without url",
            Box::new(|s| s.remote_write = vec![json!({"url": "https://a"}), json!({"name": "x"})]),
            SpromError::RemoteWriteUrl(1),
            "remoteWrite[1]",
        ),
        (
            "agent without remote write",
            Box::new(|s| s.mode = PrometheusMode::Agent),
            SpromError::AgentWithoutRemoteWrite,
            "Agent",
        ),
        (
            "agent with rule files",
            Box::new(|s| {
                agent(s);
                s.rule_files = vec![RuleFileRef {
                    config_map: "rules".into(),
                    key: None,
                }];
            }),
            SpromError::AgentWithRuleFiles,
            "agents do not evaluate rules",
        ),
        (
            "rule file without a ConfigMap",
            Box::new(|s| s.rule_files = vec![RuleFileRef::default()]),
            SpromError::RuleFileConfigMap(0),
            "ruleFiles[0].configMap",
        ),
        (
            "rule file with an empty key",
            Box::new(|s| {
                s.rule_files = vec![RuleFileRef {
                    config_map: "rules".into(),
                    key: Some(String::new()),
                }];
            }),
            SpromError::RuleFileKey {
                index: 0,
                config_map: "rules".into(),
            },
            "\"rules\"",
        ),
    ]);
}

/// Retention, storage and the grace period.
#[test]
fn invalid_retention_and_storage_name_the_offending_value() {
    assert_refused(vec![
        (
            "retention time",
            Box::new(|s| {
                s.retention = Some(Retention {
                    time: Some("15x".into()),
                    size: None,
                });
            }),
            SpromError::Duration(DurationError {
                field: "spec.retention.time",
                value: "15x".into(),
                source: crate::UnitError::MalformedDuration,
            }),
            "spec.retention.time: \"15x\"",
        ),
        (
            "retention size",
            Box::new(|s| {
                s.retention = Some(Retention {
                    time: None,
                    size: Some("10gb".into()),
                });
            }),
            SpromError::RetentionSize {
                value: "10gb".into(),
                source: crate::UnitError::MalformedSize,
            },
            "\"10gb\"",
        ),
        (
            "retention period",
            Box::new(|s| {
                s.shard_retention_policy = Some(ShardRetentionPolicy {
                    when_scaled: WhenScaled::Retain,
                    retain: Some(RetainPolicy {
                        retention_period: Some("1h1d".into()),
                    }),
                });
            }),
            SpromError::Duration(DurationError {
                field: "spec.shardRetentionPolicy.retain.retentionPeriod",
                value: "1h1d".into(),
                source: crate::UnitError::UnitOrder,
            }),
            "retentionPeriod: \"1h1d\"",
        ),
        (
            "two kinds of storage",
            Box::new(|s| {
                s.storage = Some(PrometheusStorage {
                    volume_claim_template: Some(VolumeClaimTemplate::default()),
                    empty_dir: Some(Default::default()),
                });
            }),
            SpromError::StorageBoth,
            "both volumeClaimTemplate and emptyDir",
        ),
        (
            "negative grace period",
            Box::new(|s| s.termination_grace_period_seconds = Some(-1)),
            SpromError::TerminationGracePeriod(-1),
            "is -1",
        ),
    ]);
}

#[test]
fn the_sample_deserializes_and_validates() {
    let sample: ShardedPrometheus = serde_norway::from_str(include_str!(
        "../../../../config/samples/shardedprometheus.yaml"
    ))
    .unwrap();
    let valid = sample.spec.validate(zone_topology::ZONE_LABEL).unwrap();
    assert_eq!(valid.shards(), 3);
    assert_eq!(valid.layout.zones(), ["zone-a", "zone-b", "zone-c"]);
    assert!(valid.layout.is_topology());
    assert_eq!(valid.zone_external_label.as_deref(), Some("zone"));
    let jobs: Vec<_> = valid
        .scrape_configs
        .iter()
        .map(|c| c["job_name"].as_str().unwrap())
        .collect();
    assert_eq!(jobs, ["pods", "prometheus"]);
    assert_eq!(
        valid.scrape_configs[0]["kubernetes_sd_configs"][0]["role"],
        "pod"
    );
    assert!(valid.scrape_configs[1].contains_key("static_configs"));
    assert_eq!(valid.when_scaled, WhenScaled::Delete);
    // From retention.time (2d), should the policy become Retain.
    assert_eq!(
        valid.retained_shard_period,
        Some(Duration::from_secs(2 * 86_400))
    );
}
