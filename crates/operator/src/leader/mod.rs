//! Leader election on a `coordination.k8s.io/v1` Lease.
//!
//! [`LeaderElector::run`] acquires and renews the Lease; [`LeaderHandle`] is the cheap view the
//! controllers hold. Every write is a `replace` carrying the `resourceVersion` that was read, so a
//! 409 means another replica wrote first; never a blind patch, which would let two replicas each
//! believe they won.
//!
//! A Lease is not a fence: a paused leader (GC stall, slow API) can act after its lease ran out.
//! Controllers therefore call [`LeaderHandle::confirm`] (a fresh read) right before each
//! destructive batch, and the binary exits as soon as [`LeaderHandle::lost`] resolves, so the
//! Deployment restarts it as a clean standby.

mod decision;
mod elector;
mod handle;

use std::time::Duration;

pub use decision::{Decision, claimed_spec, decide, expiry, holder, holds, released_spec};
pub use elector::LeaderElector;
pub use handle::{LeaderHandle, LeaderStatus};

/// Failures of leader election, by site.
#[derive(Debug, thiserror::Error)]
pub enum LeaderError {
    #[error("the lease name is empty")]
    EmptyName,
    #[error("the leader-election identity is empty")]
    EmptyIdentity,
    #[error(
        "--lease-duration {0:?} must be whole seconds between 1s and 2^31s (Lease.spec.leaseDurationSeconds is an integer)"
    )]
    LeaseDuration(Duration),
    #[error(
        "--renew-interval {renew:?} must be above zero and shorter than --lease-duration {lease:?}"
    )]
    RenewInterval { renew: Duration, lease: Duration },
    #[error("cannot read Lease {namespace}/{name}")]
    Get {
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("cannot create Lease {namespace}/{name}")]
    Create {
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("cannot update Lease {namespace}/{name}")]
    Replace {
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("Lease {namespace}/{name}: {attempts} writes in a row lost a race with other writers")]
    Contended {
        namespace: String,
        name: String,
        attempts: usize,
    },
    #[error("acquiring or renewing the lease took longer than {0:?}")]
    AttemptTimeout(Duration),
    #[error("cannot read Lease {namespace}/{name} to confirm leadership")]
    Confirm {
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("confirming leadership took longer than {0:?}")]
    ConfirmTimeout(Duration),
    #[error("cannot read Lease {namespace}/{name} to release it")]
    ReleaseGet {
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("cannot release Lease {namespace}/{name}")]
    ReleaseReplace {
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("releasing the lease took longer than {0:?}")]
    ReleaseTimeout(Duration),
    #[error("leadership lost (lease now held by {holder:?})")]
    Lost { holder: Option<String> },
}

/// Which Lease, who we are, and its timing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseConfig {
    pub name: String,
    pub namespace: String,
    pub identity: String,
    /// How long a claim lasts without renewal (written as `leaseDurationSeconds`).
    pub lease_duration: Duration,
    /// How often the leader renews and a standby retries.
    pub renew_interval: Duration,
}

impl LeaseConfig {
    pub fn validate(&self) -> Result<(), LeaderError> {
        if self.name.is_empty() {
            return Err(LeaderError::EmptyName);
        }
        if self.identity.is_empty() {
            return Err(LeaderError::EmptyIdentity);
        }
        self.lease_duration_seconds()?;
        if self.renew_interval.is_zero() || self.renew_interval >= self.lease_duration {
            return Err(LeaderError::RenewInterval {
                renew: self.renew_interval,
                lease: self.lease_duration,
            });
        }
        Ok(())
    }

    /// Whole seconds, as the Lease stores them; a fraction would be silently cut and other
    /// replicas would take over before we expect.
    pub fn lease_duration_seconds(&self) -> Result<i32, LeaderError> {
        let invalid = || LeaderError::LeaseDuration(self.lease_duration);
        if self.lease_duration.subsec_nanos() != 0 || self.lease_duration.is_zero() {
            return Err(invalid());
        }
        i32::try_from(self.lease_duration.as_secs()).map_err(|_| invalid())
    }

    /// How long after the start of a successful renewal the leader may keep acting: the lease
    /// duration minus one renew interval. Others take over only after the full duration, so the
    /// leader stops first, with one interval to spare for clock skew and slow requests (client-go
    /// keeps the same gap between its renew deadline and lease duration).
    pub fn renew_deadline(&self) -> Duration {
        self.lease_duration.saturating_sub(self.renew_interval)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn config(lease: Duration, renew: Duration) -> LeaseConfig {
        LeaseConfig {
            name: "zau-controller".into(),
            namespace: "zone-system".into(),
            identity: "zau-0".into(),
            lease_duration: lease,
            renew_interval: renew,
        }
    }

    #[test]
    fn defaults_are_valid() {
        let c = config(Duration::from_secs(15), Duration::from_secs(5));
        c.validate().unwrap();
        assert_eq!(c.lease_duration_seconds().unwrap(), 15);
        assert_eq!(c.renew_deadline(), Duration::from_secs(10));
    }

    #[test]
    fn rejects_unsafe_timing() {
        let s = Duration::from_secs;
        assert!(matches!(
            config(s(5), s(5)).validate(),
            Err(LeaderError::RenewInterval { .. })
        ));
        assert!(matches!(
            config(s(5), Duration::ZERO).validate(),
            Err(LeaderError::RenewInterval { .. })
        ));
        assert!(matches!(
            config(Duration::from_millis(1500), Duration::from_millis(100)).validate(),
            Err(LeaderError::LeaseDuration(_))
        ));
        assert!(matches!(
            config(Duration::ZERO, Duration::ZERO).validate(),
            Err(LeaderError::LeaseDuration(_))
        ));
        assert!(matches!(
            config(s(u64::from(u32::MAX)), s(5)).validate(),
            Err(LeaderError::LeaseDuration(_))
        ));
    }

    #[test]
    fn rejects_empty_names() {
        let mut c = config(Duration::from_secs(15), Duration::from_secs(5));
        c.identity.clear();
        assert!(matches!(c.validate(), Err(LeaderError::EmptyIdentity)));
        c.name.clear();
        assert!(matches!(c.validate(), Err(LeaderError::EmptyName)));
    }
}
