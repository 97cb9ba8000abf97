//! The table the suite prints: for each component, when it saw the outage, what it did, when it
//! recovered, the longest gap in what it serves, the samples lost and what it got wrong.

use super::*;

/// One row of the table the suite prints.
pub struct Row {
    pub component: String,
    pub detected: Option<Duration>,
    pub action: String,
    pub recovered: Option<Duration>,
    /// The longest gap in what the component serves or records, in seconds.
    pub gap: Option<f64>,
    /// Samples lost (scrapes missed), where the component scrapes.
    pub lost: Option<usize>,
    pub wrong: usize,
}

pub fn seconds(d: Option<Duration>) -> String {
    d.map_or("-".to_string(), |d| format!("{:.1} s", d.as_secs_f64()))
}

/// The table's rows.
pub fn rows(
    t: &Timeline,
    back: &Back,
    during: &During,
    failover: &ShardsDuring,
    on_dark: usize,
    fired: &alerts::Fired,
) -> [Row; 7] {
    [
        Row {
            component: "nodes (node lifecycle controller)".into(),
            detected: Some(since(t.started, t.dark)),
            action: format!("{DARK}'s nodes NotReady"),
            recovered: Some(since(t.ended, back.nodes)),
            gap: None,
            lost: None,
            wrong: 0,
        },
        Row {
            component: "ZoneDisruptionBudget".into(),
            detected: Some(since(t.started, t.zdb_detected)),
            action: format!("{DARK} disrupted: other zones' evictions refused, {DARK}'s allowed"),
            recovered: Some(since(t.ended, back.zdb_clear)),
            gap: None,
            lost: None,
            wrong: during.wrongly_allowed,
        },
        Row {
            component: "PodDisruptionBudget (same spec)".into(),
            detected: None,
            action: "every healthy pod's eviction refused, not Ready pods' allowed".into(),
            recovered: None,
            gap: None,
            lost: None,
            wrong: during.pdb_differs,
        },
        Row {
            component: "ZoneAwareUpdate".into(),
            detected: Some(since(t.started, t.zau_detected)),
            action: format!(
                "paused (Zone), resumed {}",
                seconds(t.first_after.map(|a| since(t.ended, a)))
            ),
            recovered: Some(since(t.ended, back.resumed)),
            gap: None,
            lost: None,
            wrong: t.removed_during + t.removed_total.saturating_sub(REPLICAS),
        },
        shards_row(t.started, failover, &back.shards, on_dark),
        Row {
            component: "rules-federator".into(),
            detected: Some(failover.federator_warned),
            action: format!(
                "answered with zone-a's and zone-c's shards' rules and the warning {:?}",
                failover.federated.warnings
            ),
            recovered: Some(back.federator),
            gap: None,
            lost: None,
            wrong: 0,
        },
        Row {
            component: "mixin alerts".into(),
            detected: Some(since(t.started, t.alerted)),
            action: format!("fired (alert zone: times): {fired:?}"),
            recovered: Some(since(t.ended, back.alerts_resolved)),
            gap: None,
            lost: None,
            wrong: alerts::false_alerts(fired),
        },
    ]
}

/// The rows of the Querier and of the Rulers' two global rules.
pub fn thanos_rows(
    querier: &thanos::QuerierSeen,
    global: &BTreeMap<&'static str, thanos::RuleSeen>,
) -> Vec<Row> {
    let mut rows = vec![Row {
        component: "Thanos Querier (Service IP)".into(),
        detected: querier.dropped,
        action: format!(
            "answered without shard 1; {} of {} requests failed, longest {:.0} s without an answer",
            querier.failed.len(),
            querier.asked,
            querier.longest_without
        ),
        recovered: querier.back,
        gap: Some(querier.longest_without),
        lost: None,
        wrong: 0,
    }];
    for (strategy, seen) in global {
        rows.push(Row {
            component: format!("Thanos Ruler, global rule ({strategy})"),
            detected: None,
            action: format!(
                "{} samples, longest gap {:.0} s, {} failed evaluations, short of the {} \
                 targets {:?} times after the failover, values {:?}",
                seen.samples,
                seen.longest_gap,
                seen.failures,
                shards::TARGETS,
                seen.short_after_failover(),
                seen.values
            ),
            recovered: None,
            gap: Some(seen.longest_gap),
            lost: Some(seen.missed),
            wrong: 0,
        });
    }
    rows
}

/// The shards' row of the table.
pub fn shards_row(
    started: Timestamp,
    during: &ShardsDuring,
    returned: &shards::Returned,
    moved: usize,
) -> Row {
    Row {
        component: "ShardedPrometheus (zoneless targets)".into(),
        detected: Some(since(started, during.unready_since)),
        action: format!(
            "{moved} of {DARK}'s zoneless targets failed over {} after the outage began, \
             longest gap {:.0} s after; back {} after it, scraped twice {}, {} scrapes missed \
             after it",
            seconds(Some(since(started, during.failed_over))),
            during.gaps.longest,
            seconds(Some(returned.back)),
            seconds(Some(returned.twice)),
            returned.missed,
        ),
        recovered: Some(returned.back),
        gap: Some(during.gaps.longest),
        lost: Some(during.gaps.missed + returned.missed),
        wrong: during.misplaced,
    }
}

/// The table the suite prints.
pub fn print_table(rows: &[Row]) {
    println!(
        "{:<36} {:>10} {:>10} {:>8} {:>6} {:>6}  action",
        "component", "detection", "recovery", "gap", "lost", "wrong"
    );
    for row in rows {
        println!(
            "{:<36} {:>10} {:>10} {:>8} {:>6} {:>6}  {}",
            row.component,
            seconds(row.detected),
            seconds(row.recovered),
            row.gap.map_or("-".to_string(), |gap| format!("{gap:.0} s")),
            row.lost.map_or("-".to_string(), |n| n.to_string()),
            row.wrong,
            row.action
        );
    }
}
