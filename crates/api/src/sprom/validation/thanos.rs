//! `spec.thanos`, checked: the sidecar ready to build.

use k8s_openapi::api::core::v1::{ResourceRequirements, SecretKeySelector, VolumeMount};

use super::SpromError;
use super::pod::{FlagError, flags};
use crate::shared::{DurationError, duration, non_empty_or};
use crate::sprom::thanos::{
    DEFAULT_BLOCK_SIZE, DEFAULT_THANOS_REPOSITORY, DEFAULT_THANOS_VERSION, ThanosTlsConfig,
};
use crate::sprom::{PrometheusMode, ShardedPrometheusSpec};

/// The sidecar container's name: `spec.containers` may not use it while `spec.thanos` is set.
pub const THANOS_SIDECAR_CONTAINER: &str = "thanos-sidecar";

/// The final upload's ephemeral containers are named this, then the attempt's number:
/// `spec.containers` may not use such a name while `spec.thanos` is set (it would collide).
pub const THANOS_UPLOAD_CONTAINER_PREFIX: &str = "thanos-upload-";

/// Sidecar flags the controller sets itself; `spec.thanos.additionalArgs` may not name them.
pub const RESERVED_SIDECAR_FLAGS: &[&str] = &[
    "prometheus.url",
    "grpc-address",
    "http-address",
    "tsdb.path",
    "objstore.config",
    "objstore.config-file",
    "grpc-server-tls-cert",
    "grpc-server-tls-key",
    "grpc-server-tls-client-ca",
    "log.level",
    "log.format",
];

/// Prometheus flags an uploading sidecar needs set to `blockSize`; `spec.additionalArgs` may
/// not name them then.
pub const BLOCK_DURATION_FLAGS: &[&str] = &[
    "storage.tsdb.min-block-duration",
    "storage.tsdb.max-block-duration",
];

/// The sidecar of every shard pod, as checked.
#[derive(Debug, Clone, PartialEq)]
pub struct ValidThanos {
    pub image: String,
    /// The Secret key holding the objstore configuration; None: nothing is uploaded.
    pub object_storage: Option<ObjectStorage>,
    pub tls: Option<ThanosTlsConfig>,
    pub resources: Option<ResourceRequirements>,
    pub log_level: String,
    pub log_format: String,
    /// A valid Prometheus duration, as written.
    pub block_size: String,
    /// `--name[=value]` flags, none of [`RESERVED_SIDECAR_FLAGS`].
    pub additional_args: Vec<String>,
    pub volume_mounts: Vec<VolumeMount>,
    /// A removed shard is deleted only after its final upload (only with an object store).
    pub upload_before_deletion: bool,
}

impl ValidThanos {
    /// Whether a removed shard waits for its final upload before it is deleted.
    pub fn final_upload(&self) -> bool {
        self.object_storage.is_some() && self.upload_before_deletion
    }
}

/// A key of a Secret of the ShardedPrometheus's namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectStorage {
    pub secret: String,
    pub key: String,
}

/// Why `spec.thanos` cannot be acted on.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ThanosError {
    #[error(
        "spec.thanos is set but mode is Agent: an agent keeps no blocks for a sidecar to serve \
         or upload; remove spec.thanos or use mode Server"
    )]
    Agent,
    #[error(
        "spec.containers has a container named thanos-sidecar: that is the sidecar spec.thanos \
         adds; rename the container, or remove it and use spec.thanos"
    )]
    SidecarContainer,
    #[error(
        "spec.containers has a container named {0:?}: names starting with thanos-upload- are \
         the final upload's (spec.thanos); rename the container"
    )]
    UploadContainer(String),
    #[error(
        "spec.thanos.objectStorageConfig needs both name and key: the Secret, and its key \
         holding Thanos's objstore configuration"
    )]
    ObjectStorage,
    #[error("spec.thanos.logLevel {0:?} is not one of debug, info, warn, error")]
    LogLevel(String),
    #[error("spec.thanos.logFormat {0:?} is not one of logfmt, json")]
    LogFormat(String),
    #[error(transparent)]
    BlockSize(DurationError),
    #[error(
        "spec.thanos.grpcServerTlsConfig: {0}; the files are paths in the sidecar \
         (spec.thanos.volumeMounts)"
    )]
    Tls(&'static str),
    #[error(
        "spec.thanos.additionalArgs[{0}]: the flag name must be non-empty, without leading \
         dashes or '='"
    )]
    ArgumentName(usize),
    #[error(
        "spec.thanos.additionalArgs: --{0} is set by the controller; use its field instead \
         (see the ShardedPrometheus reference)"
    )]
    ReservedArgument(String),
    #[error(
        "spec.additionalArgs: --{0} is set by the controller to spec.thanos.blockSize while the \
         sidecar uploads blocks (Prometheus must not compact them)"
    )]
    BlockDurationArgument(String),
}

