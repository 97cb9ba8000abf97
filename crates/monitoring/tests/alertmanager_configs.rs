//! `spec.alerting` → Prometheus's `alerting` section: the goldens under `fixtures/alerting`
//! (`UPDATE_GOLDENS=1` rewrites them; review the diff against what prometheus-operator
//! generates), then one test per behaviour, the generated rules run on discovered Alertmanager
//! targets and on alerts with Prometheus's relabelling semantics.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::PathBuf;

use serde_json::{Map, Value, json};
use support::*;
use zone_monitoring::translate::{
    AlertingSettings, AlertingSpec, DiscoveryRole, ValidAlerting, alerting, references_of_alerting,
};
use zone_topology::relabel::{CompiledRules, Labels, RelabelConfig};

fn settings(role: DiscoveryRole) -> AlertingSettings<'static> {
    AlertingSettings {
        namespace: "team",
        service_discovery_role: role,
        replica_label: "prometheus_replica",
    }
}

/// The section as written, validated as the controller validates it first.
fn checked(yaml_text: &str) -> Result<ValidAlerting, String> {
    let spec: AlertingSpec = serde_norway::from_str(yaml_text).expect("spec parses");
    ValidAlerting::new(&spec).map_err(|error| error.to_string())
}

fn spec(yaml_text: &str) -> ValidAlerting {
    checked(yaml_text).expect("spec is valid")
}

/// The section made from `yaml_text`, or why not: the validation's refusal or the translation's.
fn section_with(yaml_text: &str, role: DiscoveryRole) -> Result<Map<String, Value>, String> {
    alerting(&checked(yaml_text)?, &settings(role), &values())
}

fn section(yaml_text: &str) -> Map<String, Value> {
    section_with(yaml_text, DiscoveryRole::Endpoints).unwrap()
}

/// The first Alertmanager entry of the section made from `yaml_text`.
fn first(yaml_text: &str) -> Map<String, Value> {
    let section = section(yaml_text);
    section["alertmanagers"][0].as_object().unwrap().clone()
}

fn error(yaml_text: &str) -> String {
    section_with(yaml_text, DiscoveryRole::Endpoints).unwrap_err()
}

fn check(name: &str, role: DiscoveryRole) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/alerting");
    let input = std::fs::read_to_string(dir.join(format!("{name}.yaml"))).unwrap();
    let section = section_with(&input, role).expect("translates");
    let golden_path = dir.join(format!("{name}.golden.yaml"));
    if std::env::var_os("UPDATE_GOLDENS").is_some() {
        let text = serde_norway::to_string(&json!({ "alerting": section })).unwrap();
        std::fs::write(&golden_path, text).unwrap();
    }
    let golden: Value =
        serde_norway::from_str(&std::fs::read_to_string(&golden_path).unwrap()).unwrap();
    assert_eq!(json!({ "alerting": section }), golden, "{name}");
}

#[test]
fn service_by_port_name_over_tls_with_basic_auth() {
    check("service-by-port-name", DiscoveryRole::Endpoints);
}

#[test]
fn service_by_port_number_discovered_through_endpoint_slices() {
    check(
        "service-endpointslice-by-port-number",
        DiscoveryRole::EndpointSlice,
    );
}

#[test]
fn static_addresses() {
    check("static-addresses", DiscoveryRole::Endpoints);
}

/// What Prometheus does with a discovered Alertmanager target: relabels it (`None`: dropped).
fn kept(am: &Map<String, Value>, discovered: &Labels) -> bool {
    let rules: Vec<RelabelConfig> =
        serde_json::from_value(am.get("relabel_configs").cloned().unwrap_or(json!([]))).unwrap();
    CompiledRules::new(&rules)
        .unwrap()
        .apply(discovered)
        .is_some()
}

/// An Alertmanager pod behind Service `alertmanager-main`, as the endpoints role discovers it.
fn alertmanager_target(port_name: &str, port: &str) -> Labels {
    labels(&[
        ("__address__", &format!("10.0.0.7:{port}")),
        ("__meta_kubernetes_namespace", "team"),
        ("__meta_kubernetes_service_name", "alertmanager-main"),
        ("__meta_kubernetes_endpoint_port_name", port_name),
        ("__meta_kubernetes_pod_container_port_name", port_name),
        ("__meta_kubernetes_pod_container_port_number", port),
        ("__meta_kubernetes_pod_phase", "Running"),
    ])
}

