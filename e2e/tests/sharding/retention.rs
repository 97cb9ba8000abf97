//! Scaling through the scale subresource: status.shards follows the StatefulSets that exist;
//! scaled-down shards are retained out of the selector, scrape and evaluate nothing, are reused on
//! a scale-up and deleted at their deadline; under Delete, removed shards go at once.

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::events::v1::Event;

use super::*;

/// Waits until `pick` finds what it looks for among the namespace's events (`what` says what).
async fn wait_event<T>(ns: &TestNamespace, what: &str, pick: impl Fn(&[Event]) -> Option<T>) -> T {
    let events: Api<Event> = ns.api();
    let pick = &pick;
    wait_for(what, TIMEOUT, || async {
        let list = events
            .list(&ListParams::default())
            .await
            .map_err(|e| e.to_string())?;
        pick(&list.items).ok_or(format!("{} events, none is {what}", list.items.len()))
    })
    .await
}

/// How long the retention test keeps retained shards whose deletion it waits for.
const RETENTION_SECONDS: i64 = 20;
/// The retention of the test's last phases, which check retained shards without waiting for
/// their deadline: long enough that a loaded machine (a list of the status taking over 15 s) still
/// sees them before they go.
const LONG_RETENTION_SECONDS: i64 = 300;

impl Fixture {
    /// Server-side applies `name` with `shards` and the rest of `spec` (strategy, scrape configs
    /// added); returns the generation.
    async fn apply_spec(&self, name: &str, shards: u32, mut spec: Value) -> i64 {
        let extra = spec.as_object_mut().unwrap();
        extra.insert("shards".into(), json!(shards));
        extra.insert("shardingStrategy".into(), topology("Spread"));
        extra.insert("scrapeConfigs".into(), self.scrape_configs());
        self.apply_sprom(name, spec).await
    }

    /// `kubectl scale sprom/<name> --replicas <shards>`: the scale subresource, as an operator
    /// (or an autoscaler) sets it.
    async fn kubectl_scale(&self, name: &str, shards: u32) {
        let replicas = format!("--replicas={shards}");
        let target = format!("shardedprometheus/{name}");
        let mut kubectl =
            e2e::process::Kubectl::start(&["scale", "-n", &self.ns.name, &target, &replicas]);
        let (ok, output) = kubectl.finish(Duration::from_secs(30)).await;
        assert!(ok, "kubectl scale: {output}");
        let sprom = self.sproms.get(name).await.unwrap();
        assert_eq!(
            u32::try_from(sprom.spec.shards).ok(),
            Some(shards),
            "kubectl scale sets spec.shards"
        );
    }

    /// Waits until `name`'s status (of the current generation) has `active` shards and the
    /// retained shards `retained`; returns it.
    async fn wait_shards(
        &self,
        name: &str,
        active: i32,
        retained: &[i32],
    ) -> zone_api::ShardedPrometheusStatus {
        let what = format!("{name}: {active} active shards, retained {retained:?}");
        let sprom = fixture::wait_object(&self.sproms, name, &what, TIMEOUT, |sprom| {
            let generation = sprom.metadata.generation.unwrap_or(0);
            let status = fixture::status_of(sprom);
            let indices: Vec<i32> = status.retained_shards.iter().map(|r| r.index).collect();
            if status.observed_generation == generation
                && status.shards == active
                && indices == retained
            {
                Ok(())
            } else {
                Err(format!(
                    "generation {generation}, observed {}: shards {}, retained {indices:?}",
                    status.observed_generation, status.shards
                ))
            }
        })
        .await;
        fixture::status_of(&sprom)
    }

    /// The StatefulSets of `name` by shard index: (uid, deletion-deadline annotation).
    async fn shard_sets(&self, name: &str) -> BTreeMap<u32, (String, Option<String>)> {
        let sets: Api<StatefulSet> = self.ns.api();
        let selector = format!("app.kubernetes.io/instance={name}");
        sets.list(&ListParams::default().labels(&selector))
            .await
            .unwrap()
            .items
            .into_iter()
            .filter(|sts| sts.metadata.deletion_timestamp.is_none())
            .map(|sts| {
                let index = sts.labels()["zonecontrol.k8s.aws/shard"].parse().unwrap();
                let deadline = sts
                    .annotations()
                    .get("zonecontrol.k8s.aws/deletion-deadline")
                    .cloned();
                (index, (sts.uid().unwrap(), deadline))
            })
            .collect()
    }

