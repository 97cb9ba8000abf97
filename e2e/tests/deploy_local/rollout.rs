//! The sample ShardedPrometheus's shards rolled under the deployed controllers, 3 shards × 2
//! replicas of real Prometheus over the three zones' real nodes, a metrics target per zone
//! scraped every 5 s (each counts the longest time it went unscraped: `GET /gap`):
//!
//! - strategy RollingUpdate first, as every StatefulSet rolls: the figure to beat (zones with
//!   unready shard pods at once, the longest gap);
//! - ZoneAware (the default): the StatefulSets `OnDelete`, the shard-controller's
//!   ZoneAwareUpdate rolls a pod-template change zone by zone — never unready shard pods in two
//!   zones at once, no target unscraped longer than an interval — and the status says so;
//! - a shard of the zone being rolled refusing its configuration pauses that ZoneAwareUpdate
//!   within one poll of the shard-controller, no pod is removed while it holds, and it resumes
//!   when the configuration loads again.

use std::net::SocketAddr;
use std::time::Instant;

use e2e::disruption::Monitor;
use e2e::fixture;
use e2e::process::http_request;
use futures::StreamExt;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::runtime::watcher;
use zone_api::sprom::reason;
use zone_api::{ShardedPrometheus, ZoneAwareUpdate};

use super::budgets::SHARD_PODS;
use super::*;

const TIMEOUT: Duration = Duration::from_secs(300);
/// The shards' scrape interval in this test.
const INTERVAL: Duration = Duration::from_secs(5);
/// The pod annotation each revision of the shards' template carries.
const REVISION: &str = "e2e.zonecontrol.k8s.aws/revision";
/// How long the shard-controller takes at most to hold the rollout once a shard refuses its
/// configuration: a probe round ([`PROBE_INTERVAL`], 15 s), then a reconcile; the rollout's own
/// look (10 s) bounds the case where the pods' answers came first.
const ONE_POLL: Duration = Duration::from_secs(15 + 10 + 5);

/// What one rollout did.
struct Rolled {
    zones_at_once: usize,
    unavailable_at_once: usize,
    longest_gap: f64,
    took: Duration,
}

pub async fn shards_roll_zone_by_zone(victim: &TestNamespace, real_nodes: &RealNodes) {
    let sproms: Api<ShardedPrometheus> = victim.api();
    let patch = |spec: serde_json::Value| {
        let sproms = sproms.clone();
        async move {
            sproms
                .patch(
                    "prometheus",
                    &PatchParams::default(),
                    &Patch::Merge(&json!({ "spec": spec })),
                )
                .await
                .unwrap();
        }
    };
    // The budgets back on (the drain test turned them off): the rollout evicts under them.
    patch(json!({"scrapeInterval": "5s", "disruptionBudgets": null})).await;
    let targets = scraped_targets(victim, real_nodes, &sproms).await;

    // The figure to beat: every StatefulSet rolling itself.
    let before = roll(victim, &targets, || {
        patch(json!({"rollout": {"strategy": "RollingUpdate"}, "podMetadata": {"annotations": {REVISION: "rolling-update"}}}))
    }, "rolling-update")
    .await;
    let zaus: Api<ZoneAwareUpdate> = victim.api();
    assert!(
        zaus.get_opt("prometheus-shards").await.unwrap().is_none(),
        "no ZoneAwareUpdate with RollingUpdate"
    );

    // Zone by zone.
    let after = roll(
        victim,
        &targets,
        || {
            patch(
                json!({"rollout": null, "podMetadata": {"annotations": {REVISION: "zone-aware"}}}),
            )
        },
        "zone-aware",
    )
    .await;
    println!(
        "shard rollout, 3 shards x 2 replicas over 3 zones, scrape interval {}s: RollingUpdate: \
         unready shard pods in {} zones at once ({} pods), longest unscraped {:.1}s, {:.0}s; \
         ZoneAware: {} zone(s) at once ({} pods), longest unscraped {:.1}s, {:.0}s",
        INTERVAL.as_secs(),
        before.zones_at_once,
        before.unavailable_at_once,
        before.longest_gap,
        before.took.as_secs_f64(),
        after.zones_at_once,
        after.unavailable_at_once,
        after.longest_gap,
        after.took.as_secs_f64(),
    );
    assert!(
        before.zones_at_once >= 2,
        "RollingUpdate took one zone at a time: the comparison shows nothing"
    );
    assert_eq!(
        after.zones_at_once, 1,
        "the zone-aware rollout took two zones at once"
    );
    assert!(
        after.longest_gap <= INTERVAL.as_secs_f64() + 1.0,
        "a target went unscraped {:.1}s during the zone-aware rollout",
        after.longest_gap
    );
    let zau = zaus.get("prometheus-shards").await.unwrap();
    let owners = zau.metadata.owner_references.clone().unwrap_or_default();
    assert!(
        owners
            .iter()
            .any(|o| o.kind == "ShardedPrometheus" && o.name == "prometheus")
    );
    wait_for("status.rollout done", TIMEOUT, || async {
        let sprom = sproms.get("prometheus").await.map_err(|e| e.to_string())?;
        let rollout = sprom
            .status
            .and_then(|s| s.rollout)
            .ok_or("no status.rollout")?;
        (rollout.old_replicas == 0 && rollout.zone_aware_update == "prometheus-shards")
            .then_some(())
            .ok_or(format!("{rollout:?}"))
    })
    .await;

    a_refused_configuration_holds_the_rollout(victim, &patch, &zaus).await;
}

