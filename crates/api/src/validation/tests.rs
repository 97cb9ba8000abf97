use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

use super::*;

fn zau(factor: &str, max_unavailable: Option<IntOrString>) -> ZoneAwareUpdateSpec {
    ZoneAwareUpdateSpec {
        statefulset: "web".into(),
        max_unavailable,
        exponential_factor: factor.into(),
        ..ZoneAwareUpdateSpec::default()
    }
}

#[test]
fn valid_zau_specs() {
    let valid = zau("2.0", Some(IntOrString::String("25%".into())))
        .validate()
        .unwrap();
    assert_eq!(valid.exponential_factor, 2.0);
    assert_eq!(valid.max_unavailable, IntOrPercent::Percent(25));
    let valid = zau("0", None).validate().unwrap();
    assert_eq!(
        (valid.exponential_factor, valid.max_unavailable),
        (0.0, IntOrPercent::Int(1))
    );
}

#[test]
fn invalid_zau_specs_name_the_field() {
    let err = zau("0.5", Some(IntOrString::Int(4)))
        .validate()
        .unwrap_err();
    assert!(
        err.to_string().starts_with("spec.exponentialFactor"),
        "{err}"
    );
    for zero in [IntOrString::Int(0), IntOrString::String("0%".into())] {
        let err = zau("2", Some(zero)).validate().unwrap_err();
        assert_eq!(err, SpecError::MaxUnavailableZero);
        assert!(err.to_string().contains("cannot progress"), "{err}");
    }
    let err = zau("2", Some(IntOrString::String("x%".into())))
        .validate()
        .unwrap_err();
    assert!(matches!(err, SpecError::MaxUnavailable(_)), "{err}");
    let err = ZoneAwareUpdateSpec::default().validate().unwrap_err();
    assert_eq!(err, SpecError::MissingStatefulSet);
}

fn gated(gate: serde_json::Value) -> Result<ValidZau, SpecError> {
    let spec: ZoneAwareUpdateSpec =
        serde_json::from_value(serde_json::json!({"statefulset": "web", "alertGate": gate}))
            .unwrap();
    spec.validate()
}

#[test]
fn an_alert_gate_gets_its_defaults() {
    let valid = gated(serde_json::json!({
        "url": "http://prometheus:9090/", "matchers": "{severity=\"critical\"}"
    }))
    .unwrap();
    let gate = valid.alert_gate.unwrap();
    assert_eq!(
        gate.target,
        GateTarget::Url("http://prometheus:9090".to_string())
    );
    assert_eq!(gate.path_prefix, "/");
    assert_eq!(gate.zone_scope, ZoneScope::Any);
    assert_eq!(gate.zone_label, "zone");
    assert_eq!(gate.poll_interval, Duration::from_secs(10));
    assert_eq!(gate.timeout, Duration::from_secs(5));
    assert!(!gate.include_pending);
    assert_eq!((valid.bake_time, valid.paused), (None, false));

    let valid = gated(serde_json::json!({
        "service": {"name": "rules-federator", "namespace": "zone-aware-system", "port": "http"},
        "scheme": "https", "pathPrefix": "/prom", "matchers": "{app=\"web\"}",
        "tlsConfig": {"serverName": "rules-federator.zone-aware-system.svc"},
        "bearerTokenSecret": {"name": "gate-token", "key": "token"},
        "zoneScope": "RolloutZone", "zoneLabel": "az", "pollInterval": "2s",
    }))
    .unwrap();
    let gate = valid.alert_gate.unwrap();
    assert_eq!(
        gate.target,
        GateTarget::Service {
            namespace: Some("zone-aware-system".into()),
            name: "rules-federator".into(),
            port: IntOrString::String("http".into()),
            scheme: GateScheme::Https,
        }
    );
    assert_eq!(gate.path_prefix, "/prom/");
    assert_eq!(gate.zone_scope, ZoneScope::RolloutZone);
    assert_eq!(gate.zone_label, "az");
    // The default timeout is cut to the poll interval.
    assert_eq!(gate.timeout, Duration::from_secs(2));
}

