//! How the controllers' caches get their initial state.
//!
//! A paginated LIST decodes pages of complete objects (500 pods of a few KiB each) before the
//! caches strip them, and the allocator keeps much of that memory afterwards: with 3,000 pods a
//! controller settles around 60 MiB. A streaming list (`sendInitialEvents` on a watch, the
//! WatchList feature) delivers the same objects one at a time, and the controller stays near
//! 30 MiB. WatchList is on by default in Kubernetes 1.32 and from 1.34 but off in 1.33, and a
//! server without it refuses such a watch, so by default the controller asks the server once at
//! start-up and falls back to paginated lists.

use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{WatchEvent, WatchParams};
use kube::runtime::watcher;
use kube::{Api, Client};

/// `--initial-list`: how the caches load their initial state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum InitialList {
    /// Streaming lists when the API server supports them (asked once at start-up), else
    /// paginated lists.
    Auto,
    /// Streaming lists (`sendInitialEvents`): needs the WatchList feature on the API server.
    Stream,
    /// Paginated LIST, then WATCH: works with every API server.
    Paginated,
}

/// A label no pod carries: the probe asks for an empty set of pods.
const PROBE_SELECTOR: &str = "zonecontrol.k8s.aws/watch-list-probe=none";
const PROBE_TIMEOUT: Duration = Duration::from_secs(10);
/// The annotation of the bookmark that ends a streaming list's initial events.
const INITIAL_EVENTS_END: &str = "k8s.io/initial-events-end";

impl InitialList {
    /// The strategy to use against this server: `Auto` asks it with one streaming watch of pods
    /// (in `namespace`, or all namespaces) selecting none.
    pub async fn resolve(self, client: &Client, namespace: Option<&str>) -> InitialList {
        match self {
            InitialList::Auto => {
                let api: Api<Pod> = crate::scope::namespaced_or_all(client, namespace);
                if supports_streaming_lists(&api).await {
                    tracing::info!("initial lists: streaming (the API server supports WatchList)");
                    InitialList::Stream
                } else {
                    tracing::info!(
                        "initial lists: paginated (the API server refused a streaming list)"
                    );
                    InitialList::Paginated
                }
            }
            other => other,
        }
    }

    /// A watcher configuration with this strategy. `Auto` not yet resolved counts as paginated.
    pub fn config(self) -> watcher::Config {
        match self {
            InitialList::Stream => watcher::Config::default().streaming_lists(),
            InitialList::Auto | InitialList::Paginated => watcher::Config::default(),
        }
    }
}

/// Whether a streaming list of pods is answered with the bookmark that ends the initial events.
async fn supports_streaming_lists(api: &Api<Pod>) -> bool {
    let params = WatchParams::streaming_lists()
        .labels(PROBE_SELECTOR)
        .timeout(5);
    let probe = async {
        let stream = match api.watch(&params, "0").await {
            Ok(stream) => stream,
            Err(error) => {
                tracing::debug!(%error, "streaming list refused");
                return false;
            }
        };
        let mut stream = std::pin::pin!(stream.into_stream());
        while let Some(event) = stream.next().await {
            match event {
                Ok(WatchEvent::Bookmark(bookmark)) => {
                    // Only the end of the initial events proves support: a server that ignores
                    // `sendInitialEvents` may still send an ordinary bookmark.
                    if bookmark
                        .metadata
                        .annotations
                        .get(INITIAL_EVENTS_END)
                        .is_some_and(|v| v == "true")
                    {
                        return true;
                    }
                }
                Ok(WatchEvent::Error(error)) => {
                    tracing::debug!(?error, "streaming list refused");
                    return false;
                }
                Ok(_) => continue,
                Err(error) => {
                    tracing::debug!(%error, "streaming list failed");
                    return false;
                }
            }
        }
        false
    };
    tokio::time::timeout(PROBE_TIMEOUT, probe)
        .await
        .unwrap_or(false)
}
