//! Credentials by reference: the Secret and ConfigMap keys an object names, resolved in the
//! object's own namespace (as prometheus-operator does: a monitor never reads another
//! namespace's Secrets).
//!
//! The controller first asks an object for its [`KeyRef`]s, reads those Secrets and ConfigMaps,
//! and hands their contents over as [`Values`]; translation then resolves from that, with no
//! I/O.

use std::collections::BTreeMap;

pub use k8s_openapi::api::core::v1::{ConfigMapKeySelector, SecretKeySelector};

/// Secret or ConfigMap.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Source {
    Secret,
    ConfigMap,
}

impl Source {
    pub fn kind(self) -> &'static str {
        match self {
            Source::Secret => "Secret",
            Source::ConfigMap => "ConfigMap",
        }
    }
}

/// One key of a Secret or ConfigMap, in a namespace.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct KeyRef {
    pub source: Source,
    pub namespace: String,
    pub name: String,
    pub key: String,
}

impl KeyRef {
    pub fn secret(namespace: &str, selector: &SecretKeySelector) -> KeyRef {
        KeyRef {
            source: Source::Secret,
            namespace: namespace.to_string(),
            name: selector.name.clone(),
            key: selector.key.clone(),
        }
    }

    pub fn config_map(namespace: &str, selector: &ConfigMapKeySelector) -> KeyRef {
        KeyRef {
            source: Source::ConfigMap,
            namespace: namespace.to_string(),
            name: selector.name.clone(),
            key: selector.key.clone(),
        }
    }
}

impl std::fmt::Display for KeyRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {}/{} key {:?}",
            self.source.kind(),
            self.namespace,
            self.name,
            self.key
        )
    }
}

/// Why a reference cannot be resolved. The message names the reference, never a value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RefError {
    #[error("{0}: not found")]
    NotFound(KeyRef),
    #[error("{0}: the key is missing")]
    KeyMissing(KeyRef),
    #[error("{0}: the value is not UTF-8")]
    NotUtf8(KeyRef),
}

/// Resolves references to their values.
pub trait Resolver {
    fn resolve(&self, key: &KeyRef) -> Result<String, RefError>;
}

/// A Secret's or ConfigMap's data: key → bytes.
pub type Data = BTreeMap<String, Vec<u8>>;

/// What the controller read: per Secret or ConfigMap, its keys and values (`None`: it does not
/// exist). References to objects not listed here are [`RefError::NotFound`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Values {
    objects: BTreeMap<(Source, String, String), Option<Data>>,
}

impl Values {
    /// Records `namespace/name` of `source` with its data (`None`: it does not exist).
    pub fn insert(&mut self, source: Source, namespace: &str, name: &str, data: Option<Data>) {
        self.objects
            .insert((source, namespace.to_string(), name.to_string()), data);
    }

    /// The data of `namespace/name` of `source`: None when it was not read or does not exist.
    pub fn data(&self, source: Source, namespace: &str, name: &str) -> Option<&Data> {
        self.objects
            .get(&(source, namespace.to_string(), name.to_string()))
            .and_then(Option::as_ref)
    }

    /// Whether `namespace/name` of `source` was read (present or not).
    pub fn contains(&self, source: Source, namespace: &str, name: &str) -> bool {
        self.objects
            .contains_key(&(source, namespace.to_string(), name.to_string()))
    }
}

impl Resolver for Values {
    fn resolve(&self, key: &KeyRef) -> Result<String, RefError> {
        let object = self
            .objects
            .get(&(key.source, key.namespace.clone(), key.name.clone()))
            .and_then(Option::as_ref)
            .ok_or_else(|| RefError::NotFound(key.clone()))?;
        let value = object
            .get(&key.key)
            .ok_or_else(|| RefError::KeyMissing(key.clone()))?;
        String::from_utf8(value.clone()).map_err(|_| RefError::NotUtf8(key.clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str, key: &str) -> KeyRef {
        KeyRef {
            source: Source::Secret,
            namespace: "team".into(),
            name: name.into(),
            key: key.into(),
        }
    }

    #[test]
    fn values_resolve_present_keys_and_name_what_is_missing() {
        let mut values = Values::default();
        let data = BTreeMap::from([("password".to_string(), b"s3cret".to_vec())]);
        values.insert(Source::Secret, "team", "auth", Some(data));
        values.insert(Source::Secret, "team", "gone", None);
        assert_eq!(
            values.resolve(&key("auth", "password")).as_deref(),
            Ok("s3cret")
        );
        let missing_key = values.resolve(&key("auth", "user"));
        assert_eq!(missing_key, Err(RefError::KeyMissing(key("auth", "user"))));
        let gone = values.resolve(&key("gone", "password"));
        assert_eq!(gone, Err(RefError::NotFound(key("gone", "password"))));
        assert!(!format!("{:?}", values.resolve(&key("auth", "user"))).contains("s3cret"));
        let unread = values.resolve(&key("other", "x"));
        assert!(matches!(unread, Err(RefError::NotFound(_))));
    }
}
