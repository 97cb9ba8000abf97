//! What the apply step writes, as the plan says it: each child as built, the retention marks,
//! the final upload's attempts; and which children need writing at all.

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, EphemeralContainer, Secret, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::Resource;
use zone_api::{ZoneAwareUpdate, ZoneDisruptionBudget};

use crate::children::build::applied_hash;
use crate::children::retention;
use crate::reconcile::observe::{ChildKind, Observed, ObservedRollout};

/// A child of a shard, as built (boxed: a StatefulSet is kilobytes).
#[derive(Debug, Clone, PartialEq)]
pub enum Child {
    ConfigMap(Box<ConfigMap>),
    Secret(Box<Secret>),
    Service(Box<Service>),
    StatefulSet(Box<StatefulSet>),
    PodDisruptionBudget(Box<PodDisruptionBudget>),
    ZoneDisruptionBudget(Box<ZoneDisruptionBudget>),
    ZoneAwareUpdate(Box<ZoneAwareUpdate>),
}

impl Child {
    pub fn kind(&self) -> ChildKind {
        match self {
            Child::ConfigMap(_) => ChildKind::ConfigMap,
            Child::Secret(_) => ChildKind::Secret,
            Child::Service(_) => ChildKind::Service,
            Child::StatefulSet(_) => ChildKind::StatefulSet,
            Child::PodDisruptionBudget(_) => ChildKind::PodDisruptionBudget,
            Child::ZoneDisruptionBudget(_) => ChildKind::ZoneDisruptionBudget,
            Child::ZoneAwareUpdate(_) => ChildKind::ZoneAwareUpdate,
        }
    }

    fn meta(&self) -> &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
        match self {
            Child::ConfigMap(child) => child.meta(),
            Child::Secret(child) => child.meta(),
            Child::Service(child) => child.meta(),
            Child::StatefulSet(child) => child.meta(),
            Child::PodDisruptionBudget(child) => child.meta(),
            Child::ZoneDisruptionBudget(child) => child.meta(),
            Child::ZoneAwareUpdate(child) => child.meta(),
        }
    }

    pub fn name(&self) -> &str {
        self.meta().name.as_deref().unwrap_or_default()
    }

    /// The digest it was built with.
    pub(super) fn hash(&self) -> Option<&str> {
        match self {
            Child::ConfigMap(child) => applied_hash(&**child),
            Child::Secret(child) => applied_hash(&**child),
            Child::Service(child) => applied_hash(&**child),
            Child::StatefulSet(child) => applied_hash(&**child),
            Child::PodDisruptionBudget(_)
            | Child::ZoneDisruptionBudget(_)
            | Child::ZoneAwareUpdate(_) => None,
        }
    }
}

/// One write of the apply step, in the order they are made.
#[derive(Debug, Clone, PartialEq)]
pub enum Write {
    /// Server-side apply of a child, with a controller reference.
    Apply(Child),
    /// The retention marks of a shard's StatefulSet: written (`Some`) or removed (`None`).
    Mark {
        stateful_set: String,
        retained: Option<retention::Retained>,
    },
    /// A merge patch of a StatefulSet's strategy, before the apply that changes it: to
    /// `OnDelete` without `rollingUpdate` (turning zone-aware: the API server defaulted
    /// `rollingUpdate` while it was `RollingUpdate`, refuses `OnDelete` beside it, and no apply
    /// owns it to remove it), or back to `RollingUpdate` (the merge patch that made it
    /// `OnDelete` owns the type, so an apply that leaves it out does not reset it).
    Strategy {
        stateful_set: String,
        on_delete: bool,
    },
    /// An attempt at a removed shard's final upload in pod `pod` (at `ip`): the ephemeral
    /// `container` over the snapshot `path`, or over one taken first (None) once the pod runs
    /// the retired configuration.
    StartUpload {
        pod: String,
        ip: String,
        path: Option<String>,
        container: Box<EphemeralContainer>,
    },
}

impl Write {
    /// Whether it writes a shard's StatefulSet: its apply, its strategy or its retention marks.
    pub fn is_stateful_set(&self) -> bool {
        matches!(
            self,
            Write::Apply(Child::StatefulSet(_)) | Write::Strategy { .. } | Write::Mark { .. }
        )
    }
}

/// The applies of `children` that are needed: all of them on a full apply, else those whose
/// cached copy does not carry the hash they were built with (a pod turning Ready reconciles the
/// resource, and must not cost 3 writes per shard).
pub fn changed(children: impl IntoIterator<Item = Child>, observed: &Observed) -> Vec<Write> {
    children
        .into_iter()
        .filter(|child| {
            observed.full_apply || !observed.unchanged(child.kind(), child.name(), child.hash())
        })
        .flat_map(|child| {
            let strategy = strategy_change(&child, observed).map(|on_delete| Write::Strategy {
                stateful_set: child.name().to_string(),
                on_delete,
            });
            strategy.into_iter().chain([Write::Apply(child)])
        })
        .collect()
}

/// The strategy `child`, a StatefulSet, must be patched to before its apply
/// ([`Write::Strategy`]): `Some(true)` when it is built `OnDelete` and its cached copy still has
/// the `rollingUpdate` of its `RollingUpdate` days, `Some(false)` when it is built without a
/// strategy because the spec says `RollingUpdate` and its cached copy is `OnDelete`.
fn strategy_change(child: &Child, observed: &Observed) -> Option<bool> {
    let Child::StatefulSet(set) = child else {
        return None;
    };
    let on_delete = set
        .spec
        .as_ref()
        .and_then(|spec| spec.update_strategy.as_ref())
        .and_then(|strategy| strategy.type_.as_deref())
        == Some("OnDelete");
    let index = set
        .metadata
        .labels
        .as_ref()
        .and_then(zone_api::sprom::contract::shard_of);
    let cached = index.and_then(|index| observed.stateful_sets.get(&index))?;
    // Back to RollingUpdate only when the spec asks for it (the rollout is then not read):
    // a ZoneAwareUpdate API that answers 404 for a moment (its CRD replaced during an upgrade)
    // must not hand the pods to the StatefulSet controller while a rollout replaces them.
    let asked = matches!(
        observed.rollout,
        ObservedRollout::Absent | ObservedRollout::Found(_)
    );
    match on_delete {
        true => cached.rolling_update.then_some(true),
        false => (cached.on_delete && asked).then_some(false),
    }
}
