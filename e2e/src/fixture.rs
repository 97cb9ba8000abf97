//! What the tests of the custom resources share: creating and server-side applying an object,
//! waiting for a resource's status (a predicate, the observed generation, a named condition),
//! the namespace's events and audit log, a controller watching the test's namespace, and
//! [`Sprom`], the fixture of a ShardedPrometheus under test.
//!
//! A test file keeps a fixture of its own only for the state it alone holds (its workloads, its
//! processes); the reading and waiting are these functions, over any resource with a status.

use std::fmt::Debug;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::events::v1::Event;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::core::object::HasStatus;
use kube::{Api, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use zone_api::conditions::Conditions;
use zone_api::{ShardedPrometheus, ShardedPrometheusStatus};

use crate::audit::AuditEvent;
use crate::cluster::DeleteOnDrop;
use crate::localstack::free_port;
use crate::process::{ControllerProcess, namespace_args};
use crate::real::RealNodes;
use crate::{Cluster, TestNamespace, wait_for};

/// Server-side applies `object` (typed, or JSON with its apiVersion, kind and metadata.name) as
/// `manager`, forcing conflicts (a test owns its objects): the object as the API server stored it.
pub async fn apply<K>(
    api: &Api<K>,
    name: &str,
    manager: &str,
    object: &(impl Serialize + Debug),
) -> K
where
    K: Clone + DeserializeOwned + Debug,
{
    api.patch(
        name,
        &PatchParams::apply(manager).force(),
        &Patch::Apply(object),
    )
    .await
    .unwrap_or_else(|e| panic!("applying {name}: {e}"))
}

/// Creates `manifest` (JSON: its metadata and the fields of its kind; apiVersion and kind may be
/// left out) through `api`: the object as the API server stored it.
pub async fn create<K>(api: &Api<K>, manifest: Value) -> K
where
    K: Resource + Clone + DeserializeOwned + Serialize + Debug,
{
    let object: K = serde_json::from_value(manifest)
        .unwrap_or_else(|e| panic!("a manifest of the wrong shape: {e}"));
    api.create(&PostParams::default(), &object)
        .await
        .unwrap_or_else(|e| panic!("creating {}: {e}", object.name_any()))
}

/// The status of `object`, or the empty status while the controller has written none.
pub fn status_of<K>(object: &K) -> K::Status
where
    K: HasStatus,
    K::Status: Clone + Default,
{
    object.status().cloned().unwrap_or_default()
}

/// Polls the object `name` until `check` accepts it (it returns the state it saw while not), and
/// returns it; panics after `timeout` naming `what` and the last state seen (or the last read's
/// error).
pub async fn wait_object<K>(
    api: &Api<K>,
    name: &str,
    what: &str,
    timeout: Duration,
    check: impl Fn(&K) -> Result<(), String>,
) -> K
where
    K: Clone + DeserializeOwned + Debug,
{
    wait_for(what, timeout, || async {
        let object = api.get(name).await.map_err(|e| e.to_string())?;
        check(&object)?;
        Ok(object)
    })
    .await
}

/// Polls the object `name` until `check` accepts it and its status (the empty status while it
/// has none), and returns it; the last status seen, as JSON, is in the panic after `timeout`.
pub async fn wait_status<K>(
    api: &Api<K>,
    name: &str,
    what: &str,
    timeout: Duration,
    check: impl Fn(&K, &K::Status) -> bool,
) -> K
where
    K: HasStatus + Clone + DeserializeOwned + Debug,
    K::Status: Clone + Default + Serialize,
{
    wait_object(api, name, what, timeout, |object| {
        let status = status_of(object);
        if check(object, &status) {
            Ok(())
        } else {
            Err(serde_json::to_string(&status).unwrap_or_else(|e| e.to_string()))
        }
    })
    .await
}

/// Polls the object `name` until the controller observed `generation` (the status says so) and
/// `check` accepts it, and returns it.
pub async fn wait_observed<K>(
    api: &Api<K>,
    name: &str,
    what: &str,
    generation: i64,
    timeout: Duration,
    check: impl Fn(&K) -> Result<(), String>,
) -> K
where
    K: HasStatus + Clone + DeserializeOwned + Debug,
    K::Status: Conditions,
{
    wait_object(api, name, what, timeout, |object| {
        let observed = object.status().and_then(|s| s.generation()).unwrap_or(0);
        if observed != generation {
            return Err(format!("observed generation {observed}"));
        }
        check(object)
    })
    .await
}

/// A status condition a test waits for: its type, status and reason.
#[derive(Debug, Clone, Copy)]
pub struct Wanted<'a> {
    pub type_: &'a str,
    pub status: &'a str,
    pub reason: &'a str,
}

