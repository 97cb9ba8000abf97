//! What the shard controller keeps across reconciles: the caches, the clients, and the memories
//! of earlier reconciles (the last full apply of each resource, what its monitoring used, the
//! jobs each monitor last had, the configuration applied to each shard).

use std::collections::{BTreeSet, HashMap};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret, Service};
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, ResourceExt};
use zone_api::ShardedPrometheus;
use zone_operator::controller::ReconcileContext;
use zone_operator::metrics::ObjectSeries;
use zone_operator::{ControllerMetrics, EventPublisher, NodeZones};

use crate::health::ConfigHealth;
use crate::metrics::SpromMetrics;
use crate::monitoring::cache::{Caches, Discovery, SharedIndex};
use crate::monitoring::translate::{LastGood, Memories};
use crate::reconcile::access::AccessCache;

/// Children are watched; a full apply every this long only bounds how long a drift nobody told
/// us about can last.
pub const RESYNC: Duration = Duration::from_secs(600);

/// After a failed reconcile (API error), retry after this long.
pub const ERROR_RETRY: Duration = Duration::from_secs(10);

pub struct Context {
    pub client: Client,
    pub sproms: Store<ShardedPrometheus>,
    pub stateful_sets: Store<StatefulSet>,
    pub config_maps: Store<PartialObjectMeta<ConfigMap>>,
    pub secrets: Store<PartialObjectMeta<Secret>>,
    pub services: Store<PartialObjectMeta<Service>>,
    /// The shards' Prometheus pods (labels, phase, IP and the config digest annotation).
    pub pods: Store<Pod>,
    pub zones: NodeZones,
    /// The caches of ServiceMonitors, PodMonitors, ScrapeConfigs, PrometheusRules and
    /// namespaces.
    pub monitoring: Caches,
    pub events: EventPublisher,
    pub metrics: ControllerMetrics,
    pub sprom_metrics: SpromMetrics,
    pub field_manager: String,
    /// The node label that carries zones (`--zone-label`).
    pub zone_label: String,
    /// A zau-controller runs to roll the shards zone by zone (`--zone-aware-rollouts`).
    pub zone_aware_rollouts: bool,
    /// What earlier reconciles leave for the next ones.
    pub memory: Memory,
    /// The configuration applied to each shard, and what its Prometheus pods answer about the
    /// one they run (shared with the prober).
    pub config_health: ConfigHealth,
    /// The shards' scrape traffic by zone (shared with the traffic ledger's task).
    pub traffic: crate::traffic::TrafficLedger,
}

/// Per resource (namespace, name), the generation and time of its last full apply.
pub type FullApplies = HashMap<(String, String), (i64, Instant)>;

/// What earlier reconciles leave for the next ones (all empty at the start).
#[derive(Default)]
pub struct Memory {
    /// Per resource, the generation and time of the last full apply: until the generation
    /// changes or [`RESYNC`] passes, children the cache shows unchanged are not written again.
    pub applied: Mutex<FullApplies>,
    /// The answers of the access reviews of the shards' ServiceAccounts.
    pub access: AccessCache,
    /// The resources with metric series, to drop those of deleted ones.
    pub series: ObjectSeries,
    /// Which monitoring kinds the API server serves.
    pub discovery: Discovery,
    /// What each resource selected and referenced at its last reconcile (shared with the
    /// watches' trigger mappers).
    pub index: SharedIndex,
    /// The jobs each monitor of each resource last translated to.
    pub last_good: Mutex<HashMap<ObjectRef<ShardedPrometheus>, LastGood>>,
}

impl Context {
    /// Drops what is kept of deleted resources: their metric series and their last full apply.
    pub fn forget_deleted(&self) {
        let live: BTreeSet<(String, String)> = self
            .sproms
            .state()
            .iter()
            .map(|s| (s.namespace().unwrap_or_default(), s.name_any()))
            .collect();
        self.memory
            .series
            .forget_deleted(&live, |namespace, name, _| {
                self.sprom_metrics.forget(namespace, name);
            });
        self.memory
            .applied
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|key, _| live.contains(key));
        let alive = |sprom: &ObjectRef<ShardedPrometheus>| {
            live.contains(&(
                sprom.namespace.clone().unwrap_or_default(),
                sprom.name.clone(),
            ))
        };
        self.memory
            .index
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(alive);
        self.memory
            .last_good
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|sprom, _| alive(sprom));
    }
    /// Commits what a translation of `memories.sprom`'s monitoring selected and referenced (for
    /// the watches' trigger mappers: a refused spec too must be reconciled when what it
    /// references changes), and drops the values no one references any more. Returns the jobs
    /// its monitors translated to, for [`Context::remember_applied_jobs`] once they are applied.
    pub fn remember_selection(
        &self,
        memories: Memories,
    ) -> (ObjectRef<ShardedPrometheus>, LastGood) {
        let mut index = self
            .memory
            .index
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        index.record(
            memories.sprom.clone(),
            memories.selected,
            memories.referenced,
        );
        self.monitoring
            .values
            .retain(|key| index.is_referenced(key));
        (memories.sprom, memories.good)
    }

    /// Commits the jobs `sprom`'s monitors translated to, once the shards' configurations that
    /// carry them are applied: a monitor that fails to translate later keeps these.
    pub fn remember_applied_jobs(&self, sprom: ObjectRef<ShardedPrometheus>, jobs: LastGood) {
        self.memory
            .last_good
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(sprom, jobs);
    }
}

impl ReconcileContext for Context {
    fn failure_policy(&self) -> (&ControllerMetrics, Duration) {
        (&self.metrics, ERROR_RETRY)
    }
}
