use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use super::*;

fn sprom(spec: serde_json::Value) -> ShardedPrometheusSpec {
    let mut spec = spec;
    spec["shardingStrategy"] = serde_json::json!({"mode": "Classic"});
    serde_json::from_value(spec).expect("a spec")
}

#[test]
fn monitoring_defaults_select_nothing_with_the_upstream_intervals() {
    let valid = sprom(serde_json::json!({})).validate("zone").unwrap();
    let monitoring = valid.monitoring;
    assert!(!monitoring.selects_anything());
    assert_eq!(monitoring.scrape_interval, "30s");
    assert_eq!(monitoring.evaluation_interval, "30s");
    assert_eq!(
        monitoring.service_discovery_role,
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
    assert_eq!(monitoring.enforced_sample_limit, Some(1000));
    assert_eq!(
        monitoring.service_discovery_role,
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
    for (spec, expected) in cases {
        let error = sprom(spec.clone())
            .validate("zone")
            .unwrap_err()
            .to_string();
        assert!(error.contains(expected), "{spec}: {error}");
    }
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
fn bad_pod_template_and_alerting_fields_name_the_field() {
    let cases = [
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
        (
            serde_json::json!({"alerting": {"alertmanagers": [{"name": "am"}]}}),
            "spec.alerting.alertmanagers[0]: name is set without port",
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
            "timeout \"10\"",
        ),
        (
            serde_json::json!({"alerting": {"alertmanagers": [{"name": "am", "port": 9093, "scheme": "ftp"}]}}),
            "scheme \"ftp\"",
        ),
        (
            serde_json::json!({"mode": "Agent", "remoteWrite": [{"url": "http://x"}], "alerting": {"alertmanagers": [{"name": "am", "port": 9093}]}}),
            "spec.alerting is set but mode is Agent",
        ),
    ];
    for (spec, expected) in cases {
        let error = sprom(spec.clone())
            .validate("zone")
            .unwrap_err()
            .to_string();
        assert!(error.contains(expected), "{spec}: {error}");
    }
    let valid = sprom(serde_json::json!({"alerting": {"alertmanagers": [
        {"name": "am", "port": "web", "apiVersion": "v2"},
        {"staticAddresses": ["am.example.com:9093"], "scheme": "https"},
    ]}}))
    .validate("zone")
    .unwrap();
    assert_eq!(valid.alerting.map(|a| a.alertmanagers.len()), Some(2));
}
