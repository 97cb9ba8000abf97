//! Command-line flags of the ZoneDisruptionBudget controller and eviction webhook (the shared
//! runtime flags are flattened in).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use zone_operator::duration::parse_duration;
use zone_operator::{RuntimeArgs, ScopeArgs};

use crate::webhook::policy::Policy;

/// Keeps the status of ZoneDisruptionBudgets (zonecontrol.k8s.aws/v1) and serves the validating
/// webhook that judges pod evictions against them: many evictions in one zone, none in any other
/// zone meanwhile. The status controller runs on the leader only; the webhook serves on every
/// replica.
#[derive(Debug, Parser)]
#[command(name = "zdb-controller", version, args_override_self = true)]
pub struct Args {
    #[command(flatten)]
    pub runtime: RuntimeArgs,

    #[command(flatten)]
    pub scope: ScopeArgs,

    /// Address of the HTTPS server answering AdmissionReviews at /validate-eviction.
    #[arg(
        long,
        env = "ZAC_WEBHOOK_ADDRESS",
        default_value = "[::]:9443",
        value_name = "HOST:PORT"
    )]
    pub webhook_address: SocketAddr,

    /// Serve a certificate kept in the Secret --tls-secret-name: the first replica creates a CA
    /// and a serving certificate there, every replica serves from it, and the caBundle of
    /// --webhook-config-name is patched from it. Without this flag the certificate is read from
    /// --cert-dir (e.g. mounted from a cert-manager Secret) and reloaded when it changes.
    #[arg(long, env = "ZAC_SELF_SIGNED", default_value_t = false)]
    pub self_signed: bool,

    /// Secret holding the self-signed CA and serving certificate (--self-signed).
    #[arg(
        long,
        env = "ZAC_TLS_SECRET_NAME",
        default_value = "zdb-webhook-tls",
        value_name = "NAME"
    )]
    pub tls_secret_name: String,

    /// Namespace of --tls-secret-name (default: the namespace of the kubeconfig context or of
    /// the pod's service account).
    #[arg(long, env = "ZAC_TLS_SECRET_NAMESPACE", value_name = "NAMESPACE")]
    pub tls_secret_namespace: Option<String>,

    /// Service in front of the webhook: the self-signed certificate is valid for
    /// <service>.<namespace>.svc (and .svc.cluster.local, 127.0.0.1, localhost).
    #[arg(
        long,
        env = "ZAC_SERVICE_NAME",
        default_value = "zdb-webhook",
        value_name = "NAME"
    )]
    pub service_name: String,

    /// Namespace of --service-name (default: as --tls-secret-namespace).
    #[arg(long, env = "ZAC_SERVICE_NAMESPACE", value_name = "NAMESPACE")]
    pub service_namespace: Option<String>,

    /// ValidatingWebhookConfiguration whose caBundle is kept equal to the self-signed CA.
    #[arg(
        long,
        env = "ZAC_WEBHOOK_CONFIG_NAME",
        default_value = "zone-aware-eviction-webhook",
        value_name = "NAME"
    )]
    pub webhook_config_name: String,

    /// The failurePolicy the webhook configuration (--webhook-config-name) is moved to. It is
    /// shipped at Ignore, so a replica that never serves (a wrong image, no certificate) blocks
    /// no eviction; a replica switches it to Fail once it serves with a certificate the
    /// configuration's caBundle trusts, its caches synced and (for a Service) itself a ready
    /// endpoint. Ignore leaves the configuration as it is: budgets are then skipped whenever
    /// the webhook cannot be called.
    #[arg(
        long,
        env = "ZAC_WEBHOOK_FAILURE_POLICY",
        value_enum,
        ignore_case = true,
        default_value = "Fail",
        value_name = "POLICY"
    )]
    pub webhook_failure_policy: Policy,

    /// How long a self-signed serving certificate is valid (--self-signed). It is renewed under
    /// the same CA, so the webhook configuration's caBundle does not change.
    #[arg(long, env = "ZAC_WEBHOOK_CERT_VALIDITY", default_value = "8760h", value_parser = parse_duration, value_name = "DURATION")]
    pub webhook_cert_validity: Duration,

    /// How long before its end a self-signed serving certificate is renewed (--self-signed); at
    /// least 30s (every replica re-reads the Secret every 10s) and below the validity. A Secret
    /// whose certificate is expired, not valid yet or lacks the Service's names is replaced at
    /// once.
    #[arg(long, env = "ZAC_WEBHOOK_CERT_RENEW_BEFORE", default_value = "720h", value_parser = parse_duration, value_name = "DURATION")]
    pub webhook_cert_renew_before: Duration,

    /// Directory with tls.crt and tls.key (without --self-signed). Re-read every few seconds, so
    /// a rotated Secret (a `..data` symlink swap) is served without a restart.
    #[arg(
        long,
        env = "ZAC_CERT_DIR",
        default_value = "/tmp/k8s-webhook-server/serving-certs",
        value_name = "DIR"
    )]
    pub cert_dir: PathBuf,

    /// CA certificates (PEM) of the API server's client certificate for webhooks (its
    /// `--admission-control-config-file` kubeconfig, docs/zdb.md): an eviction review is then
    /// judged only from a caller that presented a certificate they signed; any other is
    /// answered 401 and recorded nowhere. Off by default: most managed control planes cannot
    /// present one, and a record that no eviction follows stops counting after 10 s anyway.
    #[arg(long, env = "ZAC_WEBHOOK_CLIENT_CA_FILE", value_name = "FILE")]
    pub webhook_client_ca_file: Option<PathBuf>,

    /// How long the webhook may take to decide an eviction, re-reading the budget after write
    /// conflicts (another replica or the controller wrote it first) or waiting for a slow API
    /// server, before answering 429 (the client retries); well below the webhook's
    /// timeoutSeconds, past which the API server fails the eviction with a 500.
    #[arg(long, env = "ZAC_DECISION_DEADLINE", default_value = "3s", value_parser = parse_duration, value_name = "DURATION")]
    pub decision_deadline: Duration,

    /// After SIGTERM, how long the webhook keeps accepting calls while /readyz already answers
    /// 503: the time for the pod's removal from the webhook Service's endpoints to reach the API
    /// server, which does not retry a refused call. Then the listener closes and the decisions
    /// in flight get --decision-deadline (plus 1s) to be answered; the pod's
    /// terminationGracePeriodSeconds must exceed the sum. Endpoints follow a deleted pod within
    /// a second or two on a quiet control plane; a loaded one (and a readiness probe, for a
    /// replica stopped without deletion) takes longer.
    #[arg(long, env = "ZAC_SHUTDOWN_DELAY", default_value = "5s", value_parser = parse_duration, value_name = "DURATION")]
    pub shutdown_delay: Duration,

    /// How long a budget read fresh may serve to refuse further evictions it covers, while
    /// this replica's watch still holds that version (any change to the budget retires it at
    /// once). Saves a read of the budget per refused eviction during a drain; allowed evictions
    /// always read it fresh. 0 reads it fresh for every decision.
    #[arg(long, env = "ZAC_DENIAL_CACHE_TTL", default_value = "250ms", value_parser = parse_duration, value_name = "DURATION")]
    pub denial_cache_ttl: Duration,

    /// The user (as the API server authenticates it) whose evictions are the zau-controller's,
    /// e.g. `system:serviceaccount:zone-aware-system:zau-controller`; repeatable. Its evictions
    /// of pods that a ZoneAwareUpdate is rolling, in the zone it rolls, are not capped by the
    /// zone's budget (every other zone stays undisrupted meanwhile). None by default: every
    /// eviction is judged alike.
    #[arg(
        long = "rollout-user",
        env = "ZAC_ROLLOUT_USERS",
        value_delimiter = ',',
        value_name = "USER"
    )]
    pub rollout_users: Vec<String>,
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn deployment_flags_parse() {
        let args = Args::try_parse_from([
            "zdb-controller",
            "--webhook-address",
            "0.0.0.0:9443",
            "--self-signed",
            "--tls-secret-name",
            "zdb-webhook-tls",
            "--tls-secret-namespace",
            "zone-aware-system",
            "--service-name",
            "zdb-webhook",
            "--service-namespace",
            "zone-aware-system",
            "--webhook-config-name",
            "zone-aware-eviction-webhook",
            "--cert-dir",
            "/certs",
            "--decision-deadline",
            "2s",
        ])
        .unwrap();
        assert!(args.self_signed);
        assert_eq!(args.webhook_address, "0.0.0.0:9443".parse().unwrap());
        assert_eq!(
            args.tls_secret_namespace.as_deref(),
            Some("zone-aware-system")
        );
        assert_eq!(args.cert_dir, PathBuf::from("/certs"));
        assert_eq!(args.decision_deadline, Duration::from_secs(2));
    }

    #[test]
    fn failure_policy_and_certificate_flags_parse() {
        let defaults = Args::try_parse_from(["zdb-controller"]).unwrap();
        assert_eq!(defaults.webhook_failure_policy, Policy::Fail);
        assert_eq!(defaults.shutdown_delay, Duration::from_secs(5));
        assert_eq!(
            defaults.webhook_cert_renew_before,
            Duration::from_secs(720 * 3600)
        );
        let args = Args::try_parse_from([
            "zdb-controller",
            "--webhook-failure-policy",
            "Ignore",
            "--webhook-cert-validity",
            "60s",
            "--webhook-cert-renew-before",
            "40s",
        ])
        .unwrap();
        assert_eq!(args.webhook_failure_policy, Policy::Ignore);
        assert_eq!(args.webhook_cert_validity, Duration::from_secs(60));
        assert_eq!(args.webhook_cert_renew_before, Duration::from_secs(40));
    }

    #[test]
    fn help_is_consistent() {
        Args::command().debug_assert();
        assert!(zone_operator::cli::env::unprefixed(&Args::command()).is_empty());
    }

    /// The chart sets `--log-format json`; `extraArgs: [--log-format, plain]` comes after it
    /// and wins, where clap would refuse the repeated flag and the pod crash-loop.
    #[test]
    fn a_flag_given_again_overrides_the_first() {
        let args = Args::try_parse_from([
            "zdb-controller",
            "--log-format",
            "json",
            "--webhook-address",
            "[::]:9443",
            "--log-format",
            "plain",
        ])
        .unwrap();
        assert_eq!(
            args.runtime.base.log_format,
            zone_operator::cli::LogFormat::Plain
        );
    }
}
