//! The observe half of monitoring: which watched objects a ShardedPrometheus selects, the
//! Secret and ConfigMap values they reference (read fresh from the API server), and which
//! ShardedPrometheuses a changed object, namespace, Secret or ConfigMap concerns.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use futures::FutureExt;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Api, Client, ResourceExt};
use zone_api::ShardedPrometheus;
use zone_api::sprom::{MONITORING_GROUP, Selectors, ShardedPrometheusSpec};
use zone_api::validation::ValidSprom;
use zone_monitoring::resolve::{Data, Source, Values};
use zone_monitoring::select::{self, Selection};

use super::Monitoring;
use super::kinds::{
    Kind, PodMonitorKind, PrometheusRuleKind, Raw, ScrapeConfigKind, ServiceMonitorKind,
};
use super::tenancy::Subject;
use super::translate::{self, Selected};
use crate::reconcile::Context;

/// How long an answer of the API server's discovery (is a kind served?) is trusted.
const DISCOVERY_CACHE_FOR: Duration = Duration::from_secs(30);

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

/// The caches of the monitoring kinds and of namespaces.
pub struct Caches {
    pub service_monitors: Store<Raw<ServiceMonitorKind>>,
    pub pod_monitors: Store<Raw<PodMonitorKind>>,
    pub scrape_configs: Store<Raw<ScrapeConfigKind>>,
    pub rules: Store<Raw<PrometheusRuleKind>>,
    pub namespaces: Store<PartialObjectMeta<Namespace>>,
    /// Referenced Secrets and ConfigMaps already read.
    pub values: ValueCache,
}

/// What each ShardedPrometheus used at its last reconcile: the objects it selected and the
/// Secrets and ConfigMaps they referenced. A change of one of those reconciles it even when it
/// no longer selects the object (its jobs must go).
#[derive(Debug, Default)]
pub struct Index {
    selected: HashMap<ObjectRef<ShardedPrometheus>, BTreeSet<(&'static str, String, String)>>,
    referenced: HashMap<ObjectRef<ShardedPrometheus>, BTreeSet<(Source, String, String)>>,
}

impl Index {
    fn used(
        &self,
        sprom: &ObjectRef<ShardedPrometheus>,
        kind: &'static str,
        ns: &str,
        name: &str,
    ) -> bool {
        self.selected
            .get(sprom)
            .is_some_and(|keys| keys.contains(&(kind, ns.to_string(), name.to_string())))
    }

    /// The ShardedPrometheuses whose monitors reference `source` `namespace/name`.
    pub fn referencing(
        &self,
        source: Source,
        namespace: &str,
        name: &str,
    ) -> Vec<ObjectRef<ShardedPrometheus>> {
        let key = (source, namespace.to_string(), name.to_string());
        self.referenced
            .iter()
            .filter(|(_, keys)| keys.contains(&key))
            .map(|(sprom, _)| sprom.clone())
            .collect()
    }