#[test]
fn bake_time_and_manual_pause() {
    let spec: ZoneAwareUpdateSpec = serde_json::from_value(
        serde_json::json!({"statefulset": "web", "bakeTime": "5m", "paused": true}),
    )
    .unwrap();
    let valid = spec.validate().unwrap();
    assert_eq!(valid.bake_time, Some(Duration::from_secs(300)));
    assert!(valid.paused);
    let spec: ZoneAwareUpdateSpec =
        serde_json::from_value(serde_json::json!({"statefulset": "web", "bakeTime": "0"})).unwrap();
    assert_eq!(spec.validate().unwrap().bake_time, None);
    let spec: ZoneAwareUpdateSpec =
        serde_json::from_value(serde_json::json!({"statefulset": "web", "bakeTime": "5 min"}))
            .unwrap();
    let err = spec.validate().unwrap_err().to_string();
    assert!(err.starts_with("spec.bakeTime: \"5 min\""), "{err}");
}

#[test]
fn invalid_alert_gates_name_the_field() {
    let m = "{severity=\"critical\"}";
    let cases = [
        (
            serde_json::json!({"matchers": m}),
            "spec.alertGate: set exactly one of url and service",
        ),
        (
            serde_json::json!({"url": "http://a", "service": {"name": "b", "port": 1}, "matchers": m}),
            "spec.alertGate: set exactly one",
        ),
        (
            serde_json::json!({"url": "prometheus:9090", "matchers": m}),
            "spec.alertGate.url",
        ),
        (
            serde_json::json!({"url": "http://:9090", "matchers": m}),
            "it has no host",
        ),
        (
            serde_json::json!({"url": "http://a/?x=1", "matchers": m}),
            "no query",
        ),
        (
            serde_json::json!({"url": "http://a", "scheme": "https", "matchers": m}),
            "spec.alertGate.scheme https contradicts",
        ),
        (
            serde_json::json!({"service": {"name": " ", "port": 9090}, "matchers": m}),
            "spec.alertGate.service.name is empty",
        ),
        (
            serde_json::json!({"service": {"name": "f", "port": 0}, "matchers": m}),
            "spec.alertGate.service.port 0",
        ),
        (
            serde_json::json!({"url": "http://a", "pathPrefix": "api", "matchers": m}),
            "spec.alertGate.pathPrefix",
        ),
        (
            serde_json::json!({"url": "http://a", "tlsConfig": {"insecureSkipVerify": true}, "matchers": m}),
            "spec.alertGate.tlsConfig is set but the endpoint is http",
        ),
        (
            serde_json::json!({"url": "https://a", "tlsConfig": {"caSecret": {"name": "ca", "key": ""}}, "matchers": m}),
            "spec.alertGate.tlsConfig.caSecret: name and key",
        ),
        (
            serde_json::json!({"url": "http://a", "bearerTokenSecret": {"name": "", "key": "t"}, "matchers": m}),
            "spec.alertGate.bearerTokenSecret: name and key",
        ),
        (
            serde_json::json!({"url": "http://a", "matchers": " "}),
            "spec.alertGate.matchers is empty",
        ),
        (
            serde_json::json!({"url": "http://a", "matchers": "{}"}),
            "spec.alertGate.matchers is empty",
        ),
        (
            serde_json::json!({"url": "http://a", "matchers": m, "zoneLabel": "topology.kubernetes.io/zone"}),
            "spec.alertGate.zoneLabel",
        ),
        (
            serde_json::json!({"url": "http://a", "matchers": m, "pollInterval": "500ms"}),
            "spec.alertGate.pollInterval \"500ms\" must be from 1s to 5m",
        ),
        (
            serde_json::json!({"url": "http://a", "matchers": m, "pollInterval": "10m"}),
            "spec.alertGate.pollInterval \"10m\" must be from 1s to 5m",
        ),
        (
            serde_json::json!({"url": "http://a", "matchers": m, "pollInterval": "ten"}),
            "spec.alertGate.pollInterval: \"ten\" is not a Prometheus duration",
        ),
        (
            serde_json::json!({"url": "http://a", "matchers": m, "pollInterval": "5s", "timeout": "6s"}),
            "spec.alertGate.timeout \"6s\" is longer than spec.alertGate.pollInterval \"5s\"",
        ),
        (
            serde_json::json!({"url": "http://a", "matchers": m, "timeout": "0"}),
            "spec.alertGate.timeout",
        ),
    ];
    for (gate, expected) in cases {
        let err = gated(gate.clone()).unwrap_err().to_string();
        assert!(err.contains(expected), "{gate}: {err}");
        assert!(err.starts_with("spec."), "{gate}: {err}");
        assert!(!err.contains('\n'), "{gate}: one line: {err}");
    }
}

