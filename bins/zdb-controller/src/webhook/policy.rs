//! The webhook configuration's `failurePolicy`: shipped as `Ignore`, moved to `Fail` by a replica
//! once the API server's call would reach a replica that judges it.
//!
//! With `Fail` from the first `make deploy`, a wrong image name, a slow certificate or a crash
//! loop refuses every eviction (drains, the cluster autoscaler) in the covered namespaces before
//! any replica ever served. So the configuration starts at `Ignore`, and a replica switches it
//! only when it has seen, itself, everything the API server's call needs:
//!
//! 1. its caches synced (a decision before that would place every pod in the unknown zone);
//! 2. a call of its own listener, as the API server makes it: TLS trusting only the
//!    configuration's caBundle for the name the API server dials, and an AdmissionReview
//!    answered (the certificate is served, valid, trusted; the handler answers);
//! 3. for a configuration naming a Service, its pod Ready for a few seconds, so the Service's
//!    endpoints include it (else the API server's call finds no endpoint, and `Fail` refuses
//!    it).
//!
//! Once `Fail`, it stays: a webhook that served and then went away fails closed, as designed. A
//! configuration still at `Ignore` a while after this replica started serving is reported (a
//! Warning event on the configuration, a log line; the gauge shows it all along).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::admissionregistration::v1::{
    ValidatingWebhook, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::core::v1::{ObjectReference, Pod};
use kube::api::{Patch, PatchParams};
use kube::{Api, Client, Resource};
use serde_json::json;
use zone_operator::{ErrorChain, EventPublisher};

use crate::metrics::ZdbMetrics;

/// How often the configuration is checked while not yet at the wanted policy (then rarely: a
/// re-applied configuration at `Ignore` is switched back within this long once it is seen).
const CHECK_WHILE_IGNORE: Duration = Duration::from_secs(5);
const CHECK_WHEN_DONE: Duration = Duration::from_secs(10);

/// How long this replica's pod must have been Ready before the API server is sure to find it
/// among the Service's ready endpoints (the endpoints controller follows pods within a second).
const ENDPOINT_PROPAGATION: Duration = Duration::from_secs(5);

/// A configuration left at `Ignore` this long after this replica started serving is reported:
/// long enough for a Service's endpoints to follow the readiness probe (5 s period).
pub const REPORT_AFTER: Duration = Duration::from_secs(60);

/// The failure policy of a webhook.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Policy {
    // Spelled as in the configuration.
    #[value(name = "Fail")]
    Fail,
    #[value(name = "Ignore")]
    Ignore,
}

impl Policy {
    pub fn as_str(self) -> &'static str {
        match self {
            Policy::Fail => "Fail",
            Policy::Ignore => "Ignore",
        }
    }

    /// A webhook's `failurePolicy` as stored; unset is `Fail` (the v1 default).
    fn of(webhook: &ValidatingWebhook) -> Policy {
        match webhook.failure_policy.as_deref() {
            Some("Ignore") => Policy::Ignore,
            _ => Policy::Fail,
        }
    }
}

/// What this replica saw of the path of the API server's call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checks {
    pub caches_synced: bool,
    /// The call of its own listener, or why it failed.
    pub self_call: Result<(), String>,
    /// For a Service configuration: whether this replica's pod is Ready, so an endpoint of the
    /// Service (None: a URL configuration, nothing to check).
    pub ready_endpoint: Option<bool>,
}

/// What to do with the configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Every webhook is at the wanted policy (or the wanted policy is `Ignore`: left alone).
    Done,
    /// Patch these webhooks to `Fail`.
    Switch(Vec<String>),
    /// Not yet: why.
    Wait(String),
}

