//! ConfigLoaded against real Prometheus pods on the real nodes: a configuration that passes the
//! controller's checks but that Prometheus refuses is reported per shard (ReloadFailed, with a
//! Warning event and the per-shard metric at 0) while the previous configuration keeps scraping;
//! the fixed spec brings ConfigLoaded back to True. The test prints how long each step took: the
//! Secret write, the kubelet's copy into the pods with Prometheus's reload, and the condition.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use e2e::fixture::{self, Wanted};
use e2e::process::{http_get_from, metric_sum};
use e2e::{Cluster, wait_for};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Pod, Secret};
use k8s_openapi::api::events::v1::Event;
use kube::api::ListParams;
use kube::{Api, ResourceExt};
use serde_json::{Value, json};
use zone_api::ShardedPrometheus;
use zone_api::conditions::Conditions;
use zone_api::sprom::{condition, reason};

const NAME: &str = "prom";
const MANAGER: &str = "e2e-sprom-health";
const ZONES: [&str; 3] = ["zone-a", "zone-b", "zone-c"];
/// Pods and shards starting on the real nodes.
const START: Duration = Duration::from_secs(180);
/// A changed Secret reaching a running pod (the kubelet's sync, 1 min, plus Prometheus's
/// 30 s auto-reload check), with margin.
const PROPAGATION: Duration = Duration::from_secs(240);
/// The bound the prober promises once a pod refused its configuration.
const TO_CONDITION: Duration = Duration::from_secs(60);

/// A scrape job of the target pods of the test namespace; `extra` keys are added as they are.
fn job(namespace: &str, extra: Value) -> Value {
    let mut job = json!({
        "job_name": "targets",
        "scrape_interval": "2s",
        "kubernetes_sd_configs": [{"role": "pod", "namespaces": {"names": [namespace]}}],
        "relabel_configs": [{"source_labels": ["__meta_kubernetes_pod_label_app"], "regex": "target", "action": "keep"}],
    });
    job.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    job
}

/// The ShardedPrometheus [`NAME`] under test (its Prometheus ServiceAccount bound), and the real
/// nodes its shards run on.
struct Fixture {
    sprom: fixture::Sprom,
    real: e2e::real::RealNodes,
}

impl Fixture {
    async fn new(prefix: &str) -> Fixture {
        let cluster = Cluster::get();
        let real = e2e::real::RealNodes::of(&cluster);
        let sprom = fixture::Sprom::new(prefix, NAME, MANAGER, START).await;
        sprom.prometheus_service_account().await;
        Fixture { sprom, real }
    }

    fn spec(&self, job: Value) -> Value {
        fixture::on_real_nodes(
            &self.real,
            json!({
                "shards": 3,
                "replicas": 1,
                "scrapeConfigs": [job],
            }),
        )
    }

    /// Waits until the status of `generation` has ConfigLoaded with `status` and `reason`, and
    /// `check` accepts its message.
    async fn wait_config_loaded(
        &self,
        generation: i64,
        status: &str,
        reason: &str,
        timeout: Duration,
        check: impl Fn(&str) -> bool,
    ) -> ShardedPrometheus {
        let wanted = Wanted {
            type_: condition::CONFIG_LOADED,
            status,
            reason,
        };
        self.sprom
            .wait_condition(generation, wanted, timeout, check)
            .await
    }

    /// Waits until the per-shard config-loaded gauges of the three shards add up to `sum` (3:
    /// all loaded, 0: none).
    async fn wait_gauges(&self, sum: f64) {
        let series = "zone_aware_sprom_shard_config_loaded{";
        wait_for(
            &format!("the config-loaded gauges adding up to {sum}"),
            Duration::from_secs(30),
            || async {
                let text = e2e::process::http_get(self.sprom.metrics_port, "/metrics")
                    .await
                    .ok_or("no metrics")?;
                let count = text.lines().filter(|l| l.starts_with(series)).count();
                let total = metric_sum(self.sprom.metrics_port, series, None).await;
                match (count, total) {
                    (3, total) if total == sum => Ok(()),
                    _ => Err(format!("{count} series adding up to {total}")),
                }
            },
        )
        .await;
    }
}

/// `GET <path>` of the Prometheus at `ip`, as JSON.
async fn prometheus_get(ip: &str, path: &str) -> Result<Value, String> {
    let address = format!("{ip}:9090").parse().map_err(|e| format!("{e}"))?;
    let (code, body) = http_get_from(address, path).await?;
    if code != 200 {
        return Err(format!("HTTP {code}: {body}"));
    }
    serde_json::from_str(&body).map_err(|e| e.to_string())
}

