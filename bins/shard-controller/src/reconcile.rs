//! One reconcile of a ShardedPrometheus, as a pipeline:
//!
//! 1. **validate** (pure, [`validate`]): the spec, the shard layout and the user's scrape
//!    configs;
//! 2. **observe** ([`observe`]): every cache read and the ServiceAccount's access review
//!    ([`access`]);
//! 3. **plan** (pure, [`plan`]): the children, the retention of scaled-away shards, the final
//!    uploads, what to write and prune, the status and its events;
//! 4. **apply** ([`apply`]): the plan's writes and prunes;
//! 5. **status**: written, with its events, when it changed.
//!
//! A spec that cannot be acted on — invalid, unbuildable, or a child the API server rejects —
//! takes the one refusal path: `Invalid` with the reason, one event, no further change, and no
//! retry until the spec changes.

pub mod access;
pub mod apply;
pub mod observe;
pub mod plan;
pub mod validate;

use std::sync::Arc;

use k8s_openapi::jiff::Timestamp;
use kube::runtime::controller::Action;
use kube::{Api, Resource, ResourceExt};
use zone_api::ShardedPrometheus;
use zone_api::conditions::Conditions;
use zone_api::sprom::{ShardedPrometheusStatus, ShardingMode, condition, reason};
use zone_operator::children::ChildError;
use zone_operator::controller::Failure;
use zone_operator::status::{self, StatusError};
use zone_operator::{Blocked, Draft, Invalid, PendingEvents};

use crate::context::{Context, RESYNC};
use crate::monitoring::error::ObserveError;
use plan::{Plan, Target};

