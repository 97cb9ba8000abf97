//! The backends: static `--endpoint` URLs and the pods discovery finds.

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use tokio::sync::watch;
use zone_api::sprom::contract::{SHARD_POD_LABEL, ZONE_POD_LABEL};
use zone_operator::ErrorChain;

use crate::cli::Scheme;

/// One Prometheus to ask.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Endpoint {
    /// Shard first: sources are merged in this order (it decides exact ties).
    pub shard: String,
    pub replica: String,
    /// Base URL, no trailing slash (`http://10.0.0.1:9090`, `https://10.0.0.1:9090`).
    pub url: String,
    /// Its zone, when known: a discovered shard pod's label `zonecontrol.k8s.aws/zone`
    /// (Topology sharding), a static endpoint's `zone=` fragment.
    pub zone: String,
}

impl Endpoint {
    /// How warnings and metrics name it.
    pub fn name(&self) -> &str {
        &self.url
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EndpointError {
    #[error(
        "--endpoint {0:?}: only http://, https://, grpc:// and grpcs:// URLs are supported, or DNS names (dns+, dnssrv+)"
    )]
    Scheme(String),
    #[error("--endpoint {0:?}: unknown fragment key {1:?} (shard, replica, zone)")]
    Fragment(String, String),
    #[error("--endpoint {0:?}: {1}")]
    Dns(String, String),
}

/// `http[s]://host:port[/prefix][#shard=S&replica=R&zone=Z]`, or `grpc[s]://host:port[#...]` for
/// Thanos's gRPC Rules API (a Thanos sidecar, Ruler or Querier, another federator).
pub fn parse_static(text: &str) -> Result<Endpoint, EndpointError> {
    let (url, fragment) = text.split_once('#').unwrap_or((text, ""));
    let grpc = crate::backends::grpc::address(url).is_some();
    if !url.starts_with("http://") && !url.starts_with("https://") && !grpc {
        return Err(EndpointError::Scheme(text.to_string()));
    }
    let mut endpoint = Endpoint {
        shard: String::new(),
        replica: String::new(),
        url: url.trim_end_matches('/').to_string(),
        zone: String::new(),
    };
    for (key, value) in form_urlencoded::parse(fragment.as_bytes()) {
        match key.as_ref() {
            "shard" => endpoint.shard = value.into_owned(),
            "replica" => endpoint.replica = value.into_owned(),
            "zone" => endpoint.zone = value.into_owned(),
            other => return Err(EndpointError::Fragment(text.to_string(), other.to_string())),
        }
    }
    if endpoint.replica.is_empty() {
        endpoint.replica = endpoint.url.clone();
    }
    Ok(endpoint)
}

/// Where the endpoints come from.
#[derive(Clone)]
pub struct Endpoints {
    fixed: Arc<Vec<Endpoint>>,
    pods: Option<(Store<Pod>, PodPort)>,
    /// The backends found by another source (the DNS names): `None` until it looked once.
    found: Option<watch::Receiver<Option<Vec<Endpoint>>>>,
}

/// Where Prometheus serves in a discovered pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PodPort {
    pub scheme: Scheme,
    pub port: u16,
}

impl Endpoints {
    pub fn fixed(endpoints: Vec<Endpoint>) -> Self {
        Self {
            fixed: Arc::new(endpoints),
            pods: None,
            found: None,
        }
    }

    /// The static endpoints plus a watch of the pods `selector` finds in `namespace`, each
    /// asked at `port`; returns the future that keeps the watch (run it) and the endpoints.
    pub fn discovering(
        fixed: Vec<Endpoint>,
        client: Client,
        namespace: &str,
        selector: &str,
        port: PodPort,
    ) -> (Self, impl Future<Output = ()> + Send + 'static) {
        let api: Api<Pod> = Api::namespaced(client, namespace);
        let (store, writer) = reflector::store();
        let config = watcher::Config::default().labels(selector);
        let stream = watcher(api, config)
            .backoff(zone_operator::backoff::WatchBackoff::default())
            .modify(|pod| {
                pod.managed_fields_mut().clear();
                pod.annotations_mut().clear();
                if let Some(spec) = pod.spec.as_mut() {
                    spec.containers.clear();
                    spec.volumes = None;
                }
            })
            .reflect(writer)
            .touched_objects();
        let keep = async move {
            let mut stream = std::pin::pin!(stream);
            while let Some(event) = stream.next().await {
                if let Err(error) = event {
                    tracing::warn!(error = %ErrorChain(&error), "pod watch error");
                }
            }
        };
        (
            Self {
                fixed: Arc::new(fixed),
                pods: Some((store, port)),
                found: None,
            },
            keep,
        )
    }