    /// The `prometheus.yml` of every shard config Secret of `name`, by index.
    async fn shard_configs(&self, name: &str) -> BTreeMap<u32, String> {
        let secrets: Api<Secret> = self.ns.api();
        let selector = format!("app.kubernetes.io/instance={name}");
        secrets
            .list(&ListParams::default().labels(&selector))
            .await
            .unwrap()
            .items
            .iter()
            .filter_map(shard_config)
            .collect()
    }

    /// The shard index of each pod `selector` lists (the scale subresource's selector).
    async fn selected_shards(&self, selector: &str) -> Vec<u32> {
        let pods: Api<Pod> = self.ns.api();
        let mut shards: Vec<u32> = pods
            .list(&ListParams::default().labels(selector))
            .await
            .unwrap()
            .items
            .iter()
            .map(|pod| pod.labels()["zonecontrol.k8s.aws/shard"].parse().unwrap())
            .collect();
        shards.sort_unstable();
        shards
    }

    /// Waits until every shard `0..shards` has its `replicas` pods (kwok runs them).
    async fn wait_shard_pods(&self, name: &str, shards: u32, replicas: usize) {
        let pods: Api<Pod> = self.ns.api();
        let selector = format!(
            "app.kubernetes.io/instance={name},app.kubernetes.io/managed-by=shard-controller"
        );
        wait_for(
            &format!("{name}: {replicas} pods per shard"),
            TIMEOUT,
            || async {
                let list = pods
                    .list(&ListParams::default().labels(&selector))
                    .await
                    .map_err(|e| e.to_string())?;
                let mut per_shard: BTreeMap<u32, usize> = BTreeMap::new();
                for pod in list
                    .items
                    .iter()
                    .filter(|p| p.metadata.deletion_timestamp.is_none())
                {
                    *per_shard
                        .entry(pod.labels()["zonecontrol.k8s.aws/shard"].parse().unwrap())
                        .or_default() += 1;
                }
                (0..shards)
                    .all(|shard| per_shard.get(&shard) == Some(&replicas))
                    .then_some(())
                    .ok_or(format!("{per_shard:?}"))
            },
        )
        .await;
    }
}

/// Runs the shard configurations of a scaled-down resource in real Prometheus: the active shards
/// (`0..active`) must keep every target exactly once in its zone and load the rule file; every
/// retained one must load no scrape config and no rule, and keep no target once the active ones
/// have found theirs.
async fn check_retained_configs(
    fx: &Fixture,
    label: &str,
    configs: &BTreeMap<u32, String>,
    active: u32,
    rules_dir: &std::path::Path,
) {
    let kubeconfig = Cluster::get().kubeconfig;
    let rules = rules_dir.display().to_string();
    let mut retained = Vec::new();
    for (index, config) in configs.range(active..) {
        check_config_on(Major::V3, config)
            .unwrap_or_else(|e| panic!("{label} retained {index}: {e}"));
        assert!(
            !config.contains("scrape_configs") && !config.contains("rule_files"),
            "{label} retained {index}:\n{config}"
        );
        let config = with_kubeconfig(config, &kubeconfig);
        retained.push((
            *index,
            PrometheusProcess::start(&format!("{label}-retained-{index}"), &config, &[]).await,
        ));
    }
    let active_configs: Vec<String> = (0..active)
        .map(|index| configs[&index].replace("/etc/prometheus/rules", &rules))
        .collect();
    // The active shards, with the rule file where their configuration looks for it.
    let mut processes = Vec::new();
    for (index, config) in active_configs.iter().enumerate() {
        let config = with_kubeconfig(config, &kubeconfig);
        processes
            .push(PrometheusProcess::start(&format!("{label}-active-{index}"), &config, &[]).await);
    }
    for process in &processes {
        process.wait_for_targets(&["pods", "static"], TIMEOUT).await;
        let groups = process.rule_groups().await;
        assert_eq!(
            groups.as_array().map(Vec::len),
            Some(1),
            "{label}: an active shard evaluates the rule: {groups}"
        );
    }
    drop(processes);
    let kept = run_shards(
        &format!("{label}-coverage"),
        &active_configs,
        fx.targets.len(),
    )
    .await;
    assert_coverage(label, fx, &kept, active, true, false);
    for (index, process) in &retained {
        assert!(
            process.targets().await.is_empty(),
            "{label}: retained shard {index} keeps targets"
        );
        let groups = process.rule_groups().await;
        assert_eq!(
            groups.as_array().map(Vec::len),
            Some(0),
            "{label}: retained shard {index} evaluates {groups}"
        );
        let loaded = process.config_yaml().await;
        assert!(
            !loaded.contains("job_name"),
            "{label}: retained shard {index} loaded a scrape job:\n{loaded}"
        );
    }
}

