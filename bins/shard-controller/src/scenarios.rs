//! Reconcile scenarios against the scripted fake API server (`zone_operator::testing`): the real
//! [`reconcile`] reads caches filled the way the reflectors fill them, and every request it makes
//! (children applied and pruned, retention marks, the access review, the status and events)
//! goes through a real `kube::Client` to a script, so each test pins down what goes over the
//! wire. Each test says which behaviour it guards and how it fails without it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service};
use kube::core::{PartialObjectMeta, PartialObjectMetaExt};
use kube::runtime::controller::Action;
use serde_json::{Value, json};
use zone_api::ShardedPrometheus;
use zone_operator::testing::{FakeApi, Method, RecordedRequest, status_json, store_of, zoned_node};
use zone_operator::{ControllerMetrics, EventPublisher, NodeZones};

use crate::context::{Context, RESYNC};
use crate::metrics::SpromMetrics;
use crate::reconcile::reconcile;

const ZONE_LABEL: &str = "topology.kubernetes.io/zone";
const SPROM: &str = "/apis/zonecontrol.k8s.aws/v1/namespaces/mon/shardedprometheuses/p";
const EVENTS: &str = "/apis/events.k8s.io/v1/namespaces/mon/events";
const CONFIG_MAPS: &str = "/api/v1/namespaces/mon/configmaps";
const SECRETS: &str = "/api/v1/namespaces/mon/secrets";
const SERVICES: &str = "/api/v1/namespaces/mon/services";
const STATEFUL_SETS: &str = "/apis/apps/v1/namespaces/mon/statefulsets";
const PDBS: &str = "/apis/policy/v1/namespaces/mon/poddisruptionbudgets";
const ZDBS: &str = "/apis/zonecontrol.k8s.aws/v1/namespaces/mon/zonedisruptionbudgets";
const REVIEWS: &str = "/apis/authorization.k8s.io/v1/subjectaccessreviews";
const ZAUS: &str = "/apis/zonecontrol.k8s.aws/v1/namespaces/mon/zoneawareupdates";

/// ShardedPrometheus `mon/p` over zones a, b and c with `spec` merged in.
fn sprom_json(spec: Value) -> Value {
    let mut full = json!({
        "shardingStrategy": {"topology": {"values": ["a", "b", "c"]}},
    });
    full.as_object_mut()
        .unwrap()
        .extend(spec.as_object().unwrap().clone());
    json!({
        "apiVersion": "zonecontrol.k8s.aws/v1", "kind": "ShardedPrometheus",
        "metadata": {"name": "p", "namespace": "mon", "uid": "sprom-uid", "generation": 1},
        "spec": full,
    })
}

/// What the caches hold of a child the controller applied: the applied body with its owner.
fn as_cached(body: &Value) -> Value {
    let mut child = body.clone();
    child["metadata"]["ownerReferences"] = json!([{
        "apiVersion": "zonecontrol.k8s.aws/v1", "kind": "ShardedPrometheus", "name": "p",
        "uid": "sprom-uid", "controller": true,
    }]);
    child
}

/// A StatefulSet of shard `index` as the cache holds it, with `annotations`.
fn cached_stateful_set(index: u32, annotations: Value) -> StatefulSet {
    serde_json::from_value(as_cached(&json!({
        "metadata": {
            "name": format!("p-shard-{index}"), "namespace": "mon",
            "labels": {
                "app.kubernetes.io/instance": "p",
                "app.kubernetes.io/managed-by": "shard-controller",
                "zonecontrol.k8s.aws/shard": index.to_string(),
            },
            "annotations": annotations,
        },
        "status": {"replicas": 1, "readyReplicas": 1},
    })))
    .unwrap()
}

fn meta_of<K: kube::Resource>(child: &K) -> PartialObjectMeta<K> {
    child.meta().clone().into_response_partial()
}

/// Caches of monitoring objects whose watches never list: prometheus-operator's CRDs are not
/// installed. The writers are leaked so the stores stay unsynced, as a watch retrying a missing
/// resource leaves them.
fn unlisted_monitoring_objects() -> crate::monitoring::cache::Caches {
    fn unsynced<K>() -> kube::runtime::reflector::Store<K>
    where
        K: kube::Resource + Clone + 'static,
        K::DynamicType: Default + std::hash::Hash + Eq + Clone,
    {
        let (store, writer) = kube::runtime::reflector::store();
        std::mem::forget(writer);
        store
    }
    crate::monitoring::cache::Caches {
        service_monitors: unsynced(),
        pod_monitors: unsynced(),
        scrape_configs: unsynced(),
        rules: unsynced(),
        namespaces: store_of(Vec::new()),
        values: Default::default(),
    }
}

/// Caches of monitoring objects and namespaces that hold nothing (the scenarios' resources
/// select none).
fn no_monitoring_objects() -> crate::monitoring::cache::Caches {
    crate::monitoring::cache::Caches {
        service_monitors: store_of(Vec::new()),
        pod_monitors: store_of(Vec::new()),
        scrape_configs: store_of(Vec::new()),
        rules: store_of(Vec::new()),
        namespaces: store_of(Vec::new()),
        values: Default::default(),
    }
}

struct Harness {
    fake: FakeApi,
    ctx: Arc<Context>,
    sprom: ShardedPrometheus,
}

