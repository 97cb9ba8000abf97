//! The caches a controller reads, and the reconciles their changes trigger.
//!
//! Each cache is a reflector whose store is updated *before* the change's trigger is sent, so a
//! reconcile never runs on a cache older than the event that caused it (the Controller's own
//! `watches` would race a separate store). Objects are stripped before they are stored (a pod's
//! managed fields and most of its spec are never read, and 3,000 pods would keep them all), a
//! watch error is logged and retried with [`crate::backoff::WatchBackoff`].
//!
//! ```no_run
//! # use k8s_openapi::api::core::v1::{ConfigMap, Pod};
//! # use kube::runtime::{Controller, watcher, reflector::ObjectRef};
//! # async fn example(client: kube::Client, configs: kube::runtime::reflector::Store<ConfigMap>) {
//! use zone_operator::watch_set::WatchSet;
//!
//! // Reconcile the ConfigMap named by a pod's `config` label when the pod changes.
//! let mut set = WatchSet::<ConfigMap>::new();
//! let pods = set.watch(
//!     "pods",
//!     kube::Api::<Pod>::all(client),
//!     watcher::Config::default(),
//!     |pod: &mut Pod| pod.metadata.managed_fields = None,
//!     |pod: &Pod| {
//!         let namespace = pod.metadata.namespace.clone().unwrap_or_default();
//!         pod.metadata.labels.iter().flatten()
//!             .filter(|(key, _)| key.as_str() == "config")
//!             .map(|(_, name)| ObjectRef::new(name).within(&namespace))
//!             .collect()
//!     },
//! );
//! let (drive, triggers) = set.start();
//! let drive = tokio::spawn(drive);
//! pods.wait_until_ready().await.ok();
//! // Controller::for_stream(configs_stream, configs).reconcile_on(triggers) ...
//! # drop((drive, triggers, configs));
//! # }
//! ```

use std::fmt::Debug;
use std::future::{Future, ready};
use std::hash::Hash;

use futures::channel::mpsc::{self, UnboundedReceiver};
use futures::future::BoxFuture;
use futures::stream::BoxStream;
use futures::{FutureExt, Stream, StreamExt};
use kube::runtime::reflector::store::WriterDropped;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;
use tokio::task::JoinHandle;

use crate::controller::{forward_triggers, log_watch_error};
use crate::watch::InitialList;
use crate::zones::NodeZones;

