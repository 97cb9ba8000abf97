//! Deciding one eviction with the budget that selects its pod: a refusal from a recent copy, or
//! a fresh read, the writer's turn of the budget in this replica, and the record of the
//! eviction written over the version read (re-read and decided again after a conflict).

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::{Api, Resource, ResourceExt};
use zone_api::{ZoneDisruptionBudget, ZoneDisruptionBudgetStatus};
use zone_operator::ErrorChain;
use zone_operator::status;
use zone_topology::Zone;
use zone_topology::budget::{Decision, EvictedPod, PodCondition};

use super::admission::Eviction;
use super::judge::{Judge, Verdict, allowed, denial_message, denial_reason, denied};
use super::queue::{Shed, Turn};
use crate::metrics::reason;
use crate::{pods, view};

/// Pause between attempts after a write conflict (with another replica): long enough for the
/// winner's write to be readable, short enough for many attempts inside the deadline; the actual
/// pause is drawn between half and one and a half times this, so two replicas that collided do
/// not collide again in step.
const CONFLICT_BACKOFF: Duration = Duration::from_millis(20);

/// Kept back from the deadline when waiting for a budget's writer's turn: the write itself and
/// the answer still have to fit.
const DEADLINE_MARGIN: Duration = Duration::from_millis(150);

/// What one version of a budget says of an eviction.
enum Step {
    Answer(Verdict),
    /// Allowed if this status (the eviction recorded in `zone`) can be written over that version.
    Record {
        next: ZoneDisruptionBudgetStatus,
        zone: Zone,
    },
}

/// What stays the same through the attempts of one decision.
struct Deciding<'a> {
    eviction: &'a Eviction,
    api: &'a Api<ZoneDisruptionBudget>,
    /// The budget that selects the pod.
    name: &'a str,
    started: Instant,
}

/// `base` scaled by a factor drawn from [0.5, 1.5).
fn jittered(base: Duration) -> Duration {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(Instant::now().elapsed().as_nanos());
    let unit = f64::from(u32::try_from(hasher.finish() >> 32).unwrap_or(0)) / 4_294_967_296.0;
    base.mul_f64(0.5 + unit)
}

impl Judge {
    /// Decides with the budget `name`. A refusal may come from `recent`, a copy read fresh a
    /// moment ago (see [`RecentBudgets`](super::recent::RecentBudgets)); anything else is decided
    /// from a fresh read: `early`, made alongside the pod's (`Some(None)`: it was not found),
    /// serves the first attempt.
    pub(super) async fn decide(
        &self,
        eviction: &Eviction,
        pod: &Pod,
        api: &Api<ZoneDisruptionBudget>,
        name: &str,
        recent: Option<Arc<ZoneDisruptionBudget>>,
        mut early: Option<Option<ZoneDisruptionBudget>>,
    ) -> Verdict {
        let zone = self.zones.zone_of(pod);
        let condition = pods::condition(pod);
        let created_ms = pods::created_ms(pod);
        if let Some(zdb) = recent
            && let Step::Answer(verdict) =
                self.assess(eviction, name, &zdb, &zone, condition, created_ms)
            && (!verdict.allowed || verdict.reason == reason::SHADOW)
        {
            return verdict;
        }
        let deciding = Deciding {
            eviction,
            api,
            name,
            started: Instant::now(),
        };
        // Taken once a fresh read says the eviction is to be recorded; kept across conflicts.
        let mut turn = None;
        loop {
            let zdb = match self.read_budget(&deciding, early.take()).await {
                Ok(zdb) => zdb,
                Err(verdict) => return verdict,
            };
            self.recent.remember(&zdb);
            let (next, zone) = match self.assess(eviction, name, &zdb, &zone, condition, created_ms)
            {
                Step::Answer(verdict) => return verdict,
                Step::Record { next, zone } => (next, zone),
            };
            if turn.is_none() {
                let held = match self.take_turn(&deciding, &zdb).await {
                    Ok(held) => held,
                    Err(verdict) => return verdict,
                };
                // Decide again from what the previous writer stored, if it is not what was read
                // before waiting.
                let written = held.written();
                turn = Some(held);
                if let Some(written) = written
                    && written.resource_version() != zdb.resource_version()
                {
                    early = Some(Some((*written).clone()));
                    continue;
                }
            }
            if let Some(verdict) = self
                .record(&deciding, &zdb, next, &zone, turn.as_ref())
                .await
            {
                return verdict;
            }
        }
    }

