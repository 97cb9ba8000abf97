//! `make deploy` of config/local on the local zonal cluster: the project's image (`make image`)
//! runs as real pods on the real nodes (kubelet + containerd), with the shipped securityContext,
//! probes and RBAC; the eviction webhook is called by the API server through its Service; the
//! deployed zau-controller rolls a StatefulSet of real pods zone by zone; a killed leader's standby
//! takes the lease and does the work; the sample ShardedPrometheus's disruption budgets hold a
//! drain of two zones, and its shards roll zone by zone.
//!
//! Isolation from the tests running next to it: every name carries the test's suffix, the webhook
//! selects only the test's namespace, and both controllers watch only that namespace.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use e2e::deploy::{
    DeployedFederator, Overlay, TestDeploy, apply_samples, dynamic_api, identities, lease_holder,
    reader_token, status_of, wait_for_sample_budget, wait_for_sample_zau, watch_only,
};
use e2e::quota::PodQuota;
use e2e::real::RealNodes;
use e2e::{Cluster, TestNamespace, audit, pods, wait_for};
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::{DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;

#[path = "deploy_local/budgets.rs"]
mod budgets;
#[path = "deploy_local/ledger.rs"]
mod ledger;
#[path = "deploy_local/rollout.rs"]
mod rollout;

fn node_of(pod: &Pod) -> &str {
    pods::node_of(pod).unwrap()
}

/// A StatefulSet of the metrics target on the real nodes, two pods per zone, rolled by a ZAU.
fn real_statefulset(name: &str, real: &RealNodes) -> StatefulSet {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "replicas": 6,
            "serviceName": name,
            "podManagementPolicy": "Parallel",
            "updateStrategy": {"type": "OnDelete"},
            "selector": {"matchLabels": {"app": name}},
            "template": real.metrics_target_template(name),
        },
    }))
    .unwrap()
}

