//! Command-line flags every binary shares: `#[command(flatten)]` [`RuntimeArgs`] into its own args.
//!
//! Every flag also reads an environment variable (`ZAC_<FLAG>`, [`env`]), so a Deployment can set
//! them with `env:` and the downward API (`POD_NAME`, `POD_NAMESPACE`) without templating the
//! command line. Binaries parse with [`parse`], which reads the old unprefixed names for one more
//! release.

use std::{net::SocketAddr, path::PathBuf, time::Duration};

use clap::{ArgAction, Args, ValueEnum};

pub mod env;

pub use env::{parse, take_notices};

use crate::duration::parse_duration;
use crate::watch::InitialList;

/// Why the identity default could not be computed.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    #[error("--identity is not set (env POD_NAME) and the host name cannot be read")]
    Hostname(#[source] std::io::Error),
}

/// How log lines are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// One JSON object per line, for log collectors.
    Json,
    /// Human-readable lines, for a terminal.
    Plain,
}

/// Flags every binary shares: connection, health/metrics server, logging, identity, caches.
/// Stateless servers flatten this alone ([`crate::Runtime::server`]): their `--help`
/// shows no lease flags.
#[derive(Clone, Debug, Args)]
pub struct BaseArgs {
    /// Kubeconfig file to connect with (several may be joined with ':' as in KUBECONFIG).
    /// When unset: ~/.kube/config if it exists, else the in-cluster service account.
    #[arg(long, env = "KUBECONFIG", value_name = "PATH")]
    pub kubeconfig: Option<PathBuf>,

    /// Kubeconfig context to use instead of its current-context.
    #[arg(long, env = "ZAC_KUBE_CONTEXT", value_name = "NAME")]
    pub kube_context: Option<String>,

    /// Address of the HTTP server for /healthz (liveness), /readyz (readiness) and /metrics
    /// (Prometheus). `[::]` takes IPv4 and IPv6 (IPv4 only where there is no IPv6).
    #[arg(
        long,
        env = "ZAC_LISTEN_ADDRESS",
        default_value = "[::]:8080",
        value_name = "HOST:PORT"
    )]
    pub listen_address: SocketAddr,

    /// Log line format: `json` for log collectors, `plain` for a terminal.
    #[arg(long, env = "ZAC_LOG_FORMAT", value_enum, default_value_t = LogFormat::Plain)]
    pub log_format: LogFormat,

    /// Log filter: a level (error, warn, info, debug, trace) or per-module directives such as
    /// "info,kube=warn,zau_controller=debug".
    #[arg(long, env = "RUST_LOG", default_value = "info", value_name = "FILTER")]
    pub log_level: String,

    /// Unique name of this replica in the Lease and in events (default: host name plus a random
    /// suffix). In a pod, set POD_NAME from the downward API.
    #[arg(long, env = "POD_NAME", value_name = "NAME")]
    pub identity: Option<String>,

    /// How the caches load their initial state: `stream` (a streaming list, far less memory with
    /// thousands of pods; needs the API server's WatchList feature, on by default in Kubernetes
    /// 1.32 and from 1.34), `paginated` (LIST then WATCH, any server) or `auto` (ask the server
    /// once at start-up).
    #[arg(long, env = "ZAC_INITIAL_LIST", value_enum, default_value_t = InitialList::Auto)]
    pub initial_list: InitialList,

    /// How long a connection to this process's servers (health/metrics, webhook, API) has to
    /// send a whole request head, a new connection or a kept-alive one between requests (the
    /// idle timeout); then it is closed.
    #[arg(long, env = "ZAC_HTTP_HEADER_TIMEOUT", default_value = "10s", value_parser = parse_duration, value_name = "DURATION")]
    pub http_header_timeout: Duration,

    /// How long a TLS handshake with this process's HTTPS servers may take.
    #[arg(long, env = "ZAC_TLS_HANDSHAKE_TIMEOUT", default_value = "10s", value_parser = parse_duration, value_name = "DURATION")]
    pub tls_handshake_timeout: Duration,

    /// Connections each of this process's servers keeps open at once; past it, new ones are
    /// closed at once and counted in http_connections_refused_total{server}.
    #[arg(long, env = "ZAC_MAX_CONNECTIONS", default_value_t = 1024, value_parser = clap::value_parser!(u32).range(1..), value_name = "N")]
    pub max_connections: u32,
}