#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    #[error("ShardedPrometheus {0} has no namespace")]
    Incomplete(String),
    #[error(transparent)]
    Child(#[from] ChildError),
    #[error(transparent)]
    Status(#[from] StatusError),
    #[error(transparent)]
    Monitoring(#[from] ObserveError),
}

impl Failure for ReconcileError {
    fn kind(&self) -> &'static str {
        match self {
            ReconcileError::Incomplete(_) => "Incomplete",
            ReconcileError::Child(ChildError::Apply { .. }) => "ApplyChild",
            ReconcileError::Child(_) => "PruneChildren",
            ReconcileError::Status(_) => "WriteStatus",
            ReconcileError::Monitoring(_) => "ObserveMonitoring",
        }
    }
}

/// Why a reconcile stopped before its status: a spec to refuse, or an error to retry.
enum Stop {
    Refused(Invalid),
    Failed(ReconcileError),
}

impl From<Invalid> for Stop {
    fn from(invalid: Invalid) -> Self {
        Stop::Refused(invalid)
    }
}

impl From<ChildError> for Stop {
    /// A child the API server refuses as invalid (422: e.g. a storage change a StatefulSet
    /// cannot take) is a spec problem, reported once; any other error is retried.
    fn from(error: ChildError) -> Self {
        match error {
            ChildError::Apply {
                kind,
                name,
                source: kube::Error::Api(status),
            } if status.code == 422 => Stop::Refused(Invalid::new(
                reason::CHILD_REJECTED,
                format!("{kind} {name}: {}", status.message),
            )),
            error => Stop::Failed(error.into()),
        }
    }
}

/// Entry point for the kube Controller.
pub async fn reconcile(
    sprom: Arc<ShardedPrometheus>,
    ctx: Arc<Context>,
) -> Result<Action, ReconcileError> {
    let _timer = ctx.metrics.reconcile_timer();
    let Some(namespace) = sprom.namespace() else {
        return Err(ReconcileError::Incomplete(sprom.name_any()));
    };
    let name = sprom.name_any();
    ctx.forget_deleted();
    let previous = sprom.status.clone().unwrap_or_default();
    let target = Target {
        name: &name,
        namespace: &namespace,
        generation: sprom.metadata.generation.unwrap_or(0),
        previous: &previous,
    };
    let api: Api<ShardedPrometheus> = Api::namespaced(ctx.client.clone(), &namespace);
    if sprom.spec.paused {
        let status = paused(&previous);
        write_status(
            &ctx,
            &api,
            &sprom,
            &previous,
            status,
            PendingEvents::default(),
        )
        .await?;
        return Ok(Action::requeue(RESYNC));
    }
    match converge(&ctx, &sprom, &target).await {
        Ok(mut plan) => {
            plan.status
                .conditions
                .retain(|condition| condition.type_ != condition::PAUSED);
            ctx.sprom_metrics.observe(
                &namespace,
                &name,
                &plan.status,
                plan.next_deletion,
                plan.uploading,
            );
            let topology = sprom.spec.sharding_strategy.mode == ShardingMode::Topology;
            let zones_with_nodes = topology.then(|| ctx.zones.zones_present());
            ctx.sprom_metrics.zone_shards(
                &namespace,
                &name,
                zones_with_nodes.as_ref(),
                &plan.status,
            );
            let failover = sprom.spec.sharding_strategy.zoneless_targets
                == zone_topology::sharding::ZonelessTargets::Spread;
            ctx.sprom_metrics.failover(
                &namespace,
                &name,
                &plan.status,
                plan.zone_failover_after.filter(|_| topology && failover),
            );
            ctx.memory.series.note(&namespace, &name, []);
            write_status(&ctx, &api, &sprom, &previous, plan.status, plan.events).await?;
            Ok(Action::requeue(plan.requeue_after))
        }
        Err(Stop::Refused(invalid)) => {
            let (draft, action) = refusal(&previous, target.generation, invalid);
            write_status(&ctx, &api, &sprom, &previous, draft.status, draft.events).await?;
            Ok(action)
        }
        Err(Stop::Failed(error)) => Err(error),
    }
}

/// validate → observe → plan → apply: the plan that was carried out. The translation of the
/// monitoring read is part of the plan (pure). What it selected and referenced is committed as
/// soon as it ran, a refused spec included (the watches must follow it); the jobs its monitors
/// translated to, only once applied.
async fn converge(
    ctx: &Context,
    sprom: &ShardedPrometheus,
    target: &Target<'_>,
) -> Result<Plan, Stop> {
    let valid = crate::reconcile::validate::validate(sprom, &ctx.zone_label)?;
    let (mut observed, read) = crate::reconcile::observe::observe(ctx, sprom, &valid)
        .await
        .map_err(|error| Stop::Failed(error.into()))?;
    let (monitoring, memories) = crate::monitoring::translate::run(&valid, read);
    let (key, jobs) = ctx.remember_selection(memories);
    observed.monitoring = monitoring?;
    let plan = plan::plan(target, &valid, &observed, Timestamp::now())?;
    apply::apply(ctx, sprom, &plan).await?;
    ctx.remember_applied_jobs(key, jobs);
    Ok(plan)
}

/// The status while `spec.paused` is set: what was observed last, unchanged (observedGeneration
/// included: the spec is not acted on), and `Paused`.
fn paused(previous: &ShardedPrometheusStatus) -> ShardedPrometheusStatus {
    use zone_api::conditions::Conditions;
    let mut status = previous.clone();
    status.set_condition(
        condition::PAUSED,
        true,
        reason::PAUSED,
        "spec.paused is set: no shard, configuration or retained shard is changed until it is \
         cleared",
    );
    status
}

/// What an invalid spec blocks: no shard is changed.
const BLOCKED: Blocked = Blocked {
    condition: condition::AVAILABLE,
    consequence: "the spec is invalid: no shard was changed",
};

/// The status of an invalid spec: everything observed before stays, `Invalid` says why (one
/// event per complaint).
fn refusal(
    previous: &ShardedPrometheusStatus,
    generation: i64,
    invalid: Invalid,
) -> (Draft<ShardedPrometheusStatus>, Action) {
    let mut draft = Draft::new(ShardedPrometheusStatus {
        observed_generation: generation,
        ..previous.clone()
    });
    let action = draft.refuse(invalid, BLOCKED);
    (draft, action)
}

async fn write_status(
    ctx: &Context,
    api: &Api<ShardedPrometheus>,
    sprom: &ShardedPrometheus,
    previous: &ShardedPrometheusStatus,
    mut status: ShardedPrometheusStatus,
    events: PendingEvents,
) -> Result<(), ReconcileError> {
    let summary = status.summary();
    status.summarize(summary);
    if &status == previous {
        return Ok(());
    }
    let stored = status::apply_status(api, sprom, &ctx.field_manager, &status).await?;
    events.publish(&ctx.events, &stored.object_ref(&())).await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use zone_api::conditions::Conditions;

    use super::*;

    #[test]
    fn an_invalid_spec_warns_once_per_generation_and_keeps_what_was_observed() {
        let invalid = Invalid::new(reason::INVALID_SPEC, "spec.shards is 0");
        let previous = ShardedPrometheusStatus {
            shards: 3,
            ..ShardedPrometheusStatus::default()
        };
        let (draft, action) = refusal(&previous, 2, invalid.clone());
        assert_eq!(action, Action::await_change());
        assert_eq!(draft.status.shards, 3, "observed shards stay as they were");
        assert_eq!(
            draft.status.true_reason(condition::INVALID),
            Some(reason::INVALID_SPEC)
        );
        assert_eq!(
            draft.status.true_reason(condition::AVAILABLE),
            None,
            "nothing is available while the spec is invalid"
        );
        let events = draft.events.events();
        assert_eq!((events.len(), events[0].action), (1, "Validate"));
        let (again, _) = refusal(&draft.status, 2, invalid);
        assert_eq!(again.status, draft.status);
        assert!(
            again.events.is_empty(),
            "no second event for the same complaint"
        );
    }

    #[test]
    fn a_paused_resource_keeps_its_observed_status_and_says_paused() {
        let previous = ShardedPrometheusStatus {
            observed_generation: 4,
            shards: 3,
            ready_shards: 2,
            ..ShardedPrometheusStatus::default()
        };
        let status = paused(&previous);
        assert_eq!(
            (
                status.observed_generation,
                status.shards,
                status.ready_shards
            ),
            (4, 3, 2),
            "nothing observed anew, the paused spec not acted on"
        );
        let condition = status.condition(condition::PAUSED).unwrap();
        assert_eq!(
            (condition.status.as_str(), condition.reason.as_str()),
            ("True", reason::PAUSED)
        );
        assert_eq!(paused(&status), status, "a second reconcile writes nothing");
    }
}
