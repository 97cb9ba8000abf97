//! Alerting of a ShardedPrometheus on the local zonal cluster's real nodes: real Prometheus shards
//! (3 zones x 2 replicas) evaluate an alerting rule over the targets of their own zone and send to
//! a real Alertmanager discovered through its Service; the replicas' copies of an alert become one
//! notification (the controller drops `prometheus_replica` on the way), labelled with the shard
//! and its zone and relabelled by `spec.alerting.alertRelabelConfigs`; a resolved condition is
//! notified as resolved.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use e2e::alertmanager::{
    Alertmanager, AlertmanagerConfig, Notification, WebhookAlert, WebhookReceiver,
};
use e2e::wait::wait_until_empty;
use e2e::{Cluster, TestNamespace, fixture, wait_for};
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::ListParams;
use kube::{Api, ResourceExt};
use serde_json::{Value, json};

const TIMEOUT: Duration = Duration::from_secs(180);
const MANAGER: &str = "e2e-alerting";
const NAME: &str = "prom";
const ZONES: [&str; 3] = ["zone-a", "zone-b", "zone-c"];
const ALERT: &str = "ZoneBTargetUp";
/// Alertmanager's route.group_interval (e2e::alertmanager's configuration).
const GROUP_INTERVAL: Duration = Duration::from_secs(2);

/// The ShardedPrometheus [`NAME`] under test, with the shard controller watching its namespace.
type Fixture = fixture::Sprom;

/// A Prometheus pod of the ShardedPrometheus: its shard and address.
struct Replica {
    name: String,
    shard: usize,
    address: SocketAddr,
}

impl Replica {
    /// The sum of the samples of `metric` (every label set) on the pod's /metrics.
    async fn metric(&self, metric: &str) -> Result<f64, String> {
        let (code, body) = e2e::process::http_get_from(self.address, "/metrics").await?;
        if code != 200 {
            return Err(format!("{}: /metrics HTTP {code}", self.name));
        }
        Ok(metric_in(&body, metric))
    }

    /// The alerts the pod's rule evaluation holds (pending or firing), from its API.
    async fn alerts(&self) -> Result<Vec<Value>, String> {
        let (code, body) = e2e::process::http_get_from(self.address, "/api/v1/alerts").await?;
        if code != 200 {
            return Err(format!("{}: /api/v1/alerts HTTP {code}", self.name));
        }
        let body: Value = serde_json::from_str(&body).map_err(|e| e.to_string())?;
        Ok(body["data"]["alerts"]
            .as_array()
            .cloned()
            .unwrap_or_default())
    }

    /// (notifications sent, Alertmanagers discovered, notification errors, dropped).
    async fn notification_figures(&self) -> Result<(f64, f64, f64, f64), String> {
        let (code, body) = e2e::process::http_get_from(self.address, "/metrics").await?;
        if code != 200 {
            return Err(format!("{}: /metrics HTTP {code}", self.name));
        }
        Ok((
            metric_in(&body, "prometheus_notifications_sent_total"),
            metric_in(&body, "prometheus_notifications_alertmanagers_discovered"),
            metric_in(&body, "prometheus_notifications_errors_total"),
            metric_in(&body, "prometheus_notifications_dropped_total"),
        ))
    }
}

