//! `make deploy` / `make undeploy` against the real API server, and the shipped RBAC.
//!
//! Isolation: the deployed webhook's pods run on kwok nodes and cannot answer, so the test's
//! overlay replaces the webhook's namespaceSelector with one matching only a dedicated namespace
//! of this test, and adds a unique name suffix to every cluster-scoped object.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use e2e::deploy::{
    Identity, Overlay, TestDeploy, apply_samples, dynamic_api, identities, make, status_of,
    wait_for_sample_budget, wait_for_sample_sprom,
};
use e2e::identity::{self, ServiceAccountIdentity};
use e2e::{Cluster, TestNamespace, pods, wait_for};
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Pod, Service};
use k8s_openapi::api::rbac::v1::RoleBinding;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{DynamicObject, EvictParams, ListParams, PostParams};
use kube::{Api, Client};
use serde_json::{Value, json};

const IMG: &str = "registry.invalid/zone-aware-controllers:e2e";

#[path = "deploy/rbac.rs"]
mod rbac;

#[tokio::test]
#[ignore = "needs the local zonal cluster (make e2e)"]
async fn deploy_applies_and_undeploy_removes_webhook_first_never_crds() {
    let cluster = Cluster::get();
    let victim = TestNamespace::create(&cluster, "deploy-victim").await;
    let client = victim.client.clone();
    let suffix = victim.suffix().to_string();
    let namespace = format!("e2e-deploy-{suffix}");
    let overlay = Overlay::new("config/default", &suffix, &victim.name, "");
    // Undeploys whatever deploy left if the test fails half-way.
    let mut deployment = TestDeploy::new(&cluster, overlay, &namespace, IMG);

    let objects = deployment.manifests();
    let ids = identities(&objects);
    manifests_are_namespaced_or_unique_and_hold_no_crd(&ids, &namespace, &suffix);
    deploy_creates_every_object(&deployment, &client, &ids).await;
    editors_change_and_viewers_read_the_three_kinds(&client, &victim.name).await;
    controllers_run_twice_on_kwok_nodes_in_two_zones(&client, &namespace, &suffix).await;
    let webhook_name = format!("zone-aware-eviction-webhook-{suffix}");
    webhook_calls_the_zdb_service(&client, &namespace, &suffix, &webhook_name).await;
    let victim_pods = webhook_that_never_served_blocks_no_eviction(&victim, &webhook_name).await;

    // A user object that must survive undeploy.
    let zau = dynamic_api(
        &client,
        "zonecontrol.k8s.aws/v1",
        "ZoneAwareUpdate",
        Some(&victim.name),
    )
    .await;
    let user_object: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "zonecontrol.k8s.aws/v1",
        "kind": "ZoneAwareUpdate",
        "metadata": {"name": "survivor"},
        "spec": {"statefulset": "web"},
    }))
    .unwrap();
    zau.create(&PostParams::default(), &user_object)
        .await
        .unwrap();

    deployment
        .undeploy_webhook_first(&client, &ids, &webhook_name)
        .await;
    undeploy_keeps_only_the_crds_and_user_objects(&client, &ids, &namespace, &zau).await;
    // With the webhook configuration gone, evictions in the victim namespace still work.
    victim_pods
        .evict("victim-2", &EvictParams::default())
        .await
        .unwrap();
}

/// The rendered manifests hold every kind deploy needs and no CRD; the namespaced objects are in
/// the deploy's namespace and the cluster-scoped ones carry the test's suffix.
fn manifests_are_namespaced_or_unique_and_hold_no_crd(
    ids: &[Identity],
    namespace: &str,
    suffix: &str,
) {
    let kinds: Vec<&str> = ids.iter().map(|(_, k, _, _)| k.as_str()).collect();
    for kind in [
        "Namespace",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
        "Deployment",
        "Service",
        "PodDisruptionBudget",
        "ValidatingWebhookConfiguration",
    ] {
        assert!(kinds.contains(&kind), "rendered manifests lack a {kind}");
    }
    assert!(
        !kinds.contains(&"CustomResourceDefinition"),
        "deploy's manifests must not hold the CRDs (undeploy would delete them)"
    );
    for (_, kind, ns, name) in ids {
        if kind != "Namespace"
            && kind != "ClusterRole"
            && kind != "ClusterRoleBinding"
            && kind != "ValidatingWebhookConfiguration"
        {
            assert_eq!(ns.as_deref(), Some(namespace), "{kind}/{name}");
        } else if kind != "Namespace" {
            assert!(
                name.ends_with(suffix),
                "{kind}/{name} is not unique to the test"
            );
        }
    }
}

