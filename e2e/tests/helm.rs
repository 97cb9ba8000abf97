//! The Helm chart with the real `helm` on the local zonal cluster: the packaged chart
//! (`E2E_HELM_CHART`, e.g. the one `make release` wrote to dist/; else charts/ packaged here) is
//! pushed to an OCI registry (go-containerregistry's) by mk/chart-push.sh and installed from it by
//! `oci://`; it runs the project's image (`make image`) as real pods on the real nodes, the
//! samples reach their status and the eviction webhook judges evictions; `helm test` passes, and
//! fails with the webhook down; `helm upgrade` with fewer replicas and a binary disabled leaves
//! exactly the new revision's objects (zdb-controller at one replica without its
//! PodDisruptionBudget); `helm uninstall` removes every object of the release and neither the
//! CRDs nor the users' objects.
//!
//! Isolation from the tests running next to it: the release has its own namespace, its
//! cluster-scoped objects carry the release name (the chart's prefix), and the controllers and
//! the webhook are limited to the test's namespace (`watchNamespace`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::time::Instant;

use e2e::deploy::{DeployedFederator, Identity, apply_samples, identities};
use e2e::helm::{self, Registry, Release};
use e2e::installed::{
    TIMEOUT, assert_judged, assert_only_crds_and_samples_left, assert_webhook_judges, wait_all,
    wait_binary_pods, wait_controllers_on_real_nodes, wait_for_fail_policy, wait_for_samples,
};
use e2e::real::RealNodes;
use e2e::{Cluster, TestNamespace, pods};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::{Value, json};

#[tokio::test]
#[ignore = "needs the local zonal cluster with real nodes (make e2e)"]
async fn helm_install_upgrade_uninstall_on_the_real_nodes() {
    let cluster = Cluster::get();
    let real = RealNodes::of(&cluster);
    let victim = TestNamespace::create(&cluster, "helm").await;
    let client = victim.client.clone();
    let suffix = victim.suffix().to_string();
    let home = helm::release_namespace(&cluster, &client, "helm-release").await;

    let mut release = Release::new(&cluster, &format!("zac-{suffix}"), &home.name);
    let chart = helm::chart(&release.dir);
    let values = values(&real, &victim.name);
    let first_values = release.values_file("values.yaml", &values);

    // Published as `make release CHART_REGISTRY=oci://...` publishes it, to a registry of the
    // test's; installed from there by oci://, as docs/helm.md tells users.
    let registry = Registry::start().await;
    let (reference, version) = release.push_chart(&chart, &registry);

    // Install: every binary Ready on the real nodes, two replicas each, from the project's image.
    let started = Instant::now();
    eprintln!(
        "{}",
        release.install_from_registry(&reference, &version, &first_values)
    );
    drop(registry);
    let installed = identities(&release.manifest());
    pods_as_installed(&real, &client, &home, &victim.name).await;
    let home_pods: Api<Pod> = home.api();
    let webhook_name = format!("zac-{suffix}-eviction-webhook");
    assert!(
        installed
            .iter()
            .any(|id| id.1 == "ValidatingWebhookConfiguration" && id.3 == webhook_name),
        "the cluster-scoped names carry the release name: {installed:?}"
    );
    wait_for_fail_policy(&client, &webhook_name).await;
    eprintln!(
        "helm install: every binary Ready, the webhook serving, after {:?}",
        started.elapsed()
    );

    // The samples reach their status under the release's controllers (their pods are on kwok).
    let started = Instant::now();
    apply_samples(&cluster, &victim.name);
    wait_for_samples(&client, &victim.name).await;
    eprintln!(
        "the samples reached their status after {:?}",
        started.elapsed()
    );

    // The webhook judges budgeted evictions: one zone may be disrupted, a second is refused.
    let zone_of = assert_webhook_judges(&victim).await;
    let in_zone_b = zone_of
        .iter()
        .find(|(_, zone)| *zone == "zone-b")
        .map(|(name, _)| name.clone())
        .unwrap();
    let victim_pods: Api<Pod> = victim.api();
    helm_test_passes_and_fails_without_the_webhook(&release, &home, &victim).await;

    // Upgrade: zdb-controller down to one replica, the rules-federator disabled.
    let started = Instant::now();
    let mut changed = values.clone();
    changed["zdbController"] = json!({"replicas": 1});
    changed["rulesFederator"]["enabled"] = json!(false);
    let second_values = release.values_file("values-upgrade.yaml", &changed);
    eprintln!("{}", release.upgrade(&chart, &[&second_values]));
    let upgraded = identities(&release.manifest());
    let removed = removed_by_the_upgrade(&installed, &upgraded);
    wait_all(&client, &removed, false, "the federator's objects gone").await;
    wait_all(&client, &upgraded, true, "every object of the new revision").await;
    settled_after_upgrade(&release, &home).await;
    // The upgrade left the live failurePolicy and caBundle (zdb-controller's fields) alone, and
    // the one replica judges (a dry run: nothing recorded).
    wait_for_fail_policy(&client, &webhook_name).await;
    assert_judged(&pods::evict(&victim_pods, &in_zone_b, true).await);
    eprintln!(
        "helm upgrade applied and settled after {:?}",
        started.elapsed()
    );

    // Uninstall: every object of the release goes; the CRDs and the users' objects stay.
    let started = Instant::now();
    eprintln!("{}", release.uninstall());
    wait_all(
        &client,
        &upgraded,
        false,
        "every object of the release gone",
    )
    .await;
    assert_only_crds_and_samples_left(&client, &home_pods, &victim.name).await;
    let releases = release.helm(&["list", "--all", "-q"]);
    assert!(releases.trim().is_empty(), "releases left: {releases}");
    eprintln!("helm uninstall done after {:?}", started.elapsed());
}