/// The step for the webhooks `(name, policy)` of the configuration (pure).
pub fn step(wanted: Policy, webhooks: &[(String, Policy)], checks: &Checks) -> Step {
    let at_ignore: Vec<String> = webhooks
        .iter()
        .filter(|(_, policy)| *policy == Policy::Ignore)
        .map(|(name, _)| name.clone())
        .collect();
    // `--webhook-failure-policy Ignore`: the operator chose to fail open; never switched.
    if wanted == Policy::Ignore || at_ignore.is_empty() {
        return Step::Done;
    }
    if !checks.caches_synced {
        return Step::Wait("the webhook's caches are not synced yet".to_string());
    }
    if let Err(why) = &checks.self_call {
        return Step::Wait(format!("a call of this replica's webhook failed: {why}"));
    }
    if checks.ready_endpoint == Some(false) {
        return Step::Wait(
            "this replica's pod is not yet Ready (a ready endpoint of the webhook's Service)"
                .to_string(),
        );
    }
    Step::Switch(at_ignore)
}

/// Whether a configuration still waiting is to be reported now: once, [`REPORT_AFTER`] after
/// this replica started serving.
pub fn report_due(serving_for: Duration, reported: bool) -> bool {
    !reported && serving_for >= REPORT_AFTER
}

/// Where the API server sends its call, as the configuration's first webhook says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// The name the API server verifies the certificate for.
    pub server_name: String,
    /// The Service (namespace, name), when it is one.
    pub service: Option<(String, String)>,
    pub ca_bundle: Vec<u8>,
}

/// The target of `webhook`; None when it names neither a Service nor a URL with a host.
pub fn target(webhook: &ValidatingWebhook) -> Option<Target> {
    let config = &webhook.client_config;
    let ca_bundle = config
        .ca_bundle
        .as_ref()
        .map(|b| b.0.clone())
        .unwrap_or_default();
    if let Some(service) = &config.service {
        return Some(Target {
            server_name: format!("{}.{}.svc", service.name, service.namespace),
            service: Some((service.namespace.clone(), service.name.clone())),
            ca_bundle,
        });
    }
    let url = config.url.as_deref()?;
    let rest = url.strip_prefix("https://")?;
    let authority = rest.split('/').next()?;
    let host = match authority.strip_prefix('[') {
        Some(v6) => v6.split(']').next()?,
        None => authority
            .rsplit_once(':')
            .map_or(authority, |(host, _)| host),
    };
    Some(Target {
        server_name: host.to_string(),
        service: None,
        ca_bundle,
    })
}

/// Why the configuration `webhooks` would not send every eviction to this webhook's `path`, if it
/// would not: no webhook's rules match `CREATE` of `pods/eviction`, the one that does calls another
/// path, or its objectSelector needs labels (an Eviction has none). What a replica may not repair
/// (its token changes only the caBundle and the failurePolicy): it is reported instead.
pub fn bypass(webhooks: &[ValidatingWebhook], path: &str) -> Option<String> {
    let Some(webhook) = webhooks.iter().find(|w| covers_evictions(w)) else {
        return Some(match webhooks.is_empty() {
            true => "the configuration has no webhook".to_string(),
            false => "no webhook's rules match CREATE of pods/eviction".to_string(),
        });
    };
    let config = &webhook.client_config;
    let called = match (&config.service, config.url.as_deref()) {
        (Some(service), _) => service.path.clone().unwrap_or_default(),
        (None, Some(url)) => url
            .strip_prefix("https://")
            .and_then(|rest| rest.find('/').map(|at| rest[at..].to_string()))
            .unwrap_or_default(),
        (None, None) => String::new(),
    };
    if called != path {
        return Some(format!(
            "webhook {} calls the path {called:?}, this webhook serves {path}",
            webhook.name
        ));
    }
    let selective = webhook.object_selector.as_ref().is_some_and(|selector| {
        !selector
            .match_labels
            .as_ref()
            .is_none_or(|labels| labels.is_empty())
            || selector
                .match_expressions
                .iter()
                .flatten()
                .any(|e| e.operator == "In" || e.operator == "Exists")
    });
    selective.then(|| {
        format!(
            "webhook {} has an objectSelector that needs labels, and an Eviction has none",
            webhook.name
        )
    })
}

