//! Tenancy: a namespace's objects are hostile to every other namespace. What a
//! ShardedPrometheus selects ends up in its shards' configuration, a Secret of its own
//! namespace that its namespace's editors may read. So an object of another namespace (a
//! monitor, a PrometheusRule, a Secret or ConfigMap a monitor references) is used only when the
//! shards' ServiceAccount may `get` it (a SubjectAccessReview): whoever may run pods as that
//! ServiceAccount could read it anyway, and granting it is the other namespace's consent (a
//! RoleBinding there). Otherwise the object is left out, rejected with the permission it lacks.

use std::collections::BTreeMap;
use std::sync::Arc;

use kube::{Client, ResourceExt};
use zone_api::sprom::MONITORING_GROUP;
use zone_monitoring::Rejection;
use zone_monitoring::resolve::Source;

use super::error::ObserveError;
use super::kinds::{Kind, Raw};
use super::translate::{MonitorKey, Parsed, Selected};
use crate::reconcile::access::{AccessCache, Read};

/// Whose reads are reviewed: the shards' ServiceAccount, in the ShardedPrometheus's namespace.
pub struct Subject<'a> {
    pub client: &'a Client,
    pub access: &'a AccessCache,
    pub namespace: &'a str,
    pub service_account: &'a str,
}

impl Subject<'_> {
    /// Leaves out of `selected` the objects of other namespaces the ServiceAccount may not
    /// get, and returns their rejections.
    pub async fn screen_objects(
        &self,
        selected: &mut Selected,
    ) -> Result<Vec<Rejection>, ObserveError> {
        let mut reads = Vec::new();
        foreign(&selected.service_monitors, self.namespace, &mut reads);
        foreign(&selected.pod_monitors, self.namespace, &mut reads);
        foreign(&selected.scrape_configs, self.namespace, &mut reads);
        foreign(&selected.rules, self.namespace, &mut reads);
        let refused = self.refuse(reads).await?;
        if !refused.is_empty() {
            keep_allowed(&mut selected.service_monitors, &refused);
            keep_allowed(&mut selected.pod_monitors, &refused);
            keep_allowed(&mut selected.scrape_configs, &refused);
            keep_allowed(&mut selected.rules, &refused);
        }
        Ok(refused.into_values().collect())
    }

    /// Leaves out of `parsed` the monitors referencing a Secret or ConfigMap of another
    /// namespace the ServiceAccount may not get (before anything is read), and returns their
    /// rejections.
    pub async fn screen_references(
        &self,
        parsed: &mut Parsed,
    ) -> Result<Vec<Rejection>, ObserveError> {
        let reads = parsed
            .references_outside(self.namespace)
            .into_iter()
            .map(|(key, reference)| {
                let resource = match reference.source {
                    Source::Secret => "secrets",
                    Source::ConfigMap => "configmaps",
                };
                let read = Read {
                    group: "",
                    resource,
                    namespace: reference.namespace,
                    name: reference.name,
                };
                (key, read)
            })
            .collect();
        let refused = self.refuse(reads).await?;
        parsed.remove(&refused.keys().cloned().collect());
        Ok(refused.into_values().collect())
    }

    /// The objects of `reads` with a read the ServiceAccount may not do, each rejected for the
    /// first such read.
    async fn refuse(
        &self,
        reads: Vec<(MonitorKey, Read)>,
    ) -> Result<BTreeMap<MonitorKey, Rejection>, ObserveError> {
        if reads.is_empty() {
            return Ok(BTreeMap::new());
        }
        let denied = self
            .access
            .denied(
                self.client,
                self.namespace,
                self.service_account,
                reads.iter().map(|(_, read)| read.clone()).collect(),
            )
            .await
            .map_err(|source| ObserveError::Review {
                service_account: format!("{}/{}", self.namespace, self.service_account),
                source,
            })?;
        let mut refused = BTreeMap::new();
        for (key, read) in reads {
            if denied.contains(&read) && !refused.contains_key(&key) {
                let rejection = Rejection {
                    kind: key.0,
                    namespace: key.1.clone(),
                    name: key.2.clone(),
                    reason: read.describe(self.namespace, self.service_account),
                };
                refused.insert(key, rejection);
            }
        }
        Ok(refused)
    }
}

/// The key of a watched object.
fn key<K: Kind>(object: &Raw<K>) -> MonitorKey {
    (
        K::KIND,
        object.namespace().unwrap_or_default(),
        object.name_any(),
    )
}

/// The reads of the objects of `objects` outside `own_namespace`.
fn foreign<K: Kind>(
    objects: &[Arc<Raw<K>>],
    own_namespace: &str,
    into: &mut Vec<(MonitorKey, Read)>,
) {
    for object in objects {
        let key = key(object.as_ref());
        if key.1 != own_namespace {
            let read = Read {
                group: MONITORING_GROUP,
                resource: K::PLURAL,
                namespace: key.1.clone(),
                name: key.2.clone(),
            };
            into.push((key, read));
        }
    }
}

fn keep_allowed<K: Kind>(
    objects: &mut Vec<Arc<Raw<K>>>,
    refused: &BTreeMap<MonitorKey, Rejection>,
) {
    objects.retain(|object| !refused.contains_key(&key(object.as_ref())));
}
