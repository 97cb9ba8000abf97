//! The apply step: the plan's writes, in order, then the prune of the children of shards no
//! longer wanted. The only step besides the status write that changes the cluster.

use std::sync::PoisonError;
use std::time::Instant;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Patch, PatchParams};
use kube::{Api, ResourceExt};
use serde_json::Value;
use zone_api::sprom::contract;
use zone_api::{ShardedPrometheus, ZoneAwareUpdate, ZoneDisruptionBudget};
use zone_operator::children::{self, ChildError};

use crate::children::build::{self, CONFIG_DIGEST_ANNOTATION};
use crate::children::retention;
use crate::context::Context;
use crate::reconcile::observe::ChildKind;
use crate::reconcile::plan::{Child, Plan, Write};

/// Makes the plan's writes and prunes, after recording each active shard's configuration for
/// the prober; on success after a full apply, remembers it so that the next reconciles of
/// the same generation skip the children the cache shows unchanged.
pub async fn apply(
    ctx: &Context,
    sprom: &ShardedPrometheus,
    plan: &Plan,
) -> Result<(), ChildError> {
    let namespace = sprom.namespace().unwrap_or_default();
    let name = sprom.name_any();
    let owner = children::controller_reference(sprom)?;
    let writer = Writer {
        ctx,
        namespace: &namespace,
        owner: &owner,
    };
    // Recorded before the writes: the grace of a changed configuration starts now, and one a
    // failed write left out is still the one the shards should run.
    ctx.config_health
        .record_applied(&namespace, &name, &plan.configs);
    for write in &plan.writes {
        match write {
            Write::Apply(child) => writer.apply(child).await?,
            Write::Mark {
                stateful_set,
                retained,
            } => writer.mark(stateful_set, retained.as_ref()).await?,
            Write::Strategy {
                stateful_set,
                on_delete,
            } => writer.strategy(stateful_set, *on_delete).await?,
            Write::StartUpload {
                pod,
                ip,
                path,
                container,
            } => {
                let params = writer.params();
                crate::final_upload::snapshot::start(
                    &writer.api(),
                    &params,
                    pod,
                    ip,
                    path.as_deref(),
                    container,
                )
                .await?
            }
        }
    }
    let mut pruned = Vec::new();
    for kind in &plan.prune {
        pruned.extend(writer.prune(*kind, &name, plan).await?);
    }
    if !pruned.is_empty() {
        tracing::info!(namespace, name, pruned = ?pruned, "removed the children of shards no longer wanted");
    }
    tracing::debug!(
        namespace,
        name,
        full = plan.full_apply,
        written = plan.writes.len(),
        "children applied"
    );
    if plan.full_apply {
        let generation = sprom.metadata.generation.unwrap_or(0);
        ctx.memory
            .applied
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert((namespace, name), (generation, Instant::now()));
    }
    Ok(())
}

/// A child of a custom kind (ZoneDisruptionBudget, ZoneAwareUpdate) written or listed:
/// `Ok(None)` where the API server does not serve the kind (its CRD is not installed), which
/// leaves the shards without it, as they were before: said in the log, not an error of the
/// reconcile.
fn without_crd<T>(kind: &str, result: Result<T, ChildError>) -> Result<Option<T>, ChildError> {
    match result {
        Ok(value) => Ok(Some(value)),
        Err(
            ChildError::Apply {
                source: kube::Error::Api(status),
                ..
            }
            | ChildError::List {
                source: kube::Error::Api(status),
                ..
            },
        ) if status.code == 404 => {
            tracing::warn!(
                kind,
                "the API server does not serve the kind (its CRD is not installed)"
            );
            Ok(None)
        }
        Err(error) => Err(error),
    }
}

/// Writes children of one resource.
struct Writer<'a> {
    ctx: &'a Context,
    namespace: &'a str,
    owner: &'a OwnerReference,
}

