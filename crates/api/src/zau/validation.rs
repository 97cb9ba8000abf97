//! The checks of a ZoneAwareUpdate spec, and the spec ready to act on.

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use zone_topology::rollout::{RolloutError, parse_exponential_factor};
use zone_topology::{IntOrPercent, IntOrPercentError};

use super::cel;
use crate::patterns::LABEL_NAME_FORM;
use crate::shared::{
    DurationError, SelectorError, check_selector, duration, is_label_name, is_unselective,
    max_unavailable, non_empty_or,
};
use crate::zau::{
    AlertGate, GateScheme, GateService, GateTlsConfig, SecretKeyRef, ZoneAwareUpdateSpec, ZoneScope,
};

/// Why a ZoneAwareUpdate spec cannot be acted on.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ZauError {
    #[error("{}", cel::STATEFULSET_NAMED)]
    MissingStatefulSet,
    #[error("{}", cel::ONE_TARGET)]
    BothTargets,
    #[error("{}", cel::GROUP_SELECTOR_NOT_EMPTY)]
    EmptyGroupSelector,
    #[error(transparent)]
    Selector(#[from] SelectorError),
    #[error("{}", cel::ALERT_GATE_ONE_TARGET)]
    GateTarget,
    #[error("spec.alertGate.url {url:?}: {why}")]
    GateUrl { url: String, why: &'static str },
    #[error("spec.alertGate.scheme {scheme} contradicts spec.alertGate.url {url:?}")]
    GateScheme { scheme: &'static str, url: String },
    #[error("spec.alertGate.service.name is empty: name the Service serving the alerts API")]
    GateServiceName,
    #[error("spec.alertGate.service.port {0}: a port number from 1 to 65535, or a port name")]
    GateServicePort(String),
    #[error("spec.alertGate.pathPrefix {0:?} must start with \"/\" and hold no '?' or '#'")]
    GatePathPrefix(String),
    #[error(
        "spec.alertGate.tlsConfig is set but the endpoint is http: use scheme https (or an \
         https:// url)"
    )]
    GateTlsOverHttp,
    #[error("{field}: name and key are both required")]
    GateSecretRef { field: &'static str },
    #[error(
        "spec.alertGate.matchers is empty: give a PromQL selector with at least one matcher, \
         e.g. {{severity=\"critical\"}}"
    )]
    GateMatchersEmpty,
    #[error("spec.alertGate.zoneLabel {0:?} is not {form}", form = LABEL_NAME_FORM)]
    GateZoneLabel(String),
    #[error("{field} {value:?} must be from {min} to {max}")]
    DurationRange {
        field: &'static str,
        value: String,
        min: &'static str,
        max: &'static str,
    },
    #[error(
        "spec.alertGate.timeout {timeout:?} is longer than spec.alertGate.pollInterval {interval:?}"
    )]
    GateTimeout { timeout: String, interval: String },
    #[error("spec.exponentialFactor: {0}")]
    ExponentialFactor(#[source] RolloutError),
    #[error("spec.maxUnavailable: {0}")]
    MaxUnavailable(#[source] IntOrPercentError),
    #[error("{}", cel::MAX_UNAVAILABLE_NOT_ZERO)]
    MaxUnavailableZero,
    #[error(transparent)]
    Duration(#[from] DurationError),
}

/// What a rollout rolls.
#[derive(Debug, Clone, PartialEq)]
pub enum RolloutTarget {
    /// `spec.statefulset`.
    StatefulSet(String),
    /// `spec.selector`: a rollout group, the StatefulSets of the namespace it selects.
    Group(LabelSelector),
}

/// A ZoneAwareUpdate spec ready to act on.
#[derive(Debug, Clone, PartialEq)]
pub struct ValidZau {
    pub target: RolloutTarget,
    pub exponential_factor: f64,
    /// Resolved against spec.replicas by the controller (`rollout::resolve_max_unavailable`).
    pub max_unavailable: IntOrPercent,
    /// The alert gate, every default applied; its matchers are parsed by the controller.
    pub alert_gate: Option<ValidAlertGate>,
    /// The wait between a completed zone and the next zone's first removal; None when unset or
    /// zero.
    pub bake_time: Option<Duration>,
    /// `spec.paused`.
    pub paused: bool,
}

/// `spec.alertGate` ready to act on, every default applied.
#[derive(Debug, Clone, PartialEq)]
pub struct ValidAlertGate {
    pub target: GateTarget,
    /// The path between the base and `api/v1/alerts`: starts and ends with '/'.
    pub path_prefix: String,
    /// Only for an https endpoint.
    pub tls: Option<GateTlsConfig>,
    pub bearer_token_secret: Option<SecretKeyRef>,
    /// The selector as written (the controller parses it with its PromQL parser).
    pub matchers: String,
    pub include_pending: bool,
    pub zone_scope: ZoneScope,
    pub zone_label: String,
    pub poll_interval: Duration,
    pub timeout: Duration,
}

/// Where the alerts are asked for.
#[derive(Debug, Clone, PartialEq)]
pub enum GateTarget {
    /// `scheme://host[:port][/path]`, without a trailing '/'.
    Url(String),
    Service {
        /// None: the ZoneAwareUpdate's namespace.
        namespace: Option<String>,
        name: String,
        port: IntOrString,
        scheme: GateScheme,
    },
}

impl GateTarget {
    /// Whether the endpoint speaks TLS.
    pub fn is_https(&self) -> bool {
        match self {
            GateTarget::Url(url) => url.starts_with("https://"),
            GateTarget::Service { scheme, .. } => *scheme == GateScheme::Https,
        }
    }
}

/// `alertGate.pollInterval` when unset.
pub const DEFAULT_GATE_POLL_INTERVAL: Duration = Duration::from_secs(10);
/// `alertGate.timeout` when unset (at most the poll interval).
pub const DEFAULT_GATE_TIMEOUT: Duration = Duration::from_secs(5);
/// `alertGate.zoneLabel` when unset.
pub const DEFAULT_GATE_ZONE_LABEL: &str = "zone";
const GATE_POLL_MIN: Duration = Duration::from_secs(1);
const GATE_POLL_MAX: Duration = Duration::from_secs(300);

impl ZoneAwareUpdateSpec {
    pub fn validate(&self) -> Result<ValidZau, ZauError> {
        let target = self.target()?;
        let exponential_factor = parse_exponential_factor(&self.exponential_factor)
            .map_err(ZauError::ExponentialFactor)?;
        let max_unavailable = match max_unavailable(self.max_unavailable.as_ref())
            .map_err(ZauError::MaxUnavailable)?
        {
            IntOrPercent::Int(0) | IntOrPercent::Percent(0) => {
                return Err(ZauError::MaxUnavailableZero);
            }
            max_unavailable => max_unavailable,
        };
        let alert_gate = self.alert_gate.as_ref().map(alert_gate).transpose()?;
        let bake_time = match self.bake_time.as_deref().map(str::trim) {
            None | Some("") => None,
            Some(text) => Some(duration("spec.bakeTime", text)?).filter(|d| !d.is_zero()),
        };
        Ok(ValidZau {
            target,
            exponential_factor,
            max_unavailable,
            alert_gate,
            bake_time,
            paused: self.paused,
        })
    }
}

impl ZoneAwareUpdateSpec {
    /// `spec.statefulset`, or the group `spec.selector` selects: exactly one.
    fn target(&self) -> Result<RolloutTarget, ZauError> {
        let name = self.statefulset.trim();
        match &self.selector {
            Some(_) if !name.is_empty() => Err(ZauError::BothTargets),
            Some(selector) if is_unselective(selector) => Err(ZauError::EmptyGroupSelector),
            Some(selector) => {
                check_selector(selector)?;
                Ok(RolloutTarget::Group(selector.clone()))
            }
            None if name.is_empty() => Err(ZauError::MissingStatefulSet),
            None => Ok(RolloutTarget::StatefulSet(self.statefulset.clone())),
        }
    }
}

fn alert_gate(gate: &AlertGate) -> Result<ValidAlertGate, ZauError> {
    let target = match (&gate.url, &gate.service) {
        (Some(url), None) => GateTarget::Url(gate_url(url, gate.scheme)?),
        (None, Some(service)) => gate_service(service, gate.scheme.unwrap_or_default())?,
        _ => return Err(ZauError::GateTarget),
    };
    let path_prefix = gate_path_prefix(gate.path_prefix.as_deref())?;
    let tls = gate_tls(gate.tls_config.as_ref(), &target)?;
    if let Some(token) = &gate.bearer_token_secret {
        secret_ref("spec.alertGate.bearerTokenSecret", token)?;
    }
    let matchers = gate_matchers(&gate.matchers)?;
    let zone_label = non_empty_or(gate.zone_label.as_deref(), DEFAULT_GATE_ZONE_LABEL);
    if !is_label_name(&zone_label) {
        return Err(ZauError::GateZoneLabel(zone_label));
    }
    let (poll_interval, timeout) = gate_timing(gate)?;
    Ok(ValidAlertGate {
        target,
        path_prefix,
        tls,
        bearer_token_secret: gate.bearer_token_secret.clone(),
        matchers: matchers.to_string(),
        include_pending: gate.include_pending,
        zone_scope: gate.zone_scope,
        zone_label,
        poll_interval,
        timeout,
    })
}

/// `service` checked: a name, and a port number or name.
fn gate_service(service: &GateService, scheme: GateScheme) -> Result<GateTarget, ZauError> {
    if service.name.trim().is_empty() {
        return Err(ZauError::GateServiceName);
    }
    let port = match &service.port {
        IntOrString::Int(number) if (1..=65535).contains(number) => service.port.clone(),
        IntOrString::String(name) if !name.trim().is_empty() => {
            IntOrString::String(name.trim().to_string())
        }
        IntOrString::Int(number) => {
            return Err(ZauError::GateServicePort(number.to_string()));
        }
        IntOrString::String(name) => {
            return Err(ZauError::GateServicePort(format!("{name:?}")));
        }
    };
    Ok(GateTarget::Service {
        namespace: service
            .namespace
            .as_deref()
            .map(str::trim)
            .filter(|ns| !ns.is_empty())
            .map(str::to_string),
        name: service.name.trim().to_string(),
        port,
        scheme,
    })
}

/// `tlsConfig`, only for an https endpoint, its CA Secret reference complete.
fn gate_tls(
    tls: Option<&GateTlsConfig>,
    target: &GateTarget,
) -> Result<Option<GateTlsConfig>, ZauError> {
    match tls {
        Some(_) if !target.is_https() => Err(ZauError::GateTlsOverHttp),
        Some(tls) => {
            if let Some(ca) = &tls.ca_secret {
                secret_ref("spec.alertGate.tlsConfig.caSecret", ca)?;
            }
            Ok(Some(tls.clone()))
        }
        None => Ok(None),
    }
}

/// The matchers, trimmed: at least one matcher.
fn gate_matchers(matchers: &str) -> Result<&str, ZauError> {
    let matchers = matchers.trim();
    if matchers.is_empty()
        || matchers
            .chars()
            .all(|c| c == '{' || c == '}' || c.is_whitespace())
    {
        return Err(ZauError::GateMatchersEmpty);
    }
    Ok(matchers)
}

/// The poll interval (1s to 5m) and the timeout (more than 0, at most the poll interval).
fn gate_timing(gate: &AlertGate) -> Result<(Duration, Duration), ZauError> {
    let poll_text = gate.poll_interval.as_deref().map(str::trim).unwrap_or("");
    let poll_interval = if poll_text.is_empty() {
        DEFAULT_GATE_POLL_INTERVAL
    } else {
        duration("spec.alertGate.pollInterval", poll_text)?
    };
    if !(GATE_POLL_MIN..=GATE_POLL_MAX).contains(&poll_interval) {
        return Err(ZauError::DurationRange {
            field: "spec.alertGate.pollInterval",
            value: poll_text.to_string(),
            min: "1s",
            max: "5m",
        });
    }
    let timeout_text = gate.timeout.as_deref().map(str::trim).unwrap_or("");
    let timeout = if timeout_text.is_empty() {
        DEFAULT_GATE_TIMEOUT.min(poll_interval)
    } else {
        duration("spec.alertGate.timeout", timeout_text)?
    };
    if timeout.is_zero() {
        return Err(ZauError::DurationRange {
            field: "spec.alertGate.timeout",
            value: timeout_text.to_string(),
            min: "1ms",
            max: "pollInterval",
        });
    }
    if timeout > poll_interval {
        return Err(ZauError::GateTimeout {
            timeout: timeout_text.to_string(),
            interval: if poll_text.is_empty() {
                "10s"
            } else {
                poll_text
            }
            .to_string(),
        });
    }
    Ok((poll_interval, timeout))
}

/// `url` checked: http:// or https://, a host, no query or fragment; without trailing '/'.
fn gate_url(url: &str, scheme: Option<GateScheme>) -> Result<String, ZauError> {
    let error = |why| ZauError::GateUrl {
        url: url.to_string(),
        why,
    };
    let trimmed = url.trim();
    let (url_scheme, rest) = if let Some(rest) = trimmed.strip_prefix("http://") {
        (GateScheme::Http, rest)
    } else if let Some(rest) = trimmed.strip_prefix("https://") {
        (GateScheme::Https, rest)
    } else {
        return Err(error("it must start with http:// or https://"));
    };
    let host = rest.split('/').next().unwrap_or_default();
    if host.is_empty() || host.starts_with(':') {
        return Err(error("it has no host"));
    }
    if rest.contains(['?', '#']) || rest.contains(char::is_whitespace) || host.contains('@') {
        return Err(error(
            "only scheme, host, port and path are allowed (no query, fragment, credentials or \
             spaces)",
        ));
    }
    if let Some(scheme) = scheme.filter(|s| *s != url_scheme) {
        return Err(ZauError::GateScheme {
            scheme: match scheme {
                GateScheme::Http => "http",
                GateScheme::Https => "https",
            },
            url: url.to_string(),
        });
    }
    Ok(trimmed.trim_end_matches('/').to_string())
}

/// The path prefix as `/…/` (default `/`).
fn gate_path_prefix(prefix: Option<&str>) -> Result<String, ZauError> {
    let prefix = prefix.map(str::trim).unwrap_or("/");
    if prefix.is_empty() {
        return Ok("/".to_string());
    }
    if !prefix.starts_with('/')
        || prefix.contains(['?', '#'])
        || prefix.contains(char::is_whitespace)
    {
        return Err(ZauError::GatePathPrefix(prefix.to_string()));
    }
    let inner = prefix.trim_matches('/');
    Ok(if inner.is_empty() {
        "/".to_string()
    } else {
        format!("/{inner}/")
    })
}

fn secret_ref(field: &'static str, secret: &SecretKeyRef) -> Result<(), ZauError> {
    if secret.name.trim().is_empty() || secret.key.trim().is_empty() {
        return Err(ZauError::GateSecretRef { field });
    }
    Ok(())
}

#[cfg(test)]
mod tests;
