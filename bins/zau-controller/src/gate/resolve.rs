//! From `spec.alertGate` to an [`Endpoint`]: the Service's EndpointSlices (a ready address,
//! dialled directly: no cluster DNS or ClusterIP is needed), and the Secrets holding the bearer
//! token and the CA. Any failure is a [`GateError::Resolve`] naming the field: the rollout
//! pauses (fail safe) and the next reconcile tries again.

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::ListParams;
use kube::{Api, Client};
use zone_api::zau::{GateScheme, SecretKeyRef};
use zone_api::zau::{GateTarget, ValidAlertGate};

use super::fetch::{Endpoint, GateError, TlsSettings};

/// The label tying an EndpointSlice to its Service.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

/// Where `gate` (of a ZoneAwareUpdate in `namespace`) reads its alerts, read now.
pub async fn endpoint(
    client: &Client,
    namespace: &str,
    gate: &ValidAlertGate,
) -> Result<Endpoint, GateError> {
    let base = match &gate.target {
        GateTarget::Url(url) => url.clone(),
        GateTarget::Service {
            namespace: service_namespace,
            name,
            port,
            scheme,
        } => {
            let service_namespace = service_namespace.as_deref().unwrap_or(namespace);
            service_base(client, service_namespace, name, port, scheme).await?
        }
    };
    let url = format!("{base}{}api/v1/alerts", gate.path_prefix);
    let token = optional_secret_text(
        client,
        namespace,
        gate.bearer_token_secret.as_ref(),
        "spec.alertGate.bearerTokenSecret",
    )
    .await?
    .map(|token| token.trim().to_string());
    let tls = if gate.target.is_https() {
        Some(tls(client, namespace, gate).await?)
    } else {
        None
    };
    Ok(Endpoint { url, token, tls })
}

/// `scheme://address:port` of a ready endpoint of the Service `namespace/name`.
async fn service_base(
    client: &Client,
    namespace: &str,
    name: &str,
    port: &IntOrString,
    scheme: &GateScheme,
) -> Result<String, GateError> {
    let api: Api<EndpointSlice> = Api::namespaced(client.clone(), namespace);
    let slices = api
        .list(&ListParams::default().labels(&format!("{SERVICE_NAME_LABEL}={name}")))
        .await
        .map_err(|error| {
            GateError::Resolve(format!(
                "spec.alertGate.service: cannot list the EndpointSlices of Service {namespace}/{name}: {}",
                api_error(&error)
            ))
        })?;
    let (address, port) = pick(&slices.items, port).map_err(|why| {
        GateError::Resolve(format!(
            "spec.alertGate.service: Service {namespace}/{name} {why}"
        ))
    })?;
    let scheme = match scheme {
        GateScheme::Http => "http",
        GateScheme::Https => "https",
    };
    Ok(format!("{scheme}://{}:{port}", host(&address)))
}

/// How to verify the gate's HTTPS endpoint: the CA of `tlsConfig.caSecret`, and the server
/// name to expect (given, or the Service's DNS name).
async fn tls(
    client: &Client,
    namespace: &str,
    gate: &ValidAlertGate,
) -> Result<TlsSettings, GateError> {
    let config = gate.tls.clone().unwrap_or_default();
    let ca_pem = optional_secret_text(
        client,
        namespace,
        config.ca_secret.as_ref(),
        "spec.alertGate.tlsConfig.caSecret",
    )
    .await?;
    let server_name = config
        .server_name
        .filter(|n| !n.trim().is_empty())
        .or_else(|| match &gate.target {
            GateTarget::Service {
                namespace: service_namespace,
                name,
                ..
            } => Some(format!(
                "{name}.{}.svc",
                service_namespace.as_deref().unwrap_or(namespace)
            )),
            GateTarget::Url(_) => None,
        });
    Ok(TlsSettings {
        ca_pem,
        server_name,
        insecure_skip_verify: config.insecure_skip_verify,
    })
}

/// The text of `secret` when it is given (see [`secret_text`]).
async fn optional_secret_text(
    client: &Client,
    namespace: &str,
    secret: Option<&SecretKeyRef>,
    field: &str,
) -> Result<Option<String>, GateError> {
    match secret {
        Some(secret) => Ok(Some(secret_text(client, namespace, secret, field).await?)),
        None => Ok(None),
    }
}

/// An address as a URL host: IPv6 in brackets.
fn host(address: &str) -> String {
    if address.contains(':') && !address.starts_with('[') {
        format!("[{address}]")
    } else {
        address.to_string()
    }
}

