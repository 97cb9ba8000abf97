//! Credentials of a ShardedPrometheus `remoteWrite` entry by reference. An entry is written in
//! Prometheus's own snake_case keys; these camelCase keys, named as in prometheus-operator's
//! `RemoteWriteSpec`, name Secrets (and ConfigMaps) of the ShardedPrometheus's namespace
//! instead of values, and become the snake_case keys with the values inlined:
//!
//! | reference key                                 | becomes         |
//! |-----------------------------------------------|-----------------|
//! | `basicAuth: {username, password}`             | `basic_auth`    |
//! | `authorization: {type, credentials: {name, key}}` | `authorization` |
//! | `bearerTokenSecret: {name, key}`              | `authorization` (Bearer) |
//! | `oauth2: {clientId, clientSecret, tokenUrl…}` | `oauth2`        |
//! | `tlsConfig: {ca, cert, keySecret, serverName…}` | `tls_config`  |
//!
//! (`authorization` is both: with `credentials` an object it is a reference, with a string it
//! is Prometheus's own and left alone.)

use serde::Deserialize;
use serde_json::{Map, Value};

use super::auth::{self, Ctx};
use super::refs::Refs;
use crate::monitors::{BasicAuth, OAuth2, SafeAuthorization, SafeTlsConfig, SecretKeySelector};
use crate::resolve::{KeyRef, Resolver};

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct References {
    basic_auth: Option<BasicAuth>,
    bearer_token_secret: Option<SecretKeySelector>,
    oauth2: Option<OAuth2>,
    tls_config: Option<SafeTlsConfig>,
}

/// The reference keys (besides `authorization` with object credentials).
const REFERENCE_KEYS: [(&str, &str); 4] = [
    ("basicAuth", "basic_auth"),
    ("bearerTokenSecret", "authorization"),
    ("oauth2", "oauth2"),
    ("tlsConfig", "tls_config"),
];

/// The entry's typed references, and its `authorization` when that is one.
fn parse(
    field: &str,
    entry: &Map<String, Value>,
) -> Result<(References, Option<SafeAuthorization>), String> {
    let mut object = Map::new();
    for (key, _) in REFERENCE_KEYS {
        if let Some(value) = entry.get(key) {
            object.insert(key.to_string(), value.clone());
        }
    }
    let references: References = serde_json::from_value(Value::Object(object))
        .map_err(|error| format!("{field}: {}", crate::redact::serde_error(&error)))?;
    let authorization = match entry.get("authorization") {
        Some(value) if value.get("credentials").is_some_and(Value::is_object) => {
            Some(serde_json::from_value(value.clone()).map_err(|error| {
                format!(
                    "{field}.authorization: {}",
                    crate::redact::serde_error(&error)
                )
            })?)
        }
        _ => None,
    };
    Ok((references, authorization))
}

/// Every Secret and ConfigMap key `entry` references, in `namespace`.
pub fn references_of_remote_write(namespace: &str, entry: &Map<String, Value>) -> Vec<KeyRef> {
    let Ok((references, authorization)) = parse("", entry) else {
        return Vec::new();
    };
    let mut refs = Refs::new(namespace);
    refs.basic_auth(references.basic_auth.as_ref());
    refs.authorization(authorization.as_ref());
    if let Some(token) = &references.bearer_token_secret {
        refs.secret(token);
    }
    refs.oauth2(references.oauth2.as_ref());
    refs.tls(references.tls_config.as_ref());
    refs.into_vec()
}

/// `entry` (at `field`, e.g. `spec.remoteWrite[0]`) with its references resolved in
/// `namespace` and inlined under Prometheus's keys. An entry that sets a credential both ways
/// (`basicAuth` and `basic_auth`), or two kinds of credentials, is refused.
pub fn remote_write(
    field: &str,
    namespace: &str,
    entry: &Map<String, Value>,
    values: &dyn Resolver,
) -> Result<Map<String, Value>, String> {
    let (references, authorization) = parse(field, entry)?;
    let ctx = Ctx { namespace, values };
    let mut out = entry.clone();
    for (key, _) in REFERENCE_KEYS {
        out.remove(key);
    }
    let mut credentials = Vec::new();
    if let Some(basic) = &references.basic_auth {
        set(
            &mut out,
            field,
            "basic_auth",
            auth::basic_auth(ctx, &format!("{field}.basicAuth"), basic)?,
            "basicAuth",
        )?;
        credentials.push("basicAuth");
    }
    if let Some(authorization) = &authorization {
        let value = auth::authorization(ctx, &format!("{field}.authorization"), authorization)?;
        out.insert("authorization".to_string(), value);
        credentials.push("authorization");
    }
    if let Some(token) = &references.bearer_token_secret {
        let value = auth::bearer_token(ctx, &format!("{field}.bearerTokenSecret"), token)?;
        set(&mut out, field, "authorization", value, "bearerTokenSecret")?;
        credentials.push("bearerTokenSecret");
    }
    if let Some(oauth) = &references.oauth2 {
        set(
            &mut out,
            field,
            "oauth2",
            auth::oauth2(ctx, &format!("{field}.oauth2"), oauth)?,
            "oauth2",
        )?;
        credentials.push("oauth2");
    }
    if credentials.len() > 1 {
        return Err(format!(
            "{field}: {} are set: a remote write authenticates one way",
            credentials.join(" and ")
        ));
    }
    if let Some(tls) = &references.tls_config {
        let tls = auth::safe_tls(ctx, &format!("{field}.tlsConfig"), tls)?;
        set(
            &mut out,
            field,
            "tls_config",
            Value::Object(tls),
            "tlsConfig",
        )?;
    }
    Ok(out)
}

