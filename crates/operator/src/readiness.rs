//! The state behind `/readyz`.
//!
//! A replica is ready when its controllers have synced their watches ([`Readiness::set_ready`]),
//! or while it is a leader-election **standby**. A standby has nothing to sync, and if it reported
//! 503 a Deployment rolling update could never make progress past it (the new pod would never
//! turn Ready). When a standby becomes leader it reports 503 again until its watches sync.

use std::sync::{
    Arc,
    atomic::{AtomicBool, Ordering},
};

/// What `/readyz` reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadyState {
    /// Watches synced: 200.
    Ready,
    /// Waiting for the Lease, nothing to sync: 200.
    Standby,
    /// Starting up or syncing: 503.
    NotReady,
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

    pub fn state(&self) -> ReadyState {
        if self.inner.ready.load(Ordering::Acquire) {
            ReadyState::Ready
        } else if self.inner.standby.load(Ordering::Acquire) {
            ReadyState::Standby
        } else {
            ReadyState::NotReady
        }
    }

    pub fn is_ready(&self) -> bool {
        self.state() != ReadyState::NotReady
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
}
