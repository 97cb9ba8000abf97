//! Global rules on the real nodes, as the shard controller's ServiceAccount: rules that need
//! every shard's series (`absent()`, a cluster-wide `sum()`), first loaded on the shards as
//! they always were (each shard evaluates them over its own share: they fire falsely), then as a
//! PrometheusRule labelled `zonecontrol.k8s.aws/scope: global`, which no shard loads and a real
//! Thanos Ruler evaluates once through a real Thanos Querier over every shard's sidecar,
//! alerting the same real Alertmanager.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use e2e::alertmanager::{Alertmanager, ApiAlert, Notification, WebhookReceiver};
use e2e::fixture;
use e2e::operator::monitoring_resource;
use e2e::real::RealNodes;
use e2e::thanos::{RULER_REPLICA_LABEL, ThanosQuery, ThanosRuler, samples, sidecar_endpoints};
use e2e::{Cluster, wait_for};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::Api;
use kube::api::{DeleteParams, DynamicObject};
use serde_json::{Value, json};
use zone_api::sprom::contract::{GLOBAL_SCOPE, RULE_SCOPE_LABEL};

const TIMEOUT: Duration = Duration::from_secs(180);
/// From the target's deletion to the global alerts at the Alertmanager: the series goes stale
/// at the next scrape, the Ruler evaluates every 5 s, the Alertmanager groups for 1 s.
const FIRE_TIMEOUT: Duration = Duration::from_secs(120);
const MANAGER: &str = "e2e-thanos-rules";
const NAME: &str = "prom";
const SERVICE: &str = "prom-thanos-sidecar";
/// The ConfigMap of the Ruler's rule files.
const RULER_CONFIG_MAP: &str = "prom-global-rulefiles-0";
/// Targets of job `targets`, one per zone, and the one target of job `x`.
const TARGETS: usize = 3;
const ALL_UP: usize = TARGETS + 1;

type Fixture = fixture::Sprom;

#[path = "thanos_rules/pods.rs"]
mod pods;

/// The two rules, alert names suffixed with `suffix`: `absent(up{job="x"})` and
/// `sum(up) < 4`, both true only when x is gone from every shard.
fn rule_spec(suffix: &str, interval: &str) -> Value {
    json!({"groups": [{
        "name": format!("cluster-wide{suffix}"),
        "interval": interval,
        "rules": [
            {"alert": format!("XAbsent{suffix}"), "expr": "absent(up{job=\"x\"})",
             "labels": {"severity": "page"}},
            {"alert": format!("TooFewUp{suffix}"),
             "expr": format!("sum(up{{job=~\"targets|x\"}}) < {ALL_UP}"),
             "labels": {"severity": "page"}},
        ],
    }]})
}

