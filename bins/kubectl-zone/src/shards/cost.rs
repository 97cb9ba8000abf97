//! `kubectl zone shards <sprom> --cost`: what the shards' scraping moves between zones, as the
//! shard-controller measures it (`status.traffic`, the last hour projected to a day), priced,
//! and against Classic sharding of the same targets with the shards' pods where they are.

use serde::Serialize;
use zone_api::sprom::{ShardTrafficStatus, TrafficBytes};

use crate::output::columns;

/// What AWS bills for data moved between two zones of a region: $0.01 per GB out of one and
/// $0.01 per GB into the other (roughly $0.0215 per GiB).
pub const DEFAULT_PRICE_PER_GIB: f64 = 0.02;
const GIB: f64 = (1u64 << 30) as f64;

/// The shards' traffic per day, and its price.
#[derive(Debug, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Cost {
    /// The seconds of scraping measured (up to an hour), projected to a day.
    pub measured_seconds: i64,
    pub measured_at: String,
    pub price_per_gib: f64,
    pub shards: Vec<ShardCost>,
    pub total: Day,
    /// Classic sharding's cross-zone bytes per day, and what they would cost.
    pub classic_cross_zone_bytes: i64,
    pub classic_price: f64,
    /// `classic_price - total.price`: what zone-aware sharding saves per day.
    pub saving: f64,
}

#[derive(Debug, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ShardCost {
    pub index: i32,
    #[serde(flatten)]
    pub day: Day,
}

/// One day's bytes and the price of those that cross zones.
#[derive(Debug, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Day {
    pub same_zone_bytes: i64,
    pub cross_zone_bytes: i64,
    pub zoneless_bytes: i64,
    /// Of the cross-zone bytes; zoneless ones are not priced (where they come from is unknown).
    pub price: f64,
}

fn price(bytes: i64, price_per_gib: f64) -> f64 {
    bytes.max(0) as f64 / GIB * price_per_gib
}

fn day(bytes: &TrafficBytes, price_per_gib: f64) -> Day {
    Day {
        same_zone_bytes: bytes.same_zone_bytes_per_day,
        cross_zone_bytes: bytes.cross_zone_bytes_per_day,
        zoneless_bytes: bytes.zoneless_bytes_per_day,
        price: price(bytes.cross_zone_bytes_per_day, price_per_gib),
    }
}

/// The cost of `traffic` at `price_per_gib`.
pub fn cost(traffic: &ShardTrafficStatus, price_per_gib: f64) -> Cost {
    let total = day(&traffic.total, price_per_gib);
    let classic_price = price(traffic.classic_cross_zone_bytes_per_day, price_per_gib);
    Cost {
        measured_seconds: traffic.measured_seconds,
        measured_at: traffic.measured_at.clone(),
        price_per_gib,
        shards: traffic
            .shards
            .iter()
            .map(|shard| ShardCost {
                index: shard.index,
                day: day(&shard.bytes, price_per_gib),
            })
            .collect(),
        saving: classic_price - total.price,
        total,
        classic_cross_zone_bytes: traffic.classic_cross_zone_bytes_per_day,
        classic_price,
    }
}

/// Bytes in the largest unit that keeps them above 1.
fn bytes(value: i64) -> String {
    let value = value.max(0) as f64;
    let units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut scaled = value;
    let mut unit = 0;
    while scaled >= 1024.0 && unit + 1 < units.len() {
        scaled /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{value:.0} B")
    } else {
        format!("{scaled:.1} {}", units[unit])
    }
}

pub fn table(cost: &Cost) -> String {
    let row = |name: String, day: &Day| {
        vec![
            name,
            bytes(day.same_zone_bytes),
            bytes(day.cross_zone_bytes),
            bytes(day.zoneless_bytes),
            format!("{:.4}", day.price),
        ]
    };
    let mut rows: Vec<Vec<String>> = cost
        .shards
        .iter()
        .map(|shard| row(shard.index.to_string(), &shard.day))
        .collect();
    rows.push(row("total".into(), &cost.total));
    let mut out = format!(
        "scrape traffic per day (the last {}s measured, to {}), cross-zone at {} per GiB:\n",
        cost.measured_seconds, cost.measured_at, cost.price_per_gib
    );
    out.push_str(&columns(
        &["SHARD", "SAME-ZONE", "CROSS-ZONE", "ZONELESS", "PRICE"],
        &rows,
    ));
    out.push_str(&format!(
        "Classic sharding of the same targets: {} cross-zone per day, {:.4}; saved: {:.4} per day\n",
        bytes(cost.classic_cross_zone_bytes),
        cost.classic_price,
        cost.saving
    ));
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use zone_api::sprom::ShardTraffic;

    use super::*;

    fn traffic() -> ShardTrafficStatus {
        let gib = 1_i64 << 30;
        let bytes = |same: i64, cross: i64, zoneless: i64| TrafficBytes {
            same_zone_bytes_per_day: same,
            cross_zone_bytes_per_day: cross,
            zoneless_bytes_per_day: zoneless,
        };
        ShardTrafficStatus {
            measured_seconds: 3600,
            measured_at: "2026-12-07T10:00:00Z".into(),
            total: bytes(30 * gib, 2 * gib, 512),
            classic_cross_zone_bytes_per_day: 22 * gib,
            shards: vec![
                ShardTraffic {
                    index: 0,
                    bytes: bytes(30 * gib, 0, 512),
                },
                ShardTraffic {
                    index: 1,
                    bytes: bytes(0, 2 * gib, 0),
                },
            ],
        }
    }

    #[test]
    fn cross_zone_bytes_are_priced_and_compared_with_classic() {
        let cost = cost(&traffic(), 0.02);
        assert!((cost.total.price - 0.04).abs() < 1e-9);
        assert_eq!(cost.shards[0].day.price, 0.0);
        assert!((cost.classic_price - 0.44).abs() < 1e-9);
        assert!((cost.saving - 0.40).abs() < 1e-9);
        let table = table(&cost);
        assert!(table.contains("the last 3600s measured"), "{table}");
        assert!(table.contains("30.0 GiB"), "{table}");
        assert!(table.contains("512 B"), "{table}");
        assert!(
            table.contains("22.0 GiB cross-zone per day, 0.4400; saved: 0.4000"),
            "{table}"
        );
    }

    #[test]
    fn sizes_take_the_largest_unit_above_one() {
        assert_eq!(bytes(0), "0 B");
        assert_eq!(bytes(1023), "1023 B");
        assert_eq!(bytes(1536), "1.5 KiB");
        assert_eq!(bytes(-5), "0 B");
    }
}
