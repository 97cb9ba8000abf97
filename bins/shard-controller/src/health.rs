//! Whether every shard's Prometheus runs the configuration the controller applied.
//!
//! A configuration Prometheus refuses to load leaves the previous one running: the pods stay
//! ready and the shards available, only Prometheus's log tells. A background prober asks every
//! running Prometheus pod of every active shard, every [`PROBE_INTERVAL`], for
//! `/api/v1/status/runtimeinfo` (did the last reload succeed, when was the configuration loaded)
//! and, when that changed, for `/api/v1/status/config` (what it runs, as a
//! [`Fingerprint`]). Answers are kept per shard (namespace, name, index) in [`ConfigHealth`],
//! shared with the reconcile: a changed answer reconciles the ShardedPrometheus, whose status
//! then says `ConfigLoaded` ([`verdict`]). The apply step records there which configuration
//! each shard was given, and when it changed, for the grace a changed Secret needs to reach the
//! pods. Agents serve both endpoints too (checked with Prometheus 3.16 `--agent`).

mod fingerprint;
pub mod verdict;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use futures::StreamExt;
use futures::channel::mpsc::UnboundedSender;
use http_body_util::{BodyExt, Empty, Limited};
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use k8s_openapi::api::core::v1::{Pod, PodStatus};
use kube::ResourceExt;
use kube::runtime::reflector::{ObjectRef, Store};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use zone_api::ShardedPrometheus;
use zone_api::sprom::contract::{self, INSTANCE_LABEL};

pub use fingerprint::Fingerprint;
use verdict::{Answer, PodProbe, ProbeError};

use crate::build::WEB_PORT;
use crate::metrics::SpromMetrics;

/// How often every pod is asked. A refused configuration shows in the status at most this long
/// (plus a reconcile) after Prometheus tried to load it.
pub const PROBE_INTERVAL: Duration = Duration::from_secs(15);
/// Per request: a Prometheus that takes longer is busy enough to count as not asked.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(2);
/// Pods asked at once. Answers take milliseconds, so 100 shards of 2 replicas take well under a
/// second; were they all to time out, a round would take 200 / 16 × 2 s ≈ 25 s and the next
/// one would start late (rounds never overlap), without hundreds of connections at once.
const PROBE_CONCURRENCY: usize = 16;
/// The served configuration of a shard with thousands of jobs is a few MiB.
const MAX_ANSWER_BYTES: usize = 32 << 20;
/// How long after a shard's configuration changed a pod may still run the previous one before
/// it counts as not loaded. The kubelet copies a changed Secret into a running pod when it next
/// syncs the pod (`syncFrequency`, 1 minute by default, with up to 50 % jitter: at most 90 s),
/// and Prometheus notices the file at its next `--config.auto-reload-interval` check (30 s, set
/// by the controller): 120 s at worst. Measured on the local cluster's real nodes (8 changes × 3
/// pods, from the apply to the pod serving the new configuration): 22 to 112 s, median 53 s.
/// 3 minutes leaves half the worst case as margin (the kubelet's API watch may lag too).
pub const DEFAULT_GRACE: Duration = Duration::from_secs(180);

/// A shard: namespace, ShardedPrometheus name, index.
pub type ShardKey = (String, String, u32);

/// The configuration the controller applied to a shard, as the plan built it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppliedConfig {
    /// `None` if the rendered file could not be read back (never expected).
    pub fingerprint: Option<Fingerprint>,
    /// The Secret written differs from the one in the cluster.
    pub secret_changed: bool,
}

/// What the reconcile of one ShardedPrometheus reads from [`ConfigHealth`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConfigObservation {
    /// Whether the prober has asked every pod once since the controller started: until then
    /// `ConfigLoaded` stays as it was.
    pub probed: bool,
    pub grace: Duration,
    /// Per shard, the fingerprint last applied and how long ago it changed (`None`: before the
    /// controller started).
    pub applied: BTreeMap<u32, (Fingerprint, Option<Duration>)>,
    /// Per shard, what its running pods answered, by pod name.
    pub pods: BTreeMap<u32, Vec<PodProbe>>,
}

/// The shared map of applied configurations and answers, keyed by shard.
#[derive(Clone)]
pub struct ConfigHealth {
    state: Arc<Mutex<State>>,
    grace: Duration,
}

impl Default for ConfigHealth {
    fn default() -> Self {
        ConfigHealth::new(DEFAULT_GRACE)
    }
}

#[derive(Default)]
struct State {
    applied: BTreeMap<ShardKey, Applied>,
    answers: BTreeMap<ShardKey, Vec<PodProbe>>,
    probed: bool,
}

struct Applied {
    fingerprint: Fingerprint,
    /// When the fingerprint last changed; `None`: before the controller started.
    changed_at: Option<Instant>,
}

