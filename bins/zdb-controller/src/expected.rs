//! How many pods a budget's selector should find: each top-level owner's desired replicas, counted
//! once. A pod of a Deployment is owned by a ReplicaSet, itself owned by the Deployment; during a
//! rollout two ReplicaSets share the Deployment's pods, so summing ReplicaSets would double-count.
//! StatefulSets and ReplicaSets are read directly, any other owner through its `/scale`
//! subresource; pods without an owner (or whose owner is gone) are expected as observed.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::DynamicObject;
use kube::core::GroupVersionKind;
use kube::{Api, Client};

/// A controlling owner, as named by an owner reference.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct OwnerKey {
    pub api_version: String,
    pub kind: String,
    pub name: String,
}

impl From<&OwnerReference> for OwnerKey {
    fn from(owner: &OwnerReference) -> Self {
        OwnerKey {
            api_version: owner.api_version.clone(),
            kind: owner.kind.clone(),
            name: owner.name.clone(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum LookupError {
    #[error("cannot read {kind} {namespace}/{name}")]
    Read {
        kind: String,
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
}

/// Reads owners; `Ok(None)` means the owner does not exist (or has no scale subresource).
pub trait OwnerLookup {
    /// The controlling owner of a ReplicaSet: `Some(None)` when it has none.
    fn replica_set_owner(
        &self,
        namespace: &str,
        name: &str,
    ) -> impl Future<Output = Result<Option<Option<OwnerKey>>, LookupError>> + Send;

    /// The desired replicas of a top-level owner.
    fn replicas(
        &self,
        namespace: &str,
        owner: &OwnerKey,
    ) -> impl Future<Output = Result<Option<u32>, LookupError>> + Send;
}

/// The controlling owner reference of a pod or ReplicaSet.
pub fn controller_of(owners: Option<&[OwnerReference]>) -> Option<OwnerKey> {
    owners?
        .iter()
        .find(|owner| owner.controller == Some(true))
        .map(OwnerKey::from)
}

fn is_replica_set(owner: &OwnerKey) -> bool {
    owner.kind == "ReplicaSet" && owner.api_version == "apps/v1"
}

/// The expected number of pods for `pods` (the pods one budget selects, all in `namespace`).
pub async fn expected_pods<L: OwnerLookup>(
    lookup: &L,
    namespace: &str,
    pods: &[&Pod],
) -> Result<u32, LookupError> {
    // Top-level owner -> pods observed for it.
    let mut owners: BTreeMap<OwnerKey, u32> = BTreeMap::new();
    let mut bare = 0u32;
    // ReplicaSet name -> its top-level owner (looked up once per ReplicaSet).
    let mut replica_sets: BTreeMap<String, Option<OwnerKey>> = BTreeMap::new();
    for pod in pods {
        let Some(owner) = controller_of(pod.metadata.owner_references.as_deref()) else {
            bare += 1;
            continue;
        };
        let top = if is_replica_set(&owner) {
            if !replica_sets.contains_key(&owner.name) {
                let top = match lookup.replica_set_owner(namespace, &owner.name).await? {
                    None => None,
                    Some(Some(parent)) => Some(parent),
                    Some(None) => Some(owner.clone()),
                };
                replica_sets.insert(owner.name.clone(), top);
            }
            replica_sets.get(&owner.name).cloned().flatten()
        } else {
            Some(owner)
        };
        match top {
            Some(top) => *owners.entry(top).or_default() += 1,
            None => bare += 1,
        }
    }
    let mut desired = Vec::with_capacity(owners.len());
    for (owner, observed) in &owners {
        // An owner that is gone (or not scalable) expects what it left behind.
        desired.push(
            lookup
                .replicas(namespace, owner)
                .await?
                .unwrap_or(*observed),
        );
    }
    Ok(zone_topology::budget::expected_total(&desired, bare))
}

/// [`OwnerLookup`] through the API server.
pub struct ApiLookup {
    pub client: Client,
}

fn read_error(kind: &str, namespace: &str, name: &str) -> impl FnOnce(kube::Error) -> LookupError {
    let (kind, namespace, name) = (kind.to_string(), namespace.to_string(), name.to_string());
    move |source| LookupError::Read {
        kind,
        namespace,
        name,
        source,
    }
}

fn replicas_of(value: Option<i32>) -> u32 {
    // Unset means 1, as the API server defaults it.
    u32::try_from(value.unwrap_or(1)).unwrap_or(0)
}

impl OwnerLookup for ApiLookup {
    async fn replica_set_owner(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<Option<OwnerKey>>, LookupError> {
        let api: Api<ReplicaSet> = Api::namespaced(self.client.clone(), namespace);
        let set = api
            .get_opt(name)
            .await
            .map_err(read_error("ReplicaSet", namespace, name))?;
        Ok(set.map(|set| controller_of(set.metadata.owner_references.as_deref())))
    }

    async fn replicas(
        &self,
        namespace: &str,
        owner: &OwnerKey,
    ) -> Result<Option<u32>, LookupError> {
        let name = owner.name.as_str();
        let error = read_error(&owner.kind, namespace, name);
        let client = self.client.clone();
        match (owner.api_version.as_str(), owner.kind.as_str()) {
            ("apps/v1", "Deployment") => Ok(Api::<Deployment>::namespaced(client, namespace)
                .get_opt(name)
                .await
                .map_err(error)?
                .map(|d| replicas_of(d.spec.and_then(|s| s.replicas)))),
            ("apps/v1", "StatefulSet") => Ok(Api::<StatefulSet>::namespaced(client, namespace)
                .get_opt(name)
                .await
                .map_err(error)?
                .map(|s| replicas_of(s.spec.and_then(|s| s.replicas)))),
            ("apps/v1", "ReplicaSet") => Ok(Api::<ReplicaSet>::namespaced(client, namespace)
                .get_opt(name)
                .await
                .map_err(error)?
                .map(|s| replicas_of(s.spec.and_then(|s| s.replicas)))),
            (api_version, kind) => {
                let (group, version) = match api_version.split_once('/') {
                    Some((group, version)) => (group, version),
                    None => ("", api_version),
                };
                let gvk = GroupVersionKind::gvk(group, version, kind);
                // An owner kind the API server does not serve any more expects what it left.
                let Ok((resource, _)) = kube::discovery::pinned_kind(&client, &gvk).await else {
                    return Ok(None);
                };
                let api: Api<DynamicObject> = Api::namespaced_with(client, namespace, &resource);
                match api.get_scale(name).await {
                    Ok(scale) => Ok(Some(replicas_of(scale.spec.and_then(|s| s.replicas)))),
                    Err(kube::Error::Api(status)) if status.code == 404 => Ok(None),
                    Err(source) => Err(error(source)),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use serde_json::json;
    use std::sync::Mutex;

    /// Owners by name; counts lookups so tests can check each owner is read once.
    #[derive(Default)]
    struct Fake {
        replica_sets: BTreeMap<String, Option<OwnerKey>>,
        replicas: BTreeMap<String, u32>,
        calls: Mutex<Vec<String>>,
    }

    impl OwnerLookup for Fake {
        async fn replica_set_owner(
            &self,
            _: &str,
            name: &str,
        ) -> Result<Option<Option<OwnerKey>>, LookupError> {
            self.calls.lock().unwrap().push(format!("rs/{name}"));
            Ok(self.replica_sets.get(name).cloned())
        }
        async fn replicas(&self, _: &str, owner: &OwnerKey) -> Result<Option<u32>, LookupError> {
            self.calls
                .lock()
                .unwrap()
                .push(format!("{}/{}", owner.kind, owner.name));
            Ok(self.replicas.get(&owner.name).copied())
        }
    }

    fn owner(api_version: &str, kind: &str, name: &str) -> OwnerKey {
        OwnerKey {
            api_version: api_version.into(),
            kind: kind.into(),
            name: name.into(),
        }
    }

    fn pod(owner: Option<&OwnerKey>) -> Pod {
        let owners = owner.map(|o| {
            json!([{"apiVersion": o.api_version, "kind": o.kind, "name": o.name, "uid": "u", "controller": true}])
        });
        serde_json::from_value(json!({"metadata": {"name": "p", "ownerReferences": owners}}))
            .unwrap()
    }

    #[tokio::test]
    async fn deployment_replicas_are_counted_once_across_replica_sets() {
        let deployment = owner("apps/v1", "Deployment", "web");
        let old = owner("apps/v1", "ReplicaSet", "web-1");
        let new = owner("apps/v1", "ReplicaSet", "web-2");
        let fake = Fake {
            replica_sets: BTreeMap::from([
                ("web-1".into(), Some(deployment.clone())),
                ("web-2".into(), Some(deployment.clone())),
            ]),
            replicas: BTreeMap::from([("web".into(), 6)]),
            ..Fake::default()
        };
        let pods = [
            pod(Some(&old)),
            pod(Some(&old)),
            pod(Some(&new)),
            pod(Some(&new)),
        ];
        let refs: Vec<&Pod> = pods.iter().collect();
        assert_eq!(expected_pods(&fake, "apps", &refs).await.unwrap(), 6);
        let calls = fake.calls.lock().unwrap().clone();
        assert_eq!(calls, vec!["rs/web-1", "rs/web-2", "Deployment/web"]);
    }

    #[tokio::test]
    async fn statefulsets_other_owners_and_bare_pods() {
        let set = owner("apps/v1", "StatefulSet", "db");
        let custom = owner("example.com/v1", "Cluster", "c");
        let orphan_rs = owner("apps/v1", "ReplicaSet", "lonely");
        let fake = Fake {
            replica_sets: BTreeMap::from([("lonely".into(), None)]),
            replicas: BTreeMap::from([("db".into(), 3), ("c".into(), 5), ("lonely".into(), 2)]),
            ..Fake::default()
        };
        let pods = [
            pod(Some(&set)),
            pod(Some(&custom)),
            pod(Some(&orphan_rs)),
            pod(None),
            pod(None),
        ];
        let refs: Vec<&Pod> = pods.iter().collect();
        // 3 + 5 + 2 (a ReplicaSet without a Deployment is the top owner) + 2 bare.
        assert_eq!(expected_pods(&fake, "apps", &refs).await.unwrap(), 12);
    }

    #[tokio::test]
    async fn vanished_owners_expect_what_they_left() {
        let set = owner("apps/v1", "StatefulSet", "gone");
        let rs = owner("apps/v1", "ReplicaSet", "gone-rs");
        let fake = Fake::default();
        let pods = [pod(Some(&set)), pod(Some(&set)), pod(Some(&rs))];
        let refs: Vec<&Pod> = pods.iter().collect();
        assert_eq!(expected_pods(&fake, "apps", &refs).await.unwrap(), 3);
    }
}