/// The active targets of job `targets` of the Prometheus at `ip`: address → (health, last
/// scrape).
async fn targets(ip: &str) -> Result<BTreeMap<String, (String, String)>, String> {
    let body = prometheus_get(ip, "/api/v1/targets?state=active").await?;
    let active = body["data"]["activeTargets"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    Ok(active
        .iter()
        .filter(|t| t["scrapePool"] == "targets")
        .map(|t| {
            let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
            (
                text(&t["discoveredLabels"]["__address__"]),
                (text(&t["health"]), text(&t["lastScrape"])),
            )
        })
        .collect())
}

/// Waits until every target of job `targets` of the Prometheus at `ip` is up and has been
/// scraped again since `before` (so it is scraping now, not only up once).
async fn wait_scraping(what: &str, ip: &str, before: &BTreeMap<String, (String, String)>) {
    wait_for(what, Duration::from_secs(60), || async {
        let now = targets(ip).await?;
        let fresh = !now.is_empty()
            && now.iter().all(|(address, (health, last))| {
                health == "up" && before.get(address).is_none_or(|(_, was)| was != last)
            });
        match fresh {
            true => Ok(()),
            false => Err(format!("{now:?}")),
        }
    })
    .await;
}

/// The shard → pod IP of the running Prometheus pods.
async fn prometheus_pods(pods: &Api<Pod>) -> BTreeMap<u32, (String, String)> {
    let list = pods
        .list(&ListParams::default().labels(&format!("app.kubernetes.io/instance={NAME}")))
        .await
        .unwrap()
        .items;
    list.iter()
        .map(|pod| {
            let shard = pod.labels()["zonecontrol.k8s.aws/shard"].parse().unwrap();
            let ip = pod.status.as_ref().unwrap().pod_ip.clone().unwrap();
            (shard, (pod.name_any(), ip))
        })
        .collect()
}

fn seconds(duration: Duration) -> String {
    format!("{:.1} s", duration.as_secs_f64())
}

#[tokio::test]
#[ignore = "needs the local zonal cluster with its real nodes (make e2e)"]
async fn sprom_health_a_configuration_prometheus_refuses_is_reported_per_shard_while_the_old_one_scrapes()
 {
    let fx = Fixture::new("sprom-health").await;
    let ns = fx.sprom.ns.name.clone();
    let good = fx.spec(job(&ns, json!({})));
    let prometheus = a_good_configuration_scrapes_everywhere(&fx, &good).await;

    // A configuration the controller accepts (it lets keys it does not know through) and
    // Prometheus refuses: `scrape_intervall` is no key of a scrape config. (promtool check
    // config: "field scrape_intervall not found in type config.ScrapeConfig".)
    let changed = Instant::now();
    let bad = fx.spec(job(&ns, json!({"scrape_intervall": "5s"})));
    let generation = fx.sprom.apply(bad).await;
    let (written, refused, reported) = refusal_timings(&fx, generation, changed, &prometheus).await;
    report_refusal_timings(written, &refused, reported);
    assert_reload_failed_reported(&fx).await;
    fx.wait_gauges(0.0).await;

    // The previous configuration keeps scraping: the old job's targets are up, and scraped
    // again since the refusal.
    for (shard, (_, ip)) in &prometheus {
        let before = targets(ip).await.unwrap();
        assert!(!before.is_empty(), "shard {shard} still has the old job");
        wait_scraping(
            &format!("shard {shard} still scraping with the previous configuration"),
            ip,
            &before,
        )
        .await;
    }

    // Fixed: every shard loads it, ConfigLoaded is True again.
    let fixed = Instant::now();
    let generation = fx.sprom.apply(good).await;
    fx.wait_config_loaded(
        generation,
        "True",
        reason::CONFIG_LOADED,
        PROPAGATION + TO_CONDITION,
        |m| m.starts_with("every Prometheus pod asked (3)"),
    )
    .await;
    println!(
        "after the fix: ConfigLoaded True at {}",
        seconds(fixed.elapsed())
    );
    for (shard, (_, ip)) in &prometheus {
        let info = prometheus_get(ip, "/api/v1/status/runtimeinfo")
            .await
            .unwrap();
        assert_eq!(
            info["data"]["reloadConfigSuccess"].as_bool(),
            Some(true),
            "shard {shard}"
        );
    }
}

/// The metrics target, one pod per zone on the real nodes, and the `good` configuration: every
/// shard's Prometheus runs it and scrapes its zone's target. Returns the Prometheus pods.
async fn a_good_configuration_scrapes_everywhere(
    fx: &Fixture,
    good: &Value,
) -> BTreeMap<u32, (String, String)> {
    let deployments: Api<Deployment> = fx.sprom.ns.api();
    let target = json!({
        "metadata": {"name": "target"},
        "spec": {
            "replicas": 3,
            "selector": {"matchLabels": {"app": "target"}},
            "template": fx.real.metrics_target_template("target"),
        },
    });
    fixture::create(&deployments, target).await;
    let pods: Api<Pod> = fx.sprom.ns.api();
    e2e::pods::wait_available(&pods, "app=target", 3, START).await;

    let generation = fx.sprom.apply(good.clone()).await;
    e2e::pods::wait_available(
        &pods,
        &format!("app.kubernetes.io/instance={NAME}"),
        3,
        START,
    )
    .await;
    fx.wait_config_loaded(generation, "True", reason::CONFIG_LOADED, START, |m| {
        m.starts_with("every Prometheus pod asked (3)")
    })
    .await;
    let prometheus = prometheus_pods(&pods).await;
    assert_eq!(prometheus.len(), 3, "{prometheus:?}");
    for (shard, (_, ip)) in &prometheus {
        wait_scraping(
            &format!("shard {shard} scraping its zone's target"),
            ip,
            &BTreeMap::new(),
        )
        .await;
    }
    fx.wait_gauges(3.0).await;
    prometheus
}

/// After the refused configuration of `generation` was applied at `changed`: when the three
/// config Secrets were rewritten, when each shard's pod tried it and failed, and when
/// ConfigLoaded turned False (ReloadFailed) naming every shard.
async fn refusal_timings(
    fx: &Fixture,
    generation: i64,
    changed: Instant,
    prometheus: &BTreeMap<u32, (String, String)>,
) -> (Duration, Vec<(u32, Duration)>, Duration) {
    let secrets: Api<Secret> = fx.sprom.ns.api();
    let secrets_written = async {
        wait_for(
            "the three config Secrets rewritten",
            PROPAGATION,
            || async {
                for shard in 0..3 {
                    let secret = secrets
                        .get(&format!("{NAME}-shard-{shard}"))
                        .await
                        .map_err(|e| e.to_string())?;
                    let config = secret
                        .data
                        .and_then(|d| d.get("prometheus.yml").cloned())
                        .map(|b| String::from_utf8_lossy(&b.0).into_owned())
                        .unwrap_or_default();
                    if !config.contains("scrape_intervall") {
                        return Err(format!("shard {shard} not yet"));
                    }
                }
                Ok(changed.elapsed())
            },
        )
        .await
    };
    // Each pod's last reload failing: the Secret reached it and Prometheus tried it.
    let refused_by_pods = futures::future::join_all(prometheus.iter().map(|(shard, (_, ip))| {
        let ip = ip.clone();
        async move {
            let refused = wait_for(
                &format!("shard {shard}'s Prometheus trying the new configuration"),
                PROPAGATION,
                || async {
                    let info = prometheus_get(&ip, "/api/v1/status/runtimeinfo").await?;
                    match info["data"]["reloadConfigSuccess"].as_bool() {
                        Some(false) => Ok(changed.elapsed()),
                        other => Err(format!("reloadConfigSuccess {other:?}")),
                    }
                },
            )
            .await;
            (*shard, refused)
        }
    }));
    let condition = async {
        fx.wait_config_loaded(
            generation,
            "False",
            reason::RELOAD_FAILED,
            PROPAGATION + TO_CONDITION,
            |message| {
                ZONES
                    .iter()
                    .enumerate()
                    .all(|(shard, zone)| message.contains(&format!("shard {shard} ({zone}): pod")))
            },
        )
        .await;
        changed.elapsed()
    };
    tokio::join!(secrets_written, refused_by_pods, condition)
}

/// Prints how long each step of the refusal took, and asserts ConfigLoaded said so within
/// [`TO_CONDITION`] of the last pod's refusal.
fn report_refusal_timings(written: Duration, refused: &[(u32, Duration)], reported: Duration) {
    let last_refusal = refused.iter().map(|(_, at)| *at).max().unwrap();
    let per_pod: Vec<String> = refused
        .iter()
        .map(|(shard, at)| format!("shard {shard} {}", seconds(*at)))
        .collect();
    println!(
        "after the spec change: config Secrets written at {}; refused by the pods at {} \
         (propagation from the Secret: {} to {}); ConfigLoaded False (ReloadFailed, every \
         shard) at {}, {} after the last pod refused it",
        seconds(written),
        per_pod.join(", "),
        seconds(
            refused
                .iter()
                .map(|(_, at)| *at)
                .min()
                .unwrap()
                .saturating_sub(written)
        ),
        seconds(last_refusal.saturating_sub(written)),
        seconds(reported),
        seconds(reported.saturating_sub(last_refusal)),
    );
    assert!(
        reported.saturating_sub(last_refusal) <= TO_CONDITION,
        "ConfigLoaded said so {} after the last pod refused the configuration",
        seconds(reported.saturating_sub(last_refusal))
    );
}

/// ConfigLoaded's message says the pods refused the configuration and still run the previous
/// one, Available stays, and a Warning event ReloadFailed names the resource.
async fn assert_reload_failed_reported(fx: &Fixture) {
    let sprom = fx.sprom.sproms.get(NAME).await.unwrap();
    let status = sprom.status.unwrap();
    let message = &status.condition(condition::CONFIG_LOADED).unwrap().message;
    println!("ConfigLoaded message: {message}");
    assert!(message.contains("refused the configuration or a rule file (last reload failed)"));
    assert!(message.contains("is still running"));
    assert_eq!(
        status.true_reason(condition::AVAILABLE),
        Some(reason::SHARDS_READY),
        "the pods still serve: Available stays"
    );
    let events: Api<Event> = fx.sprom.ns.api();
    let warnings = fixture::wait_events(&events, "the ReloadFailed event", |e| {
        e.reason.as_deref() == Some(reason::RELOAD_FAILED)
    })
    .await;
    assert!(
        warnings
            .iter()
            .all(|e| e.type_.as_deref() == Some("Warning")
                && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(NAME))
    );
}

/// A ShardedPrometheus whose Prometheus ServiceAccount does not exist: the StatefulSet
/// controller cannot create a single pod, and the resource's own status says why (Available
/// False, PodsNotCreated, naming each shard and quoting the API server's refusal, which names
/// the ServiceAccount), with a Warning event; once the ServiceAccount is made, the pods are
/// created and the shards become available.
#[tokio::test]
#[ignore = "needs the local zonal cluster with its real nodes (make e2e)"]
async fn sprom_health_pods_the_api_server_refuses_are_named_in_the_status_until_the_service_account_exists()
 {
    let cluster = Cluster::get();
    let real = e2e::real::RealNodes::of(&cluster);
    let sprom = fixture::Sprom::new("sprom-no-sa", NAME, MANAGER, START).await;
    let fx = Fixture { sprom, real };
    let generation = fx
        .sprom
        .apply(fx.spec(job(&fx.sprom.ns.name, json!({}))))
        .await;
    let applied = Instant::now();
    let missing = format!(
        "error looking up service account {}/{}: serviceaccount \"{}\" not found",
        fx.sprom.ns.name,
        e2e::prometheus::SERVICE_ACCOUNT,
        e2e::prometheus::SERVICE_ACCOUNT
    );
    let wanted = Wanted {
        type_: condition::AVAILABLE,
        status: "False",
        reason: reason::PODS_NOT_CREATED,
    };
    let sprom = fx
        .sprom
        .wait_condition(generation, wanted, TO_CONDITION, |message| {
            (0..3).all(|shard| {
                message.contains(&format!(
                    "shard {shard} ({NAME}-shard-{shard}): its pods cannot be created: "
                ))
            }) && message.contains(&missing)
        })
        .await;
    println!(
        "Available PodsNotCreated {:.1?} after the apply: {}",
        applied.elapsed(),
        sprom
            .status
            .as_ref()
            .and_then(|s| s.condition(condition::AVAILABLE))
            .map(|c| c.message.clone())
            .unwrap_or_default()
    );
    let status = fixture::status_of(&sprom);
    let degraded = status.condition(condition::DEGRADED).unwrap();
    assert_eq!(
        (degraded.status.as_str(), degraded.reason.as_str()),
        ("True", reason::PODS_NOT_CREATED)
    );
    // The controller records the event after it writes the status: wait for it.
    let warning = fixture::wait_events(&fx.sprom.ns.api(), "a PodsNotCreated event", |e| {
        e.reason.as_deref() == Some(reason::PODS_NOT_CREATED)
    })
    .await
    .pop()
    .expect("wait_events returns at least one event");
    assert_eq!(warning.type_.as_deref(), Some("Warning"));
    assert!(
        warning
            .note
            .as_deref()
            .unwrap_or_default()
            .contains(&missing),
        "{:?}",
        warning.note
    );

    fx.sprom.prometheus_service_account().await;
    let made = Instant::now();
    fx.sprom
        .wait_true(generation, condition::AVAILABLE, reason::SHARDS_READY)
        .await;
    println!(
        "Available ShardsReady {:.1?} after the ServiceAccount was made",
        made.elapsed()
    );
    // GitOps tools see it done: kstatus Current, Ready True.
    assert_eq!(
        fx.sprom.kstatus().await,
        (
            e2e::kstatus::Status::Current,
            Some(("True".into(), reason::SHARDS_READY.into()))
        )
    );
}
