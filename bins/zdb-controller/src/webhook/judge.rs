//! Judging one eviction. Linearizable across replicas: the decision is made from the budget
//! object and the pod, both read fresh, and an allowed eviction is recorded by a PUT of the
//! budget's status carrying the resourceVersion it was decided on (with the other evictions of
//! its batch, see `commit.rs`). Two replicas deciding at once cannot both succeed; the loser
//! re-reads, sees the winner's records and decides its batch again.
//!
//! The two reads run at once when the budget can be guessed before the pod is read (see
//! [`BudgetGuesses`]): a decision then waits for one round trip to the API server, not two.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::ListParams;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Api, Client, ResourceExt};
use zone_api::ZoneDisruptionBudget;
use zone_operator::{EventPublisher, NodeZones};
use zone_views::budget::{self, Selecting};

use crate::metrics::{ZdbMetrics, reason};
use crate::webhook::admission::Eviction;
use crate::webhook::guess::BudgetGuesses;
use crate::webhook::queue::BudgetQueues;
use crate::webhook::recent::RecentBudgets;
use crate::webhook::verdict::{Verdict, allowed, denied};

/// Decisions one replica works on at once, at most; past it an eviction is refused at once (a
/// 429 the client retries). Bounds the memory a burst can take: each decision holds a pod,
/// copies of its budget, its connection from the API server and one to it (HTTP/1.1: one per
/// request in flight). A drain's refusals take a few milliseconds each, so at 200 evictions/s
/// this is far above what they need; it binds when decisions wait for their budget's turn.
pub const MAX_IN_FLIGHT: usize = 64;

/// API requests (the reads) the decisions of one replica make at once, at most; the others
/// wait for a slot, in order. The committers' status writes, one at a time per budget, go past
/// them (see `commit.rs`). The client keeps one connection per request in flight
/// (HTTP/1.1), each with its TLS state and buffers, and keeps it after the burst: without this
/// bound a storm opened a connection for nearly every decision in flight. A drain's refusals take
/// about one request each, a few milliseconds, so at 200 evictions/s a few slots are busy.
pub const MAX_API_REQUESTS: usize = 16;

/// The pod as a decision keeps it while it waits: what the judgement reads (labels, times, node,
/// phase and conditions), not its managed fields or containers.
fn lean(mut pod: Pod) -> Pod {
    pod.metadata.managed_fields = None;
    pod.metadata.annotations = None;
    if let Some(spec) = pod.spec.as_mut() {
        *spec = k8s_openapi::api::core::v1::PodSpec {
            node_name: spec.node_name.take(),
            ..Default::default()
        };
    }
    if let Some(status) = pod.status.as_mut() {
        *status = k8s_openapi::api::core::v1::PodStatus {
            phase: status.phase.take(),
            conditions: status.conditions.take(),
            ..Default::default()
        };
    }
    pod
}

/// What the judge reads and writes with.
pub struct Judge {
    pub client: Client,
    /// Budgets, only to find the candidates for a pod (the chosen one is read fresh).
    pub zdbs: Store<ZoneDisruptionBudget>,
    pub zdbs_synced: Arc<AtomicBool>,
    pub zones: NodeZones,
    /// The field manager of the status writes (`--field-manager`).
    pub field_manager: String,
    pub deadline: Duration,
    pub metrics: ZdbMetrics,
    pub events: EventPublisher,
    pub guesses: BudgetGuesses,
    /// Budgets read (or written) fresh a moment ago, for refusals within `denial_ttl`.
    pub recent: RecentBudgets,
    pub denial_ttl: Duration,
    /// The users whose evictions are the zau-controller's (`--rollout-user`).
    pub rollout_users: Vec<String>,
    /// The evictions of each budget waiting for its next status write in this replica.
    pub queues: Arc<BudgetQueues>,
    /// Permits for the decisions in flight ([`MAX_IN_FLIGHT`]).
    pub in_flight: Arc<tokio::sync::Semaphore>,
    /// Slots for the decisions' API requests ([`MAX_API_REQUESTS`]).
    pub api_requests: Arc<tokio::sync::Semaphore>,
}

