//! The ZoneAwareUpdate controller against the local zonal cluster: the real StatefulSet controller
//! recreates the pods it evicts through the real Eviction API, kwok makes them Ready, LocalStack
//! serves the pause alarm. What the controller removed, and when, is read from the API server's
//! audit log (requests whose user agent is `zau-controller/...`), not from the controller.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use e2e::disruption::Monitor;
use e2e::localstack::{LocalStack, aws_env, clear_alarm, fire_alarm, free_port};
use e2e::pods::at_revision;
use e2e::process::{ControllerProcess, metric_sum, namespace_args};
use e2e::quota::PodQuota;
use e2e::webhook::EvictionWebhook;
use e2e::workload::{
    self, spread_statefulset, to_statefulset, zone_aware_update, zone_disruption_budget,
};
use e2e::{Cluster, TestNamespace, audit, fixture, pods, wait_for};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::jiff::Timestamp;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::{Value, json};
use zone_api::{ZoneAwareUpdate, ZoneAwareUpdateStatus, ZoneDisruptionBudget};

#[path = "zau/budgets.rs"]
mod budgets;
#[path = "zau/groups.rs"]
mod groups;
#[path = "zau/plan.rs"]
mod plan;

const SET: &str = "web";
const ZAU: &str = "web";
/// The alarm poll interval the tests run the controller with.
const POLL: Duration = Duration::from_secs(1);
/// A removal sent sooner than this after the previous one was answered belongs to its batch
/// ([`batches`]). Between batches the removed pods terminate (1 s grace), are recreated and turn
/// Ready (kwok's delay, 1 s): seconds apart.
const BATCH_GAP: Duration = Duration::from_millis(700);
const ROLLOUT_TIMEOUT: Duration = Duration::from_secs(180);

fn image(version: u32) -> String {
    format!("registry.invalid/web:{version}")
}

fn statefulset(replicas: i32, strategy: &str) -> StatefulSet {
    named_statefulset(SET, replicas, strategy)
}

/// A StatefulSet whose pods are labelled `app: <name>` and, whatever the name, `tier: frontend`
/// (what a ZoneDisruptionBudget guarding several workloads selects).
fn named_statefulset(name: &str, replicas: i32, strategy: &str) -> StatefulSet {
    let mut manifest = spread_statefulset(name, usize::try_from(replicas).unwrap(), &image(1));
    manifest["spec"]["updateStrategy"] = json!({"type": strategy});
    manifest["spec"]["template"]["metadata"]["labels"]["tier"] = json!("frontend");
    to_statefulset(manifest)
}

/// One successful removal by the controller, from the audit log.
#[derive(Debug, Clone)]
struct Removal {
    /// When the API server answered it (the audit event's stage timestamp).
    at: Timestamp,
    /// When the API server received it: when the controller sent it.
    sent: Timestamp,
    pod: String,
    agent: String,
}

struct Fixture {
    cluster: Cluster,
    ns: TestNamespace,
    sets: Api<StatefulSet>,
    pods: Api<Pod>,
    zaus: Api<ZoneAwareUpdate>,
    replicas: usize,
}

impl Fixture {
    /// A namespace with the StatefulSet `web` (`replicas` pods spread evenly over the 3 zones,
    /// OnDelete) running image 1, every pod Ready.
    async fn new(prefix: &str, replicas: usize) -> Fixture {
        let fixture = Fixture::empty(prefix, replicas).await;
        fixture
            .sets
            .create(
                &PostParams::default(),
                &statefulset(i32::try_from(replicas).unwrap(), "OnDelete"),
            )
            .await
            .unwrap();
        let revision = fixture.update_revision().await;
        fixture.wait_converged(&revision).await;
        fixture
    }

    /// A namespace without workloads yet, for `replicas` pods labelled `app: web`.
    async fn empty(prefix: &str, replicas: usize) -> Fixture {
        let cluster = Cluster::get();
        let ns = TestNamespace::create(&cluster, prefix).await;
        Fixture {
            sets: ns.api(),
            pods: ns.api(),
            zaus: ns.api(),
            cluster,
            ns,
            replicas,
        }
    }

    /// [`Fixture::new`] and the ZoneAwareUpdate `web` with `spec`; also returns the zone of
    /// each pod.
    async fn with_zau(
        prefix: &str,
        replicas: usize,
        spec: Value,
    ) -> (Fixture, BTreeMap<String, String>) {
        let fixture = Fixture::new(prefix, replicas).await;
        let zones = fixture.zones().await;
        fixture.create_zau(spec).await;
        (fixture, zones)
    }

    async fn create_zau(&self, spec: Value) {
        self.create_named_zau(ZAU, spec).await;
    }

    async fn create_named_zau(&self, name: &str, spec: Value) {
        self.zaus
            .create(&PostParams::default(), &zone_aware_update(name, spec))
            .await
            .unwrap();
    }

    /// The controller's flags: leader election as `leader_elect`, this namespace only, alarms
    /// polled every second, then `extra`.
    fn controller_args(&self, leader_elect: bool, extra: &[&str]) -> Vec<String> {
        let mut args = namespace_args(&self.ns.name, leader_elect);
        args.extend(["--alarm-poll-interval".to_string(), "1s".to_string()]);
        if !extra.contains(&"--listen-address") {
            args.extend([
                "--listen-address".to_string(),
                format!("127.0.0.1:{}", free_port()),
            ]);
        }
        args.extend(extra.iter().map(ToString::to_string));
        args
    }

    /// The controller on this namespace, as its ServiceAccount with `E2E_AS_SERVICE_ACCOUNT=1`.
    fn controller(&self, extra: &[&str]) -> ControllerProcess {
        self.controller_with(false, extra, &self.cluster.aws_endpoint())
    }