#[tokio::test]
#[ignore = "needs the local zonal cluster and Prometheus 3.16 (make e2e)"]
async fn scaling_keeps_retained_shards_out_of_the_selector_and_deletes_them_at_their_deadline() {
    let fx = Fixture::new("retain").await;
    let rules_dir = prepare_shard_pods_and_rules(&fx).await;
    fx.apply_spec(SCALED, 3, retain("Retain", RETENTION_SECONDS))
        .await;
    fx.wait_shards(SCALED, 3, &[]).await;

    status_shards_follow_the_statefulsets_that_exist(&fx).await;
    a_scale_down_retains_shards_and_a_scale_up_reuses_them(&fx).await;
    retained_shards_scrape_nothing_and_go_at_their_deadline(&fx, &rules_dir).await;

    // Down to 1 shard: the two retained shards still scrape nothing, shard 0 everything.
    fx.apply_spec(SCALED, 3, retain("Retain", LONG_RETENTION_SECONDS))
        .await;
    fx.wait_shards(SCALED, 3, &[]).await;
    fx.kubectl_scale(SCALED, 1).await;
    fx.wait_shards(SCALED, 1, &[1, 2]).await;
    let configs = fx.shard_configs(SCALED).await;
    check_retained_configs(&fx, "retain/1", &configs, 1, &rules_dir).await;

    under_delete_retained_shards_keep_their_deadline_and_removed_ones_go_at_once(&fx).await;
    let _ = std::fs::remove_dir_all(&rules_dir);
}

/// The resource the retention test scales.
const SCALED: &str = "scaled";

/// The spec of the retention test beyond shards, strategy and scrape configs: two replicas, the
/// rule file `alerts`, and `whenScaled: <when>` with a retention of `seconds`.
fn retain(when: &str, seconds: i64) -> Value {
    json!({
        "replicas": 2,
        "ruleFiles": [{"configMap": "alerts"}],
        "shardRetentionPolicy": {"whenScaled": when, "retain": {"retentionPeriod": format!("{seconds}s")}},
    })
}

/// The ServiceAccount the shards' pods (run by kwok) need, and a rule file whose alert fires
/// wherever it is evaluated (`absent()` of a series nobody has): in the ConfigMap `alerts`, and
/// in a local directory as the shards mount it (returned).
async fn prepare_shard_pods_and_rules(fx: &Fixture) -> std::path::PathBuf {
    let accounts: Api<k8s_openapi::api::core::v1::ServiceAccount> = fx.ns.api();
    let account = serde_json::from_value(json!({"metadata": {"name": "prometheus"}})).unwrap();
    accounts
        .create(&PostParams::default(), &account)
        .await
        .unwrap();
    let rules_cm: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "alerts"},
        "data": {"absent.yaml": "groups:\n- name: absent\n  rules:\n  - alert: NothingThere\n    expr: absent(up{job=\"nothing\"})\n"},
    }))
    .unwrap();
    let config_maps: Api<ConfigMap> = fx.ns.api();
    config_maps
        .create(&PostParams::default(), &rules_cm)
        .await
        .unwrap();
    let rules_dir = std::env::temp_dir().join(format!("e2e-rules-{}", fx.ns.name));
    std::fs::create_dir_all(rules_dir.join("alerts")).unwrap();
    std::fs::write(
        rules_dir.join("alerts/absent.yaml"),
        rules_cm.data.as_ref().unwrap()["absent.yaml"].as_bytes(),
    )
    .unwrap();
    rules_dir
}

