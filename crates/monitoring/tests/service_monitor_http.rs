//! ServiceMonitor translation: credentials, TLS, proxy, relabelling rules, limits and the
//! Prometheus-level settings.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use serde_json::json;
use support::*;
use zone_monitoring::monitors::ServiceMonitorSpec;
use zone_monitoring::resolve::{KeyRef, Source};
use zone_monitoring::translate::{
    ExcludedObject, Job, Settings, references_of_service_monitor, service_monitor,
};

fn jobs_with(spec: &str, settings: &Settings) -> Result<Vec<Job>, String> {
    service_monitor(
        &object::<ServiceMonitorSpec>("api", spec),
        settings,
        &values(),
    )
}

/// A job for one endpoint whose extra fields are `endpoint` (YAML flow mapping entries).
fn endpoint(endpoint: &str) -> Result<Job, String> {
    let spec = format!("selector: {{}}\nendpoints: [{{port: web, {endpoint}}}]");
    jobs_with(&spec, &Settings::default()).map(|mut jobs| jobs.remove(0))
}

#[test]
fn basic_auth_is_inlined_and_a_missing_key_names_the_field() {
    let job = endpoint(
        "basicAuth: {username: {name: creds, key: user}, password: {name: creds, key: pass}}",
    )
    .unwrap();
    assert_eq!(
        job["basic_auth"],
        json!({"username": "alice", "password": "s3cret-pass"})
    );
    let err = endpoint(
        "basicAuth: {username: {name: creds, key: user}, password: {name: creds, key: nope}}",
    )
    .unwrap_err();
    assert!(
        err.starts_with("endpoints[0].basicAuth.password: Secret team/creds"),
        "{err}"
    );
    assert!(!err.contains("alice") && !err.contains("s3cret"), "{err}");
}

#[test]
fn authorization_defaults_to_bearer_and_refuses_basic() {
    let job = endpoint("authorization: {credentials: {name: creds, key: token}}").unwrap();
    assert_eq!(
        job["authorization"],
        json!({"type": "Bearer", "credentials": "s3cret-token"})
    );
    let job = endpoint("authorization: {type: ' Token ', credentials: {name: creds, key: token}}")
        .unwrap();
    assert_eq!(job["authorization"]["type"], json!("Token"));
    let err = endpoint("authorization: {type: basic, credentials: {name: creds, key: token}}")
        .unwrap_err();
    assert!(err.starts_with("endpoints[0].authorization.type"), "{err}");
}

#[test]
fn bearer_token_secret_becomes_a_bearer_authorization_and_files_pass_through() {
    let job = endpoint("bearerTokenSecret: {name: creds, key: token}").unwrap();
    assert_eq!(
        job["authorization"],
        json!({"type": "Bearer", "credentials": "s3cret-token"})
    );
    assert!(!job.contains_key("bearer_token"));
    let job = endpoint("bearerTokenFile: /var/run/secrets/token").unwrap();
    assert_eq!(job["bearer_token_file"], json!("/var/run/secrets/token"));
    // An empty selector (as Go clients write it) is no reference at all.
    let job = endpoint("bearerTokenSecret: {key: ''}").unwrap();
    assert!(!job.contains_key("authorization"));
}

#[test]
fn mixing_credential_mechanisms_is_rejected() {
    let err = endpoint(
        "bearerTokenFile: /t, basicAuth: {username: {name: creds, key: user}, password: {name: creds, key: pass}}",
    )
    .unwrap_err();
    assert!(err.contains("basicAuth, bearerTokenFile"), "{err}");
    let err = endpoint(
        "bearerTokenSecret: {name: creds, key: token}, authorization: {credentials: {name: creds, key: token}}",
    )
    .unwrap_err();
    assert!(err.contains("authorization, bearerTokenSecret"), "{err}");
}

#[test]
fn oauth2_is_inlined_with_its_own_tls_and_proxy() {
    let job = endpoint(
        "oauth2: {clientId: {configMap: {name: ca-bundle, key: id}}, clientSecret: {name: creds, key: client-secret}, \
         tokenUrl: 'https://sso/token', scopes: [a, b], endpointParams: {aud: x}, \
         proxyUrl: 'http://proxy:3128', tlsConfig: {ca: {secret: {name: tls, key: ca.crt}}}}",
    )
    .unwrap();
    let want = json!({
        "client_id": "cm-client", "client_secret": "s3cret-client", "token_url": "https://sso/token",
        "scopes": ["a", "b"], "endpoint_params": {"aud": "x"}, "proxy_url": "http://proxy:3128",
        "tls_config": {"ca": CA},
    });
    assert_eq!(job["oauth2"], want);
    let err = endpoint("oauth2: {clientId: {secret: {name: creds, key: client-id}}, clientSecret: {name: creds, key: client-secret}}")
        .unwrap_err();
    assert!(err.starts_with("endpoints[0].oauth2.tokenUrl"), "{err}");
}

