//! Nodes and zones: which zone each node (and so each scheduled pod) is in, and a kwok Node of a
//! test's own, which it may cordon and drain (the six shared nodes are never drained: other tests
//! run there).

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;

use crate::cluster::DeleteOnDrop;
use crate::pods::node_of;
use crate::workload::ZONE_LABEL;
use crate::{Cluster, TestNamespace, wait_for};

/// Taint key of the nodes a test creates for itself; the value is the test's namespace.
pub const TEST_NODE_TAINT: &str = "zonecontrol.k8s.aws/e2e-node";

/// The zones of the nodes labelled `selector` (every node when empty), by node name.
pub async fn zones(client: &Client, selector: &str) -> BTreeMap<String, String> {
    let mut params = ListParams::default();
    if !selector.is_empty() {
        params = params.labels(selector);
    }
    Api::<Node>::all(client.clone())
        .list(&params)
        .await
        .expect("listing the nodes")
        .items
        .into_iter()
        .filter_map(|node| {
            let zone = node.labels().get(ZONE_LABEL)?.clone();
            Some((node.name_any(), zone))
        })
        .collect()
}

/// The zone of each scheduled pod labelled `selector`, by pod name.
pub async fn pod_zones(pods: &Api<Pod>, selector: &str) -> BTreeMap<String, String> {
    let client: Client = pods.clone().into_client();
    let node_zones = zones(&client, "").await;
    pods.list(&ListParams::default().labels(selector))
        .await
        .expect("listing the pods")
        .items
        .iter()
        .filter_map(|pod| Some((pod.name_any(), node_zones.get(node_of(pod)?)?.clone())))
        .collect()
}

pub fn is_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// A kwok Node of one test in one zone, tainted with the test's namespace so only that test's
/// pods (those tolerating [`TEST_NODE_TAINT`] with that value) run there; deleted when dropped.
pub struct TestNode {
    pub name: String,
    /// The value of its [`TEST_NODE_TAINT`].
    pub taint: String,
    _delete: DeleteOnDrop,
}

impl TestNode {
    /// Creates `<namespace>-<zone>` and waits until it is Ready.
    pub async fn create(ns: &TestNamespace, zone: &str) -> TestNode {
        Self::create_named(ns, &format!("{}-{zone}", ns.name), Some(zone)).await
    }

    /// Creates `<namespace>-zoneless`, a node with no zone label (its pods' zone is unknown),
    /// and waits until it is Ready.
    pub async fn create_without_zone(ns: &TestNamespace) -> TestNode {
        Self::create_named(ns, &format!("{}-zoneless", ns.name), None).await
    }

    async fn create_named(ns: &TestNamespace, name: &str, zone: Option<&str>) -> TestNode {
        let name = name.to_string();
        let mut labels = json!({
            "kubernetes.io/hostname": name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            "type": "kwok",
        });
        if let Some(zone) = zone {
            labels[ZONE_LABEL] = json!(zone);
        }
        let node: Node = serde_json::from_value(json!({
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "annotations": {"kwok.x-k8s.io/node": "fake"},
                "labels": labels,
            },
            "spec": {"taints": [{"key": TEST_NODE_TAINT, "value": ns.name, "effect": "NoSchedule"}]},
        }))
        .expect("Node manifest");
        let nodes: Api<Node> = Api::all(ns.client.clone());
        nodes
            .create(&PostParams::default(), &node)
            .await
            .expect("create the test's node");
        let config = Cluster::get().config().await;
        let guard = TestNode {
            name: name.clone(),
            taint: ns.name.clone(),
            _delete: DeleteOnDrop::new::<Node>(config, &name, DeleteParams::default()),
        };
        wait_for("the test's node Ready", Duration::from_secs(60), || async {
            let node = nodes.get(&name).await.map_err(|e| e.to_string())?;
            if is_ready(&node) {
                Ok(())
            } else {
                Err("not Ready yet".to_string())
            }
        })
        .await;
        guard
    }

    /// Whether the node is cordoned.
    pub async fn unschedulable(&self, client: &Client) -> bool {
        Api::<Node>::all(client.clone())
            .get(&self.name)
            .await
            .expect("get the test's node")
            .spec
            .and_then(|s| s.unschedulable)
            .unwrap_or(false)
    }
}
