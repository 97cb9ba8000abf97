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