#[test]
fn tls_material_is_inlined_and_files_pass_through() {
    let job = endpoint(
        "tlsConfig: {ca: {configMap: {name: ca-bundle, key: ca.crt}}, cert: {secret: {name: tls, key: tls.crt}}, \
         keySecret: {name: tls, key: tls.key}, serverName: api.team, insecureSkipVerify: false, \
         minVersion: TLS12, maxVersion: TLS13}",
    )
    .unwrap();
    let want = json!({
        "ca": CA, "cert": CERT, "key": KEY, "server_name": "api.team",
        "insecure_skip_verify": false, "min_version": "TLS12", "max_version": "TLS13",
    });
    assert_eq!(job["tls_config"], want);
    let job =
        endpoint("tlsConfig: {caFile: /etc/ca.pem, certFile: /etc/c.pem, keyFile: /etc/k.pem}")
            .unwrap();
    assert_eq!(
        job["tls_config"],
        json!({"ca_file": "/etc/ca.pem", "cert_file": "/etc/c.pem", "key_file": "/etc/k.pem"})
    );
}

#[test]
fn inconsistent_tls_is_rejected() {
    for (tls, wanted) in [
        (
            "{caFile: /x, ca: {secret: {name: tls, key: ca.crt}}}",
            "caFile and ca",
        ),
        ("{cert: {secret: {name: tls, key: tls.crt}}}", "go together"),
        ("{ca: {secret: {name: tls, key: junk}}}", "not PEM"),
        (
            "{ca: {secret: {name: tls, key: ca.crt}, configMap: {name: ca-bundle, key: ca.crt}}}",
            "both",
        ),
        ("{minVersion: TLS13, maxVersion: TLS12}", "maxVersion"),
    ] {
        let err = endpoint(&format!("tlsConfig: {tls}")).unwrap_err();
        assert!(
            err.starts_with("endpoints[0].tlsConfig") && err.contains(wanted),
            "{err}"
        );
    }
}

#[test]
fn proxy_settings_are_checked_and_connect_headers_inlined() {
    let job = endpoint(
        "proxyUrl: 'http://proxy:3128', noProxy: '10.0.0.0/8', proxyConnectHeader: {Proxy-Authorization: [{name: creds, key: header}]}",
    )
    .unwrap();
    assert_eq!(job["proxy_url"], json!("http://proxy:3128"));
    assert_eq!(job["no_proxy"], json!("10.0.0.0/8"));
    assert_eq!(
        job["proxy_connect_header"],
        json!({"Proxy-Authorization": ["Basic abc"]})
    );
    let job = endpoint("proxyFromEnvironment: true").unwrap();
    assert_eq!(job["proxy_from_environment"], json!(true));
    let err = endpoint("noProxy: localhost").unwrap_err();
    assert!(err.starts_with("endpoints[0].proxyConfig"), "{err}");
}

#[test]
fn user_relabelings_run_after_the_generated_ones_with_case_insensitive_actions() {
    let job = endpoint(
        "relabelings: [{sourceLabels: [service], targetLabel: svc, action: Replace}, \
         {regex: 'container', action: LabelDrop}, {sourceLabels: [__meta_kubernetes_pod_label_team], targetLabel: team}]",
    )
    .unwrap();
    let got = target(&job, &endpoints_target()).unwrap();
    assert_eq!(
        got["svc"], "api",
        "sees the service label set by the generated rules"
    );
    assert_eq!(got["team"], "core");
    assert!(!got.contains_key("container"));
    let emitted = &job["relabel_configs"];
    let last = emitted.as_array().unwrap().len() - 1;
    assert_eq!(
        emitted[last - 1],
        json!({"regex": "container", "action": "labeldrop"})
    );
    assert_eq!(
        emitted[last],
        json!({"source_labels": ["__meta_kubernetes_pod_label_team"], "target_label": "team"})
    );
}

#[test]
fn invalid_relabelings_are_rejected_naming_the_rule() {
    for (rule, wanted) in [
        ("{regex: '(', targetLabel: x}", "invalid regex"),
        ("{sourceLabels: [a], action: replace}", "needs targetLabel"),
        (
            "{sourceLabels: [a], targetLabel: '1x'}",
            "invalid targetLabel",
        ),
        (
            "{sourceLabels: [a], targetLabel: h, action: hashmod}",
            "modulus",
        ),
        (
            "{sourceLabels: [a], targetLabel: b, action: keepequal, regex: x}",
            "only sourceLabels",
        ),
        (
            "{sourceLabels: [a], action: labeldrop, regex: x}",
            "only regex",
        ),
        (
            "{sourceLabels: [a], targetLabel: b, action: lowercase, replacement: x}",
            "replacement",
        ),
        ("{action: explode}", "unknown action"),
    ] {
        let err = endpoint(&format!(
            "relabelings: [{{sourceLabels: [a], targetLabel: ok}}, {rule}]"
        ))
        .unwrap_err();
        assert!(
            err.starts_with("endpoints[0].relabelings[1]: ") && err.contains(wanted),
            "{rule}: {err}"
        );
        let err = endpoint(&format!("metricRelabelings: [{rule}]")).unwrap_err();
        assert!(
            err.starts_with("endpoints[0].metricRelabelings[0]: "),
            "{err}"
        );
    }
}

