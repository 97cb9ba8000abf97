//! The ZoneDisruptionBudget controller and eviction webhook against the local zonal cluster: the
//! real API server calls the webhook (a ValidatingWebhookConfiguration with a `url` on
//! 127.0.0.1, selecting only the test's namespace) for evictions through the real Eviction API;
//! the real StatefulSet controller recreates evicted pods and kwok makes them Ready.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::time::Duration;

use e2e::localstack::free_port;
use e2e::nodes::{TEST_NODE_TAINT, TestNode};
use e2e::pods::evict;
use e2e::process::{ControllerProcess, Kubectl, metric_sum};
use e2e::proxy::RoundRobinProxy;
use e2e::quota::PodQuota;
use e2e::tls::{Leaf, MountedSecret, TestCa, wait_served};
use e2e::webhook::{
    Counters, EvictionWebhook, TLS_SECRET, WEBHOOK_NAME, self_signed_args, zdb_args,
};
use e2e::workload::{self, spread_statefulset, to_statefulset, zone_disruption_budget};
use e2e::{Cluster, TestNamespace, fixture, pods, wait_for};
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::events::v1::Event;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};
use zone_api::{ZoneDisruptionBudget, ZoneDisruptionBudgetStatus};

#[path = "zdb/forged_review.rs"]
mod forged_review;
#[path = "zdb/kubectl_zone.rs"]
mod kubectl_zone;
#[path = "zdb/pdb_parity.rs"]
mod pdb_parity;

const SET: &str = "web";
const ZDB: &str = "web";
const TIMEOUT: Duration = Duration::from_secs(120);

fn statefulset(replicas: i32) -> StatefulSet {
    let replicas = usize::try_from(replicas).unwrap();
    to_statefulset(spread_statefulset(SET, replicas, "registry.invalid/web:1"))
}

struct Fixture {
    ns: TestNamespace,
    pods: Api<Pod>,
    zdbs: Api<ZoneDisruptionBudget>,
    webhook: EvictionWebhook,
    /// `--lease-duration` of the controllers: short, so handover tests are quick.
    lease_duration: &'static str,
    /// The host of the controllers' `--webhook-address`.
    webhook_host: &'static str,
}

impl Fixture {
    /// A namespace with the StatefulSet `web` (`replicas` pods spread over the 3 zones, every
    /// pod Ready) and a webhook configuration for this namespace only, pointing at `port`.
    async fn new(prefix: &str, replicas: usize, port: u16) -> Fixture {
        Self::new_on(prefix, replicas, "127.0.0.1", port).await
    }

    /// [`Fixture::new`] with the webhook called at `https://<host>:<port>`.
    async fn new_on(prefix: &str, replicas: usize, host: &str, port: u16) -> Fixture {
        let cluster = Cluster::get();
        let ns = TestNamespace::create(&cluster, prefix).await;
        let webhook = EvictionWebhook::create_on(&cluster, &ns, host, port).await;
        let fixture = Fixture {
            pods: ns.api(),
            zdbs: ns.api(),
            ns,
            webhook,
            lease_duration: "4s",
            webhook_host: "127.0.0.1",
        };
        let sets: Api<StatefulSet> = fixture.ns.api();
        sets.create(
            &PostParams::default(),
            &statefulset(i32::try_from(replicas).unwrap()),
        )
        .await
        .unwrap();
        fixture.wait_ready(replicas).await;
        fixture
    }

    /// One zdb-controller process serving the webhook on `webhook_port` with the self-signed
    /// certificate of the Secret `SECRET`.
    fn controller(&self, webhook_port: u16, leader_elect: bool) -> ControllerProcess {
        self.controller_with(webhook_port, leader_elect, &self.self_signed_args())
            .0
    }

    /// The TLS flags of self-signed mode: the CA and certificate in the Secret `TLS_SECRET`,
    /// the caBundle of this test's webhook configuration patched from it.
    fn self_signed_args(&self) -> Vec<String> {
        self_signed_args(&self.ns.name)
    }

    /// One zdb-controller process serving the webhook on `webhook_port` with the TLS flags
    /// `tls`; also returns the port of its metrics endpoint.
    fn controller_with(
        &self,
        webhook_port: u16,
        leader_elect: bool,
        tls: &[String],
    ) -> (ControllerProcess, u16) {
        // A port free when picked may be taken (e.g. as the source port of some connection)
        // before the controller binds it, and the controller then exits at once: pick another.
        for _ in 0..3 {
            let metrics_port = free_port();
            let mut process = self.start_controller(webhook_port, leader_elect, tls, metrics_port);
            if process.started_serving() {
                return (process, metrics_port);
            }
            let log = std::fs::read_to_string(&process.log).unwrap_or_default();
            assert!(
                log.contains(&format!("127.0.0.1:{metrics_port}"))
                    && log.contains("Address already in use"),
                "zdb-controller exited at start:\n{log}"
            );
        }
        panic!("no free port for the metrics endpoint in three attempts");
    }

    /// One zdb-controller process serving the webhook on `webhook_port` with the certificate
    /// mounted at `mounted` (`--cert-dir`), this test's caBundle set to `ca`'s; waits until it
    /// serves `leaf` (`what` says so).
    async fn controller_with_cert_dir(
        &self,
        webhook_port: u16,
        ca: &TestCa,
        mounted: &MountedSecret,
        leaf: &Leaf,
        what: &str,
    ) -> ControllerProcess {
        self.webhook.set_ca_bundle(&self.ns, &ca.pem).await;
        let cert_dir = mounted.dir.display().to_string();
        let (controller, _) =
            self.controller_with(webhook_port, false, &["--cert-dir".to_string(), cert_dir]);
        wait_served(webhook_port, &ca.pem, leaf, what).await;
        controller
    }

    fn start_controller(
        &self,
        webhook_port: u16,
        leader_elect: bool,
        tls: &[String],
        metrics_port: u16,
    ) -> ControllerProcess {
        let mut args = zdb_args(
            &format!("zdb-{webhook_port}"),
            leader_elect,
            &self.ns.name,
            &format!("127.0.0.1:{metrics_port}"),
            &format!("{}:{webhook_port}", self.webhook_host),
            &self.webhook.name,
        );
        for (flag, value) in [
            ("--lease-duration", self.lease_duration),
            ("--renew-interval", "1s"),
        ] {
            args.extend([flag.to_string(), value.to_string()]);
        }
        args.extend(tls.iter().cloned());
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        ControllerProcess::start("zdb-controller", &args, &[])
    }

    /// [`Fixture::new`] with its webhook on a free port, one controller serving it without
    /// leader election, and the budget `web` (`max_unavailable`, `dry_run`) computed with every
    /// pod healthy: the start of most tests. Also returns the controller and the pods by zone.
    async fn with_budget(
        prefix: &str,
        replicas: usize,
        max_unavailable: i32,
        dry_run: bool,
    ) -> (Fixture, ControllerProcess, BTreeMap<String, Vec<String>>) {
        let port = free_port();
        let fixture = Fixture::new(prefix, replicas, port).await;
        let controller = fixture.controller(port, false);
        fixture.wait_ca_bundle().await;
        fixture.create_zdb(max_unavailable, dry_run).await;
        fixture
            .wait_budget(i32::try_from(replicas).unwrap(), max_unavailable)
            .await;
        let zones = fixture.pods_by_zone().await;
        (fixture, controller, zones)
    }

    async fn create_zdb(&self, max_unavailable: i32, dry_run: bool) {
        self.create_budget(
            ZDB,
            json!({
                "selector": {"matchLabels": {"app": SET}},
                "maxUnavailable": max_unavailable,
                "dryRun": dry_run,
            }),
        )
        .await;
    }

    /// The ZoneDisruptionBudget `name` with `spec`, created.
    async fn create_budget(&self, name: &str, spec: Value) -> ZoneDisruptionBudget {
        self.zdbs
            .create(&PostParams::default(), &zone_disruption_budget(name, spec))
            .await
            .unwrap()
    }

    async fn wait_ready(&self, replicas: usize) {
        let selector = format!("app={SET}");
        pods::wait_all_available(&self.pods, &selector, replicas, None, TIMEOUT).await;
    }

    /// Makes the StatefulSet controller look at the set again now (it backs off after a refused
    /// pod creation).
    async fn touch_statefulset(&self) {
        workload::touch(&self.ns.api(), SET).await;
    }

    async fn list_pods(&self) -> Vec<Pod> {
        pods::list(&self.pods, &format!("app={SET}")).await
    }

