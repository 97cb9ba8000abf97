//! The Thanos sidecar of every shard pod (`spec.thanos`), what it changes in the Prometheus
//! container, and the headless Service through which a Querier finds every shard's sidecar.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Container, ContainerPort, EnvVar, EnvVarSource, Probe, SecretKeySelector, SecurityContext,
    Service, ServicePort, ServiceSpec, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use zone_api::sprom::{ObjectStorage, THANOS_SIDECAR_CONTAINER, ValidThanos};

use super::http_probe;

/// The sidecar's StoreAPI (gRPC) port, as prometheus-operator's.
pub const GRPC_PORT: i32 = 10901;
/// The sidecar's HTTP port: its metrics and probes.
pub const HTTP_PORT: i32 = 10902;
/// The environment variable holding the objstore configuration (from the Secret key), expanded
/// by the kubelet into the flag: the configuration is never written into the pod spec.
const OBJSTORE_ENV: &str = "OBJSTORE_CONFIG";

/// The headless Service of the sidecars of every shard of `name`, active and retained:
/// `dnssrv+_grpc._tcp.<service>.<namespace>.svc` finds them all.
pub fn service_name(name: &str) -> String {
    format!("{name}-thanos-sidecar")
}

/// Prometheus flags under the sidecar: with uploads, blocks are cut at `blockSize` and never
/// compacted locally (a compacted block would be uploaded again, overlapping its parts); with
/// the final upload of removed shards, the admin API, whose snapshot writes the head as a block.
pub fn prometheus_args(thanos: &ValidThanos) -> Vec<String> {
    let mut args = match thanos.object_storage {
        Some(_) => vec![
            format!("--storage.tsdb.min-block-duration={}", thanos.block_size),
            format!("--storage.tsdb.max-block-duration={}", thanos.block_size),
        ],
        None => Vec::new(),
    };
    if thanos.final_upload() {
        args.push("--web.enable-admin-api".to_string());
    }
    args
}

/// The sidecar of a shard pod: it reads Prometheus at localhost and its TSDB from the data
/// volume (`data_mount`), serves the StoreAPI and uploads blocks when given an object store.
pub fn sidecar(
    thanos: &ValidThanos,
    web_port: i32,
    data_mount: VolumeMount,
    security_context: SecurityContext,
) -> Container {
    let (args, env) = sidecar_args(thanos, web_port, &data_mount.mount_path);
    let probe = |path: &str| http_probe(path, "http");
    Container {
        name: THANOS_SIDECAR_CONTAINER.into(),
        image: Some(thanos.image.clone()),
        args: Some(args),
        env: (!env.is_empty()).then_some(env),
        ports: Some(vec![port("grpc", GRPC_PORT), port("http", HTTP_PORT)]),
        readiness_probe: Some(probe("/-/ready")),
        liveness_probe: Some(Probe {
            failure_threshold: Some(6),
            ..probe("/-/healthy")
        }),
        resources: thanos.resources.clone(),
        volume_mounts: Some(
            std::iter::once(data_mount)
                .chain(thanos.volume_mounts.iter().cloned())
                .collect(),
        ),
        security_context: Some(security_context),
        ..Container::default()
    }
}

/// Adds the log flags and, with an object store, its flag to `args`; returns the environment that
/// flag reads the configuration from (the sidecar's and the upload's alike).
pub(crate) fn logging_and_objstore(thanos: &ValidThanos, args: &mut Vec<String>) -> Vec<EnvVar> {
    args.push(format!("--log.level={}", thanos.log_level));
    args.push(format!("--log.format={}", thanos.log_format));
    let Some(store) = &thanos.object_storage else {
        return Vec::new();
    };
    args.push(format!("--objstore.config=$({OBJSTORE_ENV})"));
    vec![objstore_env(store)]
}

fn objstore_env(store: &ObjectStorage) -> EnvVar {
    EnvVar {
        name: OBJSTORE_ENV.into(),
        value_from: Some(EnvVarSource {
            secret_key_ref: Some(SecretKeySelector {
                name: store.secret.clone(),
                key: store.key.clone(),
                optional: None,
            }),
            ..EnvVarSource::default()
        }),
        ..EnvVar::default()
    }
}

/// The sidecar's flags, and the environment they read the objstore configuration from.
fn sidecar_args(
    thanos: &ValidThanos,
    web_port: i32,
    tsdb_path: &str,
) -> (Vec<String>, Vec<EnvVar>) {
    let mut args = vec![
        "sidecar".to_string(),
        format!("--prometheus.url=http://localhost:{web_port}/"),
        format!("--grpc-address=:{GRPC_PORT}"),
        format!("--http-address=:{HTTP_PORT}"),
        format!("--tsdb.path={tsdb_path}"),
    ];
    let env = logging_and_objstore(thanos, &mut args);
    if let Some(tls) = &thanos.tls {
        for (flag, file) in [
            ("grpc-server-tls-cert", &tls.cert_file),
            ("grpc-server-tls-key", &tls.key_file),
            ("grpc-server-tls-client-ca", &tls.ca_file),
        ] {
            if let Some(file) = file.as_deref().filter(|f| !f.is_empty()) {
                args.push(format!("--{flag}={file}"));
            }
        }
    }
    args.extend(thanos.additional_args.iter().cloned());
    (args, env)
}

fn port(name: &str, port: i32) -> ContainerPort {
    ContainerPort {
        name: Some(name.into()),
        container_port: port,
        ..ContainerPort::default()
    }
}

/// The headless Service selecting every pod of the ShardedPrometheus (`labels`: the labels
/// every child and pod carries), with the sidecars' ports. Its names include pods that are not
/// Ready: a Querier checks each sidecar itself (and leaves out one that does not answer), so a
/// shard back from a dark zone is queried again as soon as its sidecar answers, not once its
/// kubelet has reported it Ready, its EndpointSlice changed and the Querier looked the name up
/// again (its `--store.sd-dns-interval`, 30 s by default). Meanwhile the other zones' shards
/// drop its zoneless targets: queried late, those targets were missing from global answers.
pub fn service(name: &str, namespace: &str, labels: &BTreeMap<String, String>) -> Service {
    let service_port = |name: &str, port: i32| ServicePort {
        name: Some(name.into()),
        port,
        target_port: Some(IntOrString::String(name.into())),
        ..ServicePort::default()
    };
    Service {
        metadata: ObjectMeta {
            name: Some(service_name(name)),
            namespace: Some(namespace.to_string()),
            labels: Some(labels.clone()),
            ..ObjectMeta::default()
        },
        spec: Some(ServiceSpec {
            cluster_ip: Some("None".into()),
            selector: Some(labels.clone()),
            ports: Some(vec![
                service_port("grpc", GRPC_PORT),
                service_port("http", HTTP_PORT),
            ]),
            publish_not_ready_addresses: Some(true),
            ..ServiceSpec::default()
        }),
        ..Service::default()
    }
}
