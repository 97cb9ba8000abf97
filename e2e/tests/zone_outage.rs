//! A whole zone going dark on the local zonal cluster (`e2e/cluster/outage.sh`: zone-b's real node
//! frozen and cut off, its kwok nodes unmanaged), held for minutes, then back, with the
//! controllers deployed as pods from the project's image (2 replicas each, as their
//! ServiceAccounts; `zone_outage/deployed.rs`): what the ZoneDisruptionBudget and the
//! ZoneAwareUpdate do meanwhile and after, side by side with a native PodDisruptionBudget of the
//! same spec; the ShardedPrometheus with Thanos and the federator (`zone_outage/shards.rs`,
//! `zone_outage/thanos.rs`); the mixin's alerts (`zone_outage/alerts.rs`); the controllers'
//! leaders and webhook. The node lifecycle controller is the real one: the nodes turn NotReady
//! after its grace period and their pods not Ready, as on any cluster. The suite takes a zone of
//! the shared cluster away, so it runs alone (`E2E_EXCLUSIVE`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::time::Duration;

use e2e::kubectl_zone;
use e2e::outage::ZoneOutage;
use e2e::process::sum_of;
use e2e::workload::{self, spread_statefulset, to_statefulset, zone_aware_update};
use e2e::{Cluster, TestNamespace, audit, fixture, nodes, pods, wait_for};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::{Value, json};
use zone_api::{ZoneAwareUpdate, ZoneAwareUpdateStatus, ZoneDisruptionBudget};

#[path = "zone_outage/alerts.rs"]
mod alerts;
#[path = "zone_outage/deployed.rs"]
mod deployed;
#[path = "zone_outage/report.rs"]
mod report;
#[path = "zone_outage/shards.rs"]
mod shards;
#[path = "zone_outage/thanos.rs"]
mod thanos;

use report::{Row, print_table, rows, thanos_rows};

const DARK: &str = "zone-b";

/// Pods of each StatefulSet: two per zone.
const REPLICAS: usize = 6;
const TIMEOUT: Duration = Duration::from_secs(180);
/// How long the rollout is watched holding still once it has paused for the dark zone.
const HELD: Duration = Duration::from_secs(30);

fn image(version: u32) -> String {
    format!("registry.invalid/web:{version}")
}

/// The StatefulSet `name`: 6 pods spread over the 3 zones' kwok nodes, `strategy`.
async fn statefulset(sets: &Api<StatefulSet>, name: &str, strategy: &str) {
    let mut manifest = spread_statefulset(name, REPLICAS, &image(1));
    manifest["spec"]["updateStrategy"] = json!({"type": strategy});
    manifest["spec"]["template"]["spec"]["nodeSelector"] = json!({"type": "kwok"});
    sets.create(&PostParams::default(), &to_statefulset(manifest))
        .await
        .unwrap();
}

/// The budgets compared: a ZoneDisruptionBudget over `zweb`, a PodDisruptionBudget of the same
/// spec over `pweb` (identical pods).
fn budget_spec(app: &str) -> Value {
    json!({
        "selector": {"matchLabels": {"app": app}},
        "maxUnavailable": 1,
        "unhealthyPodEvictionPolicy": "AlwaysAllow",
    })
}

struct Outage {
    cluster: Cluster,
    ns: TestNamespace,
    pods: Api<Pod>,
    sets: Api<StatefulSet>,
    zaus: Api<ZoneAwareUpdate>,
    zdbs: Api<ZoneDisruptionBudget>,
}

fn since(from: Timestamp, to: Timestamp) -> Duration {
    Duration::try_from(to.duration_since(from)).unwrap_or_default()
}

impl Outage {
    async fn new() -> Outage {
        let cluster = Cluster::get();
        let ns = TestNamespace::create(&cluster, "zone-outage").await;
        Outage {
            pods: ns.api(),
            sets: ns.api(),
            zaus: ns.api(),
            zdbs: ns.api(),
            cluster,
            ns,
        }
    }

