//! Real evictions (`POST pods/<pod>/eviction`) of the storm's pods, paced as the webhook storm's
//! requests are: the native PodDisruptionBudget storm and the restart storm send them.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{DeleteParams, EvictParams, Preconditions};

use super::End;
use super::ledger::Targets;
use crate::drive::paced;

/// How the evictions are sent.
pub struct Evictions {
    /// The grace period of the pod's deletion (None: the pod's own).
    pub grace_period: Option<u32>,
    /// How long one eviction may take.
    pub timeout: Duration,
    /// Evictions in flight at once, at most (None: unbounded).
    pub in_flight: Option<usize>,
}

/// An eviction's end, as the API server answered it.
pub enum Evicted {
    Judged(End),
    /// The API server could not get an answer from the webhook ("failed calling webhook").
    Unreachable {
        code: u16,
        message: String,
    },
}

impl Evicted {
    /// The end, an unreachable webhook being an error like any other.
    pub fn end(self) -> End {
        match self {
            Evicted::Judged(end) => end,
            Evicted::Unreachable { code, message } => End::Wrong(format!("{code} {message}")),
        }
    }
}

fn classify(result: Result<kube::core::Status, kube::Error>) -> Evicted {
    match result {
        Ok(_) => Evicted::Judged(End::Allowed),
        Err(kube::Error::Api(status)) if status.message.contains("failed calling webhook") => {
            Evicted::Unreachable {
                code: status.code,
                message: status.message,
            }
        }
        Err(kube::Error::Api(status)) if status.code == 429 => Evicted::Judged(End::Refused),
        Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => {
            Evicted::Judged(End::Gone)
        }
        Err(kube::Error::Api(status)) => {
            Evicted::Judged(End::Wrong(format!("{} {}", status.code, status.message)))
        }
        Err(error) => Evicted::Judged(End::Wrong(error.to_string())),
    }
}

impl Evictions {
    /// Evicts `pod` if its uid is still `uid`.
    async fn evict(&self, api: &Api<Pod>, pod: &str, uid: String) -> Evicted {
        let params = EvictParams {
            delete_options: Some(DeleteParams {
                grace_period_seconds: self.grace_period,
                preconditions: Some(Preconditions {
                    uid: Some(uid),
                    resource_version: None,
                }),
                ..DeleteParams::default()
            }),
            ..EvictParams::default()
        };
        match tokio::time::timeout(self.timeout, api.evict(pod, &params)).await {
            Err(_) => Evicted::Judged(End::Wrong(format!("no answer within {:?}", self.timeout))),
            Ok(result) => classify(result),
        }
    }

    /// Sends `count` evictions at `rate` from `started`, open loop ([`paced`]), each of the next
    /// pod of `targets`; an evicted pod is never named again. Returns each eviction's scheduled
    /// send, its latency (ms, from then) and end, and the time from `started` to the last answer.
    pub async fn send(
        self,
        api: &Api<Pod>,
        started: Instant,
        rate: u32,
        count: usize,
        targets: Arc<Mutex<Targets>>,
    ) -> (Vec<(Instant, f64, Evicted)>, Duration) {
        let slots = self
            .in_flight
            .map(|n| Arc::new(tokio::sync::Semaphore::new(n)));
        let (this, api) = (Arc::new(self), api.clone());
        let pick = Targets::picker(targets.clone());
        let send = move |(_, pod, uid): (usize, String, String), scheduled: Instant| {
            let (this, api, targets, slots) =
                (this.clone(), api.clone(), targets.clone(), slots.clone());
            async move {
                // Never closed: the slot is always had.
                let _slot = match slots {
                    Some(slots) => Some(slots.acquire_owned().await),
                    None => None,
                };
                let evicted = this.evict(&api, &pod, uid).await;
                let latency_ms = scheduled.elapsed().as_secs_f64() * 1000.0;
                if matches!(evicted, Evicted::Judged(End::Allowed)) {
                    Targets::evicted(&targets, pod);
                }
                (scheduled, latency_ms, evicted)
            }
        };
        paced(started, rate, count, pick, send).await
    }
}
