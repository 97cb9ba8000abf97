//! Driving the webhook: one class of requests sent open loop at a fixed rate ([`paced`], the
//! pacing every storm shares), the answers checked and tallied into a [`ClassResult`].

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use e2e::perf::quantile;
use serde_json::Value;

use crate::client::{Pool, admission_review};
use crate::figures::{ServerSide, TICKS_PER_SECOND, Usage, memory, merge, server_side};
use crate::setup::{Objects, Perf, UNSELECTED_SET, ZONES};
use crate::target::Target;

/// The result of one class of requests.
pub struct ClassResult {
    pub name: String,
    /// Requests per second asked for.
    pub rate: u32,
    /// Whether the p99 target applies.
    pub gated: bool,
    /// Client-side latencies of the expected answers, in ms, sorted.
    pub latencies: Vec<f64>,
    pub sent: usize,
    /// Allowed evictions refused with 429 under load: the budget kept changing under concurrent
    /// writes, or no decision came within the webhook's deadline (the reasons are in the
    /// webhook's decision counters).
    pub refused: usize,
    /// Answers other than expected (wrong decision, HTTP or transport error), with one example.
    pub unexpected: usize,
    pub example: Option<String>,
    /// Send time: from the first scheduled send to the last answer.
    pub elapsed: Duration,
    /// Sends that left more than one interval after their scheduled time (the driver fell
    /// behind).
    pub late_sends: usize,
    pub server: Option<ServerSide>,
    pub usage: Usage,
    pub rounds: usize,
}

impl ClassResult {
    pub fn new(name: String, rate: u32, gated: bool) -> ClassResult {
        ClassResult {
            name,
            rate,
            gated,
            latencies: Vec::new(),
            sent: 0,
            refused: 0,
            unexpected: 0,
            example: None,
            elapsed: Duration::ZERO,
            late_sends: 0,
            server: None,
            usage: Usage::default(),
            rounds: 0,
        }
    }

    pub fn percentile(&self, p: f64) -> f64 {
        quantile(&self.latencies, p / 100.0)
    }

