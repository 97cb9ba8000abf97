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
use e2e::localstack::{aws_env, free_port};
use e2e::process::{ControllerProcess, http_get_with_token, http_request};
use e2e::real::RealNodes;
use e2e::wait::wait_until_empty;
use e2e::workload::zone_aware_update;
use e2e::{Cluster, TestNamespace, audit, fixture, pods, wait_for};
use futures::StreamExt;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, Secret, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, RoleBinding};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use kube::{Api, ResourceExt};
use serde_json::{Value, json};
use zone_api::zau::{condition, pause_source, reason};
use zone_api::{ShardedPrometheus, ZoneAwareUpdate, ZoneAwareUpdateStatus};

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

/// How the rules-federator is run and how the gate reaches it.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Gate {
    /// `url: http://127.0.0.1:<port>`, no authentication.
    Url,
    /// `url`, the federator with `--auth=kubernetes`, the gate with `bearerTokenSecret` (a
    /// ServiceAccount token Secret of a reader of the federated alerts).
    UrlWithToken,
    /// `service`: a Service without selector whose EndpointSlice names the federator on the
    /// host's address, by port name.
    Service,
}

/// The rules-federator as a host process, stopped and started again on the same address.
struct Federator {
    address: SocketAddr,
    args: Vec<String>,
    token: Option<String>,
    process: Option<ControllerProcess>,
}

impl Federator {
    fn new(address: SocketAddr, namespace: &str, auth: bool) -> Federator {
        let mut args = vec![
            "--listen-address".to_string(),
            address.to_string(),
            "--discover-sprom".to_string(),
            SPROM.to_string(),
            "--discover-namespace".to_string(),
            namespace.to_string(),
            "--endpoint-timeout".to_string(),
            "1s".to_string(),
            "--shutdown-delay".to_string(),
            "0s".to_string(),
        ];
        if auth {
            args.push("--auth=kubernetes".to_string());
        }
        let mut federator = Federator {
            address,
            args,
            token: None,
            process: None,
        };
        federator.start();
        federator
    }

    fn url(&self) -> String {
        format!("http://{}", self.address)
    }

    fn start(&mut self) {
        assert!(self.process.is_none(), "the federator is running");
        let args: Vec<&str> = self.args.iter().map(String::as_str).collect();
        self.process = Some(ControllerProcess::start("rules-federator", &args, &[]));
    }

    /// Kills the process and waits until its port refuses connections.
    async fn stop(&mut self) {
        drop(self.process.take());
        let address = self.address;
        wait_for("the federator's port closed", TIMEOUT, || async move {
            match tokio::net::TcpStream::connect(address).await {
                Err(_) => Ok(()),
                Ok(_) => Err("still accepting".to_string()),
            }
        })
        .await;
    }

    async fn get(&self, path: &str) -> Result<(u16, String), String> {
        http_get_with_token(self.address, path, self.token.as_deref()).await
    }

    /// The `AppErrors` alerts the federator serves (an answer with warnings is not complete).
    async fn alerts(&self) -> Result<Vec<Alert>, String> {
        let (code, body) = self.get("/api/v1/alerts").await?;
        let value: Value = serde_json::from_str(&body).map_err(|e| format!("{e}: {body}"))?;
        if code != 200 || value.get("warnings").is_some() {
            return Err(format!("{code}: {body}"));
        }
        let label = |alert: &Value, name: &str| {
            alert["labels"][name]
                .as_str()
                .unwrap_or_default()
                .to_string()
        };
        Ok(value["data"]["alerts"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|a| a["labels"]["alertname"] == ALERT)
            .map(|a| Alert {
                zone: label(a, "zone"),
                shard: label(a, "shard"),
                state: a["state"].as_str().unwrap_or_default().to_string(),
                active_at: a["activeAt"].as_str().unwrap_or_default().parse().unwrap(),
            })
            .collect())
    }

    /// Waits until `AppErrors` fires for `zone`, and for no other zone.
    async fn wait_firing(&self, zone: &str) -> Alert {
        wait_for(&format!("{ALERT} firing in {zone}"), TIMEOUT, || async {
            let alerts = self.alerts().await?;
            match alerts.as_slice() {
                [alert] if alert.zone == zone && alert.state == "firing" => Ok(alert.clone()),
                _ => Err(format!("{alerts:?}")),
            }
        })
        .await
    }

    /// Waits until no `AppErrors` alert is active anywhere.
    async fn wait_quiet(&self) {
        wait_until_empty(&format!("no {ALERT} alert"), TIMEOUT, || self.alerts()).await;
    }
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

