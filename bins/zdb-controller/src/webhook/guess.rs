//! Which budget an evicted pod probably belongs to, known before the pod is read, so that the
//! pod and that budget can be read fresh at the same time instead of one after the other.
//!
//! The guess only decides what is fetched early, never the decision: the fresh pod is matched
//! against the budgets as always, and when it is not selected by exactly the guessed budget the
//! early read is dropped and the right budget read. Pods of one workload share a name prefix
//! (`web-3`, `web-5d8f9-x2k4q`) and, nearly always, their budget; a drain evicts many of them.

use std::collections::HashMap;
use std::sync::Mutex;

/// Past this many workloads the table starts over (a bound, not a cache policy: a wrong or
/// missing guess costs one sequential read).
const CAPACITY: usize = 4096;

#[derive(Debug, Default)]
pub struct BudgetGuesses {
    /// (namespace, workload prefix) → the budget that selected its last judged pod, or `None`
    /// when no budget did.
    seen: Mutex<HashMap<(String, String), Option<String>>>,
}

/// `web-3` → `web`, `web-5d8f9-x2k4q` → `web-5d8f9`, `solo` → `solo`.
fn workload_prefix(pod: &str) -> &str {
    pod.rsplit_once('-').map_or(pod, |(prefix, _)| prefix)
}

impl BudgetGuesses {
    /// The budget to read alongside the pod: the one that selected this workload's last judged
    /// pod, or the namespace's only budget when the workload has not been seen. `None`: read
    /// the pod first (the workload was last selected by no budget, or there is nothing to go
    /// on).
    pub fn guess(&self, namespace: &str, pod: &str, candidates: &[String]) -> Option<String> {
        let remembered = self.seen.lock().ok().and_then(|seen| {
            seen.get(&(namespace.to_string(), workload_prefix(pod).to_string()))
                .cloned()
        });
        let guess = match remembered {
            Some(budget) => budget,
            None => match candidates {
                [only] => Some(only.clone()),
                _ => None,
            },
        };
        guess.filter(|name| candidates.contains(name))
    }

    /// What the fresh pod showed: the budget that selects it, or `None` when none does.
    pub fn learn(&self, namespace: &str, pod: &str, budget: Option<&str>) {
        let Ok(mut seen) = self.seen.lock() else {
            return;
        };
        let key = (namespace.to_string(), workload_prefix(pod).to_string());
        if seen.get(&key).map(Option::as_deref) == Some(budget) {
            return;
        }
        if seen.len() >= CAPACITY {
            seen.clear();
        }
        seen.insert(key, budget.map(str::to_string));
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn names(names: &[&str]) -> Vec<String> {
        names.iter().map(|n| n.to_string()).collect()
    }

    #[test]
    fn prefixes_drop_the_last_segment() {
        assert_eq!(workload_prefix("web-3"), "web");
        assert_eq!(workload_prefix("web-5d8f9-x2k4q"), "web-5d8f9");
        assert_eq!(workload_prefix("solo"), "solo");
    }

    #[test]
    fn a_lone_budget_is_guessed_until_the_workload_is_known() {
        let guesses = BudgetGuesses::default();
        assert_eq!(
            guesses.guess("apps", "web-0", &names(&["web"])),
            Some("web".into())
        );
        assert_eq!(guesses.guess("apps", "web-0", &names(&["web", "db"])), None);
        guesses.learn("apps", "batch-0", None);
        assert_eq!(guesses.guess("apps", "batch-7", &names(&["web"])), None);
    }

    #[test]
    fn the_workload_s_last_budget_is_guessed_while_it_exists() {
        let guesses = BudgetGuesses::default();
        guesses.learn("apps", "db-0", Some("db"));
        assert_eq!(
            guesses.guess("apps", "db-4", &names(&["web", "db"])),
            Some("db".into())
        );
        // Other namespaces and workloads are separate.
        assert_eq!(guesses.guess("other", "db-4", &names(&["web", "db"])), None);
        assert_eq!(guesses.guess("apps", "web-4", &names(&["web", "db"])), None);
        // A deleted budget is not guessed.
        assert_eq!(guesses.guess("apps", "db-4", &names(&["web"])), None);
        guesses.learn("apps", "db-4", Some("web"));
        assert_eq!(
            guesses.guess("apps", "db-1", &names(&["web", "db"])),
            Some("web".into())
        );
    }

    #[test]
    fn the_table_is_bounded() {
        let guesses = BudgetGuesses::default();
        for i in 0..CAPACITY + 10 {
            guesses.learn("apps", &format!("w{i}-0"), Some("b"));
        }
        assert!(guesses.seen.lock().unwrap().len() <= CAPACITY);
    }
}
