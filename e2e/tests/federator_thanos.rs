//! rules-federator and Thanos: a real Thanos Querier (v0.42, the cached build) whose only
//! endpoint is the federator's gRPC port, over real Prometheus 3.16 processes (two shards of two
//! replicas on 127.0.0.1). The Querier finds the Rules API through Info and serves the
//! federator's groups as its own `/api/v1/rules` and `/api/v1/alerts`. And the other way: a real
//! Thanos Ruler (two replicas) and a real Thanos sidecar as the federator's gRPC backends, beside
//! the HTTP ones, in one merged answer; and two Rulers found by an SRV record at a real DNS
//! server (dnsmasq).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::time::Duration;

use e2e::dns::{Dnsmasq, Srv};
use e2e::localstack::free_port;
use e2e::process::http_get_from;
use e2e::thanos::{ThanosQuery, ThanosRuler, ThanosSidecar};
use e2e::wait_for;
use serde_json::Value;

#[path = "federator/querier_pod.rs"]
mod querier_pod;
#[path = "federator/shards.rs"]
mod shards;
#[path = "federator/spawn.rs"]
mod spawn;

use e2e::prometheus::PrometheusProcess;
use e2e::tls::TestCa;
use shards::{Rules, config, merged_rules_settled, two_shards_of_two_replicas};

const TIMEOUT: Duration = Duration::from_secs(60);

/// A rule as both sides must agree on it: group file and name, type, name, state, health and
/// labels (the shard's among them), and its alerts' label sets and states.
type Rule = (
    String,
    String,
    String,
    String,
    String,
    String,
    String,
    Vec<String>,
);

fn rules_of(data: &Value) -> BTreeSet<Rule> {
    let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
    let mut rules = BTreeSet::new();
    for group in data["groups"].as_array().into_iter().flatten() {
        for rule in group["rules"].as_array().into_iter().flatten() {
            let mut alerts: Vec<String> = rule["alerts"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|a| format!("{} {}", a["labels"], a["state"]))
                .collect();
            alerts.sort();
            rules.insert((
                text(&group["file"]),
                text(&group["name"]),
                text(&rule["type"]),
                text(&rule["name"]),
                text(&rule["state"]),
                text(&rule["health"]),
                rule["labels"].to_string(),
                alerts,
            ));
        }
    }
    rules
}

/// The fields of every group, rule and alert of an answer, by where they are.
fn fields(data: &Value) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let keys = |value: &Value, at: &str, names: &mut BTreeSet<String>| {
        for key in value.as_object().into_iter().flatten().map(|(k, _)| k) {
            names.insert(format!("{at}.{key}"));
        }
    };
    for group in data["groups"].as_array().into_iter().flatten() {
        keys(group, "group", &mut names);
        for rule in group["rules"].as_array().into_iter().flatten() {
            keys(
                rule,
                &format!("{} rule", rule["type"].as_str().unwrap_or("?")),
                &mut names,
            );
            for alert in rule["alerts"].as_array().into_iter().flatten() {
                keys(alert, "alert", &mut names);
            }
        }
    }
    names
}

async fn federator_data(port: u16, path: &str) -> Value {
    let address: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let (code, body) = http_get_from(address, path).await.unwrap();
    assert_eq!(code, 200, "{path}: {body}");
    let mut answer: Value = serde_json::from_str(&body).unwrap();
    answer["data"].take()
}