impl ShardedPrometheusSpec {
    /// `spec.thanos`, checked; None when not set.
    pub(super) fn thanos(&self) -> Result<Option<ValidThanos>, SpromError> {
        let Some(thanos) = &self.thanos else {
            return Ok(None);
        };
        if self.mode == PrometheusMode::Agent {
            return Err(ThanosError::Agent.into());
        }
        if self
            .containers
            .iter()
            .any(|container| container.name == THANOS_SIDECAR_CONTAINER)
        {
            return Err(ThanosError::SidecarContainer.into());
        }
        if let Some(container) = self
            .containers
            .iter()
            .find(|container| container.name.starts_with(THANOS_UPLOAD_CONTAINER_PREFIX))
        {
            return Err(ThanosError::UploadContainer(container.name.clone()).into());
        }
        let object_storage = thanos
            .object_storage_config
            .as_ref()
            .map(object_storage)
            .transpose()?;
        if object_storage.is_some() {
            self.check_block_duration_flags()?;
        }
        let log_level = non_empty_or(thanos.log_level.as_deref(), "info");
        if !["debug", "info", "warn", "error"].contains(&log_level.as_str()) {
            return Err(ThanosError::LogLevel(log_level).into());
        }
        let log_format = non_empty_or(thanos.log_format.as_deref(), "logfmt");
        if !["logfmt", "json"].contains(&log_format.as_str()) {
            return Err(ThanosError::LogFormat(log_format).into());
        }
        let block_size = non_empty_or(thanos.block_size.as_deref(), DEFAULT_BLOCK_SIZE);
        duration("spec.thanos.blockSize", &block_size).map_err(ThanosError::BlockSize)?;
        if let Some(tls) = &thanos.grpc_server_tls_config {
            check_tls(tls)?;
        }
        let version = non_empty_or(thanos.version.as_deref(), DEFAULT_THANOS_VERSION);
        let image = match thanos.image.as_deref().filter(|image| !image.is_empty()) {
            Some(image) => image.to_string(),
            None => format!("{DEFAULT_THANOS_REPOSITORY}:{version}"),
        };
        Ok(Some(ValidThanos {
            image,
            object_storage,
            tls: thanos.grpc_server_tls_config.clone(),
            resources: thanos.resources.clone(),
            log_level,
            log_format,
            block_size,
            additional_args: sidecar_args(&thanos.additional_args)?,
            volume_mounts: thanos.volume_mounts.clone(),
            upload_before_deletion: thanos.upload_before_deletion != Some(false),
        }))
    }

    /// `spec.additionalArgs` leaves the block durations to an uploading sidecar.
    fn check_block_duration_flags(&self) -> Result<(), ThanosError> {
        match self
            .additional_args
            .iter()
            .find(|argument| BLOCK_DURATION_FLAGS.contains(&argument.name.as_str()))
        {
            Some(argument) => Err(ThanosError::BlockDurationArgument(argument.name.clone())),
            None => Ok(()),
        }
    }
}

fn object_storage(selector: &SecretKeySelector) -> Result<ObjectStorage, ThanosError> {
    if selector.name.is_empty() || selector.key.is_empty() {
        return Err(ThanosError::ObjectStorage);
    }
    Ok(ObjectStorage {
        secret: selector.name.clone(),
        key: selector.key.clone(),
    })
}

fn check_tls(tls: &ThanosTlsConfig) -> Result<(), ThanosError> {
    let given = |file: &Option<String>| file.as_deref().is_some_and(|f| !f.is_empty());
    match (
        given(&tls.cert_file),
        given(&tls.key_file),
        given(&tls.ca_file),
    ) {
        (true, true, _) => Ok(()),
        (true, false, _) | (false, true, _) => {
            Err(ThanosError::Tls("certFile and keyFile go together"))
        }
        (false, false, true) => Err(ThanosError::Tls(
            "caFile verifies clients of a TLS server: give certFile and keyFile too",
        )),
        (false, false, false) => Err(ThanosError::Tls("give certFile and keyFile")),
    }
}