/// Deploy: server-side apply by the real API server (schema validation, PodSecurity admission
/// of the `restricted` namespace label against the pods' securityContext).
async fn deploy_creates_every_object(
    deployment: &TestDeploy<'_>,
    client: &Client,
    ids: &[Identity],
) {
    let output = deployment.make("deploy");
    assert!(output.contains("serverside-applied"), "{output}");
    for (api_version, kind, ns, name) in ids {
        let api = dynamic_api(client, api_version, kind, ns.as_deref()).await;
        assert!(
            api.get_opt(name).await.unwrap().is_some(),
            "{kind}/{name} was not created"
        );
    }
}

/// Namespace editors may create and change the three kinds, viewers only read them: the
/// aggregated ClusterRoles reach the built-in `edit` and `view` (the controller manager's
/// aggregation controller fills them in, so this polls).
async fn editors_change_and_viewers_read_the_three_kinds(client: &Client, victim: &str) {
    let bindings: Api<RoleBinding> = Api::namespaced(client.clone(), victim);
    for (user, role) in [("alice", "edit"), ("bob", "view")] {
        let binding: RoleBinding = serde_json::from_value(json!({
            "metadata": {"name": format!("{user}-{role}")},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
        }))
        .unwrap();
        bindings
            .create(&PostParams::default(), &binding)
            .await
            .unwrap();
    }
    wait_for(
        "the aggregated roles in edit and view",
        Duration::from_secs(60),
        || async {
            let mut wrong = Vec::new();
            for (user, verb, resource, scope, expected) in rbac::USER_CASES {
                let ns = scope.namespace(victim);
                if rbac::user_allowed(client, user, verb, resource, ns).await != *expected {
                    wrong.push(format!(
                        "{user} {verb} {resource} in {ns:?}: not {expected}"
                    ));
                }
            }
            if wrong.is_empty() {
                Ok(())
            } else {
                Err(wrong.join("; "))
            }
        },
    )
    .await;
}

/// The controllers' pods are scheduled onto the kwok nodes, one zone each at most twice.
async fn controllers_run_twice_on_kwok_nodes_in_two_zones(
    client: &Client,
    namespace: &str,
    suffix: &str,
) {
    let nodes = e2e::nodes::zones(client, "type=kwok").await;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), namespace);
    let pod_api: Api<Pod> = Api::namespaced(client.clone(), namespace);
    for binary in e2e::deploy::controllers() {
        let name = format!("{binary}-{suffix}");
        let deployment = deployments.get(&name).await.unwrap();
        assert_eq!(deployment.spec.as_ref().unwrap().replicas, Some(2));
        let scheduled = wait_for(
            &format!("2 pods of {name} on kwok nodes"),
            Duration::from_secs(60),
            || async {
                let list = pod_api
                    .list(
                        &ListParams::default().labels(&format!("app.kubernetes.io/name={binary}")),
                    )
                    .await
                    .map_err(|e| e.to_string())?;
                let placed: Vec<(String, String)> = list
                    .items
                    .iter()
                    .filter_map(|p| {
                        let node = p.spec.as_ref()?.node_name.clone()?;
                        Some((p.metadata.name.clone()?, node))
                    })
                    .collect();
                if placed.len() == 2 {
                    Ok(placed)
                } else {
                    Err(format!("{placed:?}"))
                }
            },
        )
        .await;
        let zones: std::collections::BTreeSet<&String> =
            scheduled.iter().map(|(_, node)| &nodes[node]).collect();
        assert_eq!(zones.len(), 2, "replicas spread over zones: {scheduled:?}");
        let pod = pod_api.get(&scheduled[0].0).await.unwrap();
        let container = &pod.spec.unwrap().containers[0];
        assert_eq!(container.image.as_deref(), Some(IMG));
        assert_eq!(
            container.command.as_deref(),
            Some(&[format!("/{binary}")][..])
        );
    }
}