/// One cache: `api` watched with `config` into a reflector store, each object passed through
/// `strip` before it is stored. Returns the store and the stream that keeps it, which yields
/// every object touched (added, changed or deleted) once the store holds the change. A watch
/// error is logged under `cache` (the watcher's backoff retries).
pub fn cache<C>(
    cache: &'static str,
    api: Api<C>,
    config: watcher::Config,
    strip: impl FnMut(&mut C) + Send + 'static,
) -> (Store<C>, impl Stream<Item = C> + Send + 'static)
where
    C: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    C::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
{
    let (store, writer) = reflector::store();
    let touched = watcher(api, config)
        .modify(strip)
        .backoff(crate::backoff::WatchBackoff::default())
        .reflect(writer)
        .touched_objects()
        .filter_map(move |result| ready(log_watch_error(cache, result)));
    (store, touched)
}

/// Waits for one cache's initial list.
type WaitReady = Box<dyn Fn() -> BoxFuture<'static, Result<(), WriterDropped>> + Send + Sync>;

/// The caches of one controller of `K` and the reconciles of `K` their changes trigger; driven
/// by one future ([`WatchSet::start`], or a task: [`WatchSet::spawn`]).
pub struct WatchSet<K: Resource> {
    streams: Vec<BoxStream<'static, Vec<ObjectRef<K>>>>,
    /// One per cache the set made ([`WatchSet::watch`], [`WatchSet::keep`], [`WatchSet::zones`]).
    ready: Vec<WaitReady>,
}

impl<K: Resource> Default for WatchSet<K> {
    fn default() -> Self {
        Self {
            streams: Vec::new(),
            ready: Vec::new(),
        }
    }
}

/// The task driving a [`WatchSet`]'s caches; aborted when dropped, so the caches stop with
/// whatever returns first (shutdown, or caches that never synced).
#[must_use = "dropping it stops the caches"]
pub struct Driving(JoinHandle<()>);

impl Drop for Driving {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl<K> WatchSet<K>
where
    K: Resource + 'static,
    K::DynamicType: Send + Sync,
{
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a [`cache`] whose every touched object reconciles the objects `owners` names.
    pub fn watch<C>(
        &mut self,
        name: &'static str,
        api: Api<C>,
        config: watcher::Config,
        strip: impl FnMut(&mut C) + Send + 'static,
        mut owners: impl FnMut(&C) -> Vec<ObjectRef<K>> + Send + 'static,
    ) -> Store<C>
    where
        C: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
        C::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
    {
        let (store, touched) = cache(name, api, config, strip);
        self.streams
            .push(touched.map(move |object| owners(&object)).boxed());
        let waits = store.clone();
        self.ready.push(Box::new(move || {
            let store = waits.clone();
            async move { store.wait_until_ready().await }.boxed()
        }));
        store
    }

    /// Adds the cache of node zones ([`NodeZones::watch`]), which triggers nothing: pods follow
    /// any node change that matters.
    pub fn zones(
        &mut self,
        client: &Client,
        zone_label: &str,
        initial_list: InitialList,
    ) -> NodeZones {
        let (zones, node_events) = NodeZones::watch(client, zone_label, initial_list);
        self.drive(node_events);
        let waits = zones.clone();
        self.ready.push(Box::new(move || {
            let zones = waits.clone();
            async move { zones.wait_until_ready().await }.boxed()
        }));
        zones
    }

    /// Resolves once every cache of the set has completed its initial list (for
    /// [`crate::controller::wait_for_caches`]); fails if one stopped before.
    pub fn synced(&self) -> impl Future<Output = Result<(), WriterDropped>> + Send + 'static {
        let waits: Vec<_> = self.ready.iter().map(|wait| wait()).collect();
        futures::future::try_join_all(waits).map(|synced| synced.map(drop))
    }

    /// Adds a [`cache`] that triggers nothing: read by the reconcile (or a webhook), its changes
    /// reach it through another watch.
    pub fn keep<C>(
        &mut self,
        name: &'static str,
        api: Api<C>,
        config: watcher::Config,
        strip: impl FnMut(&mut C) + Send + 'static,
    ) -> Store<C>
    where
        C: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
        C::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
    {
        self.watch(name, api, config, strip, |_| Vec::new())
    }

    /// Adds a stream of reconciles to trigger (e.g. every resource when the set of zones
    /// changes).
    pub fn trigger(&mut self, stream: impl Stream<Item = Vec<ObjectRef<K>>> + Send + 'static) {
        self.streams.push(stream.boxed());
    }

    /// Adds a stream that must be polled to keep a cache and triggers nothing (the node zones:
    /// pods follow any node change that matters).
    pub fn drive<T>(&mut self, stream: impl Stream<Item = T> + Send + 'static) {
        self.streams.push(stream.map(|_| Vec::new()).boxed());
    }

    /// The future driving every cache, and the reconciles they trigger (for
    /// `Controller::reconcile_on`). The future ends when every stream has, or when the receiver
    /// is dropped.
    pub fn start(
        self,
    ) -> (
        impl Future<Output = ()> + Send + 'static,
        UnboundedReceiver<ObjectRef<K>>,
    ) {
        let (sender, receiver) = mpsc::unbounded();
        let merged = futures::stream::select_all(self.streams);
        (forward_triggers(merged, sender), receiver)
    }

    /// [`WatchSet::start`] on a task of its own, which stops when the returned [`Driving`] is
    /// dropped.
    pub fn spawn(self) -> (Driving, UnboundedReceiver<ObjectRef<K>>) {
        let (drive, triggers) = self.start();
        (Driving(tokio::spawn(drive)), triggers)
    }

    /// The future driving every cache, for a process that reconciles nothing from them (a
    /// webhook reads the caches only). Ends when every stream has.
    pub fn run(self) -> impl Future<Output = ()> + Send + 'static {
        futures::stream::select_all(self.streams).for_each(|_| ready(()))
    }
}