/// `helm test` (`kubectl zone check` in a pod of the watched namespace) passes: every binary
/// answers, the webhook judges a dry-run eviction (the check fails unless zdb-controller's
/// decision counters grew). With zdb-controller scaled to nothing (the webhook at failurePolicy
/// Fail), it fails, and the pod it keeps says why; back, it passes again (and its objects go, as
/// after every pass).
async fn helm_test_passes_and_fails_without_the_webhook(
    release: &Release<'_>,
    home: &TestNamespace,
    victim: &TestNamespace,
) {
    let started = Instant::now();
    let pod = format!("{}-check", release.name);
    let passed = release.helm(&["test", &release.name]);
    assert!(
        passed.contains(&format!("TEST SUITE:     {pod}"))
            && passed.contains("Phase:          Succeeded"),
        "{passed}"
    );
    eprintln!("helm test passed after {:?}:\n{passed}", started.elapsed());

    let deployments: Api<Deployment> = home.api();
    let scale = |replicas: i32| {
        let deployments = deployments.clone();
        async move {
            let patch = json!({"spec": {"replicas": replicas}});
            deployments
                .patch(
                    "zdb-controller",
                    &PatchParams::default(),
                    &Patch::Merge(&patch),
                )
                .await
                .unwrap();
        }
    };
    scale(0).await;
    let home_pods: Api<Pod> = home.api();
    e2e::wait_for("zdb-controller's pods gone", TIMEOUT, || async {
        match pods::list(&home_pods, "app.kubernetes.io/name=zdb-controller")
            .await
            .len()
        {
            0 => Ok(()),
            n => Err(format!("{n} pods")),
        }
    })
    .await;
    let failed = release
        .try_helm(&["test", &release.name])
        .expect_err("helm test passed without the webhook");
    let victim_pods: Api<Pod> = victim.api();
    let logs = victim_pods
        .logs(&pod, &Default::default())
        .await
        .unwrap_or_else(|e| panic!("the failed test's pod {pod} and its logs are kept: {e}"));
    assert!(
        logs.contains("FAILED  the eviction webhook admits"),
        "{logs}"
    );
    assert!(logs.contains("failed calling webhook"), "{logs}");
    eprintln!("helm test failed without the webhook, as it should:\n{failed}\n{logs}");

    scale(2).await;
    wait_binary_pods(&home_pods, "zdb-controller", 2).await;
    wait_for_fail_policy(&home.client, &format!("{}-eviction-webhook", release.name)).await;
    release.helm(&["test", &release.name]);
}