/// Inserts `key`, unless the entry already sets it the Prometheus way.
fn set(
    out: &mut Map<String, Value>,
    field: &str,
    key: &str,
    value: Value,
    from: &str,
) -> Result<(), String> {
    if out.contains_key(key) {
        return Err(format!("{field}: {from} and {key} are both set: keep one"));
    }
    out.insert(key.to_string(), value);
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::collections::BTreeMap;

    use serde_json::json;

    use super::*;
    use crate::resolve::{Source, Values};

    fn values() -> Values {
        let mut values = Values::default();
        let data = BTreeMap::from([
            ("user".to_string(), b"writer".to_vec()),
            ("pass".to_string(), b"s3cret".to_vec()),
            ("token".to_string(), b"t0ken".to_vec()),
            (
                "ca".to_string(),
                b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n".to_vec(),
            ),
        ]);
        values.insert(Source::Secret, "mon", "rw", Some(data));
        values
    }

    fn entry(value: Value) -> Map<String, Value> {
        value.as_object().unwrap().clone()
    }

    #[test]
    fn references_become_prometheus_keys_with_the_values() {
        let entry = entry(json!({
            "url": "https://metrics.example/api/v1/write",
            "basicAuth": {"username": {"name": "rw", "key": "user"},
                          "password": {"name": "rw", "key": "pass"}},
            "tlsConfig": {"ca": {"secret": {"name": "rw", "key": "ca"}}, "serverName": "metrics"},
            "queue_config": {"max_shards": 10},
        }));
        let refs: Vec<String> = references_of_remote_write("mon", &entry)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            refs,
            [
                "Secret mon/rw key \"ca\"",
                "Secret mon/rw key \"pass\"",
                "Secret mon/rw key \"user\""
            ]
        );
        let out = remote_write("spec.remoteWrite[0]", "mon", &entry, &values()).unwrap();
        assert_eq!(
            out["basic_auth"],
            json!({"username": "writer", "password": "s3cret"})
        );
        assert_eq!(out["tls_config"]["server_name"], "metrics");
        assert!(
            out["tls_config"]["ca"]
                .as_str()
                .unwrap()
                .starts_with("-----BEGIN")
        );
        assert_eq!(
            out["queue_config"],
            json!({"max_shards": 10}),
            "the rest stays"
        );
        assert!(!out.contains_key("basicAuth") && !out.contains_key("tlsConfig"));
    }

    #[test]
    fn authorization_and_bearer_token_references() {
        let typed = entry(json!({"url": "http://x", "authorization": {
            "type": "Bearer", "credentials": {"name": "rw", "key": "token"}}}));
        let out = remote_write("spec.remoteWrite[0]", "mon", &typed, &values()).unwrap();
        assert_eq!(
            out["authorization"],
            json!({"type": "Bearer", "credentials": "t0ken"})
        );
        let inline = entry(json!({"url": "http://x", "authorization": {"credentials": "plain"}}));
        let out = remote_write("spec.remoteWrite[0]", "mon", &inline, &values()).unwrap();
        assert_eq!(
            out["authorization"],
            json!({"credentials": "plain"}),
            "Prometheus's own"
        );
        let token =
            entry(json!({"url": "http://x", "bearerTokenSecret": {"name": "rw", "key": "token"}}));
        let out = remote_write("spec.remoteWrite[0]", "mon", &token, &values()).unwrap();
        assert_eq!(out["authorization"]["credentials"], "t0ken");
    }

    #[test]
    fn conflicts_and_missing_secrets_name_the_field_never_a_value() {
        let cases = [
            (
                json!({"url": "http://x", "basicAuth": {"username": {"name": "rw", "key": "user"},
                       "password": {"name": "rw", "key": "pass"}}, "basic_auth": {"username": "u"}}),
                "spec.remoteWrite[1]: basicAuth and basic_auth are both set",
            ),
            (
                json!({"url": "http://x", "basicAuth": {"username": {"name": "rw", "key": "user"},
                       "password": {"name": "rw", "key": "pass"}},
                       "bearerTokenSecret": {"name": "rw", "key": "token"}}),
                "basicAuth and bearerTokenSecret are set",
            ),
            (
                json!({"url": "http://x", "basicAuth": {"username": {"name": "gone", "key": "user"},
                       "password": {"name": "rw", "key": "pass"}}}),
                "spec.remoteWrite[1].basicAuth.username: Secret mon/gone key \"user\": not found",
            ),
            (
                json!({"url": "http://x", "basicAuth": "yes"}),
                "spec.remoteWrite[1]: ",
            ),
        ];
        for (value, expected) in cases {
            let error = remote_write(
                "spec.remoteWrite[1]",
                "mon",
                &entry(value.clone()),
                &values(),
            )
            .unwrap_err();
            assert!(error.contains(expected), "{value}: {error}");
            assert!(
                !error.contains("s3cret") && !error.contains("writer"),
                "{error}"
            );
        }
    }
}