    /// Forgets ShardedPrometheuses that no longer exist.
    pub fn retain(&mut self, live: impl Fn(&ObjectRef<ShardedPrometheus>) -> bool) {
        self.selected.retain(|sprom, _| live(sprom));
        self.referenced.retain(|sprom, _| live(sprom));
    }
}

/// Shared between the reconciles and the watches' trigger mappers.
pub type SharedIndex = Arc<Mutex<Index>>;

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

/// Why monitoring could not be observed this time: retried.
#[derive(Debug, thiserror::Error)]
pub enum ObserveError {
    #[error("the cache of {0} has not synced yet")]
    NotSynced(String),
    #[error("cannot read {kind} {namespace}/{name}")]
    Read {
        kind: &'static str,
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
    /// A remoteWrite credential reference that cannot be resolved: the spec is refused (the
    /// shards keep their configuration) until it can.
    #[error("{0}")]
    RemoteWrite(String),
    /// An Alertmanager entry of spec.alerting that cannot be translated (a credential reference
    /// that cannot be resolved, malformed credentials or rules): the spec is refused until it
    /// can, as for remoteWrite.
    #[error("{0}")]
    Alerting(String),
    /// Whether the shards' ServiceAccount may read an object of another namespace could not
    /// be reviewed: nothing of another namespace is used on a guess.
    #[error("cannot review what ServiceAccount {service_account} may read")]
    Review {
        service_account: String,
        #[source]
        source: kube::Error,
    },
    #[error("cannot ask the API server whether it serves {MONITORING_GROUP}/{version}")]
    Discovery {
        version: &'static str,
        #[source]
        source: kube::Error,
    },
}

/// Which monitoring.coreos.com kinds the API server serves, asked at most every
/// [`DISCOVERY_CACHE_FOR`].
#[derive(Default)]
pub struct Discovery {
    answers: Mutex<HashMap<&'static str, (Instant, BTreeSet<String>)>>,
}

impl Discovery {
    async fn serves<K: Kind>(&self, client: &Client) -> Result<bool, ObserveError> {
        let cached = {
            let answers = self.answers.lock().unwrap_or_else(PoisonError::into_inner);
            answers
                .get(K::VERSION)
                .filter(|(at, _)| at.elapsed() < DISCOVERY_CACHE_FOR)
                .map(|(_, plurals)| plurals.contains(K::PLURAL))
        };
        if let Some(serves) = cached {
            return Ok(serves);
        }
        let plurals: BTreeSet<String> = match client
            .list_api_group_resources(&format!("{MONITORING_GROUP}/{}", K::VERSION))
            .await
        {
            Ok(list) => list.resources.into_iter().map(|r| r.name).collect(),
            Err(kube::Error::Api(status)) if status.code == 404 => BTreeSet::new(),
            Err(source) => {
                return Err(ObserveError::Discovery {
                    version: K::VERSION,
                    source,
                });
            }
        };
        let serves = plurals.contains(K::PLURAL);
        self.answers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(K::VERSION, (Instant::now(), plurals));
        Ok(serves)
    }
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

/// Reads the Secrets and ConfigMaps holding `references` (each once).
/// The data of referenced Secrets and ConfigMaps, with the resourceVersion it was read at. A
/// reconcile (a pod turning Ready, say) reads again only what the metadata watch shows changed.
#[derive(Default)]
pub struct ValueCache {
    /// Secret or ConfigMap → the resourceVersion read and its data.
    read: Mutex<HashMap<Named, (String, Data)>>,
}

/// A Secret or ConfigMap: its kind, namespace and name.
type Named = (Source, String, String);

impl ValueCache {
    fn get(&self, key: &Named, version: Option<&str>) -> Option<Data> {
        let read = self.read.lock().unwrap_or_else(PoisonError::into_inner);
        let (at, data) = read.get(key)?;
        (Some(at.as_str()) == version).then(|| data.clone())
    }

    fn put(&self, key: Named, version: Option<String>, data: &Option<Data>) {
        let mut read = self.read.lock().unwrap_or_else(PoisonError::into_inner);
        match (version, data) {
            (Some(version), Some(data)) => read.insert(key, (version, data.clone())),
            _ => read.remove(&key),
        };
    }

