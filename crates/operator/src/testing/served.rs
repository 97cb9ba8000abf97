//! The metric families a registry serves, read the way Prometheus reads them: over HTTP from the
//! runtime's own server ([`crate::server::BoundServer`]) on a loopback port. A binary's tests
//! compare them with the names its dashboards and alerts use.

use std::collections::BTreeSet;
use std::io;
use std::net::{Ipv4Addr, SocketAddr};

use prometheus::Registry;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::{readiness::Readiness, server::BoundServer, shutdown::Shutdown};

/// The names of the `# TYPE` lines of `/metrics` when `registry` is served. A family without a
/// series is not served: touch one series of each labelled family first.
///
/// Runs on a thread of its own with its own Tokio runtime, so plain and `#[tokio::test]` tests
/// can both call it.
pub fn served_metric_families(registry: &Registry) -> io::Result<BTreeSet<String>> {
    let registry = registry.clone();
    std::thread::spawn(move || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
            .block_on(scrape(registry))
    })
    .join()
    .map_err(|_| io::Error::other("the thread serving /metrics panicked"))?
}

/// Asserts that `served` (see [`served_metric_families`]) holds every name of `expected`, and
/// the process families on Linux (where the runtime exports them).
pub fn assert_serves(served: &BTreeSet<String>, expected: &[&str]) {
    let process = cfg!(target_os = "linux").then_some("process_cpu_seconds_total");
    for family in expected.iter().copied().chain(process) {
        assert!(served.contains(family), "{family} not served: {served:?}");
    }
}

/// A registry with the runtime's common families of a controller named `binary`, as its `main`
/// registers them, the labelled ones with a sample series (a family without a series is not
/// served): add the binary's own metrics, then read [`served_metric_families`].
#[allow(clippy::expect_used)]
pub fn controller_registry(binary: &str) -> Registry {
    use crate::metrics::{Profile, register_common};
    let registry = Registry::new();
    let common = register_common(&registry, binary, Profile::Controllers)
        .expect("the runtime's metrics register");
    common
        .reconcile
        .controller(binary)
        .reconcile_failure("Sample");
    registry
}

/// The families every controller serves besides its own: leadership and reconcile failures.
pub const CONTROLLER_FAMILIES: [&str; 3] = [
    "zone_aware_leader",
    "zone_aware_leader_transitions_total",
    "zone_aware_reconcile_failures_total",
];

/// [`assert_serves`] for a controller: [`CONTROLLER_FAMILIES`] and `own`.
pub fn assert_controller_serves(served: &BTreeSet<String>, own: &[&str]) {
    assert_serves(served, &CONTROLLER_FAMILIES);
    assert_serves(served, own);
}

async fn scrape(registry: Registry) -> io::Result<BTreeSet<String>> {
    let server = BoundServer::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)))
        .await
        .map_err(io::Error::other)?;
    let address = server.local_addr();
    let shutdown = Shutdown::new();
    let serving = tokio::spawn(server.serve(Readiness::new(), registry, shutdown.clone()));
    let answer = get(address, "/metrics").await;
    shutdown.trigger();
    serving
        .await
        .map_err(io::Error::other)?
        .map_err(io::Error::other)?;
    let answer = answer?;
    let Some((head, body)) = answer.split_once("\r\n\r\n") else {
        return Err(io::Error::other(format!("not an HTTP answer: {answer:?}")));
    };
    if !head.starts_with("HTTP/1.1 200 ") {
        return Err(io::Error::other(format!("/metrics answered {head:?}")));
    }
    Ok(body
        .lines()
        .filter_map(|line| line.strip_prefix("# TYPE "))
        .filter_map(|rest| rest.split_whitespace().next())
        .map(str::to_owned)
        .collect())
}

/// One HTTP/1.1 GET, the whole answer (head and body) as text.
async fn get(address: SocketAddr, path: &str) -> io::Result<String> {
    let mut stream = tokio::net::TcpStream::connect(address).await?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await?;
    Ok(answer)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use prometheus::{IntCounterVec, IntGauge, Opts};

    #[test]
    fn families_with_a_series_are_served_and_empty_ones_are_not() {
        let registry = Registry::new();
        let gauge = IntGauge::new("plain_gauge", "A gauge.").unwrap();
        let touched =
            IntCounterVec::new(Opts::new("touched_total", "Touched."), &["kind"]).unwrap();
        let empty =
            IntCounterVec::new(Opts::new("empty_total", "Never touched."), &["kind"]).unwrap();
        registry.register(Box::new(gauge)).unwrap();
        registry.register(Box::new(touched.clone())).unwrap();
        registry.register(Box::new(empty)).unwrap();
        touched.with_label_values(&["a"]).inc();
        let served = served_metric_families(&registry).unwrap();
        assert_eq!(
            served,
            BTreeSet::from(["plain_gauge".to_owned(), "touched_total".to_owned()])
        );
    }

    #[tokio::test]
    async fn it_can_be_called_from_an_async_test() {
        let registry = Registry::new();
        registry
            .register(Box::new(IntGauge::new("up_gauge", "Up.").unwrap()))
            .unwrap();
        assert!(
            served_metric_families(&registry)
                .unwrap()
                .contains("up_gauge")
        );
    }
}
