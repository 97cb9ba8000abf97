//! One request's merge on every core. The backends' answers are decoded (gunzipped, parsed) on
//! a pool of [`Cores`] as they arrive, several at once, and folded in endpoint order into one
//! [`Merger`] per partition of the groups, each on a thread of its own: groups merge
//! independently of each other, and every partition sees every answer in the same order, so the
//! result is the one a single merger folding the answers one by one would give.
//!
//! Memory stays bounded: answers wait compressed until a decode is free; a few decoded ones at
//! most wait for their turn to be folded ([`LOOK_AHEAD`], [`FOLD_QUEUE`]), and each is dropped
//! once folded.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Arc;

use futures::{Stream, StreamExt};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use zone_rules::{MergeOptions, Merger, RuleDiscovery, RuleGroup, Source, shared_label};

use crate::backends::endpoints::Endpoint;
use crate::metrics::FederatorMetrics;
use zone_operator::prom_api::ApiError;

use crate::backends::fetch::Fetched;

/// Decoded answers waiting for their turn to be folded, per core: enough to keep every core
/// decoding while a slower answer before them is still being decoded.
const LOOK_AHEAD: usize = 2;

/// Answers queued for each partition's merger.
const FOLD_QUEUE: usize = 2;

/// The CPU work of every request (decoding an answer, writing part of the merged one) runs on
/// the blocking pool, at most one job per core at a time: concurrent requests share the cores
/// instead of each taking all of them.
#[derive(Clone)]
pub struct Cores {
    permits: Arc<Semaphore>,
    count: usize,
}

/// What went wrong on the pool: a job that panicked, or the runtime shutting down.
#[derive(Debug, thiserror::Error)]
#[error("merge failed: {0}")]
pub struct PoolError(String);

impl Cores {
    /// `count` jobs at once (at least one).
    pub fn new(count: usize) -> Self {
        let count = count.max(1);
        Self {
            permits: Arc::new(Semaphore::new(count)),
            count,
        }
    }

    /// As many as the machine (or the container's CPU quota) has.
    pub fn of_machine() -> Self {
        Self::new(std::thread::available_parallelism().map_or(1, usize::from))
    }

    pub fn count(&self) -> usize {
        self.count
    }

    /// `job` on the blocking pool once a core is free.
    pub async fn run<T, F>(&self, job: F) -> Result<T, PoolError>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        let permit: OwnedSemaphorePermit = self
            .permits
            .clone()
            .acquire_owned()
            .await
            .map_err(|e| PoolError(e.to_string()))?;
        tokio::task::spawn_blocking(move || {
            let _permit = permit;
            job()
        })
        .await
        .map_err(|e| PoolError(e.to_string()))
    }
}

/// The merge of every backend that answered, and a warning for each that did not.
#[derive(Debug, Default)]
pub struct Merged {
    /// Sorted by file and name.
    pub groups: Vec<RuleGroup>,
    /// One per backend that failed.
    pub warnings: Vec<String>,
    /// What backends that answered warned of themselves (gRPC backends that federate others),
    /// each prefixed with the backend.
    pub backend_warnings: Vec<String>,
    pub answered: usize,
}

impl Merged {
    /// The warnings an answer carries: the failed backends', then those the backends that
    /// answered gave themselves.
    pub fn all_warnings(&self) -> Vec<String> {
        let mut warnings = self.warnings.clone();
        warnings.extend(self.backend_warnings.iter().cloned());
        warnings
    }
}

/// The partition of a group: by its key, so every backend's copy of it meets in one merger.
fn partition(group: &RuleGroup, partitions: usize) -> usize {
    let mut hasher = DefaultHasher::new();
    (&group.file, &group.name).hash(&mut hasher);
    usize::try_from(hasher.finish() % partitions as u64).unwrap_or(0)
}