#[tokio::test]
#[ignore = "needs the local zonal cluster with its real nodes (make e2e)"]
async fn thanos_rules_global_rules_fire_once_and_only_when_x_is_gone_from_every_shard() {
    let cluster = Cluster::get();
    e2e::operator::install_crds(&cluster).await;
    let real = RealNodes::of(&cluster);
    let fx = Fixture::new("thanos-rules", NAME, MANAGER, TIMEOUT).await;
    fx.prometheus_service_account().await;
    real.run_metrics_targets(&fx.ns, "target", TARGETS, TIMEOUT)
        .await;
    let x = real.run_metrics_targets(&fx.ns, "x", 1, TIMEOUT).await;
    let x_zone = e2e::real::nodes(&fx.ns.client).await[e2e::pods::node_of(&x[0]).unwrap()].clone();
    let (receiver, alertmanager) =
        Alertmanager::deploy_with_receiver(&fx.ns, &real, "zone-a", &["alertname", "shard"]).await;
    create_rule(&fx, "per-shard", None, rule_spec("PerShard", "2s")).await;
    let generation = fx.apply(spec(&real, &fx)).await;
    fx.wait_ready_shards("3 shards of 2 replicas with their sidecars", generation, 3)
        .await;

    on_the_shards_they_fire_while_x_is_scraped(&alertmanager, &x_zone).await;

    create_rule(&fx, "global", Some(GLOBAL_SCOPE), rule_spec("", "5s")).await;
    let files = the_ruler_gets_the_global_rules_and_no_shard_loads_them(&fx, generation).await;
    let endpoints = sidecar_endpoints(&fx.ns, SERVICE, 6, TIMEOUT).await;
    let query = ThanosQuery::start(&endpoints).await;
    query.wait_endpoints(6, TIMEOUT).await;
    let up = query.query("sum(up{job=~\"targets|x\"})").await.unwrap();
    assert_eq!(samples(&up)[0].1, ALL_UP.to_string(), "deduplicated: {up}");
    let am_url = format!("http://{}:{}", alertmanager.pod_ip, e2e::alertmanager::PORT);
    let ruler = ThanosRuler::start(&files, &query, &am_url).await;

    the_ruler_evaluates_them_quietly_while_x_is_up(&ruler, &alertmanager).await;
    let deployments: Api<Deployment> = fx.ns.api();
    deployments
        .delete("x", &DeleteParams::default())
        .await
        .expect("deleting the target x");
    let gone = Instant::now();
    once_at_the_alertmanager_when_x_is_gone(&alertmanager, &receiver, gone).await;
}

/// Three shards of two replicas on the real nodes, one per zone, scraping the targets (job
/// `targets`) and x (job `x`) every 2 s, loading every PrometheusRule of the namespace,
/// alerting the Alertmanager, each pod with a Thanos sidecar (no object store: the Querier
/// reads the sidecars).
fn spec(real: &RealNodes, fx: &Fixture) -> Value {
    let job = |name: &str, app: &str| {
        json!({
            "job_name": name,
            "scrape_interval": "2s",
            "kubernetes_sd_configs": [{"role": "pod", "namespaces": {"names": [fx.ns.name]}}],
            "relabel_configs": [{"source_labels": ["__meta_kubernetes_pod_label_app"], "regex": app, "action": "keep"}],
        })
    };
    fixture::on_real_nodes(
        real,
        json!({
            "shards": 3,
            "replicas": 2,
            "evaluationInterval": "2s",
            "scrapeConfigs": [job("targets", "target"), job("x", "x")],
            "ruleSelector": {},
            "alerting": {
                "alertmanagers": [{"name": e2e::alertmanager::NAME, "port": e2e::alertmanager::PORT_NAME}],
            },
            "thanos": {"image": real.thanos_image},
        }),
    )
}

/// Creates the PrometheusRule `name`, labelled `scope` when given.
async fn create_rule(fx: &Fixture, name: &str, scope: Option<&str>, spec: Value) {
    let rules: Api<DynamicObject> = Api::namespaced_with(
        fx.ns.client.clone(),
        &fx.ns.name,
        &monitoring_resource("PrometheusRule", "prometheusrules"),
    );
    let labels = scope.map_or(json!({}), |scope| json!({RULE_SCOPE_LABEL: scope}));
    fixture::create(
        &rules,
        json!({
            "apiVersion": "monitoring.coreos.com/v1", "kind": "PrometheusRule",
            "metadata": {"name": name, "labels": labels},
            "spec": spec,
        }),
    )
    .await;
}

/// The alerts named `name` the Alertmanager holds.
async fn held(alertmanager: &Alertmanager, name: &str) -> Result<Vec<ApiAlert>, String> {
    Ok(alertmanager
        .alerts()
        .await?
        .into_iter()
        .filter(|alert| alert.labels.get("alertname").map(String::as_str) == Some(name))
        .collect())
}

/// Waits until the Alertmanager holds alerts named `name`, and returns them.
async fn wait_held(alertmanager: &Alertmanager, name: &str, timeout: Duration) -> Vec<ApiAlert> {
    wait_for(&format!("{name} at the Alertmanager"), timeout, || async {
        let alerts = held(alertmanager, name).await?;
        (!alerts.is_empty())
            .then_some(alerts.clone())
            .ok_or("none yet".to_string())
    })
    .await
}

