//! The final upload's ephemeral container, built as the shards' other containers are (their data
//! volume, security context, external labels and Thanos settings), and where the snapshot it
//! uploads is.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{EphemeralContainer, SecurityContext, VolumeMount};
use zone_api::sprom::ValidThanos;

use crate::children::build::{
    BuildInput, DATA_DIR, DATA_VOLUME, container_security_context, shard_config,
};
use crate::children::config;
use crate::children::thanos::logging_and_objstore;

/// Attempt `number` of the final upload in pod `pod` of removed shard `index` (formerly of
/// `zone`): an ephemeral container labelling the blocks as the pod's sidecar does, running the
/// sidecar's `image` (the spec's Thanos image when the pod has none). None without
/// `spec.thanos`.
pub fn upload_container(
    input: &BuildInput<'_>,
    index: u32,
    zone: Option<&str>,
    pod: &str,
    number: u32,
    image: Option<&str>,
) -> Option<EphemeralContainer> {
    let thanos = input.valid.thanos.as_ref()?;
    let labels = config::external_labels_of(&shard_config(input, index, Some(zone), &[]), pod);
    let data = VolumeMount {
        name: DATA_VOLUME.into(),
        mount_path: DATA_DIR.into(),
        ..VolumeMount::default()
    };
    let security = container_security_context(input.valid);
    let mut container = thanos_upload(thanos, number, &labels, data, security);
    if let Some(image) = image {
        container.image = Some(image.to_string());
    }
    Some(container)
}

/// Where Prometheus's admin API writes the snapshot `name`, as the pod's containers see it.
pub fn snapshot_path(name: &str) -> String {
    format!("{DATA_DIR}/snapshots/{name}")
}

/// Attempt `number` of a removed shard's final upload in one of its pods, as an ephemeral
/// container: the sidecar's image uploads the blocks of a snapshot directory (its `--path` is
/// added once the snapshot is taken) with the pod's external `labels`, reading the data volume
/// (`data_mount`) and the objstore configuration as the sidecar does. On failure, the end of its
/// log is its termination message, which the status quotes.
fn thanos_upload(
    thanos: &ValidThanos,
    number: u32,
    labels: &BTreeMap<String, String>,
    data_mount: VolumeMount,
    security_context: SecurityContext,
) -> EphemeralContainer {
    let mut args = vec![
        "tools".to_string(),
        "bucket".to_string(),
        "upload-blocks".to_string(),
        // Every block of the snapshot, compacted ones too: a shard that ran before it had an
        // object store holds blocks Prometheus compacted, which the sidecar never ships (it ships
        // level-1 blocks only). Blocks already in the bucket are skipped either way.
        "--shipper.upload-compacted".to_string(),
    ];
    let env = logging_and_objstore(thanos, &mut args);
    // Go-quoted values: a JSON string is one (`upload-blocks` unquotes them).
    args.extend(labels.iter().map(|(name, value)| {
        let quoted = serde_json::to_string(value).unwrap_or_default();
        format!("--label={name}={quoted}")
    }));
    EphemeralContainer {
        name: super::pods::container_name(number),
        image: Some(thanos.image.clone()),
        args: Some(args),
        env: (!env.is_empty()).then_some(env),
        volume_mounts: Some(vec![data_mount]),
        security_context: Some(security_context),
        termination_message_policy: Some("FallbackToLogsOnError".into()),
        ..EphemeralContainer::default()
    }
}