/// The webhook configuration points at the Service, which selects the zdb pods' webhook port.
async fn webhook_calls_the_zdb_service(
    client: &Client,
    namespace: &str,
    suffix: &str,
    webhook_name: &str,
) {
    let webhooks: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    let configuration = webhooks.get(webhook_name).await.unwrap();
    let webhook = &configuration.webhooks.as_ref().unwrap()[0];
    let service_ref = webhook.client_config.service.as_ref().unwrap();
    assert_eq!(service_ref.name, format!("zdb-webhook-{suffix}"));
    assert_eq!(service_ref.namespace, namespace);
    assert_eq!(service_ref.path.as_deref(), Some("/validate-eviction"));
    assert_eq!(service_ref.port, Some(443));
    // Shipped at Ignore: only a replica that serves moves it to Fail.
    assert_eq!(webhook.failure_policy.as_deref(), Some("Ignore"));
    assert_eq!(webhook.side_effects, "NoneOnDryRun");
    assert_eq!(webhook.timeout_seconds, Some(5));
    let service = Api::<Service>::namespaced(client.clone(), namespace)
        .get(&service_ref.name)
        .await
        .unwrap();
    let spec = service.spec.unwrap();
    assert_eq!(
        spec.selector.unwrap()["app.kubernetes.io/name"],
        "zdb-controller"
    );
    let port = &spec.ports.unwrap()[0];
    assert_eq!(port.port, 443);
    assert_eq!(
        port.target_port,
        Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::String("webhook".into()))
    );
    // The zdb container receives the renamed objects' names.
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), namespace);
    let zdb = deployments
        .get(&format!("zdb-controller-{suffix}"))
        .await
        .unwrap();
    let args = zdb.spec.unwrap().template.spec.unwrap().containers[0]
        .args
        .clone()
        .unwrap();
    let after = |flag: &str| {
        args.iter()
            .position(|a| a == flag)
            .map(|i| args[i + 1].clone())
    };
    assert_eq!(
        after("--webhook-config-name"),
        Some(webhook_name.to_string())
    );
    assert_eq!(after("--service-name"), Some(service_ref.name.clone()));
}

/// The webhook is live for the victim namespace only. Its pods never serve (kwok runs no
/// image: a deploy whose image cannot start), so no replica moves the configuration to Fail
/// and evictions there keep working: the API server's failed call is ignored. Returns the
/// victim namespace's pods, `victim-2` still to evict.
async fn webhook_that_never_served_blocks_no_eviction(
    victim: &TestNamespace,
    webhook_name: &str,
) -> Api<Pod> {
    let victim_pods: Api<Pod> = victim.api();
    create_app_pods(&victim_pods, &["victim", "victim-2"]).await;
    wait_for("the victim pods Ready", Duration::from_secs(60), || async {
        for name in ["victim", "victim-2"] {
            match victim_pods.get(name).await {
                Ok(p) if pods::is_ready(&p) => {}
                other => return Err(format!("{name}: {:?}", other.map(|p| p.status))),
            }
        }
        Ok(())
    })
    .await;
    victim_pods
        .evict("victim", &EvictParams::default())
        .await
        .expect("a deploy whose webhook never served blocks no eviction");
    let webhooks: Api<ValidatingWebhookConfiguration> = Api::all(victim.client.clone());
    let configuration = webhooks.get(webhook_name).await.unwrap();
    assert_eq!(
        configuration.webhooks.as_ref().unwrap()[0]
            .failure_policy
            .as_deref(),
        Some("Ignore"),
        "no replica served, so none may have moved the policy to Fail"
    );
    victim_pods
}

/// Creates a pod of one container `app` (an image kwok does not run) for each of `names`.
async fn create_app_pods(pods: &Api<Pod>, names: &[&str]) {
    for name in names {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {"containers": [{"name": "app", "image": "registry.invalid/app:1"}]},
        }))
        .unwrap();
        pods.create(&PostParams::default(), &pod).await.unwrap();
    }
}

