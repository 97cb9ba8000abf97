//! The shared poller: one cached answer per endpoint (URL + token + TLS), refreshed by one task
//! per endpoint, read by every rollout that points there.
//!
//! - A reconcile *subscribes* by reading ([`GatePolls::answer`]): it says which rollout it is,
//!   its poll interval and timeout. The endpoint's task polls at the smallest interval of its
//!   live subscribers, each request cut at the smallest timeout (the strictest rollout decides;
//!   the others are only asked more often).
//! - The first read of an endpoint waits for its first answer, at most the rollout's timeout
//!   (then it is "no answer", which pauses).
//! - A subscription lapses when its rollout stops reading (rollout complete, ZoneAwareUpdate
//!   deleted, gate removed) for [`lapse`]; the task ends with its last subscription, so an idle
//!   controller polls nothing.
//! - When an answer differs from the previous one (an alert starts or stops matching anything,
//!   the endpoint fails or recovers), every subscriber is sent to the controller's queue at
//!   once: a new alert is acted on within one poll, not at the rollout's next requeue.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::channel::mpsc::UnboundedSender;
use kube::runtime::reflector::ObjectRef;
use prometheus::IntCounterVec;
use tokio::sync::{Notify, watch};
use tokio::time::Instant;
use zone_api::ZoneAwareUpdate;

use super::fetch::{Alert, Endpoint, GateClient, GateError};

/// One answer of an endpoint.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    pub result: Result<Vec<Alert>, GateError>,
    /// When it came.
    pub at: Instant,
}

/// How long a subscription lives without a read: past two intervals (a rollout in progress
/// reads at least once per interval), and at least a minute (a rollout waiting on pods may go
/// 30 s without reading).
fn lapse(interval: Duration, timeout: Duration) -> Duration {
    (interval * 2).max(Duration::from_secs(60)) + timeout
}

/// An answer older than this, for a rollout polling every `interval`, means the poller is stuck
/// (it never should be: each request is cut at its timeout).
fn stale_after(interval: Duration, timeout: Duration) -> Duration {
    interval * 2 + timeout + Duration::from_secs(1)
}

#[derive(Clone, Copy)]
struct Subscriber {
    interval: Duration,
    timeout: Duration,
    seen: Instant,
}

struct Entry {
    answers: watch::Receiver<Option<Arc<Answer>>>,
    subscribers: HashMap<ObjectRef<ZoneAwareUpdate>, Subscriber>,
    /// Wakes the task early: a subscriber asked for a shorter interval.
    wake: Arc<Notify>,
}

struct Inner {
    entries: Mutex<HashMap<Endpoint, Entry>>,
    /// Where changed answers send their subscribers (the controller's reconcile queue).
    triggers: Option<UnboundedSender<ObjectRef<ZoneAwareUpdate>>>,
    /// `zone_aware_zau_alert_gate_polls_total{endpoint, result}`.
    polls: Option<IntCounterVec>,
}

/// The cache of every endpoint's answer, shared by every reconcile.
#[derive(Clone)]
pub struct GatePolls {
    inner: Arc<Inner>,
}

impl GatePolls {
    pub fn new(
        triggers: Option<UnboundedSender<ObjectRef<ZoneAwareUpdate>>>,
        polls: Option<IntCounterVec>,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                entries: Mutex::default(),
                triggers,
                polls,
            }),
        }
    }

    fn entries(&self) -> std::sync::MutexGuard<'_, HashMap<Endpoint, Entry>> {
        self.inner
            .entries
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The latest answer of `endpoint` for rollout `zau` (which polls every `interval`, each
    /// request at most `timeout`): the cached one, or the first one (waited for, at most
    /// `timeout`). Starts polling the endpoint when nobody did.
    pub async fn answer(
        &self,
        endpoint: &Endpoint,
        zau: ObjectRef<ZoneAwareUpdate>,
        interval: Duration,
        timeout: Duration,
    ) -> Arc<Answer> {
        let mut answers = {
            let mut entries = self.entries();
            let entry = match entries.get_mut(endpoint) {
                Some(entry) => entry,
                None => {
                    let (sender, answers) = watch::channel(None);
                    let wake = Arc::new(Notify::new());
                    tokio::spawn(poll(
                        Arc::downgrade(&self.inner),
                        endpoint.clone(),
                        sender,
                        wake.clone(),
                    ));
                    entries.entry(endpoint.clone()).or_insert(Entry {
                        answers,
                        subscribers: HashMap::new(),
                        wake,
                    })
                }
            };
            // The task sleeps for the current smallest interval: a reader asking for less (a
            // new one, or one whose spec changed) wakes it to poll sooner.
            let interval_now = entry.subscribers.values().map(|s| s.interval).min();
            let timeout_now = entry.subscribers.values().map(|s| s.timeout).min();
            entry.subscribers.insert(
                zau,
                Subscriber {
                    interval,
                    timeout,
                    seen: Instant::now(),
                },
            );
            if interval_now.is_none_or(|now| interval < now)
                || timeout_now.is_none_or(|now| timeout < now)
            {
                entry.wake.notify_one();
            }
            entry.answers.clone()
        };
        let first = answers.borrow().clone();
        let answer = match first {
            Some(answer) => answer,
            None => match tokio::time::timeout(timeout, answers.wait_for(Option::is_some)).await {
                Ok(Ok(answer)) => answer.clone().unwrap_or_else(|| no_answer(timeout)),
                _ => no_answer(timeout),
            },
        };
        let age = answer.at.elapsed();
        if age > stale_after(interval, timeout) {
            return Arc::new(Answer {
                result: Err(GateError::Stale(age)),
                at: answer.at,
            });
        }
        answer
    }

    /// Ends `zau`'s subscriptions (its rollout is over, or it has no gate any more); an endpoint
    /// nobody reads stops being polled.
    pub fn forget(&self, zau: &ObjectRef<ZoneAwareUpdate>) {
        for entry in self.entries().values_mut() {
            if entry.subscribers.remove(zau).is_some() {
                entry.wake.notify_one();
            }
        }
    }

    /// The endpoints polled now (for tests and logs).
    #[cfg(test)]
    pub fn polled(&self) -> usize {
        self.entries().len()
    }
}

