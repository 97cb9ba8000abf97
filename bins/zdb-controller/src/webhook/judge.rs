//! Judging one eviction. Linearizable across replicas: the decision is made from the budget
//! object and the pod, both read fresh, and an allowed eviction is recorded by a PUT of the
//! budget's status carrying the resourceVersion that was read. Two replicas deciding at once
//! cannot both succeed; the loser re-reads, sees the winner's record and decides again.
//!
//! The two reads run at once when the budget can be guessed before the pod is read (see
//! [`BudgetGuesses`]): a decision then waits for one round trip to the API server, not two.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::api::ListParams;
use kube::core::{Selector, SelectorExt};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Api, Client, Resource, ResourceExt};
use zone_api::{ZoneDisruptionBudget, ZoneDisruptionBudgetStatus};
use zone_operator::status;
use zone_operator::{ErrorChain, EventPublisher, NodeZones};
use zone_topology::Zone;
use zone_topology::budget::{Decision, Denial, EvictedPod, PodCondition};

use crate::metrics::{ZdbMetrics, reason};
use crate::webhook::admission::Eviction;
use crate::webhook::guess::BudgetGuesses;
use crate::webhook::queue::{BudgetQueues, Shed};
use crate::webhook::recent::RecentBudgets;
use crate::{pods, view};

/// Pause between attempts after a write conflict (with another replica): long enough for the
/// winner's write to be readable, short enough for many attempts inside the deadline; the actual
/// pause is drawn between half and one and a half times this, so two replicas that collided do
/// not collide again in step.
const CONFLICT_BACKOFF: Duration = Duration::from_millis(20);

/// Decisions one replica works on at once, at most; past it an eviction is refused at once (a
/// 429 the client retries). Bounds the memory a burst can take: each decision holds a pod,
/// copies of its budget, its connection from the API server and one to it (HTTP/1.1: one per
/// request in flight). A drain's refusals take a few milliseconds each, so at 200 evictions/s
/// this is far above what they need; it binds when decisions wait for their budget's turn.
pub const MAX_IN_FLIGHT: usize = 64;

/// API requests (reads and status writes) the decisions of one replica make at once, at most;
/// the others wait for a slot, in order. The client keeps one connection per request in flight
/// (HTTP/1.1), each with its TLS state and buffers, and keeps it after the burst: without this
/// bound a storm opened a connection for nearly every decision in flight. A drain's refusals take
/// about one request each, a few milliseconds, so at 200 evictions/s a few slots are busy.
pub const MAX_API_REQUESTS: usize = 16;

/// Kept back from the deadline when waiting for a budget's writer's turn: the write itself and
/// the answer still have to fit.
const DEADLINE_MARGIN: Duration = Duration::from_millis(150);

/// The answer to one eviction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub allowed: bool,
    /// Metric label (bounded, see `metrics::reason`).
    pub reason: &'static str,
    /// The denial message, or a warning for an allowed eviction.
    pub message: Option<String>,
}

fn allowed(reason: &'static str) -> Verdict {
    Verdict {
        allowed: true,
        reason,
        message: None,
    }
}

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

fn denied(reason: &'static str, message: String) -> Verdict {
    Verdict {
        allowed: false,
        reason,
        message: Some(message),
    }
}

/// What one version of a budget says of an eviction.
enum Step {
    Answer(Verdict),
    /// Allowed if this status (the eviction recorded in `zone`) can be written over that version.
    Record {
        next: ZoneDisruptionBudgetStatus,
        zone: Zone,
    },
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
    /// One writer at a time per budget in this replica.
    pub queues: Arc<BudgetQueues>,
    /// Permits for the decisions in flight ([`MAX_IN_FLIGHT`]).
    pub in_flight: Arc<tokio::sync::Semaphore>,
    /// Slots for the decisions' API requests ([`MAX_API_REQUESTS`]).
    pub api_requests: Arc<tokio::sync::Semaphore>,
}

/// `base` scaled by a factor drawn from [0.5, 1.5).
fn jittered(base: Duration) -> Duration {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(Instant::now().elapsed().as_nanos());
    let unit = f64::from(u32::try_from(hasher.finish() >> 32).unwrap_or(0)) / 4_294_967_296.0;
    base.mul_f64(0.5 + unit)
}

