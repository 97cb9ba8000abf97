//! Objects a controller creates for one of its resources (StatefulSets, ConfigMaps, Services of
//! a ShardedPrometheus): applied server-side with a controller ownerReference, so the garbage
//! collector deletes them with their owner, and pruned when the owner no longer wants them.

use std::collections::BTreeSet;
use std::fmt::Debug;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, Preconditions};
use kube::{Api, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;

/// Why a child was not applied or pruned.
#[derive(Debug, thiserror::Error)]
pub enum ChildError {
    #[error("{kind} {name} has no UID yet: its children cannot reference it")]
    OwnerWithoutUid { kind: String, name: String },
    #[error("cannot apply {kind} {name}")]
    Apply {
        kind: String,
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("cannot list the {kind}s selected by {selector}")]
    List {
        kind: String,
        selector: String,
        #[source]
        source: kube::Error,
    },
    #[error("cannot delete {kind} {name}")]
    Delete {
        kind: String,
        name: String,
        #[source]
        source: kube::Error,
    },
}

/// The ownerReference a child of `owner` carries: controller, blocking the owner's foreground
/// deletion until the child is gone.
pub fn controller_reference<K>(owner: &K) -> Result<OwnerReference, ChildError>
where
    K: Resource<DynamicType = ()>,
{
    let uid = owner.uid().ok_or_else(|| ChildError::OwnerWithoutUid {
        kind: K::kind(&()).into_owned(),
        name: owner.name_any(),
    })?;
    Ok(OwnerReference {
        api_version: K::api_version(&()).into_owned(),
        kind: K::kind(&()).into_owned(),
        name: owner.name_any(),
        uid,
        controller: Some(true),
        block_owner_deletion: Some(true),
    })
}

/// Whether `child` is controlled by the object with this UID.
pub fn is_controlled_by<C: Resource>(child: &C, owner_uid: &str) -> bool {
    child
        .owner_references()
        .iter()
        .any(|owner| owner.controller == Some(true) && owner.uid == owner_uid)
}

/// Server-side applies `child` (a complete desired object: apiVersion, kind, name and the fields
/// this controller owns) with `owner` as its only ownerReference. Forcing: the controller owns
/// these fields; another manager's change to them is reverted.
pub async fn apply_child<C>(
    api: &Api<C>,
    owner: &OwnerReference,
    mut child: C,
    field_manager: &str,
) -> Result<C, ChildError>
where
    C: Resource<DynamicType = ()> + Clone + Serialize + DeserializeOwned + Debug,
{
    let name = child.name_any();
    let meta = child.meta_mut();
    meta.owner_references = Some(vec![owner.clone()]);
    meta.managed_fields = None;
    meta.resource_version = None;
    let params = PatchParams::apply(field_manager).force();
    api.patch(&name, &params, &Patch::Apply(&child))
        .await
        .map_err(|source| ChildError::Apply {
            kind: C::kind(&()).into_owned(),
            name,
            source,
        })
}

/// Deletes the objects that `selector` (a label selector) finds, that `owner_uid` controls, and
/// whose names are not `wanted`; returns their names. Objects of other owners are never touched,
/// even when they carry the same labels. Each delete is conditional on the listed UID, so an
/// object recreated under the same name meanwhile survives.
pub async fn prune_children<C>(
    api: &Api<C>,
    selector: &str,
    owner_uid: &str,
    wanted: &BTreeSet<String>,
) -> Result<Vec<String>, ChildError>
where
    C: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug,
{
    let kind = C::kind(&()).into_owned();
    let listed = api
        .list(&ListParams::default().labels(selector))
        .await
        .map_err(|source| ChildError::List {
            kind: kind.clone(),
            selector: selector.to_owned(),
            source,
        })?;
    let mut pruned = Vec::new();
    for child in listed.items {
        let name = child.name_any();
        if wanted.contains(&name) || !is_controlled_by(&child, owner_uid) {
            continue;
        }
        if child.meta().deletion_timestamp.is_some() {
            continue;
        }
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: child.uid(),
                resource_version: None,
            }),
            ..DeleteParams::background()
        };
        match api.delete(&name, &params).await {
            Ok(_) => pruned.push(name),
            // Gone already, or replaced by a new object of the same name: nothing to prune.
            Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => {}
            Err(source) => {
                return Err(ChildError::Delete {
                    kind: kind.clone(),
                    name,
                    source,
                });
            }
        }
    }
    Ok(pruned)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use k8s_openapi::api::apps::v1::StatefulSet;
    use k8s_openapi::api::core::v1::ConfigMap;
    use serde_json::json;

    #[test]
    fn children_reference_their_controller() {
        let owner: StatefulSet = serde_json::from_value(
            json!({"metadata": {"name": "web", "namespace": "apps", "uid": "u-1"}}),
        )
        .unwrap();
        let reference = controller_reference(&owner).unwrap();
        assert_eq!(reference.api_version, "apps/v1");
        assert_eq!(reference.kind, "StatefulSet");
        assert_eq!(reference.uid, "u-1");
        assert_eq!(reference.controller, Some(true));

        let mut child = ConfigMap::default();
        assert!(!is_controlled_by(&child, "u-1"));
        child.metadata.owner_references = Some(vec![reference.clone()]);
        assert!(is_controlled_by(&child, "u-1"));
        assert!(!is_controlled_by(&child, "u-2"));
        child.metadata.owner_references = Some(vec![OwnerReference {
            controller: None,
            ..reference
        }]);
        assert!(
            !is_controlled_by(&child, "u-1"),
            "an owner, not the controller"
        );

        let unsaved = StatefulSet::default();
        assert!(matches!(
            controller_reference(&unsaved),
            Err(ChildError::OwnerWithoutUid { .. })
        ));
    }
}