impl Harness {
    /// The controller's context over `fake`, its caches holding `stateful_sets` (and their
    /// configuration Secrets and Services, by name).
    fn new(spec: Value, stateful_sets: Vec<StatefulSet>) -> Harness {
        let (fake, client) = FakeApi::new();
        let sprom: ShardedPrometheus = serde_json::from_value(sprom_json(spec)).unwrap();
        script_defaults(&fake, &sprom);
        let secrets: Vec<_> = stateful_sets
            .iter()
            .map(|sts| {
                meta_of(&Secret {
                    metadata: sts.metadata.clone(),
                    ..Secret::default()
                })
            })
            .collect();
        let services: Vec<_> = stateful_sets
            .iter()
            .map(|sts| {
                meta_of(&Service {
                    metadata: sts.metadata.clone(),
                    ..Service::default()
                })
            })
            .collect();
        let registry = prometheus::Registry::new();
        let ctx = Arc::new(Context {
            client: client.clone(),
            sproms: store_of([sprom.clone()]),
            stateful_sets: store_of(stateful_sets),
            config_maps: store_of(Vec::<PartialObjectMeta<ConfigMap>>::new()),
            secrets: store_of(secrets),
            services: store_of(services),
            pods: store_of(Vec::<k8s_openapi::api::core::v1::Pod>::new()),
            zones: NodeZones::from_store(
                store_of([
                    zoned_node("node-a", "a"),
                    zoned_node("node-b", "b"),
                    zoned_node("node-c", "c"),
                ]),
                ZONE_LABEL,
            ),
            events: EventPublisher::new(client, "shard-controller", "test"),
            metrics: ControllerMetrics::new(&registry, "shard-controller").unwrap(),
            sprom_metrics: SpromMetrics::register(&registry).unwrap(),
            field_manager: "shard-controller".to_string(),
            zone_label: ZONE_LABEL.to_string(),
            zone_aware_rollouts: true,
            monitoring: no_monitoring_objects(),
            memory: Default::default(),
            config_health: Default::default(),
            traffic: Default::default(),
        });
        Harness { fake, ctx, sprom }
    }

    async fn reconcile(&self) -> Action {
        reconcile(Arc::new(self.sprom.clone()), self.ctx.clone())
            .await
            .unwrap()
    }

    /// The applies of children (server-side apply PATCHes), as (collection, name).
    fn applies(&self) -> Vec<(String, String)> {
        self.child_requests(&Method::PATCH)
            .filter(|r| r.content_type.as_deref() == Some("application/apply-patch+yaml"))
            .map(|r| split(&r.path))
            .collect()
    }

    fn deletes(&self) -> BTreeSet<(String, String)> {
        self.child_requests(&Method::DELETE)
            .map(|r| split(&r.path))
            .collect()
    }

    fn child_requests(&self, method: &Method) -> impl Iterator<Item = RecordedRequest> {
        let method = method.clone();
        self.fake.requests().into_iter().filter(move |r| {
            r.method == method
                && [CONFIG_MAPS, SECRETS, SERVICES, STATEFUL_SETS]
                    .iter()
                    .any(|prefix| r.path.starts_with(prefix))
        })
    }

    /// The bodies of the status writes.
    fn statuses(&self) -> Vec<Value> {
        self.fake
            .requests_to(&Method::PATCH, &format!("{SPROM}/status"))
            .iter()
            .map(|r| r.json().unwrap()["status"].clone())
            .collect()
    }

    /// The reasons of the events published.
    fn event_reasons(&self) -> Vec<String> {
        self.fake
            .requests_to(&Method::POST, EVENTS)
            .iter()
            .map(|r| r.json().unwrap()["reason"].as_str().unwrap().to_string())
            .collect()
    }

    /// The caches as the watches would fill them after every apply so far.
    fn caches_after_applies(&self) -> Harness {
        let mut stateful_sets = Vec::new();
        let mut config_maps = Vec::new();
        let mut secrets = Vec::new();
        let mut services = Vec::new();
        for request in self.child_requests(&Method::PATCH) {
            let body = as_cached(&request.json().unwrap());
            if request.path.starts_with(STATEFUL_SETS) {
                stateful_sets.push(serde_json::from_value::<StatefulSet>(body).unwrap());
            } else if request.path.starts_with(CONFIG_MAPS) {
                config_maps.push(meta_of(&serde_json::from_value::<ConfigMap>(body).unwrap()));
            } else if request.path.starts_with(SECRETS) {
                secrets.push(meta_of(&serde_json::from_value::<Secret>(body).unwrap()));
            } else {
                services.push(meta_of(&serde_json::from_value::<Service>(body).unwrap()));
            }
        }
        let ctx = Context {
            client: self.ctx.client.clone(),
            sproms: self.ctx.sproms.clone(),
            stateful_sets: store_of(stateful_sets),
            config_maps: store_of(config_maps),
            secrets: store_of(secrets),
            services: store_of(services),
            pods: self.ctx.pods.clone(),
            zones: self.ctx.zones.clone(),
            events: self.ctx.events.clone(),
            metrics: self.ctx.metrics.clone(),
            sprom_metrics: self.ctx.sprom_metrics.clone(),
            field_manager: self.ctx.field_manager.clone(),
            zone_label: self.ctx.zone_label.clone(),
            zone_aware_rollouts: self.ctx.zone_aware_rollouts,
            monitoring: no_monitoring_objects(),
            memory: crate::context::Memory {
                applied: std::sync::Mutex::new(self.ctx.memory.applied.lock().unwrap().clone()),
                ..Default::default()
            },
            config_health: Default::default(),
            traffic: Default::default(),
        };
        Harness {
            fake: self.fake.clone(),
            ctx: Arc::new(ctx),
            sprom: self.sprom.clone(),
        }
    }
}

