//! The effectful half of a removed shard's final upload (see [`crate::final_upload::pods`]): a
//! pod's TSDB snapshot through Prometheus's admin API, then the ephemeral container that
//! uploads it.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use k8s_openapi::api::core::v1::{EphemeralContainer, Pod};
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde::Deserialize;
use zone_operator::children::ChildError;

use crate::children::build::WEB_PORT;
use crate::final_upload::pods::{self, PATH_FLAG};
use crate::health::prober::{self, RuntimeInfo, ServedConfig};

/// A snapshot writes the head to disk: allowed longer than a probe.
const SNAPSHOT_TIMEOUT: Duration = Duration::from_secs(120);

#[derive(Deserialize)]
struct Snapshot {
    name: String,
}

/// Starts an upload attempt in `pod` (at `ip`): over `path`, or over a snapshot taken now if the
/// pod has been on the retired configuration long enough. A pod not ready for it, or that cannot
/// be asked, is left for the next reconcile (logged): the shard stays meanwhile.
pub async fn start(
    pods: &Api<Pod>,
    params: &PatchParams,
    pod: &str,
    ip: &str,
    path: Option<&str>,
    container: &EphemeralContainer,
) -> Result<(), ChildError> {
    let path = match path {
        Some(path) => path.to_string(),
        None => match take(ip).await {
            Ok(name) => super::container::snapshot_path(&name),
            Err(why) => {
                tracing::info!(pod, why, "final upload: no snapshot yet");
                return Ok(());
            }
        },
    };
    let mut container = container.clone();
    container
        .args
        .get_or_insert_with(Vec::new)
        .push(format!("{PATH_FLAG}{path}"));
    let patch = serde_json::json!({"spec": {"ephemeralContainers": [container]}});
    match pods
        .patch_ephemeral_containers(pod, params, &Patch::Strategic(&patch))
        .await
    {
        Ok(_) => {
            tracing::info!(
                pod,
                path,
                container = container.name,
                "final upload started"
            );
            Ok(())
        }
        // Gone meanwhile: its replacement starts over.
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        Err(source) => Err(ChildError::Apply {
            kind: "Pod".to_string(),
            name: pod.to_string(),
            source,
        }),
    }
}

/// Takes a snapshot of the Prometheus at `ip` (its head included) once it is ready for one:
/// the snapshot's name, or why not.
async fn take(ip: &str) -> Result<String, String> {
    let ip: IpAddr = ip.parse().map_err(|_| format!("bad pod IP {ip}"))?;
    let address = SocketAddr::new(ip, u16::try_from(WEB_PORT).unwrap_or(9090));
    let client = prober::client().ok_or("no HTTP client")?;
    let config: ServedConfig = prober::get(&client, address, "/api/v1/status/config")
        .await
        .map_err(|error| format!("its configuration: {error}"))?;
    let runtime: RuntimeInfo = prober::get(&client, address, "/api/v1/status/runtimeinfo")
        .await
        .map_err(|error| format!("its runtime information: {error}"))?;
    pods::ready_for_snapshot(
        &config.yaml,
        runtime.last_config_time.as_deref(),
        Timestamp::now(),
    )?;
    let url = format!("http://{address}/api/v1/admin/tsdb/snapshot?skip_head=false");
    let answer = tokio::time::timeout(SNAPSHOT_TIMEOUT, client.post(&url, None))
        .await
        .map_err(|_| format!("no snapshot within {}s", SNAPSHOT_TIMEOUT.as_secs()))?
        .map_err(|error| format!("snapshot: {error}"))?;
    if !answer.status.is_success() {
        return Err(format!(
            "snapshot: HTTP {} (is the admin API enabled?)",
            answer.status
        ));
    }
    let snapshot: Snapshot = answer
        .decode()
        .map_err(|error| format!("snapshot: {error}"))?;
    // The name becomes a path: nothing but a plain directory name is taken.
    let plain = !snapshot.name.is_empty()
        && snapshot
            .name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-');
    match plain {
        true => Ok(snapshot.name),
        false => Err(format!("snapshot: unexpected name {:?}", snapshot.name)),
    }
}