impl Judge {
    /// `request`, sent once one of the [`MAX_API_REQUESTS`] slots is free.
    pub(super) async fn request<T>(&self, request: impl std::future::Future<Output = T>) -> T {
        // Never closed, so the slot is always had; it is held until the answer is read.
        let _slot = self.api_requests.acquire().await;
        request.await
    }

    /// The budgets of the namespace: from the cache once synced (shared, not copied), else
    /// listed.
    async fn candidates(
        &self,
        namespace: &str,
    ) -> Result<Vec<Arc<ZoneDisruptionBudget>>, kube::Error> {
        if self.zdbs_synced.load(Ordering::Acquire) {
            return Ok(self
                .zdbs
                .state()
                .into_iter()
                .filter(|z| z.metadata.namespace.as_deref() == Some(namespace))
                .collect());
        }
        let api: Api<ZoneDisruptionBudget> = Api::namespaced(self.client.clone(), namespace);
        let listed = self.request(api.list(&ListParams::default())).await?;
        Ok(listed.items.into_iter().map(Arc::new).collect())
    }

    /// The verdict on one eviction, within the decision deadline: past it the eviction is
    /// refused with a 429 (the client retries) rather than left to the API server's webhook
    /// timeout, which fails closed with a 500 that ends `kubectl drain`. An abandoned decision
    /// may have recorded the eviction; the record is harmless (the retried eviction finds it and
    /// is allowed, or it expires).
    pub async fn judge(self: &Arc<Self>, eviction: &Eviction) -> Verdict {
        let Ok(_permit) = self.in_flight.try_acquire() else {
            self.metrics.shed("InFlight");
            return denied(
                reason::SHED,
                format!(
                    "cannot evict pod {}: the eviction webhook is deciding {MAX_IN_FLIGHT} evictions already; retry",
                    eviction.pod
                ),
            );
        };
        match tokio::time::timeout(self.deadline, self.judge_unbounded(eviction)).await {
            Ok(verdict) => verdict,
            Err(_) => {
                tracing::warn!(namespace = %eviction.namespace, pod = %eviction.pod, deadline = ?self.deadline, "no decision within the deadline; refused, the client retries");
                denied(
                    reason::DEADLINE,
                    format!(
                        "cannot evict pod {}: no decision within {:?} (the API server is slow to answer the webhook); retry",
                        eviction.pod, self.deadline
                    ),
                )
            }
        }
    }

    async fn judge_unbounded(self: &Arc<Self>, eviction: &Eviction) -> Verdict {
        let namespace = eviction.namespace.as_str();
        let candidates = match self.candidates(namespace).await {
            Ok(candidates) => candidates,
            Err(error) => {
                tracing::warn!(error = %error, namespace, "cannot list budgets");
                return denied(
                    reason::API_ERROR,
                    format!(
                        "cannot evict pod {}: the ZoneDisruptionBudgets of namespace {namespace} cannot be read; retry",
                        eviction.pod
                    ),
                );
            }
        };
        if candidates.is_empty() {
            return allowed(reason::NO_BUDGET);
        }
        let pod_api: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        let zdb_api: Api<ZoneDisruptionBudget> = Api::namespaced(self.client.clone(), namespace);
        let names: Vec<String> = candidates.iter().map(|zdb| zdb.name_any()).collect();
        let guess = self.guesses.guess(namespace, &eviction.pod, &names);
        let recent = guess
            .as_deref()
            .and_then(|name| self.recent_copy(namespace, name));
        // With a recent copy of the guessed budget, a refusal needs only the pod: the budget is
        // read after it if the copy does not refuse.
        let (pod, early) = match guess.filter(|_| recent.is_none()) {
            Some(guess) => {
                let (pod, zdb) = tokio::join!(
                    self.request(pod_api.get_opt(&eviction.pod)),
                    self.request(zdb_api.get_opt(&guess))
                );
                // A failed early read is only a lost head start: the budget is read again.
                (pod, zdb.ok().map(|zdb| (guess, zdb)))
            }
            None => (self.request(pod_api.get_opt(&eviction.pod)).await, None),
        };
        let pod = match pod {
            Ok(Some(pod)) => lean(pod),
            // The API server answers 404 itself.
            Ok(None) => return allowed(reason::POD_NOT_FOUND),
            Err(error) => {
                tracing::warn!(error = %error, namespace, pod = %eviction.pod, "cannot read the pod");
                return denied(
                    reason::API_ERROR,
                    format!(
                        "cannot evict pod {}: the pod cannot be read; retry",
                        eviction.pod
                    ),
                );
            }
        };
        let name = match self.selecting(eviction, &candidates, &pod) {
            Ok(zdb) => zdb.name_any(),
            Err(verdict) => return verdict,
        };
        // Not kept while the decision waits: it reads the chosen budget fresh.
        drop(candidates);
        self.guesses.learn(namespace, &eviction.pod, Some(&name));
        // The early read counts only if it is of the budget that selects the fresh pod.
        let early = early.and_then(|(guess, zdb)| (guess == name).then_some(zdb));
        let recent = recent.filter(|copy| copy.name_any() == name);
        self.decide(eviction, &pod, &zdb_api, &name, recent, early)
            .await
    }

