//! Group commit, the writing part: the committer of a budget takes the evictions queued for it
//! (`queue.rs`) as one batch, decides them together on one version of the budget (`batch.rs`),
//! answers those it refuses at once, and records the others with **one** PUT of the status
//! carrying that version's resourceVersion. Every member of the batch is answered from that
//! write's outcome:
//!
//! - written: each recorded eviction is allowed;
//! - conflict (another replica or the status controller wrote meanwhile): the budget is read
//!   again and the batch, with whatever queued meanwhile, is decided again on the winner's
//!   version; a member whose time would run out first is refused with 429;
//! - any other failure: every member of the batch is refused with 429 (the client retries).
//!
//! The committer is a task of its own, not one of the requests: a request that gives up (its
//! deadline, a closed connection) must not take the batch of the others with it.

use std::sync::Arc;
use std::time::Duration;

use kube::Api;
use kube::runtime::reflector::ObjectRef;
use tokio::time::Instant;
use zone_api::ZoneDisruptionBudget;
use zone_operator::ErrorChain;
use zone_operator::status;
use zone_topology::Zone;

use super::admission::Eviction;
use super::judge::Judge;
use super::queue::{BudgetKey, Joined, Member, Shed};
use super::verdict::{Verdict, allowed, denied};
use crate::metrics::reason;
use zone_views::budget::batch::{self, Assessment, Candidate};

/// Ends a budget's queue if its committer stops without emptying it (a panic while deciding):
/// the requests waiting then get their 429 at once rather than at the deadline.
struct Running<'a> {
    judge: &'a Judge,
    key: &'a BudgetKey,
    done: bool,
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        if !self.done {
            self.judge.queues.abandon(self.key);
        }
    }
}

impl Judge {
    /// Queues an eviction that `read`, a fresh read of budget `name`, says to record, and
    /// waits for the outcome of its batch; `time_left` is how long the request may wait.
    pub(super) async fn record_in_batch(
        self: &Arc<Self>,
        eviction: &Eviction,
        name: &str,
        candidate: Candidate,
        read: ZoneDisruptionBudget,
        time_left: Duration,
    ) -> Verdict {
        let key: BudgetKey = (eviction.namespace.clone(), name.to_string());
        let read = Arc::new(read);
        let (member, answer) = Member::new(candidate, read.clone(), Instant::now() + time_left);
        match self.queues.join(&key, member, time_left) {
            Ok(Joined::StartCommitter) => {
                tokio::spawn(self.clone().commit(key));
            }
            Ok(Joined::Queued) => {}
            Err(shed) => {
                self.metrics.shed(match shed {
                    Shed::QueueFull => "QueueFull",
                    Shed::NoTimeLeft => "NoTimeLeft",
                });
                let message = format!(
                    "cannot evict pod {}: too many evictions of ZoneDisruptionBudget {name} are being decided; retry",
                    eviction.pod
                );
                return self.refuse(&read, read.spec.dry_run, reason::SHED, message);
            }
        }
        answer.await.unwrap_or_else(|_| {
            denied(
                reason::API_ERROR,
                format!(
                    "cannot evict pod {}: the record in ZoneDisruptionBudget {name} was abandoned; retry",
                    eviction.pod
                ),
            )
        })
    }

    /// The committer of budget `key`: batch after batch until its queue is empty.
    async fn commit(self: Arc<Self>, key: BudgetKey) {
        let mut running = Running {
            judge: &self,
            key: &key,
            done: false,
        };
        let api: Api<ZoneDisruptionBudget> = Api::namespaced(self.client.clone(), &key.0);
        let mut carried = Vec::new();
        // Read after a conflict: the next batch is decided on it.
        let mut fresh: Option<ZoneDisruptionBudget> = None;
        while let Some(mut members) = self.queues.next_batch(&key, std::mem::take(&mut carried)) {
            members.retain(|member| !member.abandoned());
            if members.is_empty() {
                continue;
            }
            let started = Instant::now();
            let base = match fresh.take() {
                Some(zdb) => zdb,
                None => self.newest_version(&key, &members),
            };
            (carried, fresh) = self.commit_batch(&api, &key, &base, members).await;
            self.queues.observe_batch(started.elapsed());
        }
        running.done = true;
    }

