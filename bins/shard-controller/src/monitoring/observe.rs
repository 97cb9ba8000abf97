//! The observe half of monitoring: which watched objects a ShardedPrometheus selects, the
//! Secret and ConfigMap values they reference (read fresh from the API server), and which
//! ShardedPrometheuses a changed object, namespace, Secret or ConfigMap concerns.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, PoisonError};

use futures::FutureExt;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Api, Client, ResourceExt};
use zone_api::ShardedPrometheus;
use zone_api::ValidSprom;
use zone_api::sprom::{Selectors, ShardedPrometheusSpec};
use zone_monitoring::resolve::{Data, Source, Values};
use zone_monitoring::select::{self, Selection};

use super::cache::{Caches, Discovery, SharedIndex, ValueCache};
use super::error::ObserveError;
use super::kinds::{
    Kind, PodMonitorKind, PrometheusRuleKind, Raw, ScrapeConfigKind, ServiceMonitorKind,
};
use super::tenancy::Subject;
use super::translate::{self, LastGood, MonitoringRead, Selected};
use crate::context::Context;
use crate::reconcile::access::AccessCache;

/// A watched kind as a ShardedPrometheus selects it.
pub trait Selectable: Kind {
    const SELECT: select::Kind;
    /// The spec's selector and namespace selector of this kind.
    fn selectors(spec: &ShardedPrometheusSpec) -> (Option<&LabelSelector>, Option<&LabelSelector>);
    fn valid(valid: &ValidSprom) -> &Selectors;
}

macro_rules! selectable {
    ($kind:ty, $select:ident, $selector:ident, $namespaces:ident, $valid:ident) => {
        impl Selectable for $kind {
            const SELECT: select::Kind = select::Kind::$select;
            fn selectors(
                spec: &ShardedPrometheusSpec,
            ) -> (Option<&LabelSelector>, Option<&LabelSelector>) {
                (spec.$selector.as_ref(), spec.$namespaces.as_ref())
            }
            fn valid(valid: &ValidSprom) -> &Selectors {
                &valid.monitoring.$valid
            }
        }
    };
}

selectable!(
    ServiceMonitorKind,
    ServiceMonitor,
    service_monitor_selector,
    service_monitor_namespace_selector,
    service_monitors
);
selectable!(
    PodMonitorKind,
    PodMonitor,
    pod_monitor_selector,
    pod_monitor_namespace_selector,
    pod_monitors
);
selectable!(
    ScrapeConfigKind,
    ScrapeConfig,
    scrape_config_selector,
    scrape_config_namespace_selector,
    scrape_configs
);
selectable!(
    PrometheusRuleKind,
    PrometheusRule,
    rule_selector,
    rule_namespace_selector,
    rules
);

/// The labels of namespace `name`, from the cache.
fn namespace_labels(
    namespaces: &Store<PartialObjectMeta<Namespace>>,
) -> impl Fn(&str) -> Option<BTreeMap<String, String>> + '_ {
    move |name: &str| {
        namespaces
            .get(&ObjectRef::new(name))
            .map(|namespace| namespace.labels().clone())
    }
}

/// The ShardedPrometheuses that a change of `object` concerns: those selecting it now, and
/// those that selected it at their last reconcile.
pub fn affected<K: Selectable>(
    object: &Raw<K>,
    sproms: &Store<ShardedPrometheus>,
    namespaces: &Store<PartialObjectMeta<Namespace>>,
    index: &SharedIndex,
) -> Vec<ObjectRef<ShardedPrometheus>> {
    let namespace = object.namespace().unwrap_or_default();
    let name = object.name_any();
    let labels = object.labels().clone();
    let lookup = namespace_labels(namespaces);
    let index = index.lock().unwrap_or_else(PoisonError::into_inner);
    sproms
        .state()
        .iter()
        .filter_map(|sprom| {
            let sprom_ref = ObjectRef::from_obj(sprom.as_ref());
            let (selector, namespace_selector) = K::selectors(&sprom.spec);
            let own_namespace = sprom.namespace().unwrap_or_default();
            let selection = Selection {
                kind: K::SELECT,
                selector,
                namespace_selector,
                own_namespace: &own_namespace,
            };
            let selects = selection
                .selects(&namespace, &labels, &lookup)
                .unwrap_or(false);
            (selects || index.used(&sprom_ref, K::KIND, &namespace, &name)).then_some(sprom_ref)
        })
        .collect()
}

