//! Checks of an installation of the project running on the local cluster's real nodes, whatever
//! installed it (`helm install`, or `kubectl apply -f install.yaml`): the controllers' pods
//! available, the eviction webhook at failurePolicy Fail and judging, the samples at their status,
//! the installed objects present or gone.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Pod;
use kube::api::ListParams;
use kube::{Api, Client};

use crate::deploy::{
    Identity, dynamic_api, wait_for_sample_budget, wait_for_sample_sprom, wait_for_sample_zau,
};
use crate::quota::PodQuota;
use crate::real::RealNodes;
use crate::{Cluster, TestNamespace, identity, nodes, pods, wait_for};
use serde_json::json;

pub const TIMEOUT: Duration = Duration::from_secs(180);

/// `name[:tag]` of an image reference (a registry port such as host:5000/name is not a tag).
pub fn split_image(image: &str) -> (&str, &str) {
    let last = image.rsplit('/').next().unwrap_or(image);
    if last.contains(':') {
        image.rsplit_once(':').unwrap()
    } else {
        (image, "latest")
    }
}

/// Waits until the webhook configuration `name` is at failurePolicy Fail: a zdb-controller replica
/// serves with a certificate its caBundle trusts. From then on, an eviction it does not answer
/// fails (500) instead of being let through.
pub async fn wait_for_fail_policy(client: &Client, name: &str) {
    let webhooks: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    wait_for(
        "the failurePolicy moved to Fail by a replica",
        TIMEOUT,
        || async {
            let configuration = webhooks.get(name).await.map_err(|e| e.to_string())?;
            let webhook = &configuration.webhooks.unwrap_or_default()[0];
            let bundle = webhook.client_config.ca_bundle.as_ref().map(|b| b.0.len());
            match webhook.failure_policy.as_deref() {
                Some("Fail") if bundle.unwrap_or(0) > 0 => Ok(()),
                other => Err(format!(
                    "failurePolicy {other:?}, caBundle {bundle:?} bytes"
                )),
            }
        },
    )
    .await;
}

/// Waits until every object of `ids` exists (`present`) or is gone (`!present`).
pub async fn wait_all(client: &Client, ids: &[Identity], present: bool, what: &str) {
    let mut apis = Vec::new();
    for (api_version, kind, namespace, name) in ids {
        let api = dynamic_api(client, api_version, kind, namespace.as_deref()).await;
        apis.push((api, format!("{kind} {name}"), name.as_str()));
    }
    wait_for(what, TIMEOUT, || async {
        let mut wrong = Vec::new();
        for (api, what, name) in &apis {
            let found = api.get_opt(name).await.map_err(|e| e.to_string())?;
            if found.is_some() != present {
                wrong.push(what.as_str());
            }
        }
        if wrong.is_empty() {
            Ok(())
        } else {
            Err(format!("not yet: {wrong:?}"))
        }
    })
    .await;
}

/// Every controller's two available pods, each on a real node and running `image`.
pub async fn wait_controllers_on_real_nodes(
    client: &Client,
    pods_api: &Api<Pod>,
    image: &str,
) -> Vec<Pod> {
    let real_nodes = crate::real::nodes(client).await;
    let mut all = Vec::new();
    for binary in crate::deploy::controllers() {
        for pod in wait_binary_pods(pods_api, &binary, 2).await {
            let node = pods::node_of(&pod).unwrap_or_default();
            assert!(real_nodes.contains_key(node), "{binary} on {node}");
            let container = pod.spec.as_ref().and_then(|spec| spec.containers.first());
            assert_eq!(container.and_then(|c| c.image.as_deref()), Some(image));
            all.push(pod);
        }
    }
    all
}

/// The pods of `binary` in `pods_api`'s namespace, once exactly `count` of them exist and are
/// available.
pub async fn wait_binary_pods(pods_api: &Api<Pod>, binary: &str, count: usize) -> Vec<Pod> {
    let selector = format!("app.kubernetes.io/name={binary}");
    wait_for(
        &format!("exactly {count} available pods of {binary}"),
        TIMEOUT,
        || async {
            let list = pods_api
                .list(&ListParams::default().labels(&selector))
                .await
                .map_err(|e| e.to_string())?;
            let available = list.items.iter().filter(|p| pods::is_available(p)).count();
            if list.items.len() == count && available == count {
                Ok(list.items)
            } else {
                Err(format!("{} pods, {available} available", list.items.len()))
            }
        },
    )
    .await
}