    fn controller_with(
        &self,
        leader_elect: bool,
        extra: &[&str],
        cloudwatch: &str,
    ) -> ControllerProcess {
        let args = self.controller_args(leader_elect, extra);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        ControllerProcess::start("zau-controller", &args, &aws_env(cloudwatch))
    }

    /// Changes the pod template's image and returns the StatefulSet's new updateRevision.
    async fn set_image(&self, version: u32) -> String {
        workload::set_image(&self.sets, SET, &image(version), Duration::from_secs(30)).await
    }

    /// Touches the StatefulSet so its controller syncs at once (e.g. retries a pod creation a
    /// quota refused, instead of after its backoff).
    async fn touch(&self) {
        workload::touch(&self.sets, SET).await;
    }

    /// The updateRevision once the StatefulSet controller has observed the latest spec.
    async fn update_revision(&self) -> String {
        workload::update_revision(&self.sets, SET, Duration::from_secs(30)).await
    }

    async fn list_pods(&self) -> Vec<Pod> {
        pods::list(&self.pods, &format!("app={SET}")).await
    }

    /// Waits until every replica exists, is Ready, not terminating and, when given, at
    /// `revision`.
    async fn wait_converged_at(&self, revision: Option<&str>) {
        let selector = format!("app={SET}");
        pods::wait_all_available(
            &self.pods,
            &selector,
            self.replicas,
            revision,
            ROLLOUT_TIMEOUT,
        )
        .await;
    }

    /// Waits until every replica exists, is Ready, not terminating, at `revision`.
    async fn wait_converged(&self, revision: &str) {
        self.wait_converged_at(Some(revision)).await;
    }

    /// Waits until the rollout to `revision` is complete in the ZAU's status too.
    async fn wait_complete(&self, revision: &str) -> ZoneAwareUpdateStatus {
        self.wait_converged(revision).await;
        self.wait_status("the rollout marked Complete", ROLLOUT_TIMEOUT, |s| {
            s.update_revision == revision
                && s.total_old_replicas == 0
                && condition(s, "Complete").is_some_and(|c| c.0 == "True")
        })
        .await
    }

    async fn status(&self) -> ZoneAwareUpdateStatus {
        self.zaus.get(ZAU).await.unwrap().status.unwrap_or_default()
    }

    /// The controller has observed the first generation of the ZAU and its StatefulSet.
    async fn wait_observed(&self) -> ZoneAwareUpdateStatus {
        self.wait_status(
            "the controller to observe the ZAU",
            Duration::from_secs(60),
            |s| s.observed_generation == Some(1) && !s.update_revision.is_empty(),
        )
        .await
    }

    async fn wait_status(
        &self,
        what: &str,
        timeout: Duration,
        check: impl Fn(&ZoneAwareUpdateStatus) -> bool,
    ) -> ZoneAwareUpdateStatus {
        let zau = fixture::wait_status(&self.zaus, ZAU, what, timeout, |_, s| check(s)).await;
        fixture::status_of(&zau)
    }

    /// Pod name -> zone of its node, for the current pods.
    async fn zones(&self) -> BTreeMap<String, String> {
        self.zones_of(SET).await
    }

    /// Pod name -> zone of its node, for the current pods labelled `app: <app>`.
    async fn zones_of(&self, app: &str) -> BTreeMap<String, String> {
        e2e::nodes::pod_zones(&self.pods, &format!("app={app}")).await
    }

    /// The API server's audit log so far, the lines naming this test's namespace.
    fn audit(&self) -> Vec<audit::AuditEvent> {
        fixture::audit(&self.cluster, &self.ns)
    }

    /// Successful evictions/deletions of this namespace's pods by the controller, in order.
    fn removals(&self) -> Vec<Removal> {
        audit::removals(&self.audit(), &self.ns.name)
            .filter(|e| e.sent_by("zau-controller") && e.succeeded())
            .map(|e| Removal {
                at: e.stage_timestamp.parse().unwrap(),
                sent: e.request_received_timestamp.parse().unwrap(),
                pod: e.object_name().to_string(),
                agent: e.user_agent.clone(),
            })
            .collect()
    }

    async fn events(&self, reason: &str) -> Vec<Event> {
        fixture::events(&self.ns, |e| {
            e.reason.as_deref() == Some(reason)
                && e.regarding.as_ref().and_then(|r| r.kind.as_deref()) == Some("ZoneAwareUpdate")
        })
        .await
    }

    async fn wait_event(&self, reason: &str) -> Event {
        wait_for(
            &format!("a {reason} event"),
            Duration::from_secs(60),
            || async {
                self.events(reason)
                    .await
                    .into_iter()
                    .next()
                    .ok_or_else(|| "none yet".to_string())
            },
        )
        .await
    }
}

/// `(status, reason, message)` of a condition.
fn condition(status: &ZoneAwareUpdateStatus, type_: &str) -> Option<(String, String, String)> {
    status
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
}

fn ordinal(pod: &str) -> u32 {
    pod.rsplit_once('-').unwrap().1.parse().unwrap()
}

/// The removals grouped into batches: a removal the controller sent less than [`BATCH_GAP`] after
/// the previous one was answered belongs to its batch. Measured from the answer: the controller
/// sends a batch's removals one after another, each once the last is answered, so an API server
/// slowed by another suite's storm (hundreds of milliseconds an eviction) stretches a batch
/// without opening gaps in it.
fn batches(removals: &[Removal]) -> Vec<Vec<String>> {
    let mut out: Vec<Vec<String>> = Vec::new();
    let mut last: Option<Timestamp> = None;
    for removal in removals {
        let close = last.is_some_and(|l| {
            removal.sent.duration_since(l)
                < k8s_openapi::jiff::SignedDuration::try_from(BATCH_GAP).unwrap()
        });
        match out.last_mut() {
            Some(batch) if close => batch.push(removal.pod.clone()),
            _ => out.push(vec![removal.pod.clone()]),
        }
        last = Some(removal.at);
    }
    out
}

