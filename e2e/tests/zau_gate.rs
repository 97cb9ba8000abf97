//! Rollouts that listen to Prometheus: the ZoneAwareUpdate's alert gate against real Prometheus
//! shards on the local zonal cluster's real nodes.
//!
//! Every test runs, in a namespace of its own: a StatefulSet `web` of the metrics target (two pods
//! per zone on the real nodes, OnDelete), a ShardedPrometheus of three shards (one per zone,
//! scraping every 2 s and evaluating every 2 s the rule "errors of this app in this zone > 0",
//! alert `AppErrors` labelled with the zone), the rules-federator in front of the shards and the
//! zau-controller, both as host processes. A revision with `ERRORS_PER_SECOND` set is faulty: its
//! pods' `app_errors_total` grows. What the controller removed, and when, is read from the API
//! server's audit log; the alerts and their `activeAt` from the federator, the last evaluation
//! that found an alert firing from its shard's `ALERTS` series.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use e2e::cluster::DeleteOnDrop;
use e2e::localstack::aws_env;
use e2e::process::{ControllerProcess, http_get_with_token};
use e2e::real::RealNodes;
use e2e::workload::zone_aware_update;
use e2e::{Cluster, TestNamespace, audit, fixture, kstatus, pods, wait_for};
use futures::StreamExt;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use kube::{Api, ResourceExt};
use serde_json::{Value, json};
use zone_api::zau::{condition, pause_source, reason};
use zone_api::{ZoneAwareUpdate, ZoneAwareUpdateStatus};

#[path = "zau_gate/bake_and_pauses.rs"]
mod bake_and_pauses;
#[path = "zau_gate/federator.rs"]
mod federator;
#[path = "zau_gate/rolled_zone.rs"]
mod rolled_zone;
#[path = "zau_gate/shards.rs"]
mod shards;
#[path = "zau_gate/zone_scope.rs"]
mod zone_scope;

use federator::{Federator, Gate, allow_gate_secrets, start_federator};
use shards::{create_sharded_prometheus, query, statefulset, wait_shards, wait_two_pods_per_zone};

const SET: &str = "web";
const ZAU: &str = "web";
const SPROM: &str = "prom";
const REPLICAS: usize = 6;
const ZONES: [&str; 3] = ["zone-a", "zone-b", "zone-c"];
/// The label every pod of the application carries, the StatefulSet's and any other: what the
/// scrape job keeps, so the rule counts the errors of the whole application in a zone.
const PART_OF: &str = "app.kubernetes.io/part-of";
const ALERT: &str = "AppErrors";
/// The rule: errors of this app in this zone, over the last 10 s (five scrapes).
const RULES: &str = "groups:\n- name: app\n  rules:\n  - alert: AppErrors\n    expr: sum by (zone) (rate(app_errors_total[10s])) > 0\n    labels:\n      severity: page\n";
/// The gate's poll interval in every test.
const POLL: Duration = Duration::from_secs(2);
const POLL_SPEC: &str = "2s";
/// How fast a faulty pod's error counter grows.
const FAULTY: &str = "5";
const TIMEOUT: Duration = Duration::from_secs(180);
const MANAGER: &str = "e2e-zau-gate";
/// The ServiceAccount whose token the gate presents to a federator with `--auth=kubernetes`.
const GATE_ACCOUNT: &str = "zau-gate";
const GATE_TOKEN_SECRET: &str = "zau-gate-token";

fn signed(duration: Duration) -> SignedDuration {
    SignedDuration::try_from(duration).unwrap()
}

fn seconds(duration: SignedDuration) -> f64 {
    duration.as_secs_f64()
}

/// One successful removal by the controller, from the audit log.
#[derive(Debug, Clone)]
struct Removal {
    at: Timestamp,
    pod: String,
}

/// An alert as the federator serves it.
#[derive(Debug, Clone)]
struct Alert {
    zone: String,
    shard: String,
    state: String,
    active_at: Timestamp,
}

/// The ZoneAwareUpdate's status as the test process sees it change (a watch): each new status
/// with the moment it arrived.
struct StatusLog {
    entries: Arc<Mutex<Vec<(Timestamp, ZoneAwareUpdateStatus)>>>,
    task: tokio::task::JoinHandle<()>,
}

