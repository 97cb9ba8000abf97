//! `spec.alerting`: each Alertmanager entry a Service (name and port) or static addresses,
//! scheme http or https, API version V2, a valid timeout.

use super::SpromError;
use crate::sprom::{AlertingSpec, AlertmanagerEndpoints, PrometheusMode, ShardedPrometheusSpec};
use crate::units::parse_prometheus_duration;

impl ShardedPrometheusSpec {
    /// The alerting section, each Alertmanager entry checked; None without any Alertmanager.
    pub(super) fn alerting(&self) -> Result<Option<AlertingSpec>, SpromError> {
        let Some(alerting) = &self.alerting else {
            return Ok(None);
        };
        if alerting.alertmanagers.is_empty() {
            return Ok(None);
        }
        if self.mode == PrometheusMode::Agent {
            return Err(SpromError::AgentWithAlerting);
        }
        for (index, am) in alerting.alertmanagers.iter().enumerate() {
            alertmanager(am).map_err(|message| SpromError::Alertmanager { index, message })?;
        }
        Ok(Some(alerting.clone()))
    }
}

/// What is wrong with one Alertmanager entry, if anything.
fn alertmanager(am: &AlertmanagerEndpoints) -> Result<(), String> {
    match (&am.name, am.static_addresses.is_empty()) {
        (Some(name), true) if !name.is_empty() => {
            if am.port.is_none() {
                return Err("name is set without port: name the Service port".into());
            }
        }
        (None, false) => {
            for address in &am.static_addresses {
                if address.is_empty() || address.contains('/') {
                    return Err(format!(
                        "staticAddresses: {address:?} is not host:port (scheme and pathPrefix \
                         are fields of their own)"
                    ));
                }
            }
        }
        (Some(_), false) => {
            return Err("set either name (a Service) or staticAddresses, not both".into());
        }
        _ => return Err("set name and port (a Service) or staticAddresses".into()),
    }
    if let Some(scheme) = &am.scheme
        && !["http", "https", "HTTP", "HTTPS"].contains(&scheme.as_str())
    {
        return Err(format!("scheme {scheme:?} is not http or https"));
    }
    if let Some(version) = &am.api_version
        && !version.eq_ignore_ascii_case("v2")
    {
        return Err(format!(
            "apiVersion {version:?}: Prometheus 3 speaks the Alertmanager API V2 only"
        ));
    }
    if let Some(timeout) = &am.timeout {
        parse_prometheus_duration(timeout)
            .map_err(|error| format!("timeout {timeout:?}: {error}"))?;
    }
    Ok(())
}