    /// Zone -> pod names, sorted.
    async fn pods_by_zone(&self) -> BTreeMap<String, Vec<String>> {
        let mut zones: BTreeMap<String, Vec<String>> = BTreeMap::new();
        // Pod names in order: each zone's list comes out sorted.
        for (pod, zone) in e2e::nodes::pod_zones(&self.pods, &format!("app={SET}")).await {
            zones.entry(zone).or_default().push(pod);
        }
        zones
    }

    async fn status(&self) -> ZoneDisruptionBudgetStatus {
        self.zdbs.get(ZDB).await.unwrap().status.unwrap_or_default()
    }

    /// Waits until the budget `name` passes `check` (given the budget and its status), and
    /// returns it.
    async fn wait_zdb(
        &self,
        what: &str,
        name: &str,
        timeout: Duration,
        check: impl Fn(&ZoneDisruptionBudget, &ZoneDisruptionBudgetStatus) -> bool,
    ) -> ZoneDisruptionBudget {
        fixture::wait_status(&self.zdbs, name, what, timeout, check).await
    }

    /// Waits until the status of the budget `web` passes `check`.
    async fn wait_status(
        &self,
        what: &str,
        check: impl Fn(&ZoneDisruptionBudgetStatus) -> bool,
    ) -> ZoneDisruptionBudgetStatus {
        let zdb = self.wait_zdb(what, ZDB, TIMEOUT, |_, s| check(s)).await;
        zdb.status.unwrap_or_default()
    }

    /// Waits until the controller has computed the budget with every pod healthy and no
    /// eviction recorded.
    async fn wait_budget(&self, expected: i32, allowed_per_zone: i32) {
        self.wait_zdb(
            "the budget computed, every zone healthy",
            ZDB,
            TIMEOUT,
            |zdb, status| {
                let total: i32 = status.expected_pods.values().sum();
                Some(status.observed_generation) == zdb.metadata.generation
                    && total == expected
                    && status.disrupted_zones.is_empty()
                    && status.disrupted_pods.is_empty()
                    && status.disruptions_allowed.len() == 3
                    && status
                        .disruptions_allowed
                        .values()
                        .all(|a| *a == allowed_per_zone)
            },
        )
        .await;
    }

    /// Waits until the controller patched the caBundle (until then the API server cannot call
    /// the webhook and, failing closed, refuses every eviction of the namespace).
    async fn wait_ca_bundle(&self) {
        self.webhook.wait_ca_bundle(&self.ns).await;
    }
}

fn assert_denied(result: Result<(), (u16, String)>, what: &str, mentions: &[&str]) {
    let Err((code, message)) = result else {
        panic!("{what}: allowed, expected a 429");
    };
    assert_eq!(code, 429, "{what}: {message}");
    for text in mentions {
        assert!(
            message.contains(text),
            "{what}: {message:?} should name {text}"
        );
    }
}

#[tokio::test]
#[ignore = "needs the local zonal cluster (make e2e)"]
async fn two_evictions_in_one_zone_then_that_zone_and_every_other_is_refused() {
    let (fixture, _controller, zones) = Fixture::with_budget("zdb-budget", 9, 2, false).await;

    assert_eq!(zones.len(), 3, "{zones:?}");
    let zone_a = &zones["zone-a"];
    let zone_b = &zones["zone-b"];
    assert_eq!(zone_a.len(), 3, "{zones:?}");

    // A dry run is judged like a real eviction and records nothing.
    evict(&fixture.pods, &zone_a[0], true).await.unwrap();
    assert!(fixture.status().await.disrupted_pods.is_empty());

    // The evicted pods are not recreated until the quota goes: on a slow machine they could
    // otherwise be back and Ready before the checks below, which then would test nothing.
    let quota = PodQuota::hold(&fixture.ns, 7).await;
    evict(&fixture.pods, &zone_a[0], false).await.unwrap();
    evict(&fixture.pods, &zone_a[1], false).await.unwrap();
    // Both recorded in zone-a, terminating or gone (a record places its missing pod).
    let status = fixture.status().await;
    assert_eq!(status.disrupted_zones, ["zone-a"], "{status:?}");
    assert_eq!(status.current_unhealthy["zone-a"], 2, "{status:?}");
    assert_eq!(
        status.disrupted_pod_zones,
        zone_a[..2]
            .iter()
            .map(|pod| (pod.clone(), "zone-a".to_string()))
            .collect::<BTreeMap<_, _>>(),
        "{status:?}"
    );

    assert_denied(
        evict(&fixture.pods, &zone_a[2], false).await,
        "a third eviction in zone-a",
        &["zone-a", "maxUnavailable 2"],
    );
    assert_denied(
        evict(&fixture.pods, &zone_b[0], false).await,
        "an eviction in zone-b while zone-a is disrupted",
        &["zone zone-a is disrupted", "zone-b"],
    );
    // A dry run is refused the same way.
    assert_denied(
        evict(&fixture.pods, &zone_b[0], true).await,
        "a dry-run eviction in zone-b",
        &["zone-a"],
    );

    // Once the evicted pods are recreated and Ready, their records are dropped and another zone
    // may be disrupted.
    quota.release().await;
    fixture.touch_statefulset().await;
    fixture.wait_ready(9).await;
    fixture
        .wait_status("the records dropped, no zone disrupted", |status| {
            status.disrupted_pods.is_empty() && status.disrupted_zones.is_empty()
        })
        .await;
    evict(&fixture.pods, &zone_b[0], false).await.unwrap();
}

#[tokio::test]
#[ignore = "needs the local zonal cluster (make e2e)"]
async fn shadow_mode_allows_what_it_would_deny() {
    let (fixture, _controller, zones) = Fixture::with_budget("zdb-shadow", 6, 1, true).await;
    evict(&fixture.pods, &zones["zone-a"][0], false)
        .await
        .unwrap();
    // Would be denied (zone-a is disrupted), allowed in shadow mode.
    evict(&fixture.pods, &zones["zone-b"][0], false)
        .await
        .unwrap();
    let events: Api<Event> = fixture.ns.api();
    wait_for(
        "a WouldDenyEviction event",
        Duration::from_secs(30),
        || async {
            let found = events
                .list(&ListParams::default())
                .await
                .map_err(|e| e.to_string())?
                .items
                .into_iter()
                .filter(|e| e.reason.as_deref() == Some("WouldDenyEviction"))
                .filter_map(|e| e.note)
                .find(|note| note.contains("zone-a"));
            found.ok_or_else(|| "no event yet".to_string())
        },
    )
    .await;
}

/// `maxUnavailable: "0%"` (and 0, see [`zdb_frozen_budgets_hold_a_drain_that_takes_other_pods`])
/// is a freeze, not an invalid budget: the status says so, every eviction of a running pod is
/// refused with a 429 naming the freeze — a dry run too — and nothing is recorded. (It used to be
/// Invalid, and an invalid budget allows every eviction.)
#[tokio::test]
#[ignore = "needs the local zonal cluster (make e2e)"]
async fn zdb_zero_percent_freezes_the_budget() {
    let port = free_port();
    let fixture = Fixture::new("zdb-frozen", 3, port).await;
    let (_controller, metrics) = fixture.controller_with(port, false, &fixture.self_signed_args());
    fixture.wait_ca_bundle().await;
    fixture
        .create_budget(
            ZDB,
            json!({"selector": {"matchLabels": {"app": SET}}, "maxUnavailable": "0%"}),
        )
        .await;
    let frozen = fixture
        .wait_zdb(
            "the budget computed as frozen",
            ZDB,
            TIMEOUT,
            |zdb, status| {
                Some(status.observed_generation) == zdb.metadata.generation
                    && status.conditions.iter().any(|c| {
                        c.type_ == "Ready"
                            && c.status == "True"
                            && c.reason == zone_api::zdb::reason::FROZEN
                            && c.message.contains("frozen")
                    })
            },
        )
        .await;
    let status = frozen.status.clone().unwrap();
    assert!(
        !status
            .conditions
            .iter()
            .any(|c| c.type_ == "Invalid" && c.status == "True"),
        "{status:?}"
    );
    assert!(
        status.disruptions_allowed.values().all(|n| *n == 0),
        "{status:?}"
    );
    let before = decisions_for(metrics, "Frozen").await;
    for pod in fixture.list_pods().await {
        let name = pod.name_any();
        for dry_run in [true, false] {
            assert_denied(
                evict(&fixture.pods, &name, dry_run).await,
                &format!("evicting {name} (dry run: {dry_run}) from a frozen budget"),
                &["frozen", "maxUnavailable 0"],
            );
        }
    }
    assert_eq!(decisions_for(metrics, "Frozen").await - before, 6.0);
    let after = fixture.zdbs.get(ZDB).await.unwrap();
    assert_eq!(
        after.resource_version(),
        frozen.resource_version(),
        "a refused eviction wrote the budget: {:?}",
        after.status
    );
    assert_eq!(fixture.list_pods().await.len(), 3, "a pod was evicted");
    let events: Api<Event> = fixture.ns.api();
    let frozen_events = events
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some(zone_api::zdb::reason::FROZEN))
        .count();
    assert_eq!(frozen_events, 1, "one BudgetFrozen event as it froze");

    // Raised, it is a budget again: one eviction is allowed.
    let patch = json!({"spec": {"maxUnavailable": 1}});
    fixture
        .zdbs
        .patch(ZDB, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    fixture.wait_budget(3, 1).await;
    let pod = fixture.list_pods().await[0].name_any();
    evict(&fixture.pods, &pod, false).await.unwrap();
}