    /// When the controller's first removal at or after `at` was answered.
    fn first_removal_after(&self, at: Timestamp) -> Option<Timestamp> {
        audit::removals(&fixture::audit(&self.cluster, &self.ns), &self.ns.name)
            .filter(|e| e.sent_by("zau-controller") && e.succeeded())
            .map(|e| e.stage_timestamp.parse::<Timestamp>().unwrap())
            .find(|answered| *answered >= at)
    }

    fn removals(&self, since: Timestamp) -> Vec<String> {
        audit::removals(&fixture::audit(&self.cluster, &self.ns), &self.ns.name)
            .filter(|e| e.sent_by("zau-controller") && e.succeeded())
            .filter(|e| e.stage_timestamp.parse::<Timestamp>().unwrap() >= since)
            .map(|e| e.object_name().to_string())
            .collect()
    }

    async fn zau_status(
        &self,
        what: &str,
        check: impl Fn(&ZoneAwareUpdateStatus) -> bool,
    ) -> Timestamp {
        fixture::wait_status(&self.zaus, "web", what, TIMEOUT, |_, s| check(s)).await;
        Timestamp::now()
    }

    async fn wait_disrupted(&self, want: &[&str]) -> Timestamp {
        fixture::wait_status(
            &self.zdbs,
            "zweb",
            &format!("the ZoneDisruptionBudget to see {want:?} disrupted"),
            TIMEOUT,
            |_, s| s.disrupted_zones == want,
        )
        .await;
        Timestamp::now()
    }

    async fn pause(&self, paused: bool) {
        self.zaus
            .patch(
                "web",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"paused": paused}})),
            )
            .await
            .unwrap();
    }

    /// `kubectl zone drill zone-b` before the outage: (kind, name) -> predicted effect.
    fn drill(&self) -> Effects {
        let answer = kubectl_zone::run(
            &self.cluster,
            &self.cluster.kubeconfig,
            &["drill", DARK, "-n", &self.ns.name, "-o", "json"],
        );
        assert_eq!(answer.code, 0, "{}", answer.stderr);
        let drill = answer.json();
        assert_eq!(drill["darkNow"], json!(false), "{drill}");
        drill["predictions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| {
                let key = (
                    p["kind"].as_str().unwrap().to_string(),
                    p["name"].as_str().unwrap().to_string(),
                );
                (key, p["effect"].as_str().unwrap().to_string())
            })
            .collect()
    }

    /// What the outage did, in the drill's words: the budget's zone disrupted, the rollout
    /// paused by the zone.
    async fn happened(&self) -> Effects {
        let zdb = self
            .zdbs
            .get("zweb")
            .await
            .unwrap()
            .status
            .unwrap_or_default();
        let zau = self
            .zaus
            .get("web")
            .await
            .unwrap()
            .status
            .unwrap_or_default();
        let zdb_effect = if zdb.disrupted_zones.iter().any(|z| z == DARK) {
            "Disrupted"
        } else {
            "Unaffected"
        };
        let zau_effect = if zau.paused_by.split(',').any(|s| s == "Zone") {
            "Paused"
        } else {
            "Idle"
        };
        BTreeMap::from([
            (
                ("ZoneDisruptionBudget".to_string(), "zweb".to_string()),
                zdb_effect.to_string(),
            ),
            (
                ("ZoneAwareUpdate".to_string(), "web".to_string()),
                zau_effect.to_string(),
            ),
        ])
    }

    /// Pod name -> zone, for the pods of `app`.
    async fn zones_of(&self, app: &str) -> BTreeMap<String, String> {
        nodes::pod_zones(&self.pods, &format!("app={app}")).await
    }

    /// Dry-run evictions of a pod of `app` in each zone: (zone, allowed or the refusal's code).
    async fn evictions(&self, app: &str) -> Answers {
        let mut answers = BTreeMap::new();
        for (pod, zone) in self.zones_of(app).await {
            if answers.contains_key(&zone) {
                continue;
            }
            let answer = pods::evict(&self.pods, &pod, true).await.map_err(|e| e.0);
            answers.insert(zone, answer);
        }
        answers
    }
}

