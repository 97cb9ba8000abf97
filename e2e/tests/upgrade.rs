//! An upgrade from the previous release (e2e/cluster/versions.sh's PREVIOUS_RELEASE, built from
//! its commit by previous-release.sh) to the tree, in the middle of the users' work, both ways a
//! user upgrades: as docs/versioning.md says (the CRDs first, then `kubectl apply --server-side -f
//! install.yaml`), and by docs/helm.md's move of the installation to the chart (the CRDs, the
//! installed objects handed to the release, `helm upgrade --install`: that block of the doc runs
//! as written).
//!
//! Installed as that release was (its `make deploy`), with its controllers on the real nodes:
//! - a ZoneAwareUpdate rolling the StatefulSet `web` (kwok), held by its alert gate: an incident
//!   (a metrics target in zone-a whose error counter grows) fires `Incident` on the zone-a shard
//!   after the rollout's first zone, read through a Service of that shard;
//! - a ZoneDisruptionBudget on the StatefulSet `load` (kwok), under a steady eviction load;
//! - a ShardedPrometheus of three shards (one per zone, two replicas each, real Prometheus on the
//!   real nodes) scraping the metrics targets.
//!
//! Measured across the upgrade: no eviction failed for the webhook (the load's answers and the
//! API server's webhook error counters), never two zones of `load` unavailable at once, every
//! shard kept its targets with no gap longer than two scrape intervals (each replica's
//! `/api/v1/targets`, polled live: a replaced pod's storage goes with it), and, once the incident
//! is over, the rollout resumed where it was: every pod of `web` removed once, none twice, none
//! during the hold. No object of the users is edited.
//!
//! Isolation: like the install suite, cluster-wide (the releases' webhooks select every
//! namespace; the CRDs are the previous release's until the upgrade), so it runs alone
//! (E2E_EXCLUSIVE), its two tests one after the other, and removes what it installed, also when
//! it fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use e2e::deploy::{Identity, dynamic_api, identities, repo_root};
use e2e::disruption::{EvictionLoad, Monitor};
use e2e::helm::{self, Release};
use e2e::identity::{self, yaml_to_json};
use e2e::installed::{
    APPLY, Installed, controllers_placed_on_the_real_nodes, wait_for_fail_policy,
};
use e2e::real::RealNodes;
use e2e::upgrade::{ScrapeWatch, longest_gap, previous_image, previous_release, webhook_names};
use e2e::webhook::Counters;
use e2e::workload::{set_image, spread_statefulset, zone_aware_update};
use e2e::{Cluster, TestNamespace, audit, fixture, pods, wait_for};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Service};
use k8s_openapi::api::rbac::v1::ClusterRole;
use k8s_openapi::jiff::SignedDuration;
use kube::api::{DeleteParams, DynamicObject, PostParams};
use kube::{Api, ResourceExt};
use serde_json::json;
use zone_api::zau::{condition, pause_source};
use zone_api::{ShardedPrometheus, ZoneAwareUpdate, ZoneDisruptionBudget};

const NAMESPACE: &str = "zone-aware-system";
/// The release docs/helm.md moves an installation into.
const RELEASE: &str = "zone-aware-controllers";
const WEB: &str = "web";
const WEB_REPLICAS: usize = 9;
const LOAD: &str = "load";
const LOAD_REPLICAS: usize = 6;
const SPROM: &str = "prom";
const SCRAPE_INTERVAL: Duration = Duration::from_secs(2);
const RULES: &str = "groups:\n- name: incident\n  rules:\n  - alert: Incident\n    expr: sum by (zone) (rate(app_errors_total[10s])) > 0\n";
const TIMEOUT: Duration = Duration::from_secs(300);
/// How often the shards' targets are read: shorter than a scrape interval.
const POLL: Duration = Duration::from_millis(500);