impl ConfigHealth {
    pub fn new(grace: Duration) -> Self {
        ConfigHealth {
            state: Arc::default(),
            grace,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// What is known of the shards of `namespace/name`.
    pub fn observe(&self, namespace: &str, name: &str) -> ConfigObservation {
        let state = self.lock();
        let range = |key: &ShardKey| key.0 == namespace && key.1 == name;
        let start = (namespace.to_string(), name.to_string(), 0);
        ConfigObservation {
            probed: state.probed,
            grace: self.grace,
            applied: state
                .applied
                .range(start.clone()..)
                .take_while(|(key, _)| range(key))
                .map(|(key, applied)| {
                    let age = applied.changed_at.map(|at| at.elapsed());
                    (key.2, (applied.fingerprint.clone(), age))
                })
                .collect(),
            pods: state
                .answers
                .range(start..)
                .take_while(|(key, _)| range(key))
                .map(|(key, pods)| (key.2, pods.clone()))
                .collect(),
        }
    }

    /// Records the configurations applied to the active shards of `namespace/name` (the others
    /// are forgotten). A fingerprint that changed starts the grace now; one seen for the first
    /// time starts it only if its Secret was rewritten (else it was applied before the
    /// controller started, and the pods have had their time).
    pub fn record_applied(
        &self,
        namespace: &str,
        name: &str,
        configs: &BTreeMap<u32, AppliedConfig>,
    ) {
        let now = Instant::now();
        let mut state = self.lock();
        state
            .applied
            .retain(|key, _| key.0 != namespace || key.1 != name || configs.contains_key(&key.2));
        for (index, config) in configs {
            let key = (namespace.to_string(), name.to_string(), *index);
            let Some(fingerprint) = &config.fingerprint else {
                state.applied.remove(&key);
                continue;
            };
            let changed_at = match state.applied.get(&key) {
                Some(applied) if &applied.fingerprint == fingerprint => continue,
                Some(_) => Some(now),
                None => config.secret_changed.then_some(now),
            };
            state.applied.insert(
                key,
                Applied {
                    fingerprint: fingerprint.clone(),
                    changed_at,
                },
            );
        }
    }

    /// Keeps the answers of one round of probes; forgets what belongs to ShardedPrometheuses
    /// that are gone (`live`). Returns the resources whose answers changed (all of them after
    /// the first round, so each gets its condition).
    fn store_answers(
        &self,
        answers: BTreeMap<ShardKey, Vec<PodProbe>>,
        live: &BTreeSet<(String, String)>,
    ) -> BTreeSet<(String, String)> {
        let mut state = self.lock();
        let resource = |key: &ShardKey| (key.0.clone(), key.1.clone());
        let mut changed: BTreeSet<(String, String)> = match state.probed {
            true => BTreeSet::new(),
            false => live.clone(),
        };
        for (key, pods) in &state.answers {
            if answers.get(key) != Some(pods) {
                changed.insert(resource(key));
            }
        }
        for key in answers.keys() {
            if !state.answers.contains_key(key) {
                changed.insert(resource(key));
            }
        }
        state.answers = answers;
        state.probed = true;
        state.applied.retain(|key, _| live.contains(&resource(key)));
        changed.retain(|sprom| live.contains(sprom));
        changed
    }

    /// Per shard with answers, whether its pods run the applied configuration (for the
    /// metric): `Some(false)` when one refused it or runs another past the grace, `None` when
    /// none answered.
    fn shard_states(&self) -> BTreeMap<ShardKey, Option<bool>> {
        let state = self.lock();
        state
            .answers
            .iter()
            .map(|(key, pods)| {
                let applied = state.applied.get(key);
                let since = applied.and_then(|a| a.changed_at.map(|at| at.elapsed()));
                let verdicts: Vec<verdict::PodVerdict> = pods
                    .iter()
                    .map(|probe| {
                        verdict::pod_verdict(
                            &probe.answer,
                            applied.map(|a| &a.fingerprint),
                            since,
                            self.grace,
                        )
                    })
                    .collect();
                let failed = verdicts.iter().any(|v| {
                    matches!(
                        v,
                        verdict::PodVerdict::Refused { .. } | verdict::PodVerdict::NotLoaded { .. }
                    )
                });
                let answered = verdicts
                    .iter()
                    .any(|v| !matches!(v, verdict::PodVerdict::NotProbed(_)));
                let loaded = match (failed, answered) {
                    (true, _) => Some(false),
                    (false, true) => Some(true),
                    (false, false) => None,
                };
                (key.clone(), loaded)
            })
            .collect()
    }
}

/// One Prometheus pod to ask.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Target {
    shard: ShardKey,
    pod: String,
    uid: String,
    address: SocketAddr,
}

/// Keeps of a pod what the prober reads: labels, phase and IP.
pub fn strip_pod(pod: &mut Pod) {
    let meta = &mut pod.metadata;
    meta.managed_fields = None;
    meta.annotations = None;
    meta.owner_references = None;
    pod.spec = None;
    pod.status = pod.status.take().map(|status| PodStatus {
        phase: status.phase,
        pod_ip: status.pod_ip,
        ..PodStatus::default()
    });
}

/// The running pods with an IP of the active shards of every ShardedPrometheus not paused; and
/// every ShardedPrometheus known.
fn targets(
    sproms: &Store<ShardedPrometheus>,
    pods: &Store<Pod>,
) -> (Vec<Target>, BTreeSet<(String, String)>) {
    let mut live = BTreeSet::new();
    let mut active = BTreeMap::new();
    for sprom in sproms.state() {
        let key = (sprom.namespace().unwrap_or_default(), sprom.name_any());
        if !sprom.spec.paused {
            active.insert(key.clone(), u32::try_from(sprom.spec.shards).unwrap_or(0));
        }
        live.insert(key);
    }
    let targets = pods
        .state()
        .iter()
        .filter(|pod| pod.metadata.deletion_timestamp.is_none())
        .filter_map(|pod| {
            let labels = pod.labels();
            let name = labels.get(INSTANCE_LABEL)?;
            let shard = contract::shard_of(labels)?;
            let namespace = pod.namespace().unwrap_or_default();
            let shards = active.get(&(namespace.clone(), name.clone()))?;
            let status = pod.status.as_ref()?;
            if shard >= *shards || status.phase.as_deref() != Some("Running") {
                return None;
            }
            let ip: IpAddr = status.pod_ip.as_deref()?.parse().ok()?;
            let port = u16::try_from(WEB_PORT).ok()?;
            Some(Target {
                shard: (namespace, name.clone(), shard),
                pod: pod.name_any(),
                uid: pod.uid().unwrap_or_default(),
                address: SocketAddr::new(ip, port),
            })
        })
        .collect();
    (targets, live)
}

/// Prometheus's answer envelope.
#[derive(Deserialize)]
struct Envelope<T> {
    status: String,
    data: Option<T>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RuntimeInfo {
    #[serde(default)]
    start_time: Option<String>,
    reload_config_success: bool,
    #[serde(default)]
    last_config_time: Option<String>,
}

#[derive(Deserialize)]
struct ServedConfig {
    yaml: String,
}

/// A pod's served configuration, kept while it has not reloaded: asked again only when its
/// start or configuration time changes.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Served {
    start_time: Option<String>,
    last_config_time: Option<String>,
    fingerprint: Fingerprint,
}

/// The background prober.
pub struct Prober {
    pub health: ConfigHealth,
    pub sproms: Store<ShardedPrometheus>,
    pub pods: Store<Pod>,
    pub metrics: SpromMetrics,
    /// Reconciles of the resources whose answers changed.
    pub triggers: UnboundedSender<ObjectRef<ShardedPrometheus>>,
}

type HttpClient = Client<HttpConnector, Empty<Bytes>>;

impl Prober {
    /// Asks every pod every [`PROBE_INTERVAL`], once the pod cache has synced; runs until
    /// aborted (or the cache stops).
    pub async fn run(self) {
        if !synced(&self.pods).await || !synced(&self.sproms).await {
            return;
        }
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(PROBE_TIMEOUT));
        connector.set_nodelay(true);
        let client: HttpClient = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(PROBE_INTERVAL * 2)
            .build(connector);
        let mut served: HashMap<String, Served> = HashMap::new();
        let mut series: BTreeSet<ShardKey> = BTreeSet::new();
        let mut interval = tokio::time::interval(PROBE_INTERVAL);
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            interval.tick().await;
            let started = Instant::now();
            let (targets, live) = targets(&self.sproms, &self.pods);
            let asked = targets.len();
            let answers: Vec<(Target, Answer, Option<Served>)> = futures::stream::iter(targets)
                .map(|target| {
                    let (client, cached) = (&client, served.get(&target.uid));
                    async move {
                        let (answer, kept) = probe(client, target.address, cached).await;
                        (target, answer, kept)
                    }
                })
                .buffer_unordered(PROBE_CONCURRENCY)
                .collect()
                .await;
            served.clear();
            let mut by_shard: BTreeMap<ShardKey, Vec<PodProbe>> = BTreeMap::new();
            for (target, answer, kept) in answers {
                if let Some(kept) = kept {
                    served.insert(target.uid, kept);
                }
                by_shard.entry(target.shard).or_default().push(PodProbe {
                    pod: target.pod,
                    answer,
                });
            }
            for pods in by_shard.values_mut() {
                pods.sort_by(|a, b| a.pod.cmp(&b.pod));
            }
            let changed = self.health.store_answers(by_shard, &live);
            for (namespace, name) in &changed {
                let sprom = ObjectRef::new(name).within(namespace);
                if self.triggers.unbounded_send(sprom).is_err() {
                    return;
                }
            }
            self.observe_metrics(&mut series);
            tracing::debug!(
                pods = asked,
                changed = changed.len(),
                took_ms = started.elapsed().as_millis() as u64,
                "Prometheus pods asked for their configuration"
            );
        }
    }

    fn observe_metrics(&self, series: &mut BTreeSet<ShardKey>) {
        let states = self.health.shard_states();
        for key in series.iter().filter(|key| !states.contains_key(*key)) {
            self.metrics.config_loaded(&key.0, &key.1, key.2, None);
        }
        series.clear();
        for (key, loaded) in states {
            self.metrics.config_loaded(&key.0, &key.1, key.2, loaded);
            if loaded.is_some() {
                series.insert(key);
            }
        }
    }
}