/// The batches docs/zau.md's rules give for an all-healthy rollout: zones ascending, ordinals
/// descending, batch `s` of `min(floor(factor^s), max)` (factor 0: `max`) capped by what is left
/// in the zone, the step counting across zones. Written independently of the planner.
fn expected_batches(zones: &BTreeMap<String, String>, factor: f64, max: usize) -> Vec<Vec<String>> {
    let mut by_zone: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (pod, zone) in zones {
        by_zone.entry(zone).or_default().push(pod);
    }
    let mut out = Vec::new();
    let mut step = 0i32;
    for pods in by_zone.values_mut() {
        pods.sort_by_key(|p| std::cmp::Reverse(ordinal(p)));
        let mut rest: &[&str] = pods;
        while !rest.is_empty() {
            let size = if factor == 0.0 {
                max
            } else {
                #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
                let grown = factor.powi(step).floor() as usize;
                grown.clamp(1, max)
            };
            let (batch, left) = rest.split_at(size.min(rest.len()));
            out.push(batch.iter().map(ToString::to_string).collect());
            rest = left;
            step += 1;
        }
    }
    out
}

/// 12 replicas over 3 zones, one rollout: the batches the controller removed (audit log) are
/// exactly the expected sequence, never more than `max` replicas down, never two zones at once.
async fn rollout_follows_the_plan(
    prefix: &str,
    factor: &str,
    max_unavailable: Value,
    max: usize,
    extra_args: &[&str],
) {
    let fixture = Fixture::new(prefix, 12).await;
    let zones = fixture.zones().await;
    let per_zone: BTreeMap<&String, usize> = zones.values().fold(BTreeMap::new(), |mut m, z| {
        *m.entry(z).or_default() += 1;
        m
    });
    assert!(
        per_zone.len() == 3 && per_zone.values().all(|n| *n == 4),
        "spread: {per_zone:?}"
    );
    fixture
        .create_zau(json!({"statefulset": SET, "maxUnavailable": max_unavailable, "exponentialFactor": factor}))
        .await;
    let _controller = fixture.controller(extra_args);
    fixture.wait_observed().await;
    let monitor = Monitor::start(
        fixture.pods.clone(),
        &format!("app={SET}"),
        fixture.replicas,
    )
    .await;

    let current_revision = |set: StatefulSet| set.status.and_then(|s| s.current_revision);
    let old_revision = current_revision(fixture.sets.get(SET).await.unwrap());
    let revision = fixture.set_image(2).await;
    let status = fixture.wait_complete(&revision).await;

    let removed = fixture.removals();
    let got = batches(&removed);
    let want = expected_batches(&zones, factor.parse().unwrap(), max);
    assert_eq!(got, want, "removal batches (audit log) vs the plan");
    let (worst_down, worst_zones) = monitor.worst();
    assert!(
        worst_down <= max,
        "{worst_down} replicas unavailable at once (max {max})"
    );
    assert!(worst_down >= 1, "the monitor saw no disruption at all");
    assert_eq!(
        worst_zones, 1,
        "replicas unavailable in {worst_zones} zones at once"
    );
    assert!(
        removed
            .iter()
            .all(|r| r.agent.starts_with("zau-controller/")),
        "{removed:?}"
    );

    // Completion is recorded on the StatefulSet (OnDelete never moves currentRevision) and in
    // the status, with an event. The StatefulSet controller may write back a status it computed
    // before that write (its retry on conflict keeps the currentRevision it read): the
    // controller records the completion again. Such a write is made here too, on purpose.
    let recorded = || async {
        wait_for(
            "the StatefulSet's currentRevision",
            Duration::from_secs(60),
            || async {
                match current_revision(fixture.sets.get(SET).await.unwrap()) {
                    Some(current) if current == revision => Ok(()),
                    other => Err(format!("{other:?}")),
                }
            },
        )
        .await;
    };
    recorded().await;
    assert_ne!(old_revision.as_deref(), Some(revision.as_str()));
    fixture
        .sets
        .patch_status(
            SET,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"currentRevision": old_revision}})),
        )
        .await
        .unwrap();
    recorded().await;
    assert_eq!(status.current_revision, revision);
    assert!(!status.paused_rollout);
    fixture.wait_event("RolloutComplete").await;
    assert!(!fixture.events("BatchRemoved").await.is_empty());
}

#[tokio::test]
#[ignore = "needs the local zonal cluster (make e2e)"]
async fn zau_batches_follow_the_plan_factor_2() {
    rollout_follows_the_plan("zau-f2", "2", json!(4), 4, &[]).await;
}

#[tokio::test]
#[ignore = "needs the local zonal cluster (make e2e)"]
async fn zau_batches_follow_the_plan_factor_0() {
    // Also the caches' fallback for API servers without streaming lists.
    rollout_follows_the_plan("zau-f0", "0", json!(4), 4, &["--initial-list", "paginated"]).await;
}

#[tokio::test]
#[ignore = "needs the local zonal cluster (make e2e)"]
async fn zau_batches_follow_the_plan_percent() {
    // 25% of 12 replicas = 3.
    rollout_follows_the_plan("zau-pct", "2", json!("25%"), 3, &[]).await;
}