/// status.shards is observed: with room for only 7 StatefulSets, a scale to 9 leaves it where
/// it was while spec.shards says 9; once there is room, 9 shards, one pod of each selected.
async fn status_shards_follow_the_statefulsets_that_exist(fx: &Fixture) {
    let quota = e2e::quota::PodQuota::hold_count(fx.ns.api(), "count/statefulsets.apps", 7).await;
    fx.kubectl_scale(SCALED, 9).await;
    wait_for("7 StatefulSets under the quota", TIMEOUT, || async {
        let sets = fx.shard_sets(SCALED).await;
        (sets.len() == 7)
            .then_some(())
            .ok_or(format!("{:?}", sets.keys()))
    })
    .await;
    let lagging = fx.sproms.get(SCALED).await.unwrap();
    let status = lagging.status.unwrap_or_default();
    eprintln!(
        "scale to 9 with 7 StatefulSets possible: spec.shards {}, status.shards {}",
        lagging.spec.shards, status.shards
    );
    assert!(
        status.shards < 9,
        "status.shards {} before the StatefulSets exist",
        status.shards
    );
    quota.release().await;
    let status = fx.wait_shards(SCALED, 9, &[]).await;
    fx.wait_shard_pods(SCALED, 9, 2).await;
    assert_eq!(
        fx.selected_shards(&status.selector).await,
        (0..9).collect::<Vec<_>>(),
        "one pod per active shard: {}",
        status.selector
    );
}

/// 9 -> 6: shards 6-8 retained, out of the selector while their pods run. Back to 9 before the
/// deadline: the same StatefulSets, active again, unmarked, with their full configuration.
async fn a_scale_down_retains_shards_and_a_scale_up_reuses_them(fx: &Fixture) {
    fx.kubectl_scale(SCALED, 6).await;
    let status = fx.wait_shards(SCALED, 6, &[6, 7, 8]).await;
    assert!(
        status
            .retained_shards
            .iter()
            .all(|r| r.deletion_deadline.is_some()),
        "{status:?}"
    );
    let sets = fx.shard_sets(SCALED).await;
    let retained_uids: BTreeMap<u32, String> = (6..9).map(|i| (i, sets[&i].0.clone())).collect();
    for index in 6..9 {
        assert!(
            sets[&index].1.is_some(),
            "shard {index} carries the deadline: {sets:?}"
        );
    }
    assert_eq!(
        fx.selected_shards(&status.selector).await,
        (0..6).collect::<Vec<_>>(),
        "{}",
        status.selector
    );
    fx.wait_shard_pods(SCALED, 9, 2).await;

    fx.kubectl_scale(SCALED, 9).await;
    fx.wait_shards(SCALED, 9, &[]).await;
    let sets = fx.shard_sets(SCALED).await;
    for (index, uid) in &retained_uids {
        assert_eq!(&sets[index].0, uid, "shard {index} reused");
        assert_eq!(sets[index].1, None, "shard {index} unmarked");
    }
    // Their full configuration is back: the nine cover every target exactly once again.
    let configs: Vec<String> = wait_for("nine active shard configs", TIMEOUT, || async {
        let configs = fx.shard_configs(SCALED).await;
        let active: Vec<String> = configs
            .values()
            .filter(|config| config.contains("scrape_configs"))
            .cloned()
            .collect();
        if active.len() == 9 {
            Ok(active)
        } else {
            Err(format!("{} active configs", active.len()))
        }
    })
    .await;
    let kept = run_shards("retain-reused/9", &configs, fx.targets.len()).await;
    assert_coverage("retain-reused/9", fx, &kept, 9, true, false);
}