/// The ShardedPrometheuses whose selection may change with a namespace's labels: those with a
/// namespace selector.
pub fn affected_by_namespaces(
    sproms: &Store<ShardedPrometheus>,
) -> Vec<ObjectRef<ShardedPrometheus>> {
    sproms
        .state()
        .iter()
        .filter(|sprom| {
            let spec = &sprom.spec;
            [
                ServiceMonitorKind::selectors(spec),
                PodMonitorKind::selectors(spec),
                ScrapeConfigKind::selectors(spec),
                PrometheusRuleKind::selectors(spec),
            ]
            .iter()
            .any(|(selector, namespaces)| selector.is_some() && namespaces.is_some())
        })
        .map(|sprom| ObjectRef::from_obj(sprom.as_ref()))
        .collect()
}

/// The objects of `store` that `sprom` selects, sorted by namespace and name; `None` when the
/// kind is not served.
async fn select<K: Selectable>(
    store: &Store<Raw<K>>,
    caches: &Caches,
    discovery: &Discovery,
    client: &Client,
    valid: &ValidSprom,
    own_namespace: &str,
) -> Result<Option<Vec<Arc<Raw<K>>>>, ObserveError> {
    let selectors = K::valid(valid);
    if selectors.selector.is_none() {
        return Ok(Some(Vec::new()));
    }
    if !synced(store) {
        return match discovery.serves::<K>(client).await? {
            true => Err(ObserveError::NotSynced(K::RESOURCE.to_string())),
            false => Ok(None),
        };
    }
    if selectors.namespaces.is_some() && !synced(&caches.namespaces) {
        return Err(ObserveError::NotSynced("namespaces".to_string()));
    }
    let selection = Selection {
        kind: K::SELECT,
        selector: selectors.selector.as_ref(),
        namespace_selector: selectors.namespaces.as_ref(),
        own_namespace,
    };
    let lookup = namespace_labels(&caches.namespaces);
    let mut selected: Vec<Arc<Raw<K>>> = store
        .state()
        .into_iter()
        .filter(|object| {
            let namespace = object.namespace().unwrap_or_default();
            selection
                .selects(&namespace, object.labels(), &lookup)
                .unwrap_or(false)
        })
        .collect();
    selected.sort_by_key(|object| (object.namespace(), object.name_any()));
    Ok(Some(selected))
}

/// Whether `store` holds its initial list (a store whose watch stopped does not).
fn synced<K: kube::Resource + Clone>(store: &Store<K>) -> bool
where
    K::DynamicType: std::hash::Hash + Eq + Clone,
{
    matches!(store.wait_until_ready().now_or_never(), Some(Ok(())))
}

/// Everything `sprom` selects.
async fn selected(
    caches: &Caches,
    discovery: &Discovery,
    client: &Client,
    valid: &ValidSprom,
    own_namespace: &str,
) -> Result<Selected, ObserveError> {
    let mut selected = Selected::default();
    let args = (caches, discovery, client, valid, own_namespace);
    macro_rules! take {
        ($field:ident, $store:ident, $kind:ty) => {
            match select::<$kind>(&caches.$store, args.0, args.1, args.2, args.3, args.4).await? {
                Some(objects) => selected.$field = objects,
                None => selected.not_served.push(<$kind as Kind>::RESOURCE),
            }
        };
    }
    take!(service_monitors, service_monitors, ServiceMonitorKind);
    take!(pod_monitors, pod_monitors, PodMonitorKind);
    take!(scrape_configs, scrape_configs, ScrapeConfigKind);
    take!(rules, rules, PrometheusRuleKind);
    Ok(selected)
}

/// The resourceVersion the metadata watches show for a Secret or ConfigMap.
type Versions<'a> = &'a (dyn Fn(Source, &str, &str) -> Option<String> + Sync);