/// The nodes of `zone` the zau-controller's leader counts, (Ready, not Ready).
async fn zone_nodes_metric(controllers: &deployed::Controllers<'_>, zone: &str) -> (f64, f64) {
    let text = wait_for("the zau-controller leader's metrics", TIMEOUT, || {
        controllers.leader_metrics("zau-controller")
    })
    .await;
    let count = |ready: &str| {
        let label = format!(r#"ready="{ready}",zone="{zone}""#);
        sum_of(&text, "zone_aware_zone_nodes", Some(&label))
    };
    (count("true"), count("false"))
}

/// The budgets, the ZoneAwareUpdate and a rollout started and paused by hand mid-way (its first
/// removal done, zone-b's pods still old), and `calm`, which no budget selects: when the
/// rollout started.
async fn set_up(fx: &Outage) -> Timestamp {
    for (name, strategy) in [
        ("web", "OnDelete"),
        ("zweb", "RollingUpdate"),
        ("pweb", "RollingUpdate"),
        ("calm", "RollingUpdate"),
    ] {
        statefulset(&fx.sets, name, strategy).await;
    }
    for app in ["web", "zweb", "pweb", "calm"] {
        pods::wait_available(&fx.pods, &format!("app={app}"), REPLICAS, TIMEOUT).await;
    }
    fx.zdbs
        .create(
            &PostParams::default(),
            &workload::zone_disruption_budget("zweb", budget_spec("zweb")),
        )
        .await
        .unwrap();
    let pdbs: Api<PodDisruptionBudget> = fx.ns.api();
    let pdb: PodDisruptionBudget = serde_json::from_value(json!({
        "metadata": {"name": "pweb"}, "spec": budget_spec("pweb"),
    }))
    .unwrap();
    pdbs.create(&PostParams::default(), &pdb).await.unwrap();
    fx.wait_disrupted(&[]).await;

    let spec = json!({"statefulset": "web", "maxUnavailable": 1, "exponentialFactor": "1"});
    fx.zaus
        .create(&PostParams::default(), &zone_aware_update("web", spec))
        .await
        .unwrap();
    fx.zau_status("the rollout's controller to observe", |s| {
        s.observed_generation == Some(1)
    })
    .await;
    let start = Timestamp::now();
    workload::set_image(&fx.sets, "web", &image(2), Duration::from_secs(30)).await;
    wait_for("the rollout's first removal", TIMEOUT, || async {
        let n = fx.removals(start).len();
        if n >= 1 { Ok(()) } else { Err(format!("{n}")) }
    })
    .await;
    fx.pause(true).await;
    fx.zau_status("the rollout paused by hand", |s| s.paused_by == "Manual")
        .await;
    start
}

/// A pod of `calm` outside the dark zone.
async fn calm_pod(fx: &Outage) -> String {
    fx.zones_of("calm")
        .await
        .into_iter()
        .find(|(_, zone)| zone != DARK)
        .map(|(pod, _)| pod)
        .expect("a calm pod outside the dark zone")
}

/// zone-b goes dark and comes back: the budgets, the rollout, the shards, Thanos, the alerts
/// and the controllers themselves, timed, and what each did wrong.
#[tokio::test]
#[ignore = "needs the local zonal cluster with real nodes and the project's image (make e2e)"]
async fn zone_b_goes_dark_and_every_controller_keeps_its_promise() {
    let fx = Outage::new().await;
    let client = fx.cluster.client().await;
    let sprom = shards::Shards::namespace().await;
    let controllers = deployed::Controllers::deploy(&fx.cluster, &fx.ns, &sprom.ns.name).await;
    let (rollout_start, shards) =
        tokio::join!(set_up(&fx), shards::Shards::set_up(sprom, &controllers));
    let dark_leaders = controllers.leaders_into(DARK).await;
    let removed_before = fx.removals(rollout_start).len();
    assert_eq!(zone_nodes_metric(&controllers, DARK).await, (3.0, 0.0));
    let mut predicted = fx.drill();
    predicted.insert(
        ("ShardedPrometheus".into(), shards::NAME.into()),
        shards.drill(&fx.cluster),
    );
    let on_dark = shards.before.values().filter(|on| on.contains(&1)).count();
    assert!(on_dark > 0, "zone-b's shard scrapes zoneless targets");
    let alerts = alerts::Alerts::start(&controllers).await;

    let watched = controllers
        .watch(fx.pods.clone(), calm_pod(&fx).await)
        .await;
    let querier = shards.thanos.watch();
    let mut outage = ZoneOutage::start(DARK);
    let dark = outage.wait_detected(&client).await;
    let zdb_detected = fx.wait_disrupted(&[DARK]).await;
    let zau_detected = fx
        .zau_status("the rollout paused for the dark zone", |s| {
            s.paused_by == "Zone,Manual"
        })
        .await;
    let mut happened = fx.happened().await;
    assert_eq!(
        zone_nodes_metric(&controllers, DARK).await,
        (0.0, 3.0),
        "zone_aware_zone_nodes, which ZoneAwareZoneDark reads"
    );
    // Unpaused by hand: the dark zone alone holds it now.
    fx.pause(false).await;
    fx.zau_status("the rollout paused by the zone alone", |s| {
        s.paused_by == "Zone"
    })
    .await;
    let (during, failover, alerted) = tokio::join!(
        during_the_outage(&fx),
        shards_during(&shards, outage.started),
        alerts.wait_firing()
    );
    happened.insert(
        ("ShardedPrometheus".into(), shards::NAME.into()),
        "FailsOver".into(),
    );
    compare_drill(&predicted, &happened);

    let ended = outage.end();
    let back = the_return(&fx, &shards, &alerts, &mut outage, &client, ended).await;
    let restarts = controllers.wait_whole().await;
    let kept = watched.stop().kept(outage.started, ended);
    pods::wait_all_available(&fx.pods, "app=web", REPLICAS, None, TIMEOUT).await;
    let timeline = Timeline {
        started: outage.started,
        dark,
        zdb_detected,
        zau_detected,
        alerted,
        ended,
        first_after: fx.first_removal_after(ended),
        removed_during: fx.removals(outage.started).len() - fx.removals(ended).len(),
        removed_total: fx.removals(rollout_start).len(),
    };
    let fired = alerts.fired().await;
    let querier = thanos::querier_seen(&querier.stop(), outage.started, ended);
    let global = shards.thanos.rules_seen(outage.started).await;
    let zoned = shards
        .zoned_gaps(since(outage.started, Timestamp::now()))
        .await
        .expect("the surviving shards' zoned samples");
    let mut table = Vec::from(rows(&timeline, &back, &during, &failover, on_dark, &fired));
    table.push(shards::zoned_row(&zoned));
    table.extend(thanos_rows(&querier, &global));
    table.extend(deployed::rows(&kept, &restarts));
    print_table(&table);
    thanos::check(&querier, &global);
    deployed::check(&kept, &dark_leaders, &restarts);
    assert_eq!(alerts::false_alerts(&fired), 0, "alerts fired: {fired:?}");
    check_budgets_and_rollout(&during, &timeline, removed_before);
    check_shards(&failover, &back.shards);
    shards::check_zoned(&zoned);
}

/// The budgets' and the rollout's promises: no healthy pod of a surviving zone evictable, the
/// PodDisruptionBudget's answers the same, no removal while dark, each pod removed once, and
/// the rollout on again after the return.
fn check_budgets_and_rollout(during: &During, timeline: &Timeline, removed_before: usize) {
    assert_eq!(during.wrongly_allowed, 0, "{:?}", during.answers);
    assert_eq!(during.pdb_differs, 0, "{:?}", during.answers);
    assert_eq!(
        timeline.removed_during, 0,
        "the rollout removed pods while {DARK} was dark"
    );
    assert_eq!(
        timeline.removed_total, REPLICAS,
        "each pod removed once, no extra removal after the outage ({removed_before} before it)"
    );
    assert!(
        timeline.first_after.is_some(),
        "the rollout went on after the outage"
    );
}

/// When the outage began, was seen and ended, and the rollout's removals.
struct Timeline {
    started: Timestamp,
    dark: Timestamp,
    zdb_detected: Timestamp,
    zau_detected: Timestamp,
    /// When the mixin's alerts for the dark zone all fired.
    alerted: Timestamp,
    ended: Timestamp,
    /// The rollout's first removal after the outage.
    first_after: Option<Timestamp>,
    removed_during: usize,
    removed_total: usize,
}

/// What came back after the outage, and when.
struct Back {
    nodes: Timestamp,
    zdb_clear: Timestamp,
    resumed: Timestamp,
    /// When the mixin's alerts for the dark zone were all resolved.
    alerts_resolved: Timestamp,
    shards: shards::Returned,
    /// From the end of the outage to the federator's answer of the three shards.
    federator: Duration,
}

/// Once zone-b is back (at `ended`): the shards' zoneless targets, the federator's answers, the nodes, the
/// budget and the rollout, each watched at once; then the shards' status.
async fn the_return(
    fx: &Outage,
    shards: &shards::Shards,
    alerts: &alerts::Alerts,
    outage: &mut ZoneOutage,
    client: &kube::Client,
    ended: Timestamp,
) -> Back {
    let federator = async {
        shards
            .wait_federated(
                "the federator answering for the three shards again",
                &["0", "1", "2"],
                false,
            )
            .await;
        since(ended, Timestamp::now())
    };
    let others = async {
        let nodes = outage.wait_recovered(client).await;
        let zdb_clear = fx.wait_disrupted(&[]).await;
        let resumed = fx
            .zau_status("the rollout resumed and complete", |s| {
                s.paused_by.is_empty() && s.total_old_replicas == 0
            })
            .await;
        (nodes, zdb_clear, resumed)
    };
    let (returned, federator, alerts_resolved, (nodes, zdb_clear, resumed)) = tokio::join!(
        shards.wait_returned(),
        federator,
        alerts.wait_resolved(),
        others
    );
    shards.wait_status_returned().await;
    Back {
        nodes,
        zdb_clear,
        resumed,
        alerts_resolved,
        shards: returned,
        federator,
    }
}

/// How long the failed-over placement is watched, and its samples counted.
const FAILED_OVER_WINDOW: Duration = Duration::from_secs(45);

/// What the shards did while zone-b was dark.
struct ShardsDuring {
    /// When zone-b's shards were first seen unready (the status), and when it failed over.
    unready_since: Timestamp,
    failed_over: Timestamp,
    /// Seconds of the window where some target was not scraped by exactly one surviving
    /// shard, or a surviving shard's own target moved.
    misplaced: usize,
    gaps: shards::Gaps,
    /// From the outage to the federator's answer naming zone-b's shard, and that answer.
    federator_warned: Duration,
    federated: shards::Federated,
}

/// While zone-b is dark: its shard's zoneless buckets fail over, and the surviving shards are
/// watched scraping every zoneless target once, each second, for [`FAILED_OVER_WINDOW`]; then
/// the samples they recorded meanwhile.
async fn shards_during(shards: &shards::Shards, started: Timestamp) -> ShardsDuring {
    let federated = shards
        .wait_federated(
            "the federator answering with a warning naming zone-b's shard",
            &["0", "2"],
            true,
        )
        .await;
    let federator_warned = since(started, Timestamp::now());
    let (zone, failed_over, placement) = shards.wait_failed_over().await;
    let covered = Timestamp::now();
    let kept = |now: &shards::Placement| {
        shards
            .before
            .iter()
            .filter(|(_, on)| !on.contains(&1))
            .all(|(t, on)| now.get(t) == Some(on))
    };
    assert!(
        kept(&placement),
        "a surviving shard's target moved: {placement:?}"
    );
    let mut misplaced = 0;
    let mut every_second = tokio::time::interval(Duration::from_secs(1));
    while since(covered, Timestamp::now()) < FAILED_OVER_WINDOW {
        every_second.tick().await;
        let right = match shards.placement(&[0, 2]).await {
            Ok(now) => kept(&now) && shards::once_each(&now, &[0, 2]).is_ok(),
            Err(_) => false,
        };
        misplaced += usize::from(!right);
    }
    let window = Duration::from_secs(since(covered, Timestamp::now()).as_secs());
    let gaps = shards
        .gaps(&[0, 2], window)
        .await
        .expect("the surviving shards' samples");
    ShardsDuring {
        unready_since: zone.since.parse().expect("an RFC 3339 since"),
        failed_over,
        misplaced,
        gaps,
        federator_warned,
        federated,
    }
}

/// The shards' promises: every zoneless target scraped by exactly one surviving shard from
/// the failover on, no scrape missed then nor after the return, and no target scraped twice
/// for more than two intervals after the return (the shards' TSDBs).
fn check_shards(during: &ShardsDuring, returned: &shards::Returned) {
    assert_eq!(
        during.misplaced, 0,
        "seconds with a misplaced zoneless target"
    );
    assert_eq!(
        during.gaps.targets.len(),
        shards::TARGETS,
        "{:?}",
        during.gaps
    );
    assert_eq!(
        during.gaps.missed, 0,
        "zoneless scrapes missed after the failover: {:?}",
        during.gaps
    );
    assert_eq!(
        returned.missed, 0,
        "zoneless scrapes missed after the return"
    );
    assert!(
        returned.twice <= 2 * shards::INTERVAL,
        "zoneless targets scraped twice for {:?} after the return",
        returned.twice
    );
}

/// (kind, name) -> effect, in `kubectl zone drill`'s words.
type Effects = BTreeMap<(String, String), String>;

/// The drill's prediction against what happened, item by item.
fn compare_drill(predicted: &Effects, happened: &Effects) {
    for (object, effect) in predicted {
        println!(
            "drill: {object:?} predicted {effect}, happened {:?}",
            happened.get(object)
        );
    }
    assert_eq!(
        predicted, happened,
        "kubectl zone drill {DARK}'s prediction"
    );
}

/// Zone -> a dry-run eviction's answer there: allowed, or the refusal's HTTP code.
type Answers = BTreeMap<String, Result<(), u16>>;

/// What the outage's evictions were answered, and what was wrong in them.
struct During {
    answers: Vec<(String, Answers)>,
    /// Evictions of Ready pods of the surviving zones the ZoneDisruptionBudget allowed.
    wrongly_allowed: usize,
    /// Zones where the PodDisruptionBudget answered otherwise.
    pdb_differs: usize,
}

/// While zone-b is dark: once its pods are not Ready, dry-run evictions of a pod of each zone,
/// under both budgets; then the rollout is watched holding still.
async fn during_the_outage(fx: &Outage) -> During {
    wait_for("zone-b's pods not Ready", TIMEOUT, || async {
        let zones = fx.zones_of("zweb").await;
        let listed = pods::list(&fx.pods, "app in (zweb,pweb)").await;
        let ready: Vec<_> = listed
            .iter()
            .filter(|p| pods::is_ready(p))
            .filter(|p| {
                p.metadata
                    .name
                    .as_ref()
                    .and_then(|n| zones.get(n))
                    .is_some_and(|z| z == DARK)
            })
            .filter_map(|p| p.metadata.name.clone())
            .collect();
        if ready.is_empty() {
            Ok(())
        } else {
            Err(format!("still Ready: {ready:?}"))
        }
    })
    .await;
    let zdb = fx.evictions("zweb").await;
    let pdb = fx.evictions("pweb").await;
    let wrongly_allowed = zdb
        .iter()
        .filter(|(zone, answer)| zone.as_str() != DARK && answer.is_ok())
        .count();
    let expected = |zone: &str| if zone == DARK { Ok(()) } else { Err(429) };
    let zdb_wrong = zdb.iter().filter(|(z, a)| **a != expected(z)).count();
    let pdb_differs = pdb.iter().filter(|(z, a)| zdb.get(*z) != Some(*a)).count();
    // The rollout watched holding still: the audit log read each second, the first removal
    // fails the test at once.
    let paused_at = Timestamp::now();
    let mut every_second = tokio::time::interval(Duration::from_secs(1));
    while since(paused_at, Timestamp::now()) < HELD {
        every_second.tick().await;
        let removed = fx.removals(paused_at);
        assert!(
            removed.is_empty(),
            "removals while {DARK} was dark: {removed:?}"
        );
    }
    assert_eq!(zdb_wrong, 0, "ZoneDisruptionBudget answers {zdb:?}");
    During {
        answers: vec![("zdb".into(), zdb), ("pdb".into(), pdb)],
        wrongly_allowed,
        pdb_differs,
    }
}