/// One metrics target per zone on the real nodes, scraped by a static job of the sample (a
/// target without a zone: one shard's two replicas scrape it), once each has been scraped:
/// their addresses.
async fn scraped_targets(
    victim: &TestNamespace,
    real_nodes: &RealNodes,
    sproms: &Api<ShardedPrometheus>,
) -> Vec<SocketAddr> {
    let ready = real_nodes
        .run_metrics_targets(victim, "scraped", 3, TIMEOUT)
        .await;
    let targets: Vec<SocketAddr> = ready
        .iter()
        .map(|pod| {
            let ip = pod.status.as_ref().and_then(|s| s.pod_ip.clone()).unwrap();
            SocketAddr::new(ip.parse().unwrap(), 8080)
        })
        .collect();
    let sample = sproms.get("prometheus").await.unwrap();
    let mut jobs = sample.spec.scrape_configs.clone();
    let addresses: Vec<String> = targets.iter().map(ToString::to_string).collect();
    jobs.push(json!({"job_name": "scraped", "static_configs": [{"targets": addresses}]}));
    let patch = json!({"spec": {"scrapeConfigs": jobs}});
    sproms
        .patch("prometheus", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    for target in &targets {
        wait_for(&format!("{target} scraped"), TIMEOUT, || async {
            let (_, body) = http_request(*target, "GET", "/gap", None).await?;
            (gap_field(&body, "scrapes") >= 2.0)
                .then_some(())
                .ok_or(body)
        })
        .await;
    }
    targets
}

/// What the rollout's ZoneAwareUpdate and the ShardedPrometheus say, for a wait's last state.
async fn rollout_state(victim: &TestNamespace) -> String {
    let zaus: Api<ZoneAwareUpdate> = victim.api();
    let sproms: Api<ShardedPrometheus> = victim.api();
    let zau = match zaus.get_opt("prometheus-shards").await {
        Ok(Some(zau)) => format!(
            "ZoneAwareUpdate paused {} status {}",
            zau.spec.paused,
            serde_json::to_string(&zau.status).unwrap_or_default()
        ),
        other => format!("ZoneAwareUpdate: {other:?}"),
    };
    let sprom = sproms.get("prometheus").await.ok().and_then(|s| s.status);
    let rollout = sprom.and_then(|s| s.rollout);
    format!("{zau}; status.rollout {rollout:?}")
}

/// `name value` of a `GET /gap` answer.
fn gap_field(body: &str, name: &str) -> f64 {
    body.lines()
        .find_map(|line| line.strip_prefix(name)?.trim().parse().ok())
        .unwrap_or(0.0)
}

/// Makes the `change` rolling the shards to `revision`, and watches them until all 6 pods run it,
/// Ready: what it cost.
async fn roll<F, Fut>(
    victim: &TestNamespace,
    targets: &[SocketAddr],
    change: F,
    revision: &str,
) -> Rolled
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    for target in targets {
        http_request(*target, "PUT", "/gap", None).await.unwrap();
    }
    let monitor = Monitor::start(victim.api(), SHARD_PODS, 6).await;
    let started = Instant::now();
    change().await;
    let pods: Api<Pod> = victim.api();
    wait_for(
        &format!("6 shard pods Ready at {revision}"),
        TIMEOUT,
        || async {
            let list = pods
                .list(&ListParams::default().labels(SHARD_PODS))
                .await
                .map_err(|e| e.to_string())?
                .items;
            let done = list
                .iter()
                .filter(|pod| {
                    pods::is_available(pod)
                        && pod.annotations().get(REVISION).map(String::as_str) == Some(revision)
                })
                .count();
            if done == 6 && list.len() == 6 {
                return Ok(());
            }
            let state = rollout_state(victim).await;
            Err(format!("{done} of {} done; {state}", list.len()))
        },
    )
    .await;
    let took = started.elapsed();
    let mut longest_gap: f64 = 0.0;
    for target in targets {
        let (_, body) = http_request(*target, "GET", "/gap", None).await.unwrap();
        longest_gap = longest_gap.max(gap_field(&body, "longest_gap_seconds"));
    }
    let (unavailable_at_once, zones_at_once) = monitor.worst();
    Rolled {
        zones_at_once,
        unavailable_at_once,
        longest_gap,
        took,
    }
}