/// `data`'s groups by partition, each in the order the backend gave them.
fn split(data: RuleDiscovery, partitions: usize) -> Vec<Vec<RuleGroup>> {
    let mut parts: Vec<Vec<RuleGroup>> = (0..partitions).map(|_| Vec::new()).collect();
    for group in data.groups {
        let index = partition(&group, partitions);
        parts[index].push(group);
    }
    parts
}

/// One backend's answer decoded on a core and split into the partitions' groups.
struct Parts {
    groups: Vec<Vec<RuleGroup>>,
    /// The warnings the backend gave itself.
    warned: Vec<String>,
    /// The shard of a backend that does not name its own: the shard label's value on every
    /// rule, if they all share one.
    shard: Option<String>,
}

/// One backend's answer; or why there is none, and whether anything came.
type Decoded = Result<Parts, (ApiError, bool)>;

async fn decode(
    cores: &Cores,
    fetched: Result<Fetched, ApiError>,
    partitions: usize,
    shard_label: Option<String>,
) -> Result<Decoded, PoolError> {
    let fetched = match fetched {
        Ok(fetched) => fetched,
        Err(why) => return Ok(Err((why, false))),
    };
    let decoded = cores
        .run(move || {
            fetched.decode().map(|(data, warned)| Parts {
                shard: shard_label
                    .and_then(|label| shared_label(&data.groups, &label).map(str::to_owned)),
                groups: split(data, partitions),
                warned,
            })
        })
        .await?;
    Ok(decoded.map_err(|why| (why, true)))
}

/// A merger thread per partition, mostly waiting for answers (the decoding is the work): the
/// queues feeding them, and their results.
type Folds = (
    Vec<tokio::sync::mpsc::Sender<Source>>,
    Vec<tokio::task::JoinHandle<Vec<RuleGroup>>>,
);

fn folds(partitions: usize, options: &MergeOptions) -> Folds {
    (0..partitions)
        .map(|_| {
            let (queue, mut answers) = tokio::sync::mpsc::channel::<Source>(FOLD_QUEUE);
            let options = options.clone();
            let fold = tokio::task::spawn_blocking(move || {
                let mut merger = Merger::new(options);
                while let Some(source) = answers.blocking_recv() {
                    merger.add(source);
                }
                merger.finish()
            });
            (queue, fold)
        })
        .unzip()
}