#[tokio::test]
#[ignore = "needs Prometheus 3.16 and Thanos (make e2e)"]
async fn a_thanos_querier_over_the_federators_grpc_port_serves_its_groups() {
    let rules = Rules::write("thanos");
    let (_backends, endpoints) = two_shards_of_two_replicas(&rules, "fedthanos").await;
    let grpc = free_port();
    let grpc_flag = format!("--grpc-listen-address=127.0.0.1:{grpc}");
    let env = [("KUBECONFIG", "/dev/null".to_string())];
    let (_federator, port) = spawn::federator(&endpoints, &[&grpc_flag], &env);
    let ours = merged_rules_settled(port).await["data"].take();

    let query = ThanosQuery::start(&[format!("127.0.0.1:{grpc}")]).await;
    // The Querier checks its endpoints every 5 s: its rules are the federator's once it has.
    let theirs = wait_for(
        "the Querier's rules from the federator",
        TIMEOUT,
        || async {
            let data = query.api("/api/v1/rules").await?;
            let (found, wanted) = (rules_of(&data), rules_of(&ours));
            if found == wanted {
                Ok(data)
            } else {
                Err(format!("{} of {} rules: {data}", found.len(), wanted.len()))
            }
        },
    )
    .await;
    assert_eq!(
        rules_of(&theirs).len(),
        11,
        "five rules of shard 0, six of shard 1"
    );
    // What Thanos's formatting adds or leaves out, field by field (docs/rules-federator.md).
    let (ours_fields, theirs_fields) = (fields(&ours), fields(&theirs));
    eprintln!(
        "fields only the federator writes: {:?}; only the Querier: {:?}",
        ours_fields.difference(&theirs_fields).collect::<Vec<_>>(),
        theirs_fields.difference(&ours_fields).collect::<Vec<_>>()
    );

    let order = |data: &Value| -> Vec<String> {
        data["groups"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|g| g["rules"].as_array().cloned().unwrap_or_default())
            .map(|r| format!("{} {}", r["name"], r["labels"]["shard"]))
            .collect()
    };
    eprintln!(
        "rule order, federator: {:?}; Querier: {:?}",
        order(&ours),
        order(&theirs)
    );

    let our_alerts = federator_data(port, "/api/v1/alerts").await;
    let alerts = |data: &Value| -> BTreeSet<String> {
        data["alerts"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|a| format!("{} {}", a["labels"], a["state"]))
            .collect()
    };
    let their_alerts = query.api("/api/v1/alerts").await.unwrap();
    assert_eq!(alerts(&their_alerts), alerts(&our_alerts));
    assert_eq!(alerts(&our_alerts).len(), 5, "{our_alerts}");
}

/// The global rules two Ruler replicas evaluate: an alert that fires and a recording rule.
const GLOBAL_YAML: &str = r#"groups:
- name: global
  interval: 5s
  rules:
  - record: global:one
    expr: vector(1)
  - alert: GlobalFiring
    expr: vector(1)
    labels: {team: g}
"#;

#[tokio::test]
#[ignore = "needs Prometheus 3.16 and Thanos (make e2e)"]
async fn a_ruler_and_a_sidecar_over_grpc_join_the_http_backends_in_one_answer() {
    let rules = Rules::write("grpc-backends");
    let (backends, endpoints) = two_shards_of_two_replicas(&rules, "fedgrpc").await;
    // What the same four Prometheus give over HTTP alone.
    let env = [("KUBECONFIG", "/dev/null".to_string())];
    let (_http_only, http_port) = spawn::federator(&endpoints, &[], &env);
    let http_only = merged_rules_settled(http_port).await["data"].take();

    // Shard 1's replica b read through a sidecar instead; two Ruler replicas; one gone.
    let sidecar = ThanosSidecar::start(&backends[3]).await;
    let (_no_stores, rulers) = two_rulers().await;
    let gone = format!("grpc://{}#shard=2&replica=gone", free_gone());
    let mut mixed = endpoints[..3].to_vec();
    mixed.push(format!(
        "grpc://{}#shard=1&replica=fedgrpc-1-b",
        sidecar.grpc
    ));
    mixed.extend(
        rulers
            .iter()
            .zip(["ruler-0", "ruler-1"])
            .map(|(ruler, replica)| {
                format!("grpc://{}#shard=global&replica={replica}", ruler.grpc)
            }),
    );
    mixed.push(gone.clone());
    let (_mixed, port) = spawn::federator(&mixed, &[], &env);

    let answer = settled_with_the_rulers_group(port).await;
    let merged = rules_of(&answer["data"]);
    let (global_rules, shard_rules): (BTreeSet<Rule>, BTreeSet<Rule>) =
        merged.into_iter().partition(|rule| rule.1 == "global");
    assert_eq!(
        shard_rules,
        rules_of(&http_only),
        "the sidecar's replica collapses with its twin read over HTTP"
    );
    let names: Vec<&str> = global_rules.iter().map(|rule| rule.3.as_str()).collect();
    assert_eq!(
        names,
        ["GlobalFiring", "global:one"],
        "each Ruler rule once"
    );
    for rule in &global_rules {
        assert!(
            !rule.6.contains("thanos_ruler_replica"),
            "the Ruler replica label is removed: {rule:?}"
        );
    }
    let warnings = warnings_of(&answer);
    let gone_url = gone.split('#').next().unwrap();
    assert!(
        warnings.len() == 1
            && warnings[0].starts_with(&format!("endpoint {gone_url}: cannot connect")),
        "{warnings:?}"
    );
}

