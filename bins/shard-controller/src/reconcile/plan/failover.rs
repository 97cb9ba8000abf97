//! Zone failover (pure): the zones whose shards are all unready, since when, and those that
//! have been so for `zoneFailoverAfter`, whose zoneless buckets the other zones' shards take
//! (see `ShardLayout::failed_over`) unless `zoneFailover` is Disabled. "Since" lives in the
//! status, so a restarted controller (or a new leader) keeps counting from the first time a
//! zone was seen down.

use std::borrow::Cow;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use zone_api::ValidSprom;
use zone_api::sprom::{UnreadyZone, reason};
use zone_operator::PendingEvents;
use zone_topology::sharding::ShardLayout;

use crate::reconcile::observe::Observed;

/// What the failover step decided.
#[derive(Debug, Clone, PartialEq)]
pub struct Failover {
    /// The layout the shards are built with: the valid one, with the failed-over zones.
    pub layout: ShardLayout,
    /// For the status: every zone with all its shards unready.
    pub unready: Vec<UnreadyZone>,
    /// When the next unready zone's grace ends.
    pub next_look: Option<Duration>,
}

impl Failover {
    /// `valid` with the failed-over layout (borrowed when no zone failed over).
    pub fn valid<'a>(&self, valid: &'a ValidSprom) -> Cow<'a, ValidSprom> {
        match self.layout == valid.layout {
            true => Cow::Borrowed(valid),
            false => Cow::Owned(ValidSprom {
                layout: self.layout.clone(),
                ..valid.clone()
            }),
        }
    }
}

/// Decides the failover of `valid`'s zones from the shards' readiness `observed`, the zones
/// `previous`ly seen unready, and `now`.
pub fn decide(
    valid: &ValidSprom,
    observed: &Observed,
    previous: &[UnreadyZone],
    now: Timestamp,
) -> Failover {
    let layout = &valid.layout;
    let served = layout.zones_with_shard();
    let mut unready: Vec<UnreadyZone> = served
        .iter()
        .filter(|zone| all_unready(layout, observed, zone))
        .map(|zone| {
            let since = previous
                .iter()
                .find(|seen| seen.zone == **zone)
                .and_then(|seen| seen.since.parse::<Timestamp>().ok())
                .unwrap_or(now);
            UnreadyZone {
                since: since.to_string(),
                zone: zone.clone(),
                failed_over: false,
            }
        })
        .collect();
    // Only onto a zone with a ready shard: with every zone down, nothing moves (nor is there a
    // grace to wake up for: a shard turning ready is watched).
    let some_ready = unready.len() < served.len();
    let after = valid.zone_failover_after;
    let due: Vec<&str> = unready
        .iter()
        .filter(|zone| some_ready && after.is_some_and(|after| elapsed(&zone.since, now) >= after))
        .map(|zone| zone.zone.as_str())
        .collect();
    let failed = layout.clone().failed_over(due);
    let mut next_look = None;
    for zone in &mut unready {
        zone.failed_over = failed.failed_over_zones().contains(&zone.zone);
        // Disabled: nothing to wake up for.
        let Some(after) = after else {
            continue;
        };
        let left = after.saturating_sub(elapsed(&zone.since, now));
        if some_ready && !zone.failed_over && !left.is_zero() {
            next_look = Some(next_look.map_or(left, |next: Duration| next.min(left)));
        }
    }
    Failover {
        layout: failed,
        unready,
        next_look,
    }
}

/// Whether every active shard of `zone` is without a ready pod (a shard whose StatefulSet is
/// not there yet counts as unready).
fn all_unready(layout: &ShardLayout, observed: &Observed, zone: &str) -> bool {
    (0..layout.shards())
        .filter(|shard| layout.zone(*shard) == Some(zone))
        .all(|shard| {
            observed
                .stateful_sets
                .get(&shard)
                .is_none_or(|sts| sts.ready_replicas == 0)
        })
}

fn elapsed(since: &str, now: Timestamp) -> Duration {
    since
        .parse::<Timestamp>()
        .ok()
        .and_then(|since| Duration::try_from(now.duration_since(since)).ok())
        .unwrap_or_default()
}

/// The Normal event of each zone failed over before and not any more (the Warning of a new
/// failover is Degraded's, reason ZoneFailedOver).
pub fn events(previous: &[UnreadyZone], now: &[UnreadyZone], events: &mut PendingEvents) {
    for zone in previous.iter().filter(|zone| zone.failed_over) {
        let still = now
            .iter()
            .any(|current| current.zone == zone.zone && current.failed_over);
        if !still {
            events.normal(
                reason::ZONE_RETURNED,
                "Failover",
                format!(
                    "zone {} has a ready shard again: its zoneless targets are scraped by its \
                     own shards again",
                    zone.zone
                ),
            );
        }
    }
}

/// The Degraded reason of the failed-over zones: which, since when, and who scrapes their
/// zoneless targets.
pub fn degraded(layout: &ShardLayout, unready: &[UnreadyZone]) -> Option<(&'static str, String)> {
    let failed: Vec<String> = unready
        .iter()
        .filter(|zone| zone.failed_over)
        .map(|zone| format!("{} since {}", zone.zone, zone.since))
        .collect();
    if failed.is_empty() {
        return None;
    }
    let down = layout.failed_over_zones();
    let others: Vec<String> = layout
        .zones_with_shard()
        .into_iter()
        .filter(|zone| !down.contains(zone))
        .collect();
    Some((
        reason::ZONE_FAILED_OVER,
        format!(
            "every shard of zone {} is unready: their zoneless targets are scraped by the \
             shards of zone {} until a shard of theirs is ready again",
            failed.join(", zone "),
            others.join(", ")
        ),
    ))
}

#[cfg(test)]
mod tests;