const BY_NAME: &str = "alertmanagers: [{name: alertmanager-main, port: web}]";

#[test]
fn a_service_by_port_name_keeps_that_service_and_port_only() {
    let am = first(BY_NAME);
    assert_eq!(
        am["relabel_configs"],
        yaml(
            "[{action: keep, source_labels: [__meta_kubernetes_service_name], \
               regex: alertmanager-main},
              {action: keep, source_labels: [__meta_kubernetes_endpoint_port_name], regex: web}]"
        )
    );
    assert_eq!(
        (&am["path_prefix"], &am["scheme"]),
        (&json!("/"), &json!("http")),
        "upstream's defaults"
    );
    for absent in [
        "timeout",
        "enable_http2",
        "api_version",
        "alert_relabel_configs",
    ] {
        assert!(!am.contains_key(absent), "{absent} in {am:?}");
    }
    assert!(kept(&am, &alertmanager_target("web", "9093")));
    assert!(
        !kept(&am, &alertmanager_target("cluster", "9094")),
        "the gossip port gets no alerts"
    );
    let other = with(
        &alertmanager_target("web", "9093"),
        "__meta_kubernetes_service_name",
        "alertmanager-other",
    );
    assert!(!kept(&am, &other));
}

#[test]
fn a_service_by_port_number_keeps_the_container_port_as_upstream() {
    let am = first("alertmanagers: [{name: alertmanager-main, port: 9093}]");
    assert_eq!(
        am["relabel_configs"][1],
        yaml(
            "{action: keep, source_labels: [__meta_kubernetes_pod_container_port_number], regex: '9093'}"
        )
    );
    assert!(kept(&am, &alertmanager_target("web", "9093")));
    assert!(!kept(&am, &alertmanager_target("cluster", "9094")));
}

#[test]
fn the_service_namespace_defaults_to_the_sharded_prometheus_one() {
    let am = first(BY_NAME);
    assert_eq!(
        am["kubernetes_sd_configs"],
        yaml("[{role: endpoints, namespaces: {names: [team]}}]")
    );
    let am = first("alertmanagers: [{namespace: monitoring, name: alertmanager-main, port: web}]");
    assert_eq!(
        am["kubernetes_sd_configs"],
        yaml("[{role: endpoints, namespaces: {names: [monitoring]}}]")
    );
    let am = first("alertmanagers: [{namespace: '', name: alertmanager-main, port: web}]");
    assert_eq!(
        am["kubernetes_sd_configs"][0]["namespaces"]["names"],
        json!(["team"])
    );
}

#[test]
fn the_endpointslice_role_discovers_and_keeps_the_port_by_its_slice_name() {
    let section = section_with(BY_NAME, DiscoveryRole::EndpointSlice).unwrap();
    let am = section["alertmanagers"][0].as_object().unwrap();
    assert_eq!(am["kubernetes_sd_configs"][0]["role"], "endpointslice");
    assert_eq!(
        am["relabel_configs"][1]["source_labels"],
        json!(["__meta_kubernetes_endpointslice_port_name"])
    );
    let target: Labels = alertmanager_target("web", "9093")
        .into_iter()
        .map(|(name, value)| (name.replace("_endpoint_", "_endpointslice_"), value))
        .collect();
    assert!(kept(am, &target));
}

#[test]
fn static_addresses_become_a_static_config_without_service_rules() {
    let am = first(
        "alertmanagers: [{staticAddresses: ['am-0.example.com:9093', '10.1.2.3:9093'], \
         pathPrefix: /am}]",
    );
    assert_eq!(
        am["static_configs"],
        yaml("[{targets: ['am-0.example.com:9093', '10.1.2.3:9093']}]")
    );
    assert_eq!(am["path_prefix"], "/am");
    for absent in ["kubernetes_sd_configs", "relabel_configs"] {
        assert!(!am.contains_key(absent), "{absent} in {am:?}");
    }
    let am = first(
        "alertmanagers: [{staticAddresses: ['am-0:9093'], relabelings: \
         [{targetLabel: __scheme__, replacement: https}]}]",
    );
    assert_eq!(
        am["relabel_configs"],
        yaml("[{target_label: __scheme__, replacement: https}]")
    );
}

