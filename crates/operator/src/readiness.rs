//! The state behind `/readyz`.
//!
//! A replica is ready when its controllers have synced their watches ([`Readiness::set_ready`]),
//! or while it is a leader-election **standby**. A standby has nothing to sync, and if it reported
//! 503 a Deployment rolling update could never make progress past it (the new pod would never
//! turn Ready). When a standby becomes leader it reports 503 again until its watches sync.
//!
//! Work that runs on every replica, leader or standby (an admission webhook behind a Service),
//! adds named **gates** ([`Readiness::gate`]): while any gate is closed the replica is not ready,
//! standby or not, so a Service never routes to a replica that cannot answer, and `/readyz`
//! names the gates that hold it back. Once shutdown has started ([`Readiness::follow_shutdown`])
//! the replica is not ready whatever its gates say, so its endpoints go before its listeners do.

use std::sync::{
    Arc, PoisonError, RwLock,
    atomic::{AtomicBool, Ordering},
};

use crate::shutdown::Shutdown;

/// What `/readyz` reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadyState {
    /// Watches synced: 200.
    Ready,
    /// Waiting for the Lease, nothing to sync: 200.
    Standby,
    /// Starting up or syncing: 503.
    NotReady,
    /// A gate is closed ([`Readiness::failing_gates`] says which): 503.
    Gated,
    /// Shutdown has started: 503, so the Service drops this replica while it still serves.
    ShuttingDown,
}

impl ReadyState {
    /// Whether the kubelet should count the replica ready (`/readyz` answers 200).
    pub fn is_ready(self) -> bool {
        matches!(self, ReadyState::Ready | ReadyState::Standby)
    }
}

/// Cheap to clone; every clone shares the same state.
#[derive(Clone, Debug, Default)]
pub struct Readiness {
    inner: Arc<Flags>,
}

#[derive(Debug, Default)]
struct Flags {
    ready: AtomicBool,
    standby: AtomicBool,
    gates: RwLock<Vec<(&'static str, Arc<AtomicBool>)>>,
    shutdown: RwLock<Option<Shutdown>>,
}

/// One named condition of readiness, closed when created: open it when the component can do its
/// work, close it when it no longer can. Dropping it closes it for good, so a component whose
/// task ended (or was aborted) never leaves its replica ready.
#[derive(Debug)]
pub struct Gate {
    name: &'static str,
    open: Arc<AtomicBool>,
}

impl Gate {
    pub fn open(&self) {
        if !self.open.swap(true, Ordering::AcqRel) {
            tracing::info!(gate = self.name, "readiness gate open");
        }
    }

    pub fn close(&self) {
        if self.open.swap(false, Ordering::AcqRel) {
            tracing::info!(gate = self.name, "readiness gate closed");
        }
    }

    pub fn is_open(&self) -> bool {
        self.open.load(Ordering::Acquire)
    }

    pub fn name(&self) -> &'static str {
        self.name
    }
}

impl Drop for Gate {
    fn drop(&mut self) {
        self.close();
    }
}

impl Readiness {
    /// Starts not ready.
    pub fn new() -> Self {
        Self::default()
    }

    /// Called by a controller once every watch it depends on has synced.
    pub fn set_ready(&self) {
        self.inner.ready.store(true, Ordering::Release);
    }

    /// Back to 503, e.g. when a watch must resync from scratch.
    pub fn set_not_ready(&self) {
        self.inner.ready.store(false, Ordering::Release);
    }

    /// Set by the runtime while the replica waits for the Lease.
    pub fn set_standby(&self, standby: bool) {
        self.inner.standby.store(standby, Ordering::Release);
    }

    /// A new gate named `name`, closed: the replica is not ready until it is opened. Names are
    /// what `/readyz` lists; give each gate its own.
    pub fn gate(&self, name: &'static str) -> Gate {
        let open = Arc::new(AtomicBool::new(false));
        self.inner
            .gates
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .push((name, open.clone()));
        Gate { name, open }
    }

    /// Not ready from the moment `shutdown` is triggered: read at every `/readyz`, so the first
    /// probe after SIGTERM already answers 503, with no task in between to be scheduled late.
    pub fn follow_shutdown(&self, shutdown: &Shutdown) {
        *self
            .inner
            .shutdown
            .write()
            .unwrap_or_else(PoisonError::into_inner) = Some(shutdown.clone());
    }

    /// The gates now closed, in the order they were created.
    pub fn failing_gates(&self) -> Vec<&'static str> {
        self.inner
            .gates
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .filter(|(_, open)| !open.load(Ordering::Acquire))
            .map(|(name, _)| *name)
            .collect()
    }

    fn shutting_down(&self) -> bool {
        self.inner
            .shutdown
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .is_some_and(Shutdown::is_triggered)
    }

    pub fn state(&self) -> ReadyState {
        if self.shutting_down() {
            ReadyState::ShuttingDown
        } else if !self.failing_gates().is_empty() {
            ReadyState::Gated
        } else if self.inner.ready.load(Ordering::Acquire) {
            ReadyState::Ready
        } else if self.inner.standby.load(Ordering::Acquire) {
            ReadyState::Standby
        } else {
            ReadyState::NotReady
        }
    }

    pub fn is_ready(&self) -> bool {
        self.state().is_ready()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transitions() {
        let readiness = Readiness::new();
        let clone = readiness.clone();
        assert_eq!(readiness.state(), ReadyState::NotReady);
        clone.set_standby(true);
        assert_eq!(readiness.state(), ReadyState::Standby);
        assert!(readiness.is_ready());
        clone.set_standby(false);
        assert!(
            !readiness.is_ready(),
            "a new leader is not ready before it syncs"
        );
        clone.set_ready();
        assert_eq!(readiness.state(), ReadyState::Ready);
        clone.set_not_ready();
        assert_eq!(readiness.state(), ReadyState::NotReady);
    }

    #[test]
    fn a_closed_gate_holds_back_a_standby_and_a_synced_leader() {
        let readiness = Readiness::new();
        readiness.set_standby(true);
        let listener = readiness.gate("webhook-listener");
        let caches = readiness.gate("webhook-caches");
        assert_eq!(readiness.state(), ReadyState::Gated);
        assert_eq!(
            readiness.failing_gates(),
            ["webhook-listener", "webhook-caches"]
        );
        listener.open();
        assert_eq!(readiness.failing_gates(), ["webhook-caches"]);
        assert!(!readiness.is_ready());
        caches.open();
        assert_eq!(readiness.state(), ReadyState::Standby);

        readiness.set_standby(false);
        readiness.set_ready();
        assert_eq!(readiness.state(), ReadyState::Ready);
        caches.close();
        assert_eq!(readiness.state(), ReadyState::Gated, "leader, caches lost");
        caches.open();
        drop(listener);
        assert_eq!(
            readiness.failing_gates(),
            ["webhook-listener"],
            "a dropped gate stays closed"
        );
    }

    #[test]
    fn shutdown_overrides_every_gate_and_flag() {
        let readiness = Readiness::new();
        let shutdown = Shutdown::new();
        readiness.follow_shutdown(&shutdown);
        let gate = readiness.gate("webhook-serving");
        gate.open();
        readiness.set_ready();
        assert_eq!(readiness.state(), ReadyState::Ready);
        shutdown.trigger();
        assert_eq!(readiness.state(), ReadyState::ShuttingDown);
        assert!(!readiness.is_ready());
    }
}