/// The two tests install cluster-wide: one at a time.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the local zonal cluster with real nodes (make e2e)"]
async fn upgrade_from_the_previous_release_through_install_yaml_under_load() {
    let _one = ONE_AT_A_TIME.lock().await;
    let cluster = Cluster::get();
    let real = RealNodes::of(&cluster);
    let ns = TestNamespace::create(&cluster, "upgrade").await;
    let dir = scratch_dir(&ns);
    let previous = previous_release(&cluster);
    let install_yaml = render_install_yaml(&cluster, &real, &dir);
    let mut installed = Installed::new(
        &cluster,
        vec![install_yaml.clone(), previous.join("manifests.yaml")],
    );
    let mut upgrade = Upgrade::InstallYaml(install_yaml);

    let _tree_crds = TreeCrds(&cluster);
    install_previous(&cluster, &real, &previous).await;
    let users = Users::create(&ns, &real).await;
    let held = users.hold_the_rollout_mid_way().await;

    let measured = upgrade_under_load(&cluster, &real, &users, &previous, &mut upgrade).await;
    measured.assert_nothing_was_lost();

    users.rollout_resumes_where_it_was(&held).await;
    users.assert_not_edited().await;
    installed.remove();
    let _ = std::fs::remove_dir_all(&dir);
}

/// The same upgrade, by docs/helm.md's move of the installation to the chart; and every object
/// the previous release installed (but its Namespace, which the chart does not render) is now
/// the release's, the same object (its UID).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the local zonal cluster with real nodes (make e2e)"]
async fn upgrade_from_the_previous_release_to_the_chart_under_load() {
    let _one = ONE_AT_A_TIME.lock().await;
    let cluster = Cluster::get();
    let real = RealNodes::of(&cluster);
    let ns = TestNamespace::create(&cluster, "upgrade-helm").await;
    let dir = scratch_dir(&ns);
    let previous = previous_release(&cluster);
    let mut installed = Installed::new(&cluster, vec![previous.join("manifests.yaml")]);
    let mut release = Release::new(&cluster, RELEASE, NAMESPACE);
    let chart = helm::chart(&release.dir);
    let values = release.values_file("values.yaml", &helm::on_real_nodes(&real, json!({})));
    let adopted = previous_objects(&previous);

    let _tree_crds = TreeCrds(&cluster);
    install_previous(&cluster, &real, &previous).await;
    let before = uids(&cluster, &adopted).await;
    let users = Users::create(&ns, &real).await;
    let held = users.hold_the_rollout_mid_way().await;
    remove_harness_only_roles(&cluster, &adopted).await;

    let mut upgrade = Upgrade::Helm {
        release: &mut release,
        chart,
        values,
    };
    let measured = upgrade_under_load(&cluster, &real, &users, &previous, &mut upgrade).await;
    measured.assert_nothing_was_lost();
    assert_adopted_in_place(&cluster, &release, &before).await;

    users.rollout_resumes_where_it_was(&held).await;
    users.assert_not_edited().await;
    eprintln!("{}", release.uninstall());
    installed.remove();
    let _ = std::fs::remove_dir_all(&dir);
}