/// 9 -> 3: six retained shards scrape and evaluate nothing; the active ones cover everything.
/// The retained shards are deleted when due: not before the deadline, within seconds after it.
async fn retained_shards_scrape_nothing_and_go_at_their_deadline(
    fx: &Fixture,
    rules_dir: &std::path::Path,
) {
    fx.kubectl_scale(SCALED, 3).await;
    let status = fx.wait_shards(SCALED, 3, &[3, 4, 5, 6, 7, 8]).await;
    let configs = fx.shard_configs(SCALED).await;
    assert_eq!(
        configs.keys().copied().collect::<Vec<_>>(),
        (0..9).collect::<Vec<_>>()
    );
    check_retained_configs(fx, "retain/3", &configs, 3, rules_dir).await;

    let deadline: k8s_openapi::jiff::Timestamp = status.retained_shards[0]
        .deletion_deadline
        .clone()
        .unwrap()
        .parse()
        .unwrap();
    let gone_at = wait_for(
        "the retained shards deleted",
        Duration::from_secs(RETENTION_SECONDS as u64 + 60),
        || async {
            let sets = fx.shard_sets(SCALED).await;
            let now = k8s_openapi::jiff::Timestamp::now();
            if sets.keys().any(|i| *i >= 3) {
                return Err(format!("{:?} at {now}", sets.keys()));
            }
            Ok(now)
        },
    )
    .await;
    // When the controller deleted them, from the event it records as it does: this test's own
    // view can lag behind by as long as a list takes on a loaded API server (17 s once, with the
    // controller's log showing the deletion within a second of the deadline).
    let deleted_at = wait_event(
        &fx.ns,
        "the event of the retained shards' deletion",
        |events| {
            events
                .iter()
                .filter(|e| e.reason.as_deref() == Some("RetainedShardsDeleted"))
                .filter_map(|e| e.event_time.as_ref().map(|at| at.0))
                .min()
        },
    )
    .await;
    let late = deadline.duration_until(deleted_at).as_secs_f64();
    let seen = deadline.duration_until(gone_at).as_secs_f64();
    eprintln!(
        "retained shards deleted {late:.1} s after their deadline {deadline} (seen gone after {seen:.1} s)"
    );
    // The event is recorded once every child of the six shards is deleted: on an idle machine
    // about a second after the deadline, 12.5 s once with other suites loading the API server
    // (the test saw the deletions begin 8 s after it). Not before the deadline, and not left
    // to some later event.
    assert!(
        (0.0..30.0).contains(&late),
        "deleted {late} s after the deadline"
    );
    fx.wait_shards(SCALED, 3, &[]).await;
}

/// Switching to Delete keeps the retained shards until their deadline; a shard removed from
/// then on goes at once.
async fn under_delete_retained_shards_keep_their_deadline_and_removed_ones_go_at_once(
    fx: &Fixture,
) {
    fx.apply_spec(SCALED, 1, retain("Delete", LONG_RETENTION_SECONDS))
        .await;
    fx.wait_shards(SCALED, 1, &[1, 2]).await;
    wait_event(
        &fx.ns,
        "an event saying the retained shards keep their deadline",
        |events| {
            events.iter().find(|e| {
                e.reason.as_deref() == Some("ShardsRetained")
                    && e.note
                        .as_deref()
                        .is_some_and(|n| n.contains("keep their deadline"))
            })?;
            Some(())
        },
    )
    .await;
    fx.kubectl_scale(SCALED, 4).await;
    fx.wait_shards(SCALED, 4, &[]).await;
    fx.kubectl_scale(SCALED, 2).await;
    fx.wait_shards(SCALED, 2, &[]).await;
    let sets = fx.shard_sets(SCALED).await;
    assert_eq!(
        sets.keys().copied().collect::<Vec<_>>(),
        vec![0, 1],
        "removed at once under Delete"
    );
}