impl<'a> Wanted<'a> {
    /// The condition `type_` True with `reason`.
    pub fn true_with(type_: &'a str, reason: &'a str) -> Wanted<'a> {
        Wanted {
            type_,
            status: "True",
            reason,
        }
    }
}

/// Polls the object `name` until the controller observed `generation` and the condition
/// `wanted` is set, its message accepted by `message`, and returns the object; the last
/// condition seen is in the panic after `timeout`.
pub async fn wait_condition<K>(
    api: &Api<K>,
    name: &str,
    generation: i64,
    wanted: Wanted<'_>,
    timeout: Duration,
    message: impl Fn(&str) -> bool,
) -> K
where
    K: HasStatus + Clone + DeserializeOwned + Debug,
    K::Status: Conditions,
{
    let what = format!("{} {} ({})", wanted.type_, wanted.status, wanted.reason);
    wait_observed(api, name, &what, generation, timeout, |object| match object
        .status()
        .and_then(|s| s.condition(wanted.type_))
    {
        Some(c)
            if c.status == wanted.status && c.reason == wanted.reason && message(&c.message) =>
        {
            Ok(())
        }
        other => Err(format!("{other:?}")),
    })
    .await
}

/// `spec` (of a ShardedPrometheus) with what runs its shards on the real nodes, one shard per
/// zone: the real Prometheus image, the real nodes' selector and toleration, the topology
/// strategy over zone-a, zone-b and zone-c.
pub fn on_real_nodes(real: &RealNodes, mut spec: Value) -> Value {
    let placement = serde_json::json!({
        "image": real.prometheus_image,
        "nodeSelector": {"type": "real"},
        "tolerations": [{"key": real.taint, "operator": "Exists", "effect": "NoSchedule"}],
        "shardingStrategy": {"topology": {"values": ["zone-a", "zone-b", "zone-c"]}},
    });
    if let (Some(spec), Value::Object(placement)) = (spec.as_object_mut(), placement) {
        spec.extend(placement);
    }
    spec
}

