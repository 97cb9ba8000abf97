//! The prober: every [`PROBE_INTERVAL`], the running Prometheus pods of the active shards are
//! asked which configuration they run, and the answers go to [`ConfigHealth`].

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use futures::StreamExt;
use futures::channel::mpsc::UnboundedSender;
use k8s_openapi::api::core::v1::{Container, Pod, PodSpec, PodStatus};
use kube::ResourceExt;
use kube::runtime::reflector::{ObjectRef, Store};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use zone_api::ShardedPrometheus;
use zone_api::sprom::THANOS_SIDECAR_CONTAINER;
use zone_api::sprom::contract::{self, INSTANCE_LABEL};
use zone_operator::prom_api::tls::{ClientTls, Roots, TlsOptions};
use zone_operator::prom_api::{ApiClient, ApiError, BodyCaps};

use super::verdict::{Answer, PodProbe, ProbeError};
use super::{
    ConfigHealth, Fingerprint, MAX_ANSWER_BYTES, PROBE_CONCURRENCY, PROBE_INTERVAL, PROBE_TIMEOUT,
    ShardKey,
};
use crate::children::build::WEB_PORT;
use crate::metrics::SpromMetrics;

/// One Prometheus pod to ask.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Target {
    pub(crate) shard: ShardKey,
    pub(crate) pod: String,
    pub(crate) uid: String,
    pub(crate) address: SocketAddr,
    /// The node it runs on (the traffic ledger's pod zone).
    pub(crate) node: Option<String>,
}

/// Keeps of a pod what the prober reads (labels, phase and IP), what the traffic ledger reads
/// (its node) and what the final upload reads (its attempts, and the image of the Thanos
/// sidecar, which the upload runs).
pub fn strip_pod(pod: &mut Pod) {
    let meta = &mut pod.metadata;
    meta.managed_fields = None;
    // Only the digest of the configuration the pod was last nudged with.
    meta.annotations = meta.annotations.take().and_then(|mut annotations| {
        let digest = annotations.remove(crate::children::build::CONFIG_DIGEST_ANNOTATION)?;
        Some(
            [(
                crate::children::build::CONFIG_DIGEST_ANNOTATION.to_string(),
                digest,
            )]
            .into(),
        )
    });
    meta.owner_references = None;
    // Only the final upload's ephemeral containers (see final_upload::pods), and the sidecar's
    // name and image.
    let ours = |name: &str| crate::final_upload::pods::attempt_number(name).is_some();
    pod.spec = pod.spec.take().and_then(|spec| {
        let mut uploads = spec.ephemeral_containers.unwrap_or_default();
        uploads.retain(|container| ours(&container.name));
        let sidecar: Vec<Container> = spec
            .containers
            .into_iter()
            .filter(|container| container.name == THANOS_SIDECAR_CONTAINER)
            .map(|container| Container {
                name: container.name,
                image: container.image,
                ..Container::default()
            })
            .collect();
        let node_name = spec.node_name;
        (!uploads.is_empty() || !sidecar.is_empty() || node_name.is_some()).then(|| PodSpec {
            node_name,
            containers: sidecar,
            ephemeral_containers: (!uploads.is_empty()).then_some(uploads),
            ..PodSpec::default()
        })
    });
    pod.status = pod.status.take().map(|status| PodStatus {
        phase: status.phase,
        pod_ip: status.pod_ip,
        ephemeral_container_statuses: status.ephemeral_container_statuses.map(|mut statuses| {
            statuses.retain(|status| ours(&status.name));
            statuses
        }),
        ..PodStatus::default()
    });
}

/// The running pods with an IP of the active shards of every ShardedPrometheus not paused; and
/// every ShardedPrometheus known.
pub(crate) fn targets(
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
                node: pod.spec.as_ref().and_then(|spec| spec.node_name.clone()),
            })
        })
        .collect();
    (targets, live)
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RuntimeInfo {
    #[serde(default)]
    start_time: Option<String>,
    reload_config_success: bool,
    #[serde(default)]
    pub(crate) last_config_time: Option<String>,
}

#[derive(Deserialize)]
pub(crate) struct ServedConfig {
    pub(crate) yaml: String,
}

/// A pod's served configuration, kept while it has not reloaded: asked again only when its
/// start or configuration time changes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Served {
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

impl Prober {
    /// Asks every pod every [`PROBE_INTERVAL`], once the pod cache has synced; runs until
    /// aborted (or the cache stops).
    pub async fn run(self) {
        if !synced(&self.pods).await || !synced(&self.sproms).await {
            return;
        }
        let Some(client) = client() else {
            return;
        };
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
pub(crate) async fn synced<K>(store: &Store<K>) -> bool
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
pub(super) async fn probe(
    client: &ApiClient,
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

/// The client of the Prometheus pods: plain HTTP, answers up to [`MAX_ANSWER_BYTES`]; None
/// (logged) when it cannot be made.
pub(crate) fn client() -> Option<ApiClient> {
    let options = TlsOptions {
        roots: Roots::Empty,
        ..TlsOptions::default()
    };
    let tls = match ClientTls::new(&options) {
        Ok(tls) => tls,
        Err(error) => {
            tracing::error!(error = %zone_operator::ErrorChain(&error), "no client for the Prometheus pods");
            return None;
        }
    };
    let caps = BodyCaps {
        compressed: MAX_ANSWER_BYTES,
        uncompressed: MAX_ANSWER_BYTES,
    };
    Some(ApiClient::new(
        &tls,
        PROBE_TIMEOUT,
        PROBE_INTERVAL * 2,
        caps,
    ))
}

/// GET `path` of the Prometheus at `address`, within [`PROBE_TIMEOUT`]: the `data` of its
/// answer.
pub(crate) async fn get<T: DeserializeOwned>(
    client: &ApiClient,
    address: SocketAddr,
    path: &str,
) -> Result<T, ProbeError> {
    let url = format!("http://{address}{path}");
    let answer = tokio::time::timeout(PROBE_TIMEOUT, client.get(&url, None))
        .await
        .map_err(|_| ProbeError::Timeout(PROBE_TIMEOUT))?
        .map_err(|error| probe_error(address, &error))?;
    if !answer.status.is_success() {
        return Err(ProbeError::Status(answer.status.as_u16()));
    }
    answer
        .decode()
        .map_err(|error| probe_error(address, &error))
}

/// What a pod's condition says of `error` (its details are logged, not put in the status).
fn probe_error(address: SocketAddr, error: &ApiError) -> ProbeError {
    match error {
        ApiError::Timeout(after) => ProbeError::Timeout(*after),
        ApiError::Connect(_) => {
            tracing::debug!(%address, %error, "Prometheus pod not reached");
            ProbeError::Connect
        }
        ApiError::Status(code, _) => ProbeError::Status(*code),
        ApiError::TooLarge { .. } => ProbeError::TooLarge,
        ApiError::BadJson(_) | ApiError::ErrorAnswer(_) | ApiError::Url(_) => {
            ProbeError::Unreadable
        }
    }
}
