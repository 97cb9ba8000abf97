//! Flags (each with an environment fallback): the runtime's [`BaseArgs`] and the federator's
//! own.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, ValueEnum};
use zone_api::sprom::contract;
use zone_operator::BaseArgs;

/// The replica label of Thanos and of many Prometheus setups, removed by default beside the
/// ShardedPrometheus one.
const THANOS_REPLICA_LABEL: &str = "replica";
/// The replica label of Thanos Rulers as prometheus-operator (and `config/thanos`) labels them:
/// their replicas' rules collapse by default too.
const THANOS_RULER_REPLICA_LABEL: &str = "thanos_ruler_replica";

/// What a request gets when some backends fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PartialResponse {
    /// Answer from the backends that answered, with one warning per failed backend.
    Warn,
    /// Fail the request (HTTP 503, `errorType: unavailable`).
    Abort,
}

/// The permission a caller needs by default: `get` on a subresource of ShardedPrometheus that
/// the API server does not serve, so granting it grants nothing else.
pub const DEFAULT_AUTHZ_RESOURCE: &str =
    "group=zonecontrol.k8s.aws,resource=shardedprometheuses,subresource=rules";

/// Who may call the API.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Auth {
    /// Anyone who can reach the port (keep the port private: a NetworkPolicy, a sidecar).
    None,
    /// A bearer token checked by a TokenReview, its user by a SubjectAccessReview (see
    /// `--authz-resource`); 401 without a valid token, 403 without the permission.
    Kubernetes,
}

/// How Prometheus is spoken to in the discovered pods.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Scheme {
    Http,
    /// TLS, verified as `--backend-ca-file` and `--backend-server-name` say.
    Https,
    /// Thanos's gRPC Rules API: each pod's Thanos sidecar (`--discover-port 10901`).
    Grpc,
    /// gRPC over TLS, verified (and a client certificate presented) as for `https`.
    Grpcs,
}

impl Scheme {
    pub fn as_str(self) -> &'static str {
        match self {
            Scheme::Http => "http",
            Scheme::Https => "https",
            Scheme::Grpc => "grpc",
            Scheme::Grpcs => "grpcs",
        }
    }
}

/// A byte size: a number, optionally with Ki, Mi or Gi.
fn parse_bytes(text: &str) -> Result<u64, String> {
    let (number, shift) = [("Gi", 30), ("Mi", 20), ("Ki", 10)]
        .iter()
        .find_map(|(suffix, shift)| text.strip_suffix(suffix).map(|n| (n, *shift)))
        .unwrap_or((text, 0));
    let value: u64 = number
        .trim()
        .parse()
        .map_err(|_| format!("{text:?}: expected bytes, e.g. 67108864 or 64Mi"))?;
    value
        .checked_mul(1 << shift)
        .filter(|bytes| *bytes > 0)
        .ok_or_else(|| format!("{text:?}: out of range"))
}

/// A Prometheus-compatible rules and alerts API over many Prometheus servers: shards are kept
/// apart, replicas of one shard deduplicated.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "rules-federator",
    version,
    about,
    long_about = None,
    // A later flag overrides an earlier one: the chart's extraArgs can override what it sets.
    args_override_self = true,
    // The API shares the runtime's port, and clients (Grafana data sources, the Service) know it
    // as Prometheus's 9090, not the controllers' 8080.
    mut_arg("listen_address", |arg| arg
        .default_value("[::]:9090")
        .help("Where /api/v1/rules, /api/v1/alerts, /healthz, /readyz and /metrics are served")),
    // The pod watch of discovery is a handful of pods and lists as it always has; the flag would
    // change nothing.
    mut_arg("initial_list", |arg| arg.hide(true)),
)]
pub struct Args {
    // Listen address, logging, kubeconfig (read for discovery only) and identity, as every
    // binary's.
    #[command(flatten)]
    pub base: BaseArgs,