impl Writer<'_> {
    fn api<K>(&self) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
    {
        Api::namespaced(self.ctx.client.clone(), self.namespace)
    }

    fn params(&self) -> PatchParams {
        PatchParams {
            field_manager: Some(self.ctx.field_manager.clone()),
            ..PatchParams::default()
        }
    }

    async fn apply(&self, child: &Child) -> Result<(), ChildError> {
        let (owner, manager) = (self.owner, self.ctx.field_manager.as_str());
        match child {
            Child::ConfigMap(c) => {
                children::apply_child(&self.api(), owner, (**c).clone(), manager)
                    .await
                    .map(drop)
            }
            Child::Secret(c) => {
                children::apply_child(&self.api(), owner, (**c).clone(), manager).await?;
                self.nudge_pods(c).await
            }
            Child::Service(c) => children::apply_child(&self.api(), owner, (**c).clone(), manager)
                .await
                .map(drop),
            Child::StatefulSet(c) => {
                children::apply_child(&self.api(), owner, (**c).clone(), manager)
                    .await
                    .map(drop)
            }
            Child::PodDisruptionBudget(c) => {
                children::apply_child(&self.api(), owner, (**c).clone(), manager)
                    .await
                    .map(drop)
            }
            Child::ZoneDisruptionBudget(c) => without_crd(
                "ZoneDisruptionBudget",
                children::apply_child(&self.api(), owner, (**c).clone(), manager).await,
            )
            .map(drop),
            Child::ZoneAwareUpdate(c) => without_crd(
                "ZoneAwareUpdate",
                children::apply_child(&self.api(), owner, (**c).clone(), manager).await,
            )
            .map(drop),
        }
    }

    async fn prune(
        &self,
        kind: ChildKind,
        name: &str,
        plan: &Plan,
    ) -> Result<Vec<String>, ChildError> {
        let selector = contract::children_selector(name);
        let (uid, wanted) = (self.owner.uid.as_str(), &plan.wanted);
        match kind {
            ChildKind::ConfigMap => {
                let wanted = &plan.wanted_config_maps;
                children::prune_children(&self.api::<ConfigMap>(), &selector, uid, wanted).await
            }
            ChildKind::Secret => {
                children::prune_children(&self.api::<Secret>(), &selector, uid, wanted).await
            }
            ChildKind::Service => {
                children::prune_children(&self.api::<Service>(), &selector, uid, wanted).await
            }
            ChildKind::StatefulSet => {
                children::prune_children(&self.api::<StatefulSet>(), &selector, uid, wanted).await
            }
            ChildKind::PodDisruptionBudget => {
                let wanted = &plan.wanted_budgets;
                let api = self.api::<PodDisruptionBudget>();
                children::prune_children(&api, &selector, uid, wanted).await
            }
            ChildKind::ZoneDisruptionBudget => {
                let wanted = &plan.wanted_budgets;
                let api = self.api::<ZoneDisruptionBudget>();
                let pruned = children::prune_children(&api, &selector, uid, wanted).await;
                without_crd("ZoneDisruptionBudget", pruned).map(Option::unwrap_or_default)
            }
            ChildKind::ZoneAwareUpdate => {
                let wanted = &plan.wanted_rollout;
                let api = self.api::<ZoneAwareUpdate>();
                let pruned = children::prune_children(&api, &selector, uid, wanted).await;
                without_crd("ZoneAwareUpdate", pruned).map(Option::unwrap_or_default)
            }
        }
    }

    /// [`Write::Strategy`]: the strategy alone, the pods untouched (the StatefulSet controller
    /// rolls them once it is `RollingUpdate` again).
    async fn strategy(&self, name: &str, on_delete: bool) -> Result<(), ChildError> {
        let strategy = match on_delete {
            true => serde_json::json!({"type": "OnDelete", "rollingUpdate": null}),
            false => serde_json::json!({"type": "RollingUpdate"}),
        };
        let patch = serde_json::json!({"spec": {"updateStrategy": strategy}});
        self.api::<StatefulSet>()
            .patch(name, &self.params(), &Patch::Merge(&patch))
            .await
            .map(drop)
            .map_err(|source| ChildError::Apply {
                kind: "StatefulSet".into(),
                name: name.to_string(),
                source,
            })
    }

    /// Annotates the running pods of the shard whose configuration Secret `secret` is with the
    /// Secret's digest, when theirs differs. The kubelet copies a changed Secret into a pod's
    /// volume only when it syncs the pod, about once a minute; a change to the pod makes it sync
    /// now, so Prometheus sees the new file within its auto-reload interval instead of up to two
    /// minutes later. Only metadata changes: the pods are not restarted.
    async fn nudge_pods(&self, secret: &Secret) -> Result<(), ChildError> {
        let Some(digest) = build::applied_hash(secret) else {
            return Ok(());
        };
        let labels = secret.metadata.labels.clone().unwrap_or_default();
        let of_shard = |pod: &Pod| {
            let pod_labels = pod.metadata.labels.as_ref();
            [contract::INSTANCE_LABEL, contract::SHARD_POD_LABEL]
                .iter()
                .all(|key| {
                    labels.contains_key(*key)
                        && pod_labels.and_then(|l| l.get(*key)) == labels.get(*key)
                })
        };
        let stale: Vec<String> = self
            .ctx
            .pods
            .state()
            .iter()
            .filter(|pod| pod.metadata.namespace.as_deref() == Some(self.namespace))
            .filter(|pod| of_shard(pod) && pod.metadata.deletion_timestamp.is_none())
            .filter(|pod| {
                let current = pod
                    .metadata
                    .annotations
                    .as_ref()
                    .and_then(|annotations| annotations.get(CONFIG_DIGEST_ANNOTATION));
                current.map(String::as_str) != Some(digest)
            })
            .map(|pod| pod.name_any())
            .collect();
        let patch = serde_json::json!({"metadata": {"annotations": {
            CONFIG_DIGEST_ANNOTATION: digest,
        }}});
        let params = PatchParams {
            field_manager: Some(self.ctx.field_manager.clone()),
            ..PatchParams::default()
        };
        let pods: Api<Pod> = self.api();
        for name in stale {
            match pods
                .patch_metadata(&name, &params, &Patch::Merge(&patch))
                .await
            {
                // Gone meanwhile: its replacement mounts the new Secret anyway.
                Err(kube::Error::Api(status)) if status.code == 404 => {}
                Err(source) => {
                    return Err(ChildError::Apply {
                        kind: "Pod".to_string(),
                        name,
                        source,
                    });
                }
                Ok(_) => {}
            }
        }
        Ok(())
    }

    /// Writes (`Some`) or removes (`None`) the retention marks on a shard's StatefulSet. A merge
    /// patch of two annotations: the StatefulSet's spec, applied while the shard was active,
    /// stays as it was (its pods are not restarted, its volumes stay where they are).
    async fn mark(
        &self,
        name: &str,
        retained: Option<&retention::Retained>,
    ) -> Result<(), ChildError> {
        let (since, deadline) = match retained {
            Some(r) => (
                Value::from(retention::format(r.since)),
                r.deadline
                    .map(retention::format)
                    .map_or(Value::Null, Value::from),
            ),
            None => (Value::Null, Value::Null),
        };
        let patch = serde_json::json!({"metadata": {"annotations": {
            retention::RETAINED_SINCE_ANNOTATION: since,
            retention::DELETION_DEADLINE_ANNOTATION: deadline,
        }}});
        let params = PatchParams {
            field_manager: Some(self.ctx.field_manager.clone()),
            ..PatchParams::default()
        };
        self.api::<StatefulSet>()
            .patch(name, &params, &Patch::Merge(&patch))
            .await
            .map_err(|source| ChildError::Apply {
                kind: "StatefulSet".to_string(),
                name: name.to_string(),
                source,
            })?;
        Ok(())
    }
}