/// A second image change half way: the step restarts at 1 pod, pods of both older revisions are
/// replaced, the rollout converges to the newest. Then a rollback to the first template converges.
#[tokio::test]
#[ignore = "needs the local zonal cluster (make e2e)"]
async fn zau_new_revision_mid_rollout_and_rollback_converge() {
    let fixture = Fixture::new("zau-rev", 12).await;
    let first = fixture.update_revision().await;
    fixture
        .create_zau(json!({"statefulset": SET, "maxUnavailable": 2, "exponentialFactor": "2"}))
        .await;
    let _controller = fixture.controller(&[]);
    let second = fixture.set_image(2).await;
    // Wait for about half the pods to be replaced.
    wait_for("half the pods at revision 2", ROLLOUT_TIMEOUT, || async {
        let at_second = fixture
            .list_pods()
            .await
            .iter()
            .filter(|p| at_revision(p, &second))
            .count();
        if at_second >= 6 {
            Ok(())
        } else {
            Err(format!("{at_second}"))
        }
    })
    .await;
    let at_second_step = fixture.status().await.update_step;
    let third = fixture.set_image(3).await;
    assert_ne!(second, third);
    // The controller notices the new revision and starts again at step 0: the first status that
    // shows revision 3 (batches are >= 1 s apart: kwok's readiness delay) is at most a batch or
    // two into the new rollout, while revision 2 had reached step >= 4 (6 pods in batches of
    // 1, 2, 2, ...).
    assert!(at_second_step >= 3, "revision 2 step {at_second_step}");
    let reset = fixture
        .wait_status(
            "the step reset for revision 3",
            Duration::from_secs(60),
            |s| s.update_revision == third,
        )
        .await;
    assert!(
        reset.update_step <= 2,
        "step {} after the new revision (was {at_second_step})",
        reset.update_step
    );
    fixture.wait_complete(&third).await;
    // Pods of both older revisions were replaced.
    let stale: Vec<String> = fixture
        .list_pods()
        .await
        .iter()
        .filter(|p| !at_revision(p, &third))
        .map(ResourceExt::name_any)
        .collect();
    assert!(
        stale.is_empty(),
        "pods not at the newest revision: {stale:?}"
    );
    fixture.wait_event("NewRevision").await;

    // Rollback: the first template again. The StatefulSet reuses the first revision.
    let rolled_back = fixture.set_image(1).await;
    assert_eq!(
        rolled_back, first,
        "rollback reuses the first ControllerRevision"
    );
    fixture.wait_complete(&first).await;
}

fn alarm_name(fixture: &Fixture) -> String {
    format!("{}-errors", fixture.ns.name)
}

/// A metric alarm in ALARM mid-rollout pauses it (no removal for 3 poll intervals,
/// `pausedRollout: true`); OK resumes it to completion.
#[tokio::test]
#[ignore = "needs the local zonal cluster (make e2e)"]
async fn zau_metric_alarm_pauses_and_resumes() {
    let fixture = Fixture::new("zau-alarm", 6).await;
    let cloudwatch = fixture.cluster.cloudwatch().await;
    let alarm = alarm_name(&fixture);
    clear_alarm(&cloudwatch, &alarm).await;
    fixture
        .create_zau(json!({"statefulset": SET, "maxUnavailable": 1, "exponentialFactor": "2", "pauseRolloutAlarm": alarm}))
        .await;
    let _controller = fixture.controller(&[]);
    let revision = fixture.set_image(2).await;
    wait_for("the first batch", ROLLOUT_TIMEOUT, || async {
        let n = fixture.removals().len();
        if n >= 1 { Ok(()) } else { Err(format!("{n}")) }
    })
    .await;
    fire_alarm(&cloudwatch, &alarm).await;
    let paused = fixture
        .wait_status("pausedRollout", Duration::from_secs(60), |s| {
            s.paused_rollout
        })
        .await;
    let (state, reason, message) = condition(&paused, "Paused").unwrap();
    assert_eq!((state.as_str(), reason.as_str()), ("True", "AlarmFiring"));
    assert!(message.contains(&alarm), "{message}");
    fixture.wait_event("RolloutPaused").await;
    // Let the batch in flight when the alarm fired settle, then watch a window of 3+ polls.
    fixture.wait_converged_or_paused().await;
    let removed_at_pause = fixture.removals().len();
    let window = POLL * 4;
    tokio::time::sleep(window).await; // an observation window, not synchronisation
    assert_eq!(
        fixture.removals().len(),
        removed_at_pause,
        "pods were removed while the alarm was in ALARM"
    );
    assert!(fixture.status().await.paused_rollout);
    assert!(fixture.status().await.total_old_replicas > 0);

    clear_alarm(&cloudwatch, &alarm).await;
    let status = fixture.wait_complete(&revision).await;
    assert!(!status.paused_rollout);
    fixture.wait_event("RolloutResumed").await;
}

impl Fixture {
    /// Waits until no pod is missing, terminating or unready (the rollout is paused between
    /// batches).
    async fn wait_converged_or_paused(&self) {
        self.wait_converged_at(None).await;
    }
}

/// An alarm name that does not exist pauses the rollout with a condition that says so; with
/// `ignoreAlarm: true` the same firing alarm does not pause it.
#[tokio::test]
#[ignore = "needs the local zonal cluster (make e2e)"]
async fn zau_missing_alarm_pauses_and_ignore_alarm_does_not() {
    let fixture = Fixture::new("zau-noalarm", 3).await;
    let alarm = alarm_name(&fixture);
    fixture
        .create_zau(json!({"statefulset": SET, "maxUnavailable": 1, "pauseRolloutAlarm": alarm}))
        .await;
    let _controller = fixture.controller(&[]);
    let revision = fixture.set_image(2).await;
    // CloudWatch's first answer can be slow enough on a loaded machine (LocalStack, the lookup's
    // 10 s timeout) that the rollout first pauses as AlarmUnavailable, the fail-safe; the
    // controller asks again every second and says the alarm is missing once CloudWatch answers.
    let status = fixture
        .wait_status(
            "paused for the missing alarm",
            Duration::from_secs(60),
            |s| {
                s.paused_rollout
                    && condition(s, "Paused")
                        .is_some_and(|(_, reason, _)| reason == "AlarmNotFound")
            },
        )
        .await;
    let (_, _, message) = condition(&status, "Paused").unwrap();
    assert!(message.contains("does not exist"), "{message}");
    assert!(
        fixture.removals().is_empty(),
        "removed pods without the alarm"
    );

    // The alarm now exists and fires, but the ZAU ignores it.
    let cloudwatch = fixture.cluster.cloudwatch().await;
    fire_alarm(&cloudwatch, &alarm).await;
    fixture
        .zaus
        .patch(
            ZAU,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"ignoreAlarm": true}})),
        )
        .await
        .unwrap();
    let status = fixture.wait_complete(&revision).await;
    assert!(!status.paused_rollout);
    assert_eq!(fixture.removals().len(), 3);
}