#[tokio::test]
#[ignore = "needs the local zonal cluster with real nodes (make e2e)"]
async fn deploy_local_runs_the_controllers_as_real_pods() {
    let cluster = Cluster::get();
    let real_nodes = RealNodes::of(&cluster);
    let image = real_nodes.project_image().to_owned();
    let victim = TestNamespace::create(&cluster, "deploy-local").await;
    let client = victim.client.clone();
    let suffix = victim.suffix().to_string();
    let namespace = format!("e2e-deployed-{suffix}");
    let controllers = e2e::deploy::controllers();
    let watch_only_victim = watch_only(&controllers, &victim.name);
    let overlay = Overlay::new("config/local", &suffix, &victim.name, &watch_only_victim);
    let mut deployment = TestDeploy::new(&cluster, overlay, &namespace, &image);
    let ids = identities(&deployment.manifests());
    deployment.make("deploy");

    // Both Deployments: 2 Ready replicas each, on real nodes of two zones, as shipped.
    let real = e2e::real::nodes(&client).await;
    assert_eq!(real.len(), 3, "one real node per zone: {real:?}");
    let deployed_pods: Api<Pod> = Api::namespaced(client.clone(), &namespace);
    let mut controller_pods = BTreeMap::new();
    for controller in controllers.iter().map(String::as_str) {
        let ready = controller_ready_on_real_nodes_as_shipped(
            &client, &namespace, &suffix, controller, &image, &real,
        )
        .await;
        controller_pods.insert(controller, ready);
    }

    // One replica of each leader-elected controller holds its Lease.
    let leases: Api<Lease> = Api::namespaced(client.clone(), &namespace);
    leaders_hold_their_leases(&leases, &controllers, &controller_pods).await;

    let webhook_name = format!("zone-aware-eviction-webhook-{suffix}");
    self_signed_webhook_moves_to_fail_once_served(&client, &namespace, &webhook_name).await;

    // The samples reach their status under the deployed controllers (their pods are on kwok).
    let (zdbs, zaus) = samples_reach_their_status(&cluster, &victim).await;

    let standby_ip =
        standby_takes_the_zau_lease(&client, &namespace, &leases, &controller_pods).await;
    let zone_of_pod =
        real_statefulset_two_pods_per_zone(&victim, &real_nodes, &real, &zdbs, &zaus).await;
    standby_rolls_a_new_revision(&victim, &zaus).await;
    evicted_once_zone_by_zone_by_the_standby(
        &cluster,
        &victim.name,
        &zone_of_pod,
        &format!("system:serviceaccount:{namespace}:zau-controller-{suffix}"),
        &standby_ip,
    );

    // The deployed webhook, called through its Service: a zone-a pod held missing refuses a
    // zone-b eviction with 429.
    e2e::installed::assert_webhook_judges_pods(&victim, &zone_of_pod).await;

    // The deployed rules-federator (discovering the sample ShardedPrometheus of the victim
    // namespace) serves the rules of its shards once they run real Prometheus with a rule file,
    // shards kept apart, and follows a scale without a restart.
    // The shipped federator authenticates its callers: Grafana's token is bound to the deployed
    // reader ClusterRole, anonymous calls are refused.
    let grafana = reader_token(
        &cluster,
        &victim,
        &format!("zone-aware-rules-federator-reader-{suffix}"),
    );
    federated_rules_follow_the_sample(
        &victim,
        &real_nodes,
        &controller_pods["rules-federator"],
        &grafana,
    )
    .await;

    // The sample's shards at 2 replicas: their budgets, kept by the deployed shard-controller,
    // hold a drain of two zones' real nodes in its second zone (the deployed webhook refuses).
    budgets::shard_budgets_hold_a_two_zone_drain(&victim, &real).await;

    // Their pods rolled by the deployed controllers: zone by zone, held by a shard that refuses
    // its configuration (against every StatefulSet rolling itself, measured first).
    rollout::shards_roll_zone_by_zone(&victim, &real_nodes).await;

    // What their scraping moves between zones, as the deployed shard-controller counts it,
    // against what the targets served: Topology then Classic.
    let deployed = ledger::Deployed {
        pods: &deployed_pods,
        leases: &leases,
    };
    ledger::the_ledger_counts_what_the_targets_served(&victim, &real_nodes, &deployed).await;

    // Undeploy: the webhook configuration goes first, then everything else.
    deployment
        .undeploy_webhook_first(&client, &ids, &webhook_name)
        .await;
    wait_for(
        "the controllers' pods gone from the real nodes",
        Duration::from_secs(120),
        || async {
            let left = deployed_pods
                .list(&ListParams::default())
                .await
                .map(|l| l.items.len())
                .unwrap_or(0);
            if left == 0 {
                Ok(())
            } else {
                Err(format!("{left} pods left"))
            }
        },
    )
    .await;
}

/// One replica of each leader-elected controller holds its Lease.
async fn leaders_hold_their_leases(
    leases: &Api<Lease>,
    controllers: &[String],
    controller_pods: &BTreeMap<&str, Vec<Pod>>,
) {
    for controller in controllers
        .iter()
        .map(String::as_str)
        .filter(|c| e2e::deploy::is_leader_elected(c))
    {
        let holder = wait_for(
            &format!("{controller}'s lease held"),
            Duration::from_secs(60),
            || lease_holder(leases, controller),
        )
        .await;
        assert!(
            controller_pods[controller]
                .iter()
                .any(|p| p.metadata.name.as_ref() == Some(&holder)),
            "{holder} is a pod of {controller}"
        );
    }
}

/// The samples reach their status under the deployed controllers (their pods are on kwok).
/// Returns the ZoneDisruptionBudget and ZoneAwareUpdate APIs of the victim namespace.
async fn samples_reach_their_status(
    cluster: &Cluster,
    victim: &TestNamespace,
) -> (Api<DynamicObject>, Api<DynamicObject>) {
    apply_samples(cluster, &victim.name);
    let zdbs = dynamic_api(
        &victim.client,
        "zonecontrol.k8s.aws/v1",
        "ZoneDisruptionBudget",
        Some(&victim.name),
    )
    .await;
    let zaus = dynamic_api(
        &victim.client,
        "zonecontrol.k8s.aws/v1",
        "ZoneAwareUpdate",
        Some(&victim.name),
    )
    .await;
    wait_for_sample_budget(&zdbs).await;
    wait_for_sample_zau(&zaus).await;
    (zdbs, zaus)
}

