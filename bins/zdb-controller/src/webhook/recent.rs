//! Budgets as this replica last read them fresh from the API server (or wrote them), kept for a
//! short time so that a burst of evictions a budget refuses costs one read of the pod each, not
//! a read of the pod and one of the budget.
//!
//! Only refusals may be decided from such a copy, and only while it is young (`ttl`) and still
//! the version this replica's watch of the budgets holds: a change to the budget (a record
//! written by another replica, a recovery counted by the status controller, a spec change)
//! reaches the watch within milliseconds and retires the copy. Refusing from a copy a few
//! hundred milliseconds old is refusing what the budget said at the start of the request's
//! network round trip; the client retries. An allowed eviction is never decided from a copy:
//! it is recorded by a PUT carrying the resourceVersion of a fresh read, or, when nothing is
//! recorded, decided from a fresh read.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kube::ResourceExt;
use zone_api::ZoneDisruptionBudget;

/// Past this many budgets the table starts over (a lost copy costs one read).
const CAPACITY: usize = 4096;

/// (namespace, name) → when it was read, and what.
type Copies = HashMap<(String, String), (Instant, Arc<ZoneDisruptionBudget>)>;

#[derive(Debug, Default)]
pub struct RecentBudgets {
    copies: Mutex<Copies>,
}

impl RecentBudgets {
    /// A budget as the API server returned it just now (a read or a write).
    pub fn remember(&self, zdb: &ZoneDisruptionBudget) {
        let Some(namespace) = zdb.namespace() else {
            return;
        };
        let Ok(mut copies) = self.copies.lock() else {
            return;
        };
        if copies.len() >= CAPACITY {
            copies.clear();
        }
        copies.insert(
            (namespace, zdb.name_any()),
            (Instant::now(), Arc::new(zdb.clone())),
        );
    }

    /// The copy of `namespace/name` a refusal may be decided from: read less than `ttl` ago and
    /// of the resourceVersion the watch holds now (`watched`).
    pub fn usable(
        &self,
        namespace: &str,
        name: &str,
        ttl: Duration,
        watched: Option<&str>,
    ) -> Option<Arc<ZoneDisruptionBudget>> {
        self.usable_at(Instant::now(), namespace, name, ttl, watched)
    }

    fn usable_at(
        &self,
        now: Instant,
        namespace: &str,
        name: &str,
        ttl: Duration,
        watched: Option<&str>,
    ) -> Option<Arc<ZoneDisruptionBudget>> {
        let copies = self.copies.lock().ok()?;
        let (read_at, zdb) = copies.get(&(namespace.to_string(), name.to_string()))?;
        let current = watched.is_some() && zdb.resource_version().as_deref() == watched;
        let young = now.saturating_duration_since(*read_at) < ttl;
        (current && young).then(|| zdb.clone())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use kube::api::ObjectMeta;
    use zone_api::ZoneDisruptionBudgetSpec;

    fn budget(name: &str, version: &str) -> ZoneDisruptionBudget {
        ZoneDisruptionBudget {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("apps".into()),
                resource_version: Some(version.into()),
                ..ObjectMeta::default()
            },
            spec: ZoneDisruptionBudgetSpec::default(),
            status: None,
        }
    }

    const TTL: Duration = Duration::from_secs(60);

    #[test]
    fn a_copy_is_used_only_while_the_watch_holds_its_version() {
        let recent = RecentBudgets::default();
        assert!(recent.usable("apps", "web", TTL, Some("7")).is_none());
        recent.remember(&budget("web", "7"));
        assert!(recent.usable("apps", "web", TTL, Some("7")).is_some());
        // The watch has seen a newer version (or an older one not yet caught up, or none).
        assert!(recent.usable("apps", "web", TTL, Some("8")).is_none());
        assert!(recent.usable("apps", "web", TTL, Some("6")).is_none());
        assert!(recent.usable("apps", "web", TTL, None).is_none());
        // Other budgets and namespaces are their own.
        assert!(recent.usable("apps", "db", TTL, Some("7")).is_none());
        assert!(recent.usable("other", "web", TTL, Some("7")).is_none());
        // A newer read replaces the copy.
        recent.remember(&budget("web", "8"));
        assert!(recent.usable("apps", "web", TTL, Some("8")).is_some());
    }

    #[test]
    fn a_copy_expires() {
        let recent = RecentBudgets::default();
        recent.remember(&budget("web", "7"));
        assert!(
            recent
                .usable("apps", "web", Duration::ZERO, Some("7"))
                .is_none()
        );
        std::thread::sleep(Duration::from_millis(5));
        assert!(
            recent
                .usable("apps", "web", Duration::from_millis(1), Some("7"))
                .is_none()
        );
    }

    #[test]
    fn the_table_is_bounded() {
        let recent = RecentBudgets::default();
        for i in 0..CAPACITY + 10 {
            recent.remember(&budget(&format!("b{i}"), "1"));
        }
        assert!(recent.copies.lock().unwrap().len() <= CAPACITY);
    }
}
