//! Figures read around the load: the webhook's `/metrics` (histogram and decision counters),
//! CPU time from `/proc`, and memory.

use std::collections::BTreeMap;

use e2e::perf::{memory_kib, mib};

/// The webhook's histogram and decision counters at one moment.
#[derive(Debug, Default, Clone)]
pub struct Scrape {
    /// (upper bound in seconds, cumulative count), ascending, `+Inf` last.
    pub buckets: Vec<(f64, f64)>,
    pub count: f64,
    pub sum: f64,
    /// `result/reason` -> count.
    pub decisions: BTreeMap<String, f64>,
    /// Reconciliations of the status controller, and the time they took.
    pub reconciles: f64,
    pub reconcile_seconds: f64,
}

pub fn label<'a>(labels: &'a str, name: &str) -> Option<&'a str> {
    labels
        .split(',')
        .filter_map(|pair| pair.split_once('='))
        .find(|(key, _)| key.trim() == name)
        .map(|(_, value)| value.trim().trim_matches('"'))
}

pub fn parse_metrics(text: &str) -> Scrape {
    let mut scrape = Scrape::default();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let Ok(value) = value.parse::<f64>() else {
            continue;
        };
        let (name, labels) = match series.split_once('{') {
            Some((name, rest)) => (name, rest.trim_end_matches('}')),
            None => (series, ""),
        };
        match name {
            "zone_aware_zdb_webhook_duration_seconds_bucket" => {
                let le = label(labels, "le").unwrap_or("+Inf");
                let bound = if le == "+Inf" {
                    f64::INFINITY
                } else {
                    le.parse().unwrap_or(f64::INFINITY)
                };
                scrape.buckets.push((bound, value));
            }
            "zone_aware_zdb_webhook_duration_seconds_count" => scrape.count = value,
            "zone_aware_zdb_webhook_duration_seconds_sum" => scrape.sum = value,
            "zone_aware_reconciliations_total" => scrape.reconciles += value,
            "zone_aware_reconcile_duration_seconds_sum" => scrape.reconcile_seconds += value,
            // Overload counters, next to the decisions: `shed/<why>`, `conflict-retries`.
            "zone_aware_zdb_webhook_shed_total" => {
                let key = format!("shed/{}", label(labels, "why").unwrap_or("?"));
                scrape.decisions.insert(key, value);
            }
            // Group commit: evictions recorded, and the status writes that recorded them.
            "zone_aware_zdb_webhook_batch_size_sum" => {
                scrape.decisions.insert("batch-records".to_string(), value);
            }
            "zone_aware_zdb_webhook_batch_size_count" => {
                scrape.decisions.insert("batch-writes".to_string(), value);
            }
            "zone_aware_zdb_webhook_conflict_retries_total" => {
                scrape
                    .decisions
                    .insert("conflict-retries".to_string(), value);
            }
            "zone_aware_zdb_webhook_decisions_total" => {
                let key = format!(
                    "{}/{}",
                    label(labels, "result").unwrap_or("?"),
                    label(labels, "reason").unwrap_or("?")
                );
                scrape.decisions.insert(key, value);
            }
            _ => {}
        }
    }
    scrape
        .buckets
        .sort_by(|a, b| a.0.partial_cmp(&b.0).unwrap_or(std::cmp::Ordering::Equal));
    scrape
}

/// What the webhook's histogram says about the requests between two scrapes.
pub struct ServerSide {
    pub count: f64,
    pub mean_ms: f64,
    /// Share of requests answered within 5 ms and 10 ms.
    pub within_5ms: f64,
    pub within_10ms: f64,
    /// The upper bound of the bucket holding the 99th percentile.
    pub p99_bound_ms: f64,
    pub decisions: BTreeMap<String, f64>,
    /// Reconciliations of the status controller meanwhile, and their total time in ms.
    pub reconciles: f64,
    pub reconcile_ms: f64,
}

pub fn server_side(before: &Scrape, after: &Scrape) -> ServerSide {
    let count = after.count - before.count;
    let at = |scrape: &Scrape, bound: f64| {
        scrape
            .buckets
            .iter()
            .find(|(le, _)| (*le - bound).abs() < 1e-9)
            .map_or(0.0, |(_, n)| *n)
    };
    let within = |bound: f64| {
        if count > 0.0 {
            (at(after, bound) - at(before, bound)) / count
        } else {
            0.0
        }
    };
    let p99_bound_ms = after
        .buckets
        .iter()
        .find(|(le, n)| *n - at(before, *le) >= 0.99 * count)
        .map_or(f64::NAN, |(le, _)| le * 1000.0);
    let decisions = after
        .decisions
        .iter()
        .map(|(key, n)| (key.clone(), n - before.decisions.get(key).unwrap_or(&0.0)))
        .filter(|(_, n)| *n > 0.0)
        .collect();
    ServerSide {
        count,
        mean_ms: if count > 0.0 {
            (after.sum - before.sum) * 1000.0 / count
        } else {
            f64::NAN
        },
        within_5ms: within(0.005),
        within_10ms: within(0.01),
        p99_bound_ms,
        decisions,
        reconciles: after.reconciles - before.reconciles,
        reconcile_ms: (after.reconcile_seconds - before.reconcile_seconds) * 1000.0,
    }
}