impl StatusLog {
    fn start(zaus: &Api<ZoneAwareUpdate>) -> StatusLog {
        let entries: Arc<Mutex<Vec<(Timestamp, ZoneAwareUpdateStatus)>>> = Arc::default();
        let seen = entries.clone();
        let config = watcher::Config::default().fields(&format!("metadata.name={ZAU}"));
        let stream = watcher(zaus.clone(), config);
        let task = tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream);
            while let Some(event) = stream.next().await {
                let Ok(watcher::Event::Apply(zau) | watcher::Event::InitApply(zau)) = event else {
                    continue;
                };
                let status = zau.status.unwrap_or_default();
                let mut seen = seen.lock().unwrap();
                if seen.last().is_none_or(|(_, last)| *last != status) {
                    seen.push((Timestamp::now(), status));
                }
            }
        });
        StatusLog { entries, task }
    }

    fn entries(&self) -> Vec<(Timestamp, ZoneAwareUpdateStatus)> {
        self.entries.lock().unwrap().clone()
    }

    /// The first status seen, at or after `since`, that `check` accepts.
    fn first_since(
        &self,
        since: Timestamp,
        check: impl Fn(&ZoneAwareUpdateStatus) -> bool,
    ) -> Option<(Timestamp, ZoneAwareUpdateStatus)> {
        self.entries()
            .into_iter()
            .find(|(at, status)| *at >= since && check(status))
    }
}

impl Drop for StatusLog {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The sources `status.pausedBy` names.
fn paused_by(status: &ZoneAwareUpdateStatus) -> BTreeSet<&str> {
    status
        .paused_by
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect()
}

/// `(status, reason, message)` of the Paused condition.
fn paused(status: &ZoneAwareUpdateStatus) -> Option<(String, String, String)> {
    status
        .conditions
        .iter()
        .find(|c| c.type_ == condition::PAUSED)
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
}

fn paused_for(status: &ZoneAwareUpdateStatus, reason: &str) -> bool {
    paused(status).is_some_and(|(s, r, _)| s == "True" && r == reason)
}

/// When the pod's Ready condition last turned True, as the API records it (whole seconds).
fn ready_since(pod: &Pod) -> Option<Timestamp> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready" && c.status == "True")?
        .last_transition_time
        .as_ref()
        .map(|t| t.0)
}

fn pod_ip(pod: &Pod) -> IpAddr {
    pod.status
        .as_ref()
        .and_then(|s| s.pod_ip.as_deref())
        .unwrap_or_else(|| panic!("{} has no IP", pod.name_any()))
        .parse()
        .unwrap()
}

struct Fixture {
    cluster: Cluster,
    ns: TestNamespace,
    real: RealNodes,
    sets: Api<StatefulSet>,
    pods: Api<Pod>,
    zaus: Api<ZoneAwareUpdate>,
    /// Pod name -> zone, for the StatefulSet's pods (a recreated pod goes back to its zone: the
    /// spread allows no other).
    zones: BTreeMap<String, String>,
    /// The Prometheus pod of each shard (shard i is ZONES[i]).
    shards: Vec<SocketAddr>,
    federator: Federator,
    statuses: StatusLog,
    /// How the gate reaches the federator: `url` or `service` of `spec.alertGate`.
    gate_target: Value,
    _zau_controller: ControllerProcess,
    _shard_controller: ControllerProcess,
    _prometheus_binding: DeleteOnDrop,
}

impl Fixture {
    /// Everything but the ZoneAwareUpdate: the StatefulSet at a healthy revision, every pod
    /// Ready and scraped by its zone's shard with its `zone` label, the federator serving the
    /// rule of every shard, the zau-controller watching the namespace.
    async fn new(prefix: &str, gate: Gate) -> Fixture {
        let cluster = Cluster::get();
        let real = RealNodes::of(&cluster);
        let ns = TestNamespace::create(&cluster, prefix).await;
        let prometheus_binding = e2e::prometheus::service_account(&ns).await;
        let (shard_controller, _) =
            fixture::controller_on_free_port("shard-controller", &ns.name, &[]);

        let sets: Api<StatefulSet> = ns.api();
        sets.create(&PostParams::default(), &statefulset(&real))
            .await
            .unwrap();
        create_sharded_prometheus(&ns, &real).await;
        let (federator, gate_target) = start_federator(&ns, gate).await;

        let pods: Api<Pod> = ns.api();
        let zaus: Api<ZoneAwareUpdate> = ns.api();
        let zones = wait_two_pods_per_zone(&sets, &pods).await;
        let shards = wait_shards(&pods).await;

        let (zau_controller, _) = fixture::controller_on_free_port(
            "zau-controller",
            &ns.name,
            &aws_env(&cluster.aws_endpoint()),
        );
        if gate == Gate::UrlWithToken {
            allow_gate_secrets(&ns, &zau_controller).await;
        }
        let statuses = StatusLog::start(&zaus);
        let fixture = Fixture {
            cluster,
            ns,
            real,
            sets,
            pods,
            zaus,
            zones,
            shards,
            federator,
            statuses,
            gate_target,
            _zau_controller: zau_controller,
            _shard_controller: shard_controller,
            _prometheus_binding: prometheus_binding,
        };
        fixture.wait_scraped().await;
        fixture.wait_federated().await;
        fixture
    }

