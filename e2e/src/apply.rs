//! `kubectl apply` as a user runs it, dry-run on the server, for tests of what the API server
//! refuses; and a check that the cluster serves the CRDs of this checkout.

use std::collections::BTreeSet;
use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::{Api, Client};
use serde_json::Value;

use crate::{Cluster, identity};

/// What the API server answered to one apply.
#[derive(Debug)]
pub struct Verdict {
    pub accepted: bool,
    /// kubectl's stdout and stderr: the refusal's message, field by field.
    pub output: String,
}

/// `kubectl apply --server-side --dry-run=server` of `manifest` into `namespace`: the API server
/// decodes, defaults and validates it (schema, CEL rules, admission) and stores nothing.
pub fn dry_run(cluster: &Cluster, namespace: &str, manifest: &Value) -> Verdict {
    let mut args = dry_run_args(namespace).to_vec();
    args.extend(["-f", "-"]);
    kubectl(cluster, &args, Some(manifest))
}

/// [`dry_run`] of a manifest file, or of a kustomization directory.
pub fn dry_run_path(cluster: &Cluster, namespace: &str, path: &Path) -> Verdict {
    let mut command = identity::kubectl(cluster);
    command
        .args(dry_run_args(namespace))
        .arg(if path.is_dir() { "-k" } else { "-f" })
        .arg(path);
    run(command, None)
}

/// Any `kubectl` command against the cluster under test (`manifest`, if any, on its stdin): what
/// the API server answered.
pub fn kubectl(cluster: &Cluster, args: &[&str], manifest: Option<&Value>) -> Verdict {
    let mut command = identity::kubectl(cluster);
    command.args(args);
    let stdin = manifest.map(Value::to_string);
    run(command, stdin.as_deref().map(str::as_bytes))
}

fn dry_run_args(namespace: &str) -> [&str; 6] {
    [
        "apply",
        "--server-side",
        "--dry-run=server",
        "--field-manager=e2e-crd-validation",
        "-n",
        namespace,
    ]
}

fn run(mut command: Command, stdin: Option<&[u8]>) -> Verdict {
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("starting {command:?}: {e}"));
    {
        let mut pipe = child.stdin.take().expect("stdin");
        if let Some(input) = stdin {
            pipe.write_all(input).expect("writing stdin");
        }
    }
    let output = child.wait_with_output().expect("waiting for kubectl");
    Verdict {
        accepted: output.status.success(),
        output: format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ),
    }
}

/// Every CEL rule of `crd`'s served version, as text.
fn rules(crd: &CustomResourceDefinition) -> BTreeSet<String> {
    fn walk(node: &Value, found: &mut BTreeSet<String>) {
        match node {
            Value::Object(object) => {
                for (key, value) in object {
                    if key == "x-kubernetes-validations" {
                        let rules = value.as_array().into_iter().flatten();
                        found.extend(rules.map(|rule| rule["rule"].to_string()));
                    } else {
                        walk(value, found);
                    }
                }
            }
            Value::Array(items) => items.iter().for_each(|item| walk(item, found)),
            _ => {}
        }
    }
    let mut found = BTreeSet::new();
    if let Some(version) = crd.spec.versions.first() {
        walk(&serde_json::to_value(&version.schema).unwrap(), &mut found);
    }
    found
}

/// Every field of `crd`'s served version, as its path of property names.
fn fields(crd: &CustomResourceDefinition) -> BTreeSet<String> {
    fn walk(node: &Value, at: &str, found: &mut BTreeSet<String>) {
        let children = node["properties"].as_object().into_iter().flatten().chain(
            node["items"]["properties"]
                .as_object()
                .into_iter()
                .flatten(),
        );
        for (name, child) in children {
            let path = format!("{at}.{name}");
            walk(child, &path, found);
            found.insert(path);
        }
        if let Some(values) = node.get("additionalProperties") {
            walk(values, &format!("{at}.*"), found);
        }
    }
    let mut found = BTreeSet::new();
    if let Some(version) = crd.spec.versions.first() {
        let schema = serde_json::to_value(&version.schema).unwrap_or_default();
        walk(&schema["openAPIV3Schema"], "", &mut found);
    }
    found
}

/// Panics unless the cluster's CRDs carry this checkout's fields and rules: a stale CRD would
/// make a test of the rules fail for the wrong reason, and an upgrade that left one behind
/// would have the controllers' writes refused.
pub async fn assert_crds_current(client: &Client) {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for expected in zone_api::crds() {
        let name = expected.metadata.name.clone().unwrap_or_default();
        let served = crds
            .get(&name)
            .await
            .unwrap_or_else(|e| panic!("CRD {name}: {e}; apply config/crd (make local-crds)"));
        let missing: Vec<String> = fields(&expected)
            .difference(&fields(&served))
            .cloned()
            .collect();
        assert!(
            missing.is_empty(),
            "CRD {name} in the cluster lacks this checkout's fields {missing:?}: \
             kubectl apply --server-side -k config/crd"
        );
        assert_eq!(
            rules(&served),
            rules(&expected),
            "CRD {name} in the cluster is not this checkout's: \
             kubectl apply --server-side -k config/crd"
        );
    }
}

/// Server-side applies the ShardedPrometheus `name` with `spec` as `manager` (forcing conflicts,
/// as a test owns its objects): the generation the API server gave it.
pub async fn sprom(
    api: &Api<zone_api::ShardedPrometheus>,
    name: &str,
    manager: &str,
    spec: Value,
) -> i64 {
    let object = serde_json::json!({
        "apiVersion": "zonecontrol.k8s.aws/v1",
        "kind": "ShardedPrometheus",
        "metadata": {"name": name},
        "spec": spec,
    });
    api.patch(
        name,
        &kube::api::PatchParams::apply(manager).force(),
        &kube::api::Patch::Apply(&object),
    )
    .await
    .unwrap_or_else(|e| panic!("applying ShardedPrometheus {name}: {e}"))
    .metadata
    .generation
    .unwrap_or_else(|| panic!("ShardedPrometheus {name} has no generation"))
}
