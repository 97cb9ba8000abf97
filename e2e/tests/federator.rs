//! rules-federator e2e: real Prometheus 3.16 processes on 127.0.0.1 — two shards of two
//! replicas each, with rule files — behind the federator, whose answers are checked field by
//! field and, for every filter and page, against one Prometheus loaded with all the rule files.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::time::Duration;

use e2e::localstack::free_port;
use e2e::process::{ControllerProcess, http_get_from};
use e2e::prometheus::PrometheusProcess;
use e2e::wait_for;
use serde_json::Value;

#[path = "federator/shards.rs"]
mod shards;
#[path = "federator/spawn.rs"]
mod spawn;

use shards::{Rules, config, merged_rules_settled, two_shards_of_two_replicas};

const TIMEOUT: Duration = Duration::from_secs(60);

async fn get(port: u16, path: &str) -> (u16, Value) {
    let address: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let (code, body) = http_get_from(address, path).await.unwrap();
    let value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{path}: {e}: {body}"));
    (code, value)
}

fn federator(endpoints: &[String], extra: &[&str]) -> (ControllerProcess, u16) {
    // Static endpoints only: no Kubernetes (a kubeconfig that would fail if it were read).
    let env = [("KUBECONFIG", "/dev/null".to_string())];
    spawn::federator(endpoints, extra, &env)
}

/// (file, group, [(type, name, state, shard)]) of an answer.
type Shape = Vec<(String, String, Vec<(String, String, String, String)>)>;

fn shape(data: &Value) -> Shape {
    data["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|group| {
            let rules = group["rules"]
                .as_array()
                .unwrap()
                .iter()
                .map(|rule| {
                    (
                        rule["type"].as_str().unwrap().to_string(),
                        rule["name"].as_str().unwrap().to_string(),
                        rule["state"].as_str().unwrap_or("").to_string(),
                        rule["labels"]["shard"].as_str().unwrap_or("").to_string(),
                    )
                })
                .collect();
            (
                group["file"].as_str().unwrap().to_string(),
                group["name"].as_str().unwrap().to_string(),
                rules,
            )
        })
        .collect()
}

/// (file, group, {(type, name)}).
type Unsharded = (String, String, BTreeSet<(String, String)>);

/// The same answer without shards: each rule once (the union Prometheus has each once).
fn unsharded(shape: &Shape) -> Vec<Unsharded> {
    shape
        .iter()
        .map(|(file, group, rules)| {
            (
                file.clone(),
                group.clone(),
                rules
                    .iter()
                    .map(|(t, n, _, _)| (t.clone(), n.clone()))
                    .collect(),
            )
        })
        .collect()
}

#[tokio::test]
#[ignore = "needs Prometheus 3.16 (make e2e)"]
async fn federator_merges_shards_and_replicas_like_prometheus_would() {
    let rules = Rules::write("merge");
    let (mut backends, endpoints) = two_shards_of_two_replicas(&rules, "fed").await;
    let union =
        PrometheusProcess::start("fed-union", &config(None, "union", &rules.of_shard(1)), &[])
            .await;
    let (_federator, port) = federator(&endpoints, &[]);

    let merged = merged_rules_settled(port).await;
    assert_eq!(merged["status"], "success");
    assert!(merged.get("warnings").is_none(), "{merged}");
    merged_groups_by_file_with_replicas_collapsed(&merged, &rules);

    alerts_of_every_shard_none_collapsed(port).await;

    filters_as_prometheus_applies_them_to_the_union(port, union.port, &rules).await;

    bad_parameters_are_prometheus_400s(port, union.port).await;

    deep_selectors_refused_and_the_next_request_served(port, &merged).await;

    one_backend_gone_warns_or_aborts(&mut backends, &endpoints, port, &merged).await;
    drop(union);
}