/// Whether one of `webhook`'s rules matches `CREATE` of `pods/eviction` (core group, v1).
fn covers_evictions(webhook: &ValidatingWebhook) -> bool {
    let has = |list: &Option<Vec<String>>, wanted: &[&str]| {
        list.iter()
            .flatten()
            .any(|item| wanted.contains(&item.as_str()))
    };
    webhook.rules.iter().flatten().any(|rule| {
        has(&rule.api_groups, &["", "*"])
            && has(&rule.api_versions, &["v1", "*"])
            && has(&rule.operations, &["CREATE", "*"])
            && has(
                &rule.resources,
                &["pods/eviction", "pods/*", "*/eviction", "*/*"],
            )
            && rule.scope.as_deref().is_none_or(|scope| scope != "Cluster")
    })
}

/// The address to call one's own listener at: its bound address, loopback for a wildcard.
pub fn local_address(bound: SocketAddr) -> SocketAddr {
    match bound.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => (Ipv4Addr::LOCALHOST, bound.port()).into(),
        IpAddr::V6(ip) if ip.is_unspecified() => (Ipv6Addr::LOCALHOST, bound.port()).into(),
        _ => bound,
    }
}

/// An AdmissionReview of something that is not an eviction: the webhook allows it at once
/// without reading anything.
fn probe_review() -> Vec<u8> {
    json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "00000000-0000-0000-0000-000000000000",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "operation": "CREATE",
            "userInfo": {"username": "zdb-controller-self-check"},
            "namespace": "zdb-controller-self-check",
            "name": "probe",
            "dryRun": true,
        },
    })
    .to_string()
    .into_bytes()
}

/// What the loop needs.
pub struct Keeper {
    pub client: Client,
    pub config_name: String,
    pub wanted: Policy,
    pub address: SocketAddr,
    pub path: &'static str,
    /// This replica's pod name (`--identity`, env POD_NAME): its endpoint in the Service.
    pub identity: String,
    pub caches_synced: Arc<AtomicBool>,
    pub metrics: ZdbMetrics,
    pub events: EventPublisher,
}

impl Keeper {
    /// Runs until aborted, from the moment this replica serves.
    pub async fn run(self) {
        let serving_since = Instant::now();
        let mut reported = false;
        // The last bypass reported (None: none, or not read yet).
        let mut bypassed: Option<String> = None;
        let api: Api<ValidatingWebhookConfiguration> = Api::all(self.client.clone());
        loop {
            let pause = match api.get_opt(&self.config_name).await {
                Ok(Some(config)) => {
                    self.check_coverage(&config, &mut bypassed).await;
                    let done = self
                        .check(&api, &config, serving_since, &mut reported)
                        .await;
                    if done {
                        CHECK_WHEN_DONE
                    } else {
                        CHECK_WHILE_IGNORE
                    }
                }
                Ok(None) => {
                    self.metrics.failure_policies(&[]);
                    self.metrics.covers_evictions(&self.config_name, false);
                    tracing::warn!(config = %self.config_name, "ValidatingWebhookConfiguration not found; its failurePolicy is checked once it exists");
                    CHECK_WHILE_IGNORE
                }
                Err(error) => {
                    tracing::warn!(error = %ErrorChain(&error), config = %self.config_name, "cannot read the ValidatingWebhookConfiguration");
                    CHECK_WHILE_IGNORE
                }
            };
            tokio::time::sleep(pause).await;
        }
    }

    /// Whether the configuration still sends every eviction here (the gauge); a Warning event
    /// on the configuration when that stops, or why changes.
    async fn check_coverage(
        &self,
        config: &ValidatingWebhookConfiguration,
        bypassed: &mut Option<String>,
    ) {
        let why = bypass(config.webhooks.as_deref().unwrap_or_default(), self.path);
        self.metrics
            .covers_evictions(&self.config_name, why.is_none());
        if why == *bypassed {
            return;
        }
        if let Some(why) = &why {
            tracing::warn!(config = %self.config_name, why = %why, "the eviction webhook configuration no longer sends every eviction here: budgets are not consulted");
            let regarding: ObjectReference = config.object_ref(&());
            let note = format!("evictions bypass the ZoneDisruptionBudgets: {why}");
            self.events
                .warning(
                    &regarding,
                    "EvictionWebhookBypassed",
                    "CheckConfiguration",
                    &note,
                )
                .await;
        }
        *bypassed = why;
    }

