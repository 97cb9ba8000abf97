//! ServiceMonitor translation: one test per field, target labels checked by running the
//! generated relabel_configs on discovered targets.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use serde_json::json;
use support::*;
use zone_monitoring::monitors::ServiceMonitorSpec;
use zone_monitoring::translate::{DiscoveryRole, Job, Settings, service_monitor};

const BASIC: &str = "
selector: {matchLabels: {app: api}}
endpoints:
- port: web
";

fn jobs_with(spec: &str, settings: &Settings) -> Result<Vec<Job>, String> {
    service_monitor(
        &object::<ServiceMonitorSpec>("api", spec),
        settings,
        &values(),
    )
}

fn job(spec: &str) -> Job {
    jobs_with(spec, &Settings::default()).unwrap().remove(0)
}

fn error(spec: &str) -> String {
    jobs_with(spec, &Settings::default()).unwrap_err()
}

#[test]
fn one_job_per_endpoint_named_after_the_monitor() {
    let jobs = jobs_with(
        "selector: {}\nendpoints: [{port: web}, {port: admin}]",
        &Settings::default(),
    )
    .unwrap();
    let names: Vec<_> = jobs.iter().map(|j| j["job_name"].clone()).collect();
    assert_eq!(
        names,
        [
            json!("serviceMonitor/team/api/0"),
            json!("serviceMonitor/team/api/1")
        ]
    );
    assert_eq!(jobs[0]["honor_labels"], json!(false));
    assert_eq!(
        jobs[0]["kubernetes_sd_configs"],
        yaml("[{role: endpoints, namespaces: {names: [team]}}]")
    );
}

#[test]
fn target_labels_match_upstream_for_an_endpoints_target() {
    let got = target(&job(BASIC), &endpoints_target()).expect("kept");
    let want = labels(&[
        ("container", "server"),
        ("endpoint", "web"),
        ("instance", "10.0.0.5:8080"),
        ("job", "api"),
        ("namespace", "team"),
        ("pod", "api-7d9f-x"),
        ("service", "api"),
    ]);
    assert_eq!(got, want);
}

#[test]
fn relabel_rules_start_with_the_job_name_copy_and_carry_no_sharding() {
    let job = job(BASIC);
    let rules = rules(&job, "relabel_configs");
    assert_eq!(rules[0].source_labels, ["job"]);
    assert_eq!(
        rules[0].target_label.as_deref(),
        Some("__tmp_prometheus_job_name")
    );
    let text = serde_json::to_string(&job).unwrap();
    assert!(
        !text.contains("__tmp_hash") && !text.contains("SHARD"),
        "{text}"
    );
    let tmp = target_with_tmp(&job);
    assert_eq!(tmp.as_deref(), Some("serviceMonitor/team/api/0"));
}

fn target_with_tmp(job: &Job) -> Option<String> {
    let rules = rules(job, "relabel_configs");
    let mut input = endpoints_target();
    input.insert("job".into(), job["job_name"].as_str().unwrap().into());
    let out = zone_topology::relabel::apply(&rules, &input).unwrap()?;
    out.get("__tmp_prometheus_job_name").cloned()
}

#[test]
fn endpointslice_role_uses_endpointslice_meta_labels() {
    let settings = Settings {
        service_discovery_role: DiscoveryRole::EndpointSlice,
        ..Settings::default()
    };
    let job = jobs_with(BASIC, &settings).unwrap().remove(0);
    assert_eq!(
        job["kubernetes_sd_configs"][0]["role"],
        json!("endpointslice")
    );
    let got = target(&job, &endpointslice_target()).expect("kept");
    assert_eq!(got["pod"], "api-7d9f-x");
    assert_eq!(got["endpoint"], "web");
    // The endpoints-role labels are not what this role discovers: the port filter drops them.
    assert_eq!(target(&job, &endpoints_target()), None);
}

#[test]
fn a_target_on_another_port_is_dropped() {
    let other = with(
        &endpoints_target(),
        "__meta_kubernetes_endpoint_port_name",
        "admin",
    );
    assert_eq!(target(&job(BASIC), &other), None);
}

#[test]
fn finished_pods_are_dropped_unless_filter_running_is_off() {
    for phase in ["Succeeded", "Failed"] {
        let done = with(&endpoints_target(), "__meta_kubernetes_pod_phase", phase);
        assert_eq!(target(&job(BASIC), &done), None, "{phase}");
        let keep = job("selector: {}\nendpoints: [{port: web, filterRunning: false}]");
        assert!(target(&keep, &done).is_some(), "{phase}");
    }
}