/// A budgeted eviction judged by the webhook: answered (allowed, or refused by the budget with
/// 429), never failed by a webhook that could not be called.
pub fn assert_judged(answer: &Result<(), (u16, String)>) {
    if let Err((code, message)) = answer {
        assert_eq!(*code, 429, "the eviction was not judged: {message}");
        assert!(message.contains("admission webhook"), "{message}");
    }
}

/// The samples (`make samples`, applied in `namespace`) under the installed controllers: the
/// ZoneDisruptionBudget counts its pods per zone, the ZoneAwareUpdate reports its revisions, the
/// ShardedPrometheus is Available with three shards (Degraded only because its ServiceAccount is
/// bound to no prometheus ClusterRole).
pub async fn wait_for_samples(client: &Client, namespace: &str) {
    let api =
        |kind: &'static str| dynamic_api(client, "zonecontrol.k8s.aws/v1", kind, Some(namespace));
    let zdbs = api("ZoneDisruptionBudget").await;
    let zaus = api("ZoneAwareUpdate").await;
    let sproms = api("ShardedPrometheus").await;
    wait_for_sample_budget(&zdbs).await;
    wait_for_sample_zau(&zaus).await;
    wait_for_sample_sprom(&sproms).await;
}

/// The webhook judges the sample budget's evictions in `victim`: one zone may be disrupted, a
/// second is refused (429, naming the disrupted zone). Returns the zone of each sample pod.
pub async fn assert_webhook_judges(victim: &TestNamespace) -> BTreeMap<String, String> {
    let zone_of = nodes::pod_zones(&victim.api(), "app=web").await;
    assert_webhook_judges_pods(victim, &zone_of).await;
    zone_of
}

/// The webhook judges evictions of the pods of `zone_of` (pod name to zone) in `victim`, which a
/// budget with one disruption per zone selects: a zone-a pod's eviction is allowed, a zone-b
/// pod's refused with 429 naming zone-a. The evicted pod's replacement waits (a pod quota) until
/// the refusal is seen.
pub async fn assert_webhook_judges_pods(
    victim: &TestNamespace,
    zone_of: &BTreeMap<String, String>,
) {
    let victim_pods: Api<Pod> = victim.api();
    let in_zone = |zone: &str| {
        zone_of
            .iter()
            .find(|(_, z)| *z == zone)
            .map(|(name, _)| name.clone())
            .unwrap()
    };
    let count = victim_pods
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .len();
    // One pod fewer than now: the evicted pod's replacement waits until the quota goes.
    let quota = PodQuota::hold(victim, count - 1).await;
    pods::evict(&victim_pods, &in_zone("zone-a"), false)
        .await
        .expect("the first zone's eviction is allowed");
    let (code, message) = pods::evict(&victim_pods, &in_zone("zone-b"), false)
        .await
        .expect_err("a second zone is refused while zone-a is disrupted");
    assert_eq!(code, 429, "{message}");
    assert!(
        message.contains("admission webhook") && message.contains("zone-a"),
        "{message}"
    );
    quota.release().await;
}

/// After an uninstall: no pod left in the installation's namespace (`home_pods`), the three CRDs
/// and the samples in `victim` (the users' objects) still there.
pub async fn assert_only_crds_and_samples_left(
    client: &Client,
    home_pods: &Api<Pod>,
    victim: &str,
) {
    wait_for("the installation's pods gone", TIMEOUT, || async {
        let left = home_pods
            .list(&ListParams::default())
            .await
            .map_err(|e| e.to_string())?
            .items
            .len();
        (left == 0).then_some(()).ok_or(format!("{left} pods left"))
    })
    .await;
    let crds = dynamic_api(
        client,
        "apiextensions.k8s.io/v1",
        "CustomResourceDefinition",
        None,
    )
    .await;
    for crd in [
        "zoneawareupdates.zonecontrol.k8s.aws",
        "zonedisruptionbudgets.zonecontrol.k8s.aws",
        "shardedprometheuses.zonecontrol.k8s.aws",
    ] {
        assert!(crds.get_opt(crd).await.unwrap().is_some(), "{crd} kept");
    }
    for (kind, name) in [
        ("ZoneDisruptionBudget", "web"),
        ("ZoneAwareUpdate", "web"),
        ("ShardedPrometheus", "prometheus"),
    ] {
        let api = dynamic_api(client, "zonecontrol.k8s.aws/v1", kind, Some(victim)).await;
        assert!(
            api.get_opt(name).await.unwrap().is_some(),
            "the user's {kind} {name} kept"
        );
    }
}