/// A StatefulSet `name` of `replicas` pods on `node` only, labelled `app: <name>` and
/// `drain: yes` (the drain's pod selector).
async fn create_pinned_set(ns: &TestNamespace, name: &str, replicas: i32, node: &TestNode) {
    let selector = json!({"app": name});
    let labels = json!({"app": name, "drain": "yes"});
    create_on_node(ns, name, replicas, node, selector, labels).await;
}

/// Creates the StatefulSet `name` of `replicas` pods on `node` only, selecting `selector`, its
/// pods labelled `labels`.
async fn create_on_node(
    ns: &TestNamespace,
    name: &str,
    replicas: i32,
    node: &TestNode,
    selector: Value,
    labels: Value,
) {
    let set: StatefulSet = serde_json::from_value(json!({
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "serviceName": name,
            "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": selector},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "terminationGracePeriodSeconds": 1,
                    "nodeSelector": {"kubernetes.io/hostname": node.name},
                    "tolerations": [{
                        "key": TEST_NODE_TAINT,
                        "operator": "Equal",
                        "value": node.taint,
                        "effect": "NoSchedule",
                    }],
                    "containers": [{"name": "app", "image": "registry.invalid/web:1"}],
                },
            },
        },
    }))
    .unwrap();
    let sets: Api<StatefulSet> = ns.api();
    sets.create(&PostParams::default(), &set).await.unwrap();
}

/// A real `kubectl drain` of a node holding the pods of three budgets: `frozen-int`
/// (maxUnavailable 0), `frozen-pct` ("0%") and `free` (maxUnavailable 2). The free budget's pods
/// are evicted; each frozen one's are refused with 429s naming the freeze, kubectl retries them
/// until its timeout, and they still run.
#[tokio::test]
#[ignore = "needs the local zonal cluster (make e2e)"]
async fn zdb_frozen_budgets_hold_a_drain_that_takes_other_pods() {
    let port = free_port();
    let fixture = Fixture::new("zdb-freeze-drain", 3, port).await;
    let node = TestNode::create(&fixture.ns, "zone-a").await;
    let budgets = [
        ("frozen-int", json!(0)),
        ("frozen-pct", json!("0%")),
        ("free", json!(2)),
    ];
    for (name, _) in &budgets {
        create_pinned_set(&fixture.ns, name, 2, &node).await;
    }
    pods::wait_all_available(&fixture.pods, "drain=yes", 6, None, TIMEOUT).await;
    let _controller = fixture.controller(port, false);
    fixture.wait_ca_bundle().await;
    for (name, max_unavailable) in &budgets {
        fixture
            .create_budget(
                name,
                json!({"selector": {"matchLabels": {"app": name}}, "maxUnavailable": max_unavailable}),
            )
            .await;
    }
    for (name, _) in &budgets {
        fixture
            .wait_zdb(
                &format!("budget {name} computed"),
                name,
                TIMEOUT,
                |zdb, status| {
                    Some(status.observed_generation) == zdb.metadata.generation
                        && status.expected_pods.values().sum::<i32>() == 2
                        && status.current_healthy.values().sum::<i32>() == 2
                },
            )
            .await;
    }
    let before = fixture.live_uids_of("drain=yes").await;
    assert_eq!(before.len(), 6, "every pod of the three sets: {before:?}");
    let client = fixture.ns.client.clone();

    let (success, output) = Kubectl::drain(&node.name, "drain=yes", &["--timeout=20s"])
        .finish(Duration::from_secs(90))
        .await;
    assert!(!success, "the drain of frozen pods succeeded:\n{output}");
    assert!(node.unschedulable(&client).await, "drain cordons first");
    for frozen in ["frozen-int", "frozen-pct"] {
        let refusal = format!("error when evicting pods/\"{frozen}-0\"");
        assert!(
            output.matches(&refusal).count() >= 2,
            "kubectl retried {frozen}-0's 429s:\n{output}"
        );
    }
    assert!(
        output.contains("will retry after 5s") && output.contains("frozen (maxUnavailable 0)"),
        "refused with a 429 naming the freeze:\n{output}"
    );
    let after = fixture.live_uids_of("drain=yes").await;
    for frozen in ["frozen-int", "frozen-pct"] {
        for i in 0..2 {
            let pod = format!("{frozen}-{i}");
            assert_eq!(after.get(&pod), before.get(&pod), "{pod} was evicted");
        }
    }
    // The other budget's pods were evicted (their replacements cannot go back onto the cordoned
    // node, so they are gone or new).
    for i in 0..2 {
        let pod = format!("free-{i}");
        assert_ne!(after.get(&pod), before.get(&pod), "{pod} was not evicted");
    }
}