    /// The version a batch is decided on: the newest at hand (see [`batch::newest`]).
    fn newest_version(
        &self,
        (namespace, name): &BudgetKey,
        members: &[Member],
    ) -> ZoneDisruptionBudget {
        let watched = self.zdbs.get(&ObjectRef::new(name).within(namespace));
        let written = self.queues.written(&(namespace.clone(), name.clone()));
        let reads = members.iter().map(|member| member.read.clone());
        let newest = batch::newest(reads.chain(watched).chain(written));
        // `members` is not empty: one of their reads at least.
        newest.map_or_else(|| (*members[0].read).clone(), |zdb| (*zdb).clone())
    }

    /// Decides `members` on `base` and writes their records; returns the members to decide
    /// again after a conflict, and the version read then.
    async fn commit_batch(
        &self,
        api: &Api<ZoneDisruptionBudget>,
        key: &BudgetKey,
        base: &ZoneDisruptionBudget,
        members: Vec<Member>,
    ) -> (Vec<Member>, Option<ZoneDisruptionBudget>) {
        let name = key.1.as_str();
        let candidates: Vec<Candidate> = members.iter().map(|m| m.candidate.clone()).collect();
        let folded = batch::fold(name, base, &candidates, &zone_api::conditions::now());
        let mut recording: Vec<(Member, Zone)> = Vec::new();
        for (member, outcome) in members.into_iter().zip(folded.outcomes) {
            match outcome {
                Assessment::Record { zone } => recording.push((member, zone)),
                other => member.answer(self.verdict(base, other)),
            }
        }
        let Some(next) = folded.status else {
            return (Vec::new(), None);
        };
        let mut wanted = base.clone();
        wanted.status = Some(next);
        // Past the decisions' slots for API requests: under a storm dozens of reads wait there,
        // and the batch's write is what every member of the batch waits for. A committer sends
        // one request at a time, so this adds one connection per budget being written at most.
        let result = status::put_status(api, &wanted, &self.field_manager).await;
        let shadow = base.spec.dry_run;
        match result {
            Ok(mut written) => {
                written.metadata.managed_fields = None;
                self.recent.remember(&written);
                self.queues.wrote(key, Arc::new(written));
                self.metrics.batch_written(recording.len());
                let pods: Vec<&str> = recording
                    .iter()
                    .map(|(m, _)| m.candidate.pod.as_str())
                    .collect();
                let zone = recording.first().map(|(_, zone)| zone.to_string());
                tracing::info!(namespace = %key.0, budget = name, pods = ?pods, zone = ?zone, "evictions allowed and recorded");
                for (member, _) in recording {
                    member.answer(allowed(reason::RECORDED));
                }
                (Vec::new(), None)
            }
            Err(error) if error.is_conflict() => {
                self.metrics.conflict_retry();
                self.after_conflict(api, key, base, recording).await
            }
            Err(error) => {
                tracing::warn!(error = %ErrorChain(&error), namespace = %key.0, budget = name, evictions = recording.len(), "cannot record the evictions");
                for (member, _) in recording {
                    let message = format!(
                        "cannot evict pod {}: the disruption cannot be recorded in ZoneDisruptionBudget {name}; retry",
                        member.candidate.pod
                    );
                    member.answer(self.refuse(base, shadow, reason::API_ERROR, message));
                }
                (Vec::new(), None)
            }
        }
    }