    /// When the kubelet last wrote the status of `pod` (of this namespace) before `before`, from
    /// the audit log (to the microsecond): for a pod that turned Ready and stayed so, the write
    /// that made it Ready.
    fn last_kubelet_status_write(&self, pod: &str, before: Timestamp) -> Option<Timestamp> {
        self.audit()
            .iter()
            .filter(|e| {
                e.sent_by("kubelet")
                    && e.succeeded()
                    && e.object_ref.as_ref().is_some_and(|o| {
                        o.namespace == self.ns.name
                            && o.resource == "pods"
                            && o.subresource == "status"
                            && o.name == pod
                    })
            })
            .filter_map(|e| e.stage_timestamp.parse::<Timestamp>().ok())
            .filter(|at| *at < before)
            .max()
    }

    /// The controller's status write of the ZoneAwareUpdate that a watch delivered at `at`: the
    /// last one the API server received by then. When it received it, and when it completed it
    /// (a watch may see a write before its request completes).
    fn zau_status_write_seen_at(&self, at: Timestamp) -> Option<(Timestamp, Timestamp)> {
        self.audit()
            .iter()
            .filter(|e| {
                e.sent_by("zau-controller")
                    && e.succeeded()
                    && matches!(e.verb.as_str(), "patch" | "update")
                    && e.object_ref.as_ref().is_some_and(|o| {
                        o.namespace == self.ns.name
                            && o.resource == "zoneawareupdates"
                            && o.subresource == "status"
                            && o.name == ZAU
                    })
            })
            .filter_map(|e| {
                let received = e.request_received_timestamp.parse::<Timestamp>().ok()?;
                let completed = e.stage_timestamp.parse::<Timestamp>().ok()?;
                Some((received, completed))
            })
            .filter(|(received, _)| *received <= at)
            .max()
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

    /// Stops the errors of a running pod (`PUT /errors?per_second=0` on the metrics target):
    /// the fault ends without the pod being replaced.
    async fn stop_errors(&self, pod: &Pod) {
        let address = SocketAddr::new(pod_ip(pod), 8080);
        let (code, body) = http_request(address, "PUT", "/errors?per_second=0", None)
            .await
            .unwrap();
        assert_eq!(code, 200, "{}: {body}", pod.name_any());
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

/// The rules ConfigMap and the ShardedPrometheus [`SPROM`]: three shards (one per zone) of the
/// real Prometheus, scraping the application's pods of the namespace every 2 s (labelled with
/// their zone and pod) and evaluating [`RULES`] every 2 s.
async fn create_sharded_prometheus(ns: &TestNamespace, real: &RealNodes) {
    let rules: Api<ConfigMap> = ns.api();
    fixture::create(
        &rules,
        json!({"metadata": {"name": "rules"}, "data": {"app.yaml": RULES}}),
    )
    .await;
    let sprom = json!({
        "apiVersion": "zonecontrol.k8s.aws/v1",
        "kind": "ShardedPrometheus",
        "metadata": {"name": SPROM},
        "spec": fixture::on_real_nodes(real, json!({
            "shards": 3,
            "replicas": 1,
            "scrapeInterval": "2s",
            "evaluationInterval": "2s",
            "ruleFiles": [{"configMap": "rules"}],
            "scrapeConfigs": [fixture::zone_scrape_job(&ns.name, "app_kubernetes_io_part_of", SET)],
        })),
    });
    let sproms: Api<ShardedPrometheus> = ns.api();
    fixture::apply(&sproms, SPROM, MANAGER, &sprom).await;
}

/// The rules-federator as `gate` runs it, and how the gate reaches it (`url` or `service` of
/// `spec.alertGate`).
async fn start_federator(ns: &TestNamespace, gate: Gate) -> (Federator, Value) {
    let (address, gate_target) = match gate {
        Gate::Url | Gate::UrlWithToken => {
            let address = SocketAddr::from(([127, 0, 0, 1], free_port()));
            (address, json!({"url": format!("http://{address}")}))
        }
        Gate::Service => {
            // The real nodes' address is the host's: a Service's endpoint must not be a
            // loopback address.
            let host = e2e::alertmanager::host_address(&ns.client).await;
            let address = SocketAddr::new(host, free_port());
            federator_service(ns, address).await;
            (
                address,
                json!({"service": {"name": "federator", "port": "web"}}),
            )
        }
    };
    let mut federator = Federator::new(address, &ns.name, gate == Gate::UrlWithToken);
    if gate == Gate::UrlWithToken {
        federator.token = Some(gate_token(ns).await);
    }
    (federator, gate_target)
}

/// Waits until the StatefulSet's pods are all Ready at its revision, two in each zone: pod name
/// -> zone.
async fn wait_two_pods_per_zone(
    sets: &Api<StatefulSet>,
    pods: &Api<Pod>,
) -> BTreeMap<String, String> {
    let revision = e2e::workload::update_revision(sets, SET, Duration::from_secs(30)).await;
    pods::wait_all_available(
        pods,
        &format!("app={SET}"),
        REPLICAS,
        Some(&revision),
        TIMEOUT,
    )
    .await;
    let zones = e2e::nodes::pod_zones(pods, &format!("app={SET}")).await;
    for zone in ZONES {
        assert_eq!(
            zones.values().filter(|z| *z == zone).count(),
            2,
            "two pods in {zone}: {zones:?}"
        );
    }
    zones
}

/// The StatefulSet `web`: the metrics target, two pods per zone on the real nodes, OnDelete,
/// labelled `app: web` and `app.kubernetes.io/part-of: web`, without errors.
fn statefulset(real: &RealNodes) -> StatefulSet {
    let mut template = real.metrics_target_template(SET);
    template["metadata"]["labels"][PART_OF] = json!(SET);
    serde_json::from_value(json!({
        "metadata": {"name": SET},
        "spec": {
            "replicas": REPLICAS,
            "serviceName": SET,
            "podManagementPolicy": "Parallel",
            "updateStrategy": {"type": "OnDelete"},
            "selector": {"matchLabels": {"app": SET}},
            "template": template,
        },
    }))
    .unwrap()
}

/// The Prometheus pod of each shard, once the ShardedPrometheus reports 3 ready shards; shard i
/// runs in zone i.
async fn wait_shards(pods: &Api<Pod>) -> Vec<SocketAddr> {
    let selector = format!("app.kubernetes.io/instance={SPROM}");
    let list = pods::wait_available(pods, &selector, 3, TIMEOUT).await;
    let nodes = e2e::real::nodes(&pods.clone().into_client()).await;
    let mut shards = vec![None; 3];
    for pod in &list {
        let shard: usize = pod.labels()["zonecontrol.k8s.aws/shard"].parse().unwrap();
        let zone = &nodes[pods::node_of(pod).unwrap()];
        assert_eq!(zone, ZONES[shard], "shard {shard} runs in its zone");
        shards[shard] = Some(SocketAddr::new(pod_ip(pod), 9090));
    }
    shards.into_iter().map(Option::unwrap).collect()
}

/// `data.result` of an instant query of a Prometheus pod.
async fn query(prometheus: SocketAddr, promql: &str) -> Result<Vec<Value>, String> {
    let path = format!(
        "/api/v1/query?query={}",
        e2e::prometheus::url_encode(promql)
    );
    let (code, body) = e2e::process::http_get_from(prometheus, &path).await?;
    let value: Value = serde_json::from_str(&body).map_err(|e| format!("{e}: {body}"))?;
    if code != 200 {
        return Err(format!("{code}: {body}"));
    }
    Ok(value["data"]["result"]
        .as_array()
        .cloned()
        .unwrap_or_default())
}

/// A Service `federator` without selector, and its EndpointSlice naming `address` (port `web`):
/// how the gate finds a federator run outside the cluster's pods.
async fn federator_service(ns: &TestNamespace, address: SocketAddr) {
    let services: Api<Service> = ns.api();
    let service = json!({
        "metadata": {"name": "federator"},
        "spec": {"clusterIP": "None", "ports": [{"name": "web", "port": address.port()}]},
    });
    fixture::create(&services, service).await;
    let slices: Api<EndpointSlice> = ns.api();
    let slice = json!({
        "metadata": {
            "name": "federator-host",
            "labels": {
                "kubernetes.io/service-name": "federator",
                "endpointslice.kubernetes.io/managed-by": MANAGER,
            },
        },
        "addressType": "IPv4",
        "endpoints": [{"addresses": [address.ip().to_string()], "conditions": {"ready": true}}],
        "ports": [{"name": "web", "port": address.port(), "protocol": "TCP"}],
    });
    fixture::create(&slices, slice).await;
}

/// What a namespace whose gates name a Secret grants the controller (docs/zau.md): a RoleBinding
/// of the shipped ClusterRole `zone-aware-zau-gate-secrets` to its ServiceAccount. Nothing when
/// the controller runs as the test's admin (`E2E_AS_SERVICE_ACCOUNT` unset).
async fn allow_gate_secrets(ns: &TestNamespace, controller: &ControllerProcess) {
    let Some(identity) = &controller.identity else {
        return;
    };
    let binding = json!({
        "metadata": {"name": "zau-gate-secrets"},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": identity.rendered_name("zone-aware-zau-gate-secrets"),
        },
        "subjects": [{
            "kind": "ServiceAccount",
            "name": identity.service_account,
            "namespace": identity.namespace,
        }],
    });
    let bindings: Api<RoleBinding> = ns.api();
    fixture::create(&bindings, binding).await;
}

/// The ServiceAccount [`GATE_ACCOUNT`] allowed to read the federated alerts (a ClusterRole with
/// the rules of the shipped `zone-aware-rules-federator-reader`, bound to it; both owned by the
/// namespace, so they go with it), and its token in the Secret [`GATE_TOKEN_SECRET`] (key
/// `token`, filled by the token controller). Returns the token.
async fn gate_token(ns: &TestNamespace) -> String {
    let accounts: Api<k8s_openapi::api::core::v1::ServiceAccount> = ns.api();
    fixture::create(&accounts, json!({"metadata": {"name": GATE_ACCOUNT}})).await;
    let namespace = Api::<Namespace>::all(ns.client.clone())
        .get(&ns.name)
        .await
        .unwrap();
    let owner = json!([{
        "apiVersion": "v1", "kind": "Namespace", "name": ns.name, "uid": namespace.uid().unwrap(),
    }]);
    let name = format!("{}-gate-reader", ns.name);
    let shipped =
        std::fs::read_to_string(e2e::deploy::repo_root().join("config/rbac/rules-federator.yaml"))
            .unwrap();
    let rules = e2e::identity::yaml_to_json(&shipped)
        .into_iter()
        .find(|o| o["metadata"]["name"] == "zone-aware-rules-federator-reader")
        .expect("the reader ClusterRole in config/rbac/rules-federator.yaml")["rules"]
        .clone();
    let role = json!({"metadata": {"name": name, "ownerReferences": owner}, "rules": rules});
    fixture::create(&Api::<ClusterRole>::all(ns.client.clone()), role).await;
    let binding = json!({
        "metadata": {"name": name, "ownerReferences": owner},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": GATE_ACCOUNT, "namespace": ns.name}],
    });
    fixture::create(&Api::<ClusterRoleBinding>::all(ns.client.clone()), binding).await;
    let secrets: Api<Secret> = ns.api();
    let secret = json!({
        "metadata": {
            "name": GATE_TOKEN_SECRET,
            "annotations": {"kubernetes.io/service-account.name": GATE_ACCOUNT},
        },
        "type": "kubernetes.io/service-account-token",
    });
    fixture::create(&secrets, secret).await;
    wait_for(
        "the token controller to fill the Secret",
        TIMEOUT,
        || async {
            let secret = secrets
                .get(GATE_TOKEN_SECRET)
                .await
                .map_err(|e| e.to_string())?;
            secret
                .data
                .as_ref()
                .and_then(|d| d.get("token"))
                .map(|t| String::from_utf8(t.0.clone()).unwrap())
                .ok_or_else(|| "no token yet".to_string())
        },
    )
    .await
}

/// A faulty revision in the first zone: its batch is replaced, its alert fires on zone-a's
/// shard, and nothing more is removed while it fires, even after the bake that would have let
/// zone-b start. The pause is recorded within a poll interval (and a second) of the alert's
/// `activeAt`. A rollback to a healthy revision stays under the same gate until the alert has
/// resolved, then completes. The federator authenticates its callers; the gate presents a
/// ServiceAccount token from a Secret.
#[tokio::test]
#[ignore = "needs the local zonal cluster with its real nodes (make e2e)"]
async fn zau_gate_an_alert_in_the_rolled_zone_holds_the_rollout_until_it_resolves() {
    let bake = Duration::from_secs(20);
    let fx = Fixture::new("zau-gate-alert", Gate::UrlWithToken).await;
    // Authentication is on: without the token the federator answers nothing.
    let (code, body) = http_get_with_token(fx.federator.address, "/api/v1/alerts", None)
        .await
        .unwrap();
    assert_eq!(code, 401, "{body}");
    fx.create_zau(
        json!({"maxUnavailable": 2, "exponentialFactor": "0", "bakeTime": format!("{}s", bake.as_secs())}),
        json!({
            "bearerTokenSecret": {"name": GATE_TOKEN_SECRET, "key": "token"},
            "matchers": format!(r#"{{alertname="{ALERT}"}}"#),
            "zoneScope": "RolloutZone",
            "pollInterval": POLL_SPEC,
            "timeout": "1s",
        }),
    )
    .await;
    let before = fx.uids().await;

    let faulty = fx.set_errors(FAULTY).await;
    // The first batch: both pods of zone-a (maxUnavailable 2, factor 0), which the token let
    // through the gate.
    let first = fx.wait_removals(2).await;
    let first_pods: BTreeSet<&str> = first.iter().map(|r| r.pod.as_str()).collect();
    let zone_a: BTreeSet<&str> = fx
        .zones
        .iter()
        .filter(|(_, z)| *z == "zone-a")
        .map(|(p, _)| p.as_str())
        .collect();
    assert_eq!(first_pods, zone_a, "the first batch is zone-a's");
    let faulty_pods = fx.wait_zone_ready("zone-a", &faulty).await;
    let zone_a_ready = faulty_pods.iter().filter_map(ready_since).max().unwrap();

    let alert = fx.federator.wait_firing("zone-a").await;
    assert_eq!(alert.shard, "0", "zone-a's shard evaluates zone-a's alert");
    the_pause_is_written_within_a_poll_of_the_alert(&fx, &alert).await;

    // Held past the moment the bake would have let zone-b start, by several polls.
    let until = zone_a_ready + signed(bake + 3 * POLL);
    fx.assert_no_removal_until(until, 2, "while zone-a's alert fired")
        .await;
    let after = fx.uids().await;
    for (pod, uid) in &before {
        if fx.zones[pod] != "zone-a" {
            assert_eq!(&after[pod], uid, "{pod} was replaced while the alert fired");
        }
    }
    // The healthy zones never alerted.
    let alerts = fx.federator.alerts().await.unwrap();
    assert!(
        alerts.iter().all(|a| a.zone == "zone-a"),
        "only zone-a alerts: {alerts:?}"
    );
    a_rollback_waits_until_the_alert_resolves(&fx, &faulty_pods, &alert).await;
}

/// The pause for `alert` is recorded (seen by the watch), written by the controller after the
/// alert's `activeAt` and within a poll interval (and a second) of it, naming the alert.
async fn the_pause_is_written_within_a_poll_of_the_alert(fx: &Fixture, alert: &Alert) {
    let (paused_at, status) = wait_for("the pause recorded", TIMEOUT, || async {
        fx.statuses
            .first_since(alert.active_at, |s| {
                paused_by(s).contains(pause_source::ALERT) && paused_for(s, reason::ALERT_FIRING)
            })
            .ok_or_else(|| format!("{:?}", fx.statuses.entries().last()))
    })
    .await;
    assert!(status.paused_rollout, "{status:?}");
    fx.audit_caught_up().await;
    let (received, recorded) = fx
        .zau_status_write_seen_at(paused_at)
        .expect("the controller's status write in the audit log");
    assert!(
        received > alert.active_at,
        "the write seen at {paused_at} was received at {received}, before the alert's activeAt"
    );
    let latency = recorded.duration_since(alert.active_at);
    println!(
        "zau_gate: alert activeAt {} -> pause written {received}..{recorded} ({:.3} s; seen by a watch {:.3} s after activeAt); poll {POLL:?}",
        alert.active_at,
        seconds(latency),
        seconds(paused_at.duration_since(alert.active_at))
    );
    assert!(
        latency <= signed(POLL + Duration::from_secs(1)),
        "the pause came {:.3} s after the alert's activeAt",
        seconds(latency)
    );
    assert!(
        paused(&status).unwrap().2.contains(ALERT),
        "the condition names the alert: {status:?}"
    );
}

/// Roll back: a new revision without errors. The faulty pods still err, so the alert still
/// fires, and the rollback waits under the same gate (the bake shortened: it is not what is
/// tested here any more); once the fault ends in the running pods and the alert resolves, the
/// rollback completes, starting in zone-a.
async fn a_rollback_waits_until_the_alert_resolves(
    fx: &Fixture,
    faulty_pods: &[Pod],
    alert: &Alert,
) {
    let healthy = fx.set_errors("0").await;
    fx.patch_zau(json!({"bakeTime": "2s"})).await;
    fx.wait_status("the rollback observed, still paused", |s| {
        s.update_revision == healthy
            && s.observed_generation == Some(2)
            && paused_by(s).contains(pause_source::ALERT)
    })
    .await;
    let until = Timestamp::now() + signed(3 * POLL);
    fx.assert_no_removal_until(until, 2, "by the rollback while the alert fired")
        .await;
    // The fault ends in the running pods: their error rate decays and the alert resolves.
    let resolving = Timestamp::now();
    for pod in faulty_pods {
        fx.stop_errors(pod).await;
    }
    fx.federator.wait_quiet().await;
    let last_firing = fx.last_firing("zone-a").await;
    assert!(last_firing > alert.active_at);
    fx.wait_complete(&healthy).await;
    let removals = fx.removals();
    assert_eq!(removals.len(), 2 + REPLICAS, "{removals:?}");
    let rollback = &removals[2..];
    assert!(
        rollback.iter().all(|r| r.at > last_firing),
        "removed while the alert fired (last firing evaluation {last_firing}): {rollback:?}"
    );
    assert_eq!(fx.zones[&rollback[0].pod], "zone-a", "{rollback:?}");
    let status = fx.status().await;
    assert!(paused_by(&status).is_empty(), "{status:?}");
    println!(
        "zau_gate: the last firing evaluation {:.1} s after the errors stopped; the rollback's first removal {:.3} s after it",
        seconds(last_firing.duration_since(resolving)),
        seconds(rollback[0].at.duration_since(last_firing))
    );
}

/// A zone-c pod of the application (outside the StatefulSet) errs. Rolling zone-a under
/// `zoneScope: Any` pauses at once and removes nothing; under `RolloutZone` zone-a and zone-b
/// roll without a pause, and the rollout pauses on reaching zone-c, until the alert resolves.
/// The gate reaches the federator through a Service's EndpointSlice.
#[tokio::test]
#[ignore = "needs the local zonal cluster with its real nodes (make e2e)"]
async fn zau_gate_an_alert_in_another_zone_pauses_under_any_but_not_under_rollout_zone() {
    let fx = Fixture::new("zau-gate-scope", Gate::Service).await;
    start_a_faulty_pod_in_zone_c(&fx).await;
    let alert = fx.federator.wait_firing("zone-c").await;
    assert_eq!(alert.shard, "2");

    fx.create_zau(
        json!({"maxUnavailable": 2, "exponentialFactor": "0"}),
        json!({
            "matchers": format!(r#"{{alertname="{ALERT}", severity="page"}}"#),
            "zoneScope": "Any",
            "pollInterval": POLL_SPEC,
            "timeout": "1s",
        }),
    )
    .await;
    let revision = fx.set_errors("0").await;
    fx.wait_status("Any: paused by zone-c's alert", |s| {
        s.update_revision == revision
            && paused_by(s).contains(pause_source::ALERT)
            && paused_for(s, reason::ALERT_FIRING)
    })
    .await;
    // zone-a is the rollout's first zone: under RolloutZone it would roll now.
    let until = Timestamp::now() + signed(4 * POLL);
    fx.assert_no_removal_until(until, 0, "under Any while zone-c alerted")
        .await;

    under_rollout_zone_zones_a_and_b_roll_and_zone_c_waits(&fx).await;

    // The faulty pod goes; zone-c's alert resolves and its pods roll.
    fx.pods
        .delete("faulty", &DeleteParams::default())
        .await
        .unwrap();
    fx.federator.wait_quiet().await;
    let last_firing = fx.last_firing("zone-c").await;
    fx.wait_complete(&revision).await;
    let removals = fx.removals();
    assert_eq!(removals.len(), REPLICAS, "{removals:?}");
    let zone_c = fx.in_zone(&removals, "zone-c");
    assert_eq!(zone_c.len(), 2);
    assert!(
        zone_c.iter().all(|r| r.at > last_firing),
        "zone-c rolled while its alert fired (last firing evaluation {last_firing}): {zone_c:?}"
    );
}

/// The pod `faulty`: a pod of the application outside the StatefulSet, in zone-c, erring.
async fn start_a_faulty_pod_in_zone_c(fx: &Fixture) {
    let mut template = fx.real.metrics_target_template("faulty");
    template["metadata"]["name"] = json!("faulty");
    template["metadata"]["labels"][PART_OF] = json!(SET);
    template["spec"]["nodeSelector"][e2e::workload::ZONE_LABEL] = json!("zone-c");
    template["spec"]
        .as_object_mut()
        .unwrap()
        .remove("topologySpreadConstraints");
    template["spec"]["containers"][0]["env"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "ERRORS_PER_SECOND", "value": FAULTY}));
    fixture::create(&fx.pods, template).await;
}

/// `zoneScope: RolloutZone`: zone-a and zone-b roll, zone-c's alert pausing nothing until
/// zone-b's batch was removed; it holds the rollout when zone-c's turn comes.
async fn under_rollout_zone_zones_a_and_b_roll_and_zone_c_waits(fx: &Fixture) {
    fx.patch_zau(json!({"alertGate": {"zoneScope": "RolloutZone"}}))
        .await;
    let scoped = Timestamp::now();
    let removals = fx.wait_removals(4).await;
    let status = fx
        .wait_status("RolloutZone: paused with zone-c left", |s| {
            s.observed_generation == Some(2)
                && s.total_old_replicas == 2
                && s.old_replicas.get("zone-c") == Some(&2)
                && paused_for(s, reason::ALERT_FIRING)
        })
        .await;
    assert!(paused_by(&status).contains(pause_source::ALERT));
    let rolled: BTreeSet<&str> = removals.iter().map(|r| r.pod.as_str()).collect();
    let zones_ab: BTreeSet<&str> = fx
        .zones
        .iter()
        .filter(|(_, z)| *z != "zone-c")
        .map(|(p, _)| p.as_str())
        .collect();
    assert_eq!(rolled, zones_ab, "zone-a and zone-b rolled: {removals:?}");
    // Until zone-b's batch was removed, zone-c's alert paused nothing.
    let entries = fx.statuses.entries();
    let zone_b_removed = removals[3].at;
    let held: Vec<_> = entries
        .iter()
        .filter(|(at, s)| {
            *at >= scoped
                && *at < zone_b_removed
                && s.observed_generation == Some(2)
                && paused_by(s).contains(pause_source::ALERT)
        })
        .collect();
    assert!(
        held.is_empty(),
        "paused by zone-c's alert while rolling another zone: {held:?}"
    );
    let until = Timestamp::now() + signed(4 * POLL);
    fx.assert_no_removal_until(until, 4, "in zone-c while its alert fired")
        .await;
}

/// The gate unreachable (the federator stopped): the rollout pauses with AlertGateUnavailable
/// naming the endpoint and removes nothing; the federator started again on the same port, it
/// proceeds. Between zones it bakes: the next zone's first removal comes no earlier than
/// `bakeTime` after the previous zone's last pod turned Ready. `paused: true` set during a bake
/// holds the rollout past the bake's end; unset, it resumes.
#[tokio::test]
#[ignore = "needs the local zonal cluster with its real nodes (make e2e)"]
async fn zau_gate_an_unreachable_gate_bake_time_and_a_manual_pause_hold_the_rollout() {
    let bake = Duration::from_secs(8);
    let mut fx = Fixture::new("zau-gate-bake", Gate::Url).await;
    fx.create_zau(
        json!({"maxUnavailable": 1, "exponentialFactor": "1", "bakeTime": format!("{}s", bake.as_secs())}),
        json!({
            "matchers": format!(r#"{{alertname="{ALERT}"}}"#),
            "pollInterval": POLL_SPEC,
            "timeout": "1s",
        }),
    )
    .await;
    let revision = an_unreachable_gate_pauses_until_the_federator_is_back(&mut fx).await;
    let restarted = Timestamp::now();

    // zone-a in two batches, then the bake.
    let removals = fx.wait_removals(2).await;
    assert!(removals[0].at > restarted, "{removals:?}");
    assert_eq!(fx.in_zone(&removals, "zone-a").len(), 2, "{removals:?}");
    fx.wait_zone_ready("zone-a", &revision).await;
    let status = fx
        .wait_status("baking after zone-a", |s| {
            paused_by(s).contains(pause_source::BAKE) && s.next_zone_not_before.is_some()
        })
        .await;
    let not_before = status.next_zone_not_before.unwrap().0;
    a_manual_pause_holds_past_the_bake(&fx, not_before).await;
    let resumed = Timestamp::now();

    // zone-b, the bake, zone-c.
    fx.wait_complete(&revision).await;
    let removals = fx.removals();
    assert_eq!(removals.len(), REPLICAS, "{removals:?}");
    let order: Vec<&str> = removals.iter().map(|r| fx.zones[&r.pod].as_str()).collect();
    assert_eq!(
        order,
        ["zone-a", "zone-a", "zone-b", "zone-b", "zone-c", "zone-c"]
    );
    assert!(removals[2].at > resumed, "{removals:?}");
    zone_c_started_a_bake_after_zone_b_was_ready(&fx, &removals, bake, not_before).await;
}

/// The federator stopped: no clear answer, no removal (Paused, AlertGateUnavailable naming the
/// endpoint); then started again on the same port. Returns the revision rolled out.
async fn an_unreachable_gate_pauses_until_the_federator_is_back(fx: &mut Fixture) -> String {
    fx.federator.stop().await;
    let revision = fx.set_errors("0").await;
    let url = fx.federator.url();
    let status = fx
        .wait_status("Paused: AlertGateUnavailable", |s| {
            s.update_revision == revision && paused_for(s, reason::ALERT_GATE_UNAVAILABLE)
        })
        .await;
    let message = paused(&status).unwrap().2;
    assert!(message.contains(&url), "the reason names {url}: {message}");
    assert!(paused_by(&status).contains(pause_source::ALERT));
    let until = Timestamp::now() + signed(3 * POLL);
    fx.assert_no_removal_until(until, 0, "while the gate was unreachable")
        .await;
    fx.federator.start();
    revision
}

/// `paused: true` set during the bake (which ends at `not_before`) holds the rollout past its
/// end; unset, it resumes.
async fn a_manual_pause_holds_past_the_bake(fx: &Fixture, not_before: Timestamp) {
    fx.patch_zau(json!({"paused": true})).await;
    let status = fx
        .wait_status("paused by hand", |s| {
            paused_by(s).contains(pause_source::MANUAL)
        })
        .await;
    assert!(status.paused_rollout, "{status:?}");
    assert!(
        Timestamp::now() < not_before,
        "the manual pause landed after the bake ended ({not_before}): the test cannot tell"
    );
    fx.assert_no_removal_until(not_before + signed(3 * POLL), 2, "while paused by hand")
        .await;
    let status = fx.status().await;
    assert!(
        paused_for(&status, reason::MANUALLY_PAUSED),
        "the bake is over, the manual pause remains: {status:?}"
    );
    assert_eq!(
        paused_by(&status),
        BTreeSet::from([pause_source::MANUAL]),
        "{status:?}"
    );
    fx.patch_zau(json!({"paused": false})).await;
}

/// zone-c's first removal (the fifth of `removals`) came no earlier than `bake` after zone-b's
/// last pod turned Ready, and not much later; the status announced when zone-c could start
/// (a nextZoneNotBefore after zone-a's `not_before`), and it did not start earlier.
async fn zone_c_started_a_bake_after_zone_b_was_ready(
    fx: &Fixture,
    removals: &[Removal],
    bake: Duration,
    not_before: Timestamp,
) {
    let zone_b_pods: Vec<Pod> = pods::list(&fx.pods, &format!("app={SET}"))
        .await
        .into_iter()
        .filter(|p| fx.zones[&p.name_any()] == "zone-b")
        .collect();
    let zone_b_ready = zone_b_pods.iter().filter_map(ready_since).max().unwrap();
    let gap = removals[4].at.duration_since(zone_b_ready);
    // The Ready condition's time is whole seconds; the kubelet's write of it, to the microsecond.
    let written = zone_b_pods
        .iter()
        .filter_map(|p| fx.last_kubelet_status_write(&p.name_any(), removals[4].at))
        .max()
        .unwrap();
    println!(
        "zau_gate: zone-c's first removal {:.3} s after zone-b's last pod turned Ready ({zone_b_ready}), {:.3} s after the kubelet wrote it ({written}); bakeTime {bake:?}",
        seconds(gap),
        seconds(removals[4].at.duration_since(written))
    );
    assert!(
        gap >= signed(bake),
        "zone-c started {:.3} s after zone-b was Ready, before the bake of {bake:?}",
        seconds(gap)
    );
    assert!(
        gap <= signed(bake + 3 * POLL),
        "zone-c started {:.3} s after zone-b was Ready: the bake of {bake:?} held it longer than it should",
        seconds(gap)
    );
    // The status announced when zone-c could start, and it did not start earlier.
    let announced = fx
        .statuses
        .entries()
        .into_iter()
        .filter_map(|(_, s)| s.next_zone_not_before.map(|t| t.0))
        .filter(|t| *t > not_before)
        .max()
        .expect("a nextZoneNotBefore for zone-c");
    assert!(
        announced >= zone_b_ready + signed(bake),
        "{announced} is not a bake after {zone_b_ready}"
    );
    assert!(removals[4].at >= announced, "{removals:?} vs {announced}");
}
