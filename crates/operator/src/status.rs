//! Writing an object's status, the two ways the controllers need:
//!
//! - [`apply_status`]: server-side apply of the status alone, as the type's own apiVersion and
//!   kind, forcing (the controller owns its status). For a status only its controller writes.
//! - [`replace_status`]: a PUT carrying the resourceVersion that was read, re-read and recomputed
//!   on 409. For a status someone else writes too (the eviction webhook records disruptions in
//!   the budget's status; the StatefulSet controller writes a StatefulSet's): a write that cannot
//!   conflict would erase what the other writer added between our read and our write.

use std::fmt::Debug;
use std::future::Future;

use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::json;

/// Why a status was not written.
#[derive(Debug, thiserror::Error)]
pub enum StatusError {
    #[error("cannot write the status of {kind} {namespace}/{name}")]
    Write {
        kind: String,
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("cannot re-read {kind} {namespace}/{name} after a write conflict")]
    Reread {
        kind: String,
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
}

impl StatusError {
    fn write<K: Resource<DynamicType = ()>>(object: &K, source: kube::Error) -> Self {
        let (kind, namespace, name) = identify(object);
        StatusError::Write {
            kind,
            namespace,
            name,
            source,
        }
    }

    fn reread<K: Resource<DynamicType = ()>>(object: &K, source: kube::Error) -> Self {
        let (kind, namespace, name) = identify(object);
        StatusError::Reread {
            kind,
            namespace,
            name,
            source,
        }
    }
}

impl StatusError {
    /// Another writer changed the object since it was read (409 Conflict).
    pub fn is_conflict(&self) -> bool {
        matches!(self, StatusError::Write { source, .. } if is_conflict(source))
    }
}

/// Kind, namespace and name of `object`, for an error message.
fn identify<K: Resource<DynamicType = ()>>(object: &K) -> (String, String, String) {
    (
        K::kind(&()).into_owned(),
        object.namespace().unwrap_or_default(),
        object.name_any(),
    )
}

/// Whether `error` is the API server's 409 Conflict.
pub fn is_conflict(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == 409)
}

/// Server-side applies `status` as the status of `object` (forcing: the controller owns it) and
/// returns the object the API server stored.
pub async fn apply_status<K, S>(
    api: &Api<K>,
    object: &K,
    field_manager: &str,
    status: &S,
) -> Result<K, StatusError>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug,
    S: Serialize,
{
    let body = json!({
        "apiVersion": K::api_version(&()),
        "kind": K::kind(&()),
        "status": status,
    });
    let params = PatchParams::apply(field_manager).force();
    api.patch_status(&object.name_any(), &params, &Patch::Apply(&body))
        .await
        .map_err(|source| StatusError::write(object, source))
}

/// PUTs `object` (its status included) to the status subresource as `field_manager`,
/// conditional on the resourceVersion it carries: 409 ([`StatusError::is_conflict`]) when
/// someone wrote since.
pub async fn put_status<K>(api: &Api<K>, object: &K, field_manager: &str) -> Result<K, StatusError>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Serialize + Debug,
{
    let mut body = object.clone();
    body.meta_mut().managed_fields = None;
    let params = PostParams {
        field_manager: Some(field_manager.to_owned()),
        ..PostParams::default()
    };
    api.replace_status(&object.name_any(), &params, &body)
        .await
        .map_err(|source| StatusError::write(object, source))
}

/// What [`replace_status`]'s `update` decided for the object it was given.
pub enum Update<K, T> {
    /// Nothing to write; `T` is the caller's result.
    Keep(T),
    /// PUT this object (its resourceVersion is the one read); `T` is the caller's result.
    Write(K, T),
}

/// The outcome of [`replace_status`].
pub struct Replaced<K, T> {
    /// The stored object when a write was made.
    pub stored: Option<K>,
    /// The result of the `update` call that counted (the last one).
    pub value: T,
}

/// Why [`replace_status`] failed: `update` failed, or the API did.
#[derive(Debug, thiserror::Error)]
pub enum ReplaceError<E> {
    #[error(transparent)]
    Update(E),
    #[error(transparent)]
    Status(#[from] StatusError),
}

/// PUTs the status `update` derives from `object`; when another writer got there first (409),
/// reads the object again and calls `update` on the fresh copy, up to `attempts` writes in all.
/// `update` must derive everything from the object it is given, so nothing the other writer
/// added is lost.
pub async fn replace_status<K, T, E, F, Fut>(
    api: &Api<K>,
    object: K,
    field_manager: &str,
    attempts: usize,
    mut update: F,
) -> Result<Replaced<K, T>, ReplaceError<E>>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Serialize + Debug,
    F: FnMut(K) -> Fut,
    Fut: Future<Output = Result<Update<K, T>, E>>,
{
    let name = object.name_any();
    let mut current = object;
    let mut attempt = 0;
    loop {
        attempt += 1;
        let (wanted, value) = match update(current.clone())
            .await
            .map_err(ReplaceError::Update)?
        {
            Update::Keep(value) => {
                return Ok(Replaced {
                    stored: None,
                    value,
                });
            }
            Update::Write(wanted, value) => (wanted, value),
        };
        match put_status(api, &wanted, field_manager).await {
            Ok(stored) => {
                return Ok(Replaced {
                    stored: Some(stored),
                    value,
                });
            }
            Err(error) if error.is_conflict() && attempt < attempts => {
                tracing::debug!(kind = %K::kind(&()), name = %name, attempt, "status write conflict; re-reading");
                current = api
                    .get(&name)
                    .await
                    .map_err(|source| StatusError::reread(&current, source))?;
            }
            Err(error) => return Err(error.into()),
        }
    }
}