    /// One round; whether the configuration is where it should be.
    async fn check(
        &self,
        api: &Api<ValidatingWebhookConfiguration>,
        config: &ValidatingWebhookConfiguration,
        serving_since: Instant,
        reported: &mut bool,
    ) -> bool {
        let webhooks = config.webhooks.clone().unwrap_or_default();
        let policies: Vec<(String, Policy)> = webhooks
            .iter()
            .map(|w| (w.name.clone(), Policy::of(w)))
            .collect();
        let observed: Vec<&str> = policies.iter().map(|(_, p)| p.as_str()).collect();
        self.metrics.failure_policies(&observed);
        if step(self.wanted, &policies, &Checks::ALL_GOOD) == Step::Done {
            return true;
        }
        let checks = match webhooks.first().and_then(target) {
            Some(target) => self.checks(&target).await,
            None => Checks {
                caches_synced: false,
                self_call: Err("the configuration names neither a Service nor an https URL".into()),
                ready_endpoint: None,
            },
        };
        match step(self.wanted, &policies, &checks) {
            Step::Done => true,
            Step::Switch(names) => self.switch(api, &names).await,
            Step::Wait(why) => {
                tracing::info!(config = %self.config_name, why = %why, "failurePolicy left at Ignore for now");
                if report_due(serving_since.elapsed(), *reported) {
                    *reported = true;
                    self.report(config, &why).await;
                }
                false
            }
        }
    }

    async fn checks(&self, target: &Target) -> Checks {
        let self_call = zone_operator::https::call_self(
            local_address(self.address),
            &target.server_name,
            &target.ca_bundle,
            self.path,
            &probe_review(),
        )
        .await
        .map_err(|error| ErrorChain(&error).to_string())
        .and_then(|body| {
            if body.contains("\"allowed\":true") {
                Ok(())
            } else {
                Err(format!("the webhook answered {body}"))
            }
        });
        let ready_endpoint = match &target.service {
            None => None,
            Some((namespace, _)) => Some(self.is_ready_endpoint(namespace).await),
        };
        Checks {
            caches_synced: self.caches_synced.load(Ordering::Acquire),
            self_call,
            ready_endpoint,
        }
    }

    /// Whether this replica's pod (in the Service's namespace) has been Ready for
    /// [`ENDPOINT_PROPAGATION`]: the endpoints controller has then added it to the Service's
    /// ready endpoints, which the API server dials. (The pod, not the Endpoints: reading pods is
    /// granted already, and the endpoints follow the pod's Ready condition.)
    async fn is_ready_endpoint(&self, namespace: &str) -> bool {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        match api.get_opt(&self.identity).await {
            Ok(pod) => pod
                .and_then(|p| p.status)
                .and_then(|s| s.conditions)
                .unwrap_or_default()
                .iter()
                .find(|c| c.type_ == "Ready" && c.status == "True")
                .and_then(|c| c.last_transition_time.as_ref())
                .is_some_and(|since| {
                    let ready_for = k8s_openapi::jiff::Timestamp::now().duration_since(since.0);
                    ready_for.as_secs()
                        >= i64::try_from(ENDPOINT_PROPAGATION.as_secs()).unwrap_or(i64::MAX)
                }),
            Err(error) => {
                tracing::warn!(error = %ErrorChain(&error), namespace, pod = %self.identity, "cannot read this replica's pod");
                false
            }
        }
    }

