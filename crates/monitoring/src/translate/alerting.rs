//! `spec.alerting` → Prometheus's `alerting` section, as prometheus-operator v0.85 generates it
//! from a `Prometheus`'s `alerting.alertmanagers` for Prometheus v3:
//!
//! - an Alertmanager **Service** is discovered with `kubernetes_sd_configs` (role `endpoints`,
//!   or `endpointslice` following `serviceDiscoveryRole`) in its namespace (default: the
//!   ShardedPrometheus's), and `relabel_configs` keep that Service's name and port: by name on
//!   `__meta_kubernetes_endpoint_port_name` (`…endpointslice_port_name`), by number on
//!   `__meta_kubernetes_pod_container_port_number`, as upstream; the entry's `relabelings`
//!   follow;
//! - `path_prefix` (default `/`), `scheme` (default `http`), `timeout`, `enable_http2`,
//!   `api_version` (only `v2`, when given), and the entry's `alertRelabelings` as its own
//!   `alert_relabel_configs`;
//! - the global `alert_relabel_configs` first drop the replica external label, so Alertmanager
//!   sees a shard's replicas as one sender and deduplicates their alerts, then apply the spec's
//!   `alertRelabelConfigs`.
//!
//! The section is made from a validated `spec.alerting` ([`ValidAlerting`]): a Service or static
//! addresses, scheme, API version and timeout were checked there; the credentials and relabel
//! rules are checked here, where they are parsed.
//!
//! Differences, as for the jobs (see the parent module): **static addresses**
//! (`staticAddresses`, host:port) become `static_configs`, which upstream has no field for
//! (it takes them through `additionalAlertManagerConfigs`); **credentials are inlined** (TLS
//! material, basic auth, the authorization credentials) from Secrets and ConfigMaps of the
//! ShardedPrometheus's namespace, and a reference that cannot be resolved is an error naming
//! the field, where upstream logs it and writes the entry without the value; the **API V1 is
//! refused** (Prometheus 3 does not speak it; upstream silently leaves `api_version` out);
//! `basicAuth` and `authorization` together are refused as upstream refuses them.

use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};
use zone_topology::relabel::{Action, RelabelConfig as Rule};

use super::DiscoveryRole;
use super::auth::{self, Ctx, Json};
use super::monitor::Role;
use super::refs::Refs;
use super::relabel;
use crate::monitors::{BasicAuth, RelabelConfig, SafeAuthorization, TlsConfig};
use crate::resolve::{KeyRef, Resolver};

/// The field every error is reported under.
const FIELD: &str = "spec.alerting";

/// `spec.alerting` in prometheus-operator's camelCase shape (the ShardedPrometheus's own type),
/// validated. Credentials and relabel rules are kept as JSON and read here, so an error names the
/// field that holds it.
pub use zone_api::sprom::{
    AlertingSpec, AlertmanagerEndpoints, AlertmanagerTarget, ServicePort, ValidAlerting,
    ValidAlertmanager,
};

/// What the section depends on besides the spec.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AlertingSettings<'a> {
    /// The ShardedPrometheus's namespace: where referenced Secrets and ConfigMaps are read, and
    /// an Alertmanager Service's namespace when the entry names none.
    pub namespace: &'a str,
    /// The role of the Service discovery (`serviceDiscoveryRole`).
    pub service_discovery_role: DiscoveryRole,
    /// The external label telling a shard's replicas apart, dropped from every alert. Empty:
    /// nothing dropped.
    pub replica_label: &'a str,
}

/// The credentials of one entry, typed.
#[derive(Default)]
struct Credentials {
    basic_auth: Option<BasicAuth>,
    authorization: Option<SafeAuthorization>,
    tls: Option<TlsConfig>,
}

fn typed<T: DeserializeOwned>(field: &str, value: &Value) -> Result<T, String> {
    serde_json::from_value(value.clone())
        .map_err(|error| format!("{field}: {}", crate::redact::serde_error(&error)))
}

