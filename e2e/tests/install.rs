//! `kubectl apply --server-side -f install.yaml` does what `make deploy` does. The file is a
//! release's (`E2E_INSTALL_YAML`, e.g. dist/install.yaml of `make release`, whose image tar beside
//! it is imported into the real nodes under the digest the file pins), else mk/install-yaml.sh
//! rendered here for the project's image (`make image`). The file holds exactly the CRDs and the
//! objects `make manifests` renders for the same image; applied, the controllers run on the real
//! nodes, the webhook judges evictions and the samples reach their status; removed as
//! docs/release.md says (the webhook configuration first, then everything labelled
//! part-of=zone-aware-controllers), nothing of it is left but the CRDs and the users' objects.
//!
//! Isolation: install.yaml installs cluster-wide under fixed names (its webhook selects every
//! namespace not labelled out, its controllers watch every namespace). This suite is one test in
//! its own test binary, and cargo runs test binaries one after another, so no other test runs
//! beside it; it refuses a cluster where install.yaml's names are taken (not fresh), and removes
//! what it applied also when it fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use e2e::deploy::{Identity, apply_samples, dynamic_api, identities, make, repo_root};
use e2e::helm::{self, Release};
use e2e::identity::{self, yaml_to_json};
use e2e::installed::{
    APPLY, Installed, PART_OF, assert_only_crds_and_samples_left, assert_webhook_judges,
    controllers_placed_on_the_real_nodes, wait_all, wait_controllers_on_real_nodes,
    wait_for_fail_policy, wait_for_samples,
};
use e2e::real::RealNodes;
use e2e::{Cluster, TestNamespace};
use k8s_openapi::api::core::v1::Pod;
use kube::{Api, Client};
use serde_json::{Value, json};

const NAMESPACE: &str = "zone-aware-system";

/// `kubectl <args>` against the cluster; stdout, or a panic with stderr.
fn kubectl(cluster: &Cluster, args: &[&str]) -> String {
    let mut command = identity::kubectl(cluster);
    command.args(args);
    identity::run(command, None)
}