/// CloudWatch unreachable (LocalStack stopped) pauses with `AlarmUnavailable`; back (alarm
/// recreated, OK) the rollout resumes. Uses a LocalStack of its own.
#[tokio::test]
#[ignore = "needs the local zonal cluster (make e2e)"]
async fn zau_cloudwatch_down_pauses_with_alarm_unavailable() {
    let fixture = Fixture::new("zau-cwdown", 6).await;
    let mut localstack = LocalStack::start(&fixture.cluster).await;
    let cloudwatch = e2e::cluster::cloudwatch_at(&localstack.endpoint()).await;
    let alarm = alarm_name(&fixture);
    clear_alarm(&cloudwatch, &alarm).await;
    fixture
        .create_zau(json!({"statefulset": SET, "maxUnavailable": 1, "pauseRolloutAlarm": alarm}))
        .await;
    let _controller = fixture.controller_with(false, &[], &localstack.endpoint());
    let revision = fixture.set_image(2).await;
    wait_for("the first batch", ROLLOUT_TIMEOUT, || async {
        let n = fixture.removals().len();
        if n >= 1 { Ok(()) } else { Err(format!("{n}")) }
    })
    .await;
    localstack.stop();
    let status = fixture
        .wait_status("AlarmUnavailable", Duration::from_secs(90), |s| {
            condition(s, "Paused").is_some_and(|c| c.0 == "True" && c.1 == "AlarmUnavailable")
        })
        .await;
    assert!(status.paused_rollout);
    fixture.wait_converged_or_paused().await;
    let removed = fixture.removals().len();
    assert!(
        removed < 6,
        "the rollout finished while CloudWatch was down"
    );

    localstack.restart().await;
    // LocalStack keeps no state across restarts: recreate the alarm.
    let cloudwatch = e2e::cluster::cloudwatch_at(&localstack.endpoint()).await;
    clear_alarm(&cloudwatch, &alarm).await;
    let status = fixture.wait_complete(&revision).await;
    assert!(!status.paused_rollout);
}

/// An update-revision pod made unready blocks the next batch; once Ready again the rollout goes on.
#[tokio::test]
#[ignore = "needs the local zonal cluster (make e2e)"]
async fn zau_unready_updated_pod_blocks_progress() {
    let (fixture, zones) = Fixture::with_zau(
        "zau-block",
        6,
        json!({"statefulset": SET, "maxUnavailable": 1, "exponentialFactor": "1"}),
    )
    .await;
    let _controller = fixture.controller(&[]);
    let revision = fixture.set_image(2).await;
    // The first pod removed is the highest ordinal of the first zone; wait for its replacement.
    let first = expected_batches(&zones, 1.0, 1)[0][0].clone();
    wait_for("the first replacement Ready", ROLLOUT_TIMEOUT, || async {
        let pod = fixture.pods.get(&first).await.map_err(|e| e.to_string())?;
        if at_revision(&pod, &revision) && pods::is_ready(&pod) {
            Ok(())
        } else {
            Err("not yet".to_string())
        }
    })
    .await;
    pods::set_ready(&fixture.pods, &first, false).await;
    let status = fixture
        .wait_status("waiting on the unready pod", Duration::from_secs(30), |s| {
            condition(s, "Progressing").is_some_and(|c| c.1 == "Waiting")
        })
        .await;
    // An eviction the controller sent before it saw the pod unready (the test's patch follows
    // kwok's Ready by milliseconds) may still be in flight: it is counted once it has landed.
    tokio::time::sleep(POLL).await; // a settling window, not synchronisation
    let held = fixture.removals().len();
    assert!(held <= 2, "{held} removals");
    tokio::time::sleep(POLL * 4).await; // an observation window, not synchronisation
    assert_eq!(
        fixture.removals().len(),
        held,
        "a pod was removed while an updated pod was unready: {status:?}"
    );
    pods::set_ready(&fixture.pods, &first, true).await;
    fixture.wait_complete(&revision).await;
}

/// An old-revision pod unready in the last zone is replaced first (no deadlock: it is already
/// down, and the rollout may be what fixes it).
#[tokio::test]
#[ignore = "needs the local zonal cluster (make e2e)"]
async fn zau_unready_old_pod_in_last_zone_goes_first() {
    let fixture = Fixture::new("zau-deadlock", 6).await;
    let zones = fixture.zones().await;
    let last_zone = zones.values().max().unwrap().clone();
    let victim = zones
        .iter()
        .filter(|(_, z)| **z == last_zone)
        .map(|(p, _)| p.clone())
        .min_by_key(|p| ordinal(p))
        .unwrap();
    fixture
        .create_zau(json!({"statefulset": SET, "maxUnavailable": 1, "exponentialFactor": "1"}))
        .await;
    let _controller = fixture.controller(&[]);
    fixture.wait_observed().await;
    pods::set_ready(&fixture.pods, &victim, false).await;
    let revision = fixture.set_image(2).await;
    fixture.wait_complete(&revision).await;
    let removals = fixture.removals();
    assert_eq!(
        removals.first().map(|r| r.pod.as_str()),
        Some(victim.as_str()),
        "the unready old pod of {last_zone} goes first: {removals:?}"
    );
    // Then the zone it started is finished before the others start.
    let order: Vec<&String> = removals.iter().map(|r| &zones[&r.pod]).collect();
    let in_last = zones.values().filter(|z| **z == last_zone).count();
    assert!(
        order.len() >= in_last && order[..in_last].iter().all(|z| **z == last_zone),
        "{order:?}"
    );
}

