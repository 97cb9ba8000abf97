//! Zone failover of the zoneless buckets (Spread): while every shard of a zone is down, the
//! buckets its shards hold among the targets with no usable zone move to the shards of the
//! other zones, and only those buckets move.
//!
//! The down shards' buckets, in bucket order, are dealt to the surviving shards (in index
//! order) in turn, so each survivor takes an even share of them. The assignment is a pure
//! function of the shard count and of which shards are down: every shard computes the same
//! answer on its own, and when the zone returns the buckets go back to where `owners(N)` puts
//! them.
//!
//! A down shard keeps its own buckets: its configuration does not change while it is down, so
//! the moment it is back it scrapes them with the configuration it has, and the survivors drop
//! them once they load theirs. The other way round (the down shard's configuration without
//! them) its targets go unscraped after the return, between the returning Prometheus loading
//! the configuration written while it was down and the one that gives them back.

use std::collections::BTreeSet;

use super::owners::{buckets_of, owners};

/// The zoneless buckets of `shard` out of `shards` when the shards in `down` are out: the
/// others take their buckets, and a down shard keeps its own (for when it is back). With no
/// other shard, nothing moves.
pub fn zoneless_buckets(shards: u32, shard: u32, down: &BTreeSet<u32>) -> Vec<u32> {
    let survivors: Vec<u32> = (0..shards).filter(|s| !down.contains(s)).collect();
    if survivors.is_empty() || down.contains(&shard) {
        return buckets_of(shards, shard);
    }
    let mut moved = 0usize;
    let mut kept = Vec::new();
    for (owner, bucket) in owners(shards).iter().zip(0u32..) {
        let taker = match down.contains(owner) {
            false => *owner,
            true => {
                moved += 1;
                survivors[(moved - 1) % survivors.len()]
            }
        };
        if taker == shard {
            kept.push(bucket);
        }
    }
    kept
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::sharding::owners::BUCKETS;

    /// Bucket → the surviving shard that holds it.
    fn assignment(shards: u32, down: &BTreeSet<u32>) -> BTreeMap<u32, u32> {
        let mut owner_of = BTreeMap::new();
        for shard in (0..shards).filter(|s| !down.contains(s)) {
            for bucket in zoneless_buckets(shards, shard, down) {
                assert_eq!(
                    owner_of.insert(bucket, shard),
                    None,
                    "bucket {bucket} held twice"
                );
            }
        }
        owner_of
    }

    #[test]
    fn every_bucket_has_one_surviving_owner_and_only_the_down_shards_buckets_move() {
        for shards in [2, 3, 6, 7, 10] {
            // Zone-b of three zones: shards 1, 4, 7, ...
            let down: BTreeSet<u32> = (1..shards).step_by(3).collect();
            let owner_of = assignment(shards, &down);
            assert_eq!(owner_of.len(), BUCKETS as usize, "{shards} shards");
            let before = owners(shards);
            for (bucket, owner) in &owner_of {
                assert!(!down.contains(owner), "bucket {bucket} on a down shard");
                let was = before[*bucket as usize];
                assert!(
                    down.contains(&was) || was == *owner,
                    "bucket {bucket} of surviving shard {was} moved to {owner}"
                );
            }
        }
    }

    #[test]
    fn the_survivors_take_even_shares_of_the_down_shards_buckets() {
        let down = BTreeSet::from([1, 4]);
        let survivors = [0, 2, 3, 5];
        let moved: Vec<usize> = survivors
            .iter()
            .map(|s| zoneless_buckets(6, *s, &down).len() - buckets_of(6, *s).len())
            .collect();
        let (least, most) = (moved.iter().min(), moved.iter().max());
        assert!(
            most.zip(least).is_some_and(|(m, l)| m - l <= 1),
            "{moved:?}"
        );
        assert_eq!(
            moved.iter().sum::<usize>(),
            buckets_of(6, 1).len() + buckets_of(6, 4).len()
        );
    }

    #[test]
    fn a_down_shard_keeps_its_own_buckets_for_its_return() {
        let down = BTreeSet::from([1, 4]);
        for shard in [1, 4] {
            assert_eq!(zoneless_buckets(6, shard, &down), buckets_of(6, shard));
        }
    }

    #[test]
    fn with_no_survivor_every_shard_keeps_its_own_buckets() {
        let down = BTreeSet::from([0, 1]);
        assert_eq!(zoneless_buckets(2, 1, &down), buckets_of(2, 1));
    }
}
