//! Polling with a timeout: the only way tests wait.

use std::future::Future;
use std::time::{Duration, Instant};

/// How often a condition is re-checked.
pub const POLL_INTERVAL: Duration = Duration::from_millis(200);

/// Polls `check` until it returns `Some`, or panics after `timeout` naming what was awaited and
/// the last state seen (`check` returns `Err(state)` while not done).
pub async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        match check().await {
            Ok(value) => return value,
            Err(state) if Instant::now() >= deadline => {
                panic!("timed out after {timeout:?} waiting for {what}; last state: {state}")
            }
            Err(_) => tokio::time::sleep(POLL_INTERVAL).await,
        }
    }
}

/// Polls `fetch` until it returns no item, or panics after `timeout` naming what was awaited and
/// the items last seen (or the last error).
pub async fn wait_until_empty<T, F, Fut>(what: &str, timeout: Duration, mut fetch: F)
where
    T: std::fmt::Debug,
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Vec<T>, String>>,
{
    wait_for(what, timeout, || {
        let items = fetch();
        async move {
            let items = items.await?;
            if items.is_empty() {
                Ok(())
            } else {
                Err(format!("{items:?}"))
            }
        }
    })
    .await;
}