    /// After a lost write: the budget read again (the winner's version), and the members with
    /// time for another batch carried to it; the others refused.
    async fn after_conflict(
        &self,
        api: &Api<ZoneDisruptionBudget>,
        key: &BudgetKey,
        base: &ZoneDisruptionBudget,
        recording: Vec<(Member, Zone)>,
    ) -> (Vec<Member>, Option<ZoneDisruptionBudget>) {
        let name = key.1.as_str();
        let shadow = base.spec.dry_run;
        // Past the slots too, as the write (see above).
        let fresh = match api.get_opt(name).await {
            Ok(Some(mut zdb)) => {
                zdb.metadata.managed_fields = None;
                self.recent.remember(&zdb);
                zdb
            }
            Ok(None) => {
                for (member, _) in recording {
                    member.answer(allowed(reason::NO_BUDGET));
                }
                return (Vec::new(), None);
            }
            Err(error) => {
                tracing::warn!(error = %error, namespace = %key.0, budget = name, "cannot read the budget");
                for (member, _) in recording {
                    let message = format!(
                        "cannot evict pod {}: ZoneDisruptionBudget {name} cannot be read; retry",
                        member.candidate.pod
                    );
                    member.answer(self.refuse(base, shadow, reason::API_ERROR, message));
                }
                return (Vec::new(), None);
            }
        };
        let now = Instant::now();
        let needed = self.queues.write_estimate();
        let mut carried = Vec::new();
        for (member, _) in recording {
            if member.due.saturating_duration_since(now) > needed {
                carried.push(member);
            } else {
                let message = format!(
                    "cannot evict pod {}: ZoneDisruptionBudget {name} is being updated by concurrent evictions; retry",
                    member.candidate.pod
                );
                member.answer(self.refuse(&fresh, fresh.spec.dry_run, reason::CONFLICTS, message));
            }
        }
        (carried, Some(fresh))
    }