/// `/…/<collection>/<name>` → (collection, name).
fn split(path: &str) -> (String, String) {
    let mut parts = path.rsplit('/');
    let name = parts.next().unwrap_or_default().to_string();
    let collection = parts.next().unwrap_or_default().to_string();
    (collection, name)
}

/// Answers every write as the API server would for a healthy cluster: applies and merge patches
/// echo the object, the status write returns the resource with its status, events are created,
/// deletes succeed; prune lists and access reviews are scripted per test.
fn script_defaults(fake: &FakeApi, sprom: &ShardedPrometheus) {
    let stored = serde_json::to_value(sprom).unwrap();
    fake.on(Method::PATCH, &format!("{SPROM}/status"))
        .always_with(move |request| {
            let mut object = stored.clone();
            object["status"] = request.json().unwrap()["status"].clone();
            (200, object)
        });
    fake.on(Method::POST, EVENTS)
        .always_with(|request| (201, request.json().unwrap()));
    for prefix in [CONFIG_MAPS, SECRETS, SERVICES, STATEFUL_SETS, PDBS, ZDBS] {
        fake.on_prefix(Method::DELETE, prefix)
            .always(200, status_json(200, "Success", "deleted"));
    }
}

/// Lists answered with shards `indices` of every kind, controlled by the resource (no
/// ConfigMap: configurations are Secrets).
fn script_lists(fake: &FakeApi, indices: &[u32]) {
    script_lists_with_config_maps(fake, indices, &[]);
}

/// As [`script_lists`], with configuration ConfigMaps of shards `config_maps` (written before
/// configurations were Secrets).
fn script_lists_with_config_maps(fake: &FakeApi, indices: &[u32], config_maps: &[u32]) {
    for (prefix, kind, api_version, indices) in [
        (CONFIG_MAPS, "ConfigMap", "v1", config_maps),
        (SECRETS, "Secret", "v1", indices),
        (SERVICES, "Service", "v1", indices),
        (STATEFUL_SETS, "StatefulSet", "apps/v1", indices),
        (PDBS, "PodDisruptionBudget", "policy/v1", &[]),
        (ZDBS, "ZoneDisruptionBudget", "zonecontrol.k8s.aws/v1", &[]),
    ] {
        let items: Vec<Value> = indices
            .iter()
            .map(|i| {
                as_cached(&json!({"metadata": {
                    "name": format!("p-shard-{i}"), "namespace": "mon", "uid": format!("{kind}-{i}"),
                }}))
            })
            .collect();
        fake.on(Method::GET, prefix).always(
            200,
            json!({"apiVersion": api_version, "kind": format!("{kind}List"), "metadata": {}, "items": items}),
        );
    }
}

/// Child applies echo the object; `rejected` (a path suffix) is refused as invalid.
fn script_applies(fake: &FakeApi, rejected: Option<&'static str>) {
    if let Some(rejected) = rejected {
        fake.on(Method::PATCH, rejected).always(
            422,
            status_json(
                422,
                "Invalid",
                "StatefulSet.apps \"p-shard-0\" is invalid: spec: Forbidden: updates to statefulset spec for fields other than 'replicas' are forbidden",
            ),
        );
    }
    for prefix in [CONFIG_MAPS, SECRETS, SERVICES, STATEFUL_SETS, PDBS, ZDBS] {
        fake.on_prefix(Method::PATCH, prefix)
            .always_with(|request| {
                let body = request.json().unwrap();
                match request.content_type.as_deref() {
                    // A merge patch of retention marks: the StatefulSet with its marks removed.
                    Some("application/merge-patch+json") => {
                        let (_, name) = split(&request.path);
                        (200, json!({"metadata": {"name": name, "namespace": "mon"}}))
                    }
                    _ => (200, body),
                }
            });
    }
}

/// Guards: a child the API server rejects (422) is a spec problem, reported once — Invalid with
/// reason ChildRejected, one warning event — and not retried until the spec changes. Without the
/// 422 mapping the reconcile returns an error (retried every 10 s, no condition); without the
/// "already reported" check the second reconcile writes the status and warns again.
#[tokio::test]
async fn a_child_rejected_by_the_api_server_is_reported_once() {
    let h = Harness::new(json!({"shards": 3}), Vec::new());
    script_applies(
        &h.fake,
        Some("/apis/apps/v1/namespaces/mon/statefulsets/p-shard-0"),
    );
    script_lists(&h.fake, &[]);

    assert_eq!(h.reconcile().await, Action::await_change());
    let statuses = h.statuses();
    assert_eq!(statuses.len(), 1);
    let invalid = condition(&statuses[0], "Invalid");
    assert_eq!(invalid["status"], "True");
    assert_eq!(invalid["reason"], "ChildRejected");
    assert!(
        invalid["message"]
            .as_str()
            .unwrap()
            .starts_with("StatefulSet p-shard-0: StatefulSet.apps \"p-shard-0\" is invalid"),
        "{invalid}"
    );
    assert_eq!(h.event_reasons(), ["ChildRejected"]);
    assert!(h.deletes().is_empty(), "nothing is pruned after a refusal");

    // The same resource, its status as written: refused again, silently.
    let mut again = h.sprom.clone();
    again.status = Some(serde_json::from_value(statuses[0].clone()).unwrap());
    let h2 = Harness {
        sprom: again,
        ..h.caches_after_applies()
    };
    assert_eq!(h2.reconcile().await, Action::await_change());
    assert_eq!(h2.statuses().len(), 1, "no second status write");
    assert_eq!(h2.event_reasons(), ["ChildRejected"], "no second event");
}