/// Rounds of [`concurrent_evictions_through_two_replicas_disrupt_at_most_the_budget_in_one_zone`]
/// (`E2E_ZDB_CONCURRENCY_RUNS`, default 3; the perf script asks for more).
fn concurrency_rounds() -> usize {
    std::env::var("E2E_ZDB_CONCURRENCY_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3)
}

#[tokio::test]
#[ignore = "needs the local zonal cluster (make e2e)"]
async fn concurrent_evictions_through_two_replicas_disrupt_at_most_the_budget_in_one_zone() {
    let rounds = concurrency_rounds();
    for round in 1..=rounds {
        concurrency_round(round, rounds).await;
    }
}

/// One independent round: its own namespace, pods, budget, Secret and two replicas. (Reusing the
/// pods of a previous round is not independent: kwok, deleting a terminating pod by name, also
/// deletes its replacement when a pod was evicted many times, seconds after the round.)
async fn concurrency_round(round: usize, rounds: usize) {
    let (port_one, port_two) = (free_port(), free_port());
    let backends: Vec<SocketAddr> = vec![
        format!("127.0.0.1:{port_one}").parse().unwrap(),
        format!("127.0.0.1:{port_two}").parse().unwrap(),
    ];
    // The proxy is bound first (a port picked now could be taken while the fixture is made):
    // the configuration names its URL. It skips the replicas until they listen.
    let proxy = RoundRobinProxy::start(backends).await;
    let mut fixture = Fixture::new("zdb-race", 9, proxy.addr.port()).await;
    // No handover is tested here: a lease long enough that the burst of evictions, slowing the
    // API server on 2 cores, cannot make the leader miss its renew deadline and exit (seen once
    // with 4 s: two lease rounds over 1 s each).
    fixture.lease_duration = "15s";
    let tls = fixture.self_signed_args();
    let (_one, metrics_one) = fixture.controller_with(port_one, true, &tls);
    let (_two, metrics_two) = fixture.controller_with(port_two, true, &tls);
    fixture.wait_ca_bundle().await;
    fixture.create_zdb(2, false).await;

    assert_one_ca_for_both_replicas(&fixture, [port_one, port_two]).await;

    fixture.wait_budget(9, 2).await;
    fixture.keep_replacements_pending().await;
    let before = [decisions(metrics_one).await, decisions(metrics_two).await];
    // Zones as placed before the round (an evicted pod may be recreated and not scheduled yet
    // when the round ends).
    let zones = fixture.pods_by_zone().await;
    let names: Vec<String> = zones.values().flatten().cloned().collect();
    assert_eq!(names.len(), 9, "{zones:?}");
    let started = std::time::Instant::now();
    let (evicted, codes, unexpected) = evict_concurrently(&fixture, &names).await;
    let elapsed = started.elapsed();
    let evicted_zones: BTreeSet<&String> = evicted
        .iter()
        .map(|pod| {
            zones
                .iter()
                .find(|(_, names)| names.contains(pod))
                .map(|(zone, _)| zone)
                .unwrap()
        })
        .collect();
    let after = [decisions(metrics_one).await, decisions(metrics_two).await];
    let decided = [after[0] - before[0], after[1] - before[1]];
    eprintln!(
        "round {round}/{rounds}: evicted {evicted:?} in {evicted_zones:?}, refusals by code {codes:?}, decisions per replica {decided:?}, {elapsed:?}"
    );
    assert!(
        !evicted.is_empty() && evicted.len() <= 2,
        "round {round}: evicted {evicted:?}, refusals by code {codes:?}"
    );
    assert_eq!(
        evicted_zones.len(),
        1,
        "round {round}: evicted {evicted:?} in zones {evicted_zones:?}"
    );
    assert!(
        unexpected.is_empty(),
        "round {round}: refusals by code {codes:?}, unexpected: {unexpected:?}"
    );
    assert!(
        decided.iter().all(|d| *d > 0.0),
        "round {round}: both replicas must have decided: {decided:?}"
    );
    eprintln!(
        "round {round}: proxy connections per replica: {:?}",
        proxy.connections()
    );
}

/// One CA for both replicas: the one in the Secret, which is also the caBundle, and both serve
/// the Secret's certificate (on `ports`), verified against it.
async fn assert_one_ca_for_both_replicas(fixture: &Fixture, ports: [u16; 2]) {
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = fixture.ns.api();
    let data = secrets.get(TLS_SECRET).await.unwrap().data.unwrap();
    let ca = String::from_utf8(data["ca.crt"].0.clone()).unwrap();
    let served = Leaf {
        cert: String::from_utf8(data["tls.crt"].0.clone()).unwrap(),
        key: String::new(),
    };
    let bundles = fixture.webhook.ca_bundles(&fixture.ns).await.unwrap();
    assert_eq!(
        bundles,
        [ca.as_bytes().to_vec()],
        "the caBundle is the Secret's CA"
    );
    for port in ports {
        wait_served(
            port,
            &ca,
            &served,
            "each replica serving the Secret's certificate",
        )
        .await;
    }
}

/// What 100 concurrent evictions of `names` (in turn) came to: the pods evicted, the refusals
/// by HTTP code, and the refusals other than the webhook's (or a vanished pod's).
async fn evict_concurrently(
    fixture: &Fixture,
    names: &[String],
) -> (BTreeSet<String>, BTreeMap<u16, usize>, Vec<(u16, String)>) {
    let client: Client = fixture.ns.client.clone();
    let mut tasks = Vec::new();
    for i in 0..100 {
        let pods: Api<Pod> = Api::namespaced(client.clone(), &fixture.ns.name);
        let pod = names[i % names.len()].clone();
        tasks.push(tokio::spawn(async move {
            (pod.clone(), evict(&pods, &pod, false).await)
        }));
    }
    let mut evicted = BTreeSet::new();
    let mut codes: BTreeMap<u16, usize> = BTreeMap::new();
    let mut unexpected = Vec::new();
    for task in tasks {
        let (pod, result) = task.await.unwrap();
        match result {
            Ok(()) => {
                evicted.insert(pod);
            }
            Err((code, message)) => {
                *codes.entry(code).or_default() += 1;
                // 429: the webhook's refusal; 404: the pod was evicted and not recreated
                // yet; 500 for a webhook call that timed out (failing closed: a refusal)
                // happens only on a starved machine.
                let timed_out = code == 500
                    && message.contains("failed calling webhook")
                    && message.contains("deadline exceeded");
                if code != 429 && code != 404 && !timed_out {
                    unexpected.push((code, message));
                }
            }
        }
    }
    (evicted, codes, unexpected)
}

/// The eviction decisions a zdb-controller has made so far (its
/// `zone_aware_zdb_webhook_decisions_total`, every result and reason).
async fn decisions(metrics_port: u16) -> f64 {
    metric_sum(metrics_port, DECISIONS, None).await
}

/// As [`decisions`], of one reason only.
async fn decisions_for(metrics_port: u16, reason: &str) -> f64 {
    let label = format!("reason=\"{reason}\"");
    metric_sum(metrics_port, DECISIONS, Some(&label)).await
}

const DECISIONS: &str = "zone_aware_zdb_webhook_decisions_total";

#[tokio::test]
#[ignore = "needs the local zonal cluster (make e2e)"]
async fn an_unready_pod_disrupts_its_zone_and_may_itself_be_evicted() {
    let (fixture, _controller, zones) = Fixture::with_budget("zdb-unready", 6, 1, false).await;
    let (zone_a, zone_b) = (&zones["zone-a"], &zones["zone-b"]);

    pods::set_ready(&fixture.pods, &zone_a[0], false).await;
    fixture
        .wait_status("zone-a disrupted by the unready pod", |status| {
            status.disrupted_zones == ["zone-a"] && status.disruptions_allowed["zone-a"] == 0
        })
        .await;
    assert_denied(
        evict(&fixture.pods, &zone_b[0], false).await,
        "an eviction in zone-b while a zone-a pod is unready",
        &["zone zone-a is disrupted", "zone-b"],
    );
    assert_denied(
        evict(&fixture.pods, &zone_a[1], false).await,
        "a second pod of zone-a with maxUnavailable 1",
        &["zone-a", "maxUnavailable 1"],
    );
    // Evicting the pod that is already down removes no availability: allowed, not recorded.
    evict(&fixture.pods, &zone_a[0], false).await.unwrap();
    assert!(fixture.status().await.disrupted_pods.is_empty());
}

#[tokio::test]
#[ignore = "needs the local zonal cluster (make e2e)"]
async fn a_pod_selected_by_two_budgets_cannot_be_evicted() {
    let port = free_port();
    let fixture = Fixture::new("zdb-overlap", 3, port).await;
    let _controller = fixture.controller(port, false);
    fixture.wait_ca_bundle().await;
    fixture.create_zdb(1, false).await;
    fixture
        .create_budget(
            "web-too",
            json!({"selector": {"matchLabels": {"app": SET}}, "maxUnavailable": 1}),
        )
        .await;
    wait_for("both budgets marked Invalid", TIMEOUT, || async {
        let mut states = Vec::new();
        for name in [ZDB, "web-too"] {
            let status = fixture
                .zdbs
                .get(name)
                .await
                .map_err(|e| e.to_string())?
                .status
                .unwrap_or_default();
            states.push(status.conditions.iter().any(|c| {
                c.type_ == "Invalid" && c.status == "True" && c.reason == "OverlappingBudgets"
            }));
        }
        if states.iter().all(|s| *s) {
            Ok(())
        } else {
            Err(format!("{states:?}"))
        }
    })
    .await;
    let pod = fixture.list_pods().await[0].name_any();
    // The webhook's cache of budgets is its own watch, which converges on its own (one that
    // expires re-lists after a backoff): dry runs, which evict nothing, show when it has both.
    wait_for("the webhook to refuse a dry run", TIMEOUT, || async {
        match evict(&fixture.pods, &pod, true).await {
            Err((429, _)) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    assert_denied(
        evict(&fixture.pods, &pod, false).await,
        "a pod of two budgets",
        &["web", "web-too"],
    );
}

#[tokio::test]
#[ignore = "needs the local zonal cluster (make e2e)"]
async fn the_standby_keeps_the_status_when_the_leader_dies() {
    let (port_one, port_two) = (free_port(), free_port());
    let backends: Vec<SocketAddr> = [port_one, port_two]
        .iter()
        .map(|port| format!("127.0.0.1:{port}").parse().unwrap())
        .collect();
    // Bound before the fixture names its URL (see the concurrency rounds).
    let proxy = RoundRobinProxy::start(backends).await;
    let fixture = Fixture::new("zdb-handover", 6, proxy.addr.port()).await;
    let mut replicas = BTreeMap::from([
        (
            format!("zdb-{port_one}"),
            fixture.controller(port_one, true),
        ),
        (
            format!("zdb-{port_two}"),
            fixture.controller(port_two, true),
        ),
    ]);
    fixture.wait_ca_bundle().await;
    fixture.create_zdb(1, false).await;
    fixture.wait_budget(6, 1).await;

    let leases: Api<k8s_openapi::api::coordination::v1::Lease> = fixture.ns.api();
    let holder = leases
        .get("zdb-controller")
        .await
        .unwrap()
        .spec
        .and_then(|s| s.holder_identity)
        .unwrap();
    drop(replicas.remove(&holder).expect("the leader is one of ours"));

    // The standby takes the lease and follows pod changes; its webhook kept serving meanwhile.
    let zones = fixture.pods_by_zone().await;
    pods::set_ready(&fixture.pods, &zones["zone-c"][0], false).await;
    fixture
        .wait_status("zone-c disrupted, seen by the new leader", |status| {
            status.disrupted_zones == ["zone-c"]
        })
        .await;
    assert_denied(
        evict(&fixture.pods, &zones["zone-a"][0], false).await,
        "an eviction in zone-a while zone-c is disrupted",
        &["zone zone-c is disrupted"],
    );
}

/// A pod deleted by hand (not evicted: the webhook never hears of it) and not recreated yet
/// counts as unhealthy in its zone: evictions in every other zone are refused until it is back.
#[tokio::test]
#[ignore = "needs the local zonal cluster (make e2e)"]
async fn zdb_deleted_pod_blocks_other_zones() {
    let (fixture, _controller, zones) = Fixture::with_budget("zdb-missing", 9, 1, false).await;
    let (zone_a, zone_b) = (&zones["zone-a"], &zones["zone-b"]);

    // At most 8 pods: the pod deleted below cannot be recreated until the quota goes.
    let quota = PodQuota::hold(&fixture.ns, 8).await;
    let victim = &zone_a[0];
    pods::delete_and_wait_gone(&fixture.pods, victim, TIMEOUT).await;
    fixture
        .wait_status("zone-a disrupted by the missing pod", |status| {
            let missing = status.conditions.iter().any(|c| {
                c.type_ == "Disrupted"
                    && c.status == "True"
                    && c.message == "zone-a: 1 other pod(s) unavailable or missing"
            });
            missing
                && status.disrupted_zones == ["zone-a"]
                && status.current_unhealthy["zone-a"] == 1
                && status.expected_pods["zone-a"] == 3
        })
        .await;
    assert_denied(
        evict(&fixture.pods, &zone_b[0], false).await,
        "an eviction in zone-b while a zone-a pod is missing",
        &[
            "zone zone-a is disrupted",
            "1 other pod(s) unavailable or missing",
            "zone zone-b must wait",
        ],
    );
    assert_denied(
        evict(&fixture.pods, &zone_a[1], false).await,
        "a second zone-a pod while one is missing, maxUnavailable 1",
        &["zone zone-a already has 1 of maxUnavailable 1"],
    );
    assert!(
        fixture.pods.get_opt(victim).await.unwrap().is_none(),
        "the quota did not hold: the pod was recreated, so the denials were not about a missing pod"
    );

    // Quota gone; a touch of the StatefulSet makes its controller retry at once.
    quota.release().await;
    fixture.touch_statefulset().await;
    fixture.wait_ready(9).await;
    fixture.wait_budget(9, 1).await;
    evict(&fixture.pods, &zone_b[0], false).await.unwrap();
}

/// The StatefulSet whose pods run on a test's own node (labelled `app: web` too, so the budget
/// selects them with the others).
const PINNED: &str = "pinned";

impl Fixture {
    /// The StatefulSet `pinned`: `replicas` pods on `node` only, selected by the budget.
    async fn create_pinned(&self, replicas: i32, node: &TestNode) {
        let labels = json!({"app": SET, "set": PINNED});
        create_on_node(&self.ns, PINNED, replicas, node, labels.clone(), labels).await;
    }

    /// From now on the pods the StatefulSet recreates stay Pending (a node selector no node
    /// matches; `OnDelete`, so the running pods are left alone): a zone disrupted by an
    /// eviction cannot recover while a test runs. Without it, kwok makes a replacement Ready in
    /// about a second and a later eviction in another zone is rightly allowed.
    async fn keep_replacements_pending(&self) {
        let sets: Api<StatefulSet> = self.ns.api();
        let patch = json!({"spec": {
            "updateStrategy": {"type": "OnDelete", "rollingUpdate": null},
            "template": {"spec": {"nodeSelector": {"e2e.zone-aware/no-such-node": "true"}}},
        }});
        sets.patch(SET, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap();
    }

    /// name -> uid of the budget's pods that are not terminating.
    async fn live_uids(&self) -> BTreeMap<String, String> {
        self.live_uids_of(&format!("app={SET}")).await
    }

    /// name -> uid of the pods `selector` finds that are not terminating.
    async fn live_uids_of(&self, selector: &str) -> BTreeMap<String, String> {
        pods::list(&self.pods, selector)
            .await
            .iter()
            .filter(|p| !pods::is_terminating(p))
            .map(|p| (p.name_any(), p.uid().unwrap()))
            .collect()
    }
}

/// Waits until the controller has seen `pod` unready: its zone is the one disrupted.
/// The budget `web` (maxUnavailable 1) over the fixture's 6 pods, computed, then zone-a
/// disrupted by an unready pod: an eviction in another zone is the webhook's to deny (429).
/// Returns the pods by zone.
async fn budget_with_zone_a_disrupted(fixture: &Fixture) -> BTreeMap<String, Vec<String>> {
    fixture.create_zdb(1, false).await;
    fixture.wait_budget(6, 1).await;
    let zones = fixture.pods_by_zone().await;
    disrupt_zone_by_unready_pod(fixture, "zone-a", &zones["zone-a"][0]).await;
    zones
}

async fn disrupt_zone_by_unready_pod(fixture: &Fixture, zone: &str, pod: &str) {
    pods::set_ready(&fixture.pods, pod, false).await;
    fixture
        .wait_status(&format!("{zone} disrupted by {pod}"), |status| {
            status.disrupted_zones == [zone]
        })
        .await;
}

/// Six pods spread over the zones, and two `pinned` pods on the test's own node in zone-a; a
/// budget of maxUnavailable 2 over all eight.
async fn pinned_fixture(prefix: &str, port: u16) -> (Fixture, TestNode, (ControllerProcess, u16)) {
    let fixture = Fixture::new(prefix, 6, port).await;
    let node = TestNode::create(&fixture.ns, "zone-a").await;
    fixture.create_pinned(2, &node).await;
    fixture.wait_ready(8).await;
    let controller = fixture.controller_with(port, false, &fixture.self_signed_args());
    fixture.wait_ca_bundle().await;
    fixture.create_zdb(2, false).await;
    fixture.wait_budget(8, 2).await;
    let zones = fixture.pods_by_zone().await;
    assert_eq!(zones["zone-a"].len(), 4, "{zones:?}");
    (fixture, node, controller)
}

/// A dry-run eviction, through the API (`deleteOptions.dryRun`) and through `kubectl drain
/// --dry-run=server`, gets the decision the real eviction gets — allowed, then denied while
/// another zone is disrupted — and records nothing; the real evictions then do as predicted.
#[tokio::test]
#[ignore = "needs the local zonal cluster (make e2e)"]
async fn zdb_dry_run_matches_real() {
    let port = free_port();
    let (fixture, node, (_controller, metrics)) = pinned_fixture("zdb-dryrun", port).await;
    let client = fixture.ns.client.clone();
    let pinned = [format!("{PINNED}-0"), format!("{PINNED}-1")];
    let uids = fixture.live_uids().await;

    // Allowed: both dry runs succeed, nothing is recorded, nothing is evicted or cordoned.
    let before = fixture.zdbs.get(ZDB).await.unwrap();
    let dry_runs = decisions_for(metrics, "DryRun").await;
    evict(&fixture.pods, &pinned[0], true).await.unwrap();
    let (success, output) = Kubectl::drain(
        &node.name,
        "app=web",
        &["--dry-run=server", "--timeout=60s"],
    )
    .finish(Duration::from_secs(90))
    .await;
    assert!(success, "the dry-run drain failed:\n{output}");
    assert!(
        output.contains(&format!("node/{} drained (server dry run)", node.name)),
        "{output}"
    );
    // The webhook judged the three dry runs (one through the API, two by kubectl) as such.
    assert_eq!(
        decisions_for(metrics, "DryRun").await - dry_runs,
        3.0,
        "{output}"
    );
    let after = fixture.zdbs.get(ZDB).await.unwrap();
    assert_eq!(
        after.resource_version(),
        before.resource_version(),
        "a dry run wrote the budget: {:?}",
        after.status
    );
    assert!(!node.unschedulable(&client).await, "a dry run cordoned");
    assert_eq!(fixture.live_uids().await, uids, "a dry run evicted");

    // Denied while zone-b is disrupted: the dry runs are refused as the real eviction is.
    let zones = fixture.pods_by_zone().await;
    let down = zones["zone-b"][0].clone();
    disrupt_zone_by_unready_pod(&fixture, "zone-b", &down).await;
    let before = fixture.zdbs.get(ZDB).await.unwrap();
    let mentions = ["zone zone-b is disrupted", "zone zone-a must wait"];
    assert_denied(
        evict(&fixture.pods, &pinned[0], true).await,
        "a dry-run eviction in zone-a",
        &mentions,
    );
    assert_denied(
        evict(&fixture.pods, &pinned[0], false).await,
        "the real eviction in zone-a",
        &mentions,
    );
    let (success, output) =
        Kubectl::drain(&node.name, "app=web", &["--dry-run=server", "--timeout=8s"])
            .finish(Duration::from_secs(60))
            .await;
    assert!(!success, "the dry-run drain succeeded:\n{output}");
    assert!(
        output.contains("will retry after 5s") && output.contains(mentions[0]),
        "the dry-run drain should have been refused with a 429:\n{output}"
    );
    let after = fixture.zdbs.get(ZDB).await.unwrap();
    assert_eq!(
        after.resource_version(),
        before.resource_version(),
        "a refused eviction wrote the budget: {:?}",
        after.status
    );
    assert!(!node.unschedulable(&client).await, "a dry run cordoned");
    assert_eq!(fixture.live_uids().await, uids, "a pod was evicted");

    // Once zone-b recovers the real eviction is allowed, as the first dry run said, and unlike
    // it, recorded.
    pods::set_ready(&fixture.pods, &down, true).await;
    fixture.wait_budget(8, 2).await;
    // Kept from coming back (and dropping its record) before the check.
    let _quota = PodQuota::hold(&fixture.ns, 7).await;
    evict(&fixture.pods, &pinned[0], false).await.unwrap();
    let status = fixture.status().await;
    assert_eq!(
        status.disrupted_pod_zones,
        BTreeMap::from([(pinned[0].clone(), "zone-a".to_string())]),
        "{status:?}"
    );
}

/// A real `kubectl drain` of a node with protected pods in zone-a, while zone-b is disrupted:
/// kubectl is refused with 429s, retries every 5 s, and completes once zone-b recovers.
#[tokio::test]
#[ignore = "needs the local zonal cluster (make e2e)"]
async fn zdb_kubectl_drain_retries_until_budget_allows() {
    let port = free_port();
    let (fixture, node, _controller) = pinned_fixture("zdb-drain", port).await;
    let client = fixture.ns.client.clone();
    let pinned = [format!("{PINNED}-0"), format!("{PINNED}-1")];
    let uids = fixture.live_uids().await;
    let zones = fixture.pods_by_zone().await;
    let down = zones["zone-b"][0].clone();
    disrupt_zone_by_unready_pod(&fixture, "zone-b", &down).await;

    let mut drain = Kubectl::drain(&node.name, "app=web", &["--timeout=120s"]);
    // Two refusals of one pod: kubectl keeps retrying rather than giving up.
    let retry = format!("error when evicting pods/\"{}\"", pinned[0]);
    wait_for(
        "kubectl drain to be refused twice",
        Duration::from_secs(60),
        || {
            let output = drain.output();
            let refusals = output.matches(&retry).count();
            async move { if refusals >= 2 { Ok(()) } else { Err(output) } }
        },
    )
    .await;
    let output = drain.output();
    // kubectl retries only a 429 (TooManyRequests); any other refusal ends the drain.
    assert!(
        output.contains("will retry after 5s") && output.contains("zone zone-b is disrupted"),
        "{output}"
    );
    assert!(drain.is_running(), "kubectl gave up:\n{output}");
    assert!(node.unschedulable(&client).await, "drain cordons first");
    for pod in &pinned {
        assert_eq!(
            fixture.live_uids().await.get(pod),
            uids.get(pod),
            "{pod} was evicted while zone-b was disrupted"
        );
    }

    pods::set_ready(&fixture.pods, &down, true).await;
    let (success, output) = drain.finish(Duration::from_secs(60)).await;
    assert!(success, "the drain failed:\n{output}");
    assert!(
        output.contains(&format!("node/{} drained", node.name)),
        "{output}"
    );
    let live = fixture.live_uids().await;
    for pod in &pinned {
        assert_ne!(live.get(pod), uids.get(pod), "{pod} was not evicted");
    }
    // Both recorded in zone-a (their replacements cannot be scheduled on the cordoned node, so
    // the records stay).
    let status = fixture.status().await;
    assert_eq!(
        status.disrupted_pod_zones,
        pinned
            .iter()
            .map(|p| (p.clone(), "zone-a".to_string()))
            .collect::<BTreeMap<_, _>>(),
        "{status:?}"
    );
}

/// `--cert-dir` as a mounted Secret: a rotation (a `..data` symlink swap, as the kubelet does
/// it) is served from the next handshake on, by the same process, and the API server's calls
/// still reach the webhook.
#[tokio::test]
#[ignore = "needs the local zonal cluster (make e2e)"]
async fn zdb_cert_rotation_without_restart() {
    // The API server calls the webhook through a proxy whose connections the test can cut.
    let webhook_port = free_port();
    let backend: SocketAddr = ([127, 0, 0, 1], webhook_port).into();
    let proxy = RoundRobinProxy::start(vec![backend]).await;
    let proxy_port = proxy.addr.port();
    let fixture = Fixture::new("zdb-certs", 6, proxy_port).await;
    let ca = TestCa::new("zdb e2e cert-manager CA");
    let first = ca.leaf(1001);
    let mut mounted = MountedSecret::new(&fixture.ns, &first);
    let mut controller = fixture
        .controller_with_cert_dir(
            webhook_port,
            &ca,
            &mounted,
            &first,
            "the first certificate served",
        )
        .await;
    // zone-a stays disrupted for the whole test, so zone-b's evictions are the webhook's
    // denials (a 429 only it gives).
    let zones = budget_with_zone_a_disrupted(&fixture).await;
    assert_denied(
        evict(&fixture.pods, &zones["zone-b"][0], false).await,
        "an eviction in zone-b, before the rotation",
        &["zone zone-a is disrupted"],
    );

    let second = ca.leaf(1002);
    assert_ne!(first.der(), second.der());
    mounted.rotate(&second);
    wait_served(
        webhook_port,
        &ca.pem,
        &second,
        "the rotated certificate served",
    )
    .await;
    assert!(controller.is_running(), "the controller restarted or died");

    // The API server may still hold connections made with the first certificate: cut them all,
    // so its next call makes a new one and must accept the rotated certificate.
    proxy.stop().await;
    let _proxy = RoundRobinProxy::start_on(proxy_port, vec![backend]).await;
    // A call on a pooled connection the cut closed fails (500, broken pipe or reset) and is not
    // resent; every later call needs a new connection, whose handshake meets the rotated
    // certificate. A refused certificate ends the test at once.
    wait_for(
        "the webhook's denial over a new connection",
        Duration::from_secs(30),
        || async {
            match evict(&fixture.pods, &zones["zone-b"][1], false).await {
                Err((429, message)) if message.contains("zone zone-a is disrupted") => Ok(()),
                Err((500, message))
                    if !message.contains("x509") && !message.contains("certificate") =>
                {
                    Err(message)
                }
                other => panic!("after the rotation: {other:?}"),
            }
        },
    )
    .await;
    assert!(controller.is_running(), "the controller restarted or died");
}

/// The webhook listens on both stacks (`--webhook-address [::]:<port>`, the shipped default's
/// shape): the API server calls it at `https://[::1]:<port>` and judges an eviction by its answer,
/// and a client of 127.0.0.1 meets the same listener.
#[tokio::test]
#[ignore = "needs the local zonal cluster (make e2e)"]
async fn zdb_webhook_answers_the_api_server_over_ipv6() {
    let port = free_port();
    let mut fixture = Fixture::new_on("zdb-ipv6", 6, "[::1]", port).await;
    fixture.webhook_host = "[::]";
    let ca = TestCa::new("zdb e2e IPv6 CA");
    let leaf = ca.issue(vec!["::1".to_string(), "127.0.0.1".to_string()], Some(2001));
    let mounted = MountedSecret::new(&fixture.ns, &leaf);
    let what = "the certificate served on IPv4 loopback";
    let mut controller = fixture
        .controller_with_cert_dir(port, &ca, &mounted, &leaf, what)
        .await;
    let zones = budget_with_zone_a_disrupted(&fixture).await;
    // Failing closed: without an answer over IPv6 the API server refuses with a 500 naming the
    // call; the 429 and its reason are the webhook's.
    assert_denied(
        evict(&fixture.pods, &zones["zone-b"][0], false).await,
        "an eviction in zone-b, judged over IPv6",
        &["zone zone-a is disrupted"],
    );
    assert!(controller.is_running(), "the controller died");
}

/// A budget as the Go controller left it — its spec, and its status (no conditions, no record
/// zones, stale records, counts of another time) for the current generation — is adopted: the
/// status is recomputed from the cluster, the stale records (a pod recreated since, a pod that
/// no longer exists) are dropped and block nothing, and evictions are judged from the cluster.
#[tokio::test]
#[ignore = "needs the local zonal cluster (make e2e)"]
async fn zdb_go_shaped_objects_adopted() {
    // A record older than every pod of the test: its pod has been recreated since.
    let before_pods = k8s_openapi::jiff::Timestamp::from_second(
        k8s_openapi::jiff::Timestamp::now().as_second() - 5,
    )
    .unwrap();
    let port = free_port();
    let fixture = Fixture::new("zdb-adopt", 9, port).await;
    let zones = fixture.pods_by_zone().await;
    let (zone_a, zone_b) = (&zones["zone-a"], &zones["zone-b"]);

    let created = fixture
        .create_budget(
            ZDB,
            json!({"selector": {"matchLabels": {"app": SET}}, "maxUnavailable": 1, "dryRun": false}),
        )
        .await;
    let now =
        k8s_openapi::jiff::Timestamp::from_second(k8s_openapi::jiff::Timestamp::now().as_second())
            .unwrap();
    // The Go controller's status fields only, as it wrote them while zone-a was drained.
    let go_status = json!({
        "observedGeneration": created.metadata.generation.unwrap(),
        "disruptedPods": {
            zone_a[0].clone(): before_pods.to_string(),
            "web-100": now.to_string(),
        },
        "disruptionsAllowed": {"zone-a": 0, "zone-b": 0, "zone-c": 0},
        "currentHealthy": {"zone-a": 1, "zone-b": 3, "zone-c": 3},
        "currentUnhealthy": {"zone-a": 2, "zone-b": 0, "zone-c": 0},
        "desiredHealthy": {"zone-a": 2, "zone-b": 2, "zone-c": 2},
        "expectedPods": {"zone-a": 3, "zone-b": 3, "zone-c": 3},
    });
    fixture
        .zdbs
        .patch_status(
            ZDB,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": go_status})),
        )
        .await
        .unwrap();
    let stored = fixture.status().await;
    assert_eq!(stored.disrupted_pods.len(), 2, "{stored:?}");
    assert!(stored.conditions.is_empty(), "{stored:?}");

    let _controller = fixture.controller(port, false);
    fixture.wait_ca_bundle().await;
    let adopted = |status: &ZoneDisruptionBudgetStatus| {
        let ready = status
            .conditions
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True");
        let per_zone = |n: i32| {
            BTreeMap::from([
                ("zone-a".to_string(), n),
                ("zone-b".to_string(), n),
                ("zone-c".to_string(), n),
            ])
        };
        ready
            && status.disrupted_pods.is_empty()
            && status.disrupted_pod_zones.is_empty()
            && status.disrupted_zones.is_empty()
            && status.expected_pods == per_zone(3)
            && status.current_healthy == per_zone(3)
            && status.current_unhealthy == per_zone(0)
            && status.disruptions_allowed == per_zone(1)
    };
    let timeout = Duration::from_secs(30);
    fixture
        .wait_zdb("the Go status adopted", ZDB, timeout, |_, s| adopted(s))
        .await;

    // Judged from the cluster: zone-b may go first, then zone-a waits for it (the evicted pod
    // is kept from coming back meanwhile).
    let _quota = PodQuota::hold(&fixture.ns, 8).await;
    evict(&fixture.pods, &zone_b[0], false).await.unwrap();
    assert_denied(
        evict(&fixture.pods, &zone_a[1], false).await,
        "an eviction in zone-a after one in zone-b",
        &["zone zone-b is disrupted", &zone_b[0]],
    );
    let status = fixture.status().await;
    assert_eq!(
        status.disrupted_pod_zones,
        BTreeMap::from([(zone_b[0].clone(), "zone-b".to_string())]),
        "{status:?}"
    );
}

impl Fixture {
    /// Creates the frozen budget `web` (maxUnavailable 0) and waits until it is computed: from
    /// then on every eviction of its pods is the webhook's 429, an answer only a successful
    /// call of the webhook gives.
    async fn freeze(&self) {
        self.create_budget(
            ZDB,
            json!({"selector": {"matchLabels": {"app": SET}}, "maxUnavailable": 0}),
        )
        .await;
        self.wait_zdb("the budget frozen", ZDB, TIMEOUT, |zdb, status| {
            Some(status.observed_generation) == zdb.metadata.generation
                && status
                    .conditions
                    .iter()
                    .any(|c| c.type_ == "Ready" && c.reason == zone_api::zdb::reason::FROZEN)
        })
        .await;
    }

    /// `ca.crt` and `tls.crt` of the self-signed Secret.
    async fn secret_certs(&self) -> (String, String) {
        let secrets: Api<k8s_openapi::api::core::v1::Secret> = self.ns.api();
        let data = secrets.get(TLS_SECRET).await.unwrap().data.unwrap();
        let text = |key: &str| String::from_utf8(data[key].0.clone()).unwrap();
        (text("ca.crt"), text("tls.crt"))
    }

    /// The failurePolicy of the test's webhook configuration.
    async fn failure_policy(&self) -> Option<String> {
        let configs: Api<ValidatingWebhookConfiguration> = Api::all(self.ns.client.clone());
        configs
            .get(&self.webhook.name)
            .await
            .unwrap()
            .webhooks
            .unwrap()[0]
            .failure_policy
            .clone()
    }
}

/// A self-signed certificate valid for 60 s, renewed 40 s before its end: in 75 s of dry-run
/// evictions every 250 ms (the webhook is called with failurePolicy Fail, so a failed call
/// would be a 500), the Secret's certificate is renewed at least twice under the same CA, and
/// every call is the webhook's answer.
#[tokio::test]
#[ignore = "needs the local zonal cluster (make e2e)"]
async fn zdb_short_lived_certificate_is_renewed_without_a_failed_call() {
    let port = free_port();
    let fixture = Fixture::new("zdb-renew", 3, port).await;
    let mut tls = fixture.self_signed_args();
    tls.extend(
        [
            "--webhook-cert-validity",
            "60s",
            "--webhook-cert-renew-before",
            "40s",
        ]
        .map(String::from),
    );
    let (_controller, _) = fixture.controller_with(port, false, &tls);
    fixture.wait_ca_bundle().await;
    fixture.freeze().await;
    let (ca, first) = fixture.secret_certs().await;
    let pod = fixture.list_pods().await[0].name_any();
    let client = fixture.ns.client.clone();
    let before = Counters::read(&client, &[WEBHOOK_NAME]).await;

    let mut certificates = BTreeSet::from([first]);
    let (mut answered, mut failures) = (0, Vec::new());
    let started = std::time::Instant::now();
    while started.elapsed() < Duration::from_secs(75) {
        match evict(&fixture.pods, &pod, true).await {
            Err((429, message)) if message.contains("frozen") => answered += 1,
            other => failures.push(other),
        }
        let (now_ca, now_cert) = fixture.secret_certs().await;
        assert_eq!(now_ca, ca, "the CA (and the caBundle) changed");
        certificates.insert(now_cert);
        // Pacing the calls, not waiting for anything.
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let failed = Counters::read(&client, &[WEBHOOK_NAME])
        .await
        .since(&before)
        .failed;
    eprintln!(
        "{answered} calls answered by the webhook, {} failed, {} certificates, API server's failed webhook calls: {failed}",
        failures.len(),
        certificates.len()
    );
    assert!(failures.is_empty(), "calls not answered: {failures:?}");
    assert!(answered >= 100, "only {answered} calls");
    assert!(
        certificates.len() >= 3,
        "renewed {} time(s) in 75 s",
        certificates.len() - 1
    );
    assert_eq!(failed, 0.0, "the API server counted failed webhook calls");
    // What is served is the latest certificate.
    let (_, latest) = fixture.secret_certs().await;
    let leaf = Leaf {
        cert: latest,
        key: String::new(),
    };
    wait_served(port, &ca, &leaf, "the renewed certificate served").await;
}

/// A Secret whose certificate is for another Service (and was made by some other CA, with no
/// key of it) is replaced at start-up: the caBundle follows, the new certificate is served and
/// the API server's call succeeds.
#[tokio::test]
#[ignore = "needs the local zonal cluster (make e2e)"]
async fn zdb_secret_with_a_wrong_name_is_replaced_at_start() {
    let port = free_port();
    let fixture = Fixture::new("zdb-wrong-name", 3, port).await;
    let stranger = TestCa::new("a CA of another service");
    let wrong = stranger.issue(vec!["other.example.svc".to_string()], Some(7));
    let secret: k8s_openapi::api::core::v1::Secret = serde_json::from_value(json!({
        "metadata": {"name": TLS_SECRET},
        "type": "kubernetes.io/tls",
        "stringData": {"ca.crt": stranger.pem, "tls.crt": wrong.cert, "tls.key": wrong.key},
    }))
    .unwrap();
    fixture
        .ns
        .api::<k8s_openapi::api::core::v1::Secret>()
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    let _controller = fixture.controller(port, false);
    let (ca, cert) = wait_for(
        "the Secret's certificate replaced",
        Duration::from_secs(60),
        || async {
            let (ca, cert) = fixture.secret_certs().await;
            if cert != wrong.cert && ca != stranger.pem {
                Ok((ca, cert))
            } else {
                Err("still the wrong certificate".to_string())
            }
        },
    )
    .await;
    fixture.wait_ca_bundle().await;
    let bundles = fixture.webhook.ca_bundles(&fixture.ns).await.unwrap();
    assert_eq!(
        bundles,
        [ca.as_bytes().to_vec()],
        "the caBundle is the new CA"
    );
    let leaf = Leaf {
        cert,
        key: String::new(),
    };
    wait_served(port, &ca, &leaf, "the replaced certificate served").await;
    fixture.freeze().await;
    let pod = fixture.list_pods().await[0].name_any();
    assert_denied(
        evict(&fixture.pods, &pod, false).await,
        "an eviction from the frozen budget",
        &["frozen"],
    );
}

/// The local-process form of the shipped configuration: at Ignore while no replica serves (an
/// eviction goes through), moved to Fail by the replica once it serves, with no one else
/// touching it.
#[tokio::test]
#[ignore = "needs the local zonal cluster (make e2e)"]
async fn zdb_failure_policy_moves_from_ignore_to_fail_once_a_replica_serves() {
    let port = free_port();
    let fixture = Fixture::new("zdb-policy", 3, port).await;
    let configs: Api<ValidatingWebhookConfiguration> = Api::all(fixture.ns.client.clone());
    let patch = json!({"webhooks": [{"name": WEBHOOK_NAME, "failurePolicy": "Ignore"}]});
    configs
        .patch(
            &fixture.webhook.name,
            &PatchParams::default(),
            &Patch::Strategic(&patch),
        )
        .await
        .unwrap();
    // Nothing listens on the port: the failed call is ignored.
    let pods = fixture.list_pods().await;
    evict(&fixture.pods, &pods[0].name_any(), false)
        .await
        .expect("no replica serves and the policy is Ignore: the eviction goes through");
    assert_eq!(fixture.failure_policy().await.as_deref(), Some("Ignore"));

    let started = std::time::Instant::now();
    let (_controller, metrics) = fixture.controller_with(port, false, &fixture.self_signed_args());
    wait_for(
        "the failurePolicy moved to Fail",
        Duration::from_secs(60),
        || async {
            match fixture.failure_policy().await.as_deref() {
                Some("Fail") => Ok(()),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
    eprintln!("failurePolicy Fail {:?} after the start", started.elapsed());
    wait_for(
        "the gauge showing Fail",
        Duration::from_secs(30),
        || async {
            let fail = metric_sum(
                metrics,
                "zone_aware_zdb_webhook_failure_policy",
                Some("policy=\"Fail\""),
            )
            .await;
            let ignore = metric_sum(
                metrics,
                "zone_aware_zdb_webhook_failure_policy",
                Some("policy=\"Ignore\""),
            )
            .await;
            if (fail, ignore) == (1.0, 0.0) {
                Ok(())
            } else {
                Err(format!("Fail {fail}, Ignore {ignore}"))
            }
        },
    )
    .await;
    // From now on the webhook judges: the frozen budget's eviction is refused.
    fixture.freeze().await;
    assert_denied(
        evict(&fixture.pods, &pods[1].name_any(), false).await,
        "an eviction from the frozen budget",
        &["frozen"],
    );
}

/// Drift of the webhook configuration while a replica serves, made by someone else (an admin, a
/// re-apply): what the replica may change (the failurePolicy, back to Fail) it repairs; what it
/// may not (the rules, which decide whether evictions reach it at all) it reports, in the gauge
/// `zone_aware_zdb_webhook_covers_evictions` (0, the alert's input) and a Warning event on the
/// configuration, until the rules are put back.
#[tokio::test]
#[ignore = "needs the local zonal cluster (make e2e)"]
async fn zdb_webhook_configuration_drift_is_repaired_or_reported() {
    let port = free_port();
    let fixture = Fixture::new("zdb-drift", 3, port).await;
    let configs: Api<ValidatingWebhookConfiguration> = Api::all(fixture.ns.client.clone());
    let name = fixture.webhook.name.clone();
    let (_controller, metrics) = fixture.controller_with(port, false, &fixture.self_signed_args());
    let policy_is = |wanted: &'static str| {
        let fixture = &fixture;
        move || async move {
            match fixture.failure_policy().await.as_deref() {
                Some(policy) if policy == wanted => Ok(()),
                other => Err(format!("{other:?}")),
            }
        }
    };
    wait_for(
        "the failurePolicy moved to Fail",
        Duration::from_secs(60),
        policy_is("Fail"),
    )
    .await;
    wait_covers(metrics, &name, 1.0).await;

    let patch = |webhook: Value| Patch::Strategic(json!({"webhooks": [webhook]}));
    configs
        .patch(
            &name,
            &PatchParams::default(),
            &patch(json!({"name": WEBHOOK_NAME, "failurePolicy": "Ignore"})),
        )
        .await
        .unwrap();
    let drifted = std::time::Instant::now();
    wait_for(
        "the failurePolicy repaired to Fail",
        Duration::from_secs(60),
        policy_is("Fail"),
    )
    .await;
    eprintln!(
        "failurePolicy repaired {:.1?} after it was put to Ignore",
        drifted.elapsed()
    );

    let shipped_rules = configs.get(&name).await.unwrap().webhooks.unwrap()[0]
        .rules
        .clone();
    let narrowed = json!([{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                           "resources": ["pods/binding"], "scope": "Namespaced"}]);
    configs
        .patch(
            &name,
            &PatchParams::default(),
            &patch(json!({"name": WEBHOOK_NAME, "rules": narrowed})),
        )
        .await
        .unwrap();
    let drifted = std::time::Instant::now();
    wait_covers(metrics, &name, 0.0).await;
    eprintln!(
        "evictions bypassing the webhook reported {:.1?} after the rules changed",
        drifted.elapsed()
    );
    bypass_reported(
        &fixture.ns.client,
        &name,
        "no webhook's rules match CREATE of pods/eviction",
    )
    .await;

    configs
        .patch(
            &name,
            &PatchParams::default(),
            &patch(json!({"name": WEBHOOK_NAME, "rules": shipped_rules})),
        )
        .await
        .unwrap();
    wait_covers(metrics, &name, 1.0).await;
}

/// Waits until the gauge `zone_aware_zdb_webhook_covers_evictions` of the configuration `name`,
/// at the replica's metrics `port`, is `wanted`.
async fn wait_covers(port: u16, name: &str, wanted: f64) {
    let series = format!("configuration=\"{name}\"");
    wait_for(
        &format!("zone_aware_zdb_webhook_covers_evictions at {wanted}"),
        Duration::from_secs(60),
        || async {
            let value = metric_sum(
                port,
                "zone_aware_zdb_webhook_covers_evictions",
                Some(&series),
            )
            .await;
            (value == wanted).then_some(()).ok_or(format!("{value}"))
        },
    )
    .await;
}

/// Waits for the Warning event EvictionWebhookBypassed on the configuration `name`, saying `why`.
async fn bypass_reported(client: &kube::Client, name: &str, why: &str) {
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::all(client.clone());
    let reported = e2e::fixture::wait_events(&events, "the EvictionWebhookBypassed event", |e| {
        e.reason.as_deref() == Some("EvictionWebhookBypassed")
            && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
    })
    .await
    .remove(0);
    assert_eq!(reported.type_.as_deref(), Some("Warning"));
    let note = reported.note.unwrap_or_default();
    assert!(note.contains(why), "{note}");
}