/// The Deployment of `controller`: 2 Ready replicas on real nodes of two zones, with the
/// project's image, probes and securityContext as shipped; returns the ready pods.
async fn controller_ready_on_real_nodes_as_shipped(
    client: &Client,
    namespace: &str,
    suffix: &str,
    controller: &str,
    image: &str,
    real: &BTreeMap<String, String>,
) -> Vec<Pod> {
    let deployed_pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), namespace);
    let selector = format!("app.kubernetes.io/name={controller}");
    let ready = pods::wait_available(&deployed_pods, &selector, 2, Duration::from_secs(120)).await;
    let zones: BTreeSet<&String> = ready.iter().map(|p| &real[node_of(p)]).collect();
    assert_eq!(zones.len(), 2, "{controller} replicas in two zones");
    let spec = ready[0].spec.as_ref().unwrap();
    let container = &spec.containers[0];
    assert_eq!(container.image.as_deref(), Some(image));
    assert_eq!(container.image_pull_policy.as_deref(), Some("Never"));
    assert!(container.liveness_probe.is_some() && container.readiness_probe.is_some());
    let security = container.security_context.as_ref().unwrap();
    assert_eq!(security.read_only_root_filesystem, Some(true));
    assert_eq!(security.allow_privilege_escalation, Some(false));
    let pod_security = spec.security_context.as_ref().unwrap();
    assert_eq!(pod_security.run_as_non_root, Some(true));
    assert_eq!(pod_security.run_as_user, Some(65532));
    // The Deployment's status follows its pods' readiness a moment later.
    let name = format!("{controller}-{suffix}");
    wait_for(
        &format!("{controller}'s Deployment to count 2 ready replicas"),
        Duration::from_secs(30),
        || async {
            let ready = deployments
                .get(&name)
                .await
                .map_err(|e| e.to_string())?
                .status
                .and_then(|status| status.ready_replicas);
            if ready == Some(2) {
                Ok(())
            } else {
                Err(format!("readyReplicas {ready:?}"))
            }
        },
    )
    .await;
    ready
}

/// Self-signed mode: the caBundle of the webhook is the CA of the Secret the replicas share
/// (the Secret is not a rendered object: its name carries no suffix); shipped at Ignore, the
/// configuration reaches Fail by itself once a replica serves.
async fn self_signed_webhook_moves_to_fail_once_served(
    client: &Client,
    namespace: &str,
    webhook_name: &str,
) {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let webhooks: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    wait_for(
        "the caBundle patched from the Secret",
        Duration::from_secs(60),
        || async {
            let secret = secrets
                .get("zdb-webhook-tls")
                .await
                .map_err(|e| e.to_string())?;
            let ca = secret
                .data
                .and_then(|d| d.get("ca.crt").cloned())
                .ok_or("no ca.crt")?;
            let configuration = webhooks
                .get(webhook_name)
                .await
                .map_err(|e| e.to_string())?;
            let bundle = configuration.webhooks.unwrap()[0]
                .client_config
                .ca_bundle
                .clone();
            if bundle.as_ref() == Some(&ca) {
                Ok(())
            } else {
                Err("caBundle differs".to_string())
            }
        },
    )
    .await;

    // Shipped at Ignore, the configuration reaches Fail by itself once a replica serves with the
    // trusted certificate, synced caches and a Ready pod.
    let serving = std::time::Instant::now();
    wait_for(
        "the failurePolicy moved to Fail by a replica",
        Duration::from_secs(120),
        || async {
            let configuration = webhooks
                .get(webhook_name)
                .await
                .map_err(|e| e.to_string())?;
            match configuration.webhooks.unwrap()[0].failure_policy.as_deref() {
                Some("Fail") => Ok(()),
                other => Err(format!("failurePolicy {other:?}")),
            }
        },
    )
    .await;
    eprintln!(
        "failurePolicy Fail {:?} after the caBundle was set",
        serving.elapsed()
    );
}