/// Guards: a scale-down under Delete removes the children of shards >= N, of every kind, and
/// nothing else but the configuration ConfigMaps written before configurations were Secrets.
/// Without the prune, shards 3 and 4 keep running; with a wrong wanted set, a wanted shard is
/// deleted.
#[tokio::test]
async fn a_delete_scale_down_prunes_only_the_shards_beyond_the_count() {
    let stateful_sets = (0..5).map(|i| cached_stateful_set(i, json!({}))).collect();
    let h = Harness::new(
        json!({"shards": 3, "shardRetentionPolicy": {"whenScaled": "Delete"}}),
        stateful_sets,
    );
    script_applies(&h.fake, None);
    script_lists_with_config_maps(&h.fake, &[0, 1, 2, 3, 4], &[0, 1, 2, 3, 4]);

    h.reconcile().await;
    let mut expected: BTreeSet<(String, String)> = ["statefulsets", "services", "secrets"]
        .into_iter()
        .flat_map(|kind| [3, 4].map(|i| (kind.to_string(), format!("p-shard-{i}"))))
        .collect();
    // Configurations from before they were Secrets: ConfigMaps of every shard's name go.
    expected.extend((0..5).map(|i| ("configmaps".to_string(), format!("p-shard-{i}"))));
    assert_eq!(h.deletes(), expected);
    assert_eq!(h.statuses()[0]["shards"], 3);
}

/// Guards: between changes of the spec, children the caches show with the hash they were
/// applied with are not written again (a pod turning Ready must not cost 3 writes per shard),
/// until the resync applies everything again. Without the skip, the second reconcile writes
/// 9 children; without the resync, the third writes none.
#[tokio::test]
async fn unchanged_children_cause_no_writes_until_the_resync() {
    let h = Harness::new(json!({"shards": 3}), Vec::new());
    script_applies(&h.fake, None);
    script_lists(&h.fake, &[]);

    h.reconcile().await;
    assert_eq!(
        h.applies().len(),
        9,
        "the first reconcile applies everything"
    );

    let warm = h.caches_after_applies();
    warm.reconcile().await;
    assert_eq!(warm.applies().len(), 9, "nothing more is written");
    // (Events are listed too, of the StatefulSets the warm caches show without their pods.)
    assert_eq!(
        warm.fake.count(&Method::GET, "/api/v1/namespaces/mon/")
            - warm
                .fake
                .count(&Method::GET, "/api/v1/namespaces/mon/events")
            + warm.fake.count(&Method::GET, STATEFUL_SETS),
        4,
        "only the first reconcile's prune listed the children"
    );

    // The resync is due: everything is applied again.
    for (_, at) in warm.ctx.memory.applied.lock().unwrap().values_mut() {
        *at = Instant::now()
            .checked_sub(RESYNC + Duration::from_secs(1))
            .unwrap();
    }
    warm.reconcile().await;
    assert_eq!(warm.applies().len(), 18);
}

/// Guards: the disruption budgets are applied on a full apply (a PodDisruptionBudget per shard
/// of two replicas, the ZoneDisruptionBudget), not between them; where the ZoneDisruptionBudget
/// kind is not served (its CRD not installed: 404 on apply and list) the reconcile succeeds and
/// the shards are written all the same. Without the 404 mapping the reconcile fails.
#[tokio::test]
async fn budgets_are_applied_and_a_missing_zdb_crd_does_not_stop_the_shards() {
    let h = Harness::new(json!({"shards": 2, "replicas": 2}), Vec::new());
    let missing = status_json(
        404,
        "NotFound",
        "the server could not find the requested resource",
    );
    h.fake
        .on_prefix(Method::PATCH, ZDBS)
        .always(404, missing.clone());
    h.fake.on(Method::GET, ZDBS).always(404, missing);
    script_applies(&h.fake, None);
    script_lists(&h.fake, &[]);

    h.reconcile().await;
    assert_eq!(h.applies().len(), 6, "the shards' children");
    let budgets = |h: &Harness| -> Vec<String> {
        let mut paths: Vec<String> = h
            .fake
            .requests()
            .into_iter()
            .filter(|r| r.method == Method::PATCH)
            .filter(|r| r.path.starts_with(PDBS) || r.path.starts_with(ZDBS))
            .map(|r| r.path)
            .collect();
        paths.sort();
        paths
    };
    assert_eq!(
        budgets(&h),
        [
            format!("{PDBS}/p-shard-0"),
            format!("{PDBS}/p-shard-1"),
            format!("{ZDBS}/p-shards"),
        ]
    );
    let warm = h.caches_after_applies();
    warm.reconcile().await;
    assert_eq!(
        budgets(&warm).len(),
        3,
        "no budget written between full applies"
    );
}

