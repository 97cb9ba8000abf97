//! `spec.alerting`: each Alertmanager entry a Service (name and port) or static addresses,
//! scheme http or https, API version V2, a valid timeout. What passes is a [`ValidAlerting`]:
//! the translation into Prometheus's `alerting` section reads where each entry sends alerts from
//! it and checks none of this again.

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::SpromError;
use crate::sprom::{AlertingSpec, AlertmanagerEndpoints, PrometheusMode, ShardedPrometheusSpec};
use crate::units::parse_prometheus_duration;

/// `spec.alerting` with every Alertmanager entry checked.
#[derive(Debug, Clone, PartialEq)]
pub struct ValidAlerting {
    pub alertmanagers: Vec<ValidAlertmanager>,
    /// The spec's `alertRelabelConfigs`, as written (the translation parses and checks them
    /// with the other relabel rules).
    pub alert_relabel_configs: Vec<serde_json::Value>,
}

/// One Alertmanager entry: where its alerts go, decided; the entry as written for the rest
/// (credentials, relabel rules, path prefix, timeout, HTTP/2).
#[derive(Debug, Clone, PartialEq)]
pub struct ValidAlertmanager {
    pub target: AlertmanagerTarget,
    /// `http` or `https`, lower case.
    pub scheme: &'static str,
    /// Whether `apiVersion` was given (it can only be V2).
    pub api_version_v2: bool,
    pub entry: AlertmanagerEndpoints,
}

/// Where an entry's alerts go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AlertmanagerTarget {
    /// The endpoints of a Service; its namespace None for the ShardedPrometheus's own.
    Service {
        namespace: Option<String>,
        name: String,
        port: ServicePort,
    },
    /// host:port addresses.
    Static(Vec<String>),
}

/// A Service port, by name or by (positive) number.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServicePort {
    Name(String),
    Number(i32),
}

impl ShardedPrometheusSpec {
    /// The alerting section, each Alertmanager entry checked; None without any Alertmanager.
    pub(super) fn alerting(&self) -> Result<Option<ValidAlerting>, SpromError> {
        let Some(alerting) = &self.alerting else {
            return Ok(None);
        };
        if alerting.alertmanagers.is_empty() {
            return Ok(None);
        }
        if self.mode == PrometheusMode::Agent {
            return Err(SpromError::AgentWithAlerting);
        }
        ValidAlerting::new(alerting).map(Some)
    }
}

impl ValidAlerting {
    /// Checks each Alertmanager entry; the error names the first wrong one and its field.
    pub fn new(spec: &AlertingSpec) -> Result<Self, SpromError> {
        let alertmanagers = spec
            .alertmanagers
            .iter()
            .enumerate()
            .map(|(index, am)| {
                alertmanager(am).map_err(|(field, message)| SpromError::Alertmanager {
                    index,
                    field,
                    message,
                })
            })
            .collect::<Result<_, _>>()?;
        Ok(Self {
            alertmanagers,
            alert_relabel_configs: spec.alert_relabel_configs.clone(),
        })
    }
}

/// A field of an entry (`""` for the entry itself) and what is wrong with it.
type EntryError = (&'static str, String);

fn non_empty(value: &Option<String>) -> Option<&str> {
    value.as_deref().filter(|value| !value.is_empty())
}

/// One Alertmanager entry, checked.
fn alertmanager(am: &AlertmanagerEndpoints) -> Result<ValidAlertmanager, EntryError> {
    let scheme = match am.scheme.as_deref() {
        None | Some("http" | "HTTP") => "http",
        Some("https" | "HTTPS") => "https",
        Some(other) => return Err((".scheme", format!("{other:?} is not http or https"))),
    };
    if let Some(version) = &am.api_version
        && !version.eq_ignore_ascii_case("v2")
    {
        return Err((
            ".apiVersion",
            format!("{version:?}: Prometheus 3 speaks the Alertmanager API V2 only"),
        ));
    }
    if let Some(timeout) = &am.timeout {
        parse_prometheus_duration(timeout)
            .map_err(|error| (".timeout", format!("{timeout:?}: {error}")))?;
    }
    Ok(ValidAlertmanager {
        target: target(am)?,
        scheme,
        api_version_v2: am.api_version.is_some(),
        entry: am.clone(),
    })
}

/// A Service with its port, or static host:port addresses: never both, never neither.
fn target(am: &AlertmanagerEndpoints) -> Result<AlertmanagerTarget, EntryError> {
    match (non_empty(&am.name), am.static_addresses.is_empty()) {
        (Some(name), true) => {
            let port = match &am.port {
                Some(IntOrString::String(name)) if !name.is_empty() => {
                    ServicePort::Name(name.clone())
                }
                Some(IntOrString::Int(number)) if *number > 0 => ServicePort::Number(*number),
                _ => {
                    return Err((
                        ".port",
                        "name the Service port (by name or number) to send alerts to".into(),
                    ));
                }
            };
            Ok(AlertmanagerTarget::Service {
                namespace: non_empty(&am.namespace).map(str::to_string),
                name: name.to_string(),
                port,
            })
        }
        (None, false) => {
            if let Some(bad) = am
                .static_addresses
                .iter()
                .find(|address| address.is_empty() || address.contains('/'))
            {
                return Err((
                    ".staticAddresses",
                    format!(
                        "{bad:?} is not host:port (scheme and pathPrefix are fields of their own)"
                    ),
                ));
            }
            Ok(AlertmanagerTarget::Static(am.static_addresses.clone()))
        }
        (Some(_), false) => Err((
            "",
            "set either name (a Service) or staticAddresses, not both".into(),
        )),
        (None, true) => Err((
            "",
            "set name and port (a Service) or staticAddresses".into(),
        )),
    }
}