#[test]
fn node_addresses_get_a_node_label_instead_of_pod() {
    let mut node = with(
        &endpoints_target(),
        "__meta_kubernetes_endpoint_address_target_kind",
        "Node",
    );
    node = with(
        &node,
        "__meta_kubernetes_endpoint_address_target_name",
        "node-a",
    );
    node = with(&node, "__meta_kubernetes_pod_name", "");
    node = with(&node, "__meta_kubernetes_pod_container_name", "");
    let got = target(&job(BASIC), &node).unwrap();
    assert_eq!(got.get("node").map(String::as_str), Some("node-a"));
    assert!(!got.contains_key("pod") && !got.contains_key("container"));
}

#[test]
fn selector_match_labels_and_expressions_filter_services() {
    let spec = "
selector:
  matchLabels: {app: api}
  matchExpressions:
  - {key: app.kubernetes.io/part-of, operator: In, values: [shop, store]}
  - {key: tier, operator: NotIn, values: [db]}
  - {key: app, operator: Exists}
  - {key: legacy, operator: DoesNotExist}
endpoints: [{port: web}]
";
    let job = job(spec);
    let base = endpoints_target();
    assert!(target(&job, &base).is_some());
    let cases = [
        ("__meta_kubernetes_service_label_app", "other"),
        ("__meta_kubernetes_service_labelpresent_app", ""),
        (
            "__meta_kubernetes_service_label_app_kubernetes_io_part_of",
            "blog",
        ),
    ];
    for (name, value) in cases {
        assert_eq!(
            target(&job, &with(&base, name, value)),
            None,
            "{name}={value}"
        );
    }
    let db = with(&base, "__meta_kubernetes_service_label_tier", "db");
    let db = with(&db, "__meta_kubernetes_service_labelpresent_tier", "true");
    assert_eq!(target(&job, &db), None);
    let legacy = with(
        &base,
        "__meta_kubernetes_service_labelpresent_legacy",
        "true",
    );
    assert_eq!(target(&job, &legacy), None);
}

#[test]
fn role_selector_moves_the_selector_into_kubernetes_sd() {
    let spec = "
selectorMechanism: RoleSelector
selector:
  matchLabels: {group: g1}
  matchExpressions: [{key: group, operator: In, values: [g3, g2]}, {key: old, operator: DoesNotExist}]
endpoints: [{port: web}]
";
    let job = job(spec);
    let label = "group=g1,group in (g2,g3),!old";
    assert_eq!(
        job["kubernetes_sd_configs"][0]["selectors"],
        json!([{"role": "endpoints", "label": label}, {"role": "service", "label": label}])
    );
    let other = with(
        &endpoints_target(),
        "__meta_kubernetes_service_label_app",
        "other",
    );
    assert!(
        target(&job, &other).is_some(),
        "no relabel selection with RoleSelector"
    );
}

#[test]
fn invalid_selectors_are_rejected() {
    for (selector, field) in [
        (
            "{matchExpressions: [{key: a, operator: Equals, values: [b]}]}",
            "operator",
        ),
        ("{matchExpressions: [{key: a, operator: In}]}", "values"),
        (
            "{matchExpressions: [{key: a, operator: Exists, values: [b]}]}",
            "values",
        ),
        ("{matchLabels: {app: 'a(b'}}", "matchLabels"),
    ] {
        let err = error(&format!("selector: {selector}\nendpoints: [{{port: web}}]"));
        assert!(err.starts_with("selector.") && err.contains(field), "{err}");
    }
}

#[test]
fn namespace_selector_any_match_names_and_ignore() {
    let sd = |spec: &str, settings: &Settings| {
        jobs_with(spec, settings).unwrap()[0]["kubernetes_sd_configs"][0].clone()
    };
    let any =
        "selector: {}\nnamespaceSelector: {any: true, matchNames: [x]}\nendpoints: [{port: w}]";
    let names = "selector: {}\nnamespaceSelector: {matchNames: [a, b]}\nendpoints: [{port: w}]";
    let plain = Settings::default();
    assert_eq!(sd(any, &plain), json!({"role": "endpoints"}));
    assert_eq!(
        sd(names, &plain)["namespaces"],
        json!({"names": ["a", "b"]})
    );
    let ignore = Settings {
        ignore_namespace_selectors: true,
        ..Settings::default()
    };
    assert_eq!(sd(any, &ignore)["namespaces"], json!({"names": ["team"]}));
    assert_eq!(sd(names, &ignore)["namespaces"], json!({"names": ["team"]}));
}

#[test]
fn target_labels_and_pod_target_labels_are_copied_when_set() {
    let spec = "
selector: {}
targetLabels: [app.kubernetes.io/part-of, missing]
podTargetLabels: [team]
endpoints: [{port: web}]
";
    let settings = Settings {
        pod_target_labels: vec!["zone".into()],
        ..Settings::default()
    };
    let job = jobs_with(spec, &settings).unwrap().remove(0);
    let discovered = with(
        &endpoints_target(),
        "__meta_kubernetes_pod_label_zone",
        "z1",
    );
    let got = target(&job, &discovered).unwrap();
    assert_eq!(got["app_kubernetes_io_part_of"], "shop");
    assert_eq!(got["team"], "core");
    assert_eq!(got["zone"], "z1");
    assert!(!got.contains_key("missing"));
}