/// How docs/versioning.md and the README apply install.yaml and the CRDs, to install and to
/// upgrade: server-side, with `make deploy`'s field manager, taking over fields another manager
/// holds.
pub const APPLY: [&str; 4] = [
    "apply",
    "--server-side",
    "--field-manager=zone-aware-deploy",
    "--force-conflicts",
];

/// The label of every object the project installs but its CRDs.
pub const PART_OF: &str = "app.kubernetes.io/part-of=zone-aware-controllers";

/// Removes what install.yaml (or `make deploy`) applied as docs/release.md says: the files'
/// webhook configurations first, then every object of the files labelled [`PART_OF`] (never the
/// CRDs).
/// On drop too (a failed test), so the cluster-wide webhook never outlives the test.
pub struct Installed<'a> {
    cluster: &'a Cluster,
    files: Vec<PathBuf>,
    applied: bool,
}

impl<'a> Installed<'a> {
    /// What `files` applied (or are about to apply).
    pub fn new(cluster: &'a Cluster, files: Vec<PathBuf>) -> Self {
        Installed {
            cluster,
            files,
            applied: true,
        }
    }

    pub fn remove(&mut self) {
        let kubectl = |args: &[&str]| {
            let mut command = identity::kubectl(self.cluster);
            command.args(args);
            identity::run(command, None)
        };
        // The files' own configurations by name: the label would also select other
        // installations' (a Helm release's) in the cluster.
        let webhooks: std::collections::BTreeSet<String> = self
            .files
            .iter()
            .filter_map(|file| std::fs::read_to_string(file).ok())
            .flat_map(|text| identity::yaml_to_json(&text))
            .filter(|o| o["kind"] == "ValidatingWebhookConfiguration")
            .filter_map(|o| o["metadata"]["name"].as_str().map(str::to_string))
            .collect();
        for name in &webhooks {
            kubectl(&[
                "delete",
                "validatingwebhookconfiguration",
                name,
                "--ignore-not-found",
                "--wait=true",
            ]);
        }
        for file in &self.files {
            let file = file.display().to_string();
            kubectl(&[
                "delete",
                "-f",
                &file,
                "-l",
                PART_OF,
                "--ignore-not-found",
                "--wait=true",
                "--timeout=180s",
            ]);
        }
        self.applied = false;
    }
}

impl Drop for Installed<'_> {
    fn drop(&mut self) {
        if self.applied && std::thread::panicking() {
            // What the installed controllers said, for the failure's report.
            let mut logs = identity::kubectl(self.cluster);
            logs.args([
                "logs",
                "-n",
                "zone-aware-system",
                "-l",
                PART_OF,
                "--prefix",
                "--tail=40",
            ]);
            if let Ok(output) = logs.output() {
                eprintln!("{}", String::from_utf8_lossy(&output.stdout));
            }
        }
        if self.applied {
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.remove()));
        }
    }
}

/// The local cluster's kwok nodes run no containers: the Deployments of `namespace` go to its
/// real nodes (what config/local adds to config/default), the only change to what was applied.
pub fn controllers_placed_on_the_real_nodes(cluster: &Cluster, real: &RealNodes, namespace: &str) {
    let placement = json!([
        {"op": "add", "path": "/spec/template/spec/tolerations",
         "value": [{"key": real.taint, "operator": "Exists", "effect": "NoSchedule"}]},
        {"op": "add", "path": "/spec/template/spec/nodeSelector", "value": {"type": "real"}},
    ])
    .to_string();
    for binary in crate::deploy::controllers() {
        let mut command = identity::kubectl(cluster);
        command.args([
            "patch",
            "deployment",
            &binary,
            "-n",
            namespace,
            "--type",
            "json",
            "-p",
            &placement,
        ]);
        identity::run(command, None);
    }
}
