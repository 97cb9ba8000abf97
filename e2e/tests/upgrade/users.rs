//! The users' objects, created under the previous release: the StatefulSets `web` and `load`, a
//! ShardedPrometheus of three shards, a ZoneDisruptionBudget and a ZoneAwareUpdate held by its
//! alert gate mid-way, and its resumption once the incident is over.

use e2e::workload::{set_image, spread_statefulset, zone_aware_update};
use e2e::{audit, fixture};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Service};
use kube::api::PostParams;
use zone_api::zau::{condition, pause_source};
use zone_api::{ShardedPrometheus, ZoneAwareUpdate, ZoneDisruptionBudget};

use super::*;

/// The users' objects, created under the previous release.
pub(super) struct Users<'a> {
    ns: &'a TestNamespace,
    sets: Api<StatefulSet>,
    pub(super) pods: Api<Pod>,
    zaus: Api<ZoneAwareUpdate>,
    generations: BTreeMap<String, i64>,
    _prometheus_binding: e2e::cluster::DeleteOnDrop,
}

/// A rollout held mid-way: the pods removed before the hold, and the revision rolled out.
pub(super) struct Held {
    removed: Vec<String>,
    revision: String,
}

impl<'a> Users<'a> {
    pub(super) async fn create(ns: &'a TestNamespace, real: &RealNodes) -> Users<'a> {
        let started = Instant::now();
        let prometheus_binding = e2e::prometheus::service_account(ns).await;
        real.run_metrics_targets(ns, "targets", 3, TIMEOUT).await;
        sharded_prometheus(ns, real).await;
        let sets: Api<StatefulSet> = ns.api();
        for (name, replicas) in [(WEB, WEB_REPLICAS), (LOAD, LOAD_REPLICAS)] {
            let mut set = spread_statefulset(name, replicas, "registry.example/app:v1");
            set["spec"]["updateStrategy"] = json!({"type": "OnDelete"});
            fixture::create(&sets, set).await;
        }
        let pods_api: Api<Pod> = ns.api();
        pods::wait_available(&pods_api, &format!("app={WEB}"), WEB_REPLICAS, TIMEOUT).await;
        pods::wait_available(&pods_api, &format!("app={LOAD}"), LOAD_REPLICAS, TIMEOUT).await;
        budget_and_rollout(ns).await;
        let users = Users {
            ns,
            sets,
            pods: pods_api,
            zaus: ns.api(),
            generations: BTreeMap::new(),
            _prometheus_binding: prometheus_binding,
        };
        users.shards_scrape_their_targets().await;
        let generations = users.generations().await;
        eprintln!("the users' objects ready after {:?}", started.elapsed());
        Users {
            generations,
            ..users
        }
    }

    /// The generation of each of the users' objects.
    async fn generations(&self) -> BTreeMap<String, i64> {
        BTreeMap::from([
            ("zau".into(), generation(&self.zaus, WEB).await),
            (
                "zdb".into(),
                generation(&self.ns.api::<ZoneDisruptionBudget>(), LOAD).await,
            ),
            (
                "sprom".into(),
                generation(&self.ns.api::<ShardedPrometheus>(), SPROM).await,
            ),
        ])
    }

    /// Each shard's two replicas Ready, and every target of a shard scraped twice since.
    async fn shards_scrape_their_targets(&self) {
        wait_for("the shards' pods Ready", TIMEOUT, || async {
            let shards = pods::list(&self.pods, &shard_selector(None)).await;
            let ready = shards.iter().filter(|p| pods::is_ready(p)).count();
            if ready == 6 {
                Ok(())
            } else {
                Err(format!("{ready} of 6 Ready"))
            }
        })
        .await;
        let watch = ScrapeWatch::start(self.pods.clone(), &shard_selector(None), POLL);
        wait_for(
            "every shard to scrape its targets twice",
            TIMEOUT,
            || async {
                let seen = watch.seen();
                let shards: BTreeSet<&String> = seen.keys().map(|(shard, _)| shard).collect();
                let twice = seen.values().all(|times| times.len() >= 2);
                if shards.len() == 3 && seen.len() >= 3 && twice {
                    Ok(())
                } else {
                    Err(format!("{seen:?}"))
                }
            },
        )
        .await;
        watch.stop().await;
    }

    /// The rollout of `web` started under the previous release, and held by its alert gate
    /// after its first zone: an incident starts in zone-a once the first pod is replaced.
    pub(super) async fn hold_the_rollout_mid_way(&self) -> Held {
        let started = Instant::now();
        let revision = set_image(&self.sets, WEB, "registry.example/app:v2", TIMEOUT).await;
        wait_for("the rollout's first pod", TIMEOUT, || async {
            let updated = self.at_revision(&revision).await;
            if updated > 0 {
                Ok(())
            } else {
                Err("none yet".to_string())
            }
        })
        .await;
        self.start_incident().await;
        wait_for("the alert gate to hold the rollout", TIMEOUT, || async {
            let zau = self.zaus.get(WEB).await.map_err(|e| e.to_string())?;
            let status = fixture::status_of(&zau);
            if status
                .paused_by
                .split(',')
                .any(|s| s.trim() == pause_source::ALERT)
            {
                Ok(())
            } else {
                Err(format!("pausedBy {:?}", status.paused_by))
            }
        })
        .await;
        let removed = self.removals();
        assert!(
            !removed.is_empty() && removed.len() < WEB_REPLICAS,
            "held mid-way: {removed:?}"
        );
        eprintln!(
            "the rollout held by the incident after {} of {WEB_REPLICAS} pods, {:?}",
            removed.len(),
            started.elapsed()
        );
        Held { removed, revision }
    }

    async fn at_revision(&self, revision: &str) -> usize {
        pods::list(&self.pods, &format!("app={WEB}"))
            .await
            .iter()
            .filter(|p| pods::at_revision(p, revision))
            .count()
    }

    /// A metrics target in zone-a whose error counter grows: `Incident` fires on shard 0.
    async fn start_incident(&self) {
        let mut template = RealNodes::of(&Cluster::get()).metrics_target_template("incident");
        template["spec"]["containers"][0]["env"]
            .as_array_mut()
            .unwrap()
            .push(json!({"name": "ERRORS_PER_SECOND", "value": "5"}));
        template["spec"]["nodeSelector"]["topology.kubernetes.io/zone"] = json!("zone-a");
        template["metadata"]["name"] = json!("incident");
        fixture::create(&self.pods, template).await;
    }

    /// The incident ends; the rollout goes on from where it was held and completes, every pod
    /// of `web` removed once by the zau-controller and none while it was held.
    pub(super) async fn rollout_resumes_where_it_was(&self, held: &Held) {
        let started = Instant::now();
        assert_eq!(
            self.removals(),
            held.removed,
            "no pod was removed while the rollout was held, the upgrade included"
        );
        self.pods
            .delete("incident", &DeleteParams::default())
            .await
            .unwrap();
        wait_for("the rollout to complete", TIMEOUT, || async {
            let zau = self.zaus.get(WEB).await.map_err(|e| e.to_string())?;
            let complete = fixture::status_of(&zau)
                .conditions
                .iter()
                .any(|c| c.type_ == condition::COMPLETE && c.status == "True");
            let updated = self.at_revision(&held.revision).await;
            if complete && updated == WEB_REPLICAS {
                Ok(())
            } else {
                Err(format!("complete {complete}, {updated} updated"))
            }
        })
        .await;
        let removed = self.removals();
        assert_eq!(&removed[..held.removed.len()], &held.removed[..]);
        let distinct: BTreeSet<&String> = removed.iter().collect();
        assert_eq!(
            (removed.len(), distinct.len()),
            (WEB_REPLICAS, WEB_REPLICAS),
            "every pod removed once: {removed:?}"
        );
        eprintln!(
            "the rollout resumed and completed after {:?}: {removed:?}",
            started.elapsed()
        );
    }

    /// Waits until a shard-controller at one of `addresses` applied each shard's StatefulSet and
    /// each StatefulSet is settled: its pods Ready at its update revision.
    pub(super) async fn shards_applied_from(&self, addresses: &BTreeSet<String>) {
        let sets = self.sets.clone();
        wait_for(
            "the new shard-controller to apply the shards",
            TIMEOUT,
            || async {
                let applied: BTreeSet<String> = fixture::audit(&Cluster::get(), self.ns)
                    .iter()
                    .filter(|e| {
                        e.verb == "patch"
                            && e.user.username.ends_with(":shard-controller")
                            && e.source_ips.iter().any(|ip| addresses.contains(ip))
                            && e.object_ref
                                .as_ref()
                                .is_some_and(|o| o.resource == "statefulsets")
                    })
                    .map(|e| e.object_name().to_string())
                    .collect();
                for shard in 0..3 {
                    let name = format!("{SPROM}-shard-{shard}");
                    if !applied.contains(&name) {
                        return Err(format!("{name} not applied yet: {applied:?}"));
                    }
                    let status = sets
                        .get(&name)
                        .await
                        .map_err(|e| e.to_string())?
                        .status
                        .unwrap_or_default();
                    // Updated, not currentRevision: an OnDelete StatefulSet (the shards roll
                    // zone by zone) never moves its currentRevision.
                    if status.updated_replicas != Some(2) || status.ready_replicas != Some(2) {
                        return Err(format!("{name} rolling: {status:?}"));
                    }
                }
                Ok(())
            },
        )
        .await;
    }

    /// The pods of `web` the zau-controller removed (audit log), in order.
    fn removals(&self) -> Vec<String> {
        audit::removals(&fixture::audit(&Cluster::get(), self.ns), &self.ns.name)
            .filter(|e| e.sent_by("zau-controller") && e.succeeded())
            .map(|e| e.object_name().to_string())
            .filter(|name| name.starts_with(&format!("{WEB}-")))
            .collect()
    }

    /// No object of the users was edited for the upgrade: their generations are those they
    /// were created with.
    pub(super) async fn assert_not_edited(&self) {
        assert_eq!(self.generations().await, self.generations);
    }
}

/// The stored generation of the object `name`.
async fn generation<K>(api: &Api<K>, name: &str) -> i64
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.get(name)
        .await
        .unwrap_or_else(|e| panic!("reading {name}: {e}"))
        .meta()
        .generation
        .unwrap_or(0)
}