    /// A Prometheus to ask, as its base URL; repeat the flag for more. The fragment tells its
    /// shard and replica: `http://prom-a:9090#shard=0&replica=a`. Endpoints without a shard
    /// are replicas of one unsharded Prometheus. `grpc[s]://host:port` is a Thanos Rules API
    /// (a sidecar, Ruler, Querier). Backends named in DNS as Thanos names them:
    /// `dnssrv+grpc://_grpc._tcp.<service>.<namespace>.svc` (each SRV target's addresses, at the
    /// record's port) and `dns+http://<host>:<port>` (each address of the host); without a
    /// scheme (`dnssrv+_grpc._tcp.<name>`) they are gRPC. Looked up every --dns-sd-interval.
    #[arg(
        long = "endpoint",
        env = "ZAC_ENDPOINTS",
        value_delimiter = ',',
        value_name = "URL"
    )]
    pub endpoints: Vec<String>,

    /// Discover the Prometheus pods of this ShardedPrometheus (a watch of its pods; shard and
    /// replica from their labels). Given twice, the last wins.
    #[arg(
        long,
        env = "ZAC_DISCOVER_SPROM",
        value_name = "NAME",
        overrides_with = "discover_sprom"
    )]
    pub discover_sprom: Option<String>,

    /// Discover the pods this label selector finds instead (with `--discover-port`).
    #[arg(
        long,
        env = "ZAC_DISCOVER_SELECTOR",
        value_name = "SELECTOR",
        conflicts_with = "discover_sprom"
    )]
    pub discover_selector: Option<String>,

    /// The namespace of the discovered pods (default: the kubeconfig's, or the pod's own). Given
    /// twice, the last wins (an overlay may append it to the shipped arguments).
    #[arg(
        long,
        env = "ZAC_DISCOVER_NAMESPACE",
        value_name = "NAMESPACE",
        overrides_with = "discover_namespace"
    )]
    pub discover_namespace: Option<String>,

    /// The port Prometheus serves on in the discovered pods.
    #[arg(long, env = "ZAC_DISCOVER_PORT", default_value_t = 9090)]
    pub discover_port: u16,

    /// How the discovered pods are asked: `https` when their Prometheus serves TLS (its web
    /// config); `grpc` (or `grpcs`) to read their Thanos sidecars' Rules API instead, with
    /// `--discover-port 10901`. They are dialled by IP: give `--backend-server-name` for the
    /// name their certificate holds.
    #[arg(long, env = "ZAC_DISCOVER_SCHEME", value_enum, default_value_t = Scheme::Http)]
    pub discover_scheme: Scheme,

    /// PEM bundle of the CAs that `https://` backends' certificates are verified against,
    /// instead of the system's.
    #[arg(long, env = "ZAC_BACKEND_CA_FILE", value_name = "FILE")]
    pub backend_ca_file: Option<PathBuf>,

    /// The client certificate (PEM chain) presented to `https://` backends that ask for one,
    /// with `--backend-key-file`.
    #[arg(
        long,
        env = "ZAC_BACKEND_CERT_FILE",
        value_name = "FILE",
        requires = "backend_key_file"
    )]
    pub backend_cert_file: Option<PathBuf>,

    /// The key (PEM) of `--backend-cert-file`.
    #[arg(
        long,
        env = "ZAC_BACKEND_KEY_FILE",
        value_name = "FILE",
        requires = "backend_cert_file"
    )]
    pub backend_key_file: Option<PathBuf>,

    /// The name `https://` backends' certificates are verified for (and sent as SNI), instead
    /// of the host dialled: discovered pods are dialled by IP.
    #[arg(long, env = "ZAC_BACKEND_SERVER_NAME", value_name = "NAME")]
    pub backend_server_name: Option<String>,

    /// A file holding a bearer token sent to every backend (`Authorization: Bearer`), re-read
    /// every 10 s so a rotated one (a projected ServiceAccount token) is sent without a restart.
    #[arg(long, env = "ZAC_BACKEND_BEARER_TOKEN_FILE", value_name = "FILE")]
    pub backend_bearer_token_file: Option<PathBuf>,

    /// Serve the API, /healthz, /readyz and /metrics over HTTPS only, with the `tls.crt` and
    /// `tls.key` of this directory (a mounted Secret, cert-manager's), re-read every few seconds
    /// so a renewed certificate is served without a restart.
    #[arg(long, env = "ZAC_TLS_CERT_DIR", value_name = "DIR")]
    pub tls_cert_dir: Option<PathBuf>,

    /// Serve over HTTPS only, with a self-signed CA and certificate kept in this Secret of the
    /// federator's namespace: the first replica creates it, every replica serves it and renews
    /// it before it ends, as zdb-controller's webhook does. Clients trust the Secret's `ca.crt`
    /// and dial `<--tls-service-name>.<namespace>.svc`. Not with --tls-cert-dir.
    #[arg(
        long,
        env = "ZAC_TLS_SELF_SIGNED_SECRET",
        value_name = "SECRET",
        conflicts_with = "tls_cert_dir"
    )]
    pub tls_self_signed_secret: Option<String>,

    /// Namespace of --tls-self-signed-secret (default: the namespace of the kubeconfig context
    /// or of the pod's service account).
    #[arg(long, env = "ZAC_TLS_SECRET_NAMESPACE", value_name = "NAMESPACE")]
    pub tls_secret_namespace: Option<String>,

    /// The Service in front of the federator: the self-signed certificate is valid for
    /// <service>.<namespace>.svc (and .svc.cluster.local, localhost, 127.0.0.1).
    #[arg(
        long,
        env = "ZAC_TLS_SERVICE_NAME",
        default_value = "rules-federator",
        value_name = "SERVICE"
    )]
    pub tls_service_name: String,

    /// How long a self-signed serving certificate is valid; it is renewed under the same CA, so
    /// clients keep trusting it.
    #[arg(long, env = "ZAC_TLS_CERT_VALIDITY", default_value = "8760h", value_parser = zone_operator::duration::parse_duration, value_name = "DURATION")]
    pub tls_cert_validity: Duration,

    /// How long before its end a self-signed serving certificate is renewed: at least 30s and
    /// below the validity.
    #[arg(long, env = "ZAC_TLS_CERT_RENEW_BEFORE", default_value = "720h", value_parser = zone_operator::duration::parse_duration, value_name = "DURATION")]
    pub tls_cert_renew_before: Duration,

    /// How often the DNS endpoints (dns+, dnssrv+) are looked up again; a lookup that fails
    /// keeps the backends the name had.
    #[arg(long, env = "ZAC_DNS_SD_INTERVAL", default_value = "30s", value_parser = zone_operator::duration::parse_duration, value_name = "DURATION")]
    pub dns_sd_interval: Duration,

    /// The DNS server (`ip:port`) the DNS endpoints are looked up at, instead of those of
    /// /etc/resolv.conf (whose search domains then do not apply: give full names).
    #[arg(long, env = "ZAC_DNS_SERVER", value_name = "ADDRESS")]
    pub dns_server: Option<std::net::SocketAddr>,

    /// How long one backend may take to answer before it is cut and named in a warning.
    #[arg(long, env = "ZAC_ENDPOINT_TIMEOUT", default_value = "10s", value_parser = zone_operator::duration::parse_duration)]
    pub endpoint_timeout: Duration,

    /// Backends asked at once, at most, per request.
    #[arg(long, env = "ZAC_MAX_CONCURRENCY", default_value_t = 32, value_parser = clap::value_parser!(u16).range(1..))]
    pub max_concurrency: u16,

    /// Different merges at once, at most. A request's backends are asked at once and their
    /// answers kept compressed; the merge (and the answer it builds, most of a request's memory)
    /// waits for a turn. Identical requests at once share one merge and one turn; each merge
    /// already uses every core, so a second one at once shares the cores and doubles the memory.
    #[arg(long, env = "ZAC_MAX_CONCURRENT_MERGES", default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..))]
    pub max_concurrent_merges: u16,

    /// Bytes read from one backend's answer (compressed, as it comes), at most: past it the
    /// backend is cut and named in a warning. The recorded Prometheus answer of the perf fixture
    /// is ~1.4 MB plain per backend.
    #[arg(long, env = "ZAC_MAX_BACKEND_BODY_BYTES", default_value = "64Mi", value_parser = parse_bytes, value_name = "BYTES")]
    pub max_backend_body_bytes: u64,

    /// Bytes of JSON one backend's answer may come to (gunzipped or plain), at most: a gzip
    /// bomb stops here.
    #[arg(long, env = "ZAC_MAX_BACKEND_UNCOMPRESSED_BYTES", default_value = "256Mi", value_parser = parse_bytes, value_name = "BYTES")]
    pub max_backend_uncompressed_bytes: u64,

    /// API requests served at once, at most; past it a request is answered 503 with
    /// `Retry-After` at once (never queued: a queue would hold memory and time out anyway).
    #[arg(long, env = "ZAC_MAX_CONCURRENT_REQUESTS", default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_concurrent_requests: u32,

    /// Who may call /api/v1/rules and /api/v1/alerts (/healthz, /readyz and /metrics stay
    /// open: probes and scrapes).
    #[arg(long, env = "ZAC_AUTH", value_enum, default_value_t = Auth::None)]
    pub auth: Auth,

    /// With `--auth=kubernetes`: the audience a caller's token must be issued for (`kubectl
    /// create token --audience`, a projected token's `audience`), e.g. `rules-federator`, so a
    /// token given to the federator is no key to the API server, nor the API server's to the
    /// federator. Unset: tokens for the API server's own audience.
    #[arg(long, env = "ZAC_AUTH_AUDIENCE", value_name = "AUDIENCE")]
    pub auth_audience: Option<String>,

    /// With `--auth=kubernetes`: the resource attribute a caller needs `--authz-verb` on,
    /// `namespace=N,group=G,resource=R,subresource=S,name=X` (only `resource` required). Never
    /// the request's path as a non-resource URL: Kubernetes' default `system:discovery` role
    /// lets every authenticated user `get` `/api/*`, which would include /api/v1/alerts.
    #[arg(long, env = "ZAC_AUTHZ_RESOURCE", value_name = "ATTRIBUTES", default_value = DEFAULT_AUTHZ_RESOURCE)]
    pub authz_resource: String,

    /// The verb a caller needs (on the resource, or on the path).
    #[arg(long, env = "ZAC_AUTHZ_VERB", default_value = "get")]
    pub authz_verb: String,

    /// How long an allowed caller's token is trusted without new reviews (a revoked
    /// RoleBinding bites after this).
    #[arg(long, env = "ZAC_AUTH_CACHE_TTL", default_value = "1m", value_parser = zone_operator::duration::parse_duration)]
    pub auth_cache_ttl: Duration,

    /// How long a refused token stays refused without new reviews.
    #[arg(long, env = "ZAC_AUTH_DENIED_CACHE_TTL", default_value = "10s", value_parser = zone_operator::duration::parse_duration)]
    pub auth_denied_cache_ttl: Duration,

    /// After SIGTERM, how long the API keeps being served while /readyz already answers 503:
    /// the time for the pod's removal from the Service's endpoints to reach every client's
    /// proxy. Answers meanwhile say `Connection: close`, so kept-alive clients move to another
    /// replica; then the listener closes and the requests under way are finished. The pod's
    /// terminationGracePeriodSeconds must exceed it plus --endpoint-timeout.
    #[arg(long, env = "ZAC_SHUTDOWN_DELAY", default_value = "5s", value_parser = zone_operator::duration::parse_duration, value_name = "DURATION")]
    pub shutdown_delay: Duration,

    /// What a request gets when some backends fail.
    #[arg(long, env = "ZAC_PARTIAL_RESPONSE", value_enum, default_value_t = PartialResponse::Warn)]
    pub partial_response: PartialResponse,

    /// Serve Thanos's gRPC Rules and Info APIs on this address too (Thanos's gRPC port is
    /// 10901), so a Thanos Querier can take the federator as one of its `--endpoint`s. Off by
    /// default. A gRPC request's own partial response strategy decides what its failed backends
    /// make of it. With HTTPS (--tls-cert-dir or --tls-self-signed-secret), over TLS only, with
    /// the HTTPS port's certificate (reloaded or renewed as it is); with --auth=kubernetes, a
    /// Rules call's bearer token (`authorization` metadata) is reviewed as an HTTP caller's;
    /// --max-concurrent-requests counts its calls too.
    #[arg(long, env = "ZAC_GRPC_LISTEN_ADDRESS", value_name = "ADDRESS")]
    pub grpc_listen_address: Option<std::net::SocketAddr>,

    /// The gRPC port asks callers for a client certificate signed by a CA of this PEM file (a
    /// Thanos Querier's --grpc-client-tls-cert, which sends no bearer token). With
    /// --auth=kubernetes a caller presenting one is the user its subject's common name names
    /// (its organizations the groups, as the API server reads client certificates) and only
    /// its permission is reviewed; callers without one still send a bearer token. Without
    /// --auth, the certificate is required. Needs TLS; read at start.
    #[arg(long, env = "ZAC_GRPC_CLIENT_CA_FILE", value_name = "PATH")]
    pub grpc_client_ca_file: Option<PathBuf>,

    /// Labels that differ between the replicas of one shard, removed before rules and alerts
    /// are compared (repeatable).
    #[arg(long = "replica-label", env = "ZAC_REPLICA_LABELS", value_delimiter = ',', default_values_t = [contract::REPLICA_EXTERNAL_LABEL.to_string(), THANOS_REPLICA_LABEL.to_string(), THANOS_RULER_REPLICA_LABEL.to_string()])]
    pub replica_labels: Vec<String>,

    /// The label that tells the shards' rules and alerts apart; empty: none.
    #[arg(long, env = "ZAC_SHARD_LABEL", default_value = contract::SHARD_EXTERNAL_LABEL)]
    pub shard_label: String,
}

