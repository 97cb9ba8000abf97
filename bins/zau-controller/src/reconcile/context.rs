//! What a reconcile works with: the settings, the caches and clients ([`Context`]), and what the
//! controller remembers of each ZoneAwareUpdate between reconciles ([`Memory`]).

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use kube::runtime::reflector::Store;
use kube::{Client, ResourceExt};
use zone_api::{ZoneAwareUpdate, ZoneAwareUpdateStatus};
use zone_operator::controller::ReconcileContext;
use zone_operator::metrics::ObjectSeries;
use zone_operator::{ControllerMetrics, EventPublisher, LeaderHandle};

use crate::alarm::{AlarmSource, AlarmState};
use crate::cli::PodRemoval;
use crate::gate::{Endpoint, GatePolls};
use crate::metrics::ZauMetrics;
use crate::watches::Caches;

/// After a failed reconcile (API error), retry after this long.
pub const ERROR_RETRY: Duration = Duration::from_secs(5);

/// Settings from the command line.
#[derive(Clone, Debug)]
pub struct Settings {
    pub alarm_poll_interval: Duration,
    pub pod_removal: PodRemoval,
    pub field_manager: String,
}

/// Everything a reconcile needs.
pub struct Context {
    pub client: Client,
    pub zaus: Store<ZoneAwareUpdate>,
    pub caches: Caches,
    pub alarms: Arc<dyn AlarmSource>,
    /// The alert gates' answers, one per endpoint, shared by every rollout.
    pub gates: GatePolls,
    pub events: EventPublisher,
    pub leader: LeaderHandle,
    pub metrics: ControllerMetrics,
    pub zau_metrics: ZauMetrics,
    pub settings: Settings,
    /// Per ZoneAwareUpdate UID, what the controller remembers between reconciles.
    pub memory: Mutex<HashMap<String, Memory>>,
    /// The objects (and zones) with metric series, to drop those of deleted ones.
    pub series: ObjectSeries,
}

/// What the controller remembers of a ZoneAwareUpdate between reconciles (keyed by UID).
#[derive(Default, Clone)]
pub struct Memory {
    /// The status last written, with the object's resourceVersion after the write: the cache may
    /// not have seen the write yet, and a stale `updateStep` would size the next batch wrongly.
    pub(super) written: Option<(u64, ZoneAwareUpdateStatus)>,
    /// Pods removed and not yet seen terminating in the cache: no new plan until they are, so a
    /// stale cache can never produce a second batch.
    pub(super) expected: Vec<Expected>,
    /// Zone of the last batch (for the zone-change event).
    pub(super) last_batch_zone: Option<String>,
    /// Last dry-run batch reported (one event per distinct plan).
    pub(super) last_dry_run: Option<Vec<String>>,
    /// The alarm's last state and when it was read: while pods are being replaced (no batch
    /// due) it is reused for an alarm poll interval; a due batch always reads it fresh.
    pub(super) alarm: Option<(Instant, AlarmState)>,
    /// The alert gate's endpoint as last resolved (Service address, Secrets), for the gate it
    /// was resolved from; resolved again after a poll interval or a failed connection.
    pub(super) gate_endpoint: Option<ResolvedGate>,
}

/// An alert gate's endpoint, resolved at `at`.
#[derive(Clone)]
pub(super) struct ResolvedGate {
    pub(super) gate: zone_api::zau::ValidAlertGate,
    pub(super) at: Instant,
    pub(super) endpoint: Endpoint,
}

/// A pod removed by the controller, until the cache shows it terminating or replaced.
#[derive(Clone)]
pub(super) struct Expected {
    pub(super) name: String,
    pub(super) uid: String,
    pub(super) at: Instant,
}

impl ReconcileContext for Context {
    fn failure_policy(&self) -> (&ControllerMetrics, Duration) {
        (&self.metrics, ERROR_RETRY)
    }
}

impl Context {
    pub(super) fn remember<T>(&self, uid: &str, f: impl FnOnce(&mut Memory) -> T) -> T {
        let mut memory = self.memory.lock().unwrap_or_else(PoisonError::into_inner);
        f(memory.entry(uid.to_string()).or_default())
    }

    /// Forgets ZoneAwareUpdates that no longer exist (and their metric series).
    pub(super) fn forget_deleted(&self) {
        let state = self.zaus.state();
        let uids: BTreeSet<String> = state.iter().filter_map(|zau| zau.uid()).collect();
        self.memory
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|uid, _| uids.contains(uid));
        let live = state
            .iter()
            .map(|zau| (zau.namespace().unwrap_or_default(), zau.name_any()))
            .collect();
        self.series.forget_deleted(&live, |namespace, name, zones| {
            self.zau_metrics.forget(namespace, name, zones);
        });
    }

    /// The status a reconcile starts from: our last write unless the cache has a newer one.
    pub(super) fn starting_status(
        &self,
        zau: &ZoneAwareUpdate,
        uid: &str,
    ) -> ZoneAwareUpdateStatus {
        let cached = zau.status.clone().unwrap_or_default();
        self.remember(uid, |m| match &m.written {
            Some((rv, written)) if *rv >= resource_version(zau) => written.clone(),
            _ => cached,
        })
    }
}

pub(super) fn resource_version(zau: &ZoneAwareUpdate) -> u64 {
    zau.resource_version()
        .and_then(|rv| rv.parse().ok())
        .unwrap_or(0)
}
