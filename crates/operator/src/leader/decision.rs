//! What to do with a Lease, as a pure function of the Lease, the clock and our identity.
//!
//! Expiry is judged from the holder's `renewTime + leaseDurationSeconds` against our wall clock,
//! so replicas rely on clocks kept in sync (NTP), as every Kubernetes node does. The leader stops
//! acting a full renew interval *before* that expiry (see `LeaseConfig::renew_deadline`), which
//! absorbs skew smaller than the renew interval.

use std::time::Duration;

use k8s_openapi::{
    api::coordination::v1::{Lease, LeaseSpec},
    apimachinery::pkg::apis::meta::v1::MicroTime,
    jiff::{SignedDuration, Timestamp},
};

/// The next step for a replica looking at a Lease.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// No Lease object yet: create it, holding it.
    Create,
    /// Nobody holds it (released, or never held) or the holder let it expire: take it over.
    Acquire {
        /// The replica that held it last, if any (for the log line).
        previous: Option<String>,
    },
    /// We hold it: renew.
    Renew,
    /// Another replica holds a valid lease: wait, and check again later.
    HeldByOther { holder: String, expires: Timestamp },
}

/// `lease` is `None` when the object does not exist. `default_duration` stands in for a missing
/// `leaseDurationSeconds` (all replicas share the configuration).
pub fn decide(
    lease: Option<&Lease>,
    identity: &str,
    now: Timestamp,
    default_duration: Duration,
) -> Decision {
    let Some(lease) = lease else {
        return Decision::Create;
    };
    let spec = lease.spec.as_ref();
    match holder(spec) {
        None => Decision::Acquire { previous: None },
        Some(holder) if holder == identity => Decision::Renew,
        Some(holder) => match spec.and_then(|s| expiry(s, default_duration)) {
            Some(expires) if expires > now => Decision::HeldByOther {
                holder: holder.to_owned(),
                expires,
            },
            _ => Decision::Acquire {
                previous: Some(holder.to_owned()),
            },
        },
    }
}

/// The holder, treating `""` as nobody (client-go writes `""` on release; we write nothing).
pub fn holder(spec: Option<&LeaseSpec>) -> Option<&str> {
    spec.and_then(|s| s.holder_identity.as_deref())
        .filter(|h| !h.is_empty())
}

/// When the lease runs out: the last renewal (or acquisition) plus its duration. `None` when the
/// spec carries no time at all: nothing shows the holder is alive, so it counts as expired.
pub fn expiry(spec: &LeaseSpec, default_duration: Duration) -> Option<Timestamp> {
    let since = spec.renew_time.as_ref().or(spec.acquire_time.as_ref())?.0;
    let seconds = spec
        .lease_duration_seconds
        .map(|s| i64::from(s.max(0)))
        .unwrap_or_else(|| i64::try_from(default_duration.as_secs()).unwrap_or(i64::MAX));
    // Saturate: an absurd duration means "held", never "expired" (that would steal the lease).
    Some(
        since
            .checked_add(SignedDuration::from_secs(seconds))
            .unwrap_or(Timestamp::MAX),
    )
}

/// True when `identity` holds the lease and it stays valid for longer than `margin` from `now`.
///
/// The margin is the point of a fresh check before a batch: a lease about to expire is as good
/// as lost, since the batch may outlive it.
pub fn holds(
    lease: Option<&Lease>,
    identity: &str,
    now: Timestamp,
    lease_duration: Duration,
    margin: Duration,
) -> bool {
    let Some(spec) = lease.and_then(|l| l.spec.as_ref()) else {
        return false;
    };
    if holder(Some(spec)) != Some(identity) {
        return false;
    }
    let Ok(margin) = SignedDuration::try_from(margin) else {
        return false;
    };
    match (expiry(spec, lease_duration), now.checked_add(margin)) {
        (Some(expires), Ok(deadline)) => expires > deadline,
        _ => false,
    }
}

/// The spec to write for a claim (`Create`, `Acquire`, `Renew`); `None` for `HeldByOther`.
///
/// Fields we do not manage (`preferredHolder`, `strategy`) are kept as found.
pub fn claimed_spec(
    current: Option<&LeaseSpec>,
    decision: &Decision,
    identity: &str,
    now: Timestamp,
    lease_duration_seconds: i32,
) -> Option<LeaseSpec> {
    let mut spec = current.cloned().unwrap_or_default();
    let now = MicroTime(now);
    match decision {
        Decision::HeldByOther { .. } => return None,
        Decision::Renew => {
            spec.acquire_time.get_or_insert_with(|| now.clone());
        }
        Decision::Create => {
            spec.acquire_time = Some(now.clone());
            spec.lease_transitions = Some(0);
        }
        Decision::Acquire { .. } => {
            spec.acquire_time = Some(now.clone());
            // Every change of holder is a transition, including after a release.
            spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0).saturating_add(1));
        }
    }
    spec.holder_identity = Some(identity.to_owned());
    spec.renew_time = Some(now);
    spec.lease_duration_seconds = Some(lease_duration_seconds);
    Some(spec)
}

/// The spec that hands the lease back: no holder, so a standby takes it on its next attempt
/// instead of waiting out the lease duration.
pub fn released_spec(current: &LeaseSpec, now: Timestamp) -> LeaseSpec {
    LeaseSpec {
        holder_identity: None,
        renew_time: Some(MicroTime(now)),
        lease_duration_seconds: Some(1),
        ..current.clone()
    }
}

#[cfg(test)]
mod tests;