/// The pods of the ShardedPrometheus, or of one shard.
pub(super) fn shard_selector(shard: Option<u32>) -> String {
    let mut selector =
        format!("app.kubernetes.io/name=prometheus,app.kubernetes.io/instance={SPROM}");
    if let Some(shard) = shard {
        selector += &format!(",{}={shard}", zone_api::sprom::contract::SHARD_POD_LABEL);
    }
    selector
}

/// Three shards, one per zone, two replicas each, scraping the metrics targets every 2 s and
/// evaluating the incident rule; shard 0 (zone-a) behind the Service `gate`.
async fn sharded_prometheus(ns: &TestNamespace, real: &RealNodes) {
    let config_maps: Api<ConfigMap> = ns.api();
    fixture::create(
        &config_maps,
        json!({"metadata": {"name": "rules"}, "data": {"rules.yaml": RULES}}),
    )
    .await;
    let sprom = json!({
        "apiVersion": "zonecontrol.k8s.aws/v1",
        "kind": "ShardedPrometheus",
        "metadata": {"name": SPROM},
        "spec": fixture::on_real_nodes(real, json!({
            "shards": 3,
            "replicas": 2,
            "scrapeInterval": "2s",
            "evaluationInterval": "2s",
            "ruleFiles": [{"configMap": "rules"}],
            "scrapeConfigs": [fixture::zone_scrape_job(&ns.name, "app", "targets|incident")],
        })),
    });
    let sproms: Api<ShardedPrometheus> = ns.api();
    fixture::create(&sproms, sprom).await;
    let services: Api<Service> = ns.api();
    let selector: BTreeMap<String, String> = shard_selector(Some(0))
        .split(',')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    fixture::create(
        &services,
        json!({
            "metadata": {"name": "gate"},
            "spec": {"selector": selector, "ports": [{"name": "web", "port": 9090}]},
        }),
    )
    .await;
}

/// The budget of `load` (one pod, one zone at a time) and the rollout of `web` (one pod a
/// batch, a bake after each zone, held by `Incident` alerts read from the gate Service).
async fn budget_and_rollout(ns: &TestNamespace) {
    let zdbs: Api<ZoneDisruptionBudget> = ns.api();
    let zdb = e2e::workload::zone_disruption_budget(
        LOAD,
        json!({"selector": {"matchLabels": {"app": LOAD}}, "maxUnavailable": 1}),
    );
    zdbs.create(&PostParams::default(), &zdb).await.unwrap();
    let zaus: Api<ZoneAwareUpdate> = ns.api();
    let zau = zone_aware_update(
        WEB,
        json!({
            "statefulset": WEB,
            "maxUnavailable": 1,
            "exponentialFactor": "1",
            "bakeTime": "20s",
            "alertGate": {
                "service": {"name": "gate", "port": 9090},
                "matchers": r#"{alertname="Incident"}"#,
                "pollInterval": "2s",
                "timeout": "1s",
            },
        }),
    );
    zaus.create(&PostParams::default(), &zau).await.unwrap();
}
