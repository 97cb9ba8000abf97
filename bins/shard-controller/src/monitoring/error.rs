//! Why monitoring could not be observed this time.

use zone_api::sprom::MONITORING_GROUP;

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
