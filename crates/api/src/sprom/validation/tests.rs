use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use super::*;

fn sprom(spec: serde_json::Value) -> ShardedPrometheusSpec {
    let mut spec = spec;
    spec["shardingStrategy"] = serde_json::json!({"mode": "Classic"});
    serde_json::from_value(spec).expect("a spec")
}

/// Each spec is refused with a message containing its expected text.
fn assert_each_refused<const N: usize>(cases: [(serde_json::Value, &str); N]) {
    for (spec, expected) in cases {
        let error = sprom(spec.clone())
            .validate("zone")
            .unwrap_err()
            .to_string();
        assert!(error.contains(expected), "{spec}: {error}");
    }
}

#[test]
fn monitoring_defaults_select_nothing_with_the_upstream_intervals() {
    let valid = sprom(serde_json::json!({})).validate("zone").unwrap();
    let monitoring = valid.monitoring;
    assert!(!monitoring.selects_anything());
    assert_eq!(monitoring.scrape_interval, "30s");
    assert_eq!(monitoring.evaluation_interval, "30s");
    assert_eq!(
        monitoring.jobs.service_discovery_role,
        crate::sprom::ServiceDiscoveryRole::Endpoints
    );
}

#[test]
fn monitoring_selectors_and_knobs_are_kept() {
    let valid = sprom(serde_json::json!({
        "serviceMonitorSelector": {},
        "podMonitorSelector": {"matchLabels": {"team": "a"}},
        "ruleNamespaceSelector": {"matchExpressions": [{"key": "env", "operator": "Exists"}]},
        "serviceDiscoveryRole": "EndpointSlice",
        "scrapeInterval": "15s",
        "enforcedSampleLimit": 1000,
        "enforcedBodySizeLimit": "10MB",
    }))
    .validate("zone")
    .unwrap();
    let monitoring = valid.monitoring;
    assert!(monitoring.selects_anything());
    assert_eq!(
        monitoring.service_monitors.selector,
        Some(LabelSelector::default())
    );
    assert_eq!(monitoring.service_monitors.namespaces, None);
    assert!(monitoring.rules.selector.is_none() && monitoring.rules.namespaces.is_some());
    assert_eq!(monitoring.scrape_interval, "15s");
    assert_eq!(monitoring.jobs.enforced_sample_limit, Some(1000));
    assert_eq!(
        monitoring.jobs.service_discovery_role,
        crate::sprom::ServiceDiscoveryRole::EndpointSlice
    );
}

#[test]
fn bad_monitoring_fields_name_the_field() {
    let cases = [
        (
            serde_json::json!({"podMonitorSelector": {"matchExpressions": [{"key": "a", "operator": "Like"}]}}),
            "spec.podMonitorSelector",
        ),
        (
            serde_json::json!({"ruleNamespaceSelector": {"matchExpressions": [{"key": "a", "operator": "In"}]}}),
            "spec.ruleNamespaceSelector",
        ),
        (
            serde_json::json!({"scrapeInterval": "30"}),
            "spec.scrapeInterval",
        ),
        (
            serde_json::json!({"enforcedTargetLimit": -1}),
            "spec.enforcedTargetLimit is -1",
        ),
        (
            serde_json::json!({"enforcedBodySizeLimit": "lots"}),
            "spec.enforcedBodySizeLimit",
        ),
        (
            serde_json::json!({"enforcedNamespaceLabel": "a-b"}),
            "spec.enforcedNamespaceLabel",
        ),
        (
            serde_json::json!({"mode": "Agent", "remoteWrite": [{"url": "http://x"}], "ruleSelector": {}}),
            "spec.ruleSelector is set but mode is Agent",
        ),
    ];
    assert_each_refused(cases);
}

#[test]
fn pod_template_options_are_kept_and_flags_rendered() {
    let valid = sprom(serde_json::json!({
        "additionalArgs": [
            {"name": "query.max-concurrency", "value": "8"},
            {"name": "web.enable-admin-api"},
        ],
        "enableFeatures": ["exemplar-storage"],
        "podMetadata": {"labels": {"team": "sre"}, "annotations": {"a": "b"}},
        "containers": [{"name": "prometheus", "env": [{"name": "X", "value": "1"}]}, {"name": "sidecar", "image": "s"}],
        "persistentVolumeClaimRetentionPolicy": {"whenDeleted": "Delete"},
        "paused": true,
    }))
    .validate("zone")
    .unwrap();
    assert_eq!(
        valid.pod.additional_args,
        ["--query.max-concurrency=8", "--web.enable-admin-api"]
    );
    assert_eq!(valid.pod.enable_features, ["exemplar-storage"]);
    assert_eq!(valid.pod.pod_metadata.labels["team"], "sre");
    assert_eq!(valid.pod.containers.len(), 2);
    assert!(valid.paused);
    assert_eq!(
        valid
            .pod
            .pvc_retention
            .and_then(|policy| policy.when_deleted)
            .as_deref(),
        Some("Delete")
    );
    assert_eq!(valid.alerting, None);
}

