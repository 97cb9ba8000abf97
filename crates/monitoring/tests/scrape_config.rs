//! ScrapeConfig translation: static targets, file/HTTP/Kubernetes SD, job-level fields.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use serde_json::json;
use support::*;
use zone_monitoring::monitors::ScrapeConfigSpec;
use zone_monitoring::resolve::{KeyRef, Source};
use zone_monitoring::translate::{Job, Settings, references_of_scrape_config, scrape_config};

fn jobs_with(spec: &str, settings: &Settings) -> Result<Vec<Job>, String> {
    scrape_config(
        &object::<ScrapeConfigSpec>("ext", spec),
        settings,
        &values(),
    )
}

fn job(spec: &str) -> Job {
    let mut jobs = jobs_with(spec, &Settings::default()).unwrap();
    assert_eq!(jobs.len(), 1);
    jobs.remove(0)
}

fn error(spec: &str) -> String {
    jobs_with(spec, &Settings::default()).unwrap_err()
}

#[test]
fn a_static_config_is_one_job_with_only_the_job_name_copy() {
    let job = job("staticConfigs: [{targets: ['db:9187'], labels: {role: primary}}]");
    let want = yaml(
        "
job_name: scrapeConfig/team/ext
static_configs: [{targets: ['db:9187'], labels: {role: primary}}]
relabel_configs: [{source_labels: [job], target_label: __tmp_prometheus_job_name}]
",
    );
    assert_eq!(serde_json::Value::Object(job.clone()), want);
    let got = target(
        &job,
        &labels(&[("__address__", "db:9187"), ("role", "primary")]),
    )
    .unwrap();
    assert_eq!(
        got,
        labels(&[
            ("instance", "db:9187"),
            ("job", "scrapeConfig/team/ext"),
            ("role", "primary")
        ])
    );
}

#[test]
fn job_name_replaces_the_job_label() {
    let job = job("jobName: postgres\nstaticConfigs: [{targets: ['db:9187']}]");
    assert_eq!(
        job["relabel_configs"][1],
        json!({"target_label": "job", "action": "replace", "replacement": "postgres"})
    );
    let got = target(&job, &labels(&[("__address__", "db:9187")])).unwrap();
    assert_eq!(got["job"], "postgres");
}