#[test]
fn tls_basic_auth_and_authorization_are_resolved_and_inlined() {
    let am = first(
        "alertmanagers:
         - name: alertmanager-main
           port: web
           tlsConfig:
             ca: {configMap: {name: ca-bundle, key: ca.crt}}
             cert: {secret: {name: tls, key: tls.crt}}
             keySecret: {name: tls, key: tls.key}
             insecureSkipVerify: false
           basicAuth:
             username: {name: creds, key: user}
             password: {name: creds, key: pass}",
    );
    assert_eq!(
        am["tls_config"],
        json!({"ca": CA, "cert": CERT, "key": KEY, "insecure_skip_verify": false})
    );
    assert_eq!(
        am["basic_auth"],
        json!({"username": "alice", "password": "s3cret-pass"})
    );
    let am = first(
        "alertmanagers: [{name: alertmanager-main, port: web, \
         authorization: {credentials: {name: creds, key: token}}}]",
    );
    assert_eq!(
        am["authorization"],
        json!({"type": "Bearer", "credentials": "s3cret-token"})
    );
    let am = first(
        "alertmanagers: [{name: alertmanager-main, port: web, \
         tlsConfig: {caFile: /etc/prometheus/secrets/am/ca.crt, serverName: am}}]",
    );
    assert_eq!(
        am["tls_config"],
        json!({"ca_file": "/etc/prometheus/secrets/am/ca.crt", "server_name": "am"}),
        "paths in the container pass through"
    );
}

#[test]
fn a_missing_secret_key_names_the_field_and_the_reference_never_a_value() {
    let err = error(
        "alertmanagers:
         - name: alertmanager-main
           port: web
           basicAuth:
             username: {name: creds, key: user}
             password: {name: creds, key: nope}",
    );
    assert_eq!(
        err,
        "spec.alerting.alertmanagers[0].basicAuth.password: Secret team/creds key \"nope\": \
         the key is missing"
    );
    let err = error(
        "alertmanagers:
         - {staticAddresses: ['am:9093']}
         - {staticAddresses: ['am:9093'], authorization: {credentials: {name: gone, key: token}}}",
    );
    assert_eq!(
        err,
        "spec.alerting.alertmanagers[1].authorization.credentials: Secret team/gone key \
         \"token\": not found"
    );
    let err = error(
        "alertmanagers: [{name: a, port: web, tlsConfig: {ca: {secret: {name: tls, key: junk}}}}]",
    );
    assert_eq!(
        err,
        "spec.alerting.alertmanagers[0].tlsConfig.ca: the value is not PEM-encoded"
    );
    for err in [
        error(
            "alertmanagers: [{name: a, port: web, basicAuth: {username: {name: creds, key: user}, \
             password: {name: creds, key: pass}}, authorization: {credentials: {name: creds, \
             key: token}}}]",
        ),
        error("alertmanagers: [{name: a, port: web, basicAuth: {username: 'alice'}}]"),
    ] {
        assert!(!err.contains("alice") && !err.contains("s3cret"), "{err}");
        assert!(err.starts_with("spec.alerting.alertmanagers[0]"), "{err}");
    }
}

#[test]
fn basic_auth_and_authorization_together_are_refused_as_upstream_refuses_them() {
    let err = error(
        "alertmanagers: [{name: a, port: web, basicAuth: {username: {name: creds, key: user}, \
         password: {name: creds, key: pass}}, authorization: {credentials: {name: creds, \
         key: token}}}]",
    );
    assert_eq!(
        err,
        "spec.alerting.alertmanagers[0]: basicAuth and authorization are both set: keep one"
    );
}

