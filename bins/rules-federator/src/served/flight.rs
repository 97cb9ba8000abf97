//! Requests that ask the same thing at once share one answer (single flight): a Grafana
//! dashboard opened by several people sends the same few requests together, and each would
//! otherwise fetch, decode and merge every backend's rules again.
//!
//! A request joins the flight of its key while that flight runs; one that arrives after the
//! answer is ready starts a new one, so nobody is served an answer fetched before it asked. The
//! flight is driven by whichever of its requests is polled: when every request has gone (their
//! clients left), it is dropped, cancelled with them.

use std::collections::HashMap;
use std::future::Future;
use std::hash::Hash;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use futures::FutureExt;
use futures::future::{Shared, WeakShared};

type Work<V> = Pin<Box<dyn Future<Output = V> + Send>>;
type Flight<V> = Shared<Work<V>>;
/// Each key's flight under way (told apart from a later one of the same key by its number).
type UnderWay<K, V> = HashMap<K, (u64, WeakShared<Work<V>>)>;

/// The flights under way, by key.
pub struct Flights<K, V: Clone> {
    under_way: Arc<Mutex<UnderWay<K, V>>>,
    next_id: AtomicU64,
}

impl<K, V> Default for Flights<K, V>
where
    V: Clone,
{
    fn default() -> Self {
        Self {
            under_way: Arc::default(),
            next_id: AtomicU64::new(0),
        }
    }
}

/// Whether a request started the flight it waits for or joined one under way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Joined {
    Started,
    Shared,
}

impl<K, V> Flights<K, V>
where
    K: Hash + Eq + Clone + Send + 'static,
    V: Clone + Send + Sync + 'static,
{
    /// The answer of the flight of `key`: the one under way, or a new one running `work`.
    pub fn join<F>(&self, key: K, work: impl FnOnce() -> F) -> (Joined, impl Future<Output = V>)
    where
        F: Future<Output = V> + Send + 'static,
    {
        let mut under_way = self
            .under_way
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(flight) = under_way.get(&key).and_then(|(_, weak)| weak.upgrade()) {
            return (Joined::Shared, flight);
        }
        // Flights whose every request left were dropped unfinished: forget them.
        under_way.retain(|_, (_, weak)| weak.upgrade().is_some());
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let registry = Arc::downgrade(&self.under_way);
        let finished_key = key.clone();
        let work = work();
        let flight: Flight<V> = async move {
            let answer = work.await;
            // Done: a request from now on starts afresh (this answer may already be stale).
            if let Some(registry) = registry.upgrade() {
                let mut under_way = registry.lock().unwrap_or_else(PoisonError::into_inner);
                if under_way
                    .get(&finished_key)
                    .is_some_and(|(of, _)| *of == id)
                {
                    under_way.remove(&finished_key);
                }
            }
            answer
        }
        .boxed()
        .shared();
        if let Some(weak) = flight.downgrade() {
            under_way.insert(key, (id, weak));
        }
        (Joined::Started, flight)
    }

    /// Flights under way (for the tests).
    #[cfg(test)]
    pub fn under_way(&self) -> usize {
        let under_way = self
            .under_way
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        under_way
            .values()
            .filter(|(_, weak)| weak.upgrade().is_some())
            .count()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::sync::atomic::AtomicUsize;

    use tokio::sync::Semaphore;

    use super::*;

    /// A flight that counts its runs and ends when `release` gives a permit.
    fn gated(
        runs: &Arc<AtomicUsize>,
        release: &Arc<Semaphore>,
        answer: u32,
    ) -> impl FnOnce() -> Pin<Box<dyn Future<Output = u32> + Send>> {
        let runs = runs.clone();
        let release = release.clone();
        move || {
            async move {
                runs.fetch_add(1, Ordering::SeqCst);
                release.acquire().await.unwrap().forget();
                answer
            }
            .boxed()
        }
    }

    #[tokio::test]
    async fn requests_for_one_key_under_way_share_one_run() {
        let flights: Flights<&str, u32> = Flights::default();
        let runs = Arc::new(AtomicUsize::new(0));
        let release = Arc::new(Semaphore::new(0));
        let (first, a) = flights.join("rules", gated(&runs, &release, 1));
        let (second, b) = flights.join("rules", gated(&runs, &release, 2));
        let (other, c) = flights.join("alerts", gated(&runs, &release, 3));
        assert_eq!(
            (first, second, other),
            (Joined::Started, Joined::Shared, Joined::Started)
        );
        assert_eq!(flights.under_way(), 2);
        release.add_permits(2);
        assert_eq!(tokio::join!(a, b, c), (1, 1, 3));
        assert_eq!(runs.load(Ordering::SeqCst), 2, "one run per key");
        assert_eq!(flights.under_way(), 0, "finished flights are forgotten");

        // After the answer: a new run, not the old answer.
        release.add_permits(1);
        let (again, d) = flights.join("rules", gated(&runs, &release, 4));
        assert_eq!(again, Joined::Started);
        assert_eq!(d.await, 4);
        assert_eq!(runs.load(Ordering::SeqCst), 3);
    }

    /// The request that started a flight may leave: the others still get the answer. When all
    /// have left, the flight is dropped and the next request starts a new one.
    #[tokio::test]
    async fn a_flight_outlives_its_starter_and_ends_with_its_last_request() {
        let flights: Flights<&str, u32> = Flights::default();
        let runs = Arc::new(AtomicUsize::new(0));
        let release = Arc::new(Semaphore::new(0));
        let (_, starter) = flights.join("rules", gated(&runs, &release, 1));
        let mut starter = Box::pin(starter);
        // Polled once: the run has begun and waits for its release.
        assert!(futures::poll!(&mut starter).is_pending());
        let (_, joined) = flights.join("rules", gated(&runs, &release, 2));
        drop(starter);
        release.add_permits(1);
        assert_eq!(joined.await, 1);
        assert_eq!(runs.load(Ordering::SeqCst), 1);

        let (_, left) = flights.join("rules", gated(&runs, &release, 3));
        let mut left = Box::pin(left);
        assert!(futures::poll!(&mut left).is_pending());
        drop(left);
        assert_eq!(flights.under_way(), 0, "dropped with its last request");
        release.add_permits(1);
        let (again, next) = flights.join("rules", gated(&runs, &release, 4));
        assert_eq!(again, Joined::Started);
        assert_eq!(next.await, 4);
    }
}