/// Merges `fetched` (every endpoint's answer, in endpoint order: it decides exact ties).
pub async fn merge(
    fetched: impl Stream<Item = (Endpoint, Result<Fetched, ApiError>)>,
    cores: &Cores,
    options: &MergeOptions,
    metrics: &FederatorMetrics,
) -> Result<Merged, PoolError> {
    let partitions = cores.count();
    let (queues, folds) = folds(partitions, options);
    let mut decoded = std::pin::pin!(
        fetched
            .map(|(endpoint, fetched)| async move {
                // Only a backend that does not name its shard has it read off its rules.
                let label = options
                    .shard_label
                    .clone()
                    .filter(|_| endpoint.shard.is_empty());
                let decoded = decode(cores, fetched, partitions, label).await?;
                Ok::<_, PoolError>((endpoint, decoded))
            })
            .buffered(partitions * LOOK_AHEAD)
    );
    let mut merged = Merged::default();
    while let Some(next) = decoded.next().await {
        let (endpoint, decoded) = next?;
        match decoded {
            Ok(parts) => {
                merged.answered += 1;
                merged.backend_warnings.extend(
                    parts
                        .warned
                        .into_iter()
                        .map(|warning| format!("endpoint {}: {warning}", endpoint.url)),
                );
                let shard = parts.shard.unwrap_or_else(|| endpoint.shard.clone());
                for (queue, groups) in queues.iter().zip(parts.groups) {
                    let source = Source {
                        shard: shard.clone(),
                        name: endpoint.url.clone(),
                        groups,
                    };
                    if queue.send(source).await.is_err() {
                        return Err(PoolError("a merger stopped".to_string()));
                    }
                }
            }
            Err((why, came)) => {
                // What never came was counted by the fetch; what came and could not be read,
                // here.
                if came {
                    metrics.endpoint_error(endpoint.name(), why.kind());
                }
                tracing::warn!(endpoint = %endpoint.url, error = %why, "backend failed");
                merged
                    .warnings
                    .push(format!("endpoint {}: {why}", endpoint.url));
            }
        }
    }
    drop(queues);
    for fold in folds {
        let groups = fold.await.map_err(|e| PoolError(e.to_string()))?;
        merged.groups.extend(groups);
    }
    merged
        .groups
        .sort_by(|a, b| (&a.file, &a.name).cmp(&(&b.file, &b.name)));
    Ok(merged)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::backends::connector::BackendTls;
    use crate::backends::fetch::Fetcher;
    use crate::backends::testing::{
        FakePrometheus, endpoint, json_answer, rules_data, serving_rules,
    };
    use std::time::Duration;
    use zone_operator::prom_api::BodyCaps;
    use zone_rules::{Rule, merge as merge_serially};

    fn metrics() -> FederatorMetrics {
        FederatorMetrics::register(&prometheus::Registry::new()).unwrap()
    }

    /// A fetcher of backends' answers up to these sizes.
    fn fetcher(compressed: u64, uncompressed: u64) -> Fetcher {
        let caps = BodyCaps {
            compressed,
            uncompressed,
        };
        let tls = BackendTls::load(&Default::default()).unwrap();
        Fetcher::new(Duration::from_secs(30), 4, caps, metrics(), &tls)
    }

    fn options() -> MergeOptions {
        MergeOptions {
            replica_labels: vec!["prometheus_replica".into(), "replica".into()],
            shard_label: Some("shard".into()),
        }
    }

    /// Backend `index`'s answer: the recorded groups, copied under many names (so they spread
    /// over every partition), with states, evaluation times and a rule order that differ from
    /// one backend to the next (so the winners of the deduplication, the group metadata and the
    /// merged order depend on which answer is folded first).
    fn answer(index: usize) -> RuleDiscovery {
        let recorded = rules_data();
        let mut groups = Vec::new();
        for copy in 0..30 {
            for group in &recorded.groups {
                let mut group = group.clone();
                group.name = format!("{}-{copy}", group.name);
                group.file = format!("/rules/team-{}.yaml", copy % 3);
                // The same time on every backend of one parity: exact ties for the first
                // backend of them to win.
                group.last_evaluation = format!("2026-01-01T00:00:0{}Z", index % 2).into();
                group.evaluation_time = index as f64;
                if (index + copy).is_multiple_of(3) {
                    group.rules.reverse();
                }
                for rule in &mut group.rules {
                    if let Rule::Alerting(rule) = rule
                        && (index + copy).is_multiple_of(4)
                    {
                        rule.state = "inactive".into();
                        rule.alerts = Some(Vec::new());
                    }
                }
                groups.push(group);
            }
        }
        RuleDiscovery {
            groups,
            group_next_token: String::new(),
        }
    }

    /// The answers of many backends (three shards, several replicas each, gzipped and not),
    /// decoded in parallel and merged in partitions, give exactly what the serial merge gives,
    /// whatever the number of cores.
    #[tokio::test]
    async fn the_parallel_merge_is_the_serial_one() {
        let mut backends = Vec::new();
        let mut sources = Vec::new();
        let mut endpoints = Vec::new();
        for index in 0..9 {
            let body = serde_json::json!({"status": "success", "data": answer(index)});
            let backend =
                FakePrometheus::start(json_answer(body.to_string(), index % 2 == 0)).await;
            let shard = (index % 3).to_string();
            endpoints.push(endpoint(&backend.url, &shard, &index.to_string()));
            sources.push(Source {
                shard,
                name: backend.url.clone(),
                groups: answer(index).groups,
            });
            backends.push(backend);
        }
        let serial = merge_serially(&sources, &options());
        assert_eq!(serial.len(), 30, "groups");
        let fetcher = fetcher(64 << 20, 256 << 20);
        for cores in [1, 2, 3, 8] {
            let cores = Cores::new(cores);
            let fetched = fetcher.rules(endpoints.clone(), "/api/v1/rules");
            let merged = merge(fetched, &cores, &options(), &metrics())
                .await
                .unwrap();
            assert_eq!(merged.answered, 9);
            assert!(merged.warnings.is_empty(), "{:?}", merged.warnings);
            assert!(
                merged.groups == serial,
                "{} cores: the parallel merge differs from the serial one",
                cores.count()
            );
        }
    }

    /// Backends that do not name their shard but carry it on every rule and alert (as Thanos
    /// sidecars do) merge as the same backends named by shard, without the label, do.
    #[tokio::test]
    async fn a_backend_without_a_shard_takes_the_one_its_rules_carry() {
        let mut backends = Vec::new();
        let mut named = Vec::new();
        let mut endpoints = Vec::new();
        for index in 0..6 {
            let shard = (index % 3).to_string();
            let mut carried = answer(index);
            for rule in carried.groups.iter_mut().flat_map(|g| &mut g.rules) {
                rule.labels_mut().insert("shard", &shard);
                if let Rule::Alerting(rule) = rule {
                    for alert in rule.alerts.iter_mut().flatten() {
                        alert.labels.insert("shard", &shard);
                    }
                }
            }
            let body = serde_json::json!({"status": "success", "data": carried});
            let backend = FakePrometheus::start(json_answer(body.to_string(), false)).await;
            endpoints.push(endpoint(&backend.url, "", &index.to_string()));
            named.push(Source {
                shard,
                name: backend.url.clone(),
                groups: answer(index).groups,
            });
            backends.push(backend);
        }
        let fetcher = fetcher(64 << 20, 256 << 20);
        let fetched = fetcher.rules(endpoints, "/api/v1/rules");
        let merged = merge(fetched, &Cores::new(2), &options(), &metrics())
            .await
            .unwrap();
        assert!(merged.warnings.is_empty(), "{:?}", merged.warnings);
        assert!(merged.groups == merge_serially(&named, &options()));
    }

    #[test]
    fn every_copy_of_a_group_goes_to_one_partition() {
        let data = answer(0);
        let count = data.groups.len();
        let parts = split(data, 3);
        assert_eq!(parts.iter().map(Vec::len).sum::<usize>(), count);
        assert!(parts.iter().all(|part| !part.is_empty()), "spread");
        for (index, part) in parts.iter().enumerate() {
            for group in part {
                assert_eq!(partition(group, 3), index);
            }
        }
        let again = split(answer(1), 3);
        for (a, b) in parts.iter().zip(&again) {
            let names = |part: &[RuleGroup]| -> Vec<String> {
                part.iter()
                    .map(|g| format!("{}/{}", g.file, g.name))
                    .collect()
            };
            assert_eq!(names(a), names(b), "the same groups, whatever the backend");
        }
    }

    /// A failed backend is named and skipped in every partition; the others still merge.
    #[tokio::test]
    async fn a_backend_that_fails_is_named_once() {
        let good = serving_rules(true).await;
        let gone = FakePrometheus::gone();
        let fetcher = fetcher(1 << 20, 1 << 20);
        let endpoints = vec![endpoint(&good.url, "0", "a"), endpoint(&gone, "0", "b")];
        let fetched = fetcher.rules(endpoints, "/api/v1/rules");
        let merged = merge(fetched, &Cores::new(2), &options(), &metrics())
            .await
            .unwrap();
        assert_eq!(merged.answered, 1);
        assert_eq!(merged.warnings.len(), 1, "{:?}", merged.warnings);
        assert!(merged.warnings[0].starts_with(&format!("endpoint {gone}: cannot connect")));
        let serial = merge_serially(
            &[Source {
                shard: "0".into(),
                name: good.url.clone(),
                groups: rules_data().groups,
            }],
            &options(),
        );
        assert_eq!(merged.groups, serial);
    }
}