/// Kill the zau-controller leader: its standby takes the Lease. Returns the standby's address.
async fn standby_takes_the_zau_lease(
    client: &Client,
    namespace: &str,
    leases: &Api<Lease>,
    controller_pods: &BTreeMap<&str, Vec<Pod>>,
) -> String {
    let deployed_pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let leader = lease_holder(leases, "zau-controller").await.unwrap();
    let standby = controller_pods["zau-controller"]
        .iter()
        .find(|p| p.metadata.name.as_ref() != Some(&leader))
        .unwrap()
        .clone();
    let standby_name = standby.metadata.name.clone().unwrap();
    let standby_ip = standby.status.unwrap().pod_ip.unwrap();
    // No replacement pod until the standby holds the lease: it must be the standby that takes it.
    // One pod fewer than now: once the leader is gone the quota is full.
    let deployed_count = deployed_pods
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .len();
    let no_replacement = PodQuota::hold_in(
        Api::namespaced(client.clone(), namespace),
        deployed_count - 1,
    )
    .await;
    deployed_pods
        .delete(
            &leader,
            &DeleteParams {
                grace_period_seconds: Some(0),
                ..DeleteParams::default()
            },
        )
        .await
        .unwrap();
    wait_for(
        "the standby holding the zau lease",
        Duration::from_secs(60),
        || async {
            match lease_holder(leases, "zau-controller").await? {
                holder if holder == standby_name => Ok(()),
                holder => Err(format!("held by {holder}")),
            }
        },
    )
    .await;
    no_replacement.release().await;
    standby_ip
}

/// A StatefulSet of real pods, its ZDB and ZAU: two pods per zone, counted by the ZDB. Returns
/// the zone of each pod.
async fn real_statefulset_two_pods_per_zone(
    victim: &TestNamespace,
    real_nodes: &RealNodes,
    real: &BTreeMap<String, String>,
    zdbs: &Api<DynamicObject>,
    zaus: &Api<DynamicObject>,
) -> BTreeMap<String, String> {
    let sets: Api<StatefulSet> = victim.api();
    sets.create(
        &PostParams::default(),
        &real_statefulset("real", real_nodes),
    )
    .await
    .unwrap();
    for (kind, api, spec) in [
        (
            "ZoneDisruptionBudget",
            zdbs,
            json!({"selector": {"matchLabels": {"app": "real"}}, "maxUnavailable": 1}),
        ),
        (
            "ZoneAwareUpdate",
            zaus,
            json!({"statefulset": "real", "maxUnavailable": 1, "exponentialFactor": "1.0", "ignoreAlarm": true}),
        ),
    ] {
        let object = serde_json::from_value(json!({
            "apiVersion": "zonecontrol.k8s.aws/v1",
            "kind": kind,
            "metadata": {"name": "real"},
            "spec": spec,
        }))
        .unwrap();
        api.create(&PostParams::default(), &object).await.unwrap();
    }
    let victim_pods: Api<Pod> = victim.api();
    let before = pods::wait_available(&victim_pods, "app=real", 6, Duration::from_secs(120)).await;
    let zone_of_pod: BTreeMap<String, String> = before
        .iter()
        .map(|p| (p.metadata.name.clone().unwrap(), real[node_of(p)].clone()))
        .collect();
    let per_zone: BTreeMap<&String, usize> =
        zone_of_pod.values().fold(BTreeMap::new(), |mut m, z| {
            *m.entry(z).or_default() += 1;
            m
        });
    assert_eq!(per_zone.values().collect::<Vec<_>>(), [&2, &2, &2]);
    wait_for("the real ZDB's status", Duration::from_secs(60), || async {
        let status = status_of(zdbs, "real").await?;
        if status["currentHealthy"] == json!({"zone-a": 2, "zone-b": 2, "zone-c": 2}) {
            Ok(())
        } else {
            Err(status.to_string())
        }
    })
    .await;
    zone_of_pod
}