/// The credential setting at `field.key`, typed, when it is set. serde's message is not used: it
/// quotes the value, which may be a password written in place of its reference.
fn credential<T: DeserializeOwned>(
    field: &str,
    key: &str,
    value: &Option<Value>,
    shape: &str,
) -> Result<Option<T>, String> {
    value
        .as_ref()
        .map(|value| {
            serde_json::from_value(value.clone())
                .map_err(|_| format!("{field}.{key}: expected {shape}"))
        })
        .transpose()
}

fn credentials(field: &str, am: &AlertmanagerEndpoints) -> Result<Credentials, String> {
    Ok(Credentials {
        basic_auth: credential(
            field,
            "basicAuth",
            &am.basic_auth,
            "username and password as Secret key references ({name, key})",
        )?,
        authorization: credential(
            field,
            "authorization",
            &am.authorization,
            "a type and credentials as a Secret key reference ({name, key})",
        )?,
        tls: credential(
            field,
            "tlsConfig",
            &am.tls_config,
            "ca and cert as {secret: {name, key}} or {configMap: {name, key}}, keySecret as \
             {name, key}, serverName, insecureSkipVerify, minVersion, maxVersion, caFile, \
             certFile, keyFile",
        )?,
    })
}

/// The rules at `field`, checked as upstream checks them, in Prometheus's snake_case.
fn rules(field: &str, values: &[Value]) -> Result<Vec<Rule>, String> {
    let parsed = values
        .iter()
        .enumerate()
        .map(|(index, value)| typed::<RelabelConfig>(&format!("{field}[{index}]"), value))
        .collect::<Result<Vec<_>, _>>()?;
    relabel::user_rules(field, &parsed)
}

/// Every Secret and ConfigMap key the Alertmanager entries reference, in `namespace`, sorted.
/// An entry whose credentials do not parse references nothing (translating it says why).
pub fn references_of_alerting(namespace: &str, spec: &ValidAlerting) -> Vec<KeyRef> {
    let mut refs = Refs::new(namespace);
    for am in &spec.alertmanagers {
        let Ok(credentials) = credentials("", &am.entry) else {
            continue;
        };
        refs.basic_auth(credentials.basic_auth.as_ref());
        refs.authorization(credentials.authorization.as_ref());
        refs.tls(credentials.tls.as_ref().map(|tls| &tls.safe));
    }
    refs.into_vec()
}

/// The `alerting` section: `alert_relabel_configs` (the replica label dropped, then the spec's
/// rules) and one `alertmanagers` entry per spec entry, credentials resolved through `values`.
/// The error names the field (`spec.alerting.alertmanagers[0].basicAuth.password: …`), never a
/// value.
pub fn alerting(
    spec: &ValidAlerting,
    settings: &AlertingSettings<'_>,
    values: &dyn Resolver,
) -> Result<Map<String, Value>, String> {
    let mut relabel_configs = Vec::new();
    if !settings.replica_label.is_empty() {
        relabel_configs.push(Rule {
            regex: Some(regex::escape(settings.replica_label)),
            action: Some(Action::Labeldrop),
            ..Rule::default()
        });
    }
    relabel_configs.extend(rules(
        &format!("{FIELD}.alertRelabelConfigs"),
        &spec.alert_relabel_configs,
    )?);
    let ctx = Ctx {
        namespace: settings.namespace,
        values,
    };
    let alertmanagers = spec
        .alertmanagers
        .iter()
        .enumerate()
        .map(|(index, am)| alertmanager(index, am, settings, ctx).map(Value::Object))
        .collect::<Result<Vec<_>, _>>()?;
    let mut out = Map::new();
    out.insert(
        "alert_relabel_configs".into(),
        relabel::to_json(&relabel_configs),
    );
    out.insert("alertmanagers".into(), Value::Array(alertmanagers));
    Ok(out)
}

fn non_empty(value: &Option<String>) -> Option<&str> {
    value.as_deref().filter(|value| !value.is_empty())
}

