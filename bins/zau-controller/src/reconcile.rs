//! One reconcile of a ZoneAwareUpdate, as a pipeline of steps, each in its module:
//!
//! 1. **observe** ([`observe`]): read the StatefulSet and its pods from the caches, once the
//!    spec and the StatefulSet pass the pure checks of [`validate`];
//! 2. **plan** (pure, [`plan`]): `zone_topology::rollout` and the status it implies;
//! 3. **pause** ([`pause`]): ask what may hold the rollout (the alarm, the alert gate,
//!    `spec.paused`, a bake between zones) and record it (pure);
//! 4. **apply** ([`apply`]): remove one batch through the Eviction API, or record completion on
//!    the StatefulSet;
//! 5. **status** ([`status`]): what the action changed (pure), then the status written when it
//!    changed, with the events and metrics.
//!
//! What a reconcile works with, and remembers between reconciles, is in [`context`].

mod apply;
mod context;
mod observe;
mod pause;
mod plan;
mod status;
mod validate;

use std::sync::Arc;

use kube::ResourceExt;
use kube::runtime::controller::Action;
use zone_api::conditions::Conditions;
use zone_api::zau::{condition, reason};
use zone_api::{ZoneAwareUpdate, ZoneAwareUpdateStatus};
use zone_operator::LeaderError;
use zone_operator::controller::Failure;
use zone_operator::status::StatusError;

use crate::removal::RemovalError;
pub use context::{Context, Settings};

#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    #[error("ZoneAwareUpdate {0} has no namespace or UID")]
    Incomplete(String),
    #[error(transparent)]
    Status(#[from] StatusError),
    #[error("cannot set status.currentRevision of StatefulSet {namespace}/{name}")]
    CompleteStatefulSet {
        namespace: String,
        name: String,
        #[source]
        source: StatusError,
    },
    #[error(transparent)]
    Remove(#[from] RemovalError),
    #[error("cannot confirm leadership before a batch")]
    Leader(#[source] LeaderError),
}

impl Failure for ReconcileError {
    fn kind(&self) -> &'static str {
        match self {
            ReconcileError::Incomplete(_) => "Incomplete",
            ReconcileError::Status(_) => "WriteStatus",
            ReconcileError::CompleteStatefulSet {
                source: StatusError::Reread { .. },
                ..
            } => "ReadStatefulSet",
            ReconcileError::CompleteStatefulSet { .. } => "CompleteStatefulSet",
            ReconcileError::Remove(_) => "RemovePod",
            ReconcileError::Leader(_) => "Leader",
        }
    }
}

/// The status being built by one reconcile and the events it will publish once written.
pub type Draft = zone_operator::Draft<ZoneAwareUpdateStatus>;

/// Entry point for the kube Controller.
pub async fn reconcile(
    zau: Arc<ZoneAwareUpdate>,
    ctx: Arc<Context>,
) -> Result<Action, ReconcileError> {
    let _timer = ctx.metrics.reconcile_timer();
    let (Some(namespace), Some(uid)) = (zau.namespace(), zau.uid()) else {
        return Err(ReconcileError::Incomplete(zau.name_any()));
    };
    ctx.forget_deleted();

    let previous = ctx.starting_status(&zau, &uid);
    let mut draft = Draft::new(ZoneAwareUpdateStatus {
        observed_generation: zau.metadata.generation,
        ..previous.clone()
    });
    let step = Step {
        zau: &zau,
        ctx: &ctx,
        uid: &uid,
        namespace: &namespace,
        previous: &previous,
    };
    // Even when deciding failed half-way (an API error after part of a batch was removed), what
    // was done is recorded: the status carries the step.
    let outcome = step.run(&mut draft).await;
    let summary = draft.status.summary();
    draft.status.summarize(summary);

    if let Err(error) = status::write(&ctx, &zau, &uid, &previous, &draft.status).await {
        // The decision error (if any) is the more useful one to report.
        outcome?;
        return Err(error.into());
    }
    status::publish(&ctx, &zau, &namespace, &previous, draft).await;
    outcome
}

/// What one reconcile works on.
struct Step<'a> {
    zau: &'a ZoneAwareUpdate,
    ctx: &'a Context,
    uid: &'a str,
    namespace: &'a str,
    previous: &'a ZoneAwareUpdateStatus,
}

impl Step<'_> {
    async fn run(&self, draft: &mut Draft) -> Result<Action, ReconcileError> {
        let observed = match self.observe() {
            Ok(observed) => observed,
            Err(invalid) => return Ok(draft.refuse(invalid, validate::BLOCKED)),
        };
        draft
            .status
            .set_condition(condition::INVALID, false, reason::VALID, "");
        let Some(update_revision) = observed.target.update_revision.clone() else {
            // Its status update will trigger the next reconcile.
            draft.status.set_condition(
                condition::PROGRESSING,
                true,
                reason::WAITING_FOR_STATEFULSET,
                "waiting for the StatefulSet controller to observe the latest spec",
            );
            return Ok(Action::await_change());
        };
        let (progress, next) = plan::rollout(self.previous, &observed, &update_revision);
        let revisions = plan::Revisions {
            update: &update_revision,
            current: &observed.target.current_revision,
            group: &observed.group,
        };
        plan::record_progress(self.previous, &revisions, &progress, draft);
        if let Some(action) = self.pending_removals(&observed.cached, &mut draft.status) {
            return Ok(action);
        }
        self.act(&observed, next, progress.total_old() > 0, draft)
            .await
    }
}
