//! The mixin's alerts at the federator: `ZoneAwareRolloutPausedTooLong` for a rollout its alarm
//! pauses, and `ZoneAwareWebhookDown` while zdb-controller is scaled to 0, resolved once it is back.

use std::time::Instant;

use aws_sdk_cloudwatch::types::StateValue;
use e2e::cluster::cleanup_blocking;
use e2e::localstack::{delete_alarm_blocking, put_breaching_alarm, set_alarm};
use e2e::workload::{spread_statefulset, to_statefulset, zone_aware_update};
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use kube::api::{Patch, PatchParams};
use zone_api::ZoneAwareUpdate;

use super::*;

/// The Deployment `name` at `replicas`.
async fn scale(deployments: &Api<Deployment>, name: &str, replicas: i32) {
    deployments
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": replicas}})),
        )
        .await
        .unwrap_or_else(|e| panic!("scaling {name} to {replicas}: {e}"));
}

/// Scales a Deployment back to `replicas` when dropped: a test that stopped zdb-controller must
/// not leave the eviction webhook (failurePolicy Fail) without a replica.
struct RestoreScale {
    config: kube::Config,
    namespace: String,
    name: String,
    replicas: i32,
}

impl Drop for RestoreScale {
    fn drop(&mut self) {
        let (namespace, name, replicas) =
            (self.namespace.clone(), self.name.clone(), self.replicas);
        cleanup_blocking(self.config.clone(), move |client| async move {
            let deployments: Api<Deployment> = Api::namespaced(client, &namespace);
            let _ = deployments
                .patch(
                    &name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"spec": {"replicas": replicas}})),
                )
                .await;
        });
    }
}

/// Deletes a CloudWatch alarm of the cluster's LocalStack when dropped.
struct DeleteAlarm {
    endpoint: String,
    name: String,
}

impl Drop for DeleteAlarm {
    fn drop(&mut self) {
        delete_alarm_blocking(&self.endpoint, &self.name);
    }
}

fn shards_of(alerts: &[Value]) -> BTreeSet<String> {
    alerts
        .iter()
        .filter_map(|a| a["labels"]["shard"].as_str().map(str::to_string))
        .collect()
}

/// A ZoneAwareUpdate in the middle of a rollout whose CloudWatch alarm is in ALARM:
/// `ZoneAwareRolloutPausedTooLong{namespace, name, source="Alarm"}` fires at the federator within
/// its `for` (30 s here) plus an evaluation and a scrape interval of the pause.
pub(super) async fn rollout_paused_by_its_alarm_raises_paused_too_long(
    cluster: &Cluster,
    victim: &TestNamespace,
    federator: &Federator,
) {
    let cloudwatch = cluster.cloudwatch().await;
    let alarm = format!("{}-paused", victim.name);
    put_breaching_alarm(&cloudwatch, &alarm).await;
    let _alarm = DeleteAlarm {
        endpoint: cluster.aws_endpoint(),
        name: alarm.clone(),
    };
    set_alarm(&cloudwatch, &alarm, StateValue::Alarm).await;

    // Three kwok pods at revision 1, then revision 2 to roll out.
    let sets: Api<StatefulSet> = victim.api();
    let mut manifest = spread_statefulset("web", 3, "registry.invalid/web:1");
    manifest["spec"]["updateStrategy"] = json!({"type": "OnDelete"});
    sets.create(&PostParams::default(), &to_statefulset(manifest))
        .await
        .unwrap();
    let victim_pods: Api<Pod> = victim.api();
    pods::wait_available(&victim_pods, "app=web", 3, TIMEOUT).await;
    e2e::workload::set_image(&sets, "web", "registry.invalid/web:2", TIMEOUT).await;
    let zaus: Api<ZoneAwareUpdate> = victim.api();
    zaus.create(
        &PostParams::default(),
        &zone_aware_update(
            "web",
            json!({"statefulset": "web", "maxUnavailable": 1, "pauseRolloutAlarm": alarm}),
        ),
    )
    .await
    .unwrap();
    wait_for("the rollout paused by its alarm", TIMEOUT, || async {
        let status = zaus
            .get("web")
            .await
            .map_err(|e| e.to_string())?
            .status
            .unwrap_or_default();
        if status.paused_by.split(',').any(|s| s == "Alarm") {
            Ok(())
        } else {
            Err(format!("{status:?}"))
        }
    })
    .await;
    let paused = Instant::now();

    let labels = json!({"namespace": victim.name, "name": "web", "source": "Alarm"});
    let firing = federator
        .wait_firing(PAUSED_TOO_LONG, &labels, TIMEOUT)
        .await;
    let fired = paused.elapsed();
    eprintln!(
        "{PAUSED_TOO_LONG} (for {PAUSED_TOO_LONG_FOR:?}) firing at the federator {:.1} s after the \
         ZoneAwareUpdate's status said paused by Alarm, on shard(s) {:?}",
        secs(fired),
        shards_of(&firing)
    );
    let bound = PAUSED_TOO_LONG_FOR + INTERVAL + INTERVAL;
    assert!(
        fired <= bound,
        "{PAUSED_TOO_LONG} fired {fired:?} after the pause, over {bound:?} (for + an evaluation + a scrape)"
    );
}

