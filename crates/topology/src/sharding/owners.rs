//! The stable bucket assignment: which of `n` owners holds each of the [`BUCKETS`] hash buckets.
//!
//! Modulo hashing (`hash % n`) remaps `n/(n+1)` of all targets whenever `n` changes: every shard
//! churns its series on every resize. Here the assignment for `n + 1` owners is derived from the
//! one for `n`: each old owner hands its highest-numbered surplus buckets to the new owner `n`
//! until all are balanced. So
//!
//! - **balanced**: the bucket counts of any two owners differ by at most one;
//! - **minimal movement**: `n → n+1` moves only buckets that end on owner `n`, and `n+1 → n`
//!   only the buckets of the removed owner (the same step read backwards);
//! - **deterministic and stateless**: a pure function of `n`, so every shard's configuration is
//!   computed independently and real Prometheus evaluates it with its own `hashmod`.

use std::sync::{Mutex, PoisonError};

/// Virtual buckets a target hashes into (`hashmod(__tmp_hash, BUCKETS)`). Also the largest shard
/// count: with more owners than buckets some owner would hold nothing.
pub const BUCKETS: u32 = 1024;

/// `owners(n)[b]` is the owner (in `0..n`) of bucket `b`. `n == 0` is treated as 1.
pub fn owners(n: u32) -> Vec<u32> {
    let n = n.clamp(1, BUCKETS);
    // Each step needs the previous one, so keep the deepest chain computed so far: reconciling a
    // 100-shard resource asks for owners(34), owners(33) and owners(100) many times over.
    static CHAIN: Mutex<Vec<Vec<u32>>> = Mutex::new(Vec::new());
    let mut chain = CHAIN.lock().unwrap_or_else(PoisonError::into_inner);
    if chain.is_empty() {
        chain.push(vec![0; BUCKETS as usize]);
    }
    while chain.len() < n as usize {
        let next = step(chain.last().map_or(&[][..], Vec::as_slice));
        chain.push(next);
    }
    chain[n as usize - 1].clone()
}

/// The buckets owner `owner` holds among `n` owners, ascending.
pub fn buckets_of(n: u32, owner: u32) -> Vec<u32> {
    owners(n)
        .iter()
        .zip(0..)
        .filter(|(held_by, _)| **held_by == owner)
        .map(|(_, bucket)| bucket)
        .collect()
}

/// From the assignment over `n` owners to the one over `n + 1`.
fn step(previous: &[u32]) -> Vec<u32> {
    let n = previous.iter().max().map_or(1, |max| max + 1);
    let total = previous.len() as u32;
    let mut counts = vec![0u32; n as usize];
    for owner in previous {
        counts[*owner as usize] += 1;
    }
    // Targets over n + 1 owners: `total / (n+1)` each, and one more for `total % (n+1)` of the
    // old owners — those holding the most now (lowest index first), so nobody must give up a
    // bucket it would have to take back. The new owner gets the plain share.
    let share = total / (n + 1);
    let mut extra = total % (n + 1);
    let mut by_count: Vec<u32> = (0..n).collect();
    by_count.sort_by_key(|owner| (std::cmp::Reverse(counts[*owner as usize]), *owner));
    let mut target = vec![share; n as usize];
    for owner in by_count {
        if extra == 0 {
            break;
        }
        target[owner as usize] += 1;
        extra -= 1;
    }
    let mut next = previous.to_vec();
    for bucket in (0..previous.len()).rev() {
        let owner = previous[bucket] as usize;
        if counts[owner] > target[owner] {
            counts[owner] -= 1;
            next[bucket] = n;
        }
    }
    next
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn counts(n: u32) -> Vec<u32> {
        let mut counts = vec![0; n as usize];
        for owner in owners(n) {
            counts[owner as usize] += 1;
        }
        counts
    }

    #[test]
    fn one_owner_holds_everything() {
        assert_eq!(counts(1), vec![BUCKETS]);
        assert_eq!(owners(0), owners(1));
    }

    #[test]
    fn two_owners_split_at_the_top() {
        // Owner 0 hands its highest-numbered half to the new owner 1.
        let owners = owners(2);
        assert!(owners[..512].iter().all(|o| *o == 0));
        assert!(owners[512..].iter().all(|o| *o == 1));
    }

    #[test]
    fn every_count_up_to_the_bucket_count_is_balanced_and_moves_only_to_the_new_owner() {
        let mut previous = owners(1);
        for n in 2..=BUCKETS {
            let current = owners(n);
            let counts = counts(n);
            let (min, max) = (counts.iter().min(), counts.iter().max());
            assert!(
                max.zip(min).is_some_and(|(max, min)| max - min <= 1),
                "n = {n}: counts {min:?}..{max:?}"
            );
            for (bucket, (before, after)) in previous.iter().zip(&current).enumerate() {
                assert!(
                    before == after || *after == n - 1,
                    "n = {n}: bucket {bucket} moved from {before} to {after}"
                );
            }
            previous = current;
        }
    }

    #[test]
    fn moved_share_is_the_minimum() {
        // 4 → 5 owners: exactly the new owner's share moves (204 or 205 of 1024 ≈ 20 %).
        let moved = owners(4)
            .iter()
            .zip(owners(5))
            .filter(|(a, b)| *a != b)
            .count();
        assert_eq!(moved as u32, BUCKETS / 5);
    }

    proptest! {
        #[test]
        fn buckets_of_agrees_with_owners(n in 1u32..=64, owner in 0u32..64) {
            let owners = owners(n);
            let held = buckets_of(n, owner);
            prop_assert!(held.iter().all(|b| owners[*b as usize] == owner));
            let expected = owners.iter().filter(|o| **o == owner).count();
            prop_assert_eq!(held.len(), expected);
        }
    }
}
