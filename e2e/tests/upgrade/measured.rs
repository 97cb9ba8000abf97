//! The upgrade run under an eviction load, and what it is measured by: the load's answers, the
//! API server's webhook calls, the zones of `load` down at once, the shards' targets and scrapes.

use e2e::disruption::{EvictionLoad, Monitor};
use e2e::upgrade::{longest_gap, webhook_names};
use e2e::webhook::Counters;
use k8s_openapi::jiff::SignedDuration;

use super::users::shard_selector;
use super::*;

/// What the upgrade was measured by.
pub(super) struct Measured {
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
pub(super) async fn upgrade_under_load(
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
    // The documented steps upgraded every CRD (a `helm show crds` that gave one of three did
    // not, and the controllers' writes were refused under the old schemas).
    e2e::apply::assert_crds_current(&client).await;
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
    pub(super) fn assert_nothing_was_lost(&self) {
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
