//! The ZoneAwareUpdate controller against the local zonal cluster: the real StatefulSet controller
//! recreates the pods it evicts through the real Eviction API, kwok makes them Ready, LocalStack
//! serves the pause alarm. What the controller removed, and when, is read from the API server's
//! audit log (requests whose user agent is `zau-controller/...`), not from the controller.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use e2e::disruption::Monitor;
use e2e::localstack::{aws_env, clear_alarm, fire_alarm, free_port};
use e2e::pods::at_revision;
use e2e::process::{ControllerProcess, namespace_args};
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
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::{Value, json};
use zone_api::{ZoneAwareUpdate, ZoneAwareUpdateStatus, ZoneDisruptionBudget};

#[path = "zau/alarms.rs"]
mod alarms;
#[path = "zau/budgets.rs"]
mod budgets;
#[path = "zau/drains.rs"]
mod drains;
#[path = "zau/groups.rs"]
mod groups;
#[path = "zau/invalid.rs"]
mod invalid;
#[path = "zau/leader_election.rs"]
mod leader_election;
#[path = "zau/plan.rs"]
mod plan;
#[path = "zau/rollouts.rs"]
mod rollouts;
#[path = "zau/unavailable.rs"]
mod unavailable;

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

fn alarm_name(fixture: &Fixture) -> String {
    format!("{}-errors", fixture.ns.name)
}

/// Refused evictions (429) of this namespace's pods by the controller.
fn refused(fixture: &Fixture) -> usize {
    audit::removals(&fixture.audit(), &fixture.ns.name)
        .filter(|e| e.sent_by("zau-controller") && e.code() == 429)
        .count()
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
