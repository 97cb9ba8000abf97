//! **observe**: the StatefulSet a valid spec names and its pods, read from the caches as the
//! planner sees them; and the pods removed earlier that the caches do not show leaving yet.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::core::{Selector, SelectorExt};
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use zone_api::conditions::Conditions;
use zone_api::zau::RolloutTarget;
use zone_api::zau::StatefulSetProgress;
use zone_api::zau::{condition, reason};
use zone_api::{ValidZau, ZoneAwareUpdateStatus};
use zone_operator::Invalid;
use zone_topology::rollout::RolloutPod;
use zone_views::rollout::{self, PlannedPods};

use super::Step;
use super::validate::{self, Target};
use crate::gate;
use crate::pods;

/// After a removal, the cache must show the pod terminating (or replaced) before the next plan;
/// if it does not within this time (a lost watch event), plan anyway: the eviction was answered,
/// so the API server has the pod terminating.
const EXPECTATION_TIMEOUT: Duration = Duration::from_secs(30);

/// What observing found: the StatefulSets and their pods as the planner sees them.
pub(super) struct Observed {
    pub(super) valid: ValidZau,
    /// `spec.alertGate.matchers`, parsed (when there is a gate).
    pub(super) selector: Option<gate::Selector>,
    pub(super) target: Target,
    /// The StatefulSets' pods in the cache.
    pub(super) cached: Vec<Arc<Pod>>,
    pub(super) planned: Vec<RolloutPod>,
    /// A rollout group's StatefulSets for the status (empty for spec.statefulset).
    pub(super) group: Vec<StatefulSetProgress>,
    /// When the first Ready-but-not-yet-available pod turns available.
    pub(super) soonest_available: Option<Duration>,
}

impl Step<'_> {
    /// Reads the caches: the spec must be valid and name OnDelete StatefulSets.
    pub(super) fn observe(&self) -> Result<Observed, Invalid> {
        let valid = validate::spec(self.zau)?;
        let selector = validate::gate_selector(&valid)?;
        let sets = self
            .statefulsets(&valid.target)?
            .iter()
            .map(|set| validate::statefulset(set))
            .collect::<Result<Vec<_>, _>>()?;
        let target = validate::target(&valid, sets)?;
        let cached = self.ctx.caches.pods.state_filter(|pod| {
            pod.metadata.namespace.as_deref() == Some(self.namespace)
                && pods::owner_statefulset(pod).is_some_and(|owner| target.set(owner).is_some())
        });
        let zones = &self.ctx.caches.zones;
        let with_zones = cached.iter().map(|pod| (pod.as_ref(), zones.zone_of(pod)));
        let PlannedPods {
            planned,
            old,
            soonest_available,
        } = rollout::plan_pods(&target, with_zones, Timestamp::now());
        let group = group_status(&target, &old);
        Ok(Observed {
            valid,
            selector,
            target,
            cached,
            planned,
            group,
            soonest_available,
        })
    }

    /// The StatefulSet the spec names, or those its selector selects (at least one).
    fn statefulsets(&self, target: &RolloutTarget) -> Result<Vec<Arc<StatefulSet>>, Invalid> {
        let statefulsets = &self.ctx.caches.statefulsets;
        let (sets, missing) = match target {
            RolloutTarget::StatefulSet(name) => (
                statefulsets
                    .get(&ObjectRef::new(name).within(self.namespace))
                    .into_iter()
                    .collect(),
                format!("StatefulSet {}/{name} does not exist", self.namespace),
            ),
            RolloutTarget::Group(selector) => {
                let selector = Selector::try_from(selector.clone()).map_err(|error| Invalid {
                    reason: reason::INVALID_SPEC,
                    message: format!("spec.selector: {error}"),
                })?;
                (
                    statefulsets.state_filter(|set| {
                        set.metadata.namespace.as_deref() == Some(self.namespace)
                            && selector.matches(set.labels())
                    }),
                    format!(
                        "no StatefulSet of namespace {} matches spec.selector",
                        self.namespace
                    ),
                )
            }
        };
        if sets.is_empty() {
            return Err(Invalid {
                reason: reason::STATEFULSET_NOT_FOUND,
                message: missing,
            });
        }
        Ok(sets)
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

/// A rollout group's StatefulSets as the status shows them (pure; none for one StatefulSet).
fn group_status(target: &Target, old: &BTreeMap<String, i32>) -> Vec<StatefulSetProgress> {
    if !target.grouped {
        return Vec::new();
    }
    target
        .sets
        .iter()
        .map(|set| StatefulSetProgress {
            name: set.name.clone(),
            current_revision: set.current_revision.clone(),
            update_revision: set.update_revision.clone().unwrap_or_default(),
            replicas: i32::try_from(set.replicas).unwrap_or(i32::MAX),
            old_replicas: old.get(set.name.as_str()).copied().unwrap_or(0),
        })
        .collect()
}