/// Groups by file then name; rules in evaluation order, each shard's copy next to the other;
/// replicas collapsed; the rule only shard 1 has, once. Then one firing rule, field by field.
fn merged_groups_by_file_with_replicas_collapsed(merged: &Value, rules: &Rules) {
    let s = |v: &str| v.to_string();
    let rule = |t: &str, n: &str, st: &str, sh: &str| (s(t), s(n), s(st), s(sh));
    assert_eq!(
        shape(&merged["data"]),
        vec![
            (
                rules.path("a.yaml"),
                s("common"),
                vec![
                    rule("recording", "job:up:sum", "", "0"),
                    rule("recording", "job:up:sum", "", "1"),
                    rule("alerting", "AlwaysFiring", "firing", "0"),
                    rule("alerting", "AlwaysFiring", "firing", "1"),
                    rule("alerting", "PendingLong", "pending", "0"),
                    rule("alerting", "PendingLong", "pending", "1"),
                    rule("alerting", "NeverFires", "inactive", "0"),
                    rule("alerting", "NeverFires", "inactive", "1"),
                ]
            ),
            (
                rules.path("b.yaml"),
                s("common"),
                vec![
                    rule("recording", "b:one", "", "0"),
                    rule("recording", "b:one", "", "1"),
                ]
            ),
            (
                rules.path("only.yaml"),
                s("extra"),
                vec![rule("alerting", "OnlyOnShardOne", "firing", "1"),]
            ),
        ]
    );
    // Field by field: one firing rule of shard 0.
    let firing = &merged["data"]["groups"][0]["rules"][2];
    assert_eq!(firing["query"], "vector(1)");
    assert_eq!(firing["duration"], 0.0);
    assert_eq!(firing["health"], "ok");
    assert_eq!(
        firing["labels"],
        serde_json::json!({"severity": "page", "team": "a", "shard": "0"})
    );
    let alerts = firing["alerts"].as_array().unwrap();
    assert_eq!(
        alerts.len(),
        1,
        "one instance from two replicas: {alerts:?}"
    );
    assert_eq!(alerts[0]["state"], "firing");
    assert_eq!(
        alerts[0]["labels"],
        serde_json::json!({"alertname": "AlwaysFiring", "severity": "page", "team": "a", "shard": "0"})
    );
    assert_eq!(merged["data"]["groups"][0]["interval"], 1.0);
}

/// /api/v1/alerts: the instances of every shard, none collapsed.
async fn alerts_of_every_shard_none_collapsed(port: u16) {
    let s = |v: &str| v.to_string();
    let (code, alerts) = get(port, "/api/v1/alerts").await;
    assert_eq!(code, 200);
    assert!(alerts.get("warnings").is_none(), "{alerts}");
    let names: Vec<(String, String)> = alerts["data"]["alerts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            (
                s(a["labels"]["alertname"].as_str().unwrap()),
                s(a["labels"]["shard"].as_str().unwrap()),
            )
        })
        .collect();
    assert_eq!(
        names,
        [
            ("AlwaysFiring", "0"),
            ("AlwaysFiring", "1"),
            ("PendingLong", "0"),
            ("PendingLong", "1"),
            ("OnlyOnShardOne", "1")
        ]
        .map(|(a, b)| (s(a), s(b)))
    );
}

/// Every filter as Prometheus applies it to the union of the rules (at `union_port`), and the
/// shard label filters too.
async fn filters_as_prometheus_applies_them_to_the_union(
    port: u16,
    union_port: u16,
    rules: &Rules,
) {
    let token_ab = zone_rules::group_token(&rules.path("a.yaml"), "common");
    let token_b = zone_rules::group_token(&rules.path("b.yaml"), "common");
    let cases = [
        "type=alert".to_string(),
        "type=record".to_string(),
        "type=Alert".to_string(),
        "rule_name[]=PendingLong&rule_name[]=b:one".to_string(),
        "rule_group[]=extra".to_string(),
        format!("file[]={}", rules.path("b.yaml")),
        "match[]={team=\"a\"}&match[]={team=\"c\"}".to_string(),
        "match[]={team=\"a\",severity=\"page\"}".to_string(),
        "match[]={team=~\"b|c\"}".to_string(),
        "exclude_alerts=true".to_string(),
        "group_limit=1".to_string(),
        format!("group_limit=1&group_next_token={token_b}"),
        format!("group_limit=2&group_next_token={token_ab}"),
    ];
    for case in &cases {
        let path = format!(
            "/api/v1/rules?{}",
            case.replace('{', "%7B")
                .replace('}', "%7D")
                .replace('"', "%22")
                .replace('|', "%7C")
        );
        let (code, ours) = get(port, &path).await;
        let (union_code, theirs) = get(union_port, &path).await;
        assert_eq!((code, union_code), (200, 200), "{case}: {ours} / {theirs}");
        assert_eq!(
            unsharded(&shape(&ours["data"])),
            unsharded(&shape(&theirs["data"])),
            "{case}"
        );
        assert_eq!(
            ours["data"]["groupNextToken"], theirs["data"]["groupNextToken"],
            "{case}"
        );
        if case.starts_with("exclude_alerts") {
            for group in ours["data"]["groups"].as_array().unwrap() {
                for rule in group["rules"].as_array().unwrap() {
                    if rule["type"] == "alerting" {
                        assert!(rule["alerts"].is_null(), "{case}: {rule}");
                    }
                }
            }
        }
    }
    // The shard label filters too (the union has no shards).
    let (_, shard_one) = get(port, "/api/v1/rules?match[]=%7Bshard%3D%221%22%7D").await;
    assert!(
        shape(&shard_one["data"])
            .iter()
            .flat_map(|(_, _, r)| r)
            .all(|(_, _, _, shard)| shard == "1")
    );
}

