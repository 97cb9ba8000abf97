//! Rollout planning for ZoneAwareUpdate: which old-revision pods of an `OnDelete` StatefulSet (or
//! of a rollout group of them, each pod against its own StatefulSet's update revision) to remove
//! next, zone by zone, in exponentially growing batches — or why to wait.
//!
//! The caller reads the StatefulSet, its pods and the ZoneAwareUpdate status, calls [`plan`], and
//! removes the returned pods. Everything a controller needs to explain itself (old replicas per
//! zone, current zone, wait reasons) comes back with the plan.

use std::collections::BTreeMap;
use std::fmt;

use crate::int_or_percent::IntOrPercent;
use crate::zone::Zone;

/// `exponentialFactor`'s default, as the Go controller has it.
pub const DEFAULT_EXPONENTIAL_FACTOR: &str = "2.0";

/// The label the StatefulSet controller puts on every pod: the revision it was created from.
pub const REVISION_LABEL: &str = "controller-revision-hash";

/// A pod of the rolled StatefulSet (or of one of the group's) as the planner sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RolloutPod {
    pub name: String,
    pub ordinal: u32,
    pub zone: Zone,
    /// The [`REVISION_LABEL`] label.
    pub revision: String,
    /// `status.updateRevision` of the pod's StatefulSet: the pod is old while its revision
    /// differs. In a rollout group each StatefulSet has its own.
    pub update_revision: String,
    /// Ready, and for at least `minReadySeconds` (the caller applies that).
    pub ready: bool,
    /// Has a deletion timestamp.
    pub terminating: bool,
}

impl RolloutPod {
    /// Runs its StatefulSet's update revision.
    pub fn is_updated(&self) -> bool {
        self.revision == self.update_revision
    }
}

/// Everything the planner needs, read by the caller.
#[derive(Debug, Clone)]
pub struct RolloutInput<'a> {
    /// `spec.replicas` of the StatefulSet (of every StatefulSet of a group, summed).
    pub replicas: u32,
    /// What is rolled out: `status.updateRevision` of the StatefulSet (for a group, each
    /// StatefulSet's, joined). When it changes, batches start again at one pod.
    pub update_revision: &'a str,
    /// The update revision the ZoneAwareUpdate status last recorded, if any.
    pub last_update_revision: Option<&'a str>,
    /// `status.updateStep` of the ZoneAwareUpdate.
    pub step: u32,
    /// `status.currentZone` of the ZoneAwareUpdate: a zone started (for instance because its
    /// old pods were down) is finished before the next one, as long as the update revision is
    /// the same.
    pub last_zone: Option<&'a Zone>,
    /// Resolved `maxUnavailable` (see [`resolve_max_unavailable`]).
    pub max_unavailable: u32,
    /// Parsed `exponentialFactor` (see [`parse_exponential_factor`]).
    pub exponential_factor: f64,
    pub pods: &'a [RolloutPod],
}

/// The next thing to do.
#[derive(Debug, Clone, PartialEq)]
pub enum Plan {
    /// Remove these pods (in this order) so the StatefulSet recreates them at the new revision.
    Remove(Batch),
    /// Remove nothing now; a later change (a pod becoming Ready, created, gone) unblocks.
    Wait(WaitReason),
    /// Every pod runs the update revision and is Ready.
    Complete,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Batch {
    pub zone: Zone,
    /// Pod names, already-unavailable ones first, then by ordinal descending.
    pub pods: Vec<String>,
    /// The step this batch was sized for.
    pub step: u32,
    /// The step to record once the batch is removed.
    pub next_step: u32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WaitReason {
    /// Pods are still terminating: removals already in flight.
    Terminating(Vec<String>),
    /// Fewer pods exist than replicas: a removed pod not yet recreated is unavailable too.
    MissingPods { missing: u32 },
    /// Update-revision pods are not Ready yet: the new revision has not proven itself.
    UpdatedNotReady(Vec<String>),
}

impl fmt::Display for WaitReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WaitReason::Terminating(pods) => write!(f, "pods terminating: {}", pods.join(", ")),
            WaitReason::MissingPods { missing } => {
                write!(
                    f,
                    "{missing} pod(s) missing, waiting for the StatefulSet to recreate them"
                )
            }
            WaitReason::UpdatedNotReady(pods) => {
                write!(f, "updated pods not ready: {}", pods.join(", "))
            }
        }
    }
}

/// What the status should say, whatever the plan.
#[derive(Debug, Clone, PartialEq)]
pub struct Progress {
    /// Old-revision pods per zone (every observed zone, zero included).
    pub old_replicas: BTreeMap<Zone, u32>,
    /// The zone being updated (or about to be), if any old pod is left.
    pub current_zone: Option<Zone>,
    /// The step after a possible reset for a new update revision.
    pub step: u32,
}