    /// Patches `names` to `Fail` (strategic merge: webhooks merge by name, only the policy
    /// changes); whether it worked.
    async fn switch(&self, api: &Api<ValidatingWebhookConfiguration>, names: &[String]) -> bool {
        let webhooks: Vec<_> = names
            .iter()
            .map(|name| json!({"name": name, "failurePolicy": Policy::Fail.as_str()}))
            .collect();
        let patch = json!({"webhooks": webhooks});
        match api
            .patch(
                &self.config_name,
                &PatchParams::default(),
                &Patch::Strategic(&patch),
            )
            .await
        {
            Ok(config) => {
                let observed: Vec<&str> = (config.webhooks.iter().flatten())
                    .map(|webhook| Policy::of(webhook).as_str())
                    .collect();
                self.metrics.failure_policies(&observed);
                tracing::info!(config = %self.config_name, webhooks = ?names, "failurePolicy switched to Fail: this replica serves with a trusted certificate and synced caches");
                true
            }
            Err(error) => {
                tracing::warn!(error = %ErrorChain(&error), config = %self.config_name, "cannot switch the failurePolicy to Fail");
                false
            }
        }
    }

    async fn report(&self, config: &ValidatingWebhookConfiguration, why: &str) {
        tracing::warn!(config = %self.config_name, why = %why, serving_for = ?REPORT_AFTER, "the eviction webhook is still at failurePolicy Ignore: budgets are skipped whenever a call fails");
        let regarding: ObjectReference = config.object_ref(&());
        let note = format!(
            "failurePolicy is still Ignore {REPORT_AFTER:?} after this replica started serving: {why}"
        );
        self.events
            .warning(
                &regarding,
                "FailurePolicyNotSwitched",
                "SwitchFailurePolicy",
                &note,
            )
            .await;
    }
}

impl Checks {
    /// Used to ask whether anything is to be done at all before checking anything.
    const ALL_GOOD: Checks = Checks {
        caches_synced: true,
        self_call: Ok(()),
        ready_endpoint: None,
    };
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn webhooks(policies: &[Policy]) -> Vec<(String, Policy)> {
        policies
            .iter()
            .enumerate()
            .map(|(i, p)| (format!("w{i}"), *p))
            .collect()
    }

    fn good() -> Checks {
        Checks {
            caches_synced: true,
            self_call: Ok(()),
            ready_endpoint: Some(true),
        }
    }

    #[test]
    fn switches_to_fail_only_when_every_check_passes() {
        let ignore = webhooks(&[Policy::Ignore, Policy::Fail]);
        assert_eq!(
            step(Policy::Fail, &ignore, &good()),
            Step::Switch(vec!["w0".to_string()])
        );
        let cases = [
            (
                Checks {
                    caches_synced: false,
                    ..good()
                },
                "caches",
            ),
            (
                Checks {
                    self_call: Err("certificate expired".into()),
                    ..good()
                },
                "certificate expired",
            ),
            (
                Checks {
                    ready_endpoint: Some(false),
                    ..good()
                },
                "ready endpoint",
            ),
        ];
        for (checks, why) in cases {
            match step(Policy::Fail, &ignore, &checks) {
                Step::Wait(message) => assert!(message.contains(why), "{message}"),
                other => panic!("{why}: {other:?}"),
            }
        }
        // A URL configuration has no endpoints to wait for.
        let url = Checks {
            ready_endpoint: None,
            ..good()
        };
        assert!(matches!(step(Policy::Fail, &ignore, &url), Step::Switch(_)));
    }

    #[test]
    fn nothing_to_do_at_fail_or_when_ignore_is_wanted() {
        let failing = Checks {
            caches_synced: false,
            ..good()
        };
        assert_eq!(
            step(Policy::Fail, &webhooks(&[Policy::Fail]), &failing),
            Step::Done
        );
        assert_eq!(
            step(Policy::Ignore, &webhooks(&[Policy::Ignore]), &good()),
            Step::Done
        );
        assert_eq!(step(Policy::Fail, &[], &good()), Step::Done);
    }

    #[test]
    fn a_configuration_left_at_ignore_is_reported_once_after_a_minute() {
        assert!(!report_due(Duration::from_secs(10), false));
        assert!(report_due(REPORT_AFTER, false));
        assert!(!report_due(REPORT_AFTER * 3, true));
    }