    /// These endpoints and those another source sends on `found` (the DNS names' backends).
    pub fn with_found(self, found: watch::Receiver<Option<Vec<Endpoint>>>) -> Self {
        Self {
            found: Some(found),
            ..self
        }
    }

    /// Waits until discovery has listed once and the other source looked once (at once
    /// without either).
    pub async fn wait_ready(&self) -> bool {
        if let Some(found) = &self.found
            && found.clone().wait_for(Option::is_some).await.is_err()
        {
            return false;
        }
        match &self.pods {
            Some((store, _)) => store.wait_until_ready().await.is_ok(),
            None => true,
        }
    }

    /// The endpoints now, sorted by shard and replica.
    pub fn current(&self) -> Vec<Endpoint> {
        let mut all: Vec<Endpoint> = self.fixed.as_ref().clone();
        if let Some((store, port)) = &self.pods {
            all.extend(store.state().iter().filter_map(|pod| of_pod(pod, *port)));
        }
        if let Some(found) = &self.found {
            all.extend(found.borrow().iter().flatten().cloned());
        }
        all.sort();
        all
    }
}

impl Endpoints {
    /// The discovered shards that have pods and none of them ready (a zone down, a shard
    /// starting): one line each, naming the shard and its pods, for the answers' warnings. A
    /// shard whose pods are all gone is not known here.
    pub fn unready_shards(&self) -> Vec<String> {
        match &self.pods {
            Some((store, port)) => unready_shards(&store.state(), *port),
            None => Vec::new(),
        }
    }
}

/// [`Endpoints::unready_shards`] of `pods`.
pub fn unready_shards(pods: &[Arc<Pod>], port: PodPort) -> Vec<String> {
    let mut shards: BTreeMap<&str, (bool, Vec<String>)> = BTreeMap::new();
    for pod in pods {
        let Some(shard) = pod.labels().get(SHARD_POD_LABEL) else {
            continue;
        };
        let entry = shards.entry(shard.as_str()).or_default();
        entry.0 |= of_pod(pod, port).is_some();
        entry.1.push(pod.name_any());
    }
    shards
        .into_iter()
        .filter(|(_, (ready, _))| !ready)
        .map(|(shard, (_, pods))| {
            format!(
                "shard {shard}: no ready pod ({} not ready): its rules are not in this answer",
                pods.join(", ")
            )
        })
        .collect()
}

