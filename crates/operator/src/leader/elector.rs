//! The task that acquires, renews and finally releases the Lease.

use std::sync::Arc;

use k8s_openapi::{
    api::coordination::v1::Lease, apimachinery::pkg::apis::meta::v1::ObjectMeta, jiff::Timestamp,
};
use kube::{Api, Client, api::PostParams};
use tokio::{sync::watch, time::Instant};
use tokio_util::sync::CancellationToken;

use super::{
    LeaderError, LeaseConfig,
    decision::{self, Decision},
    handle::{LeaderHandle, LeaderStatus, LeaseAccess},
};

/// Re-reads after a 409 within one round before giving up until the next round: enough to
/// absorb an unrelated edit of the Lease (a label, a racing standby) without spinning.
const CONFLICT_RETRIES: usize = 3;

/// Runs leader election for one Lease. Create with [`LeaderElector::new`], spawn
/// [`LeaderElector::run`], give the [`LeaderHandle`] to the controllers.
pub struct LeaderElector {
    api: Api<Lease>,
    config: LeaseConfig,
    lease_duration_seconds: i32,
    state: Arc<watch::Sender<LeaderStatus>>,
}

enum Round {
    /// We hold the lease as of the start of the round.
    Holding,
    /// Someone else holds a valid lease.
    HeldBy(String),
}

impl LeaderElector {
    pub fn new(client: Client, config: LeaseConfig) -> Result<(Self, LeaderHandle), LeaderError> {
        config.validate()?;
        let lease_duration_seconds = config.lease_duration_seconds()?;
        let api = Api::<Lease>::namespaced(client, &config.namespace);
        let (state, _) = watch::channel(LeaderStatus::Standby { holder: None });
        let state = Arc::new(state);
        let handle = LeaderHandle::elected(
            state.clone(),
            LeaseAccess {
                api: api.clone(),
                name: config.name.clone(),
                namespace: config.namespace.clone(),
                identity: config.identity.clone(),
                lease_duration: config.lease_duration,
                renew_interval: config.renew_interval,
            },
        );
        Ok((
            Self {
                api,
                config,
                lease_duration_seconds,
                state,
            },
            handle,
        ))
    }

    /// Acquires and renews until `stop` is cancelled, then releases the lease (if held) and
    /// returns `Ok`. Returns `Err(LeaderError::Lost)` as soon as leadership is lost: the caller
    /// must stop its controllers (the binary exits and is restarted as a standby).
    ///
    /// Cancel `stop` only after the controllers have stopped acting, or a standby may take over
    /// while the last batch is still running.
    pub async fn run(self, stop: CancellationToken) -> Result<(), LeaderError> {
        let interval = self.config.renew_interval;
        let outcome = loop {
            if stop.is_cancelled() {
                break Ok(());
            }
            if let LeaderStatus::Lost { holder } = self.status() {
                break Err(LeaderError::Lost { holder });
            }
            let started = Instant::now();
            let round = match tokio::time::timeout(interval, self.round()).await {
                Ok(round) => round,
                Err(_) => Err(LeaderError::AttemptTimeout(interval)),
            };
            if let Err(lost) = self.apply(round, started) {
                break Err(lost);
            }
            tokio::select! {
                () = stop.cancelled() => break Ok(()),
                () = tokio::time::sleep_until(started + interval) => {}
            }
        };
        // Also after a loss: if `confirm` declared it while our last write still landed, the
        // lease may name us; `release` only clears it when it does.
        let may_hold = matches!(
            self.status(),
            LeaderStatus::Leading { .. } | LeaderStatus::Lost { .. }
        );
        if may_hold && let Err(error) = self.release().await {
            tracing::warn!(error = %error, source = ?std::error::Error::source(&error), "lease not released; the standby waits for it to expire");
        }
        if outcome.is_ok() {
            self.state.send_replace(LeaderStatus::Stopped);
        }
        outcome
    }

    fn status(&self) -> LeaderStatus {
        self.state.borrow().clone()
    }

    /// Updates the shared status from one round; `Err` when leadership is lost.
    fn apply(
        &self,
        round: Result<Round, LeaderError>,
        started: Instant,
    ) -> Result<(), LeaderError> {
        let lease = self.config.name.as_str();
        match round {
            Ok(Round::Holding) => {
                let valid_until = Some(started + self.config.renew_deadline());
                self.state.send_if_modified(|status| match status {
                    // `confirm` saw a thief meanwhile: our write may have raced it; stay lost.
                    LeaderStatus::Lost { .. } => false,
                    LeaderStatus::Leading { .. } => {
                        *status = LeaderStatus::Leading { valid_until };
                        true
                    }
                    LeaderStatus::Standby { .. } | LeaderStatus::Stopped => {
                        tracing::info!(lease, identity = %self.config.identity, "leadership acquired");
                        *status = LeaderStatus::Leading { valid_until };
                        true
                    }
                });
                match self.status() {
                    LeaderStatus::Lost { holder } => Err(LeaderError::Lost { holder }),
                    _ => Ok(()),
                }
            }
            Ok(Round::HeldBy(holder)) => {
                if matches!(self.status(), LeaderStatus::Leading { .. }) {
                    tracing::error!(lease, holder = %holder, "leadership lost");
                    let holder = Some(holder);
                    self.state.send_replace(LeaderStatus::Lost {
                        holder: holder.clone(),
                    });
                    return Err(LeaderError::Lost { holder });
                }
                let holder = Some(holder);
                self.state.send_if_modified(|status| {
                    let changed = *status
                        != LeaderStatus::Standby {
                            holder: holder.clone(),
                        };
                    if changed {
                        tracing::info!(lease, holder = ?holder, "standing by");
                        *status = LeaderStatus::Standby {
                            holder: holder.clone(),
                        };
                    }
                    changed
                });
                Ok(())
            }
            Err(error) => {
                let status = self.status();
                tracing::warn!(lease, error = %error, source = ?std::error::Error::source(&error), "lease round failed");
                match status {
                    LeaderStatus::Leading {
                        valid_until: Some(deadline),
                    } if Instant::now() >= deadline => {
                        tracing::error!(lease, "lease not renewed before the renew deadline");
                        self.state.send_replace(LeaderStatus::Lost { holder: None });
                        Err(LeaderError::Lost { holder: None })
                    }
                    _ => Ok(()),
                }
            }
        }
    }

