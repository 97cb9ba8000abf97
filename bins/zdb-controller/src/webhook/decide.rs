//! Deciding one eviction with the budget that selects its pod: a refusal from a recent copy, or
//! a fresh read, and an eviction that read says to record queued for its budget's next write
//! (group commit, see `commit.rs`), which decides it again with the others of its batch.

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::api::ListParams;
use kube::{Api, Resource, ResourceExt};
use zone_api::{ZoneAwareUpdate, ZoneDisruptionBudget};
use zone_topology::Zone;

use super::admission::Eviction;
use super::judge::Judge;
use super::rollout;
use super::verdict::{Verdict, allowed, denied};
use crate::metrics::reason;
use zone_views::budget::batch::{self, Assessment, Candidate};
use zone_views::budget::pods;

/// Kept back from the deadline when waiting for a budget's write: the answer still has to be
/// written and sent.
const DEADLINE_MARGIN: Duration = Duration::from_millis(150);

/// What stays the same through one decision.
struct Deciding<'a> {
    eviction: &'a Eviction,
    api: &'a Api<ZoneDisruptionBudget>,
    /// The budget that selects the pod.
    name: &'a str,
}

impl Judge {
    /// Decides with the budget `name`. A refusal may come from `recent`, a copy read fresh a
    /// moment ago (see [`RecentBudgets`](super::recent::RecentBudgets)); anything else is decided
    /// from a fresh read: `early`, made alongside the pod's (`Some(None)`: it was not found).
    /// An eviction to record joins its budget's next batch.
    pub(super) async fn decide(
        self: &Arc<Self>,
        eviction: &Eviction,
        pod: &Pod,
        api: &Api<ZoneDisruptionBudget>,
        name: &str,
        recent: Option<Arc<ZoneDisruptionBudget>>,
        early: Option<Option<ZoneDisruptionBudget>>,
    ) -> Verdict {
        let started = Instant::now();
        let zone = self.zones.zone_of(pod);
        let rollout = self.is_rollout(eviction, pod, &zone).await;
        let candidate = Candidate {
            pod: eviction.pod.clone(),
            zone,
            condition: pods::condition(pod),
            created_ms: pods::created_ms(pod),
            dry_run: eviction.dry_run,
            rollout,
        };
        let at = zone_api::conditions::now();
        if let Some(zdb) = recent {
            let mut status = zdb.status.clone().unwrap_or_default();
            if let outcome @ Assessment::Refuse { .. } =
                batch::assess(name, &zdb, &mut status, &candidate, &at)
            {
                return self.verdict(&zdb, outcome);
            }
        }
        let deciding = Deciding {
            eviction,
            api,
            name,
        };
        let zdb = match self.read_budget(&deciding, early).await {
            Ok(zdb) => zdb,
            Err(verdict) => return verdict,
        };
        self.recent.remember(&zdb);
        let mut status = zdb.status.clone().unwrap_or_default();
        match batch::assess(name, &zdb, &mut status, &candidate, &at) {
            Assessment::Record { .. } => {}
            other => return self.verdict(&zdb, other),
        }
        drop(status);
        let time_left = self
            .deadline
            .saturating_sub(started.elapsed() + DEADLINE_MARGIN);
        self.record_in_batch(eviction, name, candidate, zdb, time_left)
            .await
    }

    /// Whether the eviction is the zau-controller's, for the rollout in progress of the pod
    /// (see [`rollout`](super::rollout)): asked by a `--rollout-user`, of a pod a
    /// ZoneAwareUpdate of the namespace, read fresh, is rolling in `zone`. Anyone else's, or
    /// when the updates cannot be read, it is judged as any eviction.
    async fn is_rollout(&self, eviction: &Eviction, pod: &Pod, zone: &Zone) -> bool {
        if !self.rollout_users.contains(&eviction.user) {
            return false;
        }
        let api: Api<ZoneAwareUpdate> = Api::namespaced(self.client.clone(), &eviction.namespace);
        match self.request(api.list(&ListParams::default())).await {
            Ok(zaus) => {
                let rolling = rollout::rolling(&zaus.items, pod, zone);
                if let Some(zau) = rolling {
                    tracing::debug!(namespace = %eviction.namespace, pod = %eviction.pod, zau, "an eviction of a rollout in progress");
                }
                rolling.is_some()
            }
            Err(error) => {
                tracing::warn!(error = %error, namespace = %eviction.namespace, "cannot list the ZoneAwareUpdates: the eviction is judged as anyone's");
                false
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

    /// A denial, or in shadow mode (spec.dryRun) an allowance that is counted, warned about and
    /// published as an event.
    pub(super) fn refuse(
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