/// The sum of the samples of `metric` in a text exposition (0 when absent).
fn metric_in(text: &str, metric: &str) -> f64 {
    text.lines()
        .filter(|line| {
            line.strip_prefix(metric)
                .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
        })
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Whether a notification is about the alert of this test.
fn about_the_alert(n: &Notification) -> bool {
    n.group_labels.get("alertname").map(String::as_str) == Some(ALERT)
        || n.alerts
            .iter()
            .any(|a| a.labels.get("alertname").map(String::as_str) == Some(ALERT))
}

#[tokio::test]
#[ignore = "needs the local zonal cluster with its real nodes (make e2e)"]
async fn alerting_alertmanager_on_a_real_node_notifies_the_receiver_in_the_test_process() {
    // The test harness alone, no controller: an alert posted to Alertmanager's API reaches the
    // webhook receiver on the host from a pod of each zone's node, firing then resolved.
    let cluster = Cluster::get();
    let real = e2e::real::RealNodes::of(&cluster);
    let host = e2e::alertmanager::host_address(&cluster.client().await).await;
    for zone in ZONES {
        let ns = TestNamespace::create(&cluster, &format!("alertmanager-{zone}")).await;
        let receiver = WebhookReceiver::start(host).await;
        let alertmanager = Alertmanager::deploy(
            &ns,
            &real,
            &AlertmanagerConfig {
                zone,
                group_by: &["..."],
                webhook_url: &receiver.url(),
            },
        )
        .await;
        let labels = json!({"alertname": "Posted", "zone": zone});
        alertmanager
            .post_alerts(&json!([{"labels": labels}]))
            .await
            .unwrap();
        let firing = receiver
            .wait_for("the posted alert notified", 1, TIMEOUT, |n| {
                n.status == "firing"
            })
            .await;
        assert_eq!(firing[0].alerts[0].labels["zone"], zone);
        let now = k8s_openapi::jiff::Timestamp::now().to_string();
        alertmanager
            .post_alerts(&json!([{"labels": labels, "endsAt": now}]))
            .await
            .unwrap();
        receiver
            .wait_for("the posted alert notified resolved", 1, TIMEOUT, |n| {
                n.status == "resolved"
            })
            .await;
        eprintln!("{zone}:\n{}", receiver.describe());
    }
}

#[tokio::test]
#[ignore = "needs the local zonal cluster with its real nodes (make e2e)"]
async fn alerting_one_notification_per_shard_alert_from_both_replicas_then_resolved() {
    let started = Instant::now();
    let cluster = Cluster::get();
    let real = e2e::real::RealNodes::of(&cluster);
    let fx = Fixture::new("alerting", NAME, MANAGER, TIMEOUT).await;
    fx.prometheus_service_account().await;
    let (receiver, alertmanager) = receiver_and_alertmanager_in_zone_a(&fx, &real).await;
    let (real_zones, zone_b_target) = one_target_per_zone(&fx, &real).await;
    create_the_rule(&fx, &zone_b_target).await;
    let generation = fx.apply(alerting_spec(&fx, &real)).await;
    fixture::wait_object(
        &fx.sproms,
        NAME,
        "3 ready shards of 2 replicas",
        TIMEOUT,
        |sprom| {
            let status = fixture::status_of(sprom);
            if status.observed_generation == generation && status.ready_shards == 3 {
                Ok(())
            } else {
                Err(format!(
                    "generation {} observed, {} ready shards",
                    status.observed_generation, status.ready_shards
                ))
            }
        },
    )
    .await;
    let replicas = replicas_in_their_shards_zones(&fx, &real_zones).await;
    assert_eq!(replicas.len(), 6, "3 shards x 2 replicas");
    let shard_1: Vec<&Replica> = replicas.iter().filter(|r| r.shard == 1).collect();
    assert_eq!(shard_1.len(), 2);
    let ready_at = started.elapsed();

    // The first firing notification for the alert.
    let firing = |n: &Notification| about_the_alert(n) && n.status == "firing";
    let first = receiver
        .wait_for("a firing notification for the alert", 1, TIMEOUT, firing)
        .await
        .remove(0);
    let first_at = started.elapsed();
    let mut figures = wait_both_replicas_sent(&shard_1).await;
    let both_sent_at = started.elapsed();

    // No second firing notification for the group: watched for long enough after both replicas
    // sent that a copy of the second would have been notified (group_wait 1 s, group_interval 2 s,
    // an evaluation every 2 s).
    let window = GROUP_INTERVAL * 5;
    let firing_notifications = receiver
        .assert_at_most_for("firing notifications for the alert", 1, window, firing)
        .await;
    assert_eq!(firing_notifications.len(), 1);
    let alert = assert_the_one_notification(&first, &zone_b_target);
    let am = assert_alertmanager_holds_the_alert_once(&alertmanager, alert).await;
    assert_only_shard_1_holds_and_sent_the_alert(&replicas, &shard_1, &mut figures).await;
    let firing_phase_done_at = started.elapsed();
    let resolved_after =
        the_alert_resolves_with_its_target(&fx, &receiver, &alertmanager, &zone_b_target, alert)
            .await;

    eprintln!("---- alerting figures ----");
    eprintln!(
        "shards ready at {:.1}s; first firing notification at {:.1}s; both shard-1 replicas had sent at {:.1}s; \
         quiet window {window:?}; firing phase checked at {:.1}s; resolved notified {:.1}s after the target's deletion; total {:.1}s",
        ready_at.as_secs_f64(),
        first_at.as_secs_f64(),
        both_sent_at.as_secs_f64(),
        firing_phase_done_at.as_secs_f64(),
        resolved_after.as_secs_f64(),
        started.elapsed().as_secs_f64()
    );
    for replica in &replicas {
        let (sent, discovered, errors, dropped) = figures[&replica.name];
        eprintln!(
            "{} (shard {}): notifications_sent_total {sent}, alertmanagers_discovered {discovered}, errors {errors}, dropped {dropped}",
            replica.name, replica.shard
        );
    }
    eprintln!(
        "alertmanager: alerts_received_total{{status=firing}} {}, notifications_total {}, \
         notifications_failed_total {}; alerts held while firing: {}",
        am.received_firing, am.webhook_sent, am.webhook_failed, am.held
    );
    eprintln!(
        "firing notification labels: {:?}\nwebhook notifications received:\n{}",
        alert.labels,
        receiver.describe()
    );
}

/// (notifications sent, Alertmanagers discovered, notification errors, dropped) of a replica.
type NotificationFigures = (f64, f64, f64, f64);

/// What Alertmanager reported while the alert fired.
struct AlertmanagerFigures {
    /// Alerts it held.
    held: usize,
    /// `alertmanager_alerts_received_total{status="firing"}`.
    received_firing: f64,
    webhook_sent: f64,
    webhook_failed: f64,
}

/// The receiver in this process, on the host address the real nodes' pods reach; Alertmanager
/// on the real node of zone-a (not the alert's zone: notifications cross zones), grouping by
/// alert name, shard and zone, so both replicas' copies of one shard's alert are one group.
async fn receiver_and_alertmanager_in_zone_a(
    fx: &Fixture,
    real: &e2e::real::RealNodes,
) -> (WebhookReceiver, Alertmanager) {
    let (receiver, alertmanager) =
        Alertmanager::deploy_with_receiver(&fx.ns, real, "zone-a", &["alertname", "shard", "zone"])
            .await;
    eprintln!(
        "alertmanager {} at {}:{}, webhook receiver at {}",
        alertmanager.pod_name,
        alertmanager.pod_ip,
        e2e::alertmanager::PORT,
        receiver.url()
    );
    (receiver, alertmanager)
}

/// The zone of the real node `pod` runs on (`real_zones`: node -> zone).
fn zone_of(real_zones: &BTreeMap<String, String>, pod: &Pod) -> String {
    real_zones[e2e::pods::node_of(pod).unwrap()].clone()
}

/// The metrics target on the real nodes, spread evenly over the zones, one per zone: the real
/// nodes' zones, and the name of the zone-b target.
async fn one_target_per_zone(
    fx: &Fixture,
    real: &e2e::real::RealNodes,
) -> (BTreeMap<String, String>, String) {
    let targets = real.run_metrics_targets(&fx.ns, "target", 3, TIMEOUT).await;
    let real_zones = e2e::real::nodes(&fx.ns.client).await;
    let mut target_zones: Vec<String> = targets.iter().map(|p| zone_of(&real_zones, p)).collect();
    target_zones.sort();
    assert_eq!(target_zones, ZONES, "one target per zone");
    let zone_b_target = targets
        .iter()
        .find(|pod| zone_of(&real_zones, pod) == "zone-b")
        .unwrap()
        .name_any();
    (real_zones, zone_b_target)
}

/// The rule: fires while the zone-b target is up. Only shard 1 (zone-b) scrapes it, so only
/// shard 1 has the series; shards 0 and 2 evaluate the same rule over nothing.
async fn create_the_rule(fx: &Fixture, zone_b_target: &str) {
    let rule = format!(
        "groups:\n\
         - name: zone-b\n\
         \x20 interval: 2s\n\
         \x20 rules:\n\
         \x20 - alert: {ALERT}\n\
         \x20   expr: up{{job=\"targets\", pod=\"{zone_b_target}\"}} == 1\n\
         \x20   for: 0s\n\
         \x20   labels: {{severity: info}}\n\
         \x20   annotations: {{summary: 'the target {zone_b_target} of zone-b is up'}}\n"
    );
    let rules: Api<ConfigMap> = fx.ns.api();
    fixture::create(
        &rules,
        json!({
            "metadata": {"name": "rules"},
            "data": {"alerts.yaml": rule},
        }),
    )
    .await;
}

/// Three shards of two replicas on the real nodes, scraping the targets every 2 s (labelled
/// with their pod), evaluating the rule every 2 s, sending to the Alertmanager by its Service,
/// relabelling alerts with `team: sre`.
fn alerting_spec(fx: &Fixture, real: &e2e::real::RealNodes) -> Value {
    fixture::on_real_nodes(
        real,
        json!({
            "shards": 3,
            "replicas": 2,
            "scrapeInterval": "2s",
            "evaluationInterval": "2s",
            "scrapeConfigs": [{
                "job_name": "targets",
                "kubernetes_sd_configs": [{"role": "pod", "namespaces": {"names": [fx.ns.name]}}],
                "relabel_configs": [
                    {"source_labels": ["__meta_kubernetes_pod_label_app"], "regex": "target", "action": "keep"},
                    {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
                ],
            }],
            "ruleFiles": [{"configMap": "rules"}],
            "alerting": {
                // The namespace defaults to the ShardedPrometheus's.
                "alertmanagers": [{"name": e2e::alertmanager::NAME, "port": e2e::alertmanager::PORT_NAME}],
                "alertRelabelConfigs": [{"targetLabel": "team", "replacement": "sre", "action": "replace"}],
            },
        }),
    )
}

/// The Prometheus pods of the ShardedPrometheus, each asserted in its shard's zone.
async fn replicas_in_their_shards_zones(
    fx: &Fixture,
    real_zones: &BTreeMap<String, String>,
) -> Vec<Replica> {
    let pods: Api<Pod> = fx.ns.api();
    pods.list(&ListParams::default().labels(&format!("app.kubernetes.io/instance={NAME}")))
        .await
        .unwrap()
        .items
        .iter()
        .map(|pod| {
            let shard: usize = pod.labels()["zonecontrol.k8s.aws/shard"].parse().unwrap();
            assert_eq!(
                zone_of(real_zones, pod),
                ZONES[shard],
                "{} in its shard's zone",
                pod.name_any()
            );
            let ip = pod.status.as_ref().unwrap().pod_ip.as_ref().unwrap();
            Replica {
                name: pod.name_any(),
                shard,
                address: format!("{ip}:9090").parse().unwrap(),
            }
        })
        .collect()
}

/// Both replicas of shard 1 discovered the Alertmanager and sent it the alert: their figures.
async fn wait_both_replicas_sent(shard_1: &[&Replica]) -> BTreeMap<String, NotificationFigures> {
    let mut figures = BTreeMap::new();
    for replica in shard_1 {
        let (sent, discovered, errors, dropped) = wait_for(
            &format!("{} sent its alert", replica.name),
            Duration::from_secs(60),
            || async {
                let figures = replica.notification_figures().await?;
                if figures.0 > 0.0 && figures.1 >= 1.0 {
                    Ok(figures)
                } else {
                    Err(format!("sent, discovered, errors, dropped: {figures:?}"))
                }
            },
        )
        .await;
        figures.insert(replica.name.clone(), (sent, discovered, errors, dropped));
    }
    figures
}

/// The one notification: one alert, shard 1 in zone-b, no replica label, team=sre. Returns the
/// alert.
fn assert_the_one_notification<'a>(
    first: &'a Notification,
    zone_b_target: &str,
) -> &'a WebhookAlert {
    assert_eq!(
        first.alerts.len(),
        1,
        "one alert in the notification: {first:?}"
    );
    let alert = &first.alerts[0];
    assert_eq!(alert.status, "firing");
    assert_eq!(
        alert.labels.get("alertname").map(String::as_str),
        Some(ALERT)
    );
    assert_eq!(
        alert.labels.get("shard").map(String::as_str),
        Some("1"),
        "{alert:?}"
    );
    assert_eq!(
        alert.labels.get("zone").map(String::as_str),
        Some("zone-b"),
        "{alert:?}"
    );
    assert_eq!(
        alert.labels.get("team").map(String::as_str),
        Some("sre"),
        "the alert relabel rule: {alert:?}"
    );
    assert_eq!(
        alert.labels.get("pod").map(String::as_str),
        Some(zone_b_target),
        "{alert:?}"
    );
    assert!(
        !alert.labels.contains_key("prometheus_replica"),
        "no replica label: {alert:?}"
    );
    assert_eq!(
        first.common_labels.get("shard").map(String::as_str),
        Some("1")
    );
    assert_eq!(
        first.common_labels.get("zone").map(String::as_str),
        Some("zone-b")
    );
    assert_eq!(
        first.group_labels,
        BTreeMap::from([
            ("alertname".to_string(), ALERT.to_string()),
            ("shard".to_string(), "1".to_string()),
            ("zone".to_string(), "zone-b".to_string()),
        ])
    );
    alert
}