/// `spec.thanos.additionalArgs` as `--name[=value]` flags, none of [`RESERVED_SIDECAR_FLAGS`].
fn sidecar_args(arguments: &[crate::sprom::Argument]) -> Result<Vec<String>, ThanosError> {
    flags(arguments, RESERVED_SIDECAR_FLAGS).map_err(|error| match error {
        FlagError::Name(index) => ThanosError::ArgumentName(index),
        FlagError::Reserved(name) => ThanosError::ReservedArgument(name),
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use serde_json::json;

    fn spec(thanos: serde_json::Value, extra: serde_json::Value) -> ShardedPrometheusSpec {
        let mut value = json!({"shards": 1, "thanos": thanos});
        if let (Some(map), Some(extra)) = (value.as_object_mut(), extra.as_object()) {
            map.extend(extra.clone());
        }
        serde_json::from_value(value).unwrap()
    }

    fn checked(thanos: serde_json::Value) -> Result<Option<ValidThanos>, SpromError> {
        spec(thanos, json!({})).thanos()
    }

    #[test]
    fn defaults_are_the_operators() {
        let valid = checked(json!({})).unwrap().unwrap();
        assert_eq!(valid.image, "quay.io/thanos/thanos:v0.42.5");
        assert_eq!(
            (valid.log_level.as_str(), valid.log_format.as_str()),
            ("info", "logfmt")
        );
        assert_eq!(valid.block_size, "2h");
        assert_eq!(valid.object_storage, None);
        let versioned = checked(json!({"version": "v0.41.0"})).unwrap().unwrap();
        assert_eq!(versioned.image, "quay.io/thanos/thanos:v0.41.0");
        let image = checked(json!({"image": "registry.example/thanos:x", "version": "v1"}));
        assert_eq!(image.unwrap().unwrap().image, "registry.example/thanos:x");
        assert_eq!(spec(json!(null), json!({})).thanos().unwrap(), None);
    }

    #[test]
    fn refusals_name_the_field_and_the_way_out() {
        let cases = [
            (
                json!({"logLevel": "trace"}),
                "spec.thanos.logLevel \"trace\"",
            ),
            (json!({"logFormat": "xml"}), "spec.thanos.logFormat \"xml\""),
            (json!({"blockSize": "2 hours"}), "spec.thanos.blockSize"),
            (
                json!({"objectStorageConfig": {"name": "objstore"}}),
                "needs both name and key",
            ),
            (
                json!({"grpcServerTlsConfig": {"certFile": "/tls/crt"}}),
                "certFile and keyFile go together",
            ),
            (
                json!({"grpcServerTlsConfig": {"caFile": "/tls/ca"}}),
                "give certFile and keyFile too",
            ),
            (
                json!({"additionalArgs": [{"name": "--tsdb.path"}]}),
                "additionalArgs[0]",
            ),
            (
                json!({"additionalArgs": [{"name": "objstore.config", "value": "x"}]}),
                "--objstore.config is set by the controller",
            ),
        ];
        for (thanos, expected) in cases {
            let error = checked(thanos.clone()).unwrap_err().to_string();
            assert!(error.contains(expected), "{thanos}: {error}");
        }
        let own = spec(
            json!({}),
            json!({"containers": [{"name": "thanos-sidecar"}]}),
        );
        assert!(
            own.thanos()
                .unwrap_err()
                .to_string()
                .contains("named thanos-sidecar")
        );
        let upload = spec(
            json!({}),
            json!({"containers": [{"name": "thanos-upload-1"}]}),
        );
        assert!(
            upload
                .thanos()
                .unwrap_err()
                .to_string()
                .contains("\"thanos-upload-1\"")
        );
        let agent = spec(
            json!({}),
            json!({"mode": "Agent", "remoteWrite": [{"url": "http://x"}]}),
        );
        assert!(
            agent
                .thanos()
                .unwrap_err()
                .to_string()
                .contains("mode is Agent")
        );
    }

    /// Under an uploading sidecar the block durations are the controller's; without uploads
    /// they stay the user's.
    #[test]
    fn block_duration_flags_are_reserved_only_while_uploading() {
        let args =
            json!({"additionalArgs": [{"name": "storage.tsdb.max-block-duration", "value": "6h"}]});
        let uploading = json!({"objectStorageConfig": {"name": "objstore", "key": "objstore.yml"}});
        let error = spec(uploading, args.clone())
            .thanos()
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("--storage.tsdb.max-block-duration is set by the controller"),
            "{error}"
        );
        assert!(spec(json!({}), args).thanos().is_ok());
    }
}