    pub fn achieved_rate(&self) -> f64 {
        self.sent as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// Adds one round: its outcomes, duration, the webhook's histogram and CPU use.
    pub fn add(
        &mut self,
        outcomes: Vec<Outcome>,
        elapsed: Duration,
        server: ServerSide,
        usage: Usage,
    ) {
        self.rounds += 1;
        self.elapsed += elapsed;
        self.usage = self.usage.add(usage);
        self.server = Some(match self.server.take() {
            None => server,
            Some(total) => merge(total, server),
        });
        for outcome in outcomes {
            self.sent += 1;
            self.late_sends += usize::from(outcome.late);
            match outcome.verdict {
                Verdict::Expected => self.latencies.push(outcome.latency_ms),
                Verdict::Refused => {
                    self.refused += 1;
                    self.latencies.push(outcome.latency_ms);
                }
                Verdict::Wrong(problem) => {
                    self.unexpected += 1;
                    self.example.get_or_insert(problem);
                }
            }
        }
        self.latencies
            .sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    }

    /// CPU milliseconds per request.
    pub fn cpu_ms_per_request(&self, ticks: f64) -> f64 {
        ticks * 1000.0 / TICKS_PER_SECOND / (self.sent as f64).max(1.0)
    }

    pub fn host_busy_percent(&self) -> f64 {
        100.0 * self.usage.host_busy / self.usage.host_total.max(1.0)
    }
}

/// What the answer to one request should be.
#[derive(Clone, Copy)]
pub enum Expect {
    Allowed,
    Denied429,
    /// Allowed, or refused with 429 under load (counted apart; the decision counters tell
    /// why, and a budget denial there fails the run).
    AllowedOrRefused,
}

pub enum Verdict {
    Expected,
    Refused,
    Wrong(String),
}

pub struct Outcome {
    pub latency_ms: f64,
    pub late: bool,
    pub verdict: Verdict,
}

pub fn check(answer: &Value, uid: &str, expect: Expect) -> Verdict {
    let response = &answer["response"];
    if response["uid"] != uid {
        return Verdict::Wrong(format!("uid {} for {uid}", response["uid"]));
    }
    let allowed = response["allowed"].as_bool();
    let code_429 = response["status"]["code"] == 429;
    match expect {
        Expect::Allowed | Expect::AllowedOrRefused if allowed == Some(true) => Verdict::Expected,
        Expect::Denied429 if allowed == Some(false) && code_429 => Verdict::Expected,
        Expect::AllowedOrRefused if allowed == Some(false) && code_429 => Verdict::Refused,
        _ => Verdict::Wrong(format!("unexpected answer: {response}")),
    }
}

/// Sends up to `count` requests at `rate` per second from `started`, open loop: slot `i` leaves
/// at its scheduled time whether or not earlier ones were answered, with what `pick(i)` names
/// (none: the slot goes unused), sent by the task `send(item, scheduled)`. Returns the tasks'
/// outcomes in send order and the time from `started` to the last answer. Every driver and
/// storm of this measurement paces its requests here.
///
/// The pacing is a thread of its own sleeping to each send time: the runtime's timer has a
/// millisecond tick and would add up to a millisecond of the driver's own to every latency.
pub async fn paced<I, T, F>(
    started: Instant,
    rate: u32,
    count: usize,
    mut pick: impl FnMut(usize) -> Option<I> + Send + 'static,
    send: impl Fn(I, Instant) -> F + Send + 'static,
) -> (Vec<T>, Duration)
where
    F: Future<Output = T> + Send + 'static,
    T: Send + 'static,
{
    let period = Duration::from_secs_f64(1.0 / f64::from(rate));
    let runtime = tokio::runtime::Handle::current();
    let pacer = tokio::task::spawn_blocking(move || {
        let mut tasks = Vec::with_capacity(count);
        for i in 0..count {
            let scheduled = started + period * u32::try_from(i).unwrap_or(u32::MAX);
            if let Some(wait) = scheduled.checked_duration_since(Instant::now()) {
                std::thread::sleep(wait);
            }
            let Some(item) = pick(i) else { continue };
            tasks.push(runtime.spawn(send(item, scheduled)));
        }
        tasks
    });
    let tasks = pacer.await.expect("pacing thread");
    let mut outcomes = Vec::with_capacity(tasks.len());
    for task in tasks {
        outcomes.push(task.await.expect("request task"));
    }
    (outcomes, started.elapsed())
}

/// Sends one request per target at `rate` per second, open loop ([`paced`]).
pub async fn drive(
    pool: &Arc<Pool>,
    namespace: &str,
    targets: &[String],
    rate: u32,
    expect: Expect,
    tag: &str,
) -> (Vec<Outcome>, Duration) {
    let requests: Vec<(String, Vec<u8>)> = targets
        .iter()
        .enumerate()
        .map(|(i, pod)| {
            let uid = format!("00000000-0000-4000-8000-{tag}{i:010}");
            let body = admission_review(&uid, namespace, pod, false);
            (uid, body)
        })
        .collect();
    let count = requests.len();
    let mut requests = requests.into_iter();
    let pool = pool.clone();
    let send = move |(uid, body): (String, Vec<u8>), scheduled: Instant| {
        let pool = pool.clone();
        let period = Duration::from_secs_f64(1.0 / f64::from(rate));
        async move {
            // Late: the driver fell behind by more than one interval (starved of CPU).
            let late = scheduled.elapsed() > period;
            let result = pool.post(body).await;
            let latency_ms = scheduled.elapsed().as_secs_f64() * 1000.0;
            let verdict = match result {
                Ok(answer) => check(&answer, &uid, expect),
                Err(error) => Verdict::Wrong(error),
            };
            Outcome {
                latency_ms,
                late,
                verdict,
            }
        }
    };
    paced(Instant::now(), rate, count, move |_| requests.next(), send).await
}

/// Appends one line per request to `path`: class, scheduled send (ms from the class's start),
/// latency (ms). For looking at when the slow answers came.
pub fn write_samples(path: &std::path::Path, class: &str, rate: u32, outcomes: &[Outcome]) {
    use std::io::Write;
    let period_ms = 1000.0 / f64::from(rate);
    let mut lines = String::new();
    for (i, outcome) in outcomes.iter().enumerate() {
        lines.push_str(&format!(
            "{class}\t{:.1}\t{:.3}\n",
            i as f64 * period_ms,
            outcome.latency_ms
        ));
    }
    let written = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .and_then(|mut file| file.write_all(lines.as_bytes()));
    if let Err(error) = written {
        eprintln!(
            "zdb-perf: cannot write the samples to {}: {error}",
            path.display()
        );
    }
}

/// `count` targets cycling through `pods`.
pub fn cycle(pods: &[String], count: usize) -> Vec<String> {
    pods.iter().cycle().take(count).cloned().collect()
}

impl Target {
    /// One measured run of `targets` at the class's rate, added to `result`.
    pub async fn round(
        &self,
        result: &mut ClassResult,
        namespace: &str,
        targets: &[String],
        expect: Expect,
        tag: &str,
    ) {
        let before = self.scrape().await;
        let usage_before = self.usage();
        let (outcomes, elapsed) =
            drive(&self.pool, namespace, targets, result.rate, expect, tag).await;
        let usage = self.usage().since(usage_before);
        let after = self.scrape().await;
        if let Some(path) = &self.samples {
            write_samples(path, &result.name, result.rate, &outcomes);
        }
        result.add(outcomes, elapsed, server_side(&before, &after), usage);
    }
}

/// The pods each class names.
pub struct Workload {
    /// Denials: every pod of the denying set but the unready one.
    deny_pods: Vec<String>,
    /// Unselected pods in the budgets' namespace.
    free_pods: Vec<String>,
    /// Any pod of a namespace without budgets.
    elsewhere: Vec<String>,
    /// Allowed: one zone per budget (zone-a for s1, zone-b for s2, ...), interleaved across the
    /// budgets as a drain of several nodes would be.
    per_round: Vec<String>,
}

impl Workload {
    pub fn new(objects: &Objects) -> Workload {
        let zones = &objects.zones;
        let deny_pods: Vec<String> = zones[&objects.deny_set]
            .values()
            .flatten()
            .filter(|p| **p != objects.unready)
            .cloned()
            .collect();
        let free_pods: Vec<String> = zones[UNSELECTED_SET].values().flatten().cloned().collect();
        let elsewhere: Vec<String> = (0..100).map(|i| format!("elsewhere-{i}")).collect();
        let lists: Vec<&Vec<String>> = objects
            .allowed_sets
            .iter()
            .enumerate()
            .map(|(i, set)| &zones[set][ZONES[i % ZONES.len()]])
            .collect();
        let longest = lists.iter().map(|l| l.len()).max().unwrap_or(0);
        let mut per_round: Vec<String> = Vec::new();
        for i in 0..longest {
            for list in &lists {
                if let Some(pod) = list.get(i) {
                    per_round.push(pod.clone());
                }
            }
        }
        Workload {
            deny_pods,
            free_pods,
            elsewhere,
            per_round,
        }
    }
}

/// The classes' figures, and the controller's memory (VmRSS, VmHWM in MiB) around them.
pub struct Measured {
    pub results: Vec<ClassResult>,
    pub memory_before: (f64, f64),
    pub memory_after: (f64, f64),
}

impl Perf {
    /// The warm-up, the gated classes and the allowed decisions at a drain-like rate, with the
    /// controller's memory before and after them.
    pub async fn measure(&self, target: &Target, objects: &Objects) -> Measured {
        let workload = Workload::new(objects);
        self.warm_up(target, &workload.free_pods).await;
        let memory_before = memory(target.pid);
        let mut results = self.gated_classes(target, &workload).await;
        if self.settings.allowed_count > 0 {
            let result = self
                .allowed_class(target, &workload.per_round, &objects.allowed_sets)
                .await;
            results.push(result);
        }
        Measured {
            results,
            memory_before,
            memory_after: memory(target.pid),
        }
    }