#[test]
fn metric_relabelings_are_emitted_only_when_present() {
    let job =
        endpoint("metricRelabelings: [{sourceLabels: [__name__], regex: 'go_.*', action: Drop}]")
            .unwrap();
    assert_eq!(
        job["metric_relabel_configs"],
        json!([{"source_labels": ["__name__"], "regex": "go_.*", "action": "drop"}])
    );
    assert!(
        !endpoint("path: /m")
            .unwrap()
            .contains_key("metric_relabel_configs")
    );
}

#[test]
fn limits_take_the_smaller_of_the_monitor_and_the_enforced_value() {
    let spec = "selector: {}\nendpoints: [{port: w}]\nsampleLimit: 500\ntargetLimit: 2000\nlabelLimit: 30\n\
                labelNameLengthLimit: 100\nlabelValueLengthLimit: 200\nkeepDroppedTargets: 10";
    let plain = jobs_with(spec, &Settings::default()).unwrap().remove(0);
    for (key, value) in [
        ("sample_limit", 500),
        ("target_limit", 2000),
        ("label_limit", 30),
        ("label_name_length_limit", 100),
        ("label_value_length_limit", 200),
        ("keep_dropped_targets", 10),
    ] {
        assert_eq!(plain[key], json!(value), "{key}");
    }
    let enforced = Settings {
        enforced_sample_limit: Some(1000),
        enforced_target_limit: Some(1000),
        enforced_label_limit: Some(0),
        enforced_label_name_length_limit: Some(50),
        enforced_label_value_length_limit: Some(500),
        enforced_keep_dropped_targets: Some(5),
        ..Settings::default()
    };
    let job = jobs_with(spec, &enforced).unwrap().remove(0);
    assert_eq!(job["sample_limit"], json!(500));
    assert_eq!(job["target_limit"], json!(1000));
    assert_eq!(job["label_limit"], json!(30), "zero enforces nothing");
    assert_eq!(job["label_name_length_limit"], json!(50));
    assert_eq!(job["label_value_length_limit"], json!(200));
    assert_eq!(job["keep_dropped_targets"], json!(5));
    // Without a monitor limit the enforced one applies globally, not per job.
    let bare = jobs_with("selector: {}\nendpoints: [{port: w}]", &enforced)
        .unwrap()
        .remove(0);
    assert!(!bare.contains_key("sample_limit") && !bare.contains_key("keep_dropped_targets"));
}

#[test]
fn body_size_limit_is_capped_by_the_enforced_one() {
    let spec = "selector: {}\nendpoints: [{port: w}]\nbodySizeLimit: 2GB";
    assert_eq!(
        jobs_with(spec, &Settings::default()).unwrap()[0]["body_size_limit"],
        json!("2GB")
    );
    let enforced = Settings {
        enforced_body_size_limit: Some("1000MB".into()),
        ..Settings::default()
    };
    assert_eq!(
        jobs_with(spec, &enforced).unwrap()[0]["body_size_limit"],
        json!("1000MB")
    );
    let small = "selector: {}\nendpoints: [{port: w}]\nbodySizeLimit: 10MB";
    assert_eq!(
        jobs_with(small, &enforced).unwrap()[0]["body_size_limit"],
        json!("10MB")
    );
    let bare = "selector: {}\nendpoints: [{port: w}]";
    assert_eq!(
        jobs_with(bare, &enforced).unwrap()[0]["body_size_limit"],
        json!("1000MB")
    );
    let err = jobs_with(
        "selector: {}\nendpoints: [{port: w}]\nbodySizeLimit: 10",
        &Settings::default(),
    );
    assert!(err.unwrap_err().starts_with("endpoints[0].bodySizeLimit"));
}