/// A configuration every shard refuses (a scrape config key Prometheus does not know), then a
/// template change: the rollout starts and is held within one poll, removes no pod while held,
/// and completes once the configuration is fixed.
async fn a_refused_configuration_holds_the_rollout<F, Fut>(
    victim: &TestNamespace,
    patch: &F,
    zaus: &Api<ZoneAwareUpdate>,
) where
    F: Fn(serde_json::Value) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let sproms: Api<ShardedPrometheus> = victim.api();
    let sample: ShardedPrometheus = sproms.get("prometheus").await.unwrap();
    let good = sample.spec.scrape_configs.clone();
    let mut bad = good.clone();
    bad.push(json!({"job_name": "refused", "scrape_intervall": "5s", "static_configs": [{"targets": ["localhost:9"]}]}));
    patch(json!({"scrapeConfigs": bad})).await;
    wait_for("ConfigLoaded False (ReloadFailed)", TIMEOUT, || async {
        let sprom = sproms.get("prometheus").await.map_err(|e| e.to_string())?;
        let status = sprom.status.unwrap_or_default();
        let loaded = status.conditions.iter().find(|c| c.type_ == "ConfigLoaded");
        match loaded {
            Some(c) if c.status == "False" && c.reason == reason::RELOAD_FAILED => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    assert!(
        !zaus.get("prometheus-shards").await.unwrap().spec.paused,
        "nothing rolls: nothing is held"
    );

    let changed = Instant::now();
    patch(json!({"podMetadata": {"annotations": {REVISION: "held"}}})).await;
    let rolling = wait_for("the rollout started", TIMEOUT, || async {
        let zau = zaus
            .get("prometheus-shards")
            .await
            .map_err(|e| e.to_string())?;
        let old = zau.status.map_or(0, |s| s.total_old_replicas);
        (old > 0)
            .then(Instant::now)
            .ok_or(format!("{old} old replicas"))
    })
    .await;
    let held = wait_for("the rollout held", ONE_POLL * 2, || async {
        let zau = zaus
            .get("prometheus-shards")
            .await
            .map_err(|e| e.to_string())?;
        zau.spec
            .paused
            .then(Instant::now)
            .ok_or("not paused".to_string())
    })
    .await;
    let took = held.duration_since(rolling);
    println!(
        "shard rollout held {:.1}s after its ZoneAwareUpdate first counted old pods, {:.1}s after \
         the template changed (a shard refusing its configuration)",
        took.as_secs_f64(),
        held.duration_since(changed).as_secs_f64()
    );
    assert!(took <= ONE_POLL, "held {took:?} after the rollout started");
    let zau = zaus.get("prometheus-shards").await.unwrap();
    let because = zau.annotations()[zone_api::zau::PAUSED_BECAUSE_ANNOTATION].clone();
    assert!(because.contains("refused it"), "{because}");
    let sprom = sproms.get("prometheus").await.unwrap();
    let status = sprom.status.unwrap().rollout.unwrap();
    assert_eq!(status.held_by.as_deref(), Some(because.as_str()));
    let events = e2e::fixture::events(victim, |e| {
        e.reason.as_deref() == Some(reason::ROLLOUT_HELD)
    })
    .await;
    assert!(!events.is_empty(), "a RolloutHeld event");

    // Held, once the zau-controller has seen the pause (a batch it had already decided on may
    // still go): the pods left at the previous revision stay.
    let message = wait_for("the pause seen by the zau-controller", TIMEOUT, || async {
        let zau = zaus
            .get("prometheus-shards")
            .await
            .map_err(|e| e.to_string())?;
        let status = zau.status.unwrap_or_default();
        let paused = status.conditions.iter().find(|c| c.type_ == "Paused");
        match paused {
            Some(c) if c.status == "True" && status.paused_by.contains("Manual") => {
                Ok(c.message.clone())
            }
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    assert!(
        message.contains("held by the shard-controller"),
        "{message}"
    );
    let pods: Api<Pod> = victim.api();
    let old_pods = || async {
        let list = pods
            .list(&ListParams::default().labels(SHARD_PODS))
            .await
            .unwrap()
            .items;
        // Not terminating: a pod evicted by the batch decided before the pause is on its way
        // out (Prometheus takes seconds to stop), and one evicted while held would show here.
        list.into_iter()
            .filter(|pod| pod.metadata.deletion_timestamp.is_none())
            .filter(|pod| pod.annotations().get(REVISION).map(String::as_str) != Some("held"))
            .map(|pod| pod.uid().unwrap_or_default())
            .collect::<BTreeSet<String>>()
    };
    let kept = old_pods().await;
    assert!(!kept.is_empty(), "the hold came after the whole rollout");
    let paused_at = Timestamp::now();
    // Watched for a while (every change of the shard pods): none of them is evicted.
    let watched = watcher(pods.clone(), watcher::Config::default().labels(SHARD_PODS));
    let evicted = tokio::time::timeout(Duration::from_secs(10), async {
        let mut watched = std::pin::pin!(watched);
        while let Some(event) = watched.next().await {
            if let Ok(watcher::Event::Apply(pod) | watcher::Event::Delete(pod)) = event {
                let uid = pod.uid().unwrap_or_default();
                if kept.contains(&uid) && pod.metadata.deletion_timestamp.is_some() {
                    return pod.name_any();
                }
            }
        }
        String::new()
    })
    .await;
    if let Ok(pod) = evicted {
        panic!("{pod} was removed while the rollout was held");
    }

    // Fixed: the hold ends, the rollout completes.
    let fixed_at = Timestamp::now();
    patch(json!({"scrapeConfigs": good})).await;
    pods::wait_all_available(&pods, SHARD_PODS, 6, None, TIMEOUT).await;
    wait_for(
        "6 shard pods Ready at the held revision",
        TIMEOUT,
        || async {
            let zau = zaus
                .get("prometheus-shards")
                .await
                .map_err(|e| e.to_string())?;
            let old = zau.status.as_ref().map_or(-1, |s| s.total_old_replicas);
            let left = old_pods().await.len();
            (!zau.spec.paused && old == 0 && left == 0)
                .then_some(())
                .ok_or(format!(
                    "paused {}, {old} old replicas, {left} old pods",
                    zau.spec.paused
                ))
        },
    )
    .await;
    // And the API server's own record of the held time: no eviction by the zau-controller.
    let held_evictions: Vec<String> =
        audit::removals(&fixture::audit(&Cluster::get(), victim), &victim.name)
            .filter(|e| e.sent_by("zau-controller") && e.succeeded())
            .filter(|e| {
                let at = e.stage_timestamp.parse::<Timestamp>().unwrap_or(fixed_at);
                paused_at <= at && at < fixed_at
            })
            .map(|e| e.object_name().to_string())
            .collect();
    assert_eq!(held_evictions, Vec::<String>::new(), "evicted while held");
    let resumed = e2e::fixture::events(victim, |e| {
        e.reason.as_deref() == Some(reason::ROLLOUT_RESUMED)
    })
    .await;
    assert!(!resumed.is_empty(), "a RolloutResumed event");
}