fn scratch_dir(ns: &TestNamespace) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("e2e-upgrade-{}", ns.suffix()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// How the test upgrades.
enum Upgrade<'r, 'c> {
    /// docs/versioning.md: the CRDs, then this install.yaml, each applied as the docs say.
    InstallYaml(PathBuf),
    /// docs/helm.md's block, as written but for the chart and the values file.
    Helm {
        release: &'r mut Release<'c>,
        chart: PathBuf,
        values: String,
    },
}

impl Upgrade<'_, '_> {
    /// The objects the tree installs this way.
    fn objects(&self) -> Vec<serde_json::Value> {
        match self {
            Upgrade::InstallYaml(file) => yaml_to_json(&std::fs::read_to_string(file).unwrap()),
            Upgrade::Helm {
                release,
                chart,
                values,
            } => yaml_to_json(&release.helm(&[
                "template",
                RELEASE,
                &chart.display().to_string(),
                "--values",
                values,
            ])),
        }
    }

    fn run(&mut self, cluster: &Cluster) {
        match self {
            Upgrade::InstallYaml(install_yaml) => {
                for step in upgrade_steps(install_yaml) {
                    let mut command = identity::kubectl(cluster);
                    command.args(&step);
                    eprintln!(
                        "kubectl {}\n{}",
                        step.join(" "),
                        identity::run(command, None).trim()
                    );
                }
            }
            Upgrade::Helm {
                release,
                chart,
                values,
            } => {
                let script = documented_move_to_the_chart()
                    .replace(
                        "zone-aware-controllers-X.Y.Z.tgz",
                        &chart.display().to_string(),
                    )
                    .replace("my-values.yaml", values);
                eprintln!("{script}\n{}", release.run_script(&script).trim());
            }
        }
    }
}

/// The shell block of docs/helm.md that moves an installation to the chart.
fn documented_move_to_the_chart() -> String {
    let doc = std::fs::read_to_string(repo_root().join("docs/helm.md")).unwrap();
    let marker = "<!-- upgrade-e2e:";
    let after = &doc[doc.find(marker).expect("docs/helm.md marks the block")..];
    let block = &after[after.find("```sh\n").expect("a sh block after the marker") + 6..];
    block[..block.find("```").expect("the block ends")].to_string()
}

/// The previous release's objects the chart takes over: all but the Namespace.
fn previous_objects(previous: &Path) -> Vec<Identity> {
    let manifests = std::fs::read_to_string(previous.join("manifests.yaml")).unwrap();
    identities(&yaml_to_json(&manifests))
        .into_iter()
        .filter(|(_, kind, _, _)| kind != "Namespace")
        .collect()
}

/// The test harness applies the tree's config/prometheus ClusterRoles for the shards; those the
/// previous release did not install are the harness's alone, and a cluster of that release has
/// none: Helm would refuse to take over such an object it was not handed (docs/helm.md).
async fn remove_harness_only_roles(cluster: &Cluster, installed: &[Identity]) {
    let roles: Api<ClusterRole> = Api::all(cluster.client().await);
    for role in e2e::prometheus::HARNESS_CLUSTER_ROLES {
        if !installed
            .iter()
            .any(|(_, kind, _, name)| kind == "ClusterRole" && name == role)
        {
            let _ = roles.delete(role, &DeleteParams::default()).await;
        }
    }
}

/// The UID of each object.
async fn uids(cluster: &Cluster, objects: &[Identity]) -> BTreeMap<Identity, String> {
    let client = cluster.client().await;
    let mut uids = BTreeMap::new();
    for id in objects {
        let uid = live(&client, id)
            .await
            .unwrap_or_else(|e| panic!("{id:?} installed: {e}"))
            .metadata
            .uid
            .expect("a stored object has a UID");
        uids.insert(id.clone(), uid);
    }
    uids
}

/// The object as stored.
async fn live(client: &kube::Client, id: &Identity) -> Result<DynamicObject, kube::Error> {
    let (api_version, kind, namespace, name) = id;
    dynamic_api(client, api_version, kind, namespace.as_deref())
        .await
        .get(name)
        .await
}

/// Every object of `before` is in the release's manifest, still the same object (UID), and
/// Helm's own (its ownership label and annotations).
async fn assert_adopted_in_place(
    cluster: &Cluster,
    release: &Release<'_>,
    before: &BTreeMap<Identity, String>,
) {
    let manifest: BTreeSet<Identity> = identities(&release.manifest()).into_iter().collect();
    let client = cluster.client().await;
    for (id, uid) in before {
        assert!(manifest.contains(id), "{id:?} is not the release's");
        let live = live(&client, id)
            .await
            .unwrap_or_else(|e| panic!("{id:?} after the move: {e}"));
        assert_eq!(live.metadata.uid.as_ref(), Some(uid), "{id:?} was replaced");
        let annotations = live.metadata.annotations.unwrap_or_default();
        assert_eq!(
            annotations
                .get("meta.helm.sh/release-name")
                .map(String::as_str),
            Some(RELEASE),
            "{id:?}"
        );
        let labels = live.metadata.labels.unwrap_or_default();
        assert_eq!(
            labels
                .get("app.kubernetes.io/managed-by")
                .map(String::as_str),
            Some("Helm"),
            "{id:?}"
        );
    }
    eprintln!(
        "{} objects of the previous release adopted in place by the release",
        before.len()
    );
}

/// Puts the tree's CRDs back when the test ends, however it ends: the other suites run on them.
struct TreeCrds<'a>(&'a Cluster);