    /// Warm-up, not measured: the webhook's connections to the API server and the driver's to
    /// the webhook are open in the steady state the targets are about.
    async fn warm_up(&self, target: &Target, free_pods: &[String]) {
        let settings = &self.settings;
        if settings.warmup_seconds == 0 {
            return;
        }
        let warmup = per_second(settings.warmup_seconds, settings.rate);
        eprintln!(
            "zdb-perf: warm-up: {warmup} unselected requests at {}/s",
            settings.rate
        );
        let (outcomes, _) = drive(
            &target.pool,
            &self.ns.name,
            &cycle(free_pods, warmup),
            settings.rate,
            Expect::Allowed,
            "wu",
        )
        .await;
        let failed = outcomes
            .iter()
            .filter(|o| !matches!(o.verdict, Verdict::Expected))
            .count();
        assert_eq!(failed, 0, "warm-up requests failed");
        // A quiet second before the measured classes and the memory reading.
        tokio::time::sleep(Duration::from_secs(1)).await;
    }

    /// The classes with a p99 target: denied, unselected, no-budget-ns.
    async fn gated_classes(&self, target: &Target, workload: &Workload) -> Vec<ClassResult> {
        let settings = &self.settings;
        let count = per_second(settings.seconds, settings.rate);
        let mut results = Vec::new();
        let classes: [(&str, &str, &[String], Expect); 3] = [
            (
                "denied",
                &self.ns.name,
                &workload.deny_pods,
                Expect::Denied429,
            ),
            (
                "unselected",
                &self.ns.name,
                &workload.free_pods,
                Expect::Allowed,
            ),
            (
                "no-budget-ns",
                &self.other_ns.name,
                &workload.elsewhere,
                Expect::Allowed,
            ),
        ];
        for (tag, (name, namespace, targets, expect)) in classes.into_iter().enumerate() {
            eprintln!("zdb-perf: {name}: {count} requests at {}/s", settings.rate);
            let mut result = ClassResult::new(name.to_string(), settings.rate, true);
            target
                .round(
                    &mut result,
                    namespace,
                    &cycle(targets, count),
                    expect,
                    &format!("{tag:02}"),
                )
                .await;
            results.push(result);
            // A quiet gap between classes: each class's CPU and latency figures are its own.
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
        results
    }

    /// `ZDB_PERF_ALLOWED_COUNT` allowed evictions at `ZDB_PERF_ALLOWED_RATE`, in rounds of
    /// distinct pods (`per_round`), the budgets `sets` recreated before each round that follows
    /// another.
    async fn allowed_class(
        &self,
        target: &Target,
        per_round: &[String],
        sets: &[String],
    ) -> ClassResult {
        let (rate, count) = (self.settings.allowed_rate, self.settings.allowed_count);
        let mut result = ClassResult::new(format!("allowed @{rate}/s"), rate, false);
        let mut sent = 0;
        while sent < count {
            if result.rounds > 0 {
                self.reset_budgets(sets).await;
                target.wait_budgets_cached(&self.ns.name, sets).await;
            }
            let take = per_round.len().min(count - sent);
            eprintln!(
                "zdb-perf: {}, round {}: {take} requests at {rate}/s",
                result.name,
                result.rounds + 1
            );
            let round_tag = format!("a{}", result.rounds % 10);
            target
                .round(
                    &mut result,
                    &self.ns.name,
                    &per_round[..take],
                    Expect::AllowedOrRefused,
                    &round_tag,
                )
                .await;
            sent += take;
            // A quiet second between rounds, so one round's tail does not run into the next
            // round's figures.
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        result
    }
}

pub fn per_second(seconds: u64, rate: u32) -> usize {
    usize::try_from(seconds.saturating_mul(u64::from(rate))).unwrap_or(usize::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn paced_sends_what_each_slot_names_in_order() {
        let started = Instant::now();
        let pick = |i: usize| i.is_multiple_of(2).then_some(i);
        let send = |i: usize, scheduled: Instant| async move { (i, scheduled) };
        let (outcomes, elapsed) = paced(started, 1000, 5, pick, send).await;
        let slots: Vec<usize> = outcomes.iter().map(|(i, _)| *i).collect();
        assert_eq!(slots, [0, 2, 4]);
        // Slot i is scheduled i ms after the start, at 1000 per second.
        for (i, scheduled) in outcomes {
            let ms = u32::try_from(i).unwrap();
            assert_eq!(scheduled, started + Duration::from_millis(1) * ms);
        }
        assert!(elapsed >= Duration::from_millis(4));
    }
}