/// zdb-controller scaled to 0: `ZoneAwareWebhookDown` fires at the federator within its `for`
/// plus an evaluation and a scrape interval of a shard no longer seeing it up (its input gone;
/// from the last pod's end that adds Prometheus's discovery of the deletion, printed); scaled
/// back to 2 it resolves (is neither pending nor firing on any shard).
pub(super) async fn webhook_down_fires_and_resolves(
    cluster: &Cluster,
    client: &Client,
    namespace: &str,
    suffix: &str,
    shards: &[Shard],
    federator: &Federator,
) {
    // Not pending or firing while zdb-controller serves (it may have been pending before the
    // shards first scraped it).
    federator.wait_inactive(WEBHOOK_DOWN, TIMEOUT).await;

    let deployments: Api<Deployment> = Api::namespaced(client.clone(), namespace);
    let zdb = format!("zdb-controller-{suffix}");
    let _restore = RestoreScale {
        config: cluster.config().await,
        namespace: namespace.to_string(),
        name: zdb.clone(),
        replicas: 2,
    };
    let zdb_pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let selector = "app.kubernetes.io/name=zdb-controller";
    let scaled = Instant::now();
    scale(&deployments, &zdb, 0).await;
    no_pod_left(&zdb_pods, selector).await;
    let gone = Instant::now();
    let gone_at = k8s_openapi::jiff::Timestamp::now();
    // The alert's input gone: a shard no longer has `up{job="zdb-controller"} == 1` (its target
    // dropped once discovery saw the pods deleted, the series marked stale).
    let down_on = first_shard_without_zdb_up(shards).await;
    let down = Instant::now();
    // absent() of a comparison carries no label of its selector: the alert has only its own.
    let labels = json!({});
    let firing = federator
        .wait_firing(WEBHOOK_DOWN, &labels, WEBHOOK_DOWN_FOR + TIMEOUT)
        .await;
    let fired = down.elapsed();
    // When the first shard found it pending, by its own clock.
    let pending_after = firing
        .iter()
        .filter_map(|a| {
            a["activeAt"]
                .as_str()?
                .parse::<k8s_openapi::jiff::Timestamp>()
                .ok()
        })
        .min()
        .map_or(f64::NAN, |active_at| {
            active_at.duration_since(gone_at).as_secs_f64()
        });
    eprintln!(
        "{WEBHOOK_DOWN} (for {WEBHOOK_DOWN_FOR:?}, evaluation and scrape every {INTERVAL:?}) firing \
         at the federator {:.1} s after shard {down_on} stopped seeing zdb-controller up, {:.1} s \
         after the last zdb-controller pod was gone (the scale to 0 {:.1} s before that; the \
         target dropped {:.1} s after it; pending {pending_after:.1} s after it), on shard(s) {:?}",
        secs(fired),
        secs(gone.elapsed()),
        secs(gone - scaled),
        secs(down - gone),
        shards_of(&firing)
    );
    let bound = WEBHOOK_DOWN_FOR + INTERVAL + INTERVAL;
    assert!(
        fired <= bound,
        "{WEBHOOK_DOWN} fired {fired:?} after a shard stopped seeing zdb-controller up, over \
         {bound:?} (for + an evaluation + a scrape)"
    );

    let restored = Instant::now();
    scale(&deployments, &zdb, 2).await;
    pods::wait_available(&zdb_pods, selector, 2, TIMEOUT).await;
    let ready = Instant::now();
    federator.wait_inactive(WEBHOOK_DOWN, TIMEOUT).await;
    eprintln!(
        "{WEBHOOK_DOWN} gone from the federator's alerts {:.1} s after the scale back to 2 ({:.1} s \
         after both pods were Ready)",
        secs(restored.elapsed()),
        secs(ready.elapsed())
    );
}

/// Waits until no pod of `selector` is left.
async fn no_pod_left(pods: &Api<Pod>, selector: &str) {
    wait_for("no zdb-controller pod left", TIMEOUT, || async {
        let left = pods
            .list(&ListParams::default().labels(selector))
            .await
            .map_err(|e| e.to_string())?
            .items
            .len();
        if left == 0 {
            Ok(())
        } else {
            Err(format!("{left} pods"))
        }
    })
    .await;
}

/// The first shard without `up{job="zdb-controller"} == 1`.
async fn first_shard_without_zdb_up(shards: &[Shard]) -> String {
    wait_for("a shard without zdb-controller up", TIMEOUT, || async {
        for shard in shards {
            if shard
                .query(r#"up{job="zdb-controller"} == 1"#)
                .await?
                .is_empty()
            {
                return Ok(shard.index.clone());
            }
        }
        Err("every shard still has it up".to_string())
    })
    .await
}