/// Bad parameters: Prometheus's 400s.
async fn bad_parameters_are_prometheus_400s(port: u16, union_port: u16) {
    for case in [
        "type=all",
        "exclude_alerts=maybe",
        "group_limit=0",
        "group_limit=x",
        "group_next_token=abc",
        "group_limit=1&group_next_token=nope",
        "match[]=%7Ba%3D~%22(%22%7D",
        "match[]=%7Ba%3D~%22.*%22%7D",
    ] {
        let path = format!("/api/v1/rules?{case}");
        let (code, ours) = get(port, &path).await;
        let (union_code, theirs) = get(union_port, &path).await;
        assert_eq!((code, union_code), (400, 400), "{case}: {ours} / {theirs}");
        assert_eq!(ours["errorType"], "bad_data", "{case}");
        assert_eq!(theirs["errorType"], "bad_data", "{case}");
        if !case.starts_with("match") {
            assert_eq!(ours["error"], theirs["error"], "{case}");
        }
    }
}

/// A selector nested 30,000 deep (60 KB): a 400, not a federator whose stack overflows
/// (parsed unchecked, it aborts the process); 100,000 deep (200 KB) is past the longest URI
/// the server reads, a 414. It answers the next request as before.
async fn deep_selectors_refused_and_the_next_request_served(port: u16, merged: &Value) {
    let address: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let deepest = format!("{}up{}", "(".repeat(100_000), ")".repeat(100_000));
    let path = format!("/api/v1/rules?match[]={deepest}");
    assert_eq!(http_get_from(address, &path).await.unwrap().0, 414);
    let deep = format!("{}up{}", "(".repeat(30_000), ")".repeat(30_000));
    let (code, ours) = get(port, &format!("/api/v1/rules?match[]={deep}")).await;
    assert_eq!(code, 400, "{ours}");
    assert_eq!(ours["errorType"], "bad_data");
    assert!(ours["error"].as_str().unwrap().contains("nests"), "{ours}");
    let (code, again) = get(port, "/api/v1/rules").await;
    assert_eq!(code, 200);
    assert_eq!(shape(&again["data"]), shape(&merged["data"]));
}

/// One backend gone: a warning naming it, the data of the others; in abort mode, the request
/// fails instead.
async fn one_backend_gone_warns_or_aborts(
    backends: &mut Vec<PrometheusProcess>,
    endpoints: &[String],
    port: u16,
    merged: &Value,
) {
    // One backend gone: a warning naming it, the data of the others.
    let gone = backends.remove(0);
    let gone_url = gone.url();
    drop(gone);
    let (code, partial) = get(port, "/api/v1/rules").await;
    assert_eq!(code, 200);
    let warnings = partial["warnings"].as_array().cloned().unwrap_or_default();
    assert_eq!(warnings.len(), 1, "{partial}");
    assert!(
        warnings[0].as_str().unwrap().contains(&gone_url),
        "{warnings:?}"
    );
    // The surviving replica of shard 0 has the same rules and states.
    assert_eq!(shape(&partial["data"]), shape(&merged["data"]));
    // Abort mode: the request fails instead.
    let remaining: Vec<String> = endpoints.to_vec();
    let (_abort, abort_port) = federator(&remaining, &["--partial-response=abort"]);
    let (code, aborted) = wait_for("the abort federator", TIMEOUT, || async {
        let address: SocketAddr = format!("127.0.0.1:{abort_port}").parse().unwrap();
        let (code, body) = http_get_from(address, "/api/v1/rules").await?;
        Ok::<_, String>((
            code,
            serde_json::from_str::<Value>(&body).map_err(|e| e.to_string())?,
        ))
    })
    .await;
    assert_eq!(code, 503, "{aborted}");
    assert_eq!(aborted["errorType"], "unavailable");
    assert!(
        aborted["error"].as_str().unwrap().contains(&gone_url),
        "{aborted}"
    );
}