/// A pod deleted by hand counts as unavailable until recreated: while it is missing (a
/// ResourceQuota keeps the StatefulSet controller from recreating it) no batch is removed.
#[tokio::test]
#[ignore = "needs the local zonal cluster (make e2e)"]
async fn zau_missing_pod_counts_as_unavailable() {
    let (fixture, zones) = Fixture::with_zau(
        "zau-missing",
        6,
        json!({"statefulset": SET, "maxUnavailable": 1, "exponentialFactor": "1"}),
    )
    .await;
    let _controller = fixture.controller(&[]);
    fixture.wait_observed().await;
    // At most 5 pods: the pod deleted below cannot be recreated until the quota goes.
    let quota = PodQuota::hold(&fixture.ns, 5).await;
    // A pod in the last zone; the rollout starts in the first.
    let last_zone = zones.values().max().unwrap().clone();
    let victim = zones
        .iter()
        .find(|(_, z)| **z == last_zone)
        .unwrap()
        .0
        .clone();
    pods::delete_and_wait_gone(&fixture.pods, &victim, Duration::from_secs(30)).await;

    let revision = fixture.set_image(2).await;
    let status = fixture
        .wait_status(
            "the rollout to wait for the missing pod",
            Duration::from_secs(60),
            |s| {
                s.update_revision == revision
                    && condition(s, "Progressing").is_some_and(|c| c.1 == "Waiting")
            },
        )
        .await;
    tokio::time::sleep(POLL * 4).await; // an observation window, not synchronisation
    assert!(
        fixture.removals().is_empty(),
        "removed a pod while {victim} was missing: {status:?}"
    );
    assert!(
        fixture.pods.get_opt(&victim).await.unwrap().is_none(),
        "the quota did not hold"
    );

    quota.release().await;
    fixture.touch().await;
    fixture.wait_complete(&revision).await;
    assert_eq!(
        fixture.removals().len(),
        5,
        "the recreated pod was already at revision 2"
    );
}

/// Invalid specs: a condition and one Warning event each, no removal, and no hot loop (the
/// reconcile count stays small over 30 s). The invalid specs are ones the CRD's schema lets
/// through (numbers beyond what the controller parses, alert-gate matchers nested 100,000 deep,
/// which overflowed a worker's stack before their depth was bounded): the others are refused at
/// apply (crd_validation.rs). The one controller process reports them all and keeps running.
#[tokio::test]
#[ignore = "needs the local zonal cluster (make e2e)"]
async fn zau_invalid_specs_are_reported_without_action() {
    let fixture = Fixture::new("zau-invalid", 3).await;
    let rolling = statefulset(3, "RollingUpdate");
    let mut rolling = rolling;
    rolling.metadata.name = Some("rolling".to_string());
    fixture
        .sets
        .create(&PostParams::default(), &rolling)
        .await
        .unwrap();
    let huge_factor = format!("1{}", "0".repeat(400));
    let deep = 100_000;
    let deep_matchers = format!(
        "{}{{severity=\"page\"}}{}",
        "(".repeat(deep),
        ")".repeat(deep)
    );
    let cases = [
        (
            "deep-gate",
            json!({"statefulset": SET, "maxUnavailable": 1,
                   "alertGate": {"url": "http://127.0.0.1:9", "matchers": deep_matchers}}),
            "InvalidSpec",
        ),
        (
            "factor",
            json!({"statefulset": SET, "maxUnavailable": 1, "exponentialFactor": huge_factor}),
            "InvalidSpec",
        ),
        (
            "percent",
            json!({"statefulset": SET, "maxUnavailable": "99999999999%"}),
            "InvalidSpec",
        ),
        (
            "missing",
            json!({"statefulset": "nothere", "maxUnavailable": 1}),
            "StatefulSetNotFound",
        ),
        (
            "rolling",
            json!({"statefulset": "rolling", "maxUnavailable": 1}),
            "UpdateStrategyNotOnDelete",
        ),
    ];
    for (name, spec, _) in &cases {
        fixture.create_named_zau(name, spec.clone()).await;
    }
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let mut controller = fixture.controller(&["--listen-address", &listen]);
    let pid = controller.pid();
    // Old-revision pods exist: a valid ZAU would start removing them.
    fixture.set_image(2).await;
    for (name, _, reason) in &cases {
        wait_for(
            &format!("the Invalid condition of {name}"),
            Duration::from_secs(60),
            || async {
                let zau = fixture.zaus.get(name).await.map_err(|e| e.to_string())?;
                let status = zau.status.unwrap_or_default();
                match condition(&status, "Invalid") {
                    Some((s, r, m)) if s == "True" && r == *reason && !m.is_empty() => Ok(()),
                    other => Err(format!("{other:?}")),
                }
            },
        )
        .await;
    }
    let start = reconciles(port).await;
    tokio::time::sleep(Duration::from_secs(30)).await; // the observation window of the criterion
    let end = reconciles(port).await;
    assert!(
        end - start <= 10,
        "{} reconciles in 30 s: a hot loop",
        end - start
    );
    assert!(fixture.removals().is_empty(), "an invalid ZAU removed pods");
    assert!(controller.is_running(), "the controller exited");
    assert_eq!(controller.pid(), pid);
    let deep_gate = fixture.zaus.get("deep-gate").await.unwrap();
    let (_, _, message) = condition(&deep_gate.status.unwrap_or_default(), "Invalid").unwrap();
    assert!(
        message.starts_with("spec.alertGate.matchers: ") && message.contains("512"),
        "the deep matchers named: {message}"
    );
    let events: Api<Event> = fixture.ns.api();
    let events = events.list(&ListParams::default()).await.unwrap().items;
    for (name, _, reason) in &cases {
        let warnings: Vec<&Event> = events
            .iter()
            .filter(|e| {
                e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(*name)
                    && e.reason.as_deref() == Some(*reason)
                    && e.type_.as_deref() == Some("Warning")
            })
            .collect();
        assert_eq!(warnings.len(), 1, "Warning events for {name}: {warnings:?}");
    }
}

