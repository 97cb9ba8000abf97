//! The monitoring.coreos.com kinds as the controller watches them: metadata and a raw spec.
//! The spec is parsed per object at reconcile time, so one malformed object is reported and
//! left out instead of breaking the watch of every other.

use std::borrow::Cow;
use std::fmt::Debug;
use std::marker::PhantomData;

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use serde::{Deserialize, Serialize};
use zone_api::sprom::MONITORING_GROUP;

/// One monitoring.coreos.com kind.
pub trait Kind: Clone + Debug + Default + Send + Sync + 'static {
    const KIND: &'static str;
    const VERSION: &'static str;
    const PLURAL: &'static str;
    /// `servicemonitors.monitoring.coreos.com/v1`: how the condition names a kind not served.
    const RESOURCE: &'static str;
}

macro_rules! kind {
    ($name:ident, $kind:literal, $version:literal, $plural:literal) => {
        #[derive(Clone, Debug, Default)]
        pub struct $name;

        impl Kind for $name {
            const KIND: &'static str = $kind;
            const VERSION: &'static str = $version;
            const PLURAL: &'static str = $plural;
            const RESOURCE: &'static str = concat!($plural, ".monitoring.coreos.com/", $version);
        }
    };
}

kind!(
    ServiceMonitorKind,
    "ServiceMonitor",
    "v1",
    "servicemonitors"
);
kind!(PodMonitorKind, "PodMonitor", "v1", "podmonitors");
kind!(
    ScrapeConfigKind,
    "ScrapeConfig",
    "v1alpha1",
    "scrapeconfigs"
);
kind!(
    PrometheusRuleKind,
    "PrometheusRule",
    "v1",
    "prometheusrules"
);

/// An object of kind `K`: its metadata and its spec, unparsed.
#[derive(Clone, Debug, Deserialize, Serialize)]
pub struct Raw<K: Kind> {
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: serde_json::Value,
    #[serde(skip)]
    kind: PhantomData<K>,
}

impl<K: Kind> Raw<K> {
    /// What the controller never reads: managed fields and annotations (kubectl's
    /// last-applied-configuration is a second copy of the spec).
    pub fn strip(&mut self) {
        self.metadata.managed_fields = None;
        self.metadata.annotations = None;
    }
}

impl<K: Kind> Resource for Raw<K> {
    type DynamicType = ();
    type Scope = NamespaceResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        K::KIND.into()
    }

    fn group(_: &()) -> Cow<'_, str> {
        MONITORING_GROUP.into()
    }

    fn version(_: &()) -> Cow<'_, str> {
        K::VERSION.into()
    }

    fn plural(_: &()) -> Cow<'_, str> {
        K::PLURAL.into()
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn raw_objects_address_their_kind_and_keep_any_spec() {
        assert_eq!(
            Raw::<ScrapeConfigKind>::api_version(&()),
            "monitoring.coreos.com/v1alpha1"
        );
        assert_eq!(Raw::<PrometheusRuleKind>::plural(&()), "prometheusrules");
        assert_eq!(
            ServiceMonitorKind::RESOURCE,
            format!("servicemonitors.{MONITORING_GROUP}/v1")
        );
        let object: Raw<ServiceMonitorKind> = serde_json::from_value(serde_json::json!({
            "apiVersion": "monitoring.coreos.com/v1", "kind": "ServiceMonitor",
            "metadata": {"name": "m", "namespace": "n",
                         "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}"}},
            "spec": {"endpoints": "not a list"},
        }))
        .unwrap();
        assert_eq!(object.spec["endpoints"], "not a list");
        let mut stripped = object.clone();
        stripped.strip();
        assert!(stripped.metadata.annotations.is_none());
    }
}
