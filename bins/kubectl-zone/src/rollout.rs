//! `kubectl zone rollout plan`: the batches a ZoneAwareUpdate will remove from now on, read from
//! live state the way the zau-controller reads it (`zone_views::rollout`) and run ahead with
//! its own planner (`zone_topology::rollout::preview`), and what holds the rollout now.

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ListParams};
use kube::core::{Selector, SelectorExt};
use kube::{Client, ResourceExt};
use serde::Serialize;
use zone_api::zau::RolloutTarget;
use zone_api::zau::{condition, reason};
use zone_api::{ValidZau, ZoneAwareUpdate, ZoneAwareUpdateStatus};
use zone_topology::rollout::{REVISION_LABEL, preview};
use zone_views::rollout::{self as view, PlannedPods, Target};

use crate::cluster::{Error, pods_with_zones, read};
use crate::output::columns;

/// What `kubectl zone rollout plan` answers.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RolloutPlan {
    pub namespace: String,
    pub name: String,
    /// The StatefulSet's update revision (a group's, `name=revision` joined).
    pub update_revision: String,
    /// A rollout that has not started, previewed (`--image`, `--revision`).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub what_if: bool,
    /// What the controller removes from now on, in order, if nothing else changes.
    pub batches: Vec<PlannedBatch>,
    /// Why the plan stops before the rollout completes (pods missing), if it does.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stopped: Option<String>,
    /// What holds the rollout now, from its status.
    pub held_by: Vec<Hold>,
}

#[derive(Debug, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PlannedBatch {
    pub zone: String,
    /// The step it is removed at (its size is `min(floor(factor^step), maxUnavailable)`, less
    /// the zone's pods already down).
    pub step: u32,
    pub pods: Vec<String>,
}

#[derive(Debug, Serialize, PartialEq)]
pub struct Hold {
    /// Alarm, Alert, Manual, Bake (as `status.pausedBy` names them), Budget or DryRun.
    pub source: String,
    pub message: String,
}

/// A rollout that has not started, previewed as if it had.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WhatIf {
    /// A new pod template (`--image`): every pod is of an old revision.
    Image(String),
    /// The StatefulSet's ControllerRevision `--revision` (a rollback, say): the pods already at
    /// it stay.
    Revision(String),
}

impl WhatIf {
    /// The update revision each StatefulSet would have.
    fn revision(&self, set: &str) -> String {
        match self {
            WhatIf::Image(image) => format!("{set} with image {image}"),
            WhatIf::Revision(revision) => revision.clone(),
        }
    }
}

/// `states` as they would be with `what_if` applied (pure): a revision names one StatefulSet's.
pub fn apply_what_if(
    states: &mut [view::SetState],
    what_if: Option<&WhatIf>,
) -> Result<(), String> {
    let Some(what_if) = what_if else {
        return Ok(());
    };
    if matches!(what_if, WhatIf::Revision(_)) && states.len() != 1 {
        return Err(
            "--revision names one StatefulSet's ControllerRevision and this rollout group has several: preview it with --image".into(),
        );
    }
    for state in states {
        state.update_revision = Some(what_if.revision(&state.name));
    }
    Ok(())
}

/// The plan of the ZoneAwareUpdate `name` of `namespace`, from live state; with `what_if`, of a
/// rollout that has not started.
pub async fn plan(
    client: &Client,
    namespace: &str,
    name: &str,
    zone_label: &str,
    what_if: Option<&WhatIf>,
) -> Result<RolloutPlan, Error> {
    let zaus: Api<ZoneAwareUpdate> = Api::namespaced(client.clone(), namespace);
    let zau = zaus
        .get(name)
        .await
        .map_err(read(format!("get ZoneAwareUpdate {namespace}/{name}")))?;
    let invalid = Error::invalid("ZoneAwareUpdate", format!("{namespace}/{name}"));
    let valid = zau.spec.validate().map_err(|e| invalid(e.to_string()))?;
    let sets = statefulsets(client, namespace, &valid.target).await?;
    let mut states = sets
        .iter()
        .map(view::statefulset)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| invalid(e.message))?;
    apply_what_if(&mut states, what_if).map_err(&invalid)?;
    let target = view::target(&valid, states).map_err(|e| invalid(e.message))?;
    let Some(update_revision) = target.update_revision.clone() else {
        return Err(invalid(
            "the StatefulSet controller has not observed the latest spec yet: try again".into(),
        ));
    };
    let params = ListParams::default().labels(REVISION_LABEL);
    let pods = pods_with_zones(client, namespace, &params, zone_label).await?;
    let planned = view::plan_pods(
        &target,
        pods.iter().map(|(p, z)| (p, z.clone())),
        Timestamp::now(),
    );
    let status = zau.status.clone().unwrap_or_default();
    let ahead = ahead(&status, &valid, &target, &update_revision, &planned);
    Ok(RolloutPlan {
        namespace: namespace.to_string(),
        name: name.to_string(),
        update_revision,
        what_if: what_if.is_some(),
        batches: ahead.0,
        stopped: ahead.1,
        held_by: holds(&zau, &status),
    })
}