/// The denial, naming the zone and what blocks it.
pub fn denial_message(budget: &str, pod: &str, denial: &Denial) -> String {
    let why = match denial {
        Denial::OtherZoneDisrupted {
            zone,
            disrupted,
            blocking: b,
        } => format!(
            "zone {disrupted} is disrupted ({}): evictions in zone {zone} must wait until it recovers",
            view::blocking(b)
        ),
        Denial::ZoneBudgetExhausted {
            zone,
            max_unavailable,
            blocking: b,
        } => format!(
            "zone {zone} already has {} of maxUnavailable {max_unavailable} pod(s) unavailable ({})",
            b.unhealthy,
            view::blocking(b)
        ),
    };
    format!("cannot evict pod {pod}: ZoneDisruptionBudget {budget}: {why}")
}

fn denial_reason(denial: &Denial) -> &'static str {
    match denial {
        Denial::OtherZoneDisrupted { .. } => reason::OTHER_ZONE_DISRUPTED,
        Denial::ZoneBudgetExhausted { .. } => reason::ZONE_BUDGET_EXHAUSTED,
    }
}

impl Judge {
    /// `request`, sent once one of the [`MAX_API_REQUESTS`] slots is free.
    async fn request<T>(&self, request: impl std::future::Future<Output = T>) -> T {
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
    pub async fn judge(&self, eviction: &Eviction) -> Verdict {
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

    async fn judge_unbounded(&self, eviction: &Eviction) -> Verdict {
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
        let selecting: Vec<&ZoneDisruptionBudget> = candidates
            .iter()
            .filter(|zdb| {
                zdb.spec
                    .validate()
                    .ok()
                    .and_then(|valid| Selector::try_from(valid.selector).ok())
                    .is_some_and(|selector| selector.matches(pod.labels()))
            })
            .map(|zdb| &**zdb)
            .collect();
        match selecting.as_slice() {
            [] => {
                self.guesses.learn(&eviction.namespace, &eviction.pod, None);
                Err(allowed(reason::NO_BUDGET))
            }
            [zdb] => Ok(*zdb),
            several => {
                let names: Vec<String> = several.iter().map(|z| z.name_any()).collect();
                Err(denied(
                    reason::OVERLAPPING_BUDGETS,
                    format!(
                        "cannot evict pod {}: it is selected by several ZoneDisruptionBudgets ({}); a pod may have one",
                        eviction.pod,
                        names.join(", ")
                    ),
                ))
            }
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

    /// Decides with the budget `name`. A refusal may come from `recent`, a copy read fresh a
    /// moment ago (see [`RecentBudgets`]); anything else is decided from a fresh read: `early`,
    /// made alongside the pod's (`Some(None)`: it was not found), serves the first attempt.
    async fn decide(
        &self,
        eviction: &Eviction,
        pod: &Pod,
        api: &Api<ZoneDisruptionBudget>,
        name: &str,
        recent: Option<Arc<ZoneDisruptionBudget>>,
        mut early: Option<Option<ZoneDisruptionBudget>>,
    ) -> Verdict {
        let namespace = eviction.namespace.as_str();
        let zone = self.zones.zone_of(pod);
        let condition = pods::condition(pod);
        let created_ms = pods::created_ms(pod);
        if let Some(zdb) = recent
            && let Step::Answer(verdict) =
                self.assess(eviction, name, &zdb, &zone, condition, created_ms)
            && (!verdict.allowed || verdict.reason == reason::SHADOW)
        {
            return verdict;
        }
        let started = Instant::now();
        // Taken once a fresh read says the eviction is to be recorded; kept across conflicts.
        let mut turn = None;
        loop {
            let read = match early.take() {
                Some(zdb) => Ok(zdb),
                None => self.request(api.get_opt(name)).await,
            };
            let zdb = match read {
                Ok(Some(mut zdb)) => {
                    // Kept while the decision waits for its turn; the PUT without them leaves
                    // them as they are (a nil managedFields in an update keeps the stored ones).
                    zdb.metadata.managed_fields = None;
                    zdb
                }
                Ok(None) => return allowed(reason::NO_BUDGET),
                Err(error) => {
                    tracing::warn!(error = %error, namespace, budget = name, "cannot read the budget");
                    return denied(
                        reason::API_ERROR,
                        format!(
                            "cannot evict pod {}: ZoneDisruptionBudget {name} cannot be read; retry",
                            eviction.pod
                        ),
                    );
                }
            };
            self.recent.remember(&zdb);
            let (next, zone) = match self.assess(eviction, name, &zdb, &zone, condition, created_ms)
            {
                Step::Answer(verdict) => return verdict,
                Step::Record { next, zone } => (next, zone),
            };
            let shadow = zdb.spec.dry_run;
            if turn.is_none() {
                let time_left = self
                    .deadline
                    .saturating_sub(started.elapsed() + DEADLINE_MARGIN);
                match self.queues.turn(namespace, name, time_left).await {
                    Ok(held) => {
                        // Decide again from what the previous writer stored, if it is not what
                        // was read before waiting.
                        let written = held.written();
                        turn = Some(held);
                        if let Some(written) = written
                            && written.resource_version() != zdb.resource_version()
                        {
                            early = Some(Some((*written).clone()));
                            continue;
                        }
                    }
                    Err(shed) => {
                        self.metrics.shed(match shed {
                            Shed::QueueFull => "QueueFull",
                            Shed::NoTimeLeft => "NoTimeLeft",
                        });
                        let message = format!(
                            "cannot evict pod {}: too many evictions of ZoneDisruptionBudget {name} are being decided; retry",
                            eviction.pod
                        );
                        return self.refuse(&zdb, shadow, reason::SHED, message);
                    }
                }
            }
            let mut wanted = zdb.clone();
            wanted.status = Some(next);
            let result = self
                .request(status::put_status(api, &wanted, &self.field_manager))
                .await;
            match result {
                Ok(mut written) => {
                    written.metadata.managed_fields = None;
                    self.recent.remember(&written);
                    if let Some(turn) = &turn {
                        turn.wrote(&written);
                    }
                    tracing::info!(namespace, budget = name, pod = %eviction.pod, zone = %zone, "eviction allowed and recorded");
                    return allowed(reason::RECORDED);
                }
                Err(error) if error.is_conflict() => {
                    self.metrics.conflict_retry();
                    let backoff = jittered(CONFLICT_BACKOFF);
                    if started.elapsed() + backoff >= self.deadline {
                        let message = format!(
                            "cannot evict pod {}: ZoneDisruptionBudget {name} is being updated by concurrent evictions; retry",
                            eviction.pod
                        );
                        return self.refuse(&zdb, shadow, reason::CONFLICTS, message);
                    }
                    tokio::time::sleep(backoff).await;
                }
                Err(error) => {
                    tracing::warn!(error = %ErrorChain(&error), namespace, budget = name, "cannot record the eviction");
                    let message = format!(
                        "cannot evict pod {}: the disruption cannot be recorded in ZoneDisruptionBudget {name}; retry",
                        eviction.pod
                    );
                    return self.refuse(&zdb, shadow, reason::API_ERROR, message);
                }
            }
        }
    }

    /// What one version of the budget says of the eviction: an answer, or a record to write.
    fn assess(
        &self,
        eviction: &Eviction,
        name: &str,
        zdb: &ZoneDisruptionBudget,
        zone: &Zone,
        condition: PodCondition,
        created_ms: i64,
    ) -> Step {
        let shadow = zdb.spec.dry_run;
        let Ok(valid) = zdb.spec.validate() else {
            // The controller reports it (condition, event); an unenforceable budget must not
            // block every drain of the namespace.
            return Step::Answer(allowed(reason::INVALID_BUDGET));
        };
        let status = zdb.status.clone().unwrap_or_default();
        let generation = zdb.metadata.generation.unwrap_or(0);
        if status.observed_generation != generation {
            let message = format!(
                "cannot evict pod {}: ZoneDisruptionBudget {name} generation {generation} is not computed yet (status is for {}); retry",
                eviction.pod, status.observed_generation
            );
            return Step::Answer(self.refuse(zdb, shadow, reason::NOT_OBSERVED, message));
        }
        let budget = view::from_status(&status, valid.max_unavailable);
        let decision = budget.decide(&EvictedPod {
            name: &eviction.pod,
            zone: zone.clone(),
            condition,
            created_ms,
        });
        match decision {
            Decision::Allow { record: false, .. } => {
                Step::Answer(allowed(if condition == PodCondition::Healthy {
                    reason::ALREADY_RECORDED
                } else {
                    reason::POD_UNAVAILABLE
                }))
            }
            Decision::Allow { .. } if eviction.dry_run => Step::Answer(allowed(reason::DRY_RUN)),
            Decision::Allow { zone, record: true } => {
                let mut next = status;
                view::record(
                    &mut next,
                    &eviction.pod,
                    &zone,
                    zone_api::conditions::now(),
                    valid.max_unavailable,
                );
                Step::Record { next, zone }
            }
            Decision::Deny(denial) => {
                let message = denial_message(name, &eviction.pod, &denial);
                Step::Answer(self.refuse(zdb, shadow, denial_reason(&denial), message))
            }
        }
    }

    /// A denial, or in shadow mode (spec.dryRun) an allowance that is counted, warned about and
    /// published as an event.
    fn refuse(
        &self,
        zdb: &ZoneDisruptionBudget,
        shadow: bool,
        why: &'static str,
        message: String,
    ) -> Verdict {
        if !shadow {
            return denied(why, message);
        }
        let namespace = zdb.namespace().unwrap_or_default();
        let name = zdb.name_any();
        self.metrics.shadow_denial(&namespace, &name);
        tracing::info!(namespace = %namespace, budget = %name, reason = why, message = %message, "shadow mode: eviction allowed that would have been denied");
        let events = self.events.clone();
        let regarding = zdb.object_ref(&());
        let note = format!("shadow mode (spec.dryRun): allowed, would have denied: {message}");
        // Best effort and off the admission path: the answer must not wait for the event.
        tokio::spawn(async move {
            events
                .warning(&regarding, "WouldDenyEviction", "Evict", &note)
                .await;
        });
        Verdict {
            allowed: true,
            reason: reason::SHADOW,
            message: Some(format!(
                "ZoneDisruptionBudget {name} is in shadow mode (spec.dryRun): allowed, but it would have denied: {message}"
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use k8s_openapi::api::core::v1::Node;
    use kube::core::PartialObjectMeta;
    use kube::runtime::reflector;
    use zone_topology::Zone;

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
        let (nodes, _node_writer) = reflector::store::<PartialObjectMeta<Node>>();
        let judge = Judge {
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
            queues: Arc::default(),
            in_flight: Arc::new(tokio::sync::Semaphore::new(MAX_IN_FLIGHT)),
            api_requests: Arc::new(tokio::sync::Semaphore::new(MAX_API_REQUESTS)),
        };
        let started = Instant::now();
        let verdict = judge
            .judge(&Eviction {
                namespace: "apps".into(),
                pod: "web-0".into(),
                dry_run: false,
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
    ) -> (Judge, reflector::store::Writer<ZoneDisruptionBudget>) {
        use kube::api::ObjectMeta;
        use kube::core::PartialObjectMetaExt;
        use kube::runtime::watcher;
        let (zdbs, mut zdb_writer) = reflector::store::<ZoneDisruptionBudget>();
        zdb_writer.apply_watcher_event(&watcher::Event::Apply(budget.clone()));
        let (nodes, mut node_writer) = reflector::store::<PartialObjectMeta<Node>>();
        let node = ObjectMeta {
            name: Some("node-b".into()),
            labels: Some([(zone_topology::ZONE_LABEL.to_string(), "zone-b".to_string())].into()),
            ..ObjectMeta::default()
        }
        .into_response_partial::<Node>();
        node_writer.apply_watcher_event(&watcher::Event::Apply(node));
        let judge = Judge {
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
            queues: Arc::default(),
            in_flight: Arc::new(tokio::sync::Semaphore::new(MAX_IN_FLIGHT)),
            api_requests: Arc::new(tokio::sync::Semaphore::new(MAX_API_REQUESTS)),
        };
        (judge, zdb_writer)
    }

    fn eviction_of_web_4() -> Eviction {
        Eviction {
            namespace: "apps".into(),
            pod: "web-4".into(),
            dry_run: false,
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

    #[test]
    fn denials_name_the_zone_and_the_blocking_pods() {
        let blocking = zone_topology::budget::ZoneBudget {
            expected: 3,
            healthy: 0,
            unhealthy: 3,
            blocking_pods: vec!["web-0".into(), "web-3".into()],
            ..zone_topology::budget::ZoneBudget::default()
        };
        let message = denial_message(
            "web",
            "web-4",
            &Denial::OtherZoneDisrupted {
                zone: Zone::known("zone-b"),
                disrupted: Zone::known("zone-a"),
                blocking: blocking.clone(),
            },
        );
        assert_eq!(
            message,
            "cannot evict pod web-4: ZoneDisruptionBudget web: zone zone-a is disrupted (web-0, web-3 evicted; 1 other pod(s) unavailable or missing): evictions in zone zone-b must wait until it recovers"
        );
        let message = denial_message(
            "web",
            "web-6",
            &Denial::ZoneBudgetExhausted {
                zone: Zone::known("zone-a"),
                max_unavailable: 2,
                blocking,
            },
        );
        assert!(
            message.contains("zone zone-a already has 3 of maxUnavailable 2"),
            "{message}"
        );
    }
}
