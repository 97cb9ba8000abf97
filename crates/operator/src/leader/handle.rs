//! The controllers' view of leadership: cheap to clone, local checks plus a fresh-read confirm.

use std::{sync::Arc, time::Duration};

use k8s_openapi::{api::coordination::v1::Lease, jiff::Timestamp};
use kube::Api;
use tokio::{sync::watch, time::Instant};

use super::{LeaderError, decision};

/// Where this replica stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LeaderStatus {
    /// Waiting for the lease; `holder` is the current leader when known.
    Standby { holder: Option<String> },
    /// Holding the lease. `valid_until` is when this replica must stop acting unless renewed;
    /// `None` when leader election is disabled.
    Leading { valid_until: Option<Instant> },
    /// Leadership was lost; the process should exit.
    Lost { holder: Option<String> },
    /// The elector stopped on shutdown (and released the lease if it held it).
    Stopped,
}

/// Cheap handle shared by every controller of a binary.
#[derive(Clone, Debug)]
pub struct LeaderHandle {
    state: Arc<watch::Sender<LeaderStatus>>,
    lease: Option<Arc<LeaseAccess>>,
}

#[derive(Debug)]
pub(super) struct LeaseAccess {
    pub(super) api: Api<Lease>,
    pub(super) name: String,
    pub(super) namespace: String,
    pub(super) identity: String,
    pub(super) lease_duration: Duration,
    pub(super) renew_interval: Duration,
}

impl LeaderHandle {
    /// A handle for a binary running with `--leader-elect=false`: always leader, `confirm` is
    /// `true` without a request, `lost` never resolves.
    pub fn unelected() -> Self {
        let (state, _) = watch::channel(LeaderStatus::Leading { valid_until: None });
        Self {
            state: Arc::new(state),
            lease: None,
        }
    }

    /// A handle leading through the Lease `namespace/name` as `identity`, for tests: no elector
    /// runs; [`LeaderHandle::confirm`] reads the Lease through `client` (a fake API server) and
    /// answers from what it finds there.
    #[cfg(feature = "testing")]
    pub fn leading_for_tests(
        client: kube::Client,
        namespace: &str,
        name: &str,
        identity: &str,
    ) -> Self {
        let lease_duration = Duration::from_secs(15);
        let (state, _) = watch::channel(LeaderStatus::Leading {
            valid_until: Some(Instant::now() + lease_duration),
        });
        Self::elected(
            Arc::new(state),
            LeaseAccess {
                api: Api::namespaced(client, namespace),
                name: name.to_owned(),
                namespace: namespace.to_owned(),
                identity: identity.to_owned(),
                lease_duration,
                renew_interval: Duration::from_secs(5),
            },
        )
    }

    pub(super) fn elected(state: Arc<watch::Sender<LeaderStatus>>, lease: LeaseAccess) -> Self {
        Self {
            state,
            lease: Some(Arc::new(lease)),
        }
    }

    /// From local state only (no request): cheap enough for every reconcile.
    pub fn is_leader(&self) -> bool {
        match *self.state.borrow() {
            LeaderStatus::Leading { valid_until: None } => true,
            LeaderStatus::Leading {
                valid_until: Some(deadline),
            } => Instant::now() < deadline,
            _ => false,
        }
    }

    pub fn status(&self) -> LeaderStatus {
        self.state.borrow().clone()
    }

    /// Subscribe to status changes.
    pub fn watch(&self) -> watch::Receiver<LeaderStatus> {
        self.state.subscribe()
    }

    /// Resolves `true` once this replica leads, `false` if the elector stopped first.
    pub async fn acquired(&self) -> bool {
        let mut status = self.state.subscribe();
        let settled = status
            .wait_for(|s| !matches!(s, LeaderStatus::Standby { .. }))
            .await
            .map(|s| matches!(*s, LeaderStatus::Leading { .. }));
        settled.unwrap_or(false)
    }