/// `zone_aware_reconciliations_total` of the controller whose metrics listen on `port`.
async fn reconciles(port: u16) -> i64 {
    metric_sum(port, "zone_aware_reconciliations_total", None).await as i64
}

/// Two replicas with leader election: only the leader removes pods. The leader is killed
/// mid-rollout; the other takes over and resumes from the status (the batches still follow the
/// plan), and the two never both remove.
#[tokio::test]
#[ignore = "needs the local zonal cluster (make e2e)"]
async fn zau_leader_killed_mid_rollout_hands_over_cleanly() {
    let (fixture, zones) = Fixture::with_zau(
        "zau-leader",
        12,
        json!({"statefulset": SET, "maxUnavailable": 4, "exponentialFactor": "2"}),
    )
    .await;
    let replica = |identity: &str| {
        let extra = [
            "--identity",
            identity,
            "--lease-duration",
            "6s",
            "--renew-interval",
            "2s",
        ];
        fixture.controller_with(true, &extra, &fixture.cluster.aws_endpoint())
    };
    let mut a = Some(replica("zau-a"));
    let mut b = Some(replica("zau-b"));
    let revision = fixture.set_image(2).await;
    // Two batches (1 + 2 pods), then kill whoever removed them.
    let leader = wait_for("two batches", ROLLOUT_TIMEOUT, || async {
        let removals = fixture.removals();
        if removals.len() >= 3 {
            Ok(removals[0].agent.clone())
        } else {
            Err(format!("{}", removals.len()))
        }
    })
    .await;
    let (survivor, identity) = if leader.contains("(zau-a)") {
        a.take();
        (b, "zau-b")
    } else {
        assert!(leader.contains("(zau-b)"), "{leader}");
        b.take();
        (a, "zau-a")
    };
    // The survivor exits as designed if it in turn misses a renewal (an API server slowed by
    // a loaded machine); kubelet would restart it, so the test does.
    let mut survivor = survivor.expect("the survivor was started");
    let supervise = async {
        loop {
            tokio::time::sleep(Duration::from_millis(250)).await; // polling the child process
            if !survivor.is_running() {
                eprintln!(
                    "{identity} exited ({}); restarting it",
                    survivor.log.display()
                );
                survivor = replica(identity);
            }
        }
    };
    tokio::select! {
        _ = fixture.wait_complete(&revision) => {}
        () = supervise => {}
    }
    let removals = fixture.removals();
    let first_other = removals
        .iter()
        .position(|r| r.agent != leader)
        .expect("the standby took over and removed pods");
    assert!(
        removals[first_other..].iter().all(|r| r.agent != leader),
        "both replicas removed pods: {removals:?}"
    );
    assert_eq!(
        batches(&removals),
        expected_batches(&zones, 2.0, 4),
        "the rollout resumed at the recorded step"
    );
}

/// `dryRun: true`: plans, reports the batch it would remove, removes nothing.
#[tokio::test]
#[ignore = "needs the local zonal cluster (make e2e)"]
async fn zau_dry_run_reports_the_plan_and_removes_nothing() {
    let (fixture, zones) = Fixture::with_zau(
        "zau-dry",
        6,
        json!({"statefulset": SET, "maxUnavailable": 2, "exponentialFactor": "2", "dryRun": true}),
    )
    .await;
    let _controller = fixture.controller(&[]);
    fixture.set_image(2).await;
    let event = fixture.wait_event("DryRunBatch").await;
    let note = event.note.unwrap_or_default();
    let first = &expected_batches(&zones, 2.0, 2)[0][0];
    assert!(note.contains(first), "{note} should name {first}");
    let status = fixture.status().await;
    assert_eq!(status.total_old_replicas, 6);
    tokio::time::sleep(POLL * 4).await; // an observation window, not synchronisation
    assert!(fixture.removals().is_empty());
    assert_eq!(fixture.status().await.total_old_replicas, 6);
}

/// Refused evictions (429) of this namespace's pods by the controller.
fn refused(fixture: &Fixture) -> usize {
    audit::removals(&fixture.audit(), &fixture.ns.name)
        .filter(|e| e.sent_by("zau-controller") && e.code() == 429)
        .count()
}