impl Progress {
    pub fn total_old(&self) -> u32 {
        self.old_replicas.values().sum()
    }
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RolloutError {
    #[error("exponentialFactor {0:?} is not a number")]
    FactorNotANumber(String),
    #[error("exponentialFactor {0} must be 0 (no exponential growth) or at least 1")]
    FactorOutOfRange(String),
    #[error("maxUnavailable {0} must allow at least one pod")]
    MaxUnavailableZero(IntOrPercent),
}

/// Parses the Go field's string form. Factors in (0, 1) would shrink batches to zero pods and hot
/// loop the Go controller; they, negatives, NaN and infinities are rejected.
pub fn parse_exponential_factor(text: &str) -> Result<f64, RolloutError> {
    let text = if text.trim().is_empty() {
        DEFAULT_EXPONENTIAL_FACTOR
    } else {
        text.trim()
    };
    let factor: f64 = text
        .parse()
        .map_err(|_| RolloutError::FactorNotANumber(text.to_string()))?;
    if !factor.is_finite() || !(factor == 0.0 || factor >= 1.0) {
        return Err(RolloutError::FactorOutOfRange(text.to_string()));
    }
    Ok(factor)
}

/// `maxUnavailable` against `spec.replicas`, percentages rounded up (as the Go controller does).
/// A zero value would stall the rollout forever, so it is an error; a positive percentage of a
/// tiny StatefulSet still allows one pod.
pub fn resolve_max_unavailable(value: IntOrPercent, replicas: u32) -> Result<u32, RolloutError> {
    match value {
        IntOrPercent::Int(0) | IntOrPercent::Percent(0) => {
            Err(RolloutError::MaxUnavailableZero(value))
        }
        IntOrPercent::Int(_) => Ok(value.resolve(replicas)),
        IntOrPercent::Percent(_) => Ok(value.resolve(replicas).max(1)),
    }
}

/// Batch size at `step`: `min(floor(factor^step), max_unavailable)`; factor 0 means always
/// `max_unavailable`.
pub fn batch_size(factor: f64, step: u32, max_unavailable: u32) -> u32 {
    if factor == 0.0 {
        return max_unavailable;
    }
    let exponent = i32::try_from(step).unwrap_or(i32::MAX);
    let size = factor.powi(exponent).floor();
    if !size.is_finite() || size >= f64::from(max_unavailable) {
        max_unavailable
    } else {
        // 1 <= size < max_unavailable here, so the conversion is exact.
        (size as u32).max(1)
    }
}

/// Plans the next step of the rollout.
pub fn plan(input: &RolloutInput<'_>) -> (Progress, Plan) {
    let mut progress = progress(input);
    if let Some(reason) = wait_reason(input) {
        return (progress, Plan::Wait(reason));
    }

    // Only old-revision pods can be unavailable from here on.
    let mut unavailable: BTreeMap<Zone, Vec<&RolloutPod>> = BTreeMap::new();
    for pod in input.pods.iter().filter(|pod| !pod.ready) {
        unavailable.entry(pod.zone.clone()).or_default().push(pod);
    }
    let several_zones_down = unavailable.len() > 1;
    let zone = match (unavailable.keys().next(), &progress.current_zone) {
        (None, None) => return (progress, Plan::Complete),
        (None, Some(zone)) => zone.clone(),
        // Every unavailable pod is old: their zone goes first, or the rollout (which may be what
        // fixes them) would wait for them forever. With pods down in several zones, only the
        // first zone's down pods are replaced (see below).
        (Some(zone), _) => zone.clone(),
    };
    progress.current_zone = Some(zone.clone());
    let batch = batch(input, zone, progress.step, several_zones_down);
    (progress, Plan::Remove(batch))
}

/// Whether `pod` runs another revision than the update revision.
fn is_old(pod: &RolloutPod) -> bool {
    !pod.is_updated()
}

/// The progress before deciding: the old pods per zone, the zone to update, the step.
fn progress(input: &RolloutInput<'_>) -> Progress {
    let same_revision = input.last_update_revision == Some(input.update_revision);
    // A new rollout, or a rollback: start slowly again.
    let step = if same_revision { input.step } else { 0 };

    let mut old_replicas: BTreeMap<Zone, u32> = BTreeMap::new();
    for pod in input.pods {
        *old_replicas.entry(pod.zone.clone()).or_default() += u32::from(is_old(pod));
    }
    // The zone in progress is finished first; otherwise zones go in ascending order.
    let started_zone = input
        .last_zone
        .filter(|zone| same_revision && old_replicas.get(*zone).is_some_and(|n| *n > 0))
        .cloned();
    let first_old_zone = started_zone.or_else(|| {
        old_replicas
            .iter()
            .find(|(_, count)| **count > 0)
            .map(|(zone, _)| zone.clone())
    });
    Progress {
        old_replicas,
        current_zone: first_old_zone,
        step,
    }
}

/// Why no pod may be removed yet, if so: pods terminating, missing, or updated but not ready.
fn wait_reason(input: &RolloutInput<'_>) -> Option<WaitReason> {
    let terminating = names(input.pods.iter().filter(|pod| pod.terminating));
    if !terminating.is_empty() {
        return Some(WaitReason::Terminating(terminating));
    }
    let present = u32::try_from(input.pods.len()).unwrap_or(u32::MAX);
    if present < input.replicas {
        return Some(WaitReason::MissingPods {
            missing: input.replicas - present,
        });
    }
    let updated_not_ready = names(input.pods.iter().filter(|pod| !is_old(pod) && !pod.ready));
    if !updated_not_ready.is_empty() {
        return Some(WaitReason::UpdatedNotReady(updated_not_ready));
    }
    None
}

/// The old pods of `zone` to remove at `step`: every one that is down, and healthy ones up to
/// the batch size (none while another zone is down too).
fn batch(input: &RolloutInput<'_>, zone: Zone, step: u32, several_zones_down: bool) -> Batch {
    let mut old_in_zone: Vec<&RolloutPod> = input
        .pods
        .iter()
        .filter(|pod| pod.zone == zone && is_old(pod))
        .collect();
    old_in_zone.sort_by(|a, b| b.ordinal.cmp(&a.ordinal).then_with(|| a.name.cmp(&b.name)));
    let (down, up): (Vec<&RolloutPod>, Vec<&RolloutPod>) =
        old_in_zone.into_iter().partition(|pod| !pod.ready);

    let size = batch_size(input.exponential_factor, step, input.max_unavailable);
    let quota = if several_zones_down {
        // Another zone is already disrupted: replacing pods that are down removes no
        // availability, but taking down a healthy one would disrupt a second zone.
        0
    } else {
        size.saturating_sub(u32::try_from(down.len()).unwrap_or(u32::MAX)) as usize
    };
    let healthy: Vec<&RolloutPod> = up.into_iter().take(quota).collect();
    let next_step = if healthy.is_empty() {
        step
    } else {
        step.saturating_add(1)
    };
    let pods = names(down.into_iter().chain(healthy));
    Batch {
        zone,
        pods,
        step,
        next_step,
    }
}

fn names<'a>(pods: impl Iterator<Item = &'a RolloutPod>) -> Vec<String> {
    pods.map(|pod| pod.name.clone()).collect()
}