    /// Resolves when this replica may no longer act as leader: the lease was lost, its renew
    /// deadline passed without a renewal (even if the elector task is stuck), or the elector
    /// stopped. Never resolves while election is disabled.
    pub async fn lost(&self) {
        let mut status = self.state.subscribe();
        loop {
            let current = status.borrow_and_update().clone();
            match current {
                LeaderStatus::Lost { .. } | LeaderStatus::Stopped => return,
                LeaderStatus::Leading {
                    valid_until: Some(deadline),
                } => {
                    tokio::select! {
                        changed = status.changed() => if changed.is_err() { return },
                        () = tokio::time::sleep_until(deadline) => {
                            if !status.has_changed().unwrap_or(true) {
                                return;
                            }
                        }
                    }
                }
                LeaderStatus::Leading { valid_until: None } | LeaderStatus::Standby { .. } => {
                    if status.changed().await.is_err() {
                        // The sender lives as long as `self`; unreachable in practice.
                        std::future::pending::<()>().await;
                    }
                }
            }
        }
    }

    /// Reads the Lease afresh and answers whether we still hold it with more than one renew
    /// interval to spare. Call it immediately before each destructive batch: the local state
    /// can be stale by up to a renew interval, the Lease cannot.
    ///
    /// If the Lease names another holder (or none), leadership is marked lost here and now, so
    /// `lost()` fires without waiting for the elector's next round.
    pub async fn confirm(&self) -> Result<bool, LeaderError> {
        let Some(lease) = &self.lease else {
            return Ok(true);
        };
        if !self.is_leader() {
            return Ok(false);
        }
        let now = Timestamp::now();
        let fetched = tokio::time::timeout(lease.renew_interval, lease.api.get_opt(&lease.name))
            .await
            .map_err(|_| LeaderError::ConfirmTimeout(lease.renew_interval))?
            .map_err(|source| LeaderError::Confirm {
                namespace: lease.namespace.clone(),
                name: lease.name.clone(),
                source,
            })?;
        let holder = decision::holder(fetched.as_ref().and_then(|l| l.spec.as_ref()));
        if holder != Some(lease.identity.as_str()) {
            let holder = holder.map(str::to_owned);
            tracing::warn!(lease = %lease.name, holder = ?holder, "lease taken by another replica");
            self.state.send_if_modified(|status| {
                let leading = matches!(status, LeaderStatus::Leading { .. });
                if leading {
                    *status = LeaderStatus::Lost { holder };
                }
                leading
            });
            return Ok(false);
        }
        let holds = decision::holds(
            fetched.as_ref(),
            &lease.identity,
            now,
            lease.lease_duration,
            lease.renew_interval,
        );
        Ok(holds && self.is_leader())
    }

    /// This replica's identity in the Lease (`None` when election is disabled).
    pub fn identity(&self) -> Option<&str> {
        self.lease.as_deref().map(|l| l.identity.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn unelected_handle_always_leads() {
        let handle = LeaderHandle::unelected();
        assert!(handle.is_leader());
        assert!(handle.acquired().await);
        assert!(matches!(handle.confirm().await, Ok(true)));
        assert_eq!(handle.identity(), None);
        let lost = tokio::time::timeout(Duration::from_millis(20), handle.lost()).await;
        assert!(lost.is_err(), "lost() must not resolve without election");
    }

    #[tokio::test(start_paused = true)]
    async fn local_deadline_ends_leadership_without_the_elector() {
        let (state, _) = watch::channel(LeaderStatus::Leading {
            valid_until: Some(Instant::now() + Duration::from_secs(10)),
        });
        let handle = LeaderHandle {
            state: Arc::new(state),
            lease: None,
        };
        assert!(handle.is_leader());
        let started = Instant::now();
        handle.lost().await;
        assert!(started.elapsed() >= Duration::from_secs(10));
        assert!(!handle.is_leader());
    }

    #[tokio::test(start_paused = true)]
    async fn a_renewal_pushes_the_deadline_back() {
        let first = Instant::now() + Duration::from_secs(10);
        let (state, _) = watch::channel(LeaderStatus::Leading {
            valid_until: Some(first),
        });
        let state = Arc::new(state);
        let handle = LeaderHandle {
            state: state.clone(),
            lease: None,
        };
        let renewer = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(5)).await;
            state.send_replace(LeaderStatus::Leading {
                valid_until: Some(Instant::now() + Duration::from_secs(10)),
            });
            state
        });
        let started = Instant::now();
        handle.lost().await;
        assert!(started.elapsed() >= Duration::from_secs(15));
        drop(renewer);
    }
}
