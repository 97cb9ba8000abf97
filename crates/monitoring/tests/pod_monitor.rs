//! PodMonitor translation, target labels checked on discovered pod targets.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use serde_json::json;
use support::*;
use zone_monitoring::monitors::PodMonitorSpec;
use zone_monitoring::resolve::{KeyRef, Source};
use zone_monitoring::translate::{Job, Settings, pod_monitor, references_of_pod_monitor};

fn jobs_with(spec: &str, settings: &Settings) -> Result<Vec<Job>, String> {
    pod_monitor(&object::<PodMonitorSpec>("web", spec), settings, &values())
}

fn job(spec: &str) -> Job {
    jobs_with(spec, &Settings::default()).unwrap().remove(0)
}

const BASIC: &str = "selector: {matchLabels: {app: web}}\npodMetricsEndpoints: [{port: metrics}]";

#[test]
fn target_labels_match_upstream_for_a_pod_target() {
    let job = job(BASIC);
    assert_eq!(job["job_name"], json!("podMonitor/team/web/0"));
    assert_eq!(
        job["kubernetes_sd_configs"],
        yaml("[{role: pod, namespaces: {names: [team]}}]")
    );
    let want = labels(&[
        ("container", "app"),
        ("endpoint", "metrics"),
        ("instance", "10.0.0.9:9090"),
        ("job", "team/web"),
        ("namespace", "team"),
        ("pod", "web-0"),
    ]);
    assert_eq!(target(&job, &pod_target()), Some(want));
}

#[test]
fn the_running_filter_comes_right_after_the_job_name_copy() {
    let rules = rules(&job(BASIC), "relabel_configs");
    assert_eq!(rules[1].source_labels, ["__meta_kubernetes_pod_phase"]);
    assert_eq!(rules[2].source_labels[0], "__meta_kubernetes_pod_label_app");
    let done = with(&pod_target(), "__meta_kubernetes_pod_phase", "Succeeded");
    assert_eq!(target(&job(BASIC), &done), None);
    let keep = job("selector: {}\npodMetricsEndpoints: [{port: metrics, filterRunning: false}]");
    assert!(target(&keep, &done).is_some());
}