/// Every binary Ready on the real nodes, two replicas each, from the project's image, with the
/// chart's commonLabels; zdb-controller logs plain text (extraArgs); the federator serves HTTPS
/// only and wants a token; with watchNamespace the controllers' tokens list pods there only.
async fn pods_as_installed(
    real: &RealNodes,
    client: &kube::Client,
    home: &TestNamespace,
    watched: &str,
) {
    let home_pods: Api<Pod> = home.api();
    let controllers = wait_controllers_on_real_nodes(client, &home_pods, real.project_image());
    for pod in controllers.await {
        let container = &pod.spec.as_ref().unwrap().containers[0];
        assert_eq!(container.image_pull_policy.as_deref(), Some("Never"));
        assert_eq!(
            pod.metadata.labels.as_ref().unwrap()["zonecontrol.k8s.aws/e2e"],
            "true",
            "commonLabels on the pods"
        );
    }
    let zdb_pod = wait_binary_pods(&home_pods, "zdb-controller", 2)
        .await
        .remove(0);
    let log = home_pods
        .logs(
            &kube::ResourceExt::name_any(&zdb_pod),
            &kube::api::LogParams::default(),
        )
        .await
        .unwrap();
    let first = log.lines().next().unwrap_or_default();
    assert!(
        !first.is_empty() && !first.starts_with('{'),
        "zdb-controller logs in plain text (extraArgs): {first}"
    );
    // The federator serves HTTPS by default, under the self-signed CA of its Secret, for its
    // Service's name; its callers need a token (401 without).
    let federator_pod = wait_binary_pods(&home_pods, "rules-federator", 2)
        .await
        .remove(0);
    let federator = DeployedFederator::of(client, &federator_pod).await;
    let (code, body) = federator.get("/api/v1/rules", None).await.unwrap();
    assert_eq!(code, 401, "an anonymous call over HTTPS: {body}");
    let plain = e2e::process::http_get_from(federator.address, "/healthz").await;
    assert!(plain.is_err(), "plain HTTP to the federator: {plain:?}");
    // watchNamespace: the controllers' namespaced grants are Roles of that namespace.
    for binary in ["zau-controller", "zdb-controller", "shard-controller"] {
        let account = (home.name.as_str(), binary);
        let may = |namespace| {
            e2e::identity::service_account_may(client, account, "list", "pods", namespace)
        };
        assert!(may(watched).await, "{binary} lists pods where it watches");
        assert!(!may("kube-system").await, "{binary} lists pods elsewhere");
    }
}

/// What the upgrade removed: the federator's objects (its Deployment and ClusterRole among them)
/// and zdb-controller's PodDisruptionBudget (at one replica, a budget keeping a pod up would
/// block the drain of its node for good), only them.
fn removed_by_the_upgrade(installed: &[Identity], upgraded: &[Identity]) -> Vec<Identity> {
    let removed: Vec<Identity> = installed
        .iter()
        .filter(|id| !upgraded.contains(id))
        .cloned()
        .collect();
    let names: BTreeSet<&str> = removed.iter().map(|id| id.3.as_str()).collect();
    let zdb_budget = |id: &Identity| id.1 == "PodDisruptionBudget" && id.3 == "zdb-controller";
    assert!(
        removed.iter().any(zdb_budget)
            && removed
                .iter()
                .all(|id| id.3.contains("rules-federator") || zdb_budget(id)),
        "the upgrade removes the federator's objects and zdb-controller's budget, only them: \
         {names:?}"
    );
    assert!(
        removed.iter().any(|id| id.1 == "Deployment")
            && removed.iter().any(|id| id.1 == "ClusterRole"),
        "{names:?}"
    );
    removed
}

/// The release's values: the project's image on the real nodes, limited to `watched`.
fn values(real: &RealNodes, watched: &str) -> Value {
    helm::on_real_nodes(
        real,
        json!({
        "watchNamespace": watched,
        "rulesFederator": {"discoverNamespace": watched},
        // A flag the chart already sets (--log-format json): the later one wins, where clap
        // refused the repeated flag and the pods crash-looped.
        "zdbController": {"extraArgs": ["--log-format", "plain"]},
        "commonLabels": {"zonecontrol.k8s.aws/e2e": "true"},
        }),
    )
}

/// The upgraded release: zdb-controller at one replica, no federator, the others at two; helm
/// says revision 2 is deployed.
async fn settled_after_upgrade(release: &Release<'_>, home: &TestNamespace) {
    let home_pods: Api<Pod> = home.api();
    let deployments: Api<Deployment> = home.api();
    let zdb = deployments.get("zdb-controller").await.unwrap();
    assert_eq!(zdb.spec.unwrap().replicas, Some(1));
    wait_binary_pods(&home_pods, "zdb-controller", 1).await;
    wait_binary_pods(&home_pods, "rules-federator", 0).await;
    for binary in ["zau-controller", "shard-controller"] {
        wait_binary_pods(&home_pods, binary, 2).await;
    }
    let status: Value =
        serde_json::from_str(&release.helm(&["status", &release.name, "-o", "json"])).unwrap();
    assert_eq!(status["version"], 2);
    assert_eq!(status["info"]["status"], "deployed");
}