    /// The one valid budget of `candidates` that selects `pod`; none allows the eviction, several
    /// refuse it (a pod may have one budget).
    fn selecting<'a>(
        &self,
        eviction: &Eviction,
        candidates: &'a [Arc<ZoneDisruptionBudget>],
        pod: &Pod,
    ) -> Result<&'a ZoneDisruptionBudget, Verdict> {
        match budget::selecting(candidates.iter().map(|zdb| &**zdb), pod.labels()) {
            Selecting::None => {
                self.guesses.learn(&eviction.namespace, &eviction.pod, None);
                Err(allowed(reason::NO_BUDGET))
            }
            Selecting::One(zdb) => Ok(zdb),
            Selecting::Several(names) => Err(denied(
                reason::OVERLAPPING_BUDGETS,
                budget::overlapping_message(&eviction.pod, &names),
            )),
        }
    }

    /// The recent copy of a budget, if a refusal may be decided from it.
    fn recent_copy(&self, namespace: &str, name: &str) -> Option<Arc<ZoneDisruptionBudget>> {
        let watched = self.zdbs.get(&ObjectRef::new(name).within(namespace))?;
        self.recent.usable(
            namespace,
            name,
            self.denial_ttl,
            watched.resource_version().as_deref(),
        )
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use k8s_openapi::api::core::v1::Node;
    use kube::runtime::reflector;
    use std::time::Instant;

    /// An API server that accepts connections and never answers: the verdict is a 429 within
    /// the deadline, not the API server's webhook timeout (a 500 that ends a drain).
    #[tokio::test]
    async fn a_slow_api_server_gets_a_429_within_the_deadline() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let silent = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((stream, _)) = listener.accept().await {
                held.push(stream);
            }
        });
        let config = kube::Config::new(format!("http://{address}").parse().unwrap());
        let client = Client::try_from(config).unwrap();
        let (zdbs, _zdb_writer) = reflector::store::<ZoneDisruptionBudget>();
        let (nodes, _node_writer) = reflector::store::<Node>();
        let judge = Arc::new(Judge {
            client: client.clone(),
            zdbs,
            zdbs_synced: Arc::new(AtomicBool::new(false)),
            zones: NodeZones::from_store(nodes, zone_topology::ZONE_LABEL),
            field_manager: "zdb-controller".to_string(),
            deadline: Duration::from_millis(200),
            metrics: ZdbMetrics::register(&prometheus::Registry::new()).unwrap(),
            events: EventPublisher::new(client, "zdb-controller", "test"),
            guesses: BudgetGuesses::default(),
            recent: RecentBudgets::default(),
            denial_ttl: Duration::from_millis(250),
            rollout_users: Vec::new(),
            queues: Arc::default(),
            in_flight: Arc::new(tokio::sync::Semaphore::new(MAX_IN_FLIGHT)),
            api_requests: Arc::new(tokio::sync::Semaphore::new(MAX_API_REQUESTS)),
        });
        let started = Instant::now();
        let verdict = judge
            .judge(&Eviction {
                namespace: "apps".into(),
                pod: "web-0".into(),
                dry_run: false,
                user: String::new(),
            })
            .await;
        assert!(!verdict.allowed);
        assert_eq!(verdict.reason, reason::DEADLINE);
        assert!(verdict.message.unwrap().contains("retry"));
        assert!(started.elapsed() < Duration::from_secs(2));
        silent.abort();
    }

    /// An API server answering one pod and one budget, counting the reads of each.
    async fn counting_api_server(
        pod: serde_json::Value,
        zdb: serde_json::Value,
    ) -> (Client, Arc<[std::sync::atomic::AtomicUsize; 2]>) {
        let (client, reads, _) = slow_api_server(pod, zdb, Duration::ZERO).await;
        (client, reads)
    }

    /// [`counting_api_server`] taking `delay` over each pod read, with the most pod reads it
    /// had in progress at once.
    async fn slow_api_server(
        pod: serde_json::Value,
        zdb: serde_json::Value,
        delay: Duration,
    ) -> (
        Client,
        Arc<[std::sync::atomic::AtomicUsize; 2]>,
        Arc<std::sync::atomic::AtomicUsize>,
    ) {
        use std::sync::atomic::AtomicUsize;
        let reads: Arc<[AtomicUsize; 2]> = Arc::new([AtomicUsize::new(0), AtomicUsize::new(0)]);
        let (pod_reads, zdb_reads) = (reads.clone(), reads.clone());
        let (now, most) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let most_seen = most.clone();
        let router = axum::Router::new()
            .route(
                "/api/v1/namespaces/apps/pods/web-4",
                axum::routing::get(move || async move {
                    pod_reads[0].fetch_add(1, Ordering::SeqCst);
                    let at_once = now.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(at_once, Ordering::SeqCst);
                    tokio::time::sleep(delay).await;
                    now.fetch_sub(1, Ordering::SeqCst);
                    axum::Json(pod)
                }),
            )
            .route(
                "/apis/zonecontrol.k8s.aws/v1/namespaces/apps/zonedisruptionbudgets/web",
                axum::routing::get(move || async move {
                    zdb_reads[1].fetch_add(1, Ordering::SeqCst);
                    axum::Json(zdb)
                }),
            );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, router).await });
        let config = kube::Config::new(format!("http://{address}").parse().unwrap());
        (Client::try_from(config).unwrap(), reads, most_seen)
    }

    /// Pod web-4 in zone-b, and budget web whose zone-a is disrupted by web-0's recorded
    /// eviction: web-4's eviction is refused.
    fn zone_a_disrupted() -> (serde_json::Value, serde_json::Value) {
        let pod = serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "web-4", "namespace": "apps", "labels": {"app": "web"}},
            "spec": {"nodeName": "node-b", "containers": []},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
        });
        let zdb = serde_json::json!({
            "apiVersion": "zonecontrol.k8s.aws/v1", "kind": "ZoneDisruptionBudget",
            "metadata": {"name": "web", "namespace": "apps", "generation": 1, "resourceVersion": "7"},
            "spec": {"selector": {"matchLabels": {"app": "web"}}, "maxUnavailable": 1},
            "status": {
                "observedGeneration": 1,
                "expectedPods": {"zone-a": 3, "zone-b": 3},
                "currentHealthy": {"zone-a": 2, "zone-b": 3},
                "disruptedPods": {"web-0": "2026-11-23T10:00:00Z"},
                "disruptedPodZones": {"web-0": "zone-a"},
            },
        });
        (pod, zdb)
    }

    /// A judge of `client` whose caches hold `budget` and node-b in zone-b; the budget's cache
    /// writer, for newer versions.
    fn judge_of(
        client: Client,
        budget: &ZoneDisruptionBudget,
    ) -> (Arc<Judge>, reflector::store::Writer<ZoneDisruptionBudget>) {
        use kube::runtime::watcher;
        let (zdbs, mut zdb_writer) = reflector::store::<ZoneDisruptionBudget>();
        zdb_writer.apply_watcher_event(&watcher::Event::Apply(budget.clone()));
        let (nodes, mut node_writer) = reflector::store::<Node>();
        let node = zone_operator::testing::zoned_node("node-b", "zone-b");
        node_writer.apply_watcher_event(&watcher::Event::Apply(node));
        let judge = Arc::new(Judge {
            client: client.clone(),
            zdbs,
            zdbs_synced: Arc::new(AtomicBool::new(true)),
            zones: NodeZones::from_store(nodes, zone_topology::ZONE_LABEL),
            field_manager: "zdb-controller".to_string(),
            deadline: Duration::from_secs(5),
            metrics: ZdbMetrics::register(&prometheus::Registry::new()).unwrap(),
            events: EventPublisher::new(client, "zdb-controller", "test"),
            guesses: BudgetGuesses::default(),
            recent: RecentBudgets::default(),
            denial_ttl: Duration::from_secs(60),
            rollout_users: Vec::new(),
            queues: Arc::default(),
            in_flight: Arc::new(tokio::sync::Semaphore::new(MAX_IN_FLIGHT)),
            api_requests: Arc::new(tokio::sync::Semaphore::new(MAX_API_REQUESTS)),
        });
        (judge, zdb_writer)
    }

    fn eviction_of_web_4() -> Eviction {
        Eviction {
            namespace: "apps".into(),
            pod: "web-4".into(),
            dry_run: false,
            user: String::new(),
        }
    }

    /// During a drain the budget is read once for many refusals, while the replica's watch
    /// holds the version read; a version the watch has moved past is read again.
    #[tokio::test]
    async fn refusals_reuse_a_budget_read_while_the_watch_holds_its_version() {
        use kube::runtime::watcher;
        let (pod, zdb) = zone_a_disrupted();
        let budget: ZoneDisruptionBudget = serde_json::from_value(zdb.clone()).unwrap();
        let (client, reads) = counting_api_server(pod, zdb).await;
        let (judge, mut zdb_writer) = judge_of(client, &budget);
        let eviction = eviction_of_web_4();
        let count = |i: usize| reads[i].load(Ordering::SeqCst);
        for _ in 0..3 {
            let verdict = judge.judge(&eviction).await;
            assert!(!verdict.allowed, "{verdict:?}");
            assert_eq!(verdict.reason, reason::OTHER_ZONE_DISRUPTED);
        }
        assert_eq!((count(0), count(1)), (3, 1), "pod reads, budget reads");

        // The watch delivers a newer version: the copy read before no longer decides.
        let mut newer = budget;
        newer.metadata.resource_version = Some("8".into());
        zdb_writer.apply_watcher_event(&watcher::Event::Apply(newer));
        assert!(!judge.judge(&eviction).await.allowed);
        assert_eq!((count(0), count(1)), (4, 2), "pod reads, budget reads");
    }

    /// A storm of evictions does not open a connection to the API server per decision: the
    /// decisions' requests take turns in [`MAX_API_REQUESTS`] slots.
    #[tokio::test]
    async fn decisions_send_a_bounded_number_of_api_requests_at_once() {
        let (pod, zdb) = zone_a_disrupted();
        let budget: ZoneDisruptionBudget = serde_json::from_value(zdb.clone()).unwrap();
        let (client, reads, most) = slow_api_server(pod, zdb, Duration::from_millis(50)).await;
        let (judge, _zdb_writer) = judge_of(client, &budget);
        let eviction = eviction_of_web_4();
        let decisions = 3 * MAX_API_REQUESTS;
        let verdicts =
            futures::future::join_all((0..decisions).map(|_| judge.judge(&eviction))).await;
        for verdict in &verdicts {
            assert_eq!(verdict.reason, reason::OTHER_ZONE_DISRUPTED, "{verdict:?}");
        }
        assert_eq!(reads[0].load(Ordering::SeqCst), decisions, "pod reads");
        let most = most.load(Ordering::SeqCst);
        assert!(
            (2..=MAX_API_REQUESTS).contains(&most),
            "{most} pod reads at once"
        );
    }
}