/// Two Ruler replicas named by one SRV record at a real DNS server (dnsmasq), as a headless
/// Service's `_grpc._tcp` record names its pods: the federator finds both and answers their group
/// once. When the records change (the server restarted with one Ruler and a target where nothing
/// listens), the next lookup follows: the gone target is named in the warnings.
#[tokio::test]
#[ignore = "needs Thanos and dnsmasq (make e2e)"]
async fn rulers_named_by_an_srv_record_are_found_and_followed() {
    let (_no_stores, rulers) = two_rulers().await;
    let port_of = |address: &str| address.rsplit(':').next().unwrap().parse::<u16>().unwrap();
    let name = "_grpc._tcp.rulers.monitoring.e2e.test";
    let record = |target, port| Srv { name, target, port };
    let dns_port = free_port();
    let both = [
        record(
            "ruler-0.rulers.monitoring.e2e.test",
            port_of(&rulers[0].grpc),
        ),
        record(
            "ruler-1.rulers.monitoring.e2e.test",
            port_of(&rulers[1].grpc),
        ),
    ];
    let dns = Dnsmasq::start(dns_port, &both).await;
    let server = dns.address.to_string();
    let extra = ["--dns-server", server.as_str(), "--dns-sd-interval", "1s"];
    let env = [("KUBECONFIG", "/dev/null".to_string())];
    let (_federator, port) = spawn::federator(&[format!("dnssrv+{name}")], &extra, &env);

    let answer = settled_with_the_rulers_group(port).await;
    let names: Vec<String> = rules_of(&answer["data"])
        .into_iter()
        .map(|rule| rule.3)
        .collect();
    assert_eq!(
        names,
        ["GlobalFiring", "global:one"],
        "each Ruler rule once"
    );
    assert_eq!(warnings_of(&answer), Vec::<String>::new());

    drop(dns);
    let gone = free_gone();
    let changed = [
        record(
            "ruler-0.rulers.monitoring.e2e.test",
            port_of(&rulers[0].grpc),
        ),
        record("ruler-2.rulers.monitoring.e2e.test", gone.port()),
    ];
    let _dns = Dnsmasq::start(dns_port, &changed).await;
    let gone_url = format!("grpc://{gone}");
    wait_for("the new target asked", TIMEOUT, || async {
        let address: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let (_, body) = http_get_from(address, "/api/v1/rules").await?;
        let answer: Value = serde_json::from_str(&body).map_err(|e| format!("{e}: {body}"))?;
        let warnings = warnings_of(&answer);
        let rules = rules_of(&answer["data"]).len();
        (warnings.len() == 1
            && warnings[0].starts_with(&format!("endpoint {gone_url}:"))
            && rules == 2)
            .then_some(())
            .ok_or(format!("{rules} rules, warnings {warnings:?}"))
    })
    .await;
}

/// Two replicas of a Thanos Ruler (`thanos_ruler_replica` ruler-0 and ruler-1) evaluating
/// [`GLOBAL_YAML`] over a Querier without stores and alerting nowhere; the Querier is returned
/// to be kept as long as they run.
async fn two_rulers() -> (ThanosQuery, Vec<ThanosRuler>) {
    let no_stores = ThanosQuery::start(&[]).await;
    let global = [("global.yaml".to_string(), GLOBAL_YAML.to_string())];
    let nowhere = format!("http://{}", free_gone());
    let mut rulers = Vec::new();
    for replica in ["ruler-0", "ruler-1"] {
        rulers.push(ThanosRuler::start_replica(&global, &no_stores, &nowhere, replica).await);
    }
    (no_stores, rulers)
}

