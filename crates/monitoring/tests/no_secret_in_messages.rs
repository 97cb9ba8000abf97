//! No secret value in any message: every translation path that resolves credentials
//! (remoteWrite, alerting, the three monitor kinds) is run with a secret-looking value written
//! in place of each value and each object of each credential setting (basic auth, TLS,
//! authorization, OAuth2, bearer token) of a valid input, and as an extra key of each of those
//! objects, in turn: the mistake of writing the secret where its reference belongs. The secret
//! may appear in no error. Messages reach statuses, Events and logs, which many more may read
//! than the Secret. The names and keys of references are left alone: messages name them, so
//! that they can be fixed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};
use zone_monitoring::Object;
use zone_monitoring::monitors::{PodMonitorSpec, ScrapeConfigSpec, ServiceMonitorSpec};
use zone_monitoring::redact::serde_error;
use zone_monitoring::translate::{
    self, AlertingSettings, AlertingSpec, DiscoveryRole, Settings, ValidAlerting,
};

const SECRET: &str = "hunter2-\"`-s3cret";

/// The settings that hold credentials, by reference.
const CREDENTIALS: [&str; 5] = [
    "basicAuth",
    "tlsConfig",
    "authorization",
    "oauth2",
    "bearerTokenSecret",
];

/// `valid` with, in turn, each value and each object in it replaced by the secret.
fn mutations(valid: &Value) -> Vec<Value> {
    fn walk(value: &Value, path: &mut Vec<Step>, into: &mut Vec<Vec<Step>>) {
        into.push(path.clone());
        match value {
            Value::Object(map) => {
                for (key, child) in map {
                    path.push(Step::Key(key.clone()));
                    walk(child, path, into);
                    path.pop();
                }
            }
            Value::Array(items) => {
                for (index, child) in items.iter().enumerate() {
                    path.push(Step::Index(index));
                    walk(child, path, into);
                    path.pop();
                }
            }
            _ => {}
        }
    }
    let mut paths = Vec::new();
    walk(valid, &mut Vec::new(), &mut paths);
    let mut mutated = Vec::new();
    for path in paths {
        // Where credentials belong only; a reference's Secret name and key are named in
        // messages, so the user can fix them: they are identifiers, not values.
        let credential = path
            .iter()
            .any(|step| matches!(step, Step::Key(key) if CREDENTIALS.contains(&key.as_str())));
        if !credential
            || matches!(path.last(), Some(Step::Key(key)) if key == "name" || key == "key")
        {
            continue;
        }
        mutated.push(changed(valid, &path, |at| *at = json!(SECRET)));
        // The secret as a key, too: serde names unknown fields.
        if let Some((_, parent)) = path.split_last() {
            mutated.push(changed(valid, parent, |at| {
                if let Value::Object(map) = at {
                    map.insert(SECRET.to_string(), json!(SECRET));
                }
            }));
        }
    }
    mutated
}

/// A copy of `valid` with `change` made at `path`.
fn changed(valid: &Value, path: &[Step], change: impl FnOnce(&mut Value)) -> Value {
    let mut copy = valid.clone();
    let mut at = &mut copy;
    for step in path {
        at = match step {
            Step::Key(key) => &mut at[key.as_str()],
            Step::Index(index) => &mut at[*index],
        };
    }
    change(at);
    copy
}

#[derive(Clone)]
enum Step {
    Key(String),
    Index(usize),
}

/// Runs `run` on every mutation of `valid`; returns how many were refused, after checking
/// that no refusal names the secret.
fn refusals(valid: Value, run: impl Fn(&Value) -> Result<(), String>) -> usize {
    assert!(
        run(&valid).is_ok(),
        "the valid input is accepted: {:?}",
        run(&valid)
    );
    let mut refused = 0;
    for mutated in mutations(&valid) {
        if let Err(message) = run(&mutated) {
            refused += 1;
            for part in ["hunter2", "s3cret"] {
                assert!(!message.contains(part), "{mutated}\n→ {message}");
            }
        }
    }
    refused
}

