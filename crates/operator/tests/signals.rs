//! SIGTERM triggers the shared shutdown (own test binary: it installs process-wide handlers).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use zone_operator::Shutdown;

#[tokio::test]
async fn sigterm_triggers_shutdown() {
    let shutdown = Shutdown::new();
    let _listener = shutdown.listen_for_signals().unwrap();
    assert!(!shutdown.is_triggered());
    let status = std::process::Command::new("kill")
        .args(["-TERM", &std::process::id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    tokio::time::timeout(Duration::from_secs(10), shutdown.cancelled())
        .await
        .expect("SIGTERM did not trigger the shutdown");
}