#[test]
fn histograms_protocols_and_attach_metadata() {
    let spec = "selector: {}\nendpoints: [{port: w}]\nscrapeClassicHistograms: true\nnativeHistogramBucketLimit: 160\n\
                nativeHistogramMinBucketFactor: '1.1'\nconvertClassicHistogramsToNHCB: true\n\
                scrapeProtocols: [PrometheusProto, PrometheusText1.0.0]\nfallbackScrapeProtocol: PrometheusText0.0.4\n\
                attachMetadata: {node: true}";
    let job = jobs_with(spec, &Settings::default()).unwrap().remove(0);
    assert_eq!(job["always_scrape_classic_histograms"], json!(true));
    assert_eq!(job["native_histogram_bucket_limit"], json!(160));
    assert_eq!(job["native_histogram_min_bucket_factor"], json!(1.1));
    assert_eq!(job["convert_classic_histograms_to_nhcb"], json!(true));
    assert_eq!(
        job["scrape_protocols"],
        json!(["PrometheusProto", "PrometheusText1.0.0"])
    );
    assert_eq!(
        job["fallback_scrape_protocol"],
        json!("PrometheusText0.0.4")
    );
    assert_eq!(
        job["kubernetes_sd_configs"][0]["attach_metadata"],
        json!({"node": true})
    );
    let err = jobs_with(
        "selector: {}\nendpoints: [{port: w}]\nscrapeProtocols: [Carrier]",
        &Settings::default(),
    );
    assert!(err.unwrap_err().contains("scrapeProtocols"));
}

#[test]
fn enforced_namespace_label_is_added_unless_excluded() {
    let spec = "selector: {}\nendpoints: [{port: web, metricRelabelings: [{sourceLabels: [a], targetLabel: b}]}]";
    let mut settings = Settings {
        enforced_namespace_label: Some("tenant".into()),
        ..Settings::default()
    };
    let job = jobs_with(spec, &settings).unwrap().remove(0);
    assert_eq!(target(&job, &endpoints_target()).unwrap()["tenant"], "team");
    let metric = job["metric_relabel_configs"].as_array().unwrap();
    assert_eq!(
        metric.last(),
        Some(&json!({"target_label": "tenant", "replacement": "team"}))
    );
    // A user rule cannot take the label away: the enforced rule comes last.
    let sneaky = "selector: {}\nendpoints: [{port: web, relabelings: [{targetLabel: tenant, replacement: other}]}]";
    let job = jobs_with(sneaky, &settings).unwrap().remove(0);
    assert_eq!(target(&job, &endpoints_target()).unwrap()["tenant"], "team");
    settings.excluded_from_enforcement = vec![ExcludedObject {
        resource: "servicemonitors".into(),
        namespace: "team".into(),
        ..ExcludedObject::default()
    }];
    let job = jobs_with(spec, &settings).unwrap().remove(0);
    assert!(
        !target(&job, &endpoints_target())
            .unwrap()
            .contains_key("tenant")
    );
}

#[test]
fn scrape_classes_and_file_access_can_be_refused() {
    let err = jobs_with(
        "selector: {}\nscrapeClass: fast\nendpoints: [{port: w}]",
        &Settings::default(),
    );
    assert!(err.unwrap_err().starts_with("scrapeClass"));
    let deny = Settings {
        deny_arbitrary_fs_access: true,
        ..Settings::default()
    };
    let spec = "selector: {}\nendpoints: [{port: w, tlsConfig: {caFile: /etc/passwd}}]";
    assert!(jobs_with(spec, &deny).unwrap_err().contains("denied"));
    assert!(jobs_with(spec, &Settings::default()).is_ok());
}

#[test]
fn references_list_every_secret_and_config_map_key_once() {
    let spec = "
selector: {}
endpoints:
- port: a
  basicAuth: {username: {name: creds, key: user}, password: {name: creds, key: pass}}
  tlsConfig: {ca: {configMap: {name: ca-bundle, key: ca.crt}}, cert: {secret: {name: tls, key: tls.crt}}, keySecret: {name: tls, key: tls.key}}
- port: b
  bearerTokenSecret: {name: creds, key: token}
  proxyUrl: http://p
  proxyConnectHeader: {X: [{name: creds, key: header}]}
  oauth2: {clientId: {secret: {name: creds, key: client-id}}, clientSecret: {name: creds, key: client-secret}, tokenUrl: http://t}
- port: c
  basicAuth: {username: {name: creds, key: user}, password: {name: creds, key: pass}}
  authorization: {credentials: {name: other, key: token}}
";
    let obj = object::<ServiceMonitorSpec>("api", spec);
    let key = |source, name: &str, key: &str| KeyRef {
        source,
        namespace: "team".into(),
        name: name.into(),
        key: key.into(),
    };
    let want = vec![
        key(Source::Secret, "creds", "client-id"),
        key(Source::Secret, "creds", "client-secret"),
        key(Source::Secret, "creds", "header"),
        key(Source::Secret, "creds", "pass"),
        key(Source::Secret, "creds", "token"),
        key(Source::Secret, "creds", "user"),
        key(Source::Secret, "other", "token"),
        key(Source::Secret, "tls", "tls.crt"),
        key(Source::Secret, "tls", "tls.key"),
        key(Source::ConfigMap, "ca-bundle", "ca.crt"),
    ];
    assert_eq!(references_of_service_monitor(&obj), want);
}
