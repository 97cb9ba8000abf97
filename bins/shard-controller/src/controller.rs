//! Wiring: the ShardedPrometheus watch, the watches of its children (so a hand-deleted child
//! comes back and StatefulSet readiness reaches the status), the node cache, readiness and
//! shutdown.

use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::{StatefulSet, StatefulSetSpec};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, Secret, Service};
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::store::WriterDropped;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{Controller, WatchStreamExt, predicates, watcher};
use kube::{Client, Resource, ResourceExt};
use zone_api::ShardedPrometheus;
use zone_monitoring::resolve::Source;
use zone_operator::controller::{self, CachesStopped};
use zone_operator::metrics::MetricsError;
use zone_operator::zones::NodeZones;
use zone_operator::{InitialList, RuntimeParts, ScopeArgs, WatchSet};

use zone_api::sprom::contract::{MANAGED_BY, MANAGED_BY_LABEL};

use crate::children::build::{APPLIED_HASH_ANNOTATION, ZONE_ANNOTATION};
use crate::children::retention::{DELETION_DEADLINE_ANNOTATION, RETAINED_SINCE_ANNOTATION};
use crate::cli::Args;
use crate::context::{Context, Memory};
use crate::health::{self, ConfigHealth, Prober};
use crate::metrics::SpromMetrics;
use crate::monitoring::cache::{Caches, SharedIndex};
use crate::monitoring::kinds::{
    PodMonitorKind, PrometheusRuleKind, Raw, ScrapeConfigKind, ServiceMonitorKind,
};
use crate::monitoring::observe::{Selectable, affected, affected_by_namespaces};
use crate::reconcile;
use crate::traffic::Ledger;

