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
        assert_eq!(err, ZauError::MaxUnavailableZero);
        assert!(err.to_string().contains("cannot progress"), "{err}");
    }
    let err = zau("2", Some(IntOrString::String("x%".into())))
        .validate()
        .unwrap_err();
    assert!(matches!(err, ZauError::MaxUnavailable(_)), "{err}");
    let err = ZoneAwareUpdateSpec::default().validate().unwrap_err();
    assert_eq!(err, ZauError::MissingStatefulSet);
}

fn gated(gate: serde_json::Value) -> Result<ValidZau, ZauError> {
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

/// The messages a check shares with its CRD rule read in full as the controller writes them.
#[test]
fn messages_shared_with_the_crd_rules() {
    let cases = [
        (
            ZauError::MissingStatefulSet,
            "spec.statefulset is empty: name the StatefulSet to roll out, or select a rollout group with spec.selector",
        ),
        (
            ZauError::BothTargets,
            "spec.statefulset and spec.selector are exclusive: name one StatefulSet, or select a rollout group",
        ),
        (
            ZauError::GateTarget,
            "spec.alertGate: set exactly one of url and service",
        ),
        (
            ZauError::MaxUnavailableZero,
            "spec.maxUnavailable must be at least 1 or 1%: a rollout that can remove no pod cannot progress",
        ),
        (
            ZauError::GateZoneLabel("a.b".into()),
            "spec.alertGate.zoneLabel \"a.b\" is not a Prometheus label name ([a-zA-Z_][a-zA-Z0-9_]*)",
        ),
    ];
    for (error, message) in cases {
        assert_eq!(error.to_string(), message);
    }
}

/// A rollout group: spec.selector instead of spec.statefulset, never both, never empty.
#[test]
fn a_rollout_targets_one_statefulset_or_a_group() {
    let group: LabelSelector = serde_json::from_value(serde_json::json!(
        {"matchLabels": {"rollout-group": "ingester"}}
    ))
    .unwrap();
    let grouped = |statefulset: &str, selector: Option<LabelSelector>| ZoneAwareUpdateSpec {
        statefulset: statefulset.into(),
        selector,
        ..zau("2", None)
    };
    assert_eq!(
        grouped("", Some(group.clone())).validate().unwrap().target,
        RolloutTarget::Group(group.clone())
    );
    assert_eq!(
        grouped("web", None).validate().unwrap().target,
        RolloutTarget::StatefulSet("web".into())
    );
    let bad_operator: LabelSelector = serde_json::from_value(serde_json::json!(
        {"matchExpressions": [{"key": "a", "operator": "Is"}]}
    ))
    .unwrap();
    let cases = [
        (grouped("web", Some(group)), ZauError::BothTargets),
        (grouped(" ", None), ZauError::MissingStatefulSet),
        (
            grouped("", Some(LabelSelector::default())),
            ZauError::EmptyGroupSelector,
        ),
    ];
    for (spec, error) in cases {
        assert_eq!(spec.validate().unwrap_err(), error);
    }
    let err = grouped("", Some(bad_operator)).validate().unwrap_err();
    assert!(matches!(err, ZauError::Selector(_)), "{err}");
}