#[test]
fn bad_pod_template_fields_name_the_field() {
    assert_each_refused([
        (
            serde_json::json!({"additionalArgs": [{"name": "config.file", "value": "/x"}]}),
            "--config.file is set by the controller",
        ),
        (
            serde_json::json!({"additionalArgs": [{"name": "no-agent"}]}),
            "--no-agent is set by the controller",
        ),
        (
            serde_json::json!({"additionalArgs": [{"name": "--web.enable-lifecycle"}]}),
            "spec.additionalArgs[0]",
        ),
        (
            serde_json::json!({"enableFeatures": ["a,b"]}),
            "spec.enableFeatures[0]",
        ),
        (
            serde_json::json!({"podMetadata": {"labels": {"zonecontrol.k8s.aws/shard": "9"}}}),
            "spec.podMetadata.labels",
        ),
        (
            serde_json::json!({"volumes": [{"name": "data", "emptyDir": {}}]}),
            "spec.volumes: \"data\"",
        ),
        (
            serde_json::json!({"volumes": [{"name": "rules-0", "emptyDir": {}}]}),
            "spec.volumes: \"rules-0\"",
        ),
        (
            serde_json::json!({"containers": [{"name": "prometheus", "args": ["--x"]}]}),
            "the \"prometheus\" entry sets args or command",
        ),
        (
            serde_json::json!({"initContainers": [{"name": "a", "image": "x"}, {"name": "a", "image": "y"}]}),
            "spec.initContainers: container \"a\" is listed twice",
        ),
        (
            serde_json::json!({"persistentVolumeClaimRetentionPolicy": {"whenDeleted": "Keep"}}),
            "spec.persistentVolumeClaimRetentionPolicy.whenDeleted is \"Keep\"",
        ),
    ]);
}

#[test]
fn bad_alerting_fields_name_the_field() {
    assert_each_refused([
        (
            serde_json::json!({"alerting": {"alertmanagers": [{"name": "am"}]}}),
            "spec.alerting.alertmanagers[0].port: name the Service port",
        ),
        (
            serde_json::json!({"alerting": {"alertmanagers": [{}]}}),
            "spec.alerting.alertmanagers[0]: set name and port",
        ),
        (
            serde_json::json!({"alerting": {"alertmanagers": [{"name": "am", "port": "web", "staticAddresses": ["a:1"]}]}}),
            "not both",
        ),
        (
            serde_json::json!({"alerting": {"alertmanagers": [{"staticAddresses": ["http://a:1"]}]}}),
            "is not host:port",
        ),
        (
            serde_json::json!({"alerting": {"alertmanagers": [{"name": "am", "port": 9093, "apiVersion": "V1"}]}}),
            "V2 only",
        ),
        (
            serde_json::json!({"alerting": {"alertmanagers": [{"name": "am", "port": 9093, "timeout": "10"}]}}),
            ".timeout: \"10\"",
        ),
        (
            serde_json::json!({"alerting": {"alertmanagers": [{"name": "am", "port": 9093, "scheme": "ftp"}]}}),
            ".scheme: \"ftp\" is not http or https",
        ),
        (
            serde_json::json!({"mode": "Agent", "remoteWrite": [{"url": "http://x"}], "alerting": {"alertmanagers": [{"name": "am", "port": 9093}]}}),
            "spec.alerting is set but mode is Agent",
        ),
    ]);
    let valid = sprom(serde_json::json!({"alerting": {"alertmanagers": [
        {"name": "am", "port": "web", "apiVersion": "v2"},
        {"staticAddresses": ["am.example.com:9093"], "scheme": "https"},
    ]}}))
    .validate("zone")
    .unwrap();
    assert_eq!(valid.alerting.map(|a| a.alertmanagers.len()), Some(2));
}

