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
use e2e::tls::{Leaf, wait_served};
use e2e::webhook::{EvictionWebhook, TLS_SECRET, WEBHOOK_NAME, self_signed_args, zdb_args};
use e2e::workload::{self, spread_statefulset, to_statefulset, zone_disruption_budget};
use e2e::{Cluster, TestNamespace, fixture, pods, wait_for};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::events::v1::Event;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::{Value, json};
use zone_api::{ZoneDisruptionBudget, ZoneDisruptionBudgetStatus};

#[path = "zdb/certificates.rs"]
mod certificates;
#[path = "zdb/disruption.rs"]
mod disruption;
#[path = "zdb/drains.rs"]
mod drains;
#[path = "zdb/forged_review.rs"]
mod forged_review;
#[path = "zdb/freeze.rs"]
mod freeze;
#[path = "zdb/kubectl_zone.rs"]
mod kubectl_zone;
#[path = "zdb/pdb_parity.rs"]
mod pdb_parity;
#[path = "zdb/replicas.rs"]
mod replicas;
#[path = "zdb/webhook_configuration.rs"]
mod webhook_configuration;

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

/// The StatefulSet whose pods run on a test's own node (labelled `app: web` too, so the budget
/// selects them with the others).
const PINNED: &str = "pinned";

impl Fixture {
    /// name -> uid of the pods `selector` finds that are not terminating.
    async fn live_uids_of(&self, selector: &str) -> BTreeMap<String, String> {
        pods::list(&self.pods, selector)
            .await
            .iter()
            .filter(|p| !pods::is_terminating(p))
            .map(|p| (p.name_any(), p.uid().unwrap()))
            .collect()
    }

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
}

async fn disrupt_zone_by_unready_pod(fixture: &Fixture, zone: &str, pod: &str) {
    pods::set_ready(&fixture.pods, pod, false).await;
    fixture
        .wait_status(&format!("{zone} disrupted by {pod}"), |status| {
            status.disrupted_zones == [zone]
        })
        .await;
}