/// One shard whose cached StatefulSet rolls itself (`RollingUpdate`, with the `rollingUpdate`
/// the API server defaulted), turning zone-aware: no ZoneAwareUpdate exists yet.
fn self_rolling_shard() -> Harness {
    let mut rolling = cached_stateful_set(0, json!({}));
    rolling.spec = Some(
        serde_json::from_value(json!({
            "selector": {}, "template": {},
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 0}},
        }))
        .unwrap(),
    );
    let h = Harness::new(json!({"shards": 1}), vec![rolling]);
    script_applies(&h.fake, None);
    script_lists(&h.fake, &[0]);
    h.fake.on(Method::GET, ZAUS).always(
        200,
        json!({"apiVersion": "zonecontrol.k8s.aws/v1", "kind": "ZoneAwareUpdateList", "metadata": {}, "items": []}),
    );
    h
}

/// Guards: shards that rolled themselves (`RollingUpdate`, whose `rollingUpdate` the API server
/// defaulted and no apply owns) turning zone-aware: a merge patch first sets `OnDelete` and
/// removes `rollingUpdate` (the API server refuses `OnDelete` beside it, and an apply cannot
/// remove it), then the apply, after the ZoneAwareUpdate. Without the merge patch the apply is
/// refused (422) and the shards never roll again.
#[tokio::test]
async fn shards_turning_zone_aware_lose_their_defaulted_rolling_update_first() {
    let h = self_rolling_shard();
    h.fake
        .on_prefix(Method::PATCH, ZAUS)
        .always_with(|request| (200, request.json().unwrap()));

    h.reconcile().await;
    let writes: Vec<(String, Option<String>)> = h
        .fake
        .requests()
        .into_iter()
        .filter(|r| r.method == Method::PATCH)
        .filter(|r| r.path.starts_with(STATEFUL_SETS) || r.path.starts_with(ZAUS))
        .map(|r| (r.path.clone(), r.content_type.clone()))
        .collect();
    let merge = Some("application/merge-patch+json".to_string());
    let apply = Some("application/apply-patch+yaml".to_string());
    assert_eq!(
        writes,
        [
            (format!("{ZAUS}/p-shards"), apply.clone()),
            (format!("{STATEFUL_SETS}/p-shard-0"), merge),
            (format!("{STATEFUL_SETS}/p-shard-0"), apply),
        ]
    );
    let cleared = &h
        .fake
        .requests_to(&Method::PATCH, &format!("{STATEFUL_SETS}/p-shard-0"))[0];
    assert_eq!(
        cleared.json().unwrap(),
        json!({"spec": {"updateStrategy": {"type": "OnDelete", "rollingUpdate": null}}})
    );
}

/// Guards: a ZoneAwareUpdate the API server refuses (here as under the CRD of a release
/// before `spec.selector`, when an upgrade skipped the CRDs) stops the reconcile before any
/// StatefulSet turns `OnDelete`: the shards keep rolling themselves instead of never rolling.
#[tokio::test]
async fn shards_stay_rolling_themselves_while_their_zone_aware_update_is_refused() {
    let h = self_rolling_shard();
    h.fake.on_prefix(Method::PATCH, ZAUS).always(
        500,
        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 500,
               "message": "failed to create typed patch object: .spec.selector: field not declared in schema"}),
    );

    let failed = reconcile(Arc::new(h.sprom.clone()), h.ctx.clone()).await;
    assert!(
        failed.is_err(),
        "the refusal is the reconcile's error, retried"
    );
    assert_eq!(
        h.fake
            .requests_to(&Method::PATCH, &format!("{ZAUS}/p-shards"))
            .len(),
        1,
        "the ZoneAwareUpdate was tried"
    );
    assert!(
        h.fake
            .requests_to(&Method::PATCH, &format!("{STATEFUL_SETS}/p-shard-0"))
            .is_empty(),
        "no StatefulSet written after the refusal"
    );
}

/// Guards: shards that rolled zone by zone (`OnDelete`, set by the merge patch above, which
/// owns it) going back to `RollingUpdate`: a merge patch sets the type before the apply, which
/// leaves the strategy out. Without it they stay `OnDelete` and no pod is ever replaced.
#[tokio::test]
async fn shards_leaving_zone_aware_rollouts_roll_themselves_again() {
    let mut zone_aware = cached_stateful_set(0, json!({}));
    zone_aware.spec = Some(
        serde_json::from_value(json!({
            "selector": {}, "template": {}, "updateStrategy": {"type": "OnDelete"},
        }))
        .unwrap(),
    );
    let h = Harness::new(
        json!({"shards": 1, "rollout": {"strategy": "RollingUpdate"}}),
        vec![zone_aware],
    );
    script_applies(&h.fake, None);
    script_lists(&h.fake, &[0]);
    h.fake.on(Method::GET, ZAUS).always(
        200,
        json!({"apiVersion": "zonecontrol.k8s.aws/v1", "kind": "ZoneAwareUpdateList", "metadata": {}, "items": []}),
    );

    h.reconcile().await;
    let patches = h
        .fake
        .requests_to(&Method::PATCH, &format!("{STATEFUL_SETS}/p-shard-0"));
    let kinds: Vec<Option<String>> = patches.iter().map(|r| r.content_type.clone()).collect();
    assert_eq!(
        kinds,
        [
            Some("application/merge-patch+json".to_string()),
            Some("application/apply-patch+yaml".to_string()),
        ]
    );
    assert_eq!(
        patches[0].json().unwrap(),
        json!({"spec": {"updateStrategy": {"type": "RollingUpdate"}}})
    );
}