/// One `alertmanagers` entry.
fn alertmanager(
    index: usize,
    valid: &ValidAlertmanager,
    settings: &AlertingSettings<'_>,
    ctx: Ctx<'_>,
) -> Result<Json, String> {
    let field = format!("{FIELD}.alertmanagers[{index}]");
    let am = &valid.entry;
    let mut out = Json::new();
    http_params(valid, &mut out);
    client(&field, am, ctx, &mut out)?;
    let mut relabel_configs = targets(&valid.target, settings, &mut out);
    relabel_configs.extend(rules(&format!("{field}.relabelings"), &am.relabelings)?);
    if !relabel_configs.is_empty() {
        out.insert("relabel_configs".into(), relabel::to_json(&relabel_configs));
    }
    let alert_relabelings = rules(&format!("{field}.alertRelabelings"), &am.alert_relabelings)?;
    if !alert_relabelings.is_empty() {
        out.insert(
            "alert_relabel_configs".into(),
            relabel::to_json(&alert_relabelings),
        );
    }
    Ok(out)
}

/// `path_prefix`, `scheme`, `timeout`, `enable_http2` and `api_version`.
fn http_params(valid: &ValidAlertmanager, out: &mut Json) {
    let am = &valid.entry;
    out.insert(
        "path_prefix".into(),
        json!(non_empty(&am.path_prefix).unwrap_or("/")),
    );
    out.insert("scheme".into(), json!(valid.scheme));
    if let Some(timeout) = non_empty(&am.timeout) {
        out.insert("timeout".into(), json!(timeout));
    }
    if let Some(http2) = am.enable_http2 {
        out.insert("enable_http2".into(), json!(http2));
    }
    if valid.api_version_v2 {
        out.insert("api_version".into(), json!("v2"));
    }
}

/// `tls_config`, `basic_auth` and `authorization`, resolved.
fn client(
    field: &str,
    am: &AlertmanagerEndpoints,
    ctx: Ctx<'_>,
    out: &mut Json,
) -> Result<(), String> {
    let credentials = credentials(field, am)?;
    if credentials.basic_auth.is_some() && credentials.authorization.is_some() {
        return Err(format!(
            "{field}: basicAuth and authorization are both set: keep one"
        ));
    }
    if let Some(tls) = &credentials.tls {
        let tls = auth::tls(ctx, &format!("{field}.tlsConfig"), tls)?;
        out.insert("tls_config".into(), Value::Object(tls));
    }
    if let Some(basic) = &credentials.basic_auth {
        let value = auth::basic_auth(ctx, &format!("{field}.basicAuth"), basic)?;
        out.insert("basic_auth".into(), value);
    }
    if let Some(authorization) = &credentials.authorization {
        let value = auth::authorization(ctx, &format!("{field}.authorization"), authorization)?;
        out.insert("authorization".into(), value);
    }
    Ok(())
}

/// The Alertmanagers: a Service (discovered, with the rules keeping its name and port) or
/// static addresses. Returns the generated relabelling rules.
fn targets(
    target: &AlertmanagerTarget,
    settings: &AlertingSettings<'_>,
    out: &mut Json,
) -> Vec<Rule> {
    match target {
        AlertmanagerTarget::Service {
            namespace,
            name,
            port,
        } => {
            let namespace = namespace.as_deref().unwrap_or(settings.namespace);
            let role = Role::of_services(settings.service_discovery_role);
            out.insert(
                "kubernetes_sd_configs".into(),
                json!([{"role": role.sd_role(), "namespaces": {"names": [namespace]}}]),
            );
            vec![
                Rule::keep(&["__meta_kubernetes_service_name"], name),
                port_rule(port, role),
            ]
        }
        AlertmanagerTarget::Static(addresses) => {
            out.insert("static_configs".into(), json!([{"targets": addresses}]));
            Vec::new()
        }
    }
}

/// The rule keeping the Service port: by name on the endpoint's port name, by number on the
/// pod's container port (upstream's choice: the number is the container port, the Service's
/// `targetPort`). Upstream keeps every port when none is given, which sends alerts to the
/// cluster port too; here a port is required (validation refuses an entry without one).
fn port_rule(port: &ServicePort, role: Role) -> Rule {
    match port {
        ServicePort::Name(name) => Rule::keep(&[role.port_name_label()], name),
        ServicePort::Number(number) => Rule::keep(
            &["__meta_kubernetes_pod_container_port_number"],
            &number.to_string(),
        ),
    }
}