    /// Each shard scrapes the two pods of its zone, labelled with that zone, and nothing else.
    async fn wait_scraped(&self) {
        for (shard, zone) in ZONES.iter().enumerate() {
            wait_for(
                &format!("shard {shard} scraping the pods of {zone}"),
                TIMEOUT,
                || async {
                    let result =
                        query(self.shards[shard], "count by (zone) (app_errors_total)").await?;
                    let counts: Vec<(String, String)> = result
                        .iter()
                        .map(|s| {
                            (
                                s["metric"]["zone"].as_str().unwrap_or_default().to_string(),
                                s["value"][1].as_str().unwrap_or_default().to_string(),
                            )
                        })
                        .collect();
                    if counts == [(zone.to_string(), "2".to_string())] {
                        Ok(())
                    } else {
                        Err(format!("{counts:?}"))
                    }
                },
            )
            .await;
        }
    }

    /// The federator serves the rule of all three shards, none firing.
    async fn wait_federated(&self) {
        wait_for("the federator serving 3 shards' rules", TIMEOUT, || async {
            let (code, body) = self.federator.get("/api/v1/rules?type=alert").await?;
            let value: Value = serde_json::from_str(&body).map_err(|e| format!("{e}: {body}"))?;
            if code != 200 || value.get("warnings").is_some() {
                return Err(format!("{code}: {body}"));
            }
            let shards: BTreeSet<&str> = value["data"]["groups"]
                .as_array()
                .into_iter()
                .flatten()
                .flat_map(|g| g["rules"].as_array().into_iter().flatten())
                .filter(|r| r["name"] == ALERT && r["health"] == "ok")
                .filter_map(|r| r["labels"]["shard"].as_str())
                .collect();
            if shards == BTreeSet::from(["0", "1", "2"]) {
                Ok(())
            } else {
                Err(format!("healthy {ALERT} rules of shards {shards:?}"))
            }
        })
        .await;
        assert!(self.federator.alerts().await.unwrap().is_empty());
    }

    /// Creates the ZoneAwareUpdate `web` with `spec` and `alertGate` (merged into the gate's
    /// target), and waits until the controller observed it.
    async fn create_zau(&self, mut spec: Value, gate: Value) {
        let mut alert_gate = self.gate_target.clone();
        for (key, value) in gate.as_object().unwrap() {
            alert_gate[key] = value.clone();
        }
        spec["statefulset"] = json!(SET);
        spec["alertGate"] = alert_gate;
        self.zaus
            .create(&PostParams::default(), &zone_aware_update(ZAU, spec))
            .await
            .unwrap();
        self.wait_status("the controller to observe the ZAU", |s| {
            s.observed_generation == Some(1) && !s.update_revision.is_empty()
        })
        .await;
    }

    async fn patch_zau(&self, spec: Value) {
        self.zaus
            .patch(
                ZAU,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": spec})),
            )
            .await
            .unwrap();
    }

    async fn status(&self) -> ZoneAwareUpdateStatus {
        self.zaus.get(ZAU).await.unwrap().status.unwrap_or_default()
    }

    /// kstatus's verdict on the ZoneAwareUpdate as the API server holds it, and its `Ready`
    /// condition's status and reason.
    async fn kstatus(&self) -> (kstatus::Status, Option<(String, String)>) {
        let object = serde_json::to_value(self.zaus.get(ZAU).await.unwrap()).unwrap();
        (kstatus::compute(&object), kstatus::ready(&object))
    }

    async fn wait_status(
        &self,
        what: &str,
        check: impl Fn(&ZoneAwareUpdateStatus) -> bool,
    ) -> ZoneAwareUpdateStatus {
        let zau = fixture::wait_status(&self.zaus, ZAU, what, TIMEOUT, |_, s| check(s)).await;
        fixture::status_of(&zau)
    }

    /// Sets `ERRORS_PER_SECOND` in the pod template (a new revision) and returns the
    /// StatefulSet's new updateRevision.
    async fn set_errors(&self, per_second: &str) -> String {
        let patch = json!({"spec": {"template": {"spec": {"containers": [{
            "name": "target",
            "env": [{"name": "ERRORS_PER_SECOND", "value": per_second}],
        }]}}}});
        self.sets
            .patch(SET, &PatchParams::default(), &Patch::Strategic(patch))
            .await
            .unwrap();
        e2e::workload::update_revision(&self.sets, SET, Duration::from_secs(30)).await
    }

    /// The API server's audit log so far, of the requests naming this namespace.
    fn audit(&self) -> Vec<audit::AuditEvent> {
        fixture::audit(&self.cluster, &self.ns)
    }