/// CPU time and host load, to tell a slow webhook from a saturated machine.
#[derive(Debug, Default, Clone, Copy)]
pub struct Usage {
    /// Clock ticks (user + system) of the controller, the API server and this driver.
    pub controller_ticks: f64,
    pub apiserver_ticks: f64,
    pub driver_ticks: f64,
    /// Busy and total ticks of the whole machine (`/proc/stat`).
    pub host_busy: f64,
    pub host_total: f64,
}

/// Linux reports process CPU times in clock ticks of 1/100 s (USER_HZ on x86_64 and arm64).
pub const TICKS_PER_SECOND: f64 = 100.0;

pub fn process_ticks(pid: Option<u32>) -> f64 {
    let Some(pid) = pid else {
        return f64::NAN;
    };
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return f64::NAN;
    };
    // The command may contain spaces: the fields after it start past the last ')'.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map_or("", |(_, rest)| rest)
        .split_whitespace()
        .collect();
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the command.
    let field = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(f64::NAN)
    };
    field(11) + field(12)
}

pub fn host_ticks() -> (f64, f64) {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let Some(cpu) = stat.lines().find(|l| l.starts_with("cpu ")) else {
        return (f64::NAN, f64::NAN);
    };
    let values: Vec<f64> = cpu
        .split_whitespace()
        .skip(1)
        .filter_map(|v| v.parse().ok())
        .collect();
    let total: f64 = values.iter().sum();
    // idle and iowait
    let idle = values.get(3).unwrap_or(&0.0) + values.get(4).unwrap_or(&0.0);
    (total - idle, total)
}

impl Usage {
    pub fn now(controller: u32, apiserver: Option<u32>) -> Usage {
        let (host_busy, host_total) = host_ticks();
        Usage {
            controller_ticks: process_ticks(Some(controller)),
            apiserver_ticks: process_ticks(apiserver),
            driver_ticks: process_ticks(Some(std::process::id())),
            host_busy,
            host_total,
        }
    }

    pub fn since(self, before: Usage) -> Usage {
        Usage {
            controller_ticks: self.controller_ticks - before.controller_ticks,
            apiserver_ticks: self.apiserver_ticks - before.apiserver_ticks,
            driver_ticks: self.driver_ticks - before.driver_ticks,
            host_busy: self.host_busy - before.host_busy,
            host_total: self.host_total - before.host_total,
        }
    }

    pub fn add(self, other: Usage) -> Usage {
        Usage {
            controller_ticks: self.controller_ticks + other.controller_ticks,
            apiserver_ticks: self.apiserver_ticks + other.apiserver_ticks,
            driver_ticks: self.driver_ticks + other.driver_ticks,
            host_busy: self.host_busy + other.host_busy,
            host_total: self.host_total + other.host_total,
        }
    }
}

/// VmRSS and VmHWM of a process, in MiB (NaN once it is gone).
pub fn memory(pid: u32) -> (f64, f64) {
    memory_kib(pid).map_or((f64::NAN, f64::NAN), |(rss, hwm)| (mib(rss), mib(hwm)))
}

pub fn merge(a: ServerSide, b: ServerSide) -> ServerSide {
    let count = a.count + b.count;
    let weighted = |x: f64, y: f64| {
        if count > 0.0 {
            (x * a.count + y * b.count) / count
        } else {
            f64::NAN
        }
    };
    let mut decisions = a.decisions;
    for (key, n) in b.decisions {
        *decisions.entry(key).or_default() += n;
    }
    ServerSide {
        count,
        mean_ms: weighted(a.mean_ms, b.mean_ms),
        within_5ms: weighted(a.within_5ms, b.within_5ms),
        within_10ms: weighted(a.within_10ms, b.within_10ms),
        // A bound over all rounds: the larger of the rounds' bounds.
        p99_bound_ms: a.p99_bound_ms.max(b.p99_bound_ms),
        decisions,
        reconciles: a.reconciles + b.reconciles,
        reconcile_ms: a.reconcile_ms + b.reconcile_ms,
    }
}

/// Milliseconds with two decimals, or "-" for none (NaN).
pub fn fmt_ms(value: f64) -> String {
    if value.is_nan() {
        "-".to_string()
    } else {
        format!("{value:.2}")
    }
}
