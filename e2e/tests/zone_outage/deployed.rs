//! The controllers themselves through an outage: deployed as pods (config/local: 2 replicas of
//! each, spread over the real nodes' zones, as shipped), the zone of the zdb-controller's leader
//! goes dark. Each leader-elected controller keeps (or regains) a leader in a surviving zone, and
//! the eviction webhook keeps answering. Measured: each controller's time without a leader, and
//! the webhook calls that failed (until the API server stopped calling the dark replica).

use std::collections::BTreeMap;

use e2e::deploy::{Overlay, TestDeploy, identities, lease_holder, watch_only};
use e2e::real::RealNodes;
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::ListParams;

use super::*;

/// How long the webhook is called through the outage.
const CALLED_FOR: Duration = Duration::from_secs(120);
/// The last stretch of it in which every call must be answered.
const ANSWERED_AT_THE_END: Duration = Duration::from_secs(20);

/// Waits until the webhook configuration fails closed (a replica serves it).
async fn wait_fail_closed(client: &kube::Client, name: &str) {
    let webhooks: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    wait_for("the webhook at failurePolicy Fail", TIMEOUT, || async {
        let configuration = webhooks.get(name).await.map_err(|e| e.to_string())?;
        let policy = configuration.webhooks.unwrap_or_default()[0]
            .failure_policy
            .clone();
        if policy.as_deref() == Some("Fail") {
            Ok(())
        } else {
            Err(format!("{policy:?}"))
        }
    })
    .await;
}

/// What the outage did to the deployed controllers.
struct Observed {
    /// Controller -> time from the outage until another replica held its Lease (None: its
    /// leader was not in the dark zone and kept it).
    leaderless: BTreeMap<String, Option<Duration>>,
    calls: usize,
    /// Webhook calls answered neither allowed nor refused (the API server could not call it),
    /// with when.
    failed: Vec<(Timestamp, String)>,
}

#[tokio::test]
#[ignore = "needs the local zonal cluster with real nodes and the project's image (make e2e)"]
async fn deployed_controllers_keep_a_leader_and_the_webhook_answering() {
    let _alone = ALONE.lock().await;
    let cluster = Cluster::get();
    let image = RealNodes::of(&cluster).project_image().to_owned();
    let victim = TestNamespace::create(&cluster, "outage-deployed").await;
    let client = victim.client.clone();
    let suffix = victim.suffix().to_string();
    let namespace = format!("e2e-deployed-{suffix}");
    let controllers = e2e::deploy::controllers();
    let overlay = Overlay::new(
        "config/local",
        &suffix,
        &victim.name,
        &watch_only(&controllers, &victim.name),
    );
    let mut deployment = TestDeploy::new(&cluster, overlay, &namespace, &image);
    let ids = identities(&deployment.manifests());
    deployment.make("deploy");
    let webhook_name = format!("zone-aware-eviction-webhook-{suffix}");
    wait_fail_closed(&client, &webhook_name).await;
    let deployed: Api<Pod> = Api::namespaced(client.clone(), &namespace);
    for controller in &controllers {
        let selector = format!("app.kubernetes.io/name={controller}");
        pods::wait_available(&deployed, &selector, 2, TIMEOUT).await;
    }

    // A pod no budget selects, in a zone that stays up: the webhook allows its eviction, so any
    // other answer is a failed call.
    let sets: Api<StatefulSet> = victim.api();
    let pods_api: Api<Pod> = victim.api();
    statefulset(&sets, "calm", "RollingUpdate").await;
    pods::wait_available(&pods_api, "app=calm", REPLICAS, TIMEOUT).await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), &namespace);
    let zdb_leader = wait_for("the zdb-controller's leader", TIMEOUT, || {
        lease_holder(&leases, "zdb-controller")
    })
    .await;
    let real = e2e::real::nodes(&client).await;
    let leader_pod = deployed.get(&zdb_leader).await.unwrap();
    let dark = real[pods::node_of(&leader_pod).unwrap()].clone();
    for pod in deployed.list(&ListParams::default()).await.unwrap().items {
        let node = pods::node_of(&pod).unwrap_or_default().to_string();
        println!(
            "{} on {node} ({}), ready {}",
            pod.metadata.name.as_deref().unwrap_or_default(),
            real.get(&node).map_or("-", String::as_str),
            pods::is_ready(&pod)
        );
    }
    let zones = nodes::pod_zones(&pods_api, "app=calm").await;
    let calm = zones
        .iter()
        .find(|(_, zone)| **zone != dark)
        .map(|(pod, _)| pod.clone())
        .unwrap();

    let observed =
        through_the_outage(&client, &leases, &controllers, &dark, &pods_api, &calm).await;
    println!(
        "zone {dark} dark (the zdb-controller's leader's): {} webhook calls",
        observed.calls
    );
    for (controller, gap) in &observed.leaderless {
        println!("{controller:<18} without a leader: {}", seconds(*gap));
    }
    println!(
        "failed webhook calls: {} {:?}",
        observed.failed.len(),
        observed.failed
    );
    for (controller, gap) in &observed.leaderless {
        assert!(
            gap.is_none_or(|gap| gap < Duration::from_secs(60)),
            "{controller} had no leader for {gap:?}"
        );
    }
    assert!(
        observed.leaderless["zdb-controller"].is_some(),
        "the zdb leader moved"
    );
    deployment
        .undeploy_webhook_first(&client, &ids, &webhook_name)
        .await;
}