/// With a ZoneDisruptionBudget (its controller and webhook running) guarding the frontend tier
/// (the rolled StatefulSet `web` and a second one, `cache`), the rollout's evictions are judged
/// like any other: a drain under way in zone-b (a `cache` pod evicted: the rollout's own rules
/// only see `web`) holds the rollout in zone-a, and a rollout under way in zone-a holds a drain
/// in zone-b. A ResourceQuota keeps each first evicted pod from being recreated, so each
/// disruption lasts until the test ends it.
#[tokio::test]
#[ignore = "needs the local zonal cluster (make e2e)"]
async fn zau_and_zdb_hold_each_other_across_zones() {
    let fixture = Fixture::new("zau-zdb", 6).await;
    let zones = fixture.zones().await;
    let sets: Api<StatefulSet> = fixture.ns.api();
    sets.create(
        &PostParams::default(),
        &named_statefulset("cache", 3, "RollingUpdate"),
    )
    .await
    .unwrap();
    pods::wait_available(&fixture.pods, "app=cache", 3, ROLLOUT_TIMEOUT).await;
    let cache_b = pod_in_zone(&fixture.zones_of("cache").await, "zone-b");
    let web_b = pod_in_zone(&zones, "zone-b");

    let webhook = EvictionWebhook::create(&fixture.cluster, &fixture.ns, free_port()).await;
    let _zdb = webhook.controller(&fixture.ns);
    webhook.wait_ca_bundle(&fixture.ns).await;
    let zdbs: Api<ZoneDisruptionBudget> = fixture.ns.api();
    let zdb = zone_disruption_budget(
        "frontend",
        json!({"selector": {"matchLabels": {"tier": "frontend"}}, "maxUnavailable": 1}),
    );
    zdbs.create(&PostParams::default(), &zdb).await.unwrap();
    wait_disrupted(&zdbs, &[]).await;
    fixture
        .create_zau(json!({"statefulset": SET, "maxUnavailable": 1, "exponentialFactor": "1"}))
        .await;
    let _zau = fixture.controller(&[]);
    fixture.wait_observed().await;

    a_drain_in_zone_b_holds_the_rollout(&fixture, &zdbs, &cache_b).await;
    a_rollout_in_zone_a_holds_a_drain_in_zone_b(&fixture, &zdbs, &zones, [&web_b, &cache_b]).await;
    pods::evict(&fixture.pods, &cache_b, false).await.unwrap();

    // Budgets are judged by the API server and the webhook only: the rollout controller never
    // reads them (it runs the same without the ZoneDisruptionBudget CRD installed).
    let reads: Vec<_> = fixture
        .audit()
        .into_iter()
        .filter(|e| e.sent_by("zau-controller"))
        .filter(|e| {
            e.object_ref
                .as_ref()
                .is_some_and(|o| o.resource == "zonedisruptionbudgets")
        })
        .collect();
    assert!(reads.is_empty(), "{reads:?}");
}

/// A pod of `zones` (pod name -> zone) in `zone`.
fn pod_in_zone(zones: &BTreeMap<String, String>, zone: &str) -> String {
    zones
        .iter()
        .find(|(_, z)| *z == zone)
        .map(|(p, _)| p.clone())
        .unwrap()
}

/// Waits until the ZoneDisruptionBudget `frontend` counts the 9 pods and has `want` disrupted.
async fn wait_disrupted(zdbs: &Api<ZoneDisruptionBudget>, want: &[&str]) {
    fixture::wait_status(
        zdbs,
        "frontend",
        &format!("the ZDB to see {want:?} disrupted"),
        Duration::from_secs(60),
        |_, status| {
            let total: i32 = status.expected_pods.values().sum();
            total == 9 && status.disrupted_zones == want
        },
    )
    .await;
}

/// A drain in zone-b (the cache pod there evicted, its replacement held) holds the rollout to
/// image 2 in zone-a until the drain ends.
async fn a_drain_in_zone_b_holds_the_rollout(
    fixture: &Fixture,
    zdbs: &Api<ZoneDisruptionBudget>,
    cache_b: &str,
) {
    let quota = PodQuota::hold(&fixture.ns, 8).await;
    pods::evict(&fixture.pods, cache_b, false).await.unwrap();
    wait_disrupted(zdbs, &["zone-b"]).await;
    let revision = fixture.set_image(2).await;
    // The rollout's eviction in zone-a is refused, retried, refused again.
    wait_for(
        "two refused evictions by the rollout",
        Duration::from_secs(60),
        || async {
            let n = refused(fixture);
            if n >= 2 { Ok(()) } else { Err(format!("{n}")) }
        },
    )
    .await;
    let status = fixture.status().await;
    let progressing = condition(&status, "Progressing").unwrap();
    assert_eq!(progressing.1, "DisruptionBudgetExhausted", "{status:?}");
    assert!(progressing.2.contains("zone-b"), "{progressing:?}");
    assert!(
        fixture.removals().is_empty(),
        "the rollout removed a pod while zone-b was disrupted: {:?}",
        fixture.removals()
    );
    let drain_over = Timestamp::now();
    quota.release().await;
    workload::touch(&fixture.sets, "cache").await;
    fixture.wait_complete(&revision).await;
    let removals = fixture.removals();
    assert_eq!(removals.len(), 6, "{removals:?}");
    assert!(
        removals.iter().all(|r| r.at > drain_over),
        "removed before the drain ended at {drain_over}: {removals:?}"
    );
    wait_disrupted(zdbs, &[]).await;
}

/// The other way round: the rollout to image 3 has zone-a disrupted (its first evicted pod
/// held), and a drain's eviction in zone-b (of each of `drained`) is refused naming zone-a.
async fn a_rollout_in_zone_a_holds_a_drain_in_zone_b(
    fixture: &Fixture,
    zdbs: &Api<ZoneDisruptionBudget>,
    zones: &BTreeMap<String, String>,
    drained: [&String; 2],
) {
    let quota = PodQuota::hold(&fixture.ns, 8).await;
    let revision = fixture.set_image(3).await;
    let first = wait_for(
        "the rollout's first eviction",
        Duration::from_secs(60),
        || async {
            let removals = fixture.removals();
            removals
                .get(6)
                .map(|r| r.pod.clone())
                .ok_or_else(|| format!("{} removals", removals.len()))
        },
    )
    .await;
    assert_eq!(zones[&first], "zone-a", "the rollout starts in zone-a");
    wait_disrupted(zdbs, &["zone-a"]).await;
    for drained in drained {
        let Err((code, message)) = pods::evict(&fixture.pods, drained, false).await else {
            panic!("a drain evicted {drained} in zone-b while the rollout had zone-a disrupted");
        };
        assert_eq!(code, 429, "{message}");
        assert!(message.contains("zone-a"), "{message}");
    }
    quota.release().await;
    fixture.touch().await;
    fixture.wait_complete(&revision).await;
    wait_disrupted(zdbs, &[]).await;
}