/// serde's reading of `value` as the controller does it: the message redacted.
fn typed<T: DeserializeOwned>(value: &Value) -> Result<T, String> {
    serde_json::from_value(value.clone()).map_err(|error| serde_error(&error))
}

fn monitor<S: DeserializeOwned>(spec: &Value) -> Result<Object<S>, String> {
    Ok(Object {
        namespace: "team".into(),
        name: "m".into(),
        uid: "uid".into(),
        labels: Default::default(),
        spec: typed(spec)?,
    })
}

fn credentials() -> Value {
    json!({
        "basicAuth": {"username": {"name": "creds", "key": "user"},
                      "password": {"name": "creds", "key": "pass"}},
        "tlsConfig": {"ca": {"secret": {"name": "tls", "key": "ca.crt"}},
                      "cert": {"secret": {"name": "tls", "key": "tls.crt"}},
                      "keySecret": {"name": "tls", "key": "tls.key"}},
    })
}

fn with_credentials(mut base: Value) -> Value {
    let credentials = credentials();
    let target = base.as_object_mut().unwrap();
    target.extend(credentials.as_object().unwrap().clone());
    base
}

#[test]
fn no_refusal_of_any_input_names_a_secret_written_anywhere_in_it() {
    let values = support::values();
    let settings = Settings::default();

    let remote_write = with_credentials(json!({"url": "https://remote.example/write"}));
    let refused = refusals(remote_write, |entry| {
        let entry: Map<String, Value> = typed(entry)?;
        translate::remote_write("spec.remoteWrite[0]", "team", &entry, &values).map(|_| ())
    });
    assert!(refused >= 9, "remoteWrite: {refused} refusals");

    let bearer = json!({"url": "https://remote.example/write",
                        "bearerTokenSecret": {"name": "creds", "key": "token"}});
    assert!(
        refusals(bearer, |entry| {
            let entry: Map<String, Value> = typed(entry)?;
            translate::remote_write("spec.remoteWrite[0]", "team", &entry, &values).map(|_| ())
        }) >= 1
    );

    let alerting = json!({"alertmanagers": [with_credentials(
        json!({"namespace": "team", "name": "alertmanager", "port": "web"})
    )]});
    let settings_alerting = AlertingSettings {
        namespace: "team",
        service_discovery_role: DiscoveryRole::Endpoints,
        replica_label: "prometheus_replica",
    };
    assert!(
        refusals(alerting, |spec| {
            let spec: AlertingSpec = typed(spec)?;
            let spec = ValidAlerting::new(&spec).map_err(|error| error.to_string())?;
            translate::alerting(&spec, &settings_alerting, &values).map(|_| ())
        }) >= 9
    );

    let endpoint = with_credentials(json!({"port": "metrics"}));
    let service_monitor =
        json!({"selector": {"matchLabels": {"app": "a"}}, "endpoints": [endpoint]});
    assert!(
        refusals(service_monitor, |spec| {
            let object = monitor::<ServiceMonitorSpec>(spec)?;
            translate::service_monitor(&object, &settings, &values).map(|_| ())
        }) >= 9
    );

    let pod_endpoint = with_credentials(json!({"port": "metrics"}));
    let pod_monitor = json!({"selector": {"matchLabels": {"app": "a"}},
                             "podMetricsEndpoints": [pod_endpoint]});
    assert!(
        refusals(pod_monitor, |spec| {
            let object = monitor::<PodMonitorSpec>(spec)?;
            translate::pod_monitor(&object, &settings, &values).map(|_| ())
        }) >= 9
    );

    let scrape_config = with_credentials(json!({"staticConfigs": [{"targets": ["a:9090"]}]}));
    assert!(
        refusals(scrape_config, |spec| {
            let object = monitor::<ScrapeConfigSpec>(spec)?;
            translate::scrape_config(&object, &settings, &values).map(|_| ())
        }) >= 9
    );
}
