//! `config/thanos` as users apply it, run as pods on the local cluster's real nodes: its
//! volumes, its bucket's Secret, the manifests applied with the test's namespace, and the
//! Querier's Service address.

use std::net::SocketAddr;

use k8s_openapi::api::core::v1::{PersistentVolume, Secret, Service};
use kube::Api;
use kube::api::DeleteParams;
use serde_json::json;

use crate::cluster::DeleteOnDrop;
use crate::real::RealNodes;
use crate::{Cluster, TestNamespace};

/// The Secret config/thanos reads the bucket's configuration from (key `objstore.yml`).
pub const OBJSTORE_SECRET: &str = "thanos-objstore";

/// [`OBJSTORE_SECRET`] in `ns`: LocalStack's S3 as the pods reach it, the namespace's name as
/// the bucket's prefix.
pub async fn objstore_secret(cluster: &Cluster, ns: &TestNamespace) {
    let s3 = crate::thanos::pod_s3(cluster).await;
    let secrets: Api<Secret> = ns.api();
    let objstore = crate::thanos::objstore_config(&s3.to_string(), &ns.name);
    crate::fixture::create(
        &secrets,
        json!({"metadata": {"name": OBJSTORE_SECRET}, "stringData": {"objstore.yml": objstore}}),
    )
    .await;
}

/// The claims of config/thanos's StatefulSets (one Store Gateway, two Rulers).
const CLAIMS: [&str; 3] = [
    "data-thanos-store-0",
    "data-thanos-ruler-0",
    "data-thanos-ruler-1",
];

/// The cluster has no volume provisioner: one hostPath PersistentVolume per claim of
/// config/thanos's StatefulSets, bound to it in advance, its directory (under the real nodes'
/// state, which `make cluster-down` removes) writable by the pods' user. Deleted on drop.
pub async fn claim_volumes(cluster: &Cluster, ns: &TestNamespace) -> Vec<DeleteOnDrop> {
    let state = std::path::PathBuf::from(cluster.var("E2E_LOGS").expect("E2E_LOGS"))
        .parent()
        .expect("the state dir")
        .join("nodes/volumes")
        .join(&ns.name);
    let volumes: Api<PersistentVolume> = Api::all(ns.client.clone());
    let config = cluster.config().await;
    let mut made = Vec::new();
    for claim in CLAIMS {
        let dir = state.join(claim);
        std::fs::create_dir_all(&dir).expect("the volume's directory");
        std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o1777))
            .expect("the volume's directory writable");
        let name = format!("{}-{claim}", ns.name);
        crate::fixture::create(
            &volumes,
            json!({
                "metadata": {"name": name},
                "spec": {
                    "capacity": {"storage": "10Gi"},
                    "accessModes": ["ReadWriteOnce"],
                    "persistentVolumeReclaimPolicy": "Retain",
                    "hostPath": {"path": dir, "type": "Directory"},
                    "claimRef": {"namespace": ns.name, "name": claim},
                },
            }),
        )
        .await;
        made.push(DeleteOnDrop::new::<PersistentVolume>(
            config.clone(),
            &name,
            DeleteParams::default(),
        ));
    }
    made
}

/// `kubectl kustomize config/thanos`, with the test's namespace and Alertmanager Service for
/// `monitoring` and `alertmanager-operated`, its pods placed on the real nodes, applied
/// server-side. The images it names are tagged in the nodes as the local builds, which must be
/// of the same versions.
pub fn apply(cluster: &Cluster, real: &RealNodes, namespace: &str) {
    let mut kustomize = crate::identity::kubectl(cluster);
    kustomize
        .arg("kustomize")
        .arg(crate::deploy::repo_root().join("config/thanos"));
    let rendered = crate::identity::run(kustomize, None)
        .replace("namespace: monitoring", &format!("namespace: {namespace}"))
        .replace(".monitoring.svc", &format!(".{namespace}.svc"))
        .replace("alertmanager-operated", crate::alertmanager::NAME);
    let mut objects = crate::identity::yaml_to_json(&rendered);
    let mut images = std::collections::BTreeSet::new();
    for object in &mut objects {
        let Some(pod) = object.pointer_mut("/spec/template/spec") else {
            continue;
        };
        pod["nodeSelector"] = json!({"type": "real"});
        pod["tolerations"] =
            json!([{"key": real.taint, "operator": "Exists", "effect": "NoSchedule"}]);
        for container in pod["containers"].as_array().into_iter().flatten() {
            images.insert(container["image"].as_str().unwrap_or_default().to_string());
        }
    }
    for image in &images {
        let local = [&real.thanos_image, &real.config_reloader_image]
            .into_iter()
            .find(|local| repository(local) == repository(image))
            .unwrap_or_else(|| panic!("no local build of {image}"));
        assert_eq!(
            tag(local),
            tag(image),
            "config/thanos runs {image}, the cluster builds {local}"
        );
        real.alias_image(local, image);
    }
    let list = json!({"apiVersion": "v1", "kind": "List", "items": objects});
    let mut apply = crate::identity::kubectl(cluster);
    apply.args(["apply", "--server-side", "-f", "-"]);
    let applied = crate::identity::run(apply, Some(list.to_string().as_bytes()));
    assert_eq!(
        applied.lines().count(),
        9,
        "every object of config/thanos: {applied}"
    );
}

/// The last path segment of an image's name without its tag: `thanos` of
/// `quay.io/thanos/thanos:v0.42.5`.
fn repository(image: &str) -> &str {
    let name = image.rsplit_once(':').map_or(image, |(name, _)| name);
    name.rsplit('/').next().unwrap_or(name)
}

fn tag(image: &str) -> &str {
    image.rsplit_once(':').map_or("", |(_, tag)| tag)
}

/// The Querier's Service IP and HTTP port, which this host reaches through kube-proxy.
pub async fn query_service(ns: &TestNamespace) -> SocketAddr {
    let services: Api<Service> = ns.api();
    let service = services
        .get("thanos-query")
        .await
        .expect("the Service thanos-query");
    let ip = service
        .spec
        .and_then(|spec| spec.cluster_ip)
        .expect("thanos-query's cluster IP");
    SocketAddr::new(ip.parse().expect("a cluster IP"), 10902)
}
