//! `spec.alerting`: where the shards send their alerts, with prometheus-operator's
//! `AlertmanagerEndpoints` shape (plus static addresses), and how alerts are relabelled on the
//! way.

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Serialize};

/// The Alertmanagers every active shard sends its alerts to. Retained shards send nothing.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AlertingSpec {
    /// Alertmanagers: a Service (discovered through its endpoints, every ready pod behind the
    /// port) or static addresses.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub alertmanagers: Vec<AlertmanagerEndpoints>,

    /// Relabel rules applied to every alert before it is sent, after the controller's own
    /// (which drops the prometheus_replica label, so Alertmanager deduplicates a shard's
    /// replicas). The shard and zone labels stay unless a rule here drops them (labeldrop).
    /// prometheus-operator's RelabelConfig shape: sourceLabels, separator, targetLabel, regex,
    /// modulus, replacement, action.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "free_form_objects")]
    pub alert_relabel_configs: Vec<serde_json::Value>,
}

/// One Alertmanager (or set of them): `name` + `port` of a Service, or `staticAddresses`.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AlertmanagerEndpoints {
    /// The Service's namespace. Default: the ShardedPrometheus's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,

    /// The Service's name; its endpoints are discovered (role endpoints), as
    /// prometheus-operator does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,

    /// The Service port, by name or number. Required with `name`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<IntOrString>,

    /// Static Alertmanager addresses (host:port) instead of a Service; scheme and pathPrefix
    /// complete the URL.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub static_addresses: Vec<String>,

    /// http (default) or https.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheme: Option<String>,

    /// Prefix of the Alertmanager API path, e.g. "/alertmanager".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path_prefix: Option<String>,

    /// The Alertmanager API version: V2 (the only one Prometheus 3 speaks).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,

    /// How long sending a batch of alerts may take, a Prometheus duration. Default 10s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<String>,

    /// Whether HTTP/2 may be used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enable_http2: Option<bool>,

    /// TLS, prometheus-operator's SafeTLSConfig: ca / cert (secret or configMap key),
    /// keySecret, serverName, insecureSkipVerify, minVersion, maxVersion.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "free_form_object")]
    pub tls_config: Option<serde_json::Value>,

    /// Basic authentication: username and password as Secret keys.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "free_form_object")]
    pub basic_auth: Option<serde_json::Value>,

    /// Authorization header: type (default Bearer) and credentials as a Secret key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "free_form_object")]
    pub authorization: Option<serde_json::Value>,

    /// Relabel rules applied to the discovered Alertmanager targets (RelabelConfig shape).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "free_form_objects")]
    pub relabelings: Vec<serde_json::Value>,

    /// Relabel rules applied to alerts sent to these Alertmanagers only (RelabelConfig shape).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "free_form_objects")]
    pub alert_relabelings: Vec<serde_json::Value>,
}

fn free_form_object(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true
    })
}

fn free_form_objects(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "array",
        "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}
    })
}