/// The endpoint of a ready pod with an IP.
pub fn of_pod(pod: &Pod, PodPort { scheme, port }: PodPort) -> Option<Endpoint> {
    if pod.metadata.deletion_timestamp.is_some() {
        return None;
    }
    let status = pod.status.as_ref()?;
    let ready = status
        .conditions
        .as_ref()?
        .iter()
        .any(|c| c.type_ == "Ready" && c.status == "True");
    let ip = status.pod_ip.as_ref().filter(|ip| !ip.is_empty())?;
    if !ready {
        return None;
    }
    let host = if ip.contains(':') {
        format!("[{ip}]")
    } else {
        ip.clone()
    };
    Some(Endpoint {
        shard: pod
            .labels()
            .get(SHARD_POD_LABEL)
            .cloned()
            .unwrap_or_default(),
        replica: pod.name_any(),
        url: format!("{}://{host}:{port}", scheme.as_str()),
        zone: pod
            .labels()
            .get(ZONE_POD_LABEL)
            .cloned()
            .unwrap_or_default(),
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_shard_with_pods_and_none_ready_is_named() {
        let pod = |name: &str, shard: &str, ready: &str| -> Arc<Pod> {
            Arc::new(
                serde_json::from_value(serde_json::json!({
                    "metadata": {"name": name, "labels": {SHARD_POD_LABEL: shard}},
                    "status": {"podIP": "10.0.0.1", "conditions": [{"type": "Ready", "status": ready}]},
                }))
                .unwrap(),
            )
        };
        let port = PodPort {
            scheme: Scheme::Http,
            port: 9090,
        };
        let pods = [
            pod("prom-shard-0-0", "0", "True"),
            pod("prom-shard-0-1", "0", "False"),
            pod("prom-shard-1-0", "1", "False"),
            pod("prom-shard-1-1", "1", "Unknown"),
        ];
        assert_eq!(
            unready_shards(&pods, port),
            [
                "shard 1: no ready pod (prom-shard-1-0, prom-shard-1-1 not ready): its rules are \
              not in this answer"
            ]
        );
        assert!(unready_shards(&pods[..2], port).is_empty());
    }

    #[test]
    fn static_endpoints_carry_shard_and_replica_in_the_fragment() {
        let endpoint = parse_static("http://127.0.0.1:9091/#shard=1&replica=b").unwrap();
        assert_eq!(
            endpoint,
            Endpoint {
                shard: "1".into(),
                replica: "b".into(),
                url: "http://127.0.0.1:9091".into(),
                zone: String::new(),
            }
        );
        let plain = parse_static("http://prom:9090").unwrap();
        assert_eq!(
            (plain.shard.as_str(), plain.replica.as_str()),
            ("", "http://prom:9090")
        );
        assert_eq!(
            parse_static("https://prom.monitoring.svc:9090/#shard=0")
                .unwrap()
                .url,
            "https://prom.monitoring.svc:9090"
        );
        for other in ["ftp://x", "prom:9090", "HTTPS//x"] {
            assert!(
                matches!(parse_static(other), Err(EndpointError::Scheme(_))),
                "{other}"
            );
        }
        assert!(matches!(
            parse_static("http://x#region=a"),
            Err(EndpointError::Fragment(..))
        ));
        assert_eq!(parse_static("http://x#zone=a&shard=1").unwrap().zone, "a");
    }

    #[test]
    fn only_ready_pods_with_an_ip_are_endpoints() {
        let pod = |ready: &str, ip: Option<&str>| -> Pod {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "p-shard-1-0", "labels": {SHARD_POD_LABEL: "1"}},
                "status": {"podIP": ip, "conditions": [{"type": "Ready", "status": ready}]},
            }))
            .unwrap()
        };
        let http = PodPort {
            scheme: Scheme::Http,
            port: 9090,
        };
        assert_eq!(
            of_pod(&pod("True", Some("10.0.0.5")), http),
            Some(Endpoint {
                shard: "1".into(),
                replica: "p-shard-1-0".into(),
                url: "http://10.0.0.5:9090".into(),
                zone: String::new(),
            })
        );
        let mut zoned = pod("True", Some("10.0.0.5"));
        zoned
            .labels_mut()
            .insert(ZONE_POD_LABEL.into(), "zone-b".into());
        assert_eq!(of_pod(&zoned, http).unwrap().zone, "zone-b");
        assert_eq!(of_pod(&pod("False", Some("10.0.0.5")), http), None);
        assert_eq!(of_pod(&pod("True", None), http), None);
        let https = PodPort {
            scheme: Scheme::Https,
            port: 9443,
        };
        assert_eq!(
            of_pod(&pod("True", Some("fd00::5")), https).unwrap().url,
            "https://[fd00::5]:9443"
        );
        // A pod's Thanos sidecar: an endpoint the fetch reads over gRPC.
        let sidecar = PodPort {
            scheme: Scheme::Grpc,
            port: 10901,
        };
        let url = of_pod(&pod("True", Some("10.0.0.5")), sidecar).unwrap().url;
        assert_eq!(url, "grpc://10.0.0.5:10901");
        assert_eq!(crate::backends::grpc::address(&url), Some("10.0.0.5:10901"));
    }
}