/// Guards: a scale-up that reuses a retained shard removes its retention marks (a merge patch
/// that nulls both annotations, so its spec and pods stay as they are), and says so in an
/// event. Without it the shard keeps its deadline and is deleted while active.
#[tokio::test]
async fn a_reused_retained_shard_loses_its_marks() {
    let marks = json!({
        "zonecontrol.k8s.aws/retained-since": "2026-01-01T00:00:00Z",
        "zonecontrol.k8s.aws/deletion-deadline": "2999-01-01T00:00:00Z",
        "zonecontrol.k8s.aws/zone": "a",
    });
    let stateful_sets = vec![
        cached_stateful_set(0, json!({})),
        cached_stateful_set(1, json!({})),
        cached_stateful_set(2, json!({})),
        cached_stateful_set(3, marks),
    ];
    let h = Harness::new(
        json!({"shards": 4, "shardRetentionPolicy": {"whenScaled": "Retain"}}),
        stateful_sets,
    );
    script_applies(&h.fake, None);
    script_lists(&h.fake, &[0, 1, 2, 3]);

    h.reconcile().await;
    let unmark: Vec<RecordedRequest> = h
        .child_requests(&Method::PATCH)
        .filter(|r| r.content_type.as_deref() == Some("application/merge-patch+json"))
        .collect();
    assert_eq!(unmark.len(), 1);
    assert_eq!(unmark[0].path, format!("{STATEFUL_SETS}/p-shard-3"));
    assert_eq!(
        unmark[0].json().unwrap(),
        json!({"metadata": {"annotations": {
            "zonecontrol.k8s.aws/retained-since": null,
            "zonecontrol.k8s.aws/deletion-deadline": null,
        }}})
    );
    assert!(
        h.event_reasons()
            .contains(&"RetainedShardsReused".to_string())
    );
    assert!(h.deletes().is_empty());
    assert_eq!(h.statuses()[0]["retainedShards"], json!(null));
}

/// Guards: a Prometheus ServiceAccount that may not discover its targets is reported — Degraded
/// with ServiceAccountForbidden naming what it lacks — and looked at again when the cached
/// answer expires, since nothing watched tells of an RBAC fix. Without the review the status
/// says nothing; without the short requeue a fix waits for the 10-minute resync.
#[tokio::test]
async fn a_forbidden_service_account_degrades_and_requeues() {
    let h = Harness::new(
        json!({"shards": 3, "scrapeConfigs": [
            {"job_name": "pods", "kubernetes_sd_configs": [{"role": "pod"}]},
        ]}),
        Vec::new(),
    );
    // Pods are forbidden, nodes allowed.
    h.fake.on(Method::POST, REVIEWS).always_with(|request| {
        let resource = request.json().unwrap()["spec"]["resourceAttributes"]["resource"].clone();
        let allowed = resource != "pods";
        (
            201,
            json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
                     "spec": {}, "status": {"allowed": allowed}}),
        )
    });
    script_applies(&h.fake, None);
    script_lists(&h.fake, &[]);

    let action = h.reconcile().await;
    assert_eq!(
        action,
        Action::requeue(crate::reconcile::access::CACHE_FOR + Duration::from_secs(1))
    );
    let status = &h.statuses()[0];
    let degraded = condition(status, "Degraded");
    assert_eq!(degraded["status"], "True");
    assert_eq!(degraded["reason"], "ServiceAccountForbidden");
    assert!(
        degraded["message"]
            .as_str()
            .unwrap()
            .contains("cannot list pods, watch pods"),
        "{degraded}"
    );
    assert!(
        h.event_reasons()
            .contains(&"ServiceAccountForbidden".to_string())
    );
}

/// Guards: a cluster without prometheus-operator's CRDs still gets its shards. A resource
/// selecting ServiceMonitors and PrometheusRules asks discovery once (404: the group is not
/// served), applies every shard from its inline scrape configs, and says which kinds are not
/// served in MonitoringObjectsAccepted. Without the discovery check it would wait for caches
/// that never sync and create no shard.
#[tokio::test]
async fn without_the_monitoring_crds_the_shards_run_and_the_kinds_are_reported() {
    let mut h = Harness::new(
        json!({"shards": 3, "serviceMonitorSelector": {}, "ruleSelector": {}}),
        Vec::new(),
    );
    let mut ctx = Arc::into_inner(h.ctx).unwrap();
    ctx.monitoring = unlisted_monitoring_objects();
    h.ctx = Arc::new(ctx);
    h.fake
        .on(Method::GET, "/apis/monitoring.coreos.com/v1")
        .always(
            404,
            status_json(
                404,
                "NotFound",
                "the server could not find the requested resource",
            ),
        );
    script_applies(&h.fake, None);
    script_lists(&h.fake, &[]);

    h.reconcile().await;
    assert_eq!(h.applies().len(), 9, "every shard's children are applied");
    let status = &h.statuses()[0];
    let accepted = condition(status, "MonitoringObjectsAccepted");
    assert_eq!(accepted["status"], "False");
    assert_eq!(accepted["reason"], "KindsNotServed");
    let message = accepted["message"].as_str().unwrap();
    assert!(
        message.contains("servicemonitors.monitoring.coreos.com/v1")
            && message.contains("prometheusrules.monitoring.coreos.com/v1"),
        "{message}"
    );
    assert_eq!(
        h.fake.count(&Method::GET, "/apis/monitoring.coreos.com/v1"),
        1,
        "discovery is asked once and its answer cached"
    );
    assert!(h.event_reasons().contains(&"KindsNotServed".to_string()));
}