    /// The answer to an eviction `zdb` does not record.
    pub(super) fn verdict(&self, zdb: &ZoneDisruptionBudget, outcome: Assessment) -> Verdict {
        match outcome {
            Assessment::Allow(why) => allowed(why),
            Assessment::Refuse { reason, message } => {
                self.refuse(zdb, zdb.spec.dry_run, reason, message)
            }
            Assessment::Record { .. } => allowed(reason::RECORDED),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use std::sync::Mutex;
    use std::sync::atomic::AtomicBool;

    use kube::Client;
    use serde_json::{Value, json};
    use tokio::sync::oneshot;
    use zone_operator::testing::{FakeApi, Method, status_json, store_of, zoned_node};
    use zone_operator::{EventPublisher, NodeZones};
    use zone_topology::IntOrPercent;

    use crate::metrics::ZdbMetrics;
    use crate::scenarios::optimistic_status_writes;
    use crate::webhook::guess::BudgetGuesses;
    use crate::webhook::judge::{MAX_API_REQUESTS, MAX_IN_FLIGHT};
    use crate::webhook::queue::BudgetQueues;
    use crate::webhook::recent::RecentBudgets;
    use zone_views::budget::batch::testing::{budget, healthy};

    const BUDGET: &str = "/apis/zonecontrol.k8s.aws/v1/namespaces/apps/zonedisruptionbudgets/web";
    const BUDGET_STATUS: &str =
        "/apis/zonecontrol.k8s.aws/v1/namespaces/apps/zonedisruptionbudgets/web/status";

    fn judge(client: Client, cached: &ZoneDisruptionBudget) -> Arc<Judge> {
        Arc::new(Judge {
            client: client.clone(),
            zdbs: store_of([cached.clone()]),
            zdbs_synced: Arc::new(AtomicBool::new(true)),
            zones: NodeZones::from_store(
                store_of([zoned_node("node-a", "zone-a")]),
                zone_topology::ZONE_LABEL,
            ),
            field_manager: "zdb-controller".into(),
            deadline: Duration::from_secs(3),
            metrics: ZdbMetrics::register(&prometheus::Registry::new()).unwrap(),
            events: EventPublisher::new(client, "zdb-controller", "test"),
            guesses: BudgetGuesses::default(),
            recent: RecentBudgets::default(),
            denial_ttl: Duration::from_millis(250),
            rollout_users: Vec::new(),
            queues: Arc::new(BudgetQueues::default()),
            in_flight: Arc::new(tokio::sync::Semaphore::new(MAX_IN_FLIGHT)),
            api_requests: Arc::new(tokio::sync::Semaphore::new(MAX_API_REQUESTS)),
        })
    }

    fn key() -> BudgetKey {
        ("apps".to_string(), "web".to_string())
    }

    /// Queues `pods` (pod, zone) as one batch of budget `web`, each having read `read`, due in
    /// `due_in`, then runs the committer until the queue is empty; returns the verdicts in order.
    async fn commit_batch(
        judge: &Arc<Judge>,
        read: &ZoneDisruptionBudget,
        pods: &[(&str, &str)],
        due_in: Duration,
    ) -> Vec<Verdict> {
        let mut answers: Vec<oneshot::Receiver<Verdict>> = Vec::new();
        for (pod, zone) in pods {
            let (member, answer) = Member::new(
                healthy(pod, zone),
                Arc::new(read.clone()),
                Instant::now() + due_in,
            );
            judge
                .queues
                .join(&key(), member, Duration::from_secs(3))
                .unwrap();
            answers.push(answer);
        }
        judge.clone().commit(key()).await;
        let mut verdicts = Vec::new();
        for answer in answers {
            verdicts.push(answer.await.unwrap());
        }
        assert_eq!(judge.queues.depth(&key()), 0);
        verdicts
    }

    fn reasons(verdicts: &[Verdict]) -> Vec<(bool, &'static str)> {
        verdicts.iter().map(|v| (v.allowed, v.reason)).collect()
    }

    /// Four evictions queued together, maxUnavailable 2: one write records the first two of
    /// zone-a; the zone-b one waits for zone-a, the third of zone-a exceeds the budget.
    #[tokio::test]
    async fn one_write_records_a_batch_in_one_zone_within_the_budget() {
        let zdb = budget(IntOrPercent::Int(2), [0; 3], [0; 3]);
        let (fake, client) = FakeApi::new();
        let stored = Arc::new(Mutex::new(serde_json::to_value(&zdb).unwrap()));
        optimistic_status_writes(&fake, BUDGET_STATUS, stored.clone());
        let judge = judge(client, &zdb);
        let verdicts = commit_batch(
            &judge,
            &zdb,
            &[
                ("a0", "zone-a"),
                ("b0", "zone-b"),
                ("a1", "zone-a"),
                ("a2", "zone-a"),
            ],
            Duration::from_secs(3),
        )
        .await;
        assert_eq!(
            reasons(&verdicts),
            [
                (true, reason::RECORDED),
                (false, reason::OTHER_ZONE_DISRUPTED),
                (true, reason::RECORDED),
                (false, reason::ZONE_BUDGET_EXHAUSTED),
            ]
        );
        let puts = fake.requests_to(&Method::PUT, BUDGET_STATUS);
        assert_eq!(puts.len(), 1, "one write for the batch");
        let written = &puts[0].json().unwrap()["status"];
        assert_eq!(written["disruptedPods"].as_object().unwrap().len(), 2);
        assert_eq!(
            written["disruptedPodZones"],
            json!({"a0": "zone-a", "a1": "zone-a"})
        );
        assert_eq!(
            written["currentHealthy"]["zone-a"],
            zone_views::budget::batch::testing::PER_ZONE - 2
        );
        assert!(
            judge.queues.written(&key()).is_none(),
            "the emptied queue is gone"
        );
    }

    /// A write that fails (here a 500) answers every member of its batch 429, none allowed (a
    /// pod named twice in the batch too).
    #[tokio::test]
    async fn a_failed_write_answers_every_member_of_the_batch_429() {
        let zdb = budget(IntOrPercent::Percent(100), [0; 3], [0; 3]);
        let (fake, client) = FakeApi::new();
        fake.on(Method::PUT, BUDGET_STATUS)
            .always(500, status_json(500, "InternalError", "etcd is unhappy"));
        let judge = judge(client, &zdb);
        let pods: Vec<(String, &str)> = (0..6).map(|i| (format!("a{i}"), "zone-a")).collect();
        let mut pods: Vec<(&str, &str)> = pods.iter().map(|(p, z)| (p.as_str(), *z)).collect();
        // A resent eviction of a0 in the same batch is no retry of a stored record.
        pods.push(("a0", "zone-a"));
        let verdicts = commit_batch(&judge, &zdb, &pods, Duration::from_secs(3)).await;
        assert_eq!(verdicts.len(), 7);
        for verdict in &verdicts {
            assert!(!verdict.allowed, "{verdict:?}");
            assert_eq!(verdict.reason, reason::API_ERROR);
            assert!(verdict.message.as_deref().unwrap().contains("retry"));
        }
        assert_eq!(fake.requests_to(&Method::PUT, BUDGET_STATUS).len(), 1);
    }

    /// The API server after another writer stored `winner` (at resourceVersion 8): status
    /// writes over an older version conflict, a read of the budget gets `winner`; and a judge
    /// whose cache still holds `cached`. The stored budget is returned too.
    fn lost_to(
        cached: &ZoneDisruptionBudget,
        mut winner: ZoneDisruptionBudget,
    ) -> (FakeApi, Arc<Judge>, Arc<Mutex<Value>>) {
        winner.metadata.resource_version = Some("8".into());
        let (fake, client) = FakeApi::new();
        let stored = Arc::new(Mutex::new(serde_json::to_value(&winner).unwrap()));
        optimistic_status_writes(&fake, BUDGET_STATUS, stored.clone());
        fake.on(Method::GET, BUDGET)
            .always(200, serde_json::to_value(&winner).unwrap());
        (fake, judge(client, cached), stored)
    }

    /// A write lost to another writer: the budget is read again and the whole batch decided on
    /// the winner's version, which recorded an eviction in zone-b meanwhile: every member of
    /// zone-a is refused, nothing more is written.
    #[tokio::test]
    async fn a_lost_write_decides_the_batch_again_on_the_winner_s_version() {
        let zdb = budget(IntOrPercent::Percent(100), [0; 3], [0; 3]);
        // The watch has not seen the winner's write yet.
        let (fake, judge, _) = lost_to(
            &zdb,
            budget(IntOrPercent::Percent(100), [0, 1, 0], [0, 1, 0]),
        );
        let verdicts = commit_batch(
            &judge,
            &zdb,
            &[("a0", "zone-a"), ("a1", "zone-a"), ("a2", "zone-a")],
            Duration::from_secs(3),
        )
        .await;
        for verdict in &verdicts {
            assert_eq!(
                (verdict.allowed, verdict.reason),
                (false, reason::OTHER_ZONE_DISRUPTED)
            );
        }
        assert_eq!(fake.requests_to(&Method::PUT, BUDGET_STATUS).len(), 1);
        assert_eq!(fake.requests_to(&Method::GET, BUDGET).len(), 1);
    }

    /// The winner recorded one eviction of zone-a under maxUnavailable 2: of the batch decided
    /// again, one more fits and is written over the winner's version.
    #[tokio::test]
    async fn a_batch_decided_again_keeps_to_what_the_winner_left() {
        let zdb = budget(IntOrPercent::Int(2), [0; 3], [0; 3]);
        let (fake, judge, stored) =
            lost_to(&zdb, budget(IntOrPercent::Int(2), [1, 0, 0], [1, 0, 0]));
        let verdicts = commit_batch(
            &judge,
            &zdb,
            &[("a0", "zone-a"), ("a1", "zone-a")],
            Duration::from_secs(3),
        )
        .await;
        assert_eq!(
            reasons(&verdicts),
            [
                (true, reason::RECORDED),
                (false, reason::ZONE_BUDGET_EXHAUSTED)
            ]
        );
        let puts = fake.requests_to(&Method::PUT, BUDGET_STATUS);
        assert_eq!(puts.len(), 2);
        assert_eq!(puts[1].json().unwrap()["metadata"]["resourceVersion"], "8");
        let records = stored.lock().unwrap()["status"]["disruptedPods"].clone();
        assert_eq!(records.as_object().unwrap().len(), 2, "{records}");
    }

    /// A write lost when the members have no time left for another: every member of the batch
    /// is refused with 429, none left waiting.
    #[tokio::test]
    async fn a_lost_write_without_time_left_answers_every_member_429() {
        let zdb = budget(IntOrPercent::Percent(100), [0; 3], [0; 3]);
        let (fake, judge, _) = lost_to(&zdb, zdb.clone());
        let verdicts = commit_batch(
            &judge,
            &zdb,
            &[("a0", "zone-a"), ("a1", "zone-a"), ("a2", "zone-a")],
            Duration::from_millis(1),
        )
        .await;
        for verdict in &verdicts {
            assert_eq!(
                (verdict.allowed, verdict.reason),
                (false, reason::CONFLICTS)
            );
        }
        assert_eq!(fake.requests_to(&Method::PUT, BUDGET_STATUS).len(), 1);
    }
}