/// The answer of the federator on `port` once the Rulers' alert fires in it.
async fn settled_with_the_rulers_group(port: u16) -> Value {
    wait_for(
        "the Ruler's group evaluated in the merge",
        TIMEOUT,
        || async {
            let address: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
            let (code, body) = http_get_from(address, "/api/v1/rules").await?;
            let answer: Value = serde_json::from_str(&body).map_err(|e| format!("{e}: {body}"))?;
            let firing = rules_of(&answer["data"])
                .iter()
                .any(|rule| rule.3 == "GlobalFiring" && rule.4 == "firing");
            (code == 200 && firing)
                .then_some(answer)
                .ok_or(format!("{code}: {body}"))
        },
    )
    .await
}

/// The text warnings of an answer.
fn warnings_of(answer: &Value) -> Vec<String> {
    answer["warnings"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|w| w.as_str().map(str::to_string))
        .collect()
}

/// An address of 127.0.0.1 where nothing listens.
fn free_gone() -> SocketAddr {
    format!("127.0.0.1:{}", free_port()).parse().unwrap()
}

/// A sidecar serving gRPC over mutual TLS (`--grpc-server-tls-*`): a federator given the CA and
/// a client certificate the sidecar's client CA signed reads its rules over `grpcs://`; one
/// without a client certificate is refused at the handshake, and its answer names the backend
/// and why.
#[tokio::test]
#[ignore = "needs Prometheus 3.16 and Thanos (make e2e)"]
async fn a_sidecar_over_mutual_tls_gives_its_rules_only_to_a_client_certificate() {
    let rules = Rules::write("mtls");
    let name = "fedmtls-0-a";
    let prometheus =
        PrometheusProcess::start(name, &config(Some(0), name, &rules.of_shard(0)), &[]).await;
    let dir = std::env::temp_dir().join(format!("e2e-federator-mtls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (servers, clients) = (TestCa::new("sidecar CA"), TestCa::new("clients CA"));
    let (serving, client) = (
        servers.leaf(1),
        clients.issue(vec!["rules-federator".into()], None),
    );
    let file = |name: &str, content: &str| {
        let path = dir.join(name);
        std::fs::write(&path, content).unwrap();
        path.display().to_string()
    };
    let sidecar_flags = [
        format!(
            "--grpc-server-tls-cert={}",
            file("sidecar.crt", &serving.cert)
        ),
        format!(
            "--grpc-server-tls-key={}",
            file("sidecar.key", &serving.key)
        ),
        format!(
            "--grpc-server-tls-client-ca={}",
            file("clients.crt", &clients.pem)
        ),
    ];
    let sidecar = ThanosSidecar::start_with(&prometheus, &sidecar_flags).await;
    let ca = format!("--backend-ca-file={}", file("ca.crt", &servers.pem));
    let cert = format!("--backend-cert-file={}", file("client.crt", &client.cert));
    let key = format!("--backend-key-file={}", file("client.key", &client.key));
    let url = format!("grpcs://{}", sidecar.grpc);
    let endpoint = [format!("{url}#shard=0&replica={name}")];
    let env = [("KUBECONFIG", "/dev/null".to_string())];
    let (_presenting, presenting) = spawn::federator(&endpoint, &[&ca, &cert, &key], &env);
    let (_anonymous, anonymous) = spawn::federator(&endpoint, &[&ca], &env);

    let read = wait_for("the sidecar's rules over mutual TLS", TIMEOUT, || async {
        let address: SocketAddr = format!("127.0.0.1:{presenting}").parse().unwrap();
        let (code, body) = http_get_from(address, "/api/v1/rules").await?;
        let answer: Value = serde_json::from_str(&body).map_err(|e| format!("{e}: {body}"))?;
        let rules = rules_of(&answer["data"]);
        (code == 200 && rules.len() == 5 && answer.get("warnings").is_none())
            .then_some(rules)
            .ok_or(format!("{code}: {body}"))
    })
    .await;
    assert!(
        read.iter().all(|rule| rule.6.contains(r#""shard":"0""#)),
        "{read:?}"
    );

    let address: SocketAddr = format!("127.0.0.1:{anonymous}").parse().unwrap();
    let (code, body) = http_get_from(address, "/api/v1/rules").await.unwrap();
    assert_eq!(code, 503, "no backend answered: {body}");
    let answer: Value = serde_json::from_str(&body).unwrap();
    let error = answer["error"].as_str().unwrap_or_default();
    assert!(
        error.contains(&format!("endpoint {url}: cannot connect")),
        "the refused backend named: {error}"
    );
    std::fs::remove_dir_all(dir).unwrap();
}