#[test]
fn selector_filters_pods_by_their_labels() {
    let job = job("
selector:
  matchLabels: {app: web}
  matchExpressions: [{key: app.kubernetes.io/name, operator: NotIn, values: [db]}]
podMetricsEndpoints: [{port: metrics}]
");
    assert!(target(&job, &pod_target()).is_some());
    let other = with(&pod_target(), "__meta_kubernetes_pod_label_app", "db");
    assert_eq!(target(&job, &other), None);
    let db = with(
        &pod_target(),
        "__meta_kubernetes_pod_label_app_kubernetes_io_name",
        "db",
    );
    assert_eq!(target(&job, &db), None);
}

#[test]
fn port_port_number_and_target_port_select_the_container_port() {
    let wrong_name = with(
        &pod_target(),
        "__meta_kubernetes_pod_container_port_name",
        "http",
    );
    let wrong_number = with(
        &pod_target(),
        "__meta_kubernetes_pod_container_port_number",
        "80",
    );
    assert_eq!(target(&job(BASIC), &wrong_name), None);

    let by_number = job("selector: {}\npodMetricsEndpoints: [{portNumber: 9090}]");
    let got = target(&by_number, &wrong_name).unwrap();
    assert!(
        !got.contains_key("endpoint"),
        "upstream never names the endpoint after portNumber"
    );
    assert_eq!(target(&by_number, &wrong_number), None);

    let by_target_name = job("selector: {}\npodMetricsEndpoints: [{targetPort: metrics}]");
    assert_eq!(
        target(&by_target_name, &pod_target()).unwrap()["endpoint"],
        "metrics"
    );
    assert_eq!(target(&by_target_name, &wrong_name), None);
    let by_target_number = job("selector: {}\npodMetricsEndpoints: [{targetPort: 9090}]");
    assert_eq!(
        target(&by_target_number, &pod_target()).unwrap()["endpoint"],
        "9090"
    );
    assert_eq!(target(&by_target_number, &wrong_number), None);

    // `port` wins over the others.
    let both = job("selector: {}\npodMetricsEndpoints: [{port: metrics, portNumber: 80}]");
    assert!(target(&both, &wrong_number).is_some());
}

#[test]
fn job_label_and_pod_target_labels() {
    let settings = Settings {
        pod_target_labels: vec!["app".into()],
        ..Settings::default()
    };
    let spec = "selector: {}\njobLabel: app.kubernetes.io/name\npodTargetLabels: [app.kubernetes.io/name, absent]\n\
                podMetricsEndpoints: [{port: metrics}]";
    let job = jobs_with(spec, &settings).unwrap().remove(0);
    let got = target(&job, &pod_target()).unwrap();
    assert_eq!(got["job"], "web");
    assert_eq!(got["app_kubernetes_io_name"], "web");
    assert_eq!(got["app"], "web");
    assert!(!got.contains_key("absent"));
    let unlabelled = with(
        &pod_target(),
        "__meta_kubernetes_pod_label_app_kubernetes_io_name",
        "",
    );
    assert_eq!(target(&job, &unlabelled).unwrap()["job"], "team/web");
}

#[test]
fn role_selector_uses_the_pod_role_only() {
    let job = job(
        "selectorMechanism: RoleSelector\nselector: {matchLabels: {app: web}}\npodMetricsEndpoints: [{port: metrics}]",
    );
    assert_eq!(
        job["kubernetes_sd_configs"][0]["selectors"],
        json!([{"role": "pod", "label": "app=web"}])
    );
}

#[test]
fn credentials_and_tls_are_inlined() {
    let job = job("
selector: {}
podMetricsEndpoints:
- port: metrics
  bearerTokenSecret: {name: creds, key: token}
  tlsConfig: {ca: {secret: {name: tls, key: ca.crt}}, insecureSkipVerify: true}
  scheme: https
  params: {target: [x]}
  interval: 10s
  scrapeTimeout: 5s
  path: /stats
  followRedirects: true
  enableHttp2: true
  honorLabels: true
  honorTimestamps: false
  trackTimestampsStaleness: false
");
    assert_eq!(
        job["authorization"],
        json!({"type": "Bearer", "credentials": "s3cret-token"})
    );
    assert_eq!(
        job["tls_config"],
        json!({"insecure_skip_verify": true, "ca": CA})
    );
    for (key, value) in [
        ("scheme", json!("https")),
        ("params", json!({"target": ["x"]})),
        ("scrape_interval", json!("10s")),
        ("scrape_timeout", json!("5s")),
        ("metrics_path", json!("/stats")),
        ("follow_redirects", json!(true)),
        ("enable_http2", json!(true)),
        ("honor_labels", json!(true)),
        ("honor_timestamps", json!(false)),
        ("track_timestamps_staleness", json!(false)),
    ] {
        assert_eq!(job[key], value, "{key}");
    }
    // Go clients write an empty bearerTokenSecret `{key: ""}`: no reference, no header.
    let empty = job_of("bearerTokenSecret: {key: ''}");
    assert!(!empty.unwrap().contains_key("authorization"));
}

fn job_of(endpoint: &str) -> Result<Job, String> {
    let spec = format!("selector: {{}}\npodMetricsEndpoints: [{{port: metrics, {endpoint}}}]");
    jobs_with(&spec, &Settings::default()).map(|mut jobs| jobs.remove(0))
}

#[test]
fn basic_auth_oauth2_authorization_and_proxy() {
    let job = job_of(
        "basicAuth: {username: {name: creds, key: user}, password: {name: creds, key: pass}}",
    )
    .unwrap();
    assert_eq!(job["basic_auth"]["username"], json!("alice"));
    let job = job_of(
        "oauth2: {clientId: {secret: {name: creds, key: client-id}}, clientSecret: {name: creds, key: client-secret}, tokenUrl: http://t}",
    )
    .unwrap();
    assert_eq!(
        job["oauth2"],
        json!({"client_id": "the-client", "client_secret": "s3cret-client", "token_url": "http://t"})
    );
    let job = job_of(
        "authorization: {type: Token, credentials: {name: creds, key: token}}, proxyUrl: http://p",
    )
    .unwrap();
    assert_eq!(
        job["authorization"],
        json!({"type": "Token", "credentials": "s3cret-token"})
    );
    assert_eq!(job["proxy_url"], json!("http://p"));
    let tls = job_of("tlsConfig: {caFile: /etc/ca}").map(|j| j.get("tls_config").cloned());
    assert_eq!(
        tls,
        Ok(None),
        "PodMonitors have no file fields: caFile is ignored, leaving an empty, absent tlsConfig"
    );
    let empty = job_of("authorization: {}").unwrap();
    assert!(!empty.contains_key("authorization"));
    let err = job_of("tlsConfig: {keySecret: {name: tls, key: tls.key}}").unwrap_err();
    assert!(err.starts_with("podMetricsEndpoints[0].tlsConfig"), "{err}");
    let err = job_of("bearerTokenSecret: {name: creds, key: missing}").unwrap_err();
    assert!(
        err.starts_with("podMetricsEndpoints[0].bearerTokenSecret: Secret team/creds"),
        "{err}"
    );
}

#[test]
fn relabelings_limits_and_enforced_namespace() {
    let settings = Settings {
        enforced_namespace_label: Some("namespace_owner".into()),
        enforced_sample_limit: Some(100),
        ..Settings::default()
    };
    let spec = "selector: {}\nsampleLimit: 1000\nattachMetadata: {node: false}\n\
                podMetricsEndpoints: [{port: metrics, relabelings: [{sourceLabels: [pod], targetLabel: instance}]}]";
    let job = jobs_with(spec, &settings).unwrap().remove(0);
    let got = target(&job, &pod_target()).unwrap();
    assert_eq!(got["instance"], "web-0");
    assert_eq!(got["namespace_owner"], "team");
    assert_eq!(job["sample_limit"], json!(100));
    assert_eq!(
        job["kubernetes_sd_configs"][0]["attach_metadata"],
        json!({"node": false})
    );
    assert_eq!(
        job["metric_relabel_configs"],
        json!([{"target_label": "namespace_owner", "replacement": "team"}])
    );
}

#[test]
fn references_cover_every_endpoint() {
    let spec = "
selector: {}
podMetricsEndpoints:
- port: a
  bearerTokenSecret: {name: creds, key: token}
- port: b
  tlsConfig: {cert: {configMap: {name: ca-bundle, key: cert}}, keySecret: {name: tls, key: tls.key}}
";
    let refs = references_of_pod_monitor(&object::<PodMonitorSpec>("web", spec));
    let names: Vec<_> = refs
        .iter()
        .map(
            |KeyRef {
                 source,
                 name,
                 key,
                 namespace,
             }| (*source, namespace.as_str(), name.as_str(), key.as_str()),
        )
        .collect();
    assert_eq!(
        names,
        [
            (Source::Secret, "team", "creds", "token"),
            (Source::Secret, "team", "tls", "tls.key"),
            (Source::ConfigMap, "team", "ca-bundle", "cert"),
        ]
    );
}
