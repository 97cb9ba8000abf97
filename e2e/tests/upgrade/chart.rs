//! The upgrade by docs/helm.md's move of the installation to the chart: every object the previous
//! release installed (but its Namespace) becomes the release's, the same object.

use e2e::deploy::{Identity, dynamic_api, identities};
use k8s_openapi::api::rbac::v1::ClusterRole;
use kube::api::DynamicObject;

use super::*;

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