/// The messages a check shares with its CRD rule read in full as the controller writes them.
#[test]
fn messages_shared_with_the_crd_rules() {
    let cases = [
        (
            SpromError::NoZones,
            "spec.shardingStrategy.topology.values is empty: Topology sharding needs at least one zone (or set shardingStrategy.mode to Classic)",
        ),
        (
            SpromError::ZoneNotLabelValue("a b".into()),
            "spec.shardingStrategy.topology.values: zone \"a b\" is not a valid label value (at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit)",
        ),
        (
            SpromError::ZoneLabelName("a-b".into()),
            "spec.shardingStrategy.topology.externalLabelName \"a-b\" is not a Prometheus label name ([a-zA-Z_][a-zA-Z0-9_]*); \"\" adds no zone label",
        ),
        (
            SpromError::ZoneLabelNameReserved("shard".into()),
            "spec.shardingStrategy.topology.externalLabelName \"shard\" is also set by the controller (shard, prometheus_replica): choose another name",
        ),
        (
            SpromError::ExternalLabelName("1st".into()),
            "spec.externalLabels: \"1st\" is not a Prometheus label name ([a-zA-Z_][a-zA-Z0-9_]*)",
        ),
        (
            SpromError::RemoteWriteUrl(2),
            "spec.remoteWrite[2] is not an object with a url: each entry is one Prometheus remote_write",
        ),
        (
            SpromError::AgentWithoutRemoteWrite,
            "spec.remoteWrite is empty: mode Agent keeps no data locally and forwards everything through remote write, so it needs at least one target",
        ),
        (
            SpromError::AgentWithRuleFiles,
            "spec.ruleFiles is set but mode is Agent: agents do not evaluate rules; remove ruleFiles or use mode Server",
        ),
        (
            SpromError::RuleFileConfigMap(1),
            "spec.ruleFiles[1].configMap is empty: name the ConfigMap holding the rules",
        ),
        (
            SpromError::RuleFileKey {
                index: 0,
                config_map: "r".into(),
            },
            "spec.ruleFiles[0].key is empty (ConfigMap \"r\"): name a key, or leave key out to load every key",
        ),
        (
            SpromError::StorageBoth,
            "spec.storage sets both volumeClaimTemplate and emptyDir: choose one",
        ),
        (
            SpromError::Selector {
                field: "spec.ruleSelector",
                source: SelectorError::Operator {
                    key: "a".into(),
                    operator: "Like".into(),
                },
            },
            "spec.ruleSelector: spec.selector: operator \"Like\" of key \"a\" is not In, NotIn, Exists or DoesNotExist",
        ),
    ];
    for (error, message) in cases {
        assert_eq!(error.to_string(), message);
    }
}

/// `version` names the Prometheus the image runs: given, read from the image's tag, or the
/// default; without `image`, Prometheus's own image of that version.
#[test]
fn the_version_comes_from_the_spec_the_image_or_the_default() {
    let of = |spec: serde_json::Value| {
        let valid = sprom(spec).validate("zone").unwrap();
        (valid.version.to_string(), valid.image)
    };
    assert_eq!(
        of(serde_json::json!({"version": "v2.55.1"})),
        (
            "2.55.1".into(),
            "quay.io/prometheus/prometheus:v2.55.1".into()
        )
    );
    assert_eq!(
        of(serde_json::json!({"image": "registry.example/prom:v2.53.0"})),
        ("2.53.0".into(), "registry.example/prom:v2.53.0".into())
    );
    assert_eq!(
        of(serde_json::json!({"image": "registry.example/prom:latest", "version": "3.1.0"})),
        ("3.1.0".into(), "registry.example/prom:latest".into())
    );
    assert_eq!(
        of(serde_json::json!({})),
        ("3.16.0".into(), crate::sprom::DEFAULT_IMAGE.into())
    );
    let valid = sprom(serde_json::json!({})).validate("zone").unwrap();
    assert_eq!(
        valid.config_reloader_image,
        crate::sprom::DEFAULT_CONFIG_RELOADER_IMAGE
    );
}

#[test]
fn bad_versions_are_refused_with_what_to_write() {
    assert_each_refused([
        (
            serde_json::json!({"version": "latest"}),
            "write it as v2.55.1 or 3.16.0",
        ),
        (
            serde_json::json!({"version": "v1.8.2"}),
            "Prometheus 1.8.2 is not supported",
        ),
        (
            serde_json::json!({"image": "prom:v4.0.0"}),
            "Prometheus 4.0.0 is not supported",
        ),
    ]);
}