/// The batches ahead (pure), and why the preview stopped, if it did.
fn ahead(
    status: &ZoneAwareUpdateStatus,
    valid: &ValidZau,
    target: &Target,
    update_revision: &str,
    planned: &PlannedPods,
) -> (Vec<PlannedBatch>, Option<String>) {
    let last_zone = status.current_zone.as_deref().map(view::zone_from_status);
    let input = view::input(
        status,
        valid,
        target,
        update_revision,
        &planned.planned,
        last_zone.as_ref(),
    );
    let preview = preview(&input);
    let batches = preview
        .batches
        .into_iter()
        .map(|batch| PlannedBatch {
            zone: batch.zone.to_string(),
            step: batch.step,
            pods: batch.pods,
        })
        .collect();
    (batches, preview.stopped.map(|why| why.to_string()))
}

/// The StatefulSet the spec names, or those its selector selects.
async fn statefulsets(
    client: &Client,
    namespace: &str,
    target: &RolloutTarget,
) -> Result<Vec<StatefulSet>, Error> {
    let api: Api<StatefulSet> = Api::namespaced(client.clone(), namespace);
    match target {
        RolloutTarget::StatefulSet(name) => {
            Ok(vec![api.get(name).await.map_err(read(format!(
                "get StatefulSet {namespace}/{name}"
            )))?])
        }
        RolloutTarget::Group(selector) => {
            let selector = Selector::try_from(selector.clone()).map_err(|e| Error::Invalid {
                kind: "ZoneAwareUpdate",
                name: namespace.to_string(),
                message: format!("spec.selector: {e}"),
            })?;
            let sets = api
                .list(&ListParams::default())
                .await
                .map_err(read(format!("list StatefulSets of {namespace}")))?;
            Ok(sets
                .items
                .into_iter()
                .filter(|set| selector.matches(set.labels()))
                .collect())
        }
    }
}

/// What holds the rollout now, as its status says.
fn holds(zau: &ZoneAwareUpdate, status: &ZoneAwareUpdateStatus) -> Vec<Hold> {
    let message = |type_: &str| {
        status
            .conditions
            .iter()
            .find(|c| c.type_ == type_ && c.status == "True")
            .map(|c| (c.reason.clone(), c.message.clone()))
    };
    let mut holds = Vec::new();
    if zau.spec.dry_run {
        holds.push(Hold {
            source: "DryRun".into(),
            message: "spec.dryRun: nothing is removed".into(),
        });
    }
    if !status.paused_by.is_empty() {
        holds.push(Hold {
            source: status.paused_by.clone(),
            message: message(condition::PAUSED).map(|m| m.1).unwrap_or_default(),
        });
    }
    if let Some((why, text)) = message(condition::PROGRESSING)
        && why == reason::BUDGET_EXHAUSTED
    {
        holds.push(Hold {
            source: "Budget".into(),
            message: text,
        });
    }
    holds
}

/// The plan as a table: one line a batch, then what holds the rollout.
pub fn table(plan: &RolloutPlan) -> String {
    let rows: Vec<Vec<String>> = plan
        .batches
        .iter()
        .enumerate()
        .map(|(i, batch)| {
            vec![
                (i + 1).to_string(),
                batch.zone.clone(),
                batch.step.to_string(),
                batch.pods.len().to_string(),
                batch.pods.join(","),
            ]
        })
        .collect();
    let mut out = format!(
        "ZoneAwareUpdate {}/{} to {}{}: {} batches ahead\n",
        plan.namespace,
        plan.name,
        plan.update_revision,
        if plan.what_if { " (not started)" } else { "" },
        plan.batches.len()
    );
    if !rows.is_empty() {
        out.push_str(&columns(&["BATCH", "ZONE", "STEP", "SIZE", "PODS"], &rows));
    }
    if let Some(why) = &plan.stopped {
        out.push_str(&format!("then waits: {why}\n"));
    }
    for hold in &plan.held_by {
        out.push_str(&format!("held by {}: {}\n", hold.source, hold.message));
    }
    out
}

#[cfg(test)]
mod tests;