#[test]
fn relabelings_follow_the_service_rules_in_prometheus_keys() {
    let am = first(
        "alertmanagers:
         - name: alertmanager-main
           port: web
           relabelings:
           - {sourceLabels: [__meta_kubernetes_pod_name], regex: '(.+)-0', action: Drop}
           - {sourceLabels: [__meta_kubernetes_pod_name], targetLabel: pod, separator: '/'}",
    );
    let rules = am["relabel_configs"].as_array().unwrap();
    assert_eq!(rules.len(), 4);
    assert_eq!(
        rules[2],
        yaml("{source_labels: [__meta_kubernetes_pod_name], regex: '(.+)-0', action: drop}")
    );
    assert_eq!(
        rules[3],
        yaml("{source_labels: [__meta_kubernetes_pod_name], target_label: pod, separator: /}")
    );
    let err =
        error("alertmanagers: [{name: a, port: web, relabelings: [{action: replace, regex: x}]}]");
    assert_eq!(
        err,
        "spec.alerting.alertmanagers[0].relabelings[0]: action \"replace\" needs targetLabel"
    );
    let err = error("alertmanagers: [{name: a, port: web, relabelings: ['keep']}]");
    assert!(
        err.starts_with("spec.alerting.alertmanagers[0].relabelings[0]: invalid type"),
        "{err}"
    );
}

#[test]
fn alert_relabelings_apply_to_that_alertmanager_only() {
    let section = section(
        "alertmanagers:
         - name: pager
           port: web
           alertRelabelings: [{sourceLabels: [severity], regex: critical, action: keep}]
         - name: tickets
           port: web",
    );
    assert_eq!(
        section["alertmanagers"][0]["alert_relabel_configs"],
        yaml("[{source_labels: [severity], regex: critical, action: keep}]")
    );
    assert!(
        section["alertmanagers"][1]
            .get("alert_relabel_configs")
            .is_none()
    );
    let err = error(
        "alertmanagers: [{name: a, port: web, alertRelabelings: [{action: hashmod, \
         targetLabel: x}]}]",
    );
    assert_eq!(
        err,
        "spec.alerting.alertmanagers[0].alertRelabelings[0]: hashmod requires a non-zero modulus"
    );
}

/// What the global alert_relabel_configs of `section` make of an alert's labels.
fn relabel_alert(section: &Map<String, Value>, alert: &Labels) -> Option<Labels> {
    let rules: Vec<RelabelConfig> =
        serde_json::from_value(section["alert_relabel_configs"].clone()).unwrap();
    CompiledRules::new(&rules).unwrap().apply(alert)
}

#[test]
fn the_replica_label_is_dropped_first_then_the_users_rules_apply() {
    let alert = labels(&[
        ("alertname", "TargetDown"),
        ("prometheus_replica", "prometheus-shard-0-1"),
        ("shard", "0"),
        ("zone", "zone-a"),
        ("team", "payments"),
    ]);
    let default = section(BY_NAME);
    assert_eq!(
        default["alert_relabel_configs"],
        yaml("[{action: labeldrop, regex: prometheus_replica}]")
    );
    let sent = relabel_alert(&default, &alert).unwrap();
    assert_eq!(
        sent,
        labels(&[
            ("alertname", "TargetDown"),
            ("shard", "0"),
            ("zone", "zone-a"),
            ("team", "payments"),
        ]),
        "replicas deduplicate; shard and zone stay"
    );

    let regrouped = section(
        "alertmanagers: [{name: alertmanager-main, port: web}]\n\
         alertRelabelConfigs:\n\
         - {action: LabelDrop, regex: shard|zone}\n\
         - {sourceLabels: [team], targetLabel: owner}",
    );
    assert_eq!(
        regrouped["alert_relabel_configs"],
        yaml(
            "[{action: labeldrop, regex: prometheus_replica},
              {action: labeldrop, regex: shard|zone},
              {source_labels: [team], target_label: owner}]"
        )
    );
    let sent = relabel_alert(&regrouped, &alert).unwrap();
    assert_eq!(
        sent,
        labels(&[
            ("alertname", "TargetDown"),
            ("owner", "payments"),
            ("team", "payments"),
        ])
    );
    let err = error(
        "alertmanagers: [{name: a, port: web}]\n\
         alertRelabelConfigs: [{action: labeldrop, regex: x, sourceLabels: [y]}]",
    );
    assert_eq!(
        err,
        "spec.alerting.alertRelabelConfigs[0]: \"labeldrop\" takes only regex"
    );
}