/// The batches ahead of a rollout, and where the preview had to stop.
#[derive(Debug, Clone, PartialEq)]
pub struct Preview {
    pub batches: Vec<Batch>,
    /// A wait that settling the pods in flight cannot end (pods missing: their names are not
    /// known), after `batches`.
    pub stopped: Option<WaitReason>,
}

/// The batches the controller will remove from now on if nothing else changes (no pause, no
/// refusal, no new revision), in order: [`plan`] itself, run again and again as if every pod it
/// removes came back at once at its StatefulSet's update revision and Ready. Pods in flight now
/// are settled first the same way: a terminating pod comes back updated, an updated pod turns
/// Ready. Bounded: each batch updates at least one pod.
pub fn preview(input: &RolloutInput<'_>) -> Preview {
    let mut pods = input.pods.to_vec();
    for pod in &mut pods {
        if pod.terminating {
            pod.terminating = false;
            pod.revision.clone_from(&pod.update_revision);
        }
        if pod.is_updated() {
            pod.ready = true;
        }
    }
    let mut step = input.step;
    let mut last_zone = input.last_zone.cloned();
    let mut batches: Vec<Batch> = Vec::new();
    for _ in 0..=pods.len() {
        let next = RolloutInput {
            step,
            last_zone: last_zone.as_ref(),
            // After a batch the status records the revision it rolls out.
            last_update_revision: if batches.is_empty() {
                input.last_update_revision
            } else {
                Some(input.update_revision)
            },
            pods: &pods,
            ..input.clone()
        };
        let (_, plan) = plan(&next);
        let batch = match plan {
            Plan::Complete => break,
            Plan::Wait(reason) => {
                return Preview {
                    batches,
                    stopped: Some(reason),
                };
            }
            Plan::Remove(batch) => batch,
        };
        for pod in pods.iter_mut().filter(|pod| batch.pods.contains(&pod.name)) {
            pod.revision.clone_from(&pod.update_revision);
            pod.ready = true;
        }
        step = batch.next_step;
        last_zone = Some(batch.zone.clone());
        batches.push(batch);
    }
    Preview {
        batches,
        stopped: None,
    }
}

#[cfg(test)]
mod tests;