/// Lease-based leader election, for controllers that must act from one replica at a time.
#[derive(Clone, Debug, Args)]
pub struct LeaderArgs {
    /// Take a Lease before acting, so only one replica reconciles at a time. Keep it on when
    /// running more than one replica; `--leader-elect=false` is for local runs.
    #[arg(
        long,
        env = "ZAC_LEADER_ELECT",
        action = ArgAction::Set,
        num_args = 0..=1,
        default_value_t = true,
        default_missing_value = "true",
        value_name = "BOOL"
    )]
    pub leader_elect: bool,

    /// Name of the coordination.k8s.io Lease used for leader election (default: the binary's
    /// controller name). Replicas that share it elect one leader among themselves.
    #[arg(long, env = "ZAC_LEASE_NAME", value_name = "NAME")]
    pub lease_name: Option<String>,

    /// Namespace of the Lease (default: the namespace of the kubeconfig context or of the pod's
    /// service account).
    #[arg(long, env = "POD_NAMESPACE", value_name = "NAMESPACE")]
    pub lease_namespace: Option<String>,

    /// How long a leader's Lease stays valid without renewal; a standby takes over after this
    /// (whole seconds, e.g. "15s").
    #[arg(long, env = "ZAC_LEASE_DURATION", default_value = "15s", value_parser = parse_duration, value_name = "DURATION")]
    pub lease_duration: Duration,

    /// How often the leader renews the Lease and a standby retries; must be shorter than
    /// --lease-duration. A leader that cannot renew for (lease duration - renew interval) stops.
    #[arg(long, env = "ZAC_RENEW_INTERVAL", default_value = "5s", value_parser = parse_duration, value_name = "DURATION")]
    pub renew_interval: Duration,
}

/// Flags of a leader-elected controller binary: `#[command(flatten)]` this into its args.
#[derive(Clone, Debug, Args)]
pub struct RuntimeArgs {
    #[command(flatten)]
    pub base: BaseArgs,

    #[command(flatten)]
    pub leader: LeaderArgs,
}

impl BaseArgs {
    /// The identity of this replica: `--identity`, else `<hostname>-<random>`.
    ///
    /// The random suffix matters when two processes run on one host (local runs, or a restarted
    /// container sharing the pod's host name with a still-terminating one): two replicas with the
    /// same identity would both believe they hold the Lease. Call it once and keep the result.
    pub fn resolve_identity(&self) -> Result<String, CliError> {
        if let Some(identity) = self.identity.as_ref().filter(|i| !i.is_empty()) {
            return Ok(identity.clone());
        }
        let host = hostname::get().map_err(CliError::Hostname)?;
        Ok(format!(
            "{}-{:08x}",
            host.to_string_lossy(),
            random_suffix()
        ))
    }
}