/// A new revision of the real StatefulSet, rolled to every pod by the (standby) ZAU controller.
async fn standby_rolls_a_new_revision(victim: &TestNamespace, zaus: &Api<DynamicObject>) {
    let sets: Api<StatefulSet> = victim.api();
    let victim_pods: Api<Pod> = victim.api();
    let patch = json!({"spec": {"template": {"metadata": {"annotations": {"e2e/revision": "2"}}}}});
    let before_patch = sets.get_status("real").await.unwrap().status.unwrap();
    sets.patch("real", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    let update = wait_for(
        "the StatefulSet's new revision",
        Duration::from_secs(30),
        || async {
            let status = sets
                .get_status("real")
                .await
                .map_err(|e| e.to_string())?
                .status
                .unwrap_or_default();
            match status.update_revision {
                Some(update) if Some(&update) != before_patch.update_revision.as_ref() => {
                    Ok(update)
                }
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
    wait_for(
        "the ZAU rolled every real pod",
        Duration::from_secs(300),
        || async {
            let status = status_of(zaus, "real").await?;
            let update = update.as_str();
            let updated = pods::ready_at_revision(&victim_pods, "app=real", update).await?;
            if updated == 6
                && status["updateRevision"] == update
                && status["currentRevision"] == update
            {
                Ok(())
            } else {
                Err(format!("updated {updated}/6, status {status}"))
            }
        },
    )
    .await;
}

/// The audit log: every real pod evicted once, zone by zone, by `evictor` (the deployed
/// controller's ServiceAccount) from the standby pod's address.
fn evicted_once_zone_by_zone_by_the_standby(
    cluster: &Cluster,
    victim: &str,
    zone_of_pod: &BTreeMap<String, String>,
    evictor: &str,
    standby_ip: &String,
) {
    let events = audit::read(std::path::Path::new(&cluster.var("E2E_AUDIT_LOG").unwrap()));
    let (evicted, deleted): (Vec<&audit::AuditEvent>, Vec<&audit::AuditEvent>) =
        audit::removals(&events, victim)
            .filter(|e| {
                let name = &e.object_ref.as_ref().unwrap().name;
                zone_of_pod.contains_key(name) && e.succeeded()
            })
            .partition(|e| e.verb == "create");
    // Deletions are the kubelets finishing the evicted pods' termination, nobody else's.
    for event in &deleted {
        assert!(
            event.user.username.starts_with("system:node:"),
            "a pod deleted by {}",
            event.user.username
        );
    }
    let order: Vec<String> = evicted
        .iter()
        .map(|e| zone_of_pod[&e.object_ref.as_ref().unwrap().name].clone())
        .collect();
    assert_eq!(evicted.len(), 6, "each real pod evicted once: {order:?}");
    let mut sorted = order.clone();
    sorted.sort();
    assert_eq!(order, sorted, "zone by zone");
    for event in &evicted {
        assert_eq!(event.user.username, evictor);
        assert_eq!(
            event.source_ips.first(),
            Some(standby_ip),
            "from the standby pod"
        );
    }
}

/// The deployed federator's gRPC port (10901): Thanos's Rules API over TLS with the
/// self-signed Secret's certificate, behind the same caller checks as HTTPS: an anonymous call
/// is Unauthenticated, Grafana's token reads the rule served over HTTPS.
async fn deployed_grpc_port_serves_the_rules(api: &DeployedFederator, token: &str) {
    let anonymous = api.grpc_rules(None).await;
    assert!(
        anonymous
            .as_ref()
            .is_err_and(|e| e.starts_with("Unauthenticated")),
        "an anonymous gRPC call: {anonymous:?}"
    );
    wait_for(
        "the rule over the deployed federator's gRPC port",
        Duration::from_secs(60),
        || async {
            let messages = api.grpc_rules(Some(token)).await?;
            let names: Vec<String> = messages
                .iter()
                .filter_map(|m| match &m.result {
                    Some(zone_thanos::thanos::rules_response::Result::Group(group)) => Some(group),
                    _ => None,
                })
                .flat_map(|group| group.rules.iter())
                .filter_map(|rule| match &rule.result {
                    Some(zone_thanos::thanos::rule::Result::Alert(alert)) => {
                        Some(alert.name.clone())
                    }
                    _ => None,
                })
                .collect();
            names
                .iter()
                .any(|name| name == "FederatedAlways")
                .then_some(())
                .ok_or(format!("{names:?}"))
        },
    )
    .await;
}

/// The shard labels of the rule `FederatedAlways` that the federator serves to the holder of
/// `token`.
async fn federated_shards(
    federator: &DeployedFederator,
    token: &str,
) -> Result<BTreeSet<String>, String> {
    let (code, body) = federator.get("/api/v1/rules", Some(token)).await?;
    let value: serde_json::Value =
        serde_json::from_str(&body).map_err(|e| format!("{e}: {body}"))?;
    if code != 200 || value.get("warnings").is_some() {
        return Err(format!("{code}: {body}"));
    }
    Ok(value["data"]["groups"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|g| g["rules"].as_array().cloned().unwrap_or_default())
        .filter(|r| r["name"] == "FederatedAlways")
        .filter_map(|r| r["labels"]["shard"].as_str().map(str::to_string))
        .collect())
}

async fn federated_rules_follow_the_sample(
    victim: &TestNamespace,
    real: &RealNodes,
    federators: &[Pod],
    token: &str,
) {
    let rules: Api<k8s_openapi::api::core::v1::ConfigMap> = victim.api();
    let rule_file = serde_json::from_value(json!({
        "metadata": {"name": "federated-rules"},
        "data": {"rules.yaml": "groups:\n- name: federated\n  interval: 2s\n  rules:\n  - alert: FederatedAlways\n    expr: vector(1)\n"},
    }))
    .unwrap();
    rules
        .create(&PostParams::default(), &rule_file)
        .await
        .unwrap();
    let sproms: Api<zone_api::ShardedPrometheus> = victim.api();
    let real_shards = |shards: u32| {
        json!({"spec": {
            "shards": shards,
            "image": real.prometheus_image,
            "nodeSelector": {"type": "real"},
            "tolerations": [{"key": real.taint, "operator": "Exists", "effect": "NoSchedule"}],
            "ruleFiles": [{"configMap": "federated-rules"}],
            // Onto the real nodes every shard at once: the zone-by-zone rollout is
            // deploy_local/rollout.rs's to test, and one replica per shard gains nothing by it.
            "rollout": {"strategy": "RollingUpdate"},
        }})
    };
    let federator = &federators[0];
    let uid = federator.metadata.uid.clone();
    let api = DeployedFederator::of(&victim.client, federator).await;
    // HTTPS only: a plain HTTP request gets no answer.
    let plain = e2e::process::http_get_from(api.address, "/healthz").await;
    assert!(
        plain.is_err(),
        "plain HTTP to the deployed federator: {plain:?}"
    );
    let (code, body) = api.get("/api/v1/rules", None).await.unwrap();
    assert_eq!(
        code, 401,
        "an anonymous call of the deployed federator: {body}"
    );
    // The same ServiceAccount's token for the API server's audience is refused too.
    let mut kubectl = e2e::identity::kubectl(&Cluster::get());
    kubectl.args([
        "create",
        "token",
        "grafana",
        "-n",
        &victim.name,
        "--duration=10m",
    ]);
    let api_server_token = e2e::identity::run(kubectl, None).trim().to_string();
    let (code, body) = api
        .get("/api/v1/rules", Some(&api_server_token))
        .await
        .unwrap();
    assert_eq!(code, 401, "a token for another audience: {body}");
    for shards in [2u32, 3] {
        sproms
            .patch(
                "prometheus",
                &PatchParams::default(),
                &Patch::Merge(&real_shards(shards)),
            )
            .await
            .unwrap();
        let want: BTreeSet<String> = (0..shards).map(|s| s.to_string()).collect();
        wait_for(
            &format!("the deployed federator serving the rules of {shards} shards"),
            Duration::from_secs(180),
            || async {
                let served = federated_shards(&api, token).await?;
                (served == want).then_some(()).ok_or(format!("{served:?}"))
            },
        )
        .await;
    }
    deployed_grpc_port_serves_the_rules(&api, token).await;
    let pods: Api<Pod> = Api::namespaced(
        victim.client.clone(),
        federator.metadata.namespace.as_deref().unwrap(),
    );
    let now = pods
        .get(federator.metadata.name.as_deref().unwrap())
        .await
        .unwrap();
    assert_eq!(now.metadata.uid, uid, "the same federator pod");
    let restarts = now
        .status
        .and_then(|s| s.container_statuses)
        .map(|c| c[0].restart_count)
        .unwrap_or(0);
    assert_eq!(
        restarts, 0,
        "the federator followed the scale without a restart"
    );
}