/// The `shard` labels of `alerts`, sorted.
fn shards_of(alerts: &[ApiAlert]) -> Vec<String> {
    let mut shards: Vec<String> = alerts
        .iter()
        .map(|alert| alert.labels.get("shard").cloned().unwrap_or_default())
        .collect();
    shards.sort();
    shards
}

/// Before: loaded on the shards, `absent()` fires on the two shards that do not scrape x while
/// the third does, and `sum(up) < 4` on all three, none of which sees more than its zone's share.
async fn on_the_shards_they_fire_while_x_is_scraped(alertmanager: &Alertmanager, x_zone: &str) {
    let x_shard = ["zone-a", "zone-b", "zone-c"]
        .iter()
        .position(|zone| *zone == x_zone)
        .expect("x runs in one of the three zones");
    let not_x: Vec<String> = (0..3)
        .filter(|shard| *shard != x_shard)
        .map(|shard| shard.to_string())
        .collect();
    let started = Instant::now();
    wait_for(
        "per-shard absent() and sum() firing at the Alertmanager while x is up",
        TIMEOUT,
        || async {
            let absent = shards_of(&held(alertmanager, "XAbsentPerShard").await?);
            let too_few = shards_of(&held(alertmanager, "TooFewUpPerShard").await?);
            (absent == not_x && too_few == ["0", "1", "2"])
                .then_some(())
                .ok_or(format!(
                    "XAbsentPerShard {absent:?}, TooFewUpPerShard {too_few:?}"
                ))
        },
    )
    .await;
    eprintln!(
        "on the shards, with x up in {x_zone} (shard {x_shard}): XAbsentPerShard firing from \
         shards {not_x:?}, TooFewUpPerShard from shards 0, 1, 2: 5 false alerts (held {:.0?} after \
         the shards were ready)",
        started.elapsed()
    );
}

/// The controller moves the global PrometheusRule out of every shard and into the Ruler's
/// ConfigMap: the status counts its group, the shards' loaded rules do not hold it (their
/// per-shard group, which the same reload would carry, is there). Returns the Ruler's files.
async fn the_ruler_gets_the_global_rules_and_no_shard_loads_them(
    fx: &Fixture,
    generation: i64,
) -> Vec<(String, String)> {
    fx.wait_status("status.globalRuleGroups 1", generation, |sprom| {
        let groups = sprom.status.as_ref().map_or(0, |s| s.global_rule_groups);
        (groups == 1).then_some(()).ok_or(format!("{groups}"))
    })
    .await;
    let config_maps: Api<ConfigMap> = fx.ns.api();
    let data = config_maps
        .get(RULER_CONFIG_MAP)
        .await
        .expect("the Ruler's ConfigMap")
        .data
        .unwrap_or_default();
    let files: Vec<(String, String)> = data.into_iter().collect();
    assert_eq!(files.len(), 1, "{files:?}");
    assert!(files[0].0.starts_with(&format!("{}-global-", fx.ns.name)));
    assert!(files[0].1.contains("alert: XAbsent\n"), "{}", files[0].1);

    let pods: Api<Pod> = fx.ns.api();
    let shards = e2e::pods::list(&pods, &zone_api::sprom::contract::children_selector(NAME)).await;
    assert_eq!(shards.len(), 6);
    for pod in &shards {
        let ip: std::net::IpAddr = pod
            .status
            .as_ref()
            .unwrap()
            .pod_ip
            .as_ref()
            .unwrap()
            .parse()
            .unwrap();
        wait_for(
            &format!(
                "{} loads cluster-widePerShard and not cluster-wide",
                pod.metadata.name.as_deref().unwrap_or("?")
            ),
            TIMEOUT,
            || async {
                let (code, body) =
                    e2e::process::http_get_from(SocketAddr::new(ip, 9090), "/api/v1/rules").await?;
                let answer: Value =
                    serde_json::from_str(&body).map_err(|e| format!("{code}: {e}"))?;
                let groups: Vec<&str> = answer["data"]["groups"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|group| group["name"].as_str())
                    .collect();
                assert!(
                    !groups.contains(&"cluster-wide"),
                    "a shard loaded the global group: {groups:?}"
                );
                (groups == ["cluster-widePerShard"])
                    .then_some(())
                    .ok_or(format!("{groups:?}"))
            },
        )
        .await;
    }
    files
}

