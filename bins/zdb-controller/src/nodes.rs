//! The node zones, watched once per process: the webhook keeps the cache on every replica, the
//! status controller (on the leader) reads the same one.

use futures::FutureExt;
use futures::future::{BoxFuture, Shared};
use zone_operator::NodeZones;

/// The node cache, and its first list as a future any number of tasks can await: a kube Store
/// wakes only the last of concurrent waiters, and the webhook and the status controller both
/// wait for it.
#[derive(Clone)]
pub struct SharedZones {
    zones: NodeZones,
    /// True once the first list is complete; false if the cache stopped before.
    listed: Shared<BoxFuture<'static, bool>>,
}

impl SharedZones {
    pub fn new(zones: NodeZones) -> Self {
        let waits = zones.clone();
        let listed = async move { waits.wait_until_ready().await.is_ok() }
            .boxed()
            .shared();
        Self { zones, listed }
    }

    /// The zones, to place pods.
    pub fn zones(&self) -> &NodeZones {
        &self.zones
    }

    /// Resolves once the first list is complete; fails if the cache stopped before.
    pub async fn wait_until_ready(&self) -> Result<(), NodesStopped> {
        if self.listed.clone().await {
            Ok(())
        } else {
            Err(NodesStopped)
        }
    }
}

/// The node cache stopped before its first list.
#[derive(Debug)]
pub struct NodesStopped;