#[tokio::test]
#[ignore = "needs Prometheus 3.16 (make e2e)"]
async fn federator_cuts_a_slow_backend_at_its_timeout_and_names_it() {
    let rules = Rules::write("slow");
    let files = vec![rules.path("a.yaml")];
    let fast = PrometheusProcess::start("fed-fast", &config(Some(0), "fast", &files), &[]).await;
    // A backend that accepts connections and never answers.
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let silent_url = format!("http://{}", silent.local_addr().unwrap());
    let held = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = silent.accept().await {
            held.push(stream);
        }
    });
    let endpoints = vec![
        format!("{}#shard=0&replica=fast", fast.url()),
        format!("{silent_url}#shard=0&replica=silent"),
    ];
    let (_federator, port) = federator(&endpoints, &["--endpoint-timeout=1s"]);
    let answer = wait_for(
        "an answer with the fast backend's rules",
        TIMEOUT,
        || async {
            let address: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
            let started = std::time::Instant::now();
            let (code, body) = http_get_from(address, "/api/v1/rules").await?;
            let value: Value = serde_json::from_str(&body).map_err(|e| format!("{e}: {body}"))?;
            let groups = value["data"]["groups"].as_array().map_or(0, Vec::len);
            (code == 200 && groups == 1)
                .then_some((value, started.elapsed()))
                .ok_or(format!("{code}: {body}"))
        },
    )
    .await;
    let (value, took) = answer;
    let warnings = value["warnings"].as_array().cloned().unwrap_or_default();
    assert_eq!(warnings.len(), 1, "{value}");
    let warning = warnings[0].as_str().unwrap();
    assert!(
        warning.contains(&silent_url) && warning.contains("no answer within 1s"),
        "{warning}"
    );
    eprintln!("answer with a silent backend in {took:?}");
    assert!(
        took < Duration::from_secs(5),
        "cut at the timeout, not after {took:?}"
    );
    held.abort();
}

/// How long `stream` stays open while sending nothing, up to `at_most`.
async fn open_for(stream: &mut tokio::net::TcpStream, at_most: Duration) -> Duration {
    use tokio::io::AsyncReadExt;
    let started = std::time::Instant::now();
    let mut buffer = [0u8; 64];
    let _ = tokio::time::timeout(at_most, async {
        while !matches!(stream.read(&mut buffer).await, Ok(0) | Err(_)) {}
    })
    .await;
    started.elapsed()
}

/// The federator as run, on `[::]`: it answers over IPv6 and IPv4 loopback; past
/// `--max-connections` a connection is closed at once and counted; a connection that sends
/// nothing is closed at `--http-header-timeout`. Before, 50 silent connections were all still
/// open after 90 s.
#[tokio::test]
#[ignore = "needs the built binaries (make e2e)"]
async fn federator_bounds_its_connections_and_listens_on_both_stacks() {
    let port = free_port();
    let listen = format!("[::]:{port}");
    let args = [
        "--listen-address",
        listen.as_str(),
        "--http-header-timeout",
        "3s",
        "--max-connections",
        "4",
        "--endpoint",
        "http://127.0.0.1:9",
    ];
    let mut process = ControllerProcess::start(
        "rules-federator",
        &args,
        &[("KUBECONFIG", "/dev/null".to_string())],
    );
    let v6: SocketAddr = format!("[::1]:{port}").parse().unwrap();
    let v4: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    wait_for("the federator serving", Duration::from_secs(30), || async {
        match http_get_from(v6, "/healthz").await {
            Ok((200, _)) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    assert_eq!(http_get_from(v4, "/healthz").await.unwrap().0, 200);

    let mut held = Vec::new();
    for _ in 0..4 {
        held.push(tokio::net::TcpStream::connect(v4).await.unwrap());
    }
    let mut fifth = tokio::net::TcpStream::connect(v6).await.unwrap();
    let open = open_for(&mut fifth, Duration::from_secs(10)).await;
    assert!(
        open < Duration::from_secs(2),
        "the fifth stayed open {open:?}"
    );
    // The held ones, silent, are closed at the header timeout.
    for stream in &mut held {
        let open = open_for(stream, Duration::from_secs(10)).await;
        assert!(
            open < Duration::from_secs(6),
            "a silent connection stayed open {open:?}"
        );
    }
    let (code, metrics) = http_get_from(v4, "/metrics").await.unwrap();
    assert_eq!(code, 200);
    let refused = metrics
        .lines()
        .find(|line| line.starts_with("zone_aware_http_connections_refused_total{server=\"main\"}"))
        .unwrap_or_else(|| panic!("no refusal counter in {metrics}"));
    assert!(refused.ends_with(" 1"), "{refused}");
    assert!(process.is_running());
}