    /// Forgets what no resource references any more.
    fn retain(&self, referenced: impl Fn(&Named) -> bool) {
        let mut read = self.read.lock().unwrap_or_else(PoisonError::into_inner);
        read.retain(|key, _| referenced(key));
    }
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

/// What `sprom` takes from monitoring objects; records what it used in the context's index and
/// the jobs each monitor had in its last good jobs.
pub async fn observe(
    ctx: &Context,
    sprom: &ShardedPrometheus,
    valid: &ValidSprom,
) -> Result<Monitoring, ObserveError> {
    let (client, caches, discovery, index, last_good) = (
        &ctx.client,
        &ctx.monitoring,
        &ctx.discovery,
        &ctx.index,
        &ctx.last_good,
    );
    let versions = |source: Source, namespace: &str, name: &str| match source {
        Source::Secret => {
            let secret = ctx.secrets.get(&ObjectRef::new(name).within(namespace))?;
            secret.metadata.resource_version.clone()
        }
        Source::ConfigMap => {
            let config_map = ctx
                .config_maps
                .get(&ObjectRef::new(name).within(namespace))?;
            config_map.metadata.resource_version.clone()
        }
    };
    let own_namespace = sprom.namespace().unwrap_or_default();
    let sprom_ref = ObjectRef::from_obj(sprom);
    let subject = Subject {
        client,
        access: &ctx.access,
        namespace: &own_namespace,
        service_account: &valid.service_account_name,
    };
    let mut selected = selected(caches, discovery, client, valid, &own_namespace).await?;
    let mut refused = subject.screen_objects(&mut selected).await?;
    let mut parsed = translate::Parsed::of(&selected);
    refused.extend(subject.screen_references(&mut parsed).await?);
    let mut references = parsed.references();
    references.extend(translate::remote_write_references(valid, &own_namespace));
    references.extend(translate::alerting_references(valid, &own_namespace));
    references.extend(translate::rule_file_references(valid, &own_namespace));
    let values = read_values(client, &references, &versions, &caches.values).await?;
    let previous = last_good
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .get(&sprom_ref)
        .cloned()
        .unwrap_or_default();
    let (mut monitoring, good) = translate::translate(valid, &parsed, &values, &previous);
    let remote_write = translate::remote_write(valid, &own_namespace, &values);
    let alerting = translate::alerting(valid, &own_namespace, &values);
    monitoring.rule_file_problems = translate::rule_file_problems(valid, &own_namespace, &values);
    monitoring.access_denied = !refused.is_empty();
    monitoring.rejected.splice(0..0, refused);
    let mut used = BTreeSet::new();
    used.extend(keys(&selected.service_monitors));
    used.extend(keys(&selected.pod_monitors));
    used.extend(keys(&selected.scrape_configs));
    used.extend(keys(&selected.rules));
    {
        let mut index = index.lock().unwrap_or_else(PoisonError::into_inner);
        index.selected.insert(sprom_ref.clone(), used);
        index.referenced.insert(
            sprom_ref.clone(),
            references
                .into_iter()
                .map(|r| (r.source, r.namespace, r.name))
                .collect(),
        );
        caches
            .values
            .retain(|key| index.referenced.values().any(|keys| keys.contains(key)));
    }
    last_good
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .insert(sprom_ref, good);
    monitoring.remote_write = remote_write.map_err(ObserveError::RemoteWrite)?;
    monitoring.alerting = alerting.map_err(ObserveError::Alerting)?;
    Ok(monitoring)
}

fn keys<K: Kind>(
    objects: &[Arc<Raw<K>>],
) -> impl Iterator<Item = (&'static str, String, String)> + '_ {
    objects.iter().map(|object| {
        (
            K::KIND,
            object.namespace().unwrap_or_default(),
            object.name_any(),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cached_values_serve_only_the_version_they_were_read_at() {
        let cache = ValueCache::default();
        let key = (Source::Secret, "team".to_string(), "creds".to_string());
        let data = Data::from([("pass".to_string(), b"hunter2".to_vec())]);
        cache.put(key.clone(), Some("7".into()), &Some(data.clone()));
        assert_eq!(cache.get(&key, Some("7")), Some(data.clone()));
        assert_eq!(
            cache.get(&key, Some("8")),
            None,
            "changed since: read again"
        );
        assert_eq!(cache.get(&key, None), None, "not in the watch: read again");
        cache.put(key.clone(), None, &None);
        assert_eq!(cache.get(&key, Some("7")), None, "gone: forgotten");
        cache.put(key.clone(), Some("9".into()), &Some(data));
        cache.retain(|_| false);
        assert_eq!(cache.get(&key, Some("9")), None, "no longer referenced");
    }
}