/// 32 random bits from the standard library's per-process hash seed; no RNG dependency needed for
/// a uniqueness suffix.
fn random_suffix() -> u32 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default(),
    );
    hasher.write_u32(std::process::id());
    (hasher.finish() >> 32) as u32
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct TestArgs {
        #[command(flatten)]
        runtime: RuntimeArgs,
    }

    // Environment variables leak into clap's parsing; these tests pass explicit flags for every
    // value they check so an exported KUBECONFIG or RUST_LOG on the test machine cannot change them.

    #[test]
    fn defaults_match_the_documented_values() {
        let args =
            TestArgs::try_parse_from(["bin", "--log-level", "info", "--log-format", "plain"])
                .unwrap()
                .runtime;
        if std::env::var_os("ZAC_LISTEN_ADDRESS").is_none() {
            assert_eq!(args.base.listen_address, "[::]:8080".parse().unwrap());
        }
        if std::env::var_os("ZAC_LEADER_ELECT").is_none() {
            assert!(args.leader.leader_elect);
        }
        if std::env::var_os("ZAC_LEASE_DURATION").is_none() {
            assert_eq!(args.leader.lease_duration, Duration::from_secs(15));
        }
        if std::env::var_os("ZAC_RENEW_INTERVAL").is_none() {
            assert_eq!(args.leader.renew_interval, Duration::from_secs(5));
        }
        assert_eq!(args.base.log_level, "info");
        assert_eq!(args.base.log_format, LogFormat::Plain);
    }

    #[test]
    fn parses_every_flag() {
        let args = TestArgs::try_parse_from([
            "bin",
            "--kubeconfig",
            "/tmp/kc",
            "--kube-context",
            "kind-zones",
            "--listen-address",
            "127.0.0.1:9090",
            "--log-format",
            "json",
            "--log-level",
            "debug,kube=warn",
            "--leader-elect=false",
            "--lease-name",
            "zau",
            "--lease-namespace",
            "zone-system",
            "--identity",
            "zau-0",
            "--lease-duration",
            "30s",
            "--renew-interval",
            "1m",
        ])
        .unwrap()
        .runtime;
        assert_eq!(args.base.kubeconfig, Some(PathBuf::from("/tmp/kc")));
        assert_eq!(args.base.kube_context.as_deref(), Some("kind-zones"));
        assert_eq!(args.base.listen_address, "127.0.0.1:9090".parse().unwrap());
        assert_eq!(args.base.log_format, LogFormat::Json);
        assert_eq!(args.base.log_level, "debug,kube=warn");
        assert!(!args.leader.leader_elect);
        assert_eq!(args.leader.lease_name.as_deref(), Some("zau"));
        assert_eq!(args.leader.lease_namespace.as_deref(), Some("zone-system"));
        assert_eq!(args.base.identity.as_deref(), Some("zau-0"));
        assert_eq!(args.leader.lease_duration, Duration::from_secs(30));
        assert_eq!(args.leader.renew_interval, Duration::from_secs(60));
    }

    #[test]
    fn a_stateless_server_shows_no_lease_flags() {
        use clap::CommandFactory;

        #[derive(Debug, Parser)]
        struct ServerArgs {
            #[command(flatten)]
            base: BaseArgs,
        }
        let server = ServerArgs::command().render_long_help().to_string();
        assert!(server.contains("--listen-address"), "{server}");
        assert!(server.contains("--initial-list"), "{server}");
        assert!(!server.contains("--lease"), "{server}");
        assert!(!server.contains("--leader-elect"), "{server}");
        let controller = TestArgs::command().render_long_help().to_string();
        assert!(controller.contains("--lease-duration"), "{controller}");
        assert!(controller.contains("--leader-elect"), "{controller}");
    }

    #[test]
    fn bare_leader_elect_flag_means_true() {
        let args = TestArgs::try_parse_from(["bin", "--leader-elect"])
            .unwrap()
            .runtime;
        assert!(args.leader.leader_elect);
    }

    #[test]
    fn rejects_bad_values() {
        assert!(TestArgs::try_parse_from(["bin", "--lease-duration", "15"]).is_err());
        assert!(TestArgs::try_parse_from(["bin", "--log-format", "xml"]).is_err());
        assert!(TestArgs::try_parse_from(["bin", "--listen-address", "8080"]).is_err());
        assert!(TestArgs::try_parse_from(["bin", "--leader-elect=maybe"]).is_err());
    }

    #[test]
    fn explicit_identity_wins_and_default_is_unique() {
        let mut args = TestArgs::try_parse_from(["bin", "--identity", "zau-1"])
            .unwrap()
            .runtime;
        assert_eq!(args.base.resolve_identity().unwrap(), "zau-1");
        args.base.identity = None;
        let first = args.base.resolve_identity().unwrap();
        let second = args.base.resolve_identity().unwrap();
        let host = hostname::get().unwrap().to_string_lossy().into_owned();
        assert!(first.starts_with(&format!("{host}-")), "{first}");
        assert_ne!(
            first, second,
            "two processes on one host must not share an identity"
        );
    }
}