/// Alertmanager holds exactly one alert, `alert` (the two replicas' copies are one), and
/// received more than one copy of it.
async fn assert_alertmanager_holds_the_alert_once(
    alertmanager: &Alertmanager,
    alert: &WebhookAlert,
) -> AlertmanagerFigures {
    let held = alertmanager.alerts().await.unwrap();
    assert_eq!(held.len(), 1, "one alert in Alertmanager: {held:?}");
    assert_eq!(
        held[0].labels, alert.labels,
        "the notified alert is Alertmanager's"
    );
    let am_metrics = alertmanager.metrics().await.unwrap();
    let received_firing: f64 = am_metrics
        .lines()
        .filter(|l| {
            l.starts_with("alertmanager_alerts_received_total") && l.contains("status=\"firing\"")
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert!(
        received_firing >= 2.0,
        "Alertmanager received the alert from both replicas: {received_firing} firing alerts received"
    );
    AlertmanagerFigures {
        held: held.len(),
        received_firing,
        webhook_sent: metric_in(&am_metrics, "alertmanager_notifications_total"),
        webhook_failed: metric_in(&am_metrics, "alertmanager_notifications_failed_total"),
    }
}

/// Shards 0 and 2 discovered the Alertmanager too, hold no alert and sent nothing (their
/// figures added to `figures`); both replicas of shard 1 hold the alert, firing, and sent it
/// without errors.
async fn assert_only_shard_1_holds_and_sent_the_alert(
    replicas: &[Replica],
    shard_1: &[&Replica],
    figures: &mut BTreeMap<String, NotificationFigures>,
) {
    for replica in replicas.iter().filter(|r| r.shard != 1) {
        let (sent, discovered, errors, dropped) = replica.notification_figures().await.unwrap();
        figures.insert(replica.name.clone(), (sent, discovered, errors, dropped));
        assert!(
            discovered >= 1.0,
            "{} discovered the Alertmanager: {discovered}",
            replica.name
        );
        assert_eq!(
            sent, 0.0,
            "{} (shard {}) sent nothing",
            replica.name, replica.shard
        );
        let alerts = replica.alerts().await.unwrap();
        assert!(
            alerts.is_empty(),
            "{} holds no alert: {alerts:?}",
            replica.name
        );
    }
    for replica in shard_1 {
        let alerts = replica.alerts().await.unwrap();
        assert_eq!(
            alerts.len(),
            1,
            "{} holds the alert: {alerts:?}",
            replica.name
        );
        assert_eq!(alerts[0]["state"], "firing");
        assert_eq!(
            replica
                .metric("prometheus_notifications_errors_total")
                .await
                .unwrap(),
            0.0,
            "{} sent without errors",
            replica.name
        );
    }
}

/// The condition resolves: the zone-b target goes away (its Deployment's replacement has
/// another name), so `up` of that pod is no longer 1 on either replica of shard 1. The same
/// alert is notified resolved and Alertmanager holds none. Returns how long the resolved
/// notification took after the deletion.
async fn the_alert_resolves_with_its_target(
    fx: &Fixture,
    receiver: &WebhookReceiver,
    alertmanager: &Alertmanager,
    zone_b_target: &str,
    alert: &WebhookAlert,
) -> Duration {
    let pods: Api<Pod> = fx.ns.api();
    let resolve_at = Instant::now();
    e2e::pods::delete_and_wait_gone(&pods, zone_b_target, TIMEOUT).await;
    let resolved = |n: &Notification| {
        about_the_alert(n)
            && n.status == "resolved"
            && n.alerts.iter().all(|a| a.status == "resolved")
    };
    let resolved_notification = receiver
        .wait_for(
            "a resolved notification for the alert",
            1,
            TIMEOUT,
            resolved,
        )
        .await
        .remove(0);
    let resolved_after = resolve_at.elapsed();
    let resolved_alert = &resolved_notification.alerts[0];
    assert_eq!(resolved_notification.alerts.len(), 1);
    assert_eq!(
        resolved_alert.labels, alert.labels,
        "the same alert resolved"
    );
    // Both replicas send it, each with the time its own rule fired; Alertmanager keeps the
    // earliest it has seen, and the first notification may go out before the earlier replica's
    // copy arrived: the resolved alert started no later than the notified one.
    let started = |raw: &str| raw.parse::<k8s_openapi::jiff::Timestamp>().unwrap();
    assert!(
        started(&resolved_alert.starts_at) <= started(&alert.starts_at),
        "the same alert resolved: started {} after {}",
        resolved_alert.starts_at,
        alert.starts_at
    );
    assert_ne!(resolved_alert.ends_at, alert.ends_at);
    wait_until_empty(
        "Alertmanager holds no active alert",
        Duration::from_secs(30),
        || alertmanager.alerts(),
    )
    .await;
    resolved_after
}
