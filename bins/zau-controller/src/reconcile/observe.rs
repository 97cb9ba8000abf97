//! **observe**: the StatefulSet a valid spec names and its pods, read from the caches as the
//! planner sees them; and the pods removed earlier that the caches do not show leaving yet.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use zone_api::conditions::Conditions;
use zone_api::zau::{condition, reason};
use zone_api::{ValidZau, ZoneAwareUpdateStatus};
use zone_operator::Invalid;
use zone_topology::rollout::RolloutPod;

use super::Step;
use super::validate::{self, Target};
use crate::gate::Selector;
use crate::pods;

/// After a removal, the cache must show the pod terminating (or replaced) before the next plan;
/// if it does not within this time (a lost watch event), plan anyway: the eviction was answered,
/// so the API server has the pod terminating.
const EXPECTATION_TIMEOUT: Duration = Duration::from_secs(30);

/// What observing found: the StatefulSet and its pods as the planner sees them.
pub(super) struct Observed {
    pub(super) valid: ValidZau,
    /// `spec.alertGate.matchers`, parsed (when there is a gate).
    pub(super) selector: Option<Selector>,
    pub(super) set: Arc<StatefulSet>,
    pub(super) target: Target,
    /// The StatefulSet's pods in the cache.
    pub(super) cached: Vec<Arc<Pod>>,
    pub(super) planned: Vec<RolloutPod>,
    /// When the first Ready-but-not-yet-available pod turns available.
    pub(super) soonest_available: Option<Duration>,
}

impl Step<'_> {
    /// Reads the caches: the spec must be valid and name an OnDelete StatefulSet.
    pub(super) fn observe(&self) -> Result<Observed, Invalid> {
        let valid = validate::spec(self.zau)?;
        let selector = validate::gate_selector(&valid)?;
        let set = self
            .ctx
            .caches
            .statefulsets
            .get(&ObjectRef::new(&valid.statefulset).within(self.namespace))
            .ok_or_else(|| Invalid {
                reason: reason::STATEFULSET_NOT_FOUND,
                message: format!(
                    "StatefulSet {}/{} does not exist",
                    self.namespace, valid.statefulset
                ),
            })?;
        let target = validate::target(&valid, &set)?;
        let set_name = set.name_any();
        let cached = self.ctx.caches.pods.state_filter(|pod| {
            pod.metadata.namespace.as_deref() == Some(self.namespace)
                && pods::owner_statefulset(pod) == Some(set_name.as_str())
        });
        let now = Timestamp::now();
        let mut planned = Vec::with_capacity(cached.len());
        let mut soonest_available: Option<Duration> = None;
        for pod in &cached {
            let zone = self.ctx.caches.zones.zone_of(pod);
            if let Some(p) = pods::rollout_pod(pod, zone, target.min_ready_seconds, now) {
                if let Some(rest) = p.available_in {
                    soonest_available = Some(soonest_available.map_or(rest, |s| s.min(rest)));
                }
                planned.push(p.pod);
            }
        }
        Ok(Observed {
            valid,
            selector,
            set,
            target,
            cached,
            planned,
            soonest_available,
        })
    }

    /// Pods removed earlier must show up as terminating (or replaced) before planning again.
    pub(super) fn pending_removals(
        &self,
        cached: &[Arc<Pod>],
        status: &mut ZoneAwareUpdateStatus,
    ) -> Option<Action> {
        let pending = self.ctx.remember(self.uid, |m| {
            m.expected.retain(|expected| {
                let current = cached
                    .iter()
                    .find(|pod| pod.metadata.name.as_deref() == Some(expected.name.as_str()));
                let unchanged = current.is_some_and(|pod| {
                    pod.metadata.uid.as_deref() == Some(expected.uid.as_str())
                        && pod.metadata.deletion_timestamp.is_none()
                });
                unchanged && expected.at.elapsed() < EXPECTATION_TIMEOUT
            });
            m.expected
                .iter()
                .map(|e| e.name.clone())
                .collect::<Vec<_>>()
        });
        if pending.is_empty() {
            return None;
        }
        status.set_condition(
            condition::PROGRESSING,
            true,
            reason::WAITING,
            format!(
                "waiting for removed pods to terminate: {}",
                pending.join(", ")
            ),
        );
        Some(Action::requeue(EXPECTATION_TIMEOUT))
    }
}