/// Undeploy removed every deployed object and the namespace, never the CRDs nor the users'
/// objects (`zau` holds the survivor).
async fn undeploy_keeps_only_the_crds_and_user_objects(
    client: &Client,
    ids: &[Identity],
    namespace: &str,
    zau: &Api<DynamicObject>,
) {
    for (api_version, kind, ns, name) in ids {
        let api = dynamic_api(client, api_version, kind, ns.as_deref()).await;
        assert!(
            api.get_opt(name).await.unwrap().is_none(),
            "{kind}/{name} survived undeploy"
        );
    }
    assert!(
        Api::<Namespace>::all(client.clone())
            .get_opt(namespace)
            .await
            .unwrap()
            .is_none(),
        "namespace {namespace} is gone"
    );
    // Never the CRDs, nor the users' objects.
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in [
        "zoneawareupdates.zonecontrol.k8s.aws",
        "zonedisruptionbudgets.zonecontrol.k8s.aws",
    ] {
        let crd = crds.get(crd).await.unwrap();
        assert!(crd.metadata.deletion_timestamp.is_none());
    }
    assert!(
        zau.get_opt("survivor").await.unwrap().is_some(),
        "user object deleted"
    );
}

#[tokio::test]
#[ignore = "needs the local zonal cluster (make e2e)"]
async fn deploy_rbac_grants_exactly_the_designed_verbs_zau_zdb_shard_federator() {
    let cluster = Cluster::get();
    let ns = TestNamespace::create(&cluster, "deploy-rbac").await;
    let client = ns.client.clone();

    let zau =
        ServiceAccountIdentity::create(&cluster, "zau-controller", &ns.name, &[], &[], |_| {});
    let zdb =
        ServiceAccountIdentity::create(&cluster, "zdb-controller", &ns.name, &[], &[], |_| {});
    let shard =
        ServiceAccountIdentity::create(&cluster, "shard-controller", &ns.name, &[], &[], |_| {});
    let federator =
        ServiceAccountIdentity::create(&cluster, "rules-federator", &ns.name, &[], &[], |_| {});
    let mut wrong = Vec::new();
    for (identity, cases) in [
        (&zau, rbac::ZAU_CASES),
        (&zdb, rbac::ZDB_CASES),
        (&shard, rbac::SHARD_CASES),
        (&federator, rbac::FEDERATOR_CASES),
    ] {
        wrong.extend(rbac::differences(&client, identity, cases, &ns.name).await);
    }
    assert!(
        wrong.is_empty(),
        "RBAC differs from the design:\n{}",
        wrong.join("\n")
    );
}

#[tokio::test]
#[ignore = "needs the local zonal cluster (make e2e)"]
async fn deploy_rbac_zau_without_eviction_grant_cannot_evict() {
    let cluster = Cluster::get();
    let ns = TestNamespace::create(&cluster, "deploy-rbac-evict").await;
    let pod_api: Api<Pod> = ns.api();
    create_app_pods(&pod_api, &["a", "b"]).await;
    // The shipped ZAU role minus `create pods/eviction`.
    let crippled =
        ServiceAccountIdentity::create(&cluster, "zau-controller", &ns.name, &[], &[], |objects| {
            for object in objects.iter_mut() {
                if let Some(rules) = object.get_mut("rules").and_then(Value::as_array_mut) {
                    rules.retain(|rule| {
                        !rule["resources"]
                            .as_array()
                            .unwrap()
                            .contains(&json!("pods/eviction"))
                    });
                }
            }
        });
    let full =
        ServiceAccountIdentity::create(&cluster, "zau-controller", &ns.name, &[], &[], |_| {});

    let as_crippled: Api<Pod> = Api::namespaced(crippled.client().await, &ns.name);
    // The grant lands asynchronously in the authorizer's cache: poll until the full identity
    // can evict, so the 403 below is about the missing rule, not a slow cache.
    let as_full: Api<Pod> = Api::namespaced(full.client().await, &ns.name);
    wait_for(
        "the full ZAU identity evicts pod a",
        Duration::from_secs(30),
        || async {
            match as_full.evict("a", &EvictParams::default()).await {
                Ok(_) => Ok(()),
                Err(e) => Err(e.to_string()),
            }
        },
    )
    .await;
    match as_crippled.evict("b", &EvictParams::default()).await {
        Err(kube::Error::Api(status)) => assert_eq!(status.code, 403, "{status:?}"),
        other => panic!("eviction without the grant must be forbidden: {other:?}"),
    }
    // Everything else the role grants still works for it: listing pods.
    assert!(as_crippled.list(&ListParams::default()).await.is_ok());
}