    /// The budget read fresh, or `early` when it was read alongside the pod; without its managed
    /// fields. None allows the eviction; a failed read refuses it (the client retries).
    async fn read_budget(
        &self,
        deciding: &Deciding<'_>,
        early: Option<Option<ZoneDisruptionBudget>>,
    ) -> Result<ZoneDisruptionBudget, Verdict> {
        let name = deciding.name;
        let read = match early {
            Some(zdb) => Ok(zdb),
            None => self.request(deciding.api.get_opt(name)).await,
        };
        match read {
            Ok(Some(mut zdb)) => {
                // Kept while the decision waits for its turn; the PUT without them leaves them as
                // they are (a nil managedFields in an update keeps the stored ones).
                zdb.metadata.managed_fields = None;
                Ok(zdb)
            }
            Ok(None) => Err(allowed(reason::NO_BUDGET)),
            Err(error) => {
                let (namespace, pod) =
                    (deciding.eviction.namespace.as_str(), &deciding.eviction.pod);
                tracing::warn!(error = %error, namespace, budget = name, "cannot read the budget");
                Err(denied(
                    reason::API_ERROR,
                    format!(
                        "cannot evict pod {pod}: ZoneDisruptionBudget {name} cannot be read; retry"
                    ),
                ))
            }
        }
    }

    /// The writer's turn of the budget in this replica, if what waits ahead fits in what is left
    /// of the deadline; else a refusal (an allowance in shadow mode).
    async fn take_turn(
        &self,
        deciding: &Deciding<'_>,
        zdb: &ZoneDisruptionBudget,
    ) -> Result<Turn, Verdict> {
        let time_left = self
            .deadline
            .saturating_sub(deciding.started.elapsed() + DEADLINE_MARGIN);
        let eviction = deciding.eviction;
        let name = deciding.name;
        self.queues
            .turn(&eviction.namespace, name, time_left)
            .await
            .map_err(|shed| {
                self.metrics.shed(match shed {
                    Shed::QueueFull => "QueueFull",
                    Shed::NoTimeLeft => "NoTimeLeft",
                });
                let message = format!(
                    "cannot evict pod {}: too many evictions of ZoneDisruptionBudget {name} are being decided; retry",
                    eviction.pod
                );
                self.refuse(zdb, zdb.spec.dry_run, reason::SHED, message)
            })
    }

    /// Writes `next` over the version `zdb` that was read: the eviction is allowed once it is
    /// stored. `None` after a write conflict with time left for another attempt (after a pause),
    /// which decides again from a fresh read.
    async fn record(
        &self,
        deciding: &Deciding<'_>,
        zdb: &ZoneDisruptionBudget,
        next: ZoneDisruptionBudgetStatus,
        zone: &Zone,
        turn: Option<&Turn>,
    ) -> Option<Verdict> {
        let (eviction, name) = (deciding.eviction, deciding.name);
        let namespace = eviction.namespace.as_str();
        let shadow = zdb.spec.dry_run;
        let mut wanted = zdb.clone();
        wanted.status = Some(next);
        let result = self
            .request(status::put_status(
                deciding.api,
                &wanted,
                &self.field_manager,
            ))
            .await;
        match result {
            Ok(mut written) => {
                written.metadata.managed_fields = None;
                self.recent.remember(&written);
                if let Some(turn) = turn {
                    turn.wrote(&written);
                }
                tracing::info!(namespace, budget = name, pod = %eviction.pod, zone = %zone, "eviction allowed and recorded");
                Some(allowed(reason::RECORDED))
            }
            Err(error) if error.is_conflict() => {
                self.metrics.conflict_retry();
                let backoff = jittered(CONFLICT_BACKOFF);
                if deciding.started.elapsed() + backoff >= self.deadline {
                    let message = format!(
                        "cannot evict pod {}: ZoneDisruptionBudget {name} is being updated by concurrent evictions; retry",
                        eviction.pod
                    );
                    return Some(self.refuse(zdb, shadow, reason::CONFLICTS, message));
                }
                tokio::time::sleep(backoff).await;
                None
            }
            Err(error) => {
                tracing::warn!(error = %ErrorChain(&error), namespace, budget = name, "cannot record the eviction");
                let message = format!(
                    "cannot evict pod {}: the disruption cannot be recorded in ZoneDisruptionBudget {name}; retry",
                    eviction.pod
                );
                Some(self.refuse(zdb, shadow, reason::API_ERROR, message))
            }
        }
    }