/// A cache holding `objects` after its watch's initial list: ready, as the monitoring kinds'
/// caches must be before they are selected from.
fn listed<K>(objects: impl IntoIterator<Item = K>) -> kube::runtime::reflector::Store<K>
where
    K: kube::Resource + Clone + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
{
    use kube::runtime::watcher::Event;
    let (store, mut writer) = kube::runtime::reflector::store();
    writer.apply_watcher_event(&Event::Init);
    for object in objects {
        writer.apply_watcher_event(&Event::InitApply(object));
    }
    writer.apply_watcher_event(&Event::InitDone);
    store
}

/// The condition of `type_` in a written `status`.
fn condition<'a>(status: &'a Value, type_: &str) -> &'a Value {
    status["conditions"]
        .as_array()
        .and_then(|conditions| conditions.iter().find(|c| c["type"] == type_))
        .unwrap_or_else(|| panic!("no {type_} condition in {status}"))
}

/// A ServiceMonitor `namespace/name` selecting app `name`, with basic auth from Secret
/// `namespace/creds`.
fn service_monitor(
    namespace: &str,
    name: &str,
) -> crate::monitoring::kinds::Raw<crate::monitoring::kinds::ServiceMonitorKind> {
    serde_json::from_value(json!({
        "apiVersion": "monitoring.coreos.com/v1", "kind": "ServiceMonitor",
        "metadata": {"name": name, "namespace": namespace, "uid": format!("{namespace}-{name}")},
        "spec": {"selector": {"matchLabels": {"app": name}}, "endpoints": [{
            "port": "metrics",
            "basicAuth": {"username": {"name": "creds", "key": "user"},
                          "password": {"name": "creds", "key": "pass"}},
        }]},
    }))
    .unwrap()
}

/// Guards tenancy: a ServiceMonitor of another namespace, or a Secret it references, reaches
/// the shards' configuration (a Secret the resource's own namespace may read) only when the
/// shards' ServiceAccount may get it. Denied ones are left out before anything of theirs is
/// read, named with the missing permission, and looked at again when the review expires.
/// Without the reviews the victim's Secret is read and its password is in the configuration.
#[tokio::test]
async fn objects_of_other_namespaces_are_used_only_when_the_service_account_may_read_them() {
    let mut h = Harness::new(
        json!({"shards": 3, "serviceMonitorSelector": {}, "serviceMonitorNamespaceSelector": {}}),
        Vec::new(),
    );
    let mut ctx = Arc::into_inner(h.ctx).unwrap();
    let namespaces = ["mon", "team", "victim", "closed"].map(|name| {
        let namespace = k8s_openapi::api::core::v1::Namespace {
            metadata: kube::api::ObjectMeta {
                name: Some(name.to_string()),
                ..Default::default()
            },
            ..Default::default()
        };
        meta_of(&namespace)
    });
    ctx.monitoring.namespaces = listed(namespaces);
    ctx.monitoring.service_monitors = listed([
        service_monitor("mon", "own"),
        service_monitor("team", "shared"),
        service_monitor("victim", "open"),
        service_monitor("closed", "hidden"),
    ]);
    h.ctx = Arc::new(ctx);
    // The ServiceAccount may get team's monitor and Secret, victim's monitor but not its
    // Secret, nothing of closed.
    h.fake.on(Method::POST, REVIEWS).always_with(|request| {
        let review = request.json().unwrap();
        let attributes = &review["spec"]["resourceAttributes"];
        assert_eq!(
            review["spec"]["user"],
            "system:serviceaccount:mon:prometheus"
        );
        assert_eq!(attributes["verb"], "get");
        let allowed = match (
            attributes["namespace"].as_str().unwrap(),
            attributes["resource"].as_str().unwrap(),
        ) {
            ("team", _) => true,
            ("victim", resource) => resource == "servicemonitors",
            _ => false,
        };
        (
            201,
            json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
                     "spec": {}, "status": {"allowed": allowed}}),
        )
    });
    // "<namespace>-pass", base64-encoded.
    let password = |namespace: &str| match namespace {
        "mon" => "bW9uLXBhc3M=",
        "team" => "dGVhbS1wYXNz",
        "victim" => "dmljdGltLXBhc3M=",
        _ => "Y2xvc2VkLXBhc3M=",
    };
    for namespace in ["mon", "team", "victim", "closed"] {
        h.fake
            .on(
                Method::GET,
                &format!("/api/v1/namespaces/{namespace}/secrets/creds"),
            )
            .always(
                200,
                json!({"apiVersion": "v1", "kind": "Secret", "metadata": {
                    "name": "creds", "namespace": namespace, "resourceVersion": "1"},
                    "data": {"user": "dXNlcg==", "pass": password(namespace)}}),
            );
    }
    script_applies(&h.fake, None);
    script_lists(&h.fake, &[]);

    let action = h.reconcile().await;
    assert_eq!(
        action,
        Action::requeue(crate::reconcile::access::CACHE_FOR + Duration::from_secs(1))
    );
    for (namespace, read) in [("mon", 1), ("team", 1), ("victim", 0), ("closed", 0)] {
        assert_eq!(
            h.fake.count(
                &Method::GET,
                &format!("/api/v1/namespaces/{namespace}/secrets/creds")
            ),
            read,
            "Secret {namespace}/creds read"
        );
    }
    let reviewed: Vec<(String, String, String)> = h
        .fake
        .requests_to(&Method::POST, REVIEWS)
        .iter()
        .map(|r| {
            let attributes = r.json().unwrap()["spec"]["resourceAttributes"].clone();
            let field = |name: &str| attributes[name].as_str().unwrap_or_default().to_string();
            (field("namespace"), field("resource"), field("name"))
        })
        .filter(|(_, resource, _)| resource != "pods" && resource != "nodes")
        .collect();
    assert!(
        !reviewed.iter().any(|(namespace, _, _)| namespace == "mon"),
        "the resource's own namespace is not reviewed: {reviewed:?}"
    );
    let status = &h.statuses()[0];
    let accepted = condition(status, "MonitoringObjectsAccepted");
    assert_eq!(accepted["reason"], "ObjectsRejected");
    let message = accepted["message"].as_str().unwrap();
    assert!(message.starts_with("2 selected object(s)"), "{message}");
    assert!(
        message.contains(
            "ServiceMonitor victim/open: ServiceAccount mon/prometheus may not get secrets victim/creds"
        ) && message.contains(
            "ServiceMonitor closed/hidden: ServiceAccount mon/prometheus may not get \
             servicemonitors.monitoring.coreos.com closed/hidden"
        ),
        "{message}"
    );
    let configs: String = h
        .fake
        .requests()
        .iter()
        .filter(|r| r.method == Method::PATCH && r.path.starts_with(SECRETS))
        .flat_map(|r| {
            let secret: Secret = serde_json::from_value(r.json().unwrap()).unwrap();
            let data = secret.data.unwrap_or_default().into_values();
            data.map(|bytes| String::from_utf8(bytes.0).unwrap())
        })
        .collect();
    assert!(configs.contains("team-pass") && configs.contains("mon-pass"));
    assert!(!configs.contains("victim-pass"), "{configs}");
    assert!(
        configs.contains("job_name: serviceMonitor/team/shared/0"),
        "{configs}"
    );
    assert!(!configs.contains("serviceMonitor/victim/"), "{configs}");
    assert!(!configs.contains("serviceMonitor/closed/"), "{configs}");
}