/// Waits until `store` has its initial list; false if its writer is gone. Asked again every
/// second rather than awaited once: a store's readiness wakes only the last task that waited on
/// it (kube's `DelayedInit` keeps one waker), and the Controller waits on the ShardedPrometheus
/// store too.
async fn synced<K>(store: &Store<K>) -> bool
where
    K: kube::Resource + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    loop {
        match tokio::time::timeout(Duration::from_secs(1), store.wait_until_ready()).await {
            Ok(ready) => return ready.is_ok(),
            Err(_) => continue,
        }
    }
}

/// Asks one pod; `cached` is what it served at its last answer. Returns the answer and what to
/// keep for the next round.
async fn probe(
    client: &HttpClient,
    address: SocketAddr,
    cached: Option<&Served>,
) -> (Answer, Option<Served>) {
    let info: RuntimeInfo = match get(client, address, "/api/v1/status/runtimeinfo").await {
        Ok(info) => info,
        Err(error) => return (Answer::Unreachable(error), None),
    };
    if !info.reload_config_success {
        let answer = Answer::Refused {
            last_config_time: info.last_config_time,
        };
        return (answer, cached.cloned());
    }
    if let Some(cached) = cached
        .filter(|c| c.start_time == info.start_time && c.last_config_time == info.last_config_time)
    {
        let answer = Answer::Running {
            served: cached.fingerprint.clone(),
        };
        return (answer, Some(cached.clone()));
    }
    let config: ServedConfig = match get(client, address, "/api/v1/status/config").await {
        Ok(config) => config,
        Err(error) => return (Answer::Unreachable(error), None),
    };
    match Fingerprint::of_yaml(&config.yaml) {
        Ok(fingerprint) => {
            let kept = Served {
                start_time: info.start_time,
                last_config_time: info.last_config_time,
                fingerprint: fingerprint.clone(),
            };
            (
                Answer::Running {
                    served: fingerprint,
                },
                Some(kept),
            )
        }
        Err(error) => {
            tracing::debug!(%address, %error, "the served configuration is not YAML");
            (Answer::Unreachable(ProbeError::Unreadable), None)
        }
    }
}