impl Drop for TreeCrds<'_> {
    fn drop(&mut self) {
        let mut command = identity::kubectl(self.0);
        command
            .args(APPLY)
            .arg("-k")
            .arg(repo_root().join("config/crd"));
        let _ = command.output();
    }
}

/// The tree's install.yaml for the project's image (what `make release` writes, with the local
/// image instead of the pinned digest).
fn render_install_yaml(cluster: &Cluster, real: &RealNodes, dir: &Path) -> PathBuf {
    let mut command = Command::new("bash");
    command
        .current_dir(repo_root())
        .env("PATH", identity::path_with_cluster_tools(cluster))
        .env("IMG", real.project_image())
        .arg("mk/install-yaml.sh");
    let file = dir.join("install.yaml");
    std::fs::write(&file, identity::run(command, None)).expect("writing install.yaml");
    file
}

/// The previous release as its users installed it: its CRDs (replacing the tree's the cluster
/// holds, so the objects below are stored under its schemas), then its `make deploy`; its
/// controllers Ready on the real nodes and its webhook serving.
async fn install_previous(cluster: &Cluster, real: &RealNodes, previous: &Path) {
    let started = Instant::now();
    let mut replace = identity::kubectl(cluster);
    replace
        .arg("replace")
        .arg("-f")
        .arg(previous.join("crds.yaml"));
    identity::run(replace, None);
    let mut deploy = Command::new("bash");
    deploy
        .arg(previous.join("deploy.sh"))
        .env("PATH", identity::path_with_cluster_tools(cluster))
        .env("KUBECONFIG", &cluster.kubeconfig);
    eprintln!("{}", identity::run(deploy, None));
    controllers_placed_on_the_real_nodes(cluster, real, NAMESPACE);
    let home: Api<Pod> = Api::namespaced(cluster.client().await, NAMESPACE);
    controllers_run(&home, &previous_image(previous)).await;
    let webhook = webhook_configuration(&yaml_to_json(
        &std::fs::read_to_string(previous.join("manifests.yaml")).unwrap(),
    ));
    wait_for_fail_policy(&home.clone().into_client(), &webhook).await;
    eprintln!(
        "the previous release installed and serving after {:?}",
        started.elapsed()
    );
}

fn webhook_configuration(objects: &[serde_json::Value]) -> String {
    objects
        .iter()
        .find(|o| o["kind"] == "ValidatingWebhookConfiguration")
        .and_then(|o| o["metadata"]["name"].as_str().map(str::to_string))
        .expect("the release has the eviction webhook")
}

/// Waits until every controller runs two available pods of `image`, and no other pod.
async fn controllers_run(home: &Api<Pod>, image: &str) {
    wait_for(
        "every controller's pods to run the image",
        TIMEOUT,
        || async {
            let all = home
                .list(&Default::default())
                .await
                .map_err(|e| e.to_string())?;
            for binary in e2e::deploy::controllers() {
                let mine: Vec<&Pod> = all
                    .items
                    .iter()
                    .filter(|p| p.labels().get("app.kubernetes.io/name") == Some(&binary))
                    .collect();
                let on_image = mine
                    .iter()
                    .filter(|p| pods::is_available(p) && image_of(p) == Some(image))
                    .count();
                if mine.len() != 2 || on_image != 2 {
                    return Err(format!(
                        "{binary}: {on_image} of {} pods on {image}",
                        mine.len()
                    ));
                }
            }
            Ok(())
        },
    )
    .await;
}