/// `status` of a zonecontrol object, or an error naming what is missing.
#[tokio::test]
#[ignore = "needs the local zonal cluster (make e2e)"]
async fn deploy_samples_reach_their_status_zau_zdb_sprom() {
    let cluster = Cluster::get();
    let ns = TestNamespace::create(&cluster, "deploy-samples").await;
    let client = ns.client.clone();
    apply_samples(&cluster, &ns.name);

    // The controllers, as their ServiceAccounts with the shipped RBAC.
    let _controllers = start_the_controllers_as_their_service_accounts(&cluster, &ns.name);

    let zdbs = dynamic_api(
        &client,
        "zonecontrol.k8s.aws/v1",
        "ZoneDisruptionBudget",
        Some(&ns.name),
    )
    .await;
    wait_for_sample_budget(&zdbs).await;

    // The sample ShardedPrometheus: three shards, one per zone, each with a ready Prometheus
    // (kwok marks the pods Ready); Degraded only because its ServiceAccount is not bound yet.
    let sproms = dynamic_api(
        &client,
        "zonecontrol.k8s.aws/v1",
        "ShardedPrometheus",
        Some(&ns.name),
    )
    .await;
    wait_for_sample_sprom(&sproms).await;

    sample_statefulset_rolls_out_to_completion(&ns).await;
}

/// The zau, zdb and shard controllers started as their ServiceAccounts with the shipped RBAC,
/// leases in `ns` (the shard controller watching only `ns`); they stop when dropped.
fn start_the_controllers_as_their_service_accounts(
    cluster: &Cluster,
    ns: &str,
) -> [e2e::process::ControllerProcess; 3] {
    let aws = cluster.var("AWS_ENDPOINT_URL").unwrap_or_default();
    let zau_args = [
        "--leader-elect=false",
        "--listen-address",
        "127.0.0.1:0",
        "--lease-namespace",
        ns,
    ];
    let zdb_args = [
        "--leader-elect=false",
        "--listen-address",
        "127.0.0.1:0",
        "--webhook-address",
        "127.0.0.1:0",
        "--lease-namespace",
        ns,
    ];
    let env = [
        ("AWS_ENDPOINT_URL", aws),
        ("AWS_REGION", "us-east-1".to_string()),
        ("AWS_ACCESS_KEY_ID", "test".to_string()),
        ("AWS_SECRET_ACCESS_KEY", "test".to_string()),
    ];
    let zau_identity =
        ServiceAccountIdentity::create(cluster, "zau-controller", ns, &zau_args, &env, |_| {});
    let zdb_identity =
        ServiceAccountIdentity::create(cluster, "zdb-controller", ns, &zdb_args, &env, |_| {});
    let zau = e2e::process::ControllerProcess::start_as(
        "zau-controller",
        &zau_args,
        &env,
        Some(zau_identity),
    );
    let zdb = e2e::process::ControllerProcess::start_as(
        "zdb-controller",
        &zdb_args,
        &env,
        Some(zdb_identity),
    );
    let shard_args = [
        "--leader-elect=false",
        "--listen-address",
        "127.0.0.1:0",
        "--lease-namespace",
        ns,
        "--watch-namespace",
        ns,
    ];
    let shard_identity =
        ServiceAccountIdentity::create(cluster, "shard-controller", ns, &shard_args, &[], |_| {});
    let shard = e2e::process::ControllerProcess::start_as(
        "shard-controller",
        &shard_args,
        &[],
        Some(shard_identity),
    );
    [zau, zdb, shard]
}