fn zdb(selector: Option<LabelSelector>) -> ZoneDisruptionBudgetSpec {
    ZoneDisruptionBudgetSpec {
        selector,
        max_unavailable: Some(IntOrString::String("10%".into())),
        dry_run: false,
    }
}

fn expression(operator: &str, values: Option<Vec<String>>) -> LabelSelector {
    LabelSelector {
        match_expressions: Some(vec![LabelSelectorRequirement {
            key: "app".into(),
            operator: operator.into(),
            values,
        }]),
        match_labels: None,
    }
}

#[test]
fn zdb_selectors() {
    let labels = LabelSelector {
        match_labels: Some(BTreeMap::from([("app".to_string(), "web".to_string())])),
        match_expressions: None,
    };
    let valid = zdb(Some(labels)).validate().unwrap();
    assert_eq!(valid.max_unavailable, IntOrPercent::Percent(10));
    assert!(
        zdb(Some(expression("In", Some(vec!["web".into()]))))
            .validate()
            .is_ok()
    );
    assert!(zdb(Some(expression("Exists", None))).validate().is_ok());
    assert_eq!(zdb(None).validate().unwrap_err(), SpecError::EmptySelector);
    assert_eq!(
        zdb(Some(LabelSelector::default())).validate().unwrap_err(),
        SpecError::EmptySelector
    );
    assert!(matches!(
        zdb(Some(expression("Like", None))).validate().unwrap_err(),
        SpecError::SelectorOperator { .. }
    ));
    assert!(matches!(
        zdb(Some(expression("In", None))).validate().unwrap_err(),
        SpecError::SelectorValues { .. }
    ));
    assert!(matches!(
        zdb(Some(expression("Exists", Some(vec!["x".into()]))))
            .validate()
            .unwrap_err(),
        SpecError::SelectorValues { .. }
    ));
}

/// 0 is a freeze, not an error: no running selected pod may be evicted.
#[test]
fn zdb_max_unavailable_zero_is_valid() {
    let labels = LabelSelector {
        match_labels: Some(BTreeMap::from([("app".to_string(), "web".to_string())])),
        match_expressions: None,
    };
    for (zero, expected) in [
        (IntOrString::Int(0), IntOrPercent::Int(0)),
        (IntOrString::String("0%".into()), IntOrPercent::Percent(0)),
        (IntOrString::String("0".into()), IntOrPercent::Int(0)),
    ] {
        let spec = ZoneDisruptionBudgetSpec {
            max_unavailable: Some(zero),
            ..zdb(Some(labels.clone()))
        };
        assert_eq!(spec.validate().unwrap().max_unavailable, expected);
    }
    let negative = ZoneDisruptionBudgetSpec {
        max_unavailable: Some(IntOrString::Int(-1)),
        ..zdb(Some(labels))
    };
    assert!(matches!(
        negative.validate().unwrap_err(),
        SpecError::MaxUnavailable(_)
    ));
}

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