/// Takes `dark` down, calls the webhook (a dry-run eviction of `calm`) every second for
/// [`CALLED_FOR`] while watching the Leases, brings the zone back.
async fn through_the_outage(
    client: &kube::Client,
    leases: &Api<Lease>,
    controllers: &[String],
    dark: &str,
    pods_api: &Api<Pod>,
    calm: &str,
) -> Observed {
    let elected: Vec<&String> = controllers
        .iter()
        .filter(|c| e2e::deploy::is_leader_elected(c))
        .collect();
    let mut before = BTreeMap::new();
    for controller in &elected {
        let leader = wait_for("a leader", TIMEOUT, || lease_holder(leases, controller)).await;
        before.insert(controller.to_string(), leader);
    }
    let mut outage = ZoneOutage::start(dark);
    let mut observed = Observed {
        leaderless: before.keys().map(|c| (c.clone(), None)).collect(),
        calls: 0,
        failed: Vec::new(),
    };
    // One call a second, however long a call takes (a call to the dark replica times out).
    let mut every_second = tokio::time::interval(Duration::from_secs(1));
    every_second.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    while since(outage.started, Timestamp::now()) < CALLED_FOR {
        every_second.tick().await;
        let at = Timestamp::now();
        observed.calls += 1;
        if let Err((code, message)) = pods::evict(pods_api, calm, true).await {
            observed.failed.push((at, format!("{code}: {message}")));
        }
        for (controller, leader) in &before {
            let gap = observed.leaderless.get_mut(controller).unwrap();
            if gap.is_none()
                && lease_holder(leases, controller)
                    .await
                    .is_ok_and(|h| h != *leader)
            {
                *gap = Some(since(outage.started, Timestamp::now()));
            }
        }
    }
    let deployed: Api<Pod> =
        Api::namespaced(client.clone(), leases.namespace().unwrap_or_default());
    for pod in deployed.list(&ListParams::default()).await.unwrap().items {
        println!(
            "during: {} on {}, ready {}",
            pod.metadata.name.as_deref().unwrap_or_default(),
            pods::node_of(&pod).unwrap_or_default(),
            pods::is_ready(&pod)
        );
    }
    let last = Timestamp::now() - ANSWERED_AT_THE_END;
    let late: Vec<_> = observed
        .failed
        .iter()
        .filter(|(at, _)| *at > last)
        .collect();
    assert!(
        late.is_empty(),
        "the webhook still failing at the end of the outage: {late:?}"
    );
    outage.end();
    outage.wait_recovered(client).await;
    observed
}