    /// One read-decide-write round, re-reading after each conflict.
    async fn round(&self) -> Result<Round, LeaderError> {
        for _ in 0..CONFLICT_RETRIES {
            let now = Timestamp::now();
            let current = self
                .api
                .get_opt(&self.config.name)
                .await
                .map_err(|source| LeaderError::Get {
                    namespace: self.config.namespace.clone(),
                    name: self.config.name.clone(),
                    source,
                })?;
            let decision = decision::decide(
                current.as_ref(),
                &self.config.identity,
                now,
                self.config.lease_duration,
            );
            if let Decision::HeldByOther { holder, .. } = decision {
                return Ok(Round::HeldBy(holder));
            }
            if let Decision::Acquire {
                previous: Some(previous),
            } = &decision
            {
                tracing::info!(lease = %self.config.name, previous = %previous, "taking over an expired lease");
            }
            let spec = decision::claimed_spec(
                current.as_ref().and_then(|l| l.spec.as_ref()),
                &decision,
                &self.config.identity,
                now,
                self.lease_duration_seconds,
            );
            let written = match current {
                None => {
                    let lease = Lease {
                        metadata: ObjectMeta {
                            name: Some(self.config.name.clone()),
                            namespace: Some(self.config.namespace.clone()),
                            ..ObjectMeta::default()
                        },
                        spec,
                    };
                    self.api
                        .create(&PostParams::default(), &lease)
                        .await
                        .map_err(|source| LeaderError::Create {
                            namespace: self.config.namespace.clone(),
                            name: self.config.name.clone(),
                            source,
                        })
                }
                // The fetched object keeps its resourceVersion: the write fails with 409 if
                // anyone wrote in between.
                Some(mut lease) => {
                    lease.spec = spec;
                    self.api
                        .replace(&self.config.name, &PostParams::default(), &lease)
                        .await
                        .map_err(|source| LeaderError::Replace {
                            namespace: self.config.namespace.clone(),
                            name: self.config.name.clone(),
                            source,
                        })
                }
            };
            match written {
                Ok(_) => return Ok(Round::Holding),
                Err(error) if is_conflict(&error) => continue,
                Err(error) => return Err(error),
            }
        }
        Err(LeaderError::Contended {
            namespace: self.config.namespace.clone(),
            name: self.config.name.clone(),
            attempts: CONFLICT_RETRIES,
        })
    }

    /// Hands the lease back if we still hold it, bounded by one renew interval so shutdown is
    /// never held up by a slow API server.
    async fn release(&self) -> Result<(), LeaderError> {
        let interval = self.config.renew_interval;
        tokio::time::timeout(interval, self.release_now())
            .await
            .map_err(|_| LeaderError::ReleaseTimeout(interval))?
    }

    async fn release_now(&self) -> Result<(), LeaderError> {
        let current = self
            .api
            .get_opt(&self.config.name)
            .await
            .map_err(|source| LeaderError::ReleaseGet {
                namespace: self.config.namespace.clone(),
                name: self.config.name.clone(),
                source,
            })?;
        let Some(mut lease) = current else {
            return Ok(());
        };
        let Some(spec) = lease.spec.as_ref() else {
            return Ok(());
        };
        if decision::holder(Some(spec)) != Some(self.config.identity.as_str()) {
            return Ok(());
        }
        lease.spec = Some(decision::released_spec(spec, Timestamp::now()));
        match self
            .api
            .replace(&self.config.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => {
                tracing::info!(lease = %self.config.name, "lease released");
                Ok(())
            }
            // Someone wrote after our read: the lease is no longer ours to release.
            Err(kube::Error::Api(status)) if status.is_conflict() => Ok(()),
            Err(source) => Err(LeaderError::ReleaseReplace {
                namespace: self.config.namespace.clone(),
                name: self.config.name.clone(),
                source,
            }),
        }
    }
}

/// 409 from create (AlreadyExists: another replica created it first) or replace (Conflict:
/// stale resourceVersion).
fn is_conflict(error: &LeaderError) -> bool {
    match error {
        LeaderError::Create {
            source: kube::Error::Api(status),
            ..
        }
        | LeaderError::Replace {
            source: kube::Error::Api(status),
            ..
        } => status.code == 409,
        _ => false,
    }
}