/// A new revision of the sample StatefulSet is rolled out zone by zone to completion.
async fn sample_statefulset_rolls_out_to_completion(ns: &TestNamespace) {
    let client = ns.client.clone();
    let sets = dynamic_api(&client, "apps/v1", "StatefulSet", Some(&ns.name)).await;
    let patch =
        json!({"spec": {"template": {"metadata": {"annotations": {"sample/revision": "2"}}}}});
    sets.patch(
        "web",
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(&patch),
    )
    .await
    .unwrap();
    let zaus = dynamic_api(
        &client,
        "zonecontrol.k8s.aws/v1",
        "ZoneAwareUpdate",
        Some(&ns.name),
    )
    .await;
    let pod_api: Api<Pod> = ns.api();
    wait_for(
        "the sample ZAU rolled every pod",
        Duration::from_secs(180),
        || async {
            let status = status_of(&zaus, "web").await?;
            let update = status["updateRevision"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            let complete = status["conditions"].as_array().is_some_and(|c| {
                c.iter()
                    .any(|c| c["type"] == "Complete" && c["status"] == "True")
            });
            let updated = pods::ready_at_revision(&pod_api, "app=web", &update).await?;
            if complete && updated == 6 && status["currentRevision"] == status["updateRevision"] {
                Ok(())
            } else {
                Err(format!("updated {updated}/6, status {status}"))
            }
        },
    )
    .await;
}

#[tokio::test]
#[ignore = "needs the local zonal cluster (make e2e)"]
async fn deploy_cert_manager_component_renders_for_the_namespace() {
    let cluster = Cluster::get();
    let ns = TestNamespace::create(&cluster, "deploy-certmanager").await;
    let rendered = make(
        &cluster,
        "manifests",
        &[("NAMESPACE", &ns.name), ("IMG", IMG), ("CERT_MANAGER", "1")],
    );
    let objects = identity::yaml_to_json(&rendered);
    let find = |kind: &str| {
        objects
            .iter()
            .find(|o| o["kind"] == kind)
            .unwrap_or_else(|| panic!("no {kind}"))
    };
    let certificate = find("Certificate");
    assert_eq!(certificate["metadata"]["namespace"], ns.name.as_str());
    assert_eq!(
        certificate["spec"]["dnsNames"][0],
        format!("zdb-webhook.{}.svc", ns.name)
    );
    assert_eq!(find("Issuer")["metadata"]["namespace"], ns.name.as_str());
    let webhook = find("ValidatingWebhookConfiguration");
    assert_eq!(
        webhook["metadata"]["annotations"]["cert-manager.io/inject-ca-from"],
        format!("{}/zdb-webhook", ns.name)
    );
    let zdb = objects
        .iter()
        .find(|o| o["kind"] == "Deployment" && o["metadata"]["name"] == "zdb-controller")
        .unwrap();
    let container = &zdb["spec"]["template"]["spec"]["containers"][0];
    let args: Vec<&str> = container["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert!(!args.contains(&"--self-signed"), "{args:?}");
    assert!(args.windows(2).any(|w| w == ["--cert-dir", "/etc/zdb/tls"]));
    assert_eq!(
        container["volumeMounts"][0]["mountPath"],
        json!("/etc/zdb/tls")
    );

    // Everything but cert-manager's own kinds (cert-manager is not installed here) is accepted
    // by the API server.
    let accepted: Vec<Value> = objects
        .into_iter()
        .filter(|o| {
            !o["apiVersion"]
                .as_str()
                .unwrap_or_default()
                .starts_with("cert-manager.io/")
        })
        .collect();
    let list = json!({"apiVersion": "v1", "kind": "List", "items": accepted});
    let mut command = identity::kubectl(&cluster);
    command.args(["apply", "--server-side", "--dry-run=server", "-f", "-"]);
    let output = identity::run(command, Some(list.to_string().as_bytes()));
    assert!(
        output.contains("validatingwebhookconfiguration.admissionregistration.k8s.io/zone-aware-eviction-webhook serverside-applied (server dry run)"),
        "{output}"
    );
}