/// A ShardedPrometheus of mon selecting its own namespace's ServiceMonitor `own`, whose
/// credentials are the Secret mon/creds; the children's applies scripted, `rejected` refused.
fn harness_with_own_monitor(rejected: Option<&'static str>) -> Harness {
    let mut h = Harness::new(
        json!({"shards": 3, "serviceMonitorSelector": {}}),
        Vec::new(),
    );
    let mut ctx = Arc::into_inner(h.ctx).unwrap();
    let mon = k8s_openapi::api::core::v1::Namespace {
        metadata: kube::api::ObjectMeta {
            name: Some("mon".to_string()),
            ..Default::default()
        },
        ..Default::default()
    };
    ctx.monitoring.namespaces = listed([meta_of(&mon)]);
    ctx.monitoring.service_monitors = listed([service_monitor("mon", "own")]);
    h.ctx = Arc::new(ctx);
    h.fake
        .on(Method::GET, "/api/v1/namespaces/mon/secrets/creds")
        .always(
            200,
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {
                "name": "creds", "namespace": "mon", "resourceVersion": "1"},
                "data": {"user": "dXNlcg==", "pass": "bW9uLXBhc3M="}}),
        );
    script_applies(&h.fake, rejected);
    script_lists(&h.fake, &[]);
    h
}

/// Guards the memories' order: what a resource's monitors select and reference is remembered at
/// once, a refused spec included (a change to the Secret must reconcile it), but the jobs they
/// translated to (what a monitor keeps when its translation fails later) only once the shards'
/// configurations carrying them are applied. Without the order, a child the API server rejects
/// leaves jobs remembered that no shard ever ran.
#[tokio::test]
async fn monitor_jobs_are_remembered_once_applied_and_what_is_referenced_at_once() {
    let referencing = |h: &Harness| {
        let index = h.ctx.memory.index.lock().unwrap();
        index.referencing(zone_monitoring::resolve::Source::Secret, "mon", "creds")
    };
    let jobs_remembered = |h: &Harness| !h.ctx.memory.last_good.lock().unwrap().is_empty();

    let refused =
        harness_with_own_monitor(Some("/apis/apps/v1/namespaces/mon/statefulsets/p-shard-0"));
    assert_eq!(refused.reconcile().await, Action::await_change());
    assert_eq!(refused.event_reasons(), ["ChildRejected"]);
    assert_eq!(referencing(&refused).len(), 1, "the Secret is followed");
    assert!(
        !jobs_remembered(&refused),
        "no job remembered: none applied"
    );

    let applied = harness_with_own_monitor(None);
    applied.reconcile().await;
    assert!(
        applied.event_reasons().is_empty(),
        "{:?}",
        applied.event_reasons()
    );
    assert_eq!(referencing(&applied).len(), 1);
    assert!(jobs_remembered(&applied), "the applied jobs are remembered");
}
