//! The shards' rollout (pure): whether their StatefulSets are rolled zone by zone, the
//! ZoneAwareUpdate to write (when it is missing, when the hold changes, on a full apply), the
//! hold, and what `status.rollout` says.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::time::Duration;

use zone_api::ValidSprom;
use zone_api::sprom::{ShardRolloutStatus, reason};
use zone_api::zau::PAUSED_BECAUSE_ANNOTATION;
use zone_operator::PendingEvents;

use super::write::{Child, Write};
use crate::children::build::BuildInput;
use crate::children::rollout;
use crate::health::verdict::ShardConfig;
use crate::reconcile::observe::{Observed, ObservedRollout};

/// How soon a reconcile looks again while the shards roll: the ZoneAwareUpdate's progress is
/// mirrored, and no cache watches it.
pub const ROLLING_LOOK: Duration = Duration::from_secs(10);

/// What the rollout step decided.
#[derive(Debug, Default, PartialEq)]
pub struct RolloutPlan {
    pub write: Option<Write>,
    /// The ZoneAwareUpdate's name, when one is wanted (a prune deletes it otherwise).
    pub wanted: Option<String>,
    pub status: Option<ShardRolloutStatus>,
    /// Look again soon: pods are being rolled.
    pub look_again: Option<Duration>,
}

/// `valid` as the shards are built: without a zone-aware rollout where the API server serves
/// no ZoneAwareUpdate or no zau-controller runs (the StatefulSets roll themselves, as before
/// there was one; one left is pruned on the next full apply). Cloned only then.
pub fn without_api<'a>(valid: Cow<'a, ValidSprom>, observed: &Observed) -> Cow<'a, ValidSprom> {
    let why = match observed.rollout {
        ObservedRollout::NoApi => {
            "the API server serves no ZoneAwareUpdate (its CRD is not installed)"
        }
        ObservedRollout::Disabled => "--zone-aware-rollouts=false (no zau-controller runs)",
        ObservedRollout::Absent | ObservedRollout::Found(_) => return valid,
    };
    if valid.rollout.is_none() {
        return valid;
    }
    tracing::debug!(why, "the shards roll as with strategy RollingUpdate");
    let mut valid = valid;
    valid.to_mut().rollout = None;
    valid
}

/// The rollout of `input`'s shards given what was observed and the shards' configuration
/// verdicts (None: none probed yet).
pub fn plan(
    input: &BuildInput<'_>,
    observed: &Observed,
    verdicts: Option<&[ShardConfig]>,
) -> RolloutPlan {
    let Some(spec) = &input.valid.rollout else {
        return RolloutPlan::default();
    };
    let existing = observed.rollout.found();
    let progress = existing.and_then(|zau| zau.status.as_ref());
    let zone = progress.and_then(|status| status.current_zone.as_deref());
    // Held only while pods are being replaced: a shard refusing its configuration otherwise
    // is the ConfigLoaded condition's to tell, not a rollout's.
    let rolling = progress.is_some_and(|status| status.total_old_replicas > 0);
    let held = rolling
        .then(|| rollout::hold(verdicts, &input.valid.layout, zone))
        .flatten();
    let zau = rollout::build(input, spec, held.as_deref());
    let differs = existing.is_none_or(|existing| {
        let because = |annotations: Option<&BTreeMap<String, String>>| {
            annotations
                .and_then(|a| a.get(PAUSED_BECAUSE_ANNOTATION))
                .cloned()
        };
        existing.spec.paused != zau.spec.paused
            || because(existing.metadata.annotations.as_ref())
                != because(zau.metadata.annotations.as_ref())
    });
    let status = rollout::status(input.name, existing, held.as_deref());
    RolloutPlan {
        wanted: Some(rollout::name(input.name)),
        write: (observed.full_apply || differs)
            .then(|| Write::Apply(Child::ZoneAwareUpdate(Box::new(zau)))),
        status: Some(status),
        // Mid-rollout the pods being replaced reconcile too (they are watched), but a hold or a
        // bake may change while no pod does.
        look_again: rolling.then_some(ROLLING_LOOK),
    }
}

/// A Warning when the controller starts holding the rollout, a Normal event when it stops.
pub fn events(
    previous: Option<&ShardRolloutStatus>,
    now: Option<&ShardRolloutStatus>,
    events: &mut PendingEvents,
) {
    let before = previous.and_then(|status| status.held_by.as_deref());
    let after = now.and_then(|status| status.held_by.as_deref());
    match (before, after) {
        (None, Some(why)) => events.warning(reason::ROLLOUT_HELD, "Rollout", why),
        (Some(_), None) => events.normal(
            reason::ROLLOUT_RESUMED,
            "Rollout",
            "every shard of the zone being rolled loads its configuration: the rollout resumes",
        ),
        _ => {}
    }
}