#[test]
fn a_replica_label_with_regex_characters_is_escaped_and_an_empty_one_dropped_nowhere() {
    let spec = spec(BY_NAME);
    let dotted = AlertingSettings {
        replica_label: "replica.name",
        ..settings(DiscoveryRole::Endpoints)
    };
    let section = alerting(&spec, &dotted, &values()).unwrap();
    assert_eq!(
        section["alert_relabel_configs"][0]["regex"],
        json!("replica\\.name")
    );
    let none = AlertingSettings {
        replica_label: "",
        ..settings(DiscoveryRole::Endpoints)
    };
    let section = alerting(&spec, &none, &values()).unwrap();
    assert_eq!(section["alert_relabel_configs"], json!([]));
}

#[test]
fn entries_that_are_not_a_service_or_addresses_are_refused() {
    let cases = [
        (
            "alertmanagers: [{name: a, staticAddresses: ['am:9093']}]",
            "spec.alerting.alertmanagers[0]: set either name (a Service) or staticAddresses, not both",
        ),
        (
            "alertmanagers: [{port: web}]",
            "spec.alerting.alertmanagers[0]: set name and port (a Service) or staticAddresses",
        ),
        (
            "alertmanagers: [{name: a}]",
            "spec.alerting.alertmanagers[0].port: name the Service port (by name or number) to \
             send alerts to",
        ),
        (
            "alertmanagers: [{name: a, port: 0}]",
            "spec.alerting.alertmanagers[0].port: name the Service port (by name or number) to \
             send alerts to",
        ),
        (
            "alertmanagers: [{staticAddresses: ['http://am:9093']}]",
            "spec.alerting.alertmanagers[0].staticAddresses: \"http://am:9093\" is not host:port \
             (scheme and pathPrefix are fields of their own)",
        ),
        (
            "alertmanagers: [{name: a, port: web, apiVersion: V1}]",
            "spec.alerting.alertmanagers[0].apiVersion: \"V1\": Prometheus 3 speaks the \
             Alertmanager API V2 only",
        ),
        (
            "alertmanagers: [{name: a, port: web, scheme: ftp}]",
            "spec.alerting.alertmanagers[0].scheme: \"ftp\" is not http or https",
        ),
    ];
    for (yaml_text, expected) in cases {
        assert_eq!(error(yaml_text), expected, "{yaml_text}");
    }
    let am = first("alertmanagers: [{name: a, port: web, apiVersion: v2, scheme: HTTPS}]");
    assert_eq!(
        (&am["api_version"], &am["scheme"]),
        (&json!("v2"), &json!("https"))
    );
}

#[test]
fn references_are_every_secret_and_config_map_key_sorted() {
    let spec = spec(
        "alertmanagers:
         - name: a
           port: web
           tlsConfig:
             ca: {configMap: {name: ca-bundle, key: ca.crt}}
             keySecret: {name: tls, key: tls.key}
             cert: {secret: {name: tls, key: tls.crt}}
           basicAuth:
             username: {name: creds, key: user}
             password: {name: creds, key: pass}
         - staticAddresses: ['am:9093']
           authorization: {credentials: {name: creds, key: token}}
         - staticAddresses: ['am:9093']
           basicAuth: 'not an object'",
    );
    let refs: Vec<String> = references_of_alerting("team", &spec)
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(
        refs,
        [
            "Secret team/creds key \"pass\"",
            "Secret team/creds key \"token\"",
            "Secret team/creds key \"user\"",
            "Secret team/tls key \"tls.crt\"",
            "Secret team/tls key \"tls.key\"",
            "ConfigMap team/ca-bundle key \"ca.crt\"",
        ]
    );
    // The entry that references nothing because it does not parse says why when translated.
    let err = alerting(&spec, &settings(DiscoveryRole::Endpoints), &values()).unwrap_err();
    assert_eq!(
        err,
        "spec.alerting.alertmanagers[2].basicAuth: expected username and password as Secret \
         key references ({name, key})"
    );
}