#[derive(Debug, thiserror::Error)]
pub enum ControllerError {
    #[error("cannot register the ShardedPrometheus metrics")]
    Metrics(#[source] MetricsError),
    #[error(transparent)]
    Caches(#[from] CachesStopped),
}

const KEPT_ANNOTATIONS: [&str; 4] = [
    APPLIED_HASH_ANNOTATION,
    ZONE_ANNOTATION,
    RETAINED_SINCE_ANNOTATION,
    DELETION_DEADLINE_ANNOTATION,
];

/// Drops what the controller never reads from a StatefulSet: its pod template and managed
/// fields are most of its size, and 100 shards would keep them all in memory.
fn strip_stateful_set(sts: &mut StatefulSet) {
    strip_meta(sts);
    // Of the spec, only how many pods it keeps (a removed shard's final upload waits for each)
    // and how it rolls them (a defaulted `rollingUpdate` must go before it turns `OnDelete`).
    sts.spec = sts.spec.take().map(|spec| StatefulSetSpec {
        replicas: spec.replicas,
        update_strategy: spec.update_strategy,
        ..StatefulSetSpec::default()
    });
}

/// Keeps of a child's metadata what the controller reads: name, labels, owner and its own
/// annotations (applied hash, zone, retention marks).
fn strip_meta<K: Resource>(child: &mut K) {
    let meta = child.meta_mut();
    meta.managed_fields = None;
    if let Some(annotations) = meta.annotations.as_mut() {
        annotations.retain(|key, _| KEPT_ANNOTATIONS.contains(&key.as_str()));
    }
}

/// The caches of a shard's children (metadata, but for the StatefulSets' status).
struct ChildCaches {
    stateful_sets: Store<StatefulSet>,
    config_maps: Store<PartialObjectMeta<ConfigMap>>,
    secrets: Store<PartialObjectMeta<Secret>>,
    services: Store<PartialObjectMeta<Service>>,
}

impl ChildCaches {
    /// The caches the status reads, with the nodes' zones.
    async fn wait_until_ready(&self, zones: &NodeZones) -> Result<(), WriterDropped> {
        self.stateful_sets.wait_until_ready().await?;
        self.config_maps.wait_until_ready().await?;
        self.secrets.wait_until_ready().await?;
        self.services.wait_until_ready().await?;
        zones.wait_until_ready().await
    }
}

/// Runs until shutdown.
pub async fn run(parts: RuntimeParts, args: Args) -> Result<(), ControllerError> {
    let sprom_metrics =
        SpromMetrics::register(&parts.registry).map_err(ControllerError::Metrics)?;
    let scope = &args.scope;
    let client = parts.client.clone();
    let initial_list = parts.initial_list(scope.namespace()).await;

    let (sproms, sprom_stream) = watch_sproms(scope, &client);

    let mut watches = WatchSet::<ShardedPrometheus>::new();
    let index = SharedIndex::default();
    let monitoring = watch_monitoring_kinds(&mut watches, scope, &client, &sproms, &index);
    let children = watch_children(&mut watches, scope, &client, &index);
    let zones = watch_zones(
        &mut watches,
        &client,
        &scope.zone_label,
        initial_list,
        &sproms,
    );
    zones
        .register_metrics(&parts.registry)
        .map_err(ControllerError::Metrics)?;
    let pods = watch_pods(&mut watches, scope, &client);
    let (probe_triggers, probed) = futures::channel::mpsc::unbounded();
    watches.trigger(probed.map(|sprom| vec![sprom]));
    let (drive, trigger_stream) = watches.start();
    let drive = tokio::spawn(drive);

    // The children and node caches are what the status reads; the watch of the resources
    // themselves is driven by the controller below and needs no gate.
    let synced = controller::wait_for_caches(
        children.wait_until_ready(&zones),
        &parts.readiness,
        &parts.shutdown,
    )
    .await;
    if synced != Ok(true) {
        drive.abort();
        return Ok(synced.map(drop)?);
    }
    let context = Arc::new(Context {
        client: client.clone(),
        sproms: sproms.clone(),
        stateful_sets: children.stateful_sets,
        config_maps: children.config_maps,
        secrets: children.secrets,
        services: children.services,
        pods: pods.clone(),
        zones,
        events: parts.events.clone(),
        metrics: parts.controller_metrics(),
        sprom_metrics,
        field_manager: scope.field_manager(&parts.controller),
        zone_label: scope.zone_label.clone(),
        zone_aware_rollouts: args.zone_aware_rollouts,
        monitoring,
        memory: Memory {
            index,
            ..Memory::default()
        },
        config_health: ConfigHealth::new(args.config_load_grace),
        traffic: Default::default(),
    });
    let background = spawn_background(&context, &sproms, pods, probe_triggers);
    tracing::info!(namespace = ?scope.namespace(), "shard-controller running");
    let controller = Controller::for_stream(sprom_stream, sproms).reconcile_on(trigger_stream);
    controller::run(controller, &parts.shutdown, reconcile::reconcile, context).await;
    for task in background {
        task.abort();
    }
    drive.abort();
    Ok(())
}

/// The tasks beside the reconciles, which read the pods' Prometheus: the prober (the
/// configuration each runs) and the traffic ledger (what their scraping moves between zones).
/// Both reconcile the resources whose status they change through `triggers`.
fn spawn_background(
    context: &Context,
    sproms: &Store<ShardedPrometheus>,
    pods: Store<Pod>,
    triggers: futures::channel::mpsc::UnboundedSender<ObjectRef<ShardedPrometheus>>,
) -> [tokio::task::JoinHandle<()>; 2] {
    let ledger = Ledger {
        ledger: context.traffic.clone(),
        sproms: sproms.clone(),
        pods: pods.clone(),
        zones: context.zones.clone(),
        zone_label: context.zone_label.clone(),
        metrics: context.sprom_metrics.clone(),
        triggers: triggers.clone(),
    };
    let prober = Prober {
        health: context.config_health.clone(),
        sproms: sproms.clone(),
        pods,
        metrics: context.sprom_metrics.clone(),
        triggers,
    };
    [tokio::spawn(ledger.run()), tokio::spawn(prober.run())]
}

/// The ShardedPrometheuses: their cache, and the stream of those whose generation changed (our
/// status writes change the resourceVersion, not the generation: filtering on the generation
/// keeps them from triggering another reconcile).
fn watch_sproms(
    scope: &ScopeArgs,
    client: &Client,
) -> (
    Store<ShardedPrometheus>,
    impl futures::Stream<Item = Result<ShardedPrometheus, watcher::Error>> + Send + use<>,
) {
    let (sproms, sprom_writer) = reflector::store();
    let stream = watcher(
        scope.api::<ShardedPrometheus>(client),
        watcher::Config::default(),
    )
    .backoff(zone_operator::backoff::WatchBackoff::default())
    .reflect(sprom_writer)
    .applied_objects()
    .predicate_filter(predicates::generation, Default::default());
    (sproms, stream)
}

/// The shards' Prometheus pods, for the prober that asks them which configuration they run
/// (labels, phase and IP, and the final upload's ephemeral containers); their answers, when
/// they change, reconcile the resource, as does a change of a pod that uploads.
fn watch_pods(
    watches: &mut WatchSet<ShardedPrometheus>,
    scope: &ScopeArgs,
    client: &Client,
) -> Store<Pod> {
    watches.watch(
        "pods",
        scope.api::<Pod>(client),
        watcher::Config::default().labels(&format!("{MANAGED_BY_LABEL}={MANAGED_BY}")),
        health::strip_pod,
        uploading_pod_owner,
    )
}

/// The ShardedPrometheus of a pod with a final upload's ephemeral containers (stripped as
/// [`health::strip_pod`] strips it): its attempts' ends move the upload on.
fn uploading_pod_owner(pod: &Pod) -> Vec<ObjectRef<ShardedPrometheus>> {
    let uploading = pod
        .spec
        .as_ref()
        .is_some_and(|spec| spec.ephemeral_containers.is_some());
    let owner = pod.labels().get(zone_api::sprom::contract::INSTANCE_LABEL);
    match (uploading, owner, pod.namespace()) {
        (true, Some(name), Some(namespace)) => {
            vec![ObjectRef::new(name).within(&namespace)]
        }
        _ => Vec::new(),
    }
}

/// The watches of the monitoring kinds and of namespace labels (for the namespace selectors of
/// monitors and rules, metadata only).
fn watch_monitoring_kinds(
    watches: &mut WatchSet<ShardedPrometheus>,
    scope: &ScopeArgs,
    client: &Client,
    sproms: &Store<ShardedPrometheus>,
    index: &SharedIndex,
) -> Caches {
    let sproms_now = sproms.clone();
    let namespaces = watches.watch(
        "namespaces",
        kube::Api::<PartialObjectMeta<Namespace>>::all(client.clone()),
        watcher::Config::default(),
        strip_meta,
        move |_: &PartialObjectMeta<Namespace>| affected_by_namespaces(&sproms_now),
    );
    let (ns, index) = (&namespaces, index);
    Caches {
        service_monitors: watch_monitoring::<ServiceMonitorKind>(
            watches,
            "servicemonitors",
            scope.api(client),
            sproms,
            ns,
            index,
        ),
        pod_monitors: watch_monitoring::<PodMonitorKind>(
            watches,
            "podmonitors",
            scope.api(client),
            sproms,
            ns,
            index,
        ),
        scrape_configs: watch_monitoring::<ScrapeConfigKind>(
            watches,
            "scrapeconfigs",
            scope.api(client),
            sproms,
            ns,
            index,
        ),
        rules: watch_monitoring::<PrometheusRuleKind>(
            watches,
            "prometheusrules",
            scope.api(client),
            sproms,
            ns,
            index,
        ),
        namespaces,
        values: Default::default(),
    }
}

/// The watches of the shards' children, and of every Secret and ConfigMap: a monitor's
/// credentials live in Secrets (and CAs in ConfigMaps) of its namespace, and a change of one
/// re-renders the resources whose monitors reference it. Of Secrets, ConfigMaps and Services
/// the metadata is enough (a deleted one comes back; an applied hash says whether to apply
/// again), and their data is the bulk of what a watch would hold.
fn watch_children(
    watches: &mut WatchSet<ShardedPrometheus>,
    scope: &ScopeArgs,
    client: &Client,
    index: &SharedIndex,
) -> ChildCaches {
    let children = watcher::Config::default().labels(&format!("{MANAGED_BY_LABEL}={MANAGED_BY}"));
    let stateful_sets = watches.watch(
        "statefulsets",
        scope.api::<StatefulSet>(client),
        children.clone(),
        strip_stateful_set,
        owner_of,
    );
    let referencing = index.clone();
    let config_maps = watches.watch(
        "configmaps",
        scope.api::<PartialObjectMeta<ConfigMap>>(client),
        watcher::Config::default(),
        strip_meta,
        move |config_map: &PartialObjectMeta<ConfigMap>| {
            owner_or_referencing(config_map, Source::ConfigMap, &referencing)
        },
    );
    let referencing = index.clone();
    let secrets = watches.watch(
        "secrets",
        scope.api::<PartialObjectMeta<Secret>>(client),
        watcher::Config::default(),
        strip_meta,
        move |secret: &PartialObjectMeta<Secret>| {
            owner_or_referencing(secret, Source::Secret, &referencing)
        },
    );
    let services = watches.watch(
        "services",
        scope.api::<PartialObjectMeta<Service>>(client),
        children,
        strip_meta,
        owner_of,
    );
    ChildCaches {
        stateful_sets,
        config_maps,
        secrets,
        services,
    }
}

/// The nodes' zones. Zones gaining or losing their last node change the Degraded condition of
/// every resource; only a change of that set matters: node heartbeats and test nodes of other
/// zones must not reconcile every resource.
fn watch_zones(
    watches: &mut WatchSet<ShardedPrometheus>,
    client: &Client,
    zone_label: &str,
    initial_list: InitialList,
    sproms: &Store<ShardedPrometheus>,
) -> NodeZones {
    let (zones, node_events) = NodeZones::watch(client, zone_label, initial_list);
    let all = sproms.clone();
    let node_zones = zones.clone();
    let mut known = std::collections::BTreeSet::new();
    watches.trigger(node_events.map(move |()| {
        let present = node_zones.zones_present();
        if present == known {
            return Vec::new();
        }
        known = present;
        all.state()
            .iter()
            .map(|sprom| ObjectRef::from_obj(sprom.as_ref()))
            .collect::<Vec<_>>()
    }));
    zones
}

/// Adds the watch of a monitoring kind; its changes reconcile the resources they concern. It
/// is not waited for: without prometheus-operator's CRDs it never syncs, and the resources
/// selecting the kind report it instead.
fn watch_monitoring<K: Selectable>(
    watches: &mut WatchSet<ShardedPrometheus>,
    name: &'static str,
    api: kube::Api<Raw<K>>,
    sproms: &Store<ShardedPrometheus>,
    namespaces: &Store<PartialObjectMeta<Namespace>>,
    index: &SharedIndex,
) -> Store<Raw<K>> {
    let (sproms, namespaces, index) = (sproms.clone(), namespaces.clone(), index.clone());
    watches.watch(
        name,
        api,
        watcher::Config::default(),
        Raw::strip,
        move |object: &Raw<K>| affected(object, &sproms, &namespaces, &index),
    )
}

/// The resources that own `object`, or whose monitors reference it as `source`.
fn owner_or_referencing<K: Resource>(
    object: &K,
    source: Source,
    index: &SharedIndex,
) -> Vec<ObjectRef<ShardedPrometheus>> {
    let mut sproms = owner_of(object);
    let meta = object.meta();
    let (namespace, name) = (
        meta.namespace.as_deref().unwrap_or_default(),
        meta.name.as_deref().unwrap_or_default(),
    );
    sproms.extend(
        index
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .referencing(source, namespace, name),
    );
    sproms
}

/// The ShardedPrometheus that controls `child`, if any.
fn owner_of<K: Resource>(child: &K) -> Vec<ObjectRef<ShardedPrometheus>> {
    let namespace = child.meta().namespace.clone().unwrap_or_default();
    child
        .meta()
        .owner_references
        .iter()
        .flatten()
        .filter(|owner| {
            owner.controller == Some(true)
                && owner.kind == ShardedPrometheus::kind(&())
                && owner.api_version == ShardedPrometheus::api_version(&())
        })
        .map(|owner| ObjectRef::new(&owner.name).within(&namespace))
        .collect()
}
