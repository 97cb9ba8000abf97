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

use e2e::deploy::repo_root;
use e2e::helm::{self, Release};
use e2e::identity::{self, yaml_to_json};
use e2e::installed::{
    APPLY, Installed, controllers_placed_on_the_real_nodes, wait_for_fail_policy,
};
use e2e::real::RealNodes;
use e2e::upgrade::{ScrapeWatch, previous_image, previous_release};
use e2e::{Cluster, TestNamespace, pods, wait_for};
use k8s_openapi::api::core::v1::Pod;
use kube::api::DeleteParams;
use kube::{Api, ResourceExt};
use serde_json::json;

#[path = "upgrade/chart.rs"]
mod chart;
#[path = "upgrade/measured.rs"]
mod measured;
#[path = "upgrade/users.rs"]
mod users;

use measured::upgrade_under_load;
use users::Users;

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
                "--skip-tests",
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
                let script = helm::documented_move_to_the_chart(chart, values);
                eprintln!("{script}\n{}", release.run_script(&script).trim());
            }
        }
    }
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