#[test]
fn job_level_fields_are_written_only_when_set() {
    let job = job("
staticConfigs: [{targets: [a:1]}]
honorTimestamps: true
trackTimestampsStaleness: true
honorLabels: true
metricsPath: /federate
params: {'match[]': ['{job=\"x\"}']}
enableCompression: false
enableHTTP2: false
scrapeInterval: 1m
scrapeTimeout: 30s
scrapeProtocols: [OpenMetricsText1.0.0]
fallbackScrapeProtocol: PrometheusText0.0.4
scheme: HTTPS
sampleLimit: 10
keepDroppedTargets: 3
nativeHistogramBucketLimit: 8
nameValidationScheme: Legacy
nameEscapingScheme: AllowUTF8
");
    for (key, value) in [
        ("honor_timestamps", json!(true)),
        ("track_timestamps_staleness", json!(true)),
        ("honor_labels", json!(true)),
        ("metrics_path", json!("/federate")),
        ("params", json!({"match[]": ["{job=\"x\"}"]})),
        ("enable_compression", json!(false)),
        ("enable_http2", json!(false)),
        ("scrape_interval", json!("1m")),
        ("scrape_timeout", json!("30s")),
        ("scrape_protocols", json!(["OpenMetricsText1.0.0"])),
        ("fallback_scrape_protocol", json!("PrometheusText0.0.4")),
        ("scheme", json!("https")),
        ("sample_limit", json!(10)),
        ("keep_dropped_targets", json!(3)),
        ("native_histogram_bucket_limit", json!(8)),
        ("metric_name_validation_scheme", json!("legacy")),
        ("metric_name_escaping_scheme", json!("allow-utf-8")),
    ] {
        assert_eq!(job[key], value, "{key}");
    }
    let bare = self::job("staticConfigs: [{targets: [a:1]}]");
    let overrides = Settings {
        override_honor_timestamps: true,
        override_honor_labels: true,
        ..Settings::default()
    };
    let forced = jobs_with("staticConfigs: [{targets: [a:1]}]", &overrides)
        .unwrap()
        .remove(0);
    for key in ["honor_labels", "honor_timestamps", "scheme", "metrics_path"] {
        assert!(
            !bare.contains_key(key) && !forced.contains_key(key),
            "{key}"
        );
    }
    let err = error("staticConfigs: [{targets: [a:1]}]\nscrapeInterval: 10s\nscrapeTimeout: 20s");
    assert!(err.starts_with("scrapeTimeout"), "{err}");
}

#[test]
fn enforced_body_size_limit_applies_to_every_scrape_config() {
    let settings = Settings {
        enforced_body_size_limit: Some("5MB".into()),
        ..Settings::default()
    };
    let job = jobs_with("staticConfigs: [{targets: [a:1]}]", &settings)
        .unwrap()
        .remove(0);
    assert_eq!(job["body_size_limit"], json!("5MB"));
}

#[test]
fn job_credentials_and_tls_are_inlined() {
    let job = job("
staticConfigs: [{targets: [a:1]}]
basicAuth: {username: {name: creds, key: user}, password: {name: creds, key: pass}}
tlsConfig: {ca: {configMap: {name: ca-bundle, key: ca.crt}}, serverName: db}
proxyUrl: http://proxy
");
    assert_eq!(
        job["basic_auth"],
        json!({"username": "alice", "password": "s3cret-pass"})
    );
    assert_eq!(job["tls_config"], json!({"ca": CA, "server_name": "db"}));
    assert_eq!(job["proxy_url"], json!("http://proxy"));
    let empty = self::job("staticConfigs: [{targets: [a:1]}]\nauthorization: {}\ntlsConfig: {}");
    assert!(!empty.contains_key("authorization") && !empty.contains_key("tls_config"));
    let err = error(
        "authorization: {credentials: {name: creds, key: token}}\n\
         oauth2: {clientId: {secret: {name: creds, key: client-id}}, clientSecret: {name: creds, key: client-secret}, tokenUrl: http://t}",
    );
    assert!(err.contains("oauth2, authorization"), "{err}");
}

#[test]
fn file_and_http_sd_configs() {
    let job = job("
fileSDConfigs: [{files: [/etc/targets/*.json], refreshInterval: 5m}]
httpSDConfigs:
- url: https://sd.example/targets
  refreshInterval: 1m
  authorization: {credentials: {name: creds, key: token}}
  tlsConfig: {insecureSkipVerify: true}
  followRedirects: false
  enableHTTP2: true
");
    assert_eq!(
        job["file_sd_configs"],
        json!([{"files": ["/etc/targets/*.json"], "refresh_interval": "5m"}])
    );
    let want = json!([{
        "url": "https://sd.example/targets", "refresh_interval": "1m",
        "authorization": {"type": "Bearer", "credentials": "s3cret-token"},
        "tls_config": {"insecure_skip_verify": true}, "follow_redirects": false, "enable_http2": true,
    }]);
    assert_eq!(job["http_sd_configs"], want);
    let err = error("httpSDConfigs: [{url: /relative}]");
    assert!(err.starts_with("httpSDConfigs[0].url"), "{err}");
    let err = error(
        "httpSDConfigs: [{url: 'http://x', basicAuth: {username: {name: creds, key: no}, password: {name: creds, key: pass}}}]",
    );
    assert!(
        err.starts_with("httpSDConfigs[0].basicAuth.username"),
        "{err}"
    );
}

#[test]
fn kubernetes_sd_configs() {
    let job = job("
kubernetesSDConfigs:
- role: EndpointSlice
  namespaces: {names: [a, b], ownNamespace: true}
  selectors: [{role: Service, label: 'app=x'}, {role: EndpointSlice, field: 'metadata.name=y'}]
  attachMetadata: {node: true}
- role: Node
  apiServer: https://other-cluster
  attachMetadata: {node: true}
  authorization: {credentials: {name: creds, key: token}}
  followRedirects: true
");
    let want = yaml(
        "
- role: endpointslice
  namespaces: {names: [a, b], own_namespace: true}
  selectors: [{role: service, label: 'app=x'}, {role: endpointslice, field: 'metadata.name=y'}]
  attach_metadata: {node: true}
- role: node
  api_server: https://other-cluster
  authorization: {type: Bearer, credentials: s3cret-token}
  follow_redirects: true
",
    );
    assert_eq!(job["kubernetes_sd_configs"], want);
    for (config, wanted) in [
        ("{role: Gateway}", "kubernetesSDConfigs[0].role"),
        (
            "{role: Pod, selectors: [{role: Node}]}",
            "kubernetesSDConfigs[0].selectors[0].role",
        ),
        (
            "{role: Pod, apiServer: 'https://x', namespaces: {ownNamespace: true}}",
            "ownNamespace",
        ),
    ] {
        let err = error(&format!("kubernetesSDConfigs: [{config}]"));
        assert!(err.contains(wanted), "{config}: {err}");
    }
}

#[test]
fn unsupported_service_discovery_is_rejected_by_field() {
    let err =
        error("staticConfigs: [{targets: [a:1]}]\nconsulSDConfigs: [{server: 'consul:8500'}]");
    assert!(err.starts_with("consulSDConfigs: "), "{err}");
    let err = error("ec2SDConfigs: [{region: eu-west-1}]");
    assert!(err.starts_with("ec2SDConfigs: "), "{err}");
    let err = error("staticConfigs: [{targets: [a:1]}]\nscrapeClass: x");
    assert!(err.starts_with("scrapeClass"), "{err}");
}

#[test]
fn enforced_namespace_label_needs_relabelings_on_targets_but_always_reaches_series() {
    let settings = Settings {
        enforced_namespace_label: Some("tenant".into()),
        ..Settings::default()
    };
    let rule = json!({"target_label": "tenant", "replacement": "team"});
    let plain = jobs_with("staticConfigs: [{targets: [a:1]}]", &settings)
        .unwrap()
        .remove(0);
    assert_eq!(plain["relabel_configs"].as_array().unwrap().len(), 1);
    assert_eq!(plain["metric_relabel_configs"], json!([rule]));
    let relabelled = jobs_with(
        "staticConfigs: [{targets: [a:1]}]\nrelabelings: [{sourceLabels: [__address__], targetLabel: host, regex: '(.+):.*'}]",
        &settings,
    )
    .unwrap()
    .remove(0);
    let got = target(&relabelled, &labels(&[("__address__", "a:1")])).unwrap();
    assert_eq!(got["host"], "a");
    assert_eq!(got["tenant"], "team");
    let err = error("relabelings: [{action: keep, regex: '['}]");
    assert!(err.starts_with("relabelings[0]"), "{err}");
}

#[test]
fn static_label_names_must_not_be_empty() {
    let err = error("staticConfigs: [{targets: [a:1], labels: {'': x}}]");
    assert!(err.starts_with("staticConfigs[0].labels"), "{err}");
}

#[test]
fn references_include_sd_credentials() {
    let spec = "
basicAuth: {username: {name: creds, key: user}, password: {name: creds, key: pass}}
httpSDConfigs: [{url: 'http://sd', tlsConfig: {ca: {configMap: {name: ca-bundle, key: ca.crt}}}}]
kubernetesSDConfigs: [{role: Pod, oauth2: {clientId: {secret: {name: creds, key: client-id}}, clientSecret: {name: sso, key: secret}, tokenUrl: http://t}}]
";
    let refs = references_of_scrape_config(&object::<ScrapeConfigSpec>("ext", spec));
    let secret = |name: &str, key: &str| KeyRef {
        source: Source::Secret,
        namespace: "team".into(),
        name: name.into(),
        key: key.into(),
    };
    let want = vec![
        secret("creds", "client-id"),
        secret("creds", "pass"),
        secret("creds", "user"),
        secret("sso", "secret"),
        KeyRef {
            source: Source::ConfigMap,
            ..secret("ca-bundle", "ca.crt")
        },
    ];
    assert_eq!(refs, want);
}
