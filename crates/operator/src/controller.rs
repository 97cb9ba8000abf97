//! The tail every controller shares: watch errors logged (the backoff retries), triggers forwarded
//! from cache streams to the Controller, "caches synced → ready", the `Controller` run loop, the
//! failure policy, and one renderer for an error's whole cause chain.

use std::error::Error;
use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::channel::mpsc::UnboundedSender;
use futures::{Stream, StreamExt};
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{Controller, watcher};
use kube::{Resource, ResourceExt};

use crate::metrics::ControllerMetrics;
use crate::readiness::Readiness;
use crate::shutdown::Shutdown;

/// The messages of `error`'s sources, outermost first (`error` itself excluded).
pub fn causes(error: &(dyn Error + 'static)) -> Vec<String> {
    let mut chain = Vec::new();
    let mut source = error.source();
    while let Some(cause) = source {
        chain.push(cause.to_string());
        source = cause.source();
    }
    chain
}

/// Displays an error with its whole cause chain: `outer: inner: root`. For log fields
/// (`error = %ErrorChain(&error)`), where the first `source` alone often hides the reason (an
/// API error's message sits two levels down).
pub struct ErrorChain<'a>(pub &'a (dyn Error + 'static));

impl fmt::Display for ErrorChain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)?;
        for cause in causes(self.0) {
            write!(f, ": {cause}")?;
        }
        Ok(())
    }
}

/// Passes an object through; a watch error is logged and dropped (the watcher's backoff retries,
/// so an error is worth a line, not a crash).
pub fn log_watch_error<K>(cache: &'static str, result: Result<K, watcher::Error>) -> Option<K> {
    match result {
        Ok(object) => Some(object),
        Err(error) => {
            tracing::warn!(cache, error = %ErrorChain(&error), "watch error");
            None
        }
    }
}

/// Sends every object reference the stream yields into `triggers`; ends when the stream does or
/// when the Controller dropped the receiving end.
pub async fn forward_triggers<K>(
    stream: impl Stream<Item = Vec<ObjectRef<K>>>,
    triggers: UnboundedSender<ObjectRef<K>>,
) where
    K: Resource,
{
    let mut stream = std::pin::pin!(stream);
    while let Some(refs) = stream.next().await {
        for object in refs {
            if triggers.unbounded_send(object).is_err() {
                return;
            }
        }
    }
}

/// A cache stopped before its initial list completed (its writer was dropped).
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error("a cache stopped before its initial list completed")]
pub struct CachesStopped;

/// Waits until `synced` resolves, then marks the replica ready: nothing is decided before the
/// caches hold the whole cluster state (an empty node cache would put every pod in the unknown
/// zone). `Ok(false)` when shutdown came first.
pub async fn wait_for_caches<E>(
    synced: impl Future<Output = Result<(), E>>,
    readiness: &Readiness,
    shutdown: &Shutdown,
) -> Result<bool, CachesStopped> {
    tokio::select! {
        synced = synced => match synced {
            Ok(()) => {
                tracing::info!("caches synced");
                readiness.set_ready();
                Ok(true)
            }
            Err(_) => Err(CachesStopped),
        },
        () = shutdown.cancelled() => Ok(false),
    }
}

/// A reconcile's error, counted in the failures metric under [`Failure::kind`].
pub trait Failure: Error + Send + Sync + 'static {
    /// A bounded label: the error's variant, never an object's name.
    fn kind(&self) -> &'static str;
}

/// What the failure policy needs of a reconcile's context.
pub trait ReconcileContext: Send + Sync + 'static {
    /// Where failures are counted, and how long after one the reconcile is tried again.
    fn failure_policy(&self) -> (&ControllerMetrics, Duration);
}

/// Runs `controller` until shutdown. A failed reconcile is counted, logged with its whole cause
/// chain and retried after the delay of [`ReconcileContext::failure_policy`] ([`requeue_failed`]); each result
/// is logged at debug level.
pub async fn run<K, Ctx, ReconcileFut, E>(
    controller: Controller<K>,
    shutdown: &Shutdown,
    reconcile: impl FnMut(Arc<K>, Arc<Ctx>) -> ReconcileFut,
    context: Arc<Ctx>,
) where
    K: Resource + Clone + fmt::Debug + serde::de::DeserializeOwned + Send + Sync + 'static,
    K::DynamicType: fmt::Debug + Unpin + Eq + std::hash::Hash + Clone + Default,
    Ctx: ReconcileContext,
    ReconcileFut: Future<Output = Result<Action, E>> + Send + 'static,
    E: Failure,
{
    let error_policy = |object: Arc<K>, error: &E, context: Arc<Ctx>| {
        let (metrics, retry) = context.failure_policy();
        requeue_failed(object.as_ref(), error, error.kind(), metrics, retry)
    };
    controller
        .graceful_shutdown_on(shutdown.cancelled())
        .run(reconcile, error_policy, context)
        .for_each(|result| async move {
            if let Err(error) = result {
                tracing::debug!(error = %ErrorChain(&error), "controller event");
            }
        })
        .await;
}

/// The failure policy of a reconcile: count it under `kind` (a bounded label), log the whole
/// cause chain, and retry after `retry`.
fn requeue_failed<K>(
    object: &K,
    error: &(dyn Error + 'static),
    kind: &'static str,
    metrics: &ControllerMetrics,
    retry: Duration,
) -> Action
where
    K: Resource,
    K::DynamicType: Default,
{
    metrics.reconcile_failure(kind);
    tracing::warn!(
        kind = %K::kind(&Default::default()),
        namespace = %object.namespace().unwrap_or_default(),
        name = %object.name_any(),
        error = %ErrorChain(error),
        "reconcile failed"
    );
    Action::requeue(retry)
}

#[cfg(test)]
mod tests {
    #[derive(Debug, thiserror::Error)]
    #[error("outer")]
    struct Outer(#[source] Middle);

    #[derive(Debug, thiserror::Error)]
    #[error("middle")]
    struct Middle(#[source] std::io::Error);

    #[test]
    fn the_whole_chain_is_rendered() {
        let error = Outer(Middle(std::io::Error::other("root cause")));
        assert_eq!(super::causes(&error), ["middle", "root cause"]);
        assert_eq!(
            super::ErrorChain(&error).to_string(),
            "outer: middle: root cause"
        );
    }
}