fn image_of(pod: &Pod) -> Option<&str> {
    pod.spec.as_ref()?.containers.first()?.image.as_deref()
}

/// The users' objects, created under the previous release.
struct Users<'a> {
    ns: &'a TestNamespace,
    sets: Api<StatefulSet>,
    pods: Api<Pod>,
    zaus: Api<ZoneAwareUpdate>,
    generations: BTreeMap<String, i64>,
    _prometheus_binding: e2e::cluster::DeleteOnDrop,
}

/// A rollout held mid-way: the pods removed before the hold, and the revision rolled out.
struct Held {
    removed: Vec<String>,
    revision: String,
}

impl<'a> Users<'a> {
    async fn create(ns: &'a TestNamespace, real: &RealNodes) -> Users<'a> {
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
    async fn hold_the_rollout_mid_way(&self) -> Held {
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
    async fn rollout_resumes_where_it_was(&self, held: &Held) {
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

    /// Waits until a shard-controller at one of `addresses` applied each shard's StatefulSet and each StatefulSet is settled: its pods Ready at its update revision.
    async fn shards_applied_from(&self, addresses: &BTreeSet<String>) {
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
                    if status.current_revision != status.update_revision
                        || status.ready_replicas != Some(2)
                    {
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
    async fn assert_not_edited(&self) {
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
fn shard_selector(shard: Option<u32>) -> String {
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

/// What the upgrade was measured by.
struct Measured {
    load: e2e::disruption::LoadReport,
    worst: (usize, usize),
    /// The API server's counts of the calls to the webhooks during the upgrade.
    webhook_calls: e2e::webhook::Counters,
    scrapes: e2e::upgrade::Scrapes,
    targets_before: BTreeSet<e2e::upgrade::ShardTarget>,
    targets_after: BTreeSet<e2e::upgrade::ShardTarget>,
}

/// The upgrade, while the load runs; measured until the tree's controllers serve and the load has
/// gone on for a while after.
async fn upgrade_under_load(
    cluster: &Cluster,
    real: &RealNodes,
    users: &Users<'_>,
    previous: &Path,
    upgrade: &mut Upgrade<'_, '_>,
) -> Measured {
    let client = cluster.client().await;
    let tree = upgrade.objects();
    let previous_objects =
        yaml_to_json(&std::fs::read_to_string(previous.join("manifests.yaml")).unwrap());
    let webhooks: BTreeSet<String> = webhook_names(&previous_objects)
        .union(&webhook_names(&tree))
        .cloned()
        .collect();
    let monitor = Monitor::start(users.pods.clone(), &format!("app={LOAD}"), LOAD_REPLICAS).await;
    let scrapes = ScrapeWatch::start(users.pods.clone(), &shard_selector(None), POLL);
    let webhooks: Vec<&str> = webhooks.iter().map(String::as_str).collect();
    let calls_before = Counters::read(&client, &webhooks).await;
    let load = EvictionLoad::start(users.pods.clone(), &format!("app={LOAD}"), POLL);
    let targets_before = current_targets(&scrapes, 2).await;

    let started = Instant::now();
    eprintln!("upgrading at {}", k8s_openapi::jiff::Timestamp::now());
    // The steps block (`helm upgrade --wait` for a while): the load and the watch go on on the
    // runtime's other worker.
    tokio::task::block_in_place(|| upgrade.run(cluster));
    let home: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    controllers_run(&home, real.project_image()).await;
    let new_shard_controller: BTreeSet<String> =
        pods::list(&home, "app.kubernetes.io/name=shard-controller")
            .await
            .iter()
            .filter_map(|p| p.status.as_ref()?.pod_ip.clone())
            .collect();
    wait_for_fail_policy(&client, &webhook_configuration(&tree)).await;
    // The new shard-controller (its pods' addresses in the audit log) has applied every shard's
    // StatefulSet, and the shards have settled on what it applied: the window covers any
    // restart it caused.
    users.shards_applied_from(&new_shard_controller).await;
    eprintln!(
        "upgraded: the tree's controllers serve after {:?}",
        started.elapsed()
    );

    // The load goes on over the new webhook: ten more evictions allowed.
    let targets_after = current_targets(&scrapes, 5).await;
    let load = load.stop().await;
    let scrapes = scrapes.stop().await;
    Measured {
        load,
        worst: monitor.worst(),
        webhook_calls: Counters::read(&client, &webhooks)
            .await
            .since(&calls_before),
        scrapes,
        targets_before,
        targets_after,
    }
}

/// docs/versioning.md's upgrade: the new CRDs (the release's crds.yaml: config/crd), then
/// install.yaml, each applied as the docs say.
fn upgrade_steps(install_yaml: &Path) -> Vec<Vec<String>> {
    let crds = repo_root().join("config/crd");
    [
        ["-k".to_string(), crds.display().to_string()],
        ["-f".to_string(), install_yaml.display().to_string()],
    ]
    .into_iter()
    .map(|file| APPLY.iter().map(|a| a.to_string()).chain(file).collect())
    .collect()
}

/// The shards' targets once `fresh` more scrapes of each were seen from now.
async fn current_targets(watch: &ScrapeWatch, fresh: usize) -> BTreeSet<e2e::upgrade::ShardTarget> {
    let before = watch.seen();
    wait_for("fresh scrapes of every target", TIMEOUT, || async {
        let seen = watch.seen();
        // Every target seen so far (a watch just started has seen none: it waits for some).
        let fresh_enough = !seen.is_empty()
            && seen.iter().all(|(target, times)| {
                times.len() >= before.get(target).map_or(0, BTreeSet::len) + fresh
            });
        if fresh_enough {
            Ok(())
        } else {
            Err(format!("{} targets", seen.len()))
        }
    })
    .await;
    watch.seen().keys().cloned().collect()
}

impl Measured {
    fn assert_nothing_was_lost(&self) {
        eprintln!(
            "evictions: {} allowed, {} refused, {} failed {:?}; worst: {} pods, {} zones down; \
             webhook calls {} ({} failed); longest scrape gap {:?}",
            self.load.allowed,
            self.load.refused,
            self.load.failed.len(),
            self.load.failed,
            self.worst.0,
            self.worst.1,
            self.webhook_calls.calls,
            self.webhook_calls.failed + self.webhook_calls.fail_open,
            longest_gap(&self.scrapes)
        );
        assert!(
            self.load.allowed > 0 && self.load.refused > 0,
            "the load met the budget"
        );
        assert!(
            self.load.failed.is_empty(),
            "no eviction failed: {:?}",
            self.load.failed
        );
        let judged = (self.load.allowed + self.load.refused) as f64;
        assert!(
            self.webhook_calls.calls >= judged,
            "the API server called the webhooks for every eviction judged: {:?}",
            self.webhook_calls
        );
        assert_eq!(
            self.webhook_calls.failed + self.webhook_calls.fail_open,
            0.0,
            "the API server called the webhook without error"
        );
        assert!(
            self.worst.0 <= 1 && self.worst.1 <= 1,
            "the budget held: {:?}",
            self.worst
        );
        assert_eq!(
            self.targets_before, self.targets_after,
            "every shard kept its targets"
        );
        let (gap, target) = longest_gap(&self.scrapes).expect("scrapes seen");
        assert!(
            gap <= SignedDuration::try_from(2 * SCRAPE_INTERVAL).unwrap(),
            "{target:?} was not scraped for {gap:?}; its scrapes seen: {:?}",
            self.scrapes.get(&target)
        );
    }
}