/// With x scraped by one shard, the Ruler evaluates both rules over the Querier (every shard,
/// deduplicated) and neither fires: checked at every poll over four evaluations of the group.
async fn the_ruler_evaluates_them_quietly_while_x_is_up(
    ruler: &ThanosRuler,
    alertmanager: &Alertmanager,
) {
    let evaluations = std::sync::Mutex::new(BTreeSet::<String>::new());
    wait_for(
        "the Ruler evaluated both global rules four times, healthy and inactive",
        TIMEOUT,
        || async {
            let rules = ruler.api("/api/v1/rules").await?;
            let group = rules["groups"]
                .as_array()
                .and_then(|groups| groups.iter().find(|g| g["name"] == "cluster-wide"))
                .ok_or(format!("no group cluster-wide in {rules}"))?
                .clone();
            let last = group["lastEvaluation"].as_str().unwrap_or_default();
            if last.starts_with("0001-") {
                return Err(format!("not evaluated yet: {group}"));
            }
            for rule in group["rules"].as_array().into_iter().flatten() {
                assert_eq!(rule["health"], "ok", "{rule}");
                assert_eq!(
                    rule["state"], "inactive",
                    "a global rule fired while x is up: {rule}"
                );
            }
            let alerts = ruler.api("/api/v1/alerts").await?;
            // Thanos answers `null` for no alerts.
            assert!(
                alerts["alerts"].as_array().is_none_or(Vec::is_empty),
                "the Ruler holds alerts while x is up: {alerts}"
            );
            for name in ["XAbsent", "TooFewUp"] {
                assert!(
                    held(alertmanager, name).await?.is_empty(),
                    "{name} at the Alertmanager while x is up"
                );
            }
            let mut seen = evaluations.lock().unwrap();
            seen.insert(last.to_string());
            (seen.len() >= 4)
                .then_some(())
                .ok_or(format!("evaluations seen: {seen:?}"))
        },
    )
    .await;
}

/// After x is deleted: each global alert is at the Alertmanager once (no shard, no replica
/// label) and notified once.
async fn once_at_the_alertmanager_when_x_is_gone(
    alertmanager: &Alertmanager,
    receiver: &WebhookReceiver,
    gone: Instant,
) {
    for name in ["XAbsent", "TooFewUp"] {
        let alerts = wait_held(alertmanager, name, FIRE_TIMEOUT).await;
        eprintln!(
            "{name} at the Alertmanager {:.1?} after x was deleted",
            gone.elapsed()
        );
        assert_eq!(alerts.len(), 1, "{alerts:?}");
        let labels = &alerts[0].labels;
        assert!(
            !labels.contains_key("shard") && !labels.contains_key(RULER_REPLICA_LABEL),
            "{labels:?}"
        );
        let about =
            |n: &Notification| n.group_labels.get("alertname").map(String::as_str) == Some(name);
        receiver
            .wait_for(&format!("{name} notified"), 1, FIRE_TIMEOUT, about)
            .await;
        let notified = receiver
            .assert_at_most_for(
                &format!("{name} notified once"),
                1,
                Duration::from_secs(10),
                about,
            )
            .await;
        assert_eq!(notified[0].alerts.len(), 1, "{:?}", notified[0]);
        assert_eq!(notified[0].status, "firing");
    }
}
