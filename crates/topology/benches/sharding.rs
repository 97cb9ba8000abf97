//! Sharding throughput and balance: 1,000,000 synthetic targets over 12 shards in 3 zones, each
//! target run through every shard's generated relabel rules (what each Prometheus shard does).
//!
//! Prints targets/s for the full 1,000,000 and the max/mean load ratio per zone (target ≤ 1.05),
//! the share of buckets and of targets that move at each step 1 → 64 shards next to plain
//! `hashmod(N)` sharding, then lets criterion measure smaller batches for stable figures.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use zone_topology::hashmod::hashmod;
use zone_topology::relabel::{CompiledRules, Labels};
use zone_topology::sharding::{BUCKETS, ShardLayout, TOPOLOGY_SOURCES, ZonelessTargets, owners};

const SHARDS: u32 = 12;
const ZONES: [&str; 3] = ["zone-a", "zone-b", "zone-c"];
const TARGETS: u32 = 1_000_000;

fn layout() -> ShardLayout {
    let zones = ZONES.iter().map(|z| z.to_string()).collect();
    ShardLayout::topology(SHARDS, zones, ZonelessTargets::Spread).unwrap()
}

fn rules(layout: &ShardLayout) -> Vec<CompiledRules> {
    (0..SHARDS)
        .map(|shard| CompiledRules::new(&layout.rules(shard)).unwrap())
        .collect()
}

/// Target `n`: a pod-like address and a zone from the endpointslice, spread evenly over zones.
fn target(n: u32) -> Labels {
    let address = format!(
        "10.{}.{}.{}:{}",
        (n >> 16) & 0xff,
        (n >> 8) & 0xff,
        n & 0xff,
        8080 + n % 7
    );
    Labels::from([
        ("__address__".to_string(), address),
        (
            TOPOLOGY_SOURCES[0].to_string(),
            ZONES[(n % 3) as usize].to_string(),
        ),
    ])
}

fn keeper(rules: &[CompiledRules], labels: &Labels) -> Option<usize> {
    rules.iter().position(|shard| shard.apply(labels).is_some())
}

fn report_full_run() {
    let layout = layout();
    let rules = rules(&layout);
    let mut load = vec![0u64; SHARDS as usize];
    let started = Instant::now();
    for n in 0..TARGETS {
        let shard = keeper(&rules, &target(n)).expect("every target has a shard");
        load[shard] += 1;
    }
    let elapsed = started.elapsed();
    println!(
        "sharding: {TARGETS} targets over {SHARDS} shards / {} zones in {:.2?} = {:.0} targets/s",
        ZONES.len(),
        elapsed,
        f64::from(TARGETS) / elapsed.as_secs_f64()
    );
    for zone in ZONES {
        let loads: Vec<u64> = (0..SHARDS)
            .filter(|s| layout.zone(*s) == Some(zone))
            .map(|s| load[s as usize])
            .collect();
        let max = *loads.iter().max().unwrap() as f64;
        let mean = loads.iter().sum::<u64>() as f64 / loads.len() as f64;
        println!(
            "sharding: {zone} per-shard load {loads:?}, max/mean = {:.4}",
            max / mean
        );
        assert!(
            max / mean <= 1.05,
            "{zone}: max/mean {:.4} exceeds 1.05",
            max / mean
        );
    }
}

/// Movement per step n → n+1 (Classic, 1 → 64 shards): the share of buckets that change owner
/// (exactly 1/(n+1)) and of 100,000 addresses, next to plain `hashmod(N)` (about n/(n+1)).
fn report_movement() {
    let hashes: Vec<u64> = (0..100_000u32)
        .map(|n| hashmod(&target(n)["__address__"], u64::from(BUCKETS)))
        .collect();
    let addresses: Vec<String> = (0..100_000u32)
        .map(|n| target(n)["__address__"].clone())
        .collect();
    println!("movement: step, buckets moved, targets moved, targets moved by hashmod(N)");
    let mut previous = owners(1);
    for n in 1..64u32 {
        let next = owners(n + 1);
        let buckets = previous.iter().zip(&next).filter(|(a, b)| a != b).count();
        let targets = hashes
            .iter()
            .filter(|h| previous[**h as usize] != next[**h as usize])
            .count();
        let modulo = addresses
            .iter()
            .filter(|a| hashmod(a, u64::from(n)) != hashmod(a, u64::from(n + 1)))
            .count();
        println!(
            "movement: {n:>2} -> {:>2}: {:>6.2} % buckets, {:>6.2} % targets, {:>6.2} % with hashmod(N)",
            n + 1,
            100.0 * buckets as f64 / f64::from(BUCKETS),
            100.0 * targets as f64 / hashes.len() as f64,
            100.0 * modulo as f64 / addresses.len() as f64
        );
        previous = next;
    }
}

fn bench(c: &mut Criterion) {
    report_full_run();
    report_movement();
    let layout = layout();
    let rules = rules(&layout);
    let batch: Vec<Labels> = (0..10_000).map(target).collect();
    let mut group = c.benchmark_group("sharding");
    group.throughput(Throughput::Elements(batch.len() as u64));
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(5));
    group.bench_function(
        "assign 10k targets via relabel rules (12 shards / 3 zones)",
        |b| {
            b.iter(|| {
                for labels in &batch {
                    black_box(keeper(&rules, labels));
                }
            })
        },
    );
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