impl Args {
    /// The TLS files and name of the backends' flags.
    pub fn backend_tls_files(&self) -> crate::backends::connector::TlsFiles {
        crate::backends::connector::TlsFiles {
            ca: self.backend_ca_file.clone(),
            client: self
                .backend_cert_file
                .clone()
                .zip(self.backend_key_file.clone()),
            server_name: self.backend_server_name.clone(),
        }
    }

    /// The label selector of the discovered pods, if discovery is on.
    pub fn discovery_selector(&self) -> Option<String> {
        if let Some(name) = &self.discover_sprom {
            return Some(contract::children_selector(name));
        }
        self.discover_selector.clone()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn an_overlay_may_append_the_namespace_again() {
        let args = Args::try_parse_from([
            "rules-federator",
            "--discover-sprom=prometheus",
            "--discover-namespace=default",
            "--discover-namespace=mine",
        ])
        .unwrap();
        assert_eq!(args.discover_namespace.as_deref(), Some("mine"));
        // So may any flag: the chart's extraArgs can override the chart's flags.
        assert!(<Args as clap::CommandFactory>::command().is_args_override_self());
        assert!(
            zone_operator::cli::env::unprefixed(&<Args as clap::CommandFactory>::command())
                .is_empty()
        );
        assert_eq!(
            args.discovery_selector().as_deref(),
            Some(
                "app.kubernetes.io/instance=prometheus,app.kubernetes.io/managed-by=shard-controller"
            )
        );
    }

    /// The flags of docs/rules-federator.md, config/manager/rules-federator.yaml,
    /// e2e/cluster/run-controllers.sh and the e2e tests, with the documented defaults. The
    /// environment fallbacks are checked only where the test machine sets none.
    #[test]
    fn every_documented_flag_parses_with_its_default() {
        let defaults = Args::try_parse_from(["rules-federator"]).unwrap();
        let unset = |name: &str| std::env::var_os(name).is_none();
        if unset("ZAC_LISTEN_ADDRESS") {
            assert_eq!(defaults.base.listen_address, "[::]:9090".parse().unwrap());
        }
        if unset("ZAC_DISCOVER_PORT") {
            assert_eq!(defaults.discover_port, 9090);
        }
        if unset("ZAC_DISCOVER_SCHEME") {
            assert_eq!(defaults.discover_scheme, Scheme::Http);
        }
        for (name, given) in [
            ("ZAC_BACKEND_CA_FILE", &defaults.backend_ca_file),
            ("ZAC_BACKEND_CERT_FILE", &defaults.backend_cert_file),
            ("ZAC_BACKEND_KEY_FILE", &defaults.backend_key_file),
            (
                "ZAC_BACKEND_BEARER_TOKEN_FILE",
                &defaults.backend_bearer_token_file,
            ),
            ("ZAC_TLS_CERT_DIR", &defaults.tls_cert_dir),
        ] {
            if unset(name) {
                assert_eq!(*given, None, "{name}");
            }
        }
        if unset("ZAC_TLS_SELF_SIGNED_SECRET") {
            assert_eq!(defaults.tls_self_signed_secret, None);
        }
        if unset("ZAC_TLS_SECRET_NAMESPACE") {
            assert_eq!(defaults.tls_secret_namespace, None);
        }
        if unset("ZAC_TLS_SERVICE_NAME") {
            assert_eq!(defaults.tls_service_name, "rules-federator");
        }
        if unset("ZAC_TLS_CERT_VALIDITY") {
            assert_eq!(defaults.tls_cert_validity, Duration::from_secs(8760 * 3600));
        }
        if unset("ZAC_TLS_CERT_RENEW_BEFORE") {
            assert_eq!(
                defaults.tls_cert_renew_before,
                Duration::from_secs(720 * 3600)
            );
        }
        if unset("ZAC_BACKEND_SERVER_NAME") {
            assert_eq!(defaults.backend_server_name, None);
        }
        if unset("ZAC_ENDPOINT_TIMEOUT") {
            assert_eq!(defaults.endpoint_timeout, Duration::from_secs(10));
        }
        if unset("ZAC_MAX_CONCURRENCY") {
            assert_eq!(defaults.max_concurrency, 32);
        }
        if unset("ZAC_MAX_CONCURRENT_MERGES") {
            assert_eq!(defaults.max_concurrent_merges, 1);
        }
        if unset("ZAC_PARTIAL_RESPONSE") {
            assert_eq!(defaults.partial_response, PartialResponse::Warn);
        }
        if unset("ZAC_REPLICA_LABELS") {
            assert_eq!(
                defaults.replica_labels,
                ["prometheus_replica", "replica", "thanos_ruler_replica"]
            );
        }
        if unset("ZAC_SHARD_LABEL") {
            assert_eq!(defaults.shard_label, "shard");
        }
        if unset("ZAC_MAX_BACKEND_BODY_BYTES") {
            assert_eq!(defaults.max_backend_body_bytes, 64 << 20);
        }
        if unset("ZAC_MAX_BACKEND_UNCOMPRESSED_BYTES") {
            assert_eq!(defaults.max_backend_uncompressed_bytes, 256 << 20);
        }
        if unset("ZAC_MAX_CONCURRENT_REQUESTS") {
            assert_eq!(defaults.max_concurrent_requests, 64);
        }
        if unset("ZAC_AUTH") {
            assert_eq!(defaults.auth, Auth::None);
        }
        if unset("ZAC_AUTHZ_RESOURCE") {
            assert_eq!(defaults.authz_resource, DEFAULT_AUTHZ_RESOURCE);
        }
        if unset("ZAC_AUTH_CACHE_TTL") {
            assert_eq!(defaults.auth_cache_ttl, Duration::from_secs(60));
        }
        if unset("ZAC_AUTH_DENIED_CACHE_TTL") {
            assert_eq!(defaults.auth_denied_cache_ttl, Duration::from_secs(10));
        }
        if unset("ZAC_SHUTDOWN_DELAY") {
            assert_eq!(defaults.shutdown_delay, Duration::from_secs(5));
        }

        let args = Args::try_parse_from([
            "rules-federator",
            "--listen-address",
            "127.0.0.1:9091",
            "--endpoint",
            "http://a:9090#shard=0&replica=a",
            "--endpoint=http://b:9090,http://c:9090",
            "--discover-selector",
            "app=prometheus",
            "--discover-namespace=monitoring",
            "--discover-port=9091",
            "--discover-scheme=https",
            "--backend-ca-file=/etc/prometheus-ca/ca.crt",
            "--backend-cert-file",
            "/etc/federator-client/tls.crt",
            "--backend-key-file=/etc/federator-client/tls.key",
            "--backend-server-name=prometheus.monitoring.svc",
            "--backend-bearer-token-file=/var/run/secrets/tokens/prometheus",
            "--tls-cert-dir=/etc/federator-serving",
            "--endpoint-timeout=1s",
            "--max-concurrency=4",
            "--max-concurrent-merges=2",
            "--partial-response=abort",
            "--replica-label=r",
            "--shard-label=",
            "--max-backend-body-bytes=1Mi",
            "--max-backend-uncompressed-bytes=4096",
            "--max-concurrent-requests=3",
            "--auth=kubernetes",
            "--authz-resource=resource=shardedprometheuses,subresource=alerts",
            "--authz-verb=list",
            "--auth-cache-ttl=30s",
            "--auth-denied-cache-ttl=2s",
            "--shutdown-delay=0s",
            "--kubeconfig=/dev/null",
            "--kube-context=kind",
            "--log-format",
            "json",
            "--log-level=warn",
        ])
        .unwrap();
        assert_eq!(args.base.listen_address, "127.0.0.1:9091".parse().unwrap());
        assert_eq!(
            args.endpoints,
            [
                "http://a:9090#shard=0&replica=a",
                "http://b:9090",
                "http://c:9090"
            ]
        );
        assert_eq!(args.discovery_selector().as_deref(), Some("app=prometheus"));
        assert_eq!(args.discover_namespace.as_deref(), Some("monitoring"));
        assert_eq!(args.discover_port, 9091);
        assert_eq!(args.discover_scheme, Scheme::Https);
        let files = args.backend_tls_files();
        assert_eq!(
            files.ca.as_deref(),
            Some(std::path::Path::new("/etc/prometheus-ca/ca.crt"))
        );
        assert_eq!(
            files.client,
            Some((
                PathBuf::from("/etc/federator-client/tls.crt"),
                PathBuf::from("/etc/federator-client/tls.key")
            ))
        );
        assert_eq!(
            files.server_name.as_deref(),
            Some("prometheus.monitoring.svc")
        );
        assert_eq!(
            args.backend_bearer_token_file,
            Some(PathBuf::from("/var/run/secrets/tokens/prometheus"))
        );
        assert_eq!(
            args.tls_cert_dir,
            Some(PathBuf::from("/etc/federator-serving"))
        );
        assert_eq!(args.endpoint_timeout, Duration::from_secs(1));
        assert_eq!(args.max_concurrency, 4);
        assert_eq!(args.max_concurrent_merges, 2);
        assert_eq!(args.partial_response, PartialResponse::Abort);
        assert_eq!(args.replica_labels, ["r"]);
        assert_eq!(args.shard_label, "");
        assert_eq!(args.max_backend_body_bytes, 1 << 20);
        assert_eq!(args.max_backend_uncompressed_bytes, 4096);
        assert_eq!(args.max_concurrent_requests, 3);
        assert_eq!(args.auth, Auth::Kubernetes);
        assert_eq!(
            args.authz_resource,
            "resource=shardedprometheuses,subresource=alerts"
        );
        assert_eq!(args.authz_verb, "list");
        assert_eq!(args.auth_cache_ttl, Duration::from_secs(30));
        assert_eq!(args.auth_denied_cache_ttl, Duration::from_secs(2));
        assert_eq!(args.shutdown_delay, Duration::ZERO);
        for bad in ["--max-backend-body-bytes=0", "--max-backend-body-bytes=1Ti"] {
            assert!(
                Args::try_parse_from(["rules-federator", bad]).is_err(),
                "{bad}"
            );
        }
        assert_eq!(
            args.base.kubeconfig.as_deref(),
            Some(std::path::Path::new("/dev/null"))
        );
        assert_eq!(args.base.kube_context.as_deref(), Some("kind"));
        assert_eq!(args.base.log_format, zone_operator::LogFormat::Json);
        assert_eq!(args.base.log_level, "warn");
        assert!(
            Args::try_parse_from(["rules-federator", "--max-concurrency=0"]).is_err(),
            "at least one backend at a time"
        );
        for half in ["--backend-cert-file=c", "--backend-key-file=k"] {
            if unset("ZAC_BACKEND_CERT_FILE") && unset("ZAC_BACKEND_KEY_FILE") {
                assert!(
                    Args::try_parse_from(["rules-federator", half]).is_err(),
                    "{half}: a client certificate needs its key, and a key its certificate"
                );
            }
        }
        assert!(Args::try_parse_from(["rules-federator", "--discover-scheme=ftp"]).is_err());
    }

    #[test]
    fn a_self_signed_secret_or_a_cert_dir_not_both() {
        let args = Args::try_parse_from([
            "rules-federator",
            "--tls-self-signed-secret=rules-federator-tls",
            "--tls-secret-namespace=monitoring",
            "--tls-service-name=federator",
            "--tls-cert-validity=1h",
            "--tls-cert-renew-before=10m",
        ])
        .unwrap();
        assert_eq!(
            args.tls_self_signed_secret.as_deref(),
            Some("rules-federator-tls")
        );
        assert_eq!(args.tls_secret_namespace.as_deref(), Some("monitoring"));
        assert_eq!(args.tls_service_name, "federator");
        assert_eq!(args.tls_cert_validity, Duration::from_secs(3600));
        assert_eq!(args.tls_cert_renew_before, Duration::from_secs(600));
        let both = Args::try_parse_from([
            "rules-federator",
            "--tls-self-signed-secret=rules-federator-tls",
            "--tls-cert-dir=/etc/federator-serving",
        ]);
        assert!(both.is_err(), "one source of the serving certificate");
    }
}