    /// Waits until the audit log holds a request of this namespace completed after now (a read
    /// of the ZoneAwareUpdate made for it): what was recorded before is in the log by then.
    async fn audit_caught_up(&self) {
        let now = Timestamp::now();
        self.zaus.get(ZAU).await.unwrap();
        wait_for("the audit log to catch up", TIMEOUT, || async {
            let last = self
                .audit()
                .iter()
                .filter_map(|e| e.stage_timestamp.parse::<Timestamp>().ok())
                .max();
            match last {
                Some(last) if last >= now => Ok(()),
                other => Err(format!("last event at {other:?}")),
            }
        })
        .await;
    }

    /// Successful evictions/deletions of this namespace's pods by the controller, in order.
    fn removals(&self) -> Vec<Removal> {
        audit::removals(&self.audit(), &self.ns.name)
            .filter(|e| e.sent_by("zau-controller") && e.succeeded())
            .map(|e| Removal {
                at: e.stage_timestamp.parse().unwrap(),
                pod: e.object_name().to_string(),
            })
            .collect()
    }

    async fn wait_removals(&self, count: usize) -> Vec<Removal> {
        wait_for(&format!("{count} removals"), TIMEOUT, || async {
            let removals = self.removals();
            if removals.len() >= count {
                Ok(removals)
            } else {
                Err(format!("{removals:?}"))
            }
        })
        .await
    }

    /// Observes the audit log until `until` (and until it holds what happened by then): the
    /// controller removes nothing beyond the first `count` removals (fails at the first one).
    async fn assert_no_removal_until(&self, until: Timestamp, count: usize, what: &str) {
        loop {
            let over = Timestamp::now() >= until;
            if over {
                self.audit_caught_up().await;
            }
            let removals = self.removals();
            assert!(
                removals.len() <= count,
                "a pod was removed {what}: {:?}; status {}",
                &removals[count..],
                serde_json::to_string(&self.status().await).unwrap()
            );
            if over {
                return;
            }
            tokio::time::sleep(e2e::wait::POLL_INTERVAL).await; // polling the audit log
        }
    }

    /// The StatefulSet's pods in `zone`, once both are Ready at `revision`.
    async fn wait_zone_ready(&self, zone: &str, revision: &str) -> Vec<Pod> {
        wait_for(
            &format!("the pods of {zone} Ready at {revision}"),
            TIMEOUT,
            || async {
                let list: Vec<Pod> = pods::list(&self.pods, &format!("app={SET}"))
                    .await
                    .into_iter()
                    .filter(|p| self.zones.get(&p.name_any()).map(String::as_str) == Some(zone))
                    .collect();
                let good = list
                    .iter()
                    .filter(|p| pods::is_available(p) && pods::at_revision(p, revision))
                    .count();
                if good == 2 && list.len() == 2 {
                    Ok(list)
                } else {
                    Err(format!("{good} of {} good", list.len()))
                }
            },
        )
        .await
    }

    /// Waits until the rollout to `revision` is complete in the pods and in the status.
    async fn wait_complete(&self, revision: &str) {
        pods::wait_all_available(
            &self.pods,
            &format!("app={SET}"),
            REPLICAS,
            Some(revision),
            TIMEOUT,
        )
        .await;
        self.wait_status("the rollout marked Complete", |s| {
            s.update_revision == revision
                && s.total_old_replicas == 0
                && s.conditions
                    .iter()
                    .any(|c| c.type_ == condition::COMPLETE && c.status == "True")
        })
        .await;
    }

    /// Pod name -> uid of the StatefulSet's pods now.
    async fn uids(&self) -> BTreeMap<String, String> {
        pods::list(&self.pods, &format!("app={SET}"))
            .await
            .into_iter()
            .map(|p| (p.name_any(), p.uid().unwrap()))
            .collect()
    }

    /// When the shard of `zone` last evaluated `AppErrors` as firing for that zone: the last
    /// sample of its `ALERTS` series.
    async fn last_firing(&self, zone: &str) -> Timestamp {
        let shard = ZONES.iter().position(|z| *z == zone).unwrap();
        let promql =
            format!(r#"ALERTS{{alertname="{ALERT}",alertstate="firing",zone="{zone}"}}[15m]"#);
        let result = query(self.shards[shard], &promql).await.unwrap();
        let last = result
            .iter()
            .flat_map(|series| series["values"].as_array().cloned().unwrap_or_default())
            .filter_map(|sample| sample[0].as_f64())
            .fold(f64::NAN, f64::max);
        assert!(last.is_finite(), "no firing sample of {ALERT} in {zone}");
        #[allow(clippy::cast_possible_truncation)]
        Timestamp::from_millisecond((last * 1000.0).round() as i64).unwrap()
    }

    /// The removals of the StatefulSet's pods of `zone`.
    fn in_zone<'a>(&self, removals: &'a [Removal], zone: &str) -> Vec<&'a Removal> {
        removals
            .iter()
            .filter(|r| self.zones.get(&r.pod).map(String::as_str) == Some(zone))
            .collect()
    }
}