/// The scrape job `app` of the pods of `namespace` whose label `label` (as Prometheus names a pod
/// label's meta label, e.g. `app`) matches `regex`, each sample labelled with its pod and the zone
/// of its node: what an alert per zone counts.
pub fn zone_scrape_job(namespace: &str, label: &str, regex: &str) -> Value {
    serde_json::json!({
        "job_name": "app",
        "kubernetes_sd_configs": [{"role": "pod", "namespaces": {"names": [namespace]}}],
        "relabel_configs": [
            {"source_labels": [format!("__meta_kubernetes_pod_label_{label}")], "regex": regex, "action": "keep"},
            {"source_labels": ["__meta_kubernetes_node_label_topology_kubernetes_io_zone"], "target_label": "zone"},
            {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
        ],
    })
}

/// `binary` (a controller of this workspace) watching only `namespace`, without leader election,
/// serving its metrics on `listen`, with the environment `env`.
pub fn controller(
    binary: &str,
    namespace: &str,
    listen: &str,
    env: &[(&str, String)],
) -> ControllerProcess {
    let mut args = namespace_args(namespace, false);
    args.extend(["--listen-address".to_string(), listen.to_string()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    ControllerProcess::start(binary, &args, env)
}

/// The environment of a shard-controller run with no zau-controller beside it: the shards'
/// StatefulSets roll themselves (`--zone-aware-rollouts=false`), as the chart configures it
/// without the zau-controller.
pub fn without_zau_controller() -> [(&'static str, String); 1] {
    [("ZAC_ZONE_AWARE_ROLLOUTS", "false".to_string())]
}

/// [`controller`] with its metrics on a free port of 127.0.0.1: the process and the port.
pub fn controller_on_free_port(
    binary: &str,
    namespace: &str,
    env: &[(&str, String)],
) -> (ControllerProcess, u16) {
    let port = free_port();
    let process = controller(binary, namespace, &format!("127.0.0.1:{port}"), env);
    (process, port)
}

/// A rules-federator on a free port of 127.0.0.1 discovering the pods of the ShardedPrometheus
/// `sprom` in `namespace`: the process and its port.
pub fn federator_of(sprom: &str, namespace: &str) -> (ControllerProcess, u16) {
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let args = [
        "--listen-address",
        &listen,
        "--discover-sprom",
        sprom,
        "--discover-namespace",
        namespace,
    ];
    (
        ControllerProcess::start("rules-federator", &args, &[]),
        port,
    )
}

/// The events of the test namespace that `keep` accepts.
pub async fn events(ns: &TestNamespace, keep: impl Fn(&Event) -> bool) -> Vec<Event> {
    let events: Api<Event> = ns.api();
    events
        .list(&ListParams::default())
        .await
        .unwrap_or_else(|e| panic!("listing the events of {}: {e}", ns.name))
        .items
        .into_iter()
        .filter(|e| keep(e))
        .collect()
}

/// Waits until `events` holds events `keep` accepts (within 30 s), and returns them.
pub async fn wait_events(
    events: &Api<Event>,
    what: &str,
    keep: impl Fn(&Event) -> bool,
) -> Vec<Event> {
    wait_for(what, Duration::from_secs(30), || async {
        let kept: Vec<Event> = events
            .list(&ListParams::default())
            .await
            .map_err(|e| e.to_string())?
            .items
            .into_iter()
            .filter(|e| keep(e))
            .collect();
        match kept.is_empty() {
            true => Err("none yet".to_string()),
            false => Ok(kept),
        }
    })
    .await
}

/// The API server's audit log so far, the lines naming the test namespace.
pub fn audit(cluster: &Cluster, ns: &TestNamespace) -> Vec<AuditEvent> {
    let path = cluster
        .audit_log()
        .expect("these tests read the API server's audit log (local zonal cluster)");
    crate::audit::read_containing(&path, &ns.name)
}

/// A ShardedPrometheus under test: a test namespace watched by the shard controller (metrics on
/// a free port), the resource's name, the field manager the test applies it as, and how long the
/// test waits for it; once asked for, the Prometheus ServiceAccount allowed to discover.
pub struct Sprom {
    pub ns: TestNamespace,
    pub sproms: Api<ShardedPrometheus>,
    /// The port of the shard controller's metrics (0 when it runs elsewhere).
    pub metrics_port: u16,
    name: &'static str,
    manager: &'static str,
    timeout: Duration,
    controller: Mutex<Option<ControllerProcess>>,
    binding: Mutex<Option<DeleteOnDrop>>,
}

impl Sprom {
    /// A namespace `e2e-<prefix>-...` and the shard controller watching it.
    pub async fn new(
        prefix: &str,
        name: &'static str,
        manager: &'static str,
        timeout: Duration,
    ) -> Sprom {
        let mut sprom = Sprom::watched_elsewhere(prefix, name, manager, timeout).await;
        let (controller, metrics_port) = controller_on_free_port(
            "shard-controller",
            &sprom.ns.name,
            &without_zau_controller(),
        );
        sprom.metrics_port = metrics_port;
        sprom.controller = Mutex::new(Some(controller));
        sprom
    }

    /// A namespace `e2e-<prefix>-...` watched by a shard controller the test runs elsewhere (as
    /// a pod: its metrics are the deployment's, `metrics_port` is 0).
    pub async fn watched_elsewhere(
        prefix: &str,
        name: &'static str,
        manager: &'static str,
        timeout: Duration,
    ) -> Sprom {
        let cluster = Cluster::get();
        let ns = TestNamespace::create(&cluster, prefix).await;
        Sprom {
            sproms: ns.api(),
            ns,
            metrics_port: 0,
            name,
            manager,
            timeout,
            controller: Mutex::new(None),
            binding: Mutex::default(),
        }
    }

    /// Stops the shard controller and starts another (same namespace, same metrics port): what
    /// the first one knew must come back from the cluster.
    pub fn restart_controller(&self) {
        let mut running = self
            .controller
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        drop(running.take());
        let listen = format!("127.0.0.1:{}", self.metrics_port);
        *running = Some(controller(
            "shard-controller",
            &self.ns.name,
            &listen,
            &without_zau_controller(),
        ));
    }

    /// The Prometheus ServiceAccount, allowed to discover through the shipped ClusterRole (the
    /// binding is deleted with the fixture).
    pub async fn prometheus_service_account(&self) {
        let binding = crate::prometheus::service_account(&self.ns).await;
        *self.binding.lock().unwrap_or_else(PoisonError::into_inner) = Some(binding);
    }

    /// Server-side applies the resource with `spec`: the generation the API server gave it.
    pub async fn apply(&self, spec: Value) -> i64 {
        crate::apply::sprom(&self.sproms, self.name, self.manager, spec).await
    }

    /// Waits until the controller observed `generation` and `check` accepts the resource.
    pub async fn wait_status(
        &self,
        what: &str,
        generation: i64,
        check: impl Fn(&ShardedPrometheus) -> Result<(), String>,
    ) -> ShardedPrometheus {
        wait_observed(
            &self.sproms,
            self.name,
            what,
            generation,
            self.timeout,
            check,
        )
        .await
    }

    /// Waits until the controller observed `generation` with the condition `wanted`, its
    /// message accepted by `message`.
    pub async fn wait_condition(
        &self,
        generation: i64,
        wanted: Wanted<'_>,
        timeout: Duration,
        message: impl Fn(&str) -> bool,
    ) -> ShardedPrometheus {
        wait_condition(
            &self.sproms,
            self.name,
            generation,
            wanted,
            timeout,
            message,
        )
        .await
    }

    /// Waits until the controller observed `generation` with the condition `type_` True for
    /// `reason`, and returns the status.
    pub async fn wait_true(
        &self,
        generation: i64,
        type_: &str,
        reason: &str,
    ) -> ShardedPrometheusStatus {
        let wanted = Wanted::true_with(type_, reason);
        let sprom = self
            .wait_condition(generation, wanted, self.timeout, |_| true)
            .await;
        status_of(&sprom)
    }

    /// kstatus's verdict on the ShardedPrometheus as the API server holds it, and its `Ready`
    /// condition's status and reason.
    pub async fn kstatus(&self) -> (crate::kstatus::Status, Option<(String, String)>) {
        let sprom = self.sproms.get(self.name).await.unwrap();
        let object = serde_json::to_value(sprom).unwrap();
        (
            crate::kstatus::compute(&object),
            crate::kstatus::ready(&object),
        )
    }

    /// Waits until the controller observed `generation` with `shards` ready shards.
    pub async fn wait_ready_shards(&self, what: &str, generation: i64, shards: i32) {
        self.wait_status(what, generation, |sprom| {
            let ready = sprom.status.as_ref().map_or(0, |s| s.ready_shards);
            (ready == shards)
                .then_some(())
                .ok_or(format!("{ready} ready shards"))
        })
        .await;
    }

    /// The Prometheus pods of the resource.
    pub async fn prometheus_pods(&self) -> Vec<Pod> {
        let pods: Api<Pod> = self.ns.api();
        let selector = format!("app.kubernetes.io/instance={}", self.name);
        pods.list(&ListParams::default().labels(&selector))
            .await
            .unwrap_or_else(|e| panic!("listing the pods of {}: {e}", self.name))
            .items
    }

    /// The shard controller's reconciles so far.
    pub async fn reconciles(&self) -> f64 {
        crate::process::metric_sum(self.metrics_port, "zone_aware_reconciliations_total", None)
            .await
    }
}
