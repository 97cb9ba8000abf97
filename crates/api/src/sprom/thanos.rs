//! `spec.thanos`: a Thanos sidecar in every shard pod, with prometheus-operator's `ThanosSpec`
//! field names and meanings for what applies to a sidecar.

use k8s_openapi::api::core::v1::{ResourceRequirements, SecretKeySelector, VolumeMount};
use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::Argument;

/// The Thanos version run when neither `image` nor `version` is given.
pub const DEFAULT_THANOS_VERSION: &str = "v0.42.5";
/// The image repository `version` is a tag of.
pub const DEFAULT_THANOS_REPOSITORY: &str = "quay.io/thanos/thanos";
/// The block length when `blockSize` is not given (Prometheus's and Thanos's 2 hours).
pub const DEFAULT_BLOCK_SIZE: &str = "2h";

/// A Thanos sidecar beside every shard's Prometheus (Server mode): it serves the shard's data
/// over Thanos's StoreAPI on the gRPC port (found through the headless Service
/// `<name>-thanos-sidecar`) and, with `objectStorageConfig`, uploads every block Prometheus
/// cuts to the object store. Under an uploading sidecar Prometheus does not compact its
/// blocks (min and max block duration are both `blockSize`), as prometheus-operator runs it.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct ThanosSpec {
    /// The sidecar's image. Default: quay.io/thanos/thanos at `version`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,

    /// The Thanos version, the tag of the default image (ignored when `image` is given).
    /// Default: v0.42.5.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,

    /// The object store the sidecar uploads blocks to: a key of a Secret of the
    /// ShardedPrometheus's namespace holding Thanos's objstore configuration (type and config,
    /// e.g. S3 with its bucket, endpoint and credentials). Not given: nothing is uploaded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object_storage_config: Option<SecretKeySelector>,

    /// TLS of the sidecar's gRPC server: files mounted into the sidecar (`volumeMounts`).
    /// Only caFile (client certificates verified against it), certFile and keyFile apply.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grpc_server_tls_config: Option<ThanosTlsConfig>,

    /// The sidecar container's resources.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,

    /// The sidecar's log level. Default: info.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["", "debug", "info", "warn", "error"]))]
    pub log_level: Option<String>,

    /// The sidecar's log format. Default: logfmt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["", "logfmt", "json"]))]
    pub log_format: Option<String>,

    /// The length of the blocks Prometheus cuts and the sidecar uploads, a Prometheus duration
    /// (Prometheus's `--storage.tsdb.min-block-duration` and `max-block-duration` when
    /// `objectStorageConfig` is set). Default: 2h.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = crate::sprom::cel::prometheus_duration("spec.thanos.blockSize"))]
    pub block_size: Option<String>,

    /// Extra sidecar flags ("--name=value"). Flags the controller sets (the Prometheus URL,
    /// the listen addresses, the TSDB path, the object store, TLS, log level and format) are
    /// refused: use their fields.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub additional_args: Vec<Argument>,

    /// Mounts added to the sidecar container (the volumes are `spec.volumes`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volume_mounts: Vec<VolumeMount>,

    /// With `objectStorageConfig`: a shard removed by a scale-down (at its retention deadline,
    /// or at once under `whenScaled: Delete`) is deleted only once everything it holds, its
    /// head included, is in the object store. Set to false to delete removed shards without
    /// that final upload, accepting the loss of what no uploaded block holds yet (up to
    /// `blockSize` × 1.5 per replica). Default: true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upload_before_deletion: Option<bool>,
}

/// TLS files of the sidecar's gRPC server, as paths in the sidecar container.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ThanosTlsConfig {
    /// CA certificates the clients' certificates are verified against (mutual TLS).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_file: Option<String>,
    /// The server's certificate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cert_file: Option<String>,
    /// The server's private key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_file: Option<String>,
}