/// The ready address and port to dial (pure): every ready endpoint of every slice, with the
/// slice's port of that name (or the number given), the lowest first so every rollout reading
/// this Service picks the same one (and shares its answers).
pub fn pick(slices: &[EndpointSlice], port: &IntOrString) -> Result<(String, i32), String> {
    let mut candidates: Vec<(String, i32)> = Vec::new();
    let mut named_port_seen = false;
    for slice in slices {
        let slice_port = match port {
            IntOrString::Int(number) => Some(*number),
            IntOrString::String(name) => slice
                .ports
                .iter()
                .flatten()
                .find(|p| p.name.as_deref() == Some(name.as_str()))
                .and_then(|p| p.port),
        };
        let Some(slice_port) = slice_port else {
            continue;
        };
        named_port_seen = true;
        for endpoint in &slice.endpoints {
            // An unknown readiness counts as ready (the EndpointSlice API's convention).
            let ready = endpoint
                .conditions
                .as_ref()
                .and_then(|c| c.ready)
                .unwrap_or(true);
            if ready && let Some(address) = endpoint.addresses.first() {
                candidates.push((address.clone(), slice_port));
            }
        }
    }
    if let (IntOrString::String(name), false) = (port, named_port_seen)
        && !slices.is_empty()
    {
        return Err(format!("has no port named {name:?} in its EndpointSlices"));
    }
    candidates.sort();
    candidates.into_iter().next().ok_or_else(|| {
        if slices.is_empty() {
            "has no EndpointSlice (is the Service there, with a selector?)".to_string()
        } else {
            "has no ready endpoint".to_string()
        }
    })
}

/// The text of a Secret key in `namespace`.
async fn secret_text(
    client: &Client,
    namespace: &str,
    secret: &SecretKeyRef,
    field: &str,
) -> Result<String, GateError> {
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let name = &secret.name;
    let found = api.get(name).await.map_err(|error| {
        GateError::Resolve(format!(
            "{field}: cannot read Secret {namespace}/{name}: {}",
            api_error(&error)
        ))
    })?;
    let bytes = found
        .data
        .as_ref()
        .and_then(|data| data.get(&secret.key))
        .ok_or_else(|| {
            GateError::Resolve(format!(
                "{field}: Secret {namespace}/{name} has no key {:?}",
                secret.key
            ))
        })?;
    let text = String::from_utf8(bytes.0.clone()).map_err(|_| {
        GateError::Resolve(format!(
            "{field}: key {:?} of Secret {namespace}/{name} is not UTF-8 text",
            secret.key
        ))
    })?;
    if text.trim().is_empty() {
        return Err(GateError::Resolve(format!(
            "{field}: key {:?} of Secret {namespace}/{name} is empty",
            secret.key
        )));
    }
    Ok(text)
}

/// A Kubernetes API error on one line: the API server's message when there is one.
fn api_error(error: &kube::Error) -> String {
    match error {
        kube::Error::Api(status) => format!("{} ({})", status.message, status.code),
        other => zone_operator::ErrorChain(other).to_string(),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use serde_json::json;

    fn slice(ports: serde_json::Value, endpoints: serde_json::Value) -> EndpointSlice {
        serde_json::from_value(json!({
            "metadata": {"name": "s", "labels": {SERVICE_NAME_LABEL: "fed"}},
            "addressType": "IPv4",
            "ports": ports,
            "endpoints": endpoints,
        }))
        .unwrap()
    }

    #[test]
    fn a_ready_address_and_the_port_by_name_or_number() {
        let slices = [
            slice(
                json!([{"name": "http", "port": 8080}]),
                json!([
                    {"addresses": ["10.0.0.9"], "conditions": {"ready": true}},
                    {"addresses": ["10.0.0.2"], "conditions": {"ready": false}},
                ]),
            ),
            slice(
                json!([{"name": "http", "port": 8080}]),
                json!([{"addresses": ["10.0.0.5"]}]),
            ),
        ];
        let named = IntOrString::String("http".into());
        assert_eq!(pick(&slices, &named), Ok(("10.0.0.5".into(), 8080)));
        assert_eq!(
            pick(&slices, &IntOrString::Int(9090)),
            Ok(("10.0.0.5".into(), 9090))
        );
        assert_eq!(
            pick(&slices, &IntOrString::String("web".into())),
            Err("has no port named \"web\" in its EndpointSlices".into())
        );
        let unready = [slice(
            json!([{"name": "http", "port": 8080}]),
            json!([{"addresses": ["10.0.0.2"], "conditions": {"ready": false}}]),
        )];
        assert_eq!(pick(&unready, &named), Err("has no ready endpoint".into()));
        assert!(pick(&[], &named).unwrap_err().contains("no EndpointSlice"));
        assert_eq!(host("fd00::1"), "[fd00::1]");
        assert_eq!(host("10.0.0.1"), "10.0.0.1");
    }
}