    /// What one version of the budget says of the eviction: an answer, or a record to write.
    fn assess(
        &self,
        eviction: &Eviction,
        name: &str,
        zdb: &ZoneDisruptionBudget,
        zone: &Zone,
        condition: PodCondition,
        created_ms: i64,
    ) -> Step {
        let shadow = zdb.spec.dry_run;
        let Ok(valid) = zdb.spec.validate() else {
            // The controller reports it (condition, event); an unenforceable budget must not
            // block every drain of the namespace.
            return Step::Answer(allowed(reason::INVALID_BUDGET));
        };
        let status = zdb.status.clone().unwrap_or_default();
        let generation = zdb.metadata.generation.unwrap_or(0);
        if status.observed_generation != generation {
            let message = format!(
                "cannot evict pod {}: ZoneDisruptionBudget {name} generation {generation} is not computed yet (status is for {}); retry",
                eviction.pod, status.observed_generation
            );
            return Step::Answer(self.refuse(zdb, shadow, reason::NOT_OBSERVED, message));
        }
        let budget = view::from_status(&status, valid.max_unavailable);
        let decision = budget.decide(&EvictedPod {
            name: &eviction.pod,
            zone: zone.clone(),
            condition,
            created_ms,
        });
        match decision {
            Decision::Allow { record: false, .. } => {
                Step::Answer(allowed(if condition == PodCondition::Healthy {
                    reason::ALREADY_RECORDED
                } else {
                    reason::POD_UNAVAILABLE
                }))
            }
            Decision::Allow { .. } if eviction.dry_run => Step::Answer(allowed(reason::DRY_RUN)),
            Decision::Allow { zone, record: true } => {
                let mut next = status;
                view::record(
                    &mut next,
                    &eviction.pod,
                    &zone,
                    zone_api::conditions::now(),
                    valid.max_unavailable,
                );
                Step::Record { next, zone }
            }
            Decision::Deny(denial) => {
                let message = denial_message(name, &eviction.pod, &denial);
                Step::Answer(self.refuse(zdb, shadow, denial_reason(&denial), message))
            }
        }
    }

    /// A denial, or in shadow mode (spec.dryRun) an allowance that is counted, warned about and
    /// published as an event.
    fn refuse(
        &self,
        zdb: &ZoneDisruptionBudget,
        shadow: bool,
        why: &'static str,
        message: String,
    ) -> Verdict {
        if !shadow {
            return denied(why, message);
        }
        let namespace = zdb.namespace().unwrap_or_default();
        let name = zdb.name_any();
        self.metrics.shadow_denial(&namespace, &name);
        tracing::info!(namespace = %namespace, budget = %name, reason = why, message = %message, "shadow mode: eviction allowed that would have been denied");
        let events = self.events.clone();
        let regarding = zdb.object_ref(&());
        let note = format!("shadow mode (spec.dryRun): allowed, would have denied: {message}");
        // Best effort and off the admission path: the answer must not wait for the event.
        tokio::spawn(async move {
            events
                .warning(&regarding, "WouldDenyEviction", "Evict", &note)
                .await;
        });
        Verdict {
            allowed: true,
            reason: reason::SHADOW,
            message: Some(format!(
                "ZoneDisruptionBudget {name} is in shadow mode (spec.dryRun): allowed, but it would have denied: {message}"
            )),
        }
    }
}
