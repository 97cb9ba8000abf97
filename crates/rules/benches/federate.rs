//! The CPU of one federated `/api/v1/rules` answer at 100 backends, on one thread: the backends'
//! answers read, merged and the merged answer written, as the rules-federator does it (without
//! its network and gzip). The backends are `make perf PERF=federator`'s: 50 shards of two
//! replicas, each answering 200 groups of 10 rules with 8 alert instances (about 1.4 MB of JSON),
//! every shard's alerts labelled with a namespace of their own.
//!
//! Prints the milliseconds of each phase (best of `FEDERATE_ROUNDS`, default 3). The figures
//! are of one core; under `valgrind --tool=callgrind` (with `FEDERATE_ROUNDS=1` and
//! `FEDERATE_SHARDS=5`) the instruction counts of each phase compare two builds exactly.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;
use std::time::{Duration, Instant};

use serde::Deserialize;
use zone_rules::{MergeOptions, Merger, RuleDiscovery, Source, WriteJson};

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// One group as Prometheus 3 answers it: six recording rules and four alerts of two instances.
fn recorded_group(group: usize, shard: usize) -> String {
    let at = |n: usize| format!("2026-11-25T12:00:{:02}.{:09}Z", n % 60, 123_456_789 + n);
    let mut rules = Vec::new();
    for (n, name) in [
        "job:requests:rate5m",
        "job:errors:rate5m",
        "job:latency:p99",
        "instance:cpu:ratio",
        "instance:memory:ratio",
        "cluster:capacity:sum",
    ]
    .iter()
    .enumerate()
    {
        rules.push(format!(
            r#"{{"name":"{name}_{group}","query":"vector({n})","labels":{{}},"health":"ok","evaluationTime":0.000041283,"lastEvaluation":"{}","type":"recording"}}"#,
            at(n)
        ));
    }
    for (n, (name, severity, team)) in [
        ("HighErrorRate", "page", "payments"),
        ("HighLatency", "ticket", "payments"),
        ("DiskFilling", "page", "storage"),
        ("Watchdog", "none", "sre"),
    ]
    .iter()
    .enumerate()
    {
        let annotations = |pod: &str| {
            format!(
                r#"{{"description":"{pod} is outside its objective; see the runbook at https://runbooks.example.com/payments/objectives for the steps and the owners to page","summary":"{name} above the objective"}}"#
            )
        };
        let alerts: Vec<String> = ["a", "b"]
            .iter()
            .map(|pod| {
                format!(
                    r#"{{"labels":{{"alertname":"{name}_{group}","namespace":"tenant-{shard}","pod":"{pod}","severity":"{severity}","team":"{team}"}},"annotations":{},"state":"firing","activeAt":"{}","value":"1e+00"}}"#,
                    annotations(pod),
                    at(n + 7)
                )
            })
            .collect();
        rules.push(format!(
            r#"{{"state":"firing","name":"{name}_{group}","query":"label_replace(vector(1), \"pod\", \"a\", \"\", \"\") or label_replace(vector(2), \"pod\", \"b\", \"\", \"\")","duration":{},"keepFiringFor":0,"labels":{{"severity":"{severity}","team":"{team}"}},"annotations":{},"alerts":[{}],"health":"ok","evaluationTime":0.000183,"lastEvaluation":"{}","type":"alerting"}}"#,
            if n == 1 { 3600 } else { 0 },
            annotations("{{ $labels.pod }}"),
            alerts.join(","),
            at(n + 6)
        ));
    }
    format!(
        r#"{{"name":"group-{group}","file":"/etc/prometheus/rules/team-{}.yaml","rules":[{}],"interval":1,"limit":0,"evaluationTime":0.00121,"lastEvaluation":"{}"}}"#,
        group % 10,
        rules.join(","),
        at(0)
    )
}

fn answer(shard: usize) -> String {
    let groups: Vec<String> = (0..200).map(|g| recorded_group(g, shard)).collect();
    format!(
        r#"{{"status":"success","data":{{"groups":[{}]}}}}"#,
        groups.join(",")
    )
}

#[derive(Deserialize)]
struct Envelope {
    data: RuleDiscovery,
}

fn setting(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let shards = setting("FEDERATE_SHARDS", 50);
    let rounds = setting("FEDERATE_ROUNDS", 3);
    let answers: Vec<String> = (0..shards).map(answer).collect();
    println!(
        "{} backends, {:.2} MB of JSON each",
        shards * 2,
        answers[0].len() as f64 / 1e6
    );
    let options = MergeOptions {
        replica_labels: vec!["prometheus_replica".into(), "replica".into()],
        shard_label: Some("shard".into()),
    };
    let mut best = [Duration::MAX; 3];
    let mut written = 0;
    for _ in 0..rounds {
        let mut took = [Duration::ZERO; 3];
        let mut merger = Merger::new(options.clone());
        for (shard, text) in answers.iter().enumerate() {
            for replica in ["a", "b"] {
                let started = Instant::now();
                let envelope: Envelope = serde_json::from_str(text).unwrap();
                took[0] += started.elapsed();
                let started = Instant::now();
                merger.add(Source {
                    shard: shard.to_string(),
                    name: replica.to_string(),
                    groups: envelope.data.groups,
                });
                took[1] += started.elapsed();
            }
        }
        let started = Instant::now();
        let groups = merger.finish();
        took[1] += started.elapsed();
        let started = Instant::now();
        let mut out = Vec::new();
        for group in &groups {
            group.write_json(&mut out);
        }
        written = black_box(out).len();
        drop(groups);
        took[2] += started.elapsed();
        for (best, took) in best.iter_mut().zip(took) {
            *best = (*best).min(took);
        }
    }
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!(
        "read {:.0} ms, merge {:.0} ms, write {:.0} ms ({:.1} MB): {:.0} ms of one core",
        ms(best[0]),
        ms(best[1]),
        ms(best[2]),
        written as f64 / 1e6,
        ms(best[0] + best[1] + best[2])
    );
}