/// The install.yaml under test and the image it runs: the release's file (its image tar, found
/// beside it, imported into every real node), or one rendered into `dir` for the project's image.
fn install_yaml(cluster: &Cluster, real: &RealNodes, dir: &Path) -> (PathBuf, String) {
    if let Some(file) = std::env::var_os("E2E_INSTALL_YAML").filter(|f| !f.is_empty()) {
        let file = PathBuf::from(file);
        let text = std::fs::read_to_string(&file)
            .unwrap_or_else(|e| panic!("E2E_INSTALL_YAML {}: {e}", file.display()));
        let images: std::collections::BTreeSet<String> = yaml_to_json(&text)
            .iter()
            .filter(|o| o["kind"] == "Deployment")
            .flat_map(|o| {
                o["spec"]["template"]["spec"]["containers"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default()
            })
            .filter_map(|c| c["image"].as_str().map(str::to_string))
            .collect();
        let [image] = images
            .into_iter()
            .collect::<Vec<_>>()
            .try_into()
            .unwrap_or_else(|images: Vec<String>| {
                panic!("install.yaml runs one image, not {images:?}")
            });
        let folder = file.parent().unwrap_or(Path::new("."));
        let tars: Vec<PathBuf> = std::fs::read_dir(folder)
            .expect("the release's directory")
            .filter_map(|entry| Some(entry.ok()?.path()))
            .filter(|path| path.to_string_lossy().ends_with(".oci.tar"))
            .collect();
        let [tar] = tars.as_slice() else {
            panic!(
                "one image tar (*.oci.tar) beside {}, not {tars:?}",
                file.display()
            );
        };
        let mut command = Command::new("bash");
        command
            .current_dir(repo_root())
            .arg("e2e/cluster/images.sh")
            .arg("import-pinned")
            .arg(tar)
            .arg(&image);
        eprintln!("{}", identity::run(command, None).trim());
        return (file, image);
    }
    let image = real.project_image().to_owned();
    let mut command = Command::new("bash");
    command
        .current_dir(repo_root())
        .env("PATH", identity::path_with_cluster_tools(cluster))
        .env("IMG", &image)
        .arg("mk/install-yaml.sh");
    let file = dir.join("install.yaml");
    std::fs::write(&file, identity::run(command, None)).expect("writing install.yaml");
    (file, image)
}

/// Orders objects for an order-free comparison.
fn sorted(mut objects: Vec<Value>) -> Vec<Value> {
    objects.sort_by_key(|o| {
        format!(
            "{}/{}/{}/{}",
            o["apiVersion"], o["kind"], o["metadata"]["namespace"], o["metadata"]["name"]
        )
    });
    objects
}

/// The file: the CRDs of config/crd, then exactly what `make deploy` applies for this image, every
/// object but the CRDs labelled for the removal. Returns the objects' identities.
fn file_holds_the_crds_and_what_make_deploy_applies(
    cluster: &Cluster,
    text: &str,
    image: &str,
) -> Vec<Identity> {
    let (crds, objects): (Vec<Value>, Vec<Value>) = yaml_to_json(text)
        .into_iter()
        .partition(|o| o["kind"] == "CustomResourceDefinition");
    let mut render = identity::kubectl(cluster);
    render.arg("kustomize").arg(repo_root().join("config/crd"));
    assert_eq!(
        sorted(crds),
        sorted(yaml_to_json(&identity::run(render, None))),
        "install.yaml's CRDs are config/crd's"
    );
    let deployed = yaml_to_json(&make(
        cluster,
        "manifests",
        &[("NAMESPACE", NAMESPACE), ("IMG", image)],
    ));
    assert_eq!(
        sorted(objects.clone()),
        sorted(deployed),
        "install.yaml's objects are those of `make deploy NAMESPACE={NAMESPACE} IMG={image}`"
    );
    let ids: Vec<Identity> = identities(&objects);
    assert!(
        objects.iter().all(|o| {
            o["metadata"]["labels"]["app.kubernetes.io/part-of"] == "zone-aware-controllers"
        }),
        "every object but the CRDs is labelled {PART_OF} (the removal selects it)"
    );
    ids
}

/// A fresh cluster: none of its names is taken, but the ClusterRoles of config/prometheus
/// (in install.yaml too) that the harness applies for other suites' Prometheus pods: the same
/// objects, which install.yaml's apply takes over and its removal deletes (the next suite
/// that needs them applies them again).
async fn cluster_is_fresh(client: &Client, ids: &[Identity]) {
    for (api_version, kind, namespace, name) in ids {
        if kind == "ClusterRole" && e2e::prometheus::HARNESS_CLUSTER_ROLES.contains(&name.as_str())
        {
            continue;
        }
        let api = dynamic_api(client, api_version, kind, namespace.as_deref()).await;
        assert!(
            api.get_opt(name).await.unwrap().is_none(),
            "{kind} {name} exists already: the cluster is not fresh"
        );
    }
}

/// The release docs/helm.md moves an installation into.
const RELEASE: &str = "zone-aware-controllers";

/// docs/helm.md's block run as written, with the tree's chart on the real nodes: every object of
/// install.yaml the chart renders (all but the CRDs and the Namespace) is the release's after it,
/// under the same UID, the admission policies and their bindings included.
async fn adopted_by_the_chart(
    client: &Client,
    real: &RealNodes,
    release: &mut Release<'_>,
    ids: &[Identity],
    dir: &Path,
) {
    let handed: Vec<&Identity> = ids
        .iter()
        .filter(|(_, kind, ..)| kind != "CustomResourceDefinition" && kind != "Namespace")
        .collect();
    let kinds: BTreeSet<&str> = handed.iter().map(|(_, kind, ..)| kind.as_str()).collect();
    for kind in [
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    ] {
        assert!(
            kinds.contains(kind),
            "install.yaml has no {kind}: {kinds:?}"
        );
    }
    let mut before = Vec::new();
    for (api_version, kind, namespace, name) in &handed {
        let api = dynamic_api(client, api_version, kind, namespace.as_deref()).await;
        before.push(api.get(name).await.unwrap().metadata.uid.unwrap());
    }
    let values = release.values_file("values.yaml", &helm::on_real_nodes(real, json!({})));
    let script = helm::documented_move_to_the_chart(&helm::chart(dir), &values);
    eprintln!("{script}\n{}", release.run_script(&script).trim());
    let managed: BTreeSet<(String, String)> = release
        .manifest()
        .iter()
        .map(|o| {
            let name = o["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            (o["kind"].as_str().unwrap_or_default().to_string(), name)
        })
        .collect();
    for ((api_version, kind, namespace, name), uid) in handed.iter().zip(before) {
        let api = dynamic_api(client, api_version, kind, namespace.as_deref()).await;
        let now = api.get(name).await.unwrap();
        assert_eq!(
            now.metadata.uid.as_deref(),
            Some(uid.as_str()),
            "{kind} {name} was replaced"
        );
        assert!(
            managed.contains(&(kind.clone(), name.clone())),
            "{kind} {name} is not in the release's manifest"
        );
    }
}

#[tokio::test]
#[ignore = "needs the local zonal cluster with real nodes (make e2e)"]
async fn install_yaml_applied_does_what_make_deploy_does() {
    let cluster = Cluster::get();
    let real = RealNodes::of(&cluster);
    let victim = TestNamespace::create(&cluster, "install").await;
    let client = victim.client.clone();
    let dir = std::env::temp_dir().join(format!("e2e-install-{}", victim.suffix()));
    std::fs::create_dir_all(&dir).unwrap();
    let (file, image) = install_yaml(&cluster, &real, &dir);
    let text = std::fs::read_to_string(&file).unwrap();

    let ids = file_holds_the_crds_and_what_make_deploy_applies(&cluster, &text, &image);
    cluster_is_fresh(&client, &ids).await;

    // Applied as the README says.
    let started = Instant::now();
    let mut installed = Installed::new(&cluster, vec![file.clone()]);
    eprintln!(
        "{}",
        kubectl(
            &cluster,
            &[&APPLY[..], &["-f", &file.display().to_string()]].concat()
        )
    );
    wait_all(&client, &ids, true, "every object of install.yaml").await;
    controllers_placed_on_the_real_nodes(&cluster, &real, NAMESPACE);
    let home_pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    wait_controllers_on_real_nodes(&client, &home_pods, &image).await;
    let webhook = ids
        .iter()
        .find(|(_, kind, ..)| kind == "ValidatingWebhookConfiguration")
        .map(|(.., name)| name.clone())
        .expect("install.yaml has the eviction webhook");
    wait_for_fail_policy(&client, &webhook).await;
    eprintln!(
        "install.yaml applied: every binary Ready on the real nodes ({image}), the webhook \
         serving, after {:?}",
        started.elapsed()
    );

    // The samples under the installed controllers, and the webhook judging their evictions.
    let started = Instant::now();
    apply_samples(&cluster, &victim.name);
    wait_for_samples(&client, &victim.name).await;
    assert_webhook_judges(&victim).await;
    eprintln!(
        "the samples reached their status, the webhook judged, after {:?}",
        started.elapsed()
    );

    // Moved to the chart as docs/helm.md says: every object adopted in place.
    let started = Instant::now();
    let mut release = Release::new(&cluster, RELEASE, NAMESPACE);
    adopted_by_the_chart(&client, &real, &mut release, &ids, &dir).await;
    eprintln!(
        "moved to the chart, every object adopted in place, after {:?}",
        started.elapsed()
    );
    assert_webhook_judges(&victim).await;

    // Removed: everything install.yaml applied but the CRDs; the users' objects stay.
    let started = Instant::now();
    eprintln!("{}", release.uninstall());
    installed.remove();
    wait_all(&client, &ids, false, "every object of install.yaml gone").await;
    assert_only_crds_and_samples_left(&client, &home_pods, &victim.name).await;
    eprintln!("install.yaml removed after {:?}", started.elapsed());
    let _ = std::fs::remove_dir_all(&dir);
}