    #[test]
    fn the_name_the_api_server_dials() {
        let webhook: ValidatingWebhook = serde_json::from_value(json!({
            "name": "w", "sideEffects": "None", "admissionReviewVersions": ["v1"],
            "clientConfig": {"service": {"name": "zdb-webhook", "namespace": "zas"}, "caBundle": "Y2E="},
        }))
        .unwrap();
        let target = target(&webhook).unwrap();
        assert_eq!(target.server_name, "zdb-webhook.zas.svc");
        assert_eq!(
            target.service,
            Some(("zas".to_string(), "zdb-webhook".to_string()))
        );
        assert_eq!(target.ca_bundle, b"ca");
        for (url, host) in [
            ("https://127.0.0.1:9443/validate-eviction", "127.0.0.1"),
            ("https://localhost/validate-eviction", "localhost"),
            ("https://[::1]:9443/x", "::1"),
        ] {
            let webhook: ValidatingWebhook = serde_json::from_value(json!({
                "name": "w", "sideEffects": "None", "admissionReviewVersions": ["v1"],
                "clientConfig": {"url": url},
            }))
            .unwrap();
            let target = super::target(&webhook).unwrap();
            assert_eq!(target.server_name, host, "{url}");
            assert_eq!(target.service, None);
        }
        assert_eq!(
            local_address("0.0.0.0:9443".parse().unwrap()),
            "127.0.0.1:9443".parse::<SocketAddr>().unwrap()
        );
    }

    /// The shipped configuration's webhook, as the API server stores it.
    fn shipped() -> serde_json::Value {
        json!({
            "name": "eviction.zdb.zonecontrol.k8s.aws", "sideEffects": "NoneOnDryRun",
            "admissionReviewVersions": ["v1"],
            "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                       "resources": ["pods/eviction"], "scope": "Namespaced"}],
            "clientConfig": {"service": {"name": "zdb-webhook", "namespace": "zas",
                                         "path": "/validate-eviction", "port": 443}},
            "objectSelector": {},
        })
    }

    fn bypass_of(edit: impl FnOnce(&mut serde_json::Value)) -> Option<String> {
        let mut webhook = shipped();
        edit(&mut webhook);
        let webhook: ValidatingWebhook = serde_json::from_value(webhook).unwrap();
        bypass(&[webhook], crate::webhook::PATH)
    }

    #[test]
    fn the_shipped_configuration_sends_every_eviction_here() {
        assert_eq!(bypass_of(|_| {}), None);
        // Wildcards cover it too; a URL to the same path as well.
        assert_eq!(
            bypass_of(|w| w["rules"][0]["resources"] = json!(["*/*"])),
            None
        );
        assert_eq!(
            bypass_of(
                |w| w["clientConfig"] = json!({"url": "https://10.0.0.1:9443/validate-eviction"})
            ),
            None
        );
    }

    #[test]
    fn drift_that_lets_evictions_bypass_is_named() {
        let cases = [
            (
                "no webhook's rules match CREATE of pods/eviction",
                "/rules/0/resources",
                json!(["pods/nothing"]),
            ),
            (
                "no webhook's rules match CREATE of pods/eviction",
                "/rules/0/operations",
                json!(["UPDATE"]),
            ),
            (
                "calls the path \"/elsewhere\"",
                "/clientConfig/service/path",
                json!("/elsewhere"),
            ),
            (
                "calls the path \"\"",
                "/clientConfig",
                json!({"url": "https://10.0.0.1:9443"}),
            ),
            (
                "objectSelector that needs labels",
                "/objectSelector",
                json!({"matchLabels": {"a": "b"}}),
            ),
        ];
        for (why, pointer, value) in cases {
            let found = bypass_of(|w| *w.pointer_mut(pointer).unwrap() = value).unwrap_or_default();
            assert!(found.contains(why), "{why}: {found}");
        }
        assert_eq!(
            bypass(&[], crate::webhook::PATH).as_deref(),
            Some("the configuration has no webhook")
        );
        // An objectSelector that only excludes (NotIn, DoesNotExist) still lets every Eviction in.
        assert_eq!(
            bypass_of(|w| w["objectSelector"] =
                json!({"matchExpressions": [{"key": "a", "operator": "DoesNotExist"}]})),
            None
        );
    }
}