/// GET `path` of the Prometheus at `address`, within [`PROBE_TIMEOUT`]: the `data` of its
/// answer.
async fn get<T: DeserializeOwned>(
    client: &HttpClient,
    address: SocketAddr,
    path: &str,
) -> Result<T, ProbeError> {
    let request = hyper::Request::get(format!("http://{address}{path}"))
        .header(hyper::header::ACCEPT, "application/json")
        .body(Empty::<Bytes>::new())
        .map_err(|_| ProbeError::Unreadable)?;
    let body = tokio::time::timeout(PROBE_TIMEOUT, async {
        let response = client.request(request).await.map_err(|error| {
            tracing::debug!(%address, error = %zone_operator::ErrorChain(&error), "Prometheus pod not reached");
            ProbeError::Connect
        })?;
        if !response.status().is_success() {
            return Err(ProbeError::Status(response.status().as_u16()));
        }
        Limited::new(response.into_body(), MAX_ANSWER_BYTES)
            .collect()
            .await
            .map(|collected| collected.to_bytes())
            .map_err(|error| match error.is::<http_body_util::LengthLimitError>() {
                true => ProbeError::TooLarge,
                false => ProbeError::Connect,
            })
    })
    .await
    .map_err(|_| ProbeError::Timeout(PROBE_TIMEOUT))??;
    let envelope: Envelope<T> =
        serde_json::from_slice(&body).map_err(|_| ProbeError::Unreadable)?;
    match (envelope.status.as_str(), envelope.data) {
        ("success", Some(data)) => Ok(data),
        _ => Err(ProbeError::Unreadable),
    }
}

#[cfg(test)]
mod tests;