fn no_answer(timeout: Duration) -> Arc<Answer> {
    Arc::new(Answer {
        result: Err(GateError::timeout(timeout)),
        at: Instant::now(),
    })
}

/// What the task does next, decided under the lock.
enum Next {
    Poll {
        interval: Duration,
        timeout: Duration,
    },
    Stop,
}

impl Inner {
    /// Drops lapsed subscriptions; the entry goes with its last one (under the same lock as
    /// [`GatePolls::answer`], so a new subscriber either finds this task alive or starts another).
    fn next(&self, endpoint: &Endpoint) -> Next {
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(entry) = entries.get_mut(endpoint) else {
            return Next::Stop;
        };
        entry
            .subscribers
            .retain(|_, s| s.seen.elapsed() < lapse(s.interval, s.timeout));
        let interval = entry.subscribers.values().map(|s| s.interval).min();
        let timeout = entry.subscribers.values().map(|s| s.timeout).min();
        match (interval, timeout) {
            (Some(interval), Some(timeout)) => Next::Poll { interval, timeout },
            _ => {
                entries.remove(endpoint);
                Next::Stop
            }
        }
    }

    fn subscribers(&self, endpoint: &Endpoint) -> Vec<ObjectRef<ZoneAwareUpdate>> {
        let entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        entries
            .get(endpoint)
            .map(|entry| entry.subscribers.keys().cloned().collect())
            .unwrap_or_default()
    }
}

/// The task of one endpoint: polls while anyone reads its answers.
async fn poll(
    inner: std::sync::Weak<Inner>,
    endpoint: Endpoint,
    answers: watch::Sender<Option<Arc<Answer>>>,
    wake: Arc<Notify>,
) {
    let mut client: Option<GateClient> = None;
    let mut last: Option<Instant> = None;
    loop {
        let Some(shared) = inner.upgrade() else {
            return;
        };
        let Next::Poll { interval, timeout } = shared.next(&endpoint) else {
            return;
        };
        drop(shared);
        if let Some(last) = last {
            let due = last + interval;
            if Instant::now() < due {
                tokio::select! {
                    () = tokio::time::sleep_until(due) => {}
                    // A subscriber came or went: recompute the interval.
                    () = wake.notified() => continue,
                }
            }
        }
        last = Some(Instant::now());
        let result = request(&mut client, &endpoint, timeout).await;
        let Some(shared) = inner.upgrade() else {
            return;
        };
        if let Some(polls) = &shared.polls {
            let outcome = result.as_ref().err().map_or("ok", GateError::kind);
            polls
                .with_label_values(&[endpoint.url.as_str(), outcome])
                .inc();
        }
        if let Err(error) = &result {
            tracing::debug!(endpoint = %endpoint.url, %error, "alert gate poll failed");
        }
        // The first answer too: a reconcile that gave up waiting for it paused, and this may
        // clear it.
        let changed = answers
            .borrow()
            .as_ref()
            .is_none_or(|previous| previous.result != result);
        answers.send_replace(Some(Arc::new(Answer {
            result,
            at: Instant::now(),
        })));
        if changed && let Some(triggers) = &shared.triggers {
            for zau in shared.subscribers(&endpoint) {
                let _ = triggers.unbounded_send(zau);
            }
        }
    }
}

/// One request, cut at `timeout` (connection, TLS handshake and body included).
async fn request(
    client: &mut Option<GateClient>,
    endpoint: &Endpoint,
    timeout: Duration,
) -> Result<Vec<Alert>, GateError> {
    let client = match client {
        Some(client) => client,
        None => client.insert(GateClient::new(endpoint, timeout)?),
    };
    match tokio::time::timeout(timeout, client.alerts(endpoint)).await {
        Ok(result) => result,
        Err(_) => Err(GateError::timeout(timeout)),
    }
}
