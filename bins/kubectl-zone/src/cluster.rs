//! Reading the cluster with the user's kubeconfig and RBAC: the errors a read ends with (a 403
//! names the missing permission), and the zones of nodes.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt};
use zone_topology::Zone;

use crate::output::RenderError;

/// Why a command could not answer.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot reach the cluster with the kubeconfig: {0}")]
    Client(#[source] kube::Error),
    #[error("cannot {what}: {}", reason_of(.source))]
    Read {
        what: String,
        #[source]
        source: kube::Error,
    },
    #[error("{kind} {name}: {message}")]
    Invalid {
        kind: &'static str,
        name: String,
        message: String,
    },
    #[error(transparent)]
    Render(#[from] RenderError),
}

impl Error {
    /// The error of `kind` `name` (an object, or what was read) saying `message`.
    pub fn invalid(kind: &'static str, name: String) -> impl Fn(String) -> Error {
        move |message| Error::Invalid {
            kind,
            name: name.clone(),
            message,
        }
    }
}

/// The error of a failed read of `what`.
pub fn read(what: String) -> impl FnOnce(kube::Error) -> Error {
    move |source| Error::Read { what, source }
}

/// The API server's own message (it names the missing permission on a 403), else the error.
pub fn reason_of(error: &kube::Error) -> String {
    match error {
        kube::Error::Api(status) if status.code == 403 => {
            format!("{} (ask for that permission)", status.message)
        }
        kube::Error::Api(status) => status.message.clone(),
        other => other.to_string(),
    }
}

/// The body of a GET of `path` through the API server (its proxy to a pod or Service), at most
/// `max_bytes`; `what` says what answers there, for the error.
pub async fn proxied(
    client: &Client,
    path: &str,
    what: &str,
    max_bytes: usize,
) -> Result<String, Error> {
    let request = http::Request::get(path)
        .body(Vec::new())
        .map_err(|e| Error::Invalid {
            kind: "request",
            name: path.to_string(),
            message: e.to_string(),
        })?;
    let body = client
        .request_text(request)
        .await
        .map_err(read(format!("get {path} ({what})")))?;
    if body.len() > max_bytes {
        return Err(Error::Invalid {
            kind: "answer",
            name: path.to_string(),
            message: format!("over {max_bytes} bytes"),
        });
    }
    Ok(body)
}

/// The zone of every node, from its `zone_label` (the controllers' `--zone-label`).
pub async fn node_zones(
    client: &Client,
    zone_label: &str,
) -> Result<BTreeMap<String, Zone>, Error> {
    let nodes: Api<Node> = Api::all(client.clone());
    let nodes = nodes.list(&ListParams::default()).await.map_err(read(
        "list nodes (the zone of a pod is its node's; `view` does not grant it)".to_string(),
    ))?;
    Ok(nodes
        .items
        .iter()
        .map(|node| {
            let labels = node.metadata.labels.clone().unwrap_or_default();
            (node.name_any(), Zone::from_label(&labels, zone_label))
        })
        .collect())
}

/// The pods of `namespace` that `params` selects, each with the zone of its node.
pub async fn pods_with_zones(
    client: &Client,
    namespace: &str,
    params: &ListParams,
    zone_label: &str,
) -> Result<Vec<(Pod, Zone)>, Error> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let pods = pods
        .list(params)
        .await
        .map_err(read(format!("list pods of {namespace}")))?;
    let zones = node_zones(client, zone_label).await?;
    Ok(with_zones(pods.items, &zones))
}

/// Each pod with the zone of its node.
pub fn with_zones(pods: Vec<Pod>, zones: &BTreeMap<String, Zone>) -> Vec<(Pod, Zone)> {
    pods.into_iter()
        .map(|pod| {
            let zone = zone_of(&pod, zones);
            (pod, zone)
        })
        .collect()
}

/// The zone of the node of `pod` (unknown while unscheduled).
fn zone_of(pod: &Pod, zones: &BTreeMap<String, Zone>) -> Zone {
    pod.spec
        .as_ref()
        .and_then(|spec| spec.node_name.as_deref())
        .and_then(|node| zones.get(node))
        .cloned()
        .unwrap_or(Zone::Unknown)
}