#[test]
fn job_label_names_the_job_when_the_service_has_it() {
    let job = job("selector: {}\njobLabel: app.kubernetes.io/part-of\nendpoints: [{port: web}]");
    assert_eq!(target(&job, &endpoints_target()).unwrap()["job"], "shop");
    let without = with(
        &endpoints_target(),
        "__meta_kubernetes_service_label_app_kubernetes_io_part_of",
        "",
    );
    assert_eq!(target(&job, &without).unwrap()["job"], "api");
}

#[test]
fn target_port_filters_on_container_ports_and_names_the_endpoint() {
    let by_name = job("selector: {}\nendpoints: [{targetPort: web}]");
    assert_eq!(
        target(&by_name, &endpoints_target()).unwrap()["endpoint"],
        "web"
    );
    let other = with(
        &endpoints_target(),
        "__meta_kubernetes_pod_container_port_name",
        "x",
    );
    assert_eq!(target(&by_name, &other), None);

    let by_number = job("selector: {}\nendpoints: [{targetPort: 8080}]");
    assert_eq!(
        target(&by_number, &endpoints_target()).unwrap()["endpoint"],
        "8080"
    );
    let other = with(
        &endpoints_target(),
        "__meta_kubernetes_pod_container_port_number",
        "9",
    );
    assert_eq!(target(&by_number, &other), None);

    // Upstream quirk kept: targetPort 0 filters nothing but still names the endpoint "0".
    let zero = job("selector: {}\nendpoints: [{targetPort: 0}]");
    assert_eq!(target(&zero, &other).unwrap()["endpoint"], "0");
    let none = job("selector: {}\nendpoints: [{}]");
    assert!(!target(&none, &other).unwrap().contains_key("endpoint"));
}

#[test]
fn honor_labels_and_timestamps_follow_the_overrides() {
    let spec = "selector: {}\nendpoints: [{port: w, honorLabels: true, honorTimestamps: true, trackTimestampsStaleness: true}]";
    let plain = jobs_with(spec, &Settings::default()).unwrap().remove(0);
    assert_eq!(plain["honor_labels"], json!(true));
    assert_eq!(plain["honor_timestamps"], json!(true));
    assert_eq!(plain["track_timestamps_staleness"], json!(true));
    let overridden = Settings {
        override_honor_labels: true,
        override_honor_timestamps: true,
        ..Settings::default()
    };
    let forced = jobs_with(spec, &overridden).unwrap().remove(0);
    assert_eq!(forced["honor_labels"], json!(false));
    assert_eq!(forced["honor_timestamps"], json!(false));
    let unset = job(BASIC);
    assert!(
        !unset.contains_key("honor_timestamps")
            && !unset.contains_key("track_timestamps_staleness")
    );
    let unset_forced = jobs_with(BASIC, &overridden).unwrap().remove(0);
    assert_eq!(unset_forced["honor_timestamps"], json!(false));
}

#[test]
fn scrape_parameters_pass_through() {
    let job = job("
selector: {}
endpoints:
- port: web
  interval: 15s
  scrapeTimeout: 10s
  path: /custom
  params: {module: [http_2xx]}
  scheme: https
  followRedirects: false
  enableHttp2: false
");
    for (key, value) in [
        ("scrape_interval", json!("15s")),
        ("scrape_timeout", json!("10s")),
        ("metrics_path", json!("/custom")),
        ("params", json!({"module": ["http_2xx"]})),
        ("scheme", json!("https")),
        ("follow_redirects", json!(false)),
        ("enable_http2", json!(false)),
    ] {
        assert_eq!(job[key], value, "{key}");
    }
}

#[test]
fn scrape_timeout_must_fit_the_interval() {
    let err = error("selector: {}\nendpoints: [{port: w, interval: 10s, scrapeTimeout: 20s}]");
    assert!(err.starts_with("endpoints[0].scrapeTimeout"), "{err}");
    // Without an interval the global one (30s by default) applies.
    let err = error("selector: {}\nendpoints: [{port: w, scrapeTimeout: 1m}]");
    assert!(err.contains("30s"), "{err}");
    let faster = Settings {
        scrape_interval: Some("5s".into()),
        ..Settings::default()
    };
    let spec = "selector: {}\nendpoints: [{port: w, scrapeTimeout: 10s}]";
    assert!(jobs_with(spec, &faster).is_err());
    assert!(jobs_with(spec, &Settings::default()).is_ok());
    let err = error("selector: {}\nendpoints: [{port: w, interval: 1.5s}]");
    assert!(err.starts_with("endpoints[0].interval"), "{err}");
}
