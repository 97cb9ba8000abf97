//! What the monitoring half of a reconcile keeps between reconciles: the caches of the watched
//! kinds, the API server's discovery answers, the Secret and ConfigMap values already read, and
//! the index of what each ShardedPrometheus used (read by the watches' trigger mappers).

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Namespace;
use kube::Client;
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::{ObjectRef, Store};
use zone_api::ShardedPrometheus;
use zone_api::sprom::MONITORING_GROUP;
use zone_monitoring::resolve::{Data, Source};

use super::error::ObserveError;
use super::kinds::{
    Kind, PodMonitorKind, PrometheusRuleKind, Raw, ScrapeConfigKind, ServiceMonitorKind,
};

/// How long an answer of the API server's discovery (is a kind served?) is trusted.
const DISCOVERY_CACHE_FOR: Duration = Duration::from_secs(30);

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
    pub(super) fn used(
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

    /// Records what `sprom` selected and referenced at this reconcile.
    pub fn record(
        &mut self,
        sprom: ObjectRef<ShardedPrometheus>,
        selected: BTreeSet<(&'static str, String, String)>,
        referenced: BTreeSet<(Source, String, String)>,
    ) {
        self.selected.insert(sprom.clone(), selected);
        self.referenced.insert(sprom, referenced);
    }

    /// Whether any ShardedPrometheus references the Secret or ConfigMap `key`.
    pub fn is_referenced(&self, key: &(Source, String, String)) -> bool {
        self.referenced.values().any(|keys| keys.contains(key))
    }

    /// Forgets ShardedPrometheuses that no longer exist.
    pub fn retain(&mut self, live: impl Fn(&ObjectRef<ShardedPrometheus>) -> bool) {
        self.selected.retain(|sprom, _| live(sprom));
        self.referenced.retain(|sprom, _| live(sprom));
    }
}

/// Shared between the reconciles and the watches' trigger mappers.
pub type SharedIndex = Arc<Mutex<Index>>;

/// Which monitoring.coreos.com kinds the API server serves, asked at most every
/// [`DISCOVERY_CACHE_FOR`].
#[derive(Default)]
pub struct Discovery {
    answers: Mutex<HashMap<&'static str, (Instant, BTreeSet<String>)>>,
}

impl Discovery {
    pub(super) async fn serves<K: Kind>(&self, client: &Client) -> Result<bool, ObserveError> {
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
    pub(super) fn get(&self, key: &Named, version: Option<&str>) -> Option<Data> {
        let read = self.read.lock().unwrap_or_else(PoisonError::into_inner);
        let (at, data) = read.get(key)?;
        (Some(at.as_str()) == version).then(|| data.clone())
    }

    pub(super) fn put(&self, key: Named, version: Option<String>, data: &Option<Data>) {
        let mut read = self.read.lock().unwrap_or_else(PoisonError::into_inner);
        match (version, data) {
            (Some(version), Some(data)) => read.insert(key, (version, data.clone())),
            _ => read.remove(&key),
        };
    }

    /// Forgets what no resource references any more.
    pub(crate) fn retain(&self, referenced: impl Fn(&Named) -> bool) {
        let mut read = self.read.lock().unwrap_or_else(PoisonError::into_inner);
        read.retain(|key, _| referenced(key));
    }
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