/// Reads the Secrets and ConfigMaps holding `references` (each once), from `cache` when
/// `versions` shows they did not change since.
async fn read_values(
    client: &Client,
    references: &BTreeSet<zone_monitoring::resolve::KeyRef>,
    versions: Versions<'_>,
    cache: &ValueCache,
) -> Result<Values, ObserveError> {
    let mut values = Values::default();
    for reference in references {
        let (source, namespace, name) = (reference.source, &reference.namespace, &reference.name);
        if values.contains(source, namespace, name) {
            continue;
        }
        let key = (source, namespace.clone(), name.clone());
        if let Some(data) = cache.get(&key, versions(source, namespace, name).as_deref()) {
            values.insert(source, namespace, name, Some(data));
            continue;
        }
        let read = |source: kube::Error| ObserveError::Read {
            kind: reference.source.kind(),
            namespace: namespace.clone(),
            name: name.clone(),
            source,
        };
        let (version, data): (Option<String>, Option<Data>) = match source {
            Source::Secret => Api::<Secret>::namespaced(client.clone(), namespace)
                .get_opt(name)
                .await
                .map_err(read)?
                .map_or((None, None), |secret| {
                    let data = secret.data.unwrap_or_default().into_iter();
                    let data = data.map(|(key, value)| (key, value.0)).collect();
                    (secret.metadata.resource_version, Some(data))
                }),
            Source::ConfigMap => Api::<ConfigMap>::namespaced(client.clone(), namespace)
                .get_opt(name)
                .await
                .map_err(read)?
                .map_or((None, None), |config_map| {
                    let text = config_map.data.unwrap_or_default().into_iter();
                    let binary = config_map.binary_data.unwrap_or_default().into_iter();
                    let data = text
                        .map(|(key, value)| (key, value.into_bytes()))
                        .chain(binary.map(|(key, value)| (key, value.0)))
                        .collect();
                    (config_map.metadata.resource_version, Some(data))
                }),
        };
        cache.put(key, version, &data);
        values.insert(source, namespace, name, data);
    }
    Ok(values)
}

/// What the monitoring observer reads.
pub struct Sources<'a> {
    /// For the access reviews, the API discovery and the referenced values.
    pub client: &'a Client,
    /// The watched monitoring objects and namespaces, and the values read before.
    pub caches: &'a Caches,
    /// The cached Secrets and ConfigMaps: their resource versions tell a value read before from
    /// a changed one.
    pub secrets: &'a Store<PartialObjectMeta<Secret>>,
    pub config_maps: &'a Store<PartialObjectMeta<ConfigMap>>,
    /// The answers of the access reviews, the kinds the API server serves, and the jobs each
    /// monitor last translated to.
    pub access: &'a AccessCache,
    pub discovery: &'a Discovery,
    pub last_good: &'a Mutex<HashMap<ObjectRef<ShardedPrometheus>, LastGood>>,
}

impl<'a> Sources<'a> {
    pub fn of(ctx: &'a Context) -> Self {
        Self {
            client: &ctx.client,
            caches: &ctx.monitoring,
            secrets: &ctx.secrets,
            config_maps: &ctx.config_maps,
            access: &ctx.memory.access,
            discovery: &ctx.memory.discovery,
            last_good: &ctx.memory.last_good,
        }
    }
}

/// Reads what `sprom` takes from monitoring objects: the objects it selects that its
/// ServiceAccount may read, parsed, the Secret and ConfigMap values they and the spec reference,
/// and the jobs each monitor last translated to. Only reads: [`translate::run`] makes the jobs
/// and the memories, which the reconcile commits.
pub async fn observe(
    sources: Sources<'_>,
    sprom: &ShardedPrometheus,
    valid: &ValidSprom,
) -> Result<MonitoringRead, ObserveError> {
    let (client, caches) = (sources.client, sources.caches);
    let versions = |source: Source, namespace: &str, name: &str| match source {
        Source::Secret => {
            let key = ObjectRef::new(name).within(namespace);
            sources.secrets.get(&key)?.metadata.resource_version.clone()
        }
        Source::ConfigMap => {
            let key = ObjectRef::new(name).within(namespace);
            sources
                .config_maps
                .get(&key)?
                .metadata
                .resource_version
                .clone()
        }
    };
    let own_namespace = sprom.namespace().unwrap_or_default();
    let sprom_ref = ObjectRef::from_obj(sprom);
    let subject = Subject {
        client,
        access: sources.access,
        namespace: &own_namespace,
        service_account: &valid.service_account_name,
    };
    let mut selected = selected(caches, sources.discovery, client, valid, &own_namespace).await?;
    let mut refused = subject.screen_objects(&mut selected).await?;
    let mut parsed = translate::Parsed::of(&selected);
    refused.extend(subject.screen_references(&mut parsed).await?);
    let mut references = parsed.references();
    references.extend(translate::remote_write_references(valid, &own_namespace));
    references.extend(translate::alerting_references(valid, &own_namespace));
    references.extend(translate::rule_file_references(valid, &own_namespace));
    let values = read_values(client, &references, &versions, &caches.values).await?;
    let previous = sources
        .last_good
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .get(&sprom_ref)
        .cloned()
        .unwrap_or_default();
    Ok(MonitoringRead {
        sprom: sprom_ref,
        own_namespace,
        selected,
        parsed,
        refused,
        references,
        values,
        previous,
    })
}
