//! Reading the cluster with the user's kubeconfig and RBAC: the errors a read ends with (a 403
//! names the missing permission), and the zones of nodes.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Node;
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

/// The error of a failed read of `what`.
pub fn read(what: String) -> impl FnOnce(kube::Error) -> Error {
    move |source| Error::Read { what, source }
}

/// The API server's own message (it names the missing permission on a 403), else the error.
fn reason_of(error: &kube::Error) -> String {
    match error {
        kube::Error::Api(status) if status.code == 403 => {
            format!("{} (ask for that permission)", status.message)
        }
        kube::Error::Api(status) => status.message.clone(),
        other => other.to_string(),
    }
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

/// The zone of the node of `pod` (unknown while unscheduled).
pub fn zone_of(pod: &k8s_openapi::api::core::v1::Pod, zones: &BTreeMap<String, Zone>) -> Zone {
    pod.spec
        .as_ref()
        .and_then(|spec| spec.node_name.as_deref())
        .and_then(|node| zones.get(node))
        .cloned()
        .unwrap_or(Zone::Unknown)
}
