//! The CRDs' schema against the real API server: `kubectl apply` refuses each kind of invalid
//! spec the schema can catch, with a message naming the field, and accepts every valid spec,
//! the Go controllers' manifests and `config/samples` among them. Server-side dry runs: nothing
//! is stored, no controller runs. Last, the CRDs' names and list types: one object of each kind,
//! listed by their category, and statuses patched with one and with two conditions of a type.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use e2e::apply::{Verdict, assert_crds_current, dry_run, dry_run_path, kubectl};
use e2e::deploy::repo_root;
use e2e::{Cluster, TestNamespace};
use serde_json::{Value, json};

fn manifest(kind: &str, name: &str, spec: Value) -> Value {
    json!({
        "apiVersion": "zonecontrol.k8s.aws/v1",
        "kind": kind,
        "metadata": {"name": name},
        "spec": spec,
    })
}

fn zau(name: &str, spec: Value) -> Value {
    manifest("ZoneAwareUpdate", name, spec)
}

fn zdb(name: &str, spec: Value) -> Value {
    manifest("ZoneDisruptionBudget", name, spec)
}

/// A valid ShardedPrometheus (three shards, one per zone), changed by `change`.
fn sprom(name: &str, change: impl FnOnce(&mut Value)) -> Value {
    let mut spec = json!({
        "shards": 3,
        "shardingStrategy": {
            "mode": "Topology",
            "topology": {"values": ["zone-a", "zone-b", "zone-c"]},
        },
        "scrapeConfigs": [{"job_name": "pods", "kubernetes_sd_configs": [{"role": "pod"}]}],
    });
    change(&mut spec);
    manifest("ShardedPrometheus", name, spec)
}

/// An invalid manifest and what the refusal must say: the field, and a part of the message.
struct Refusal {
    manifest: Value,
    field: &'static str,
    says: &'static str,
}

fn refused(manifest: Value, field: &'static str, says: &'static str) -> Refusal {
    Refusal {
        manifest,
        field,
        says,
    }
}

/// One row per kind of invalid spec the schema catches.
fn invalid_specs() -> Vec<Refusal> {
    let mut rows = invalid_zau_specs();
    rows.extend(invalid_zdb_specs());
    rows.extend(sprom_specs_out_of_the_schema_bounds());
    rows.extend(sprom_specs_refused_by_cel_rules());
    rows.extend(more_sprom_specs_refused_by_cel_rules());
    rows
}

/// Sets the topology sharding's zones of a ShardedPrometheus spec.
fn zones(values: Value) -> impl FnOnce(&mut Value) {
    move |s: &mut Value| s["shardingStrategy"]["topology"]["values"] = values
}

/// ZoneAwareUpdate
fn invalid_zau_specs() -> Vec<Refusal> {
    vec![
        refused(
            zau("no-statefulset", json!({"maxUnavailable": 1})),
            "spec.statefulset",
            "name the StatefulSet",
        ),
        refused(
            zau("blank-statefulset", json!({"statefulset": "  "})),
            "spec.statefulset",
            "name the StatefulSet",
        ),
        refused(
            zau(
                "zau-zero",
                json!({"statefulset": "web", "maxUnavailable": 0}),
            ),
            "spec.maxUnavailable",
            "a rollout that can remove no pod cannot progress",
        ),
        refused(
            zau(
                "zau-zero-percent",
                json!({"statefulset": "web", "maxUnavailable": "0%"}),
            ),
            "spec.maxUnavailable",
            "a rollout that can remove no pod cannot progress",
        ),
        refused(
            zau(
                "zau-garbage",
                json!({"statefulset": "web", "maxUnavailable": "half"}),
            ),
            "spec.maxUnavailable",
            "an integer from 0 to 2147483647 or a percentage",
        ),
        refused(
            zau(
                "zau-negative",
                json!({"statefulset": "web", "maxUnavailable": -1}),
            ),
            "spec.maxUnavailable",
            "an integer from 0 to 2147483647 or a percentage",
        ),
        refused(
            zau(
                "zau-huge",
                json!({"statefulset": "web", "maxUnavailable": 3_000_000_000_i64}),
            ),
            "spec.maxUnavailable",
            "an integer from 0 to 2147483647 or a percentage",
        ),
        refused(
            zau(
                "factor-below-one",
                json!({"statefulset": "web", "exponentialFactor": "0.5"}),
            ),
            "spec.exponentialFactor",
            "a decimal number of at least 1",
        ),
        refused(
            zau(
                "factor-garbage",
                json!({"statefulset": "web", "exponentialFactor": "fast"}),
            ),
            "spec.exponentialFactor",
            "a decimal number of at least 1",
        ),
        refused(
            zau(
                "group-and-statefulset",
                json!({"statefulset": "web", "selector": {"matchLabels": {"rollout-group": "web"}}}),
            ),
            "spec.selector",
            "are exclusive",
        ),
        refused(
            zau("group-of-everything", json!({"selector": {}})),
            "spec.selector",
            "every StatefulSet of the namespace",
        ),
        refused(
            zau(
                "group-bad-operator",
                json!({"selector": {"matchExpressions": [{"key": "rollout-group", "operator": "Is"}]}}),
            ),
            "spec.selector.matchExpressions[0].operator",
            "In, NotIn, Exists or DoesNotExist",
        ),
    ]
}

/// ZoneDisruptionBudget
fn invalid_zdb_specs() -> Vec<Refusal> {
    vec![
        refused(
            zdb("no-selector", json!({"maxUnavailable": 1})),
            "spec.selector",
            "would select every pod of the namespace",
        ),
        refused(
            zdb(
                "empty-selector",
                json!({"selector": {"matchLabels": {}}, "maxUnavailable": 1}),
            ),
            "spec.selector",
            "would select every pod of the namespace",
        ),
        refused(
            zdb(
                "bad-operator",
                json!({"selector": {"matchExpressions": [
                    {"key": "app", "operator": "Like", "values": ["web"]},
                ]}}),
            ),
            "spec.selector.matchExpressions[0].operator",
            "must be In, NotIn, Exists or DoesNotExist",
        ),
        refused(
            zdb(
                "in-without-values",
                json!({"selector": {"matchExpressions": [{"key": "app", "operator": "In"}]}}),
            ),
            "spec.selector.matchExpressions[0].values",
            "need at least one value",
        ),
        refused(
            zdb(
                "exists-with-values",
                json!({"selector": {"matchExpressions": [
                    {"key": "app", "operator": "Exists", "values": ["web"]},
                ]}}),
            ),
            "spec.selector.matchExpressions[0].values",
            "take no values",
        ),
        refused(
            zdb(
                "zdb-garbage",
                json!({"selector": {"matchLabels": {"app": "web"}}, "maxUnavailable": "x%"}),
            ),
            "spec.maxUnavailable",
            "an integer from 0 to 2147483647 or a percentage",
        ),
        refused(
            zdb(
                "zdb-negative",
                json!({"selector": {"matchLabels": {"app": "web"}}, "maxUnavailable": -2}),
            ),
            "spec.maxUnavailable",
            "an integer from 0 to 2147483647 or a percentage",
        ),
        refused(
            zdb(
                "zdb-both-limits",
                json!({"selector": {"matchLabels": {"app": "web"}}, "maxUnavailable": 1, "minAvailable": 2}),
            ),
            "spec.minAvailable",
            "spec.minAvailable and spec.maxUnavailable are exclusive: set one",
        ),
        refused(
            zdb(
                "zdb-min-garbage",
                json!({"selector": {"matchLabels": {"app": "web"}}, "minAvailable": "most"}),
            ),
            "spec.minAvailable",
            "spec.minAvailable must be an integer from 0 to 2147483647 or a percentage",
        ),
        refused(
            zdb(
                "zdb-unhealthy-policy",
                json!({"selector": {"matchLabels": {"app": "web"}}, "unhealthyPodEvictionPolicy": "Never"}),
            ),
            "spec.unhealthyPodEvictionPolicy",
            "Unsupported value: \"Never\"",
        ),
        refused(
            zdb(
                "zdb-rollouts-when-frozen",
                json!({"selector": {"matchLabels": {"app": "web"}}, "rolloutsWhenFrozen": "Sometimes"}),
            ),
            "spec.rolloutsWhenFrozen",
            "Unsupported value: \"Sometimes\"",
        ),
    ]
}

/// ShardedPrometheus: bounds of the schema itself
fn sprom_specs_out_of_the_schema_bounds() -> Vec<Refusal> {
    let many_zones: Vec<String> = (0..65).map(|i| format!("zone-{i}")).collect();
    vec![
        refused(
            sprom("no-shard", |s| s["shards"] = json!(0)),
            "spec.shards",
            "greater than or equal to 1",
        ),
        refused(
            sprom("too-many-shards", |s| s["shards"] = json!(1025)),
            "spec.shards",
            "less than or equal to 1024",
        ),
        refused(
            sprom("no-replica", |s| s["replicas"] = json!(0)),
            "spec.replicas",
            "greater than or equal to 1",
        ),
        refused(
            sprom("negative-grace", |s| {
                s["terminationGracePeriodSeconds"] = json!(-1)
            }),
            "spec.terminationGracePeriodSeconds",
            "greater than or equal to 0",
        ),
        refused(
            sprom("unknown-mode", |s| s["mode"] = json!("Replica")),
            "spec.mode",
            "Unsupported value",
        ),
        refused(
            sprom("unknown-sharding", |s| {
                s["shardingStrategy"]["mode"] = json!("Zonal")
            }),
            "spec.shardingStrategy.mode",
            "Unsupported value",
        ),
        refused(
            sprom("long-zone", zones(json!(["z".repeat(64)]))),
            "spec.shardingStrategy.topology.values[0]",
            "may not be more than 63",
        ),
        refused(
            sprom("too-many-zones", zones(json!(many_zones))),
            "spec.shardingStrategy.topology.values",
            "must have at most 64 items",
        ),
    ]
}

/// ShardedPrometheus: CEL rules
fn sprom_specs_refused_by_cel_rules() -> Vec<Refusal> {
    vec![
        refused(
            sprom("no-zone", |s| s["shardingStrategy"] = json!({})),
            "spec.shardingStrategy.topology.values",
            "Topology sharding needs at least one zone",
        ),
        refused(
            sprom("empty-zone", zones(json!(["zone-a", ""]))),
            "spec.shardingStrategy.topology.values",
            "every zone must be a label value",
        ),
        refused(
            sprom("zone-not-label-value", zones(json!(["zone a"]))),
            "spec.shardingStrategy.topology.values",
            "every zone must be a label value",
        ),
        refused(
            sprom(
                "duplicate-zone",
                zones(json!(["zone-a", "zone-b", "zone-a"])),
            ),
            "spec.shardingStrategy.topology.values",
            "lists a zone more than once",
        ),
        refused(
            sprom("zone-label-name", |s| {
                s["shardingStrategy"]["topology"]["externalLabelName"] = json!("zone-name")
            }),
            "spec.shardingStrategy.topology.externalLabelName",
            "must be a Prometheus label name",
        ),
        refused(
            sprom("zone-label-reserved", |s| {
                s["shardingStrategy"]["topology"]["externalLabelName"] = json!("shard")
            }),
            "spec.shardingStrategy.topology.externalLabelName",
            "also set by the controller",
        ),
        refused(
            sprom("external-label-name", |s| {
                s["externalLabels"] = json!({"team-name": "x"})
            }),
            "spec.externalLabels",
            "every name must be a Prometheus label name",
        ),
        refused(
            sprom("external-label-reserved", |s| {
                s["externalLabels"] = json!({"prometheus_replica": "x"})
            }),
            "spec.externalLabels",
            "shard and prometheus_replica are set by the controller",
        ),
        refused(
            sprom("external-label-zone", |s| {
                s["externalLabels"] = json!({"zone": "x"})
            }),
            "spec.externalLabels",
            "the zone label",
        ),
        refused(
            sprom("external-label-own-zone", |s| {
                s["shardingStrategy"]["topology"]["externalLabelName"] = json!("dc");
                s["externalLabels"] = json!({"dc": "x"});
            }),
            "spec.externalLabels",
            "the zone label",
        ),
        refused(
            sprom("no-job-name", |s| {
                s["scrapeConfigs"] = json!([{"static_configs": []}])
            }),
            "spec.scrapeConfigs[0].job_name",
            "must be a non-empty string",
        ),
        refused(
            sprom("empty-job-name", |s| {
                s["scrapeConfigs"] = json!([{"job_name": ""}])
            }),
            "spec.scrapeConfigs[0].job_name",
            "must be a non-empty string",
        ),
    ]
}

/// ShardedPrometheus: CEL rules, continued
fn more_sprom_specs_refused_by_cel_rules() -> Vec<Refusal> {
    vec![
        refused(
            sprom("scrape-config-not-object", |s| {
                s["scrapeConfigs"] = json!(["pods"])
            }),
            "spec.scrapeConfigs[0]",
            "expected map",
        ),
        refused(
            sprom("remote-write-url", |s| {
                s["remoteWrite"] = json!([{"name": "central"}])
            }),
            "spec.remoteWrite[0].url",
            "must be a non-empty string",
        ),
        refused(
            sprom("agent-without-remote-write", |s| s["mode"] = json!("Agent")),
            "spec.remoteWrite",
            "needs at least one target",
        ),
        refused(
            sprom("agent-with-rules", |s| {
                s["mode"] = json!("Agent");
                s["remoteWrite"] = json!([{"url": "http://central/api/v1/write"}]);
                s["ruleFiles"] = json!([{"configMap": "rules"}]);
            }),
            "spec.ruleFiles",
            "agents do not evaluate rules",
        ),
        refused(
            sprom("empty-rule-config-map", |s| {
                s["ruleFiles"] = json!([{"configMap": ""}])
            }),
            "spec.ruleFiles[0].configMap",
            "name the ConfigMap holding the rules",
        ),
        refused(
            sprom("empty-rule-key", |s| {
                s["ruleFiles"] = json!([{"configMap": "rules", "key": ""}])
            }),
            "spec.ruleFiles[0].key",
            "leave key out to load every key",
        ),
        refused(
            sprom("retention-time", |s| s["retention"] = json!({"time": "15"})),
            "spec.retention.time",
            "must be a Prometheus duration",
        ),
        refused(
            sprom("retention-time-order", |s| {
                s["retention"] = json!({"time": "12h1d"})
            }),
            "spec.retention.time",
            "must be a Prometheus duration",
        ),
        refused(
            sprom("retention-size", |s| {
                s["retention"] = json!({"size": "10gb"})
            }),
            "spec.retention.size",
            "must be a Prometheus size",
        ),
        refused(
            sprom(
                "retention-period",
                |s| {
                    s["shardRetentionPolicy"] =
                        json!({"whenScaled": "Retain", "retain": {"retentionPeriod": "1h1h"}})
                },
            ),
            "spec.shardRetentionPolicy.retain.retentionPeriod",
            "must be a Prometheus duration",
        ),
        refused(
            sprom("two-storages", |s| {
                s["storage"] = json!({
                    "emptyDir": {},
                    "volumeClaimTemplate": {
                        "spec": {"resources": {"requests": {"storage": "1Gi"}}},
                    },
                })
            }),
            "spec.storage",
            "sets both volumeClaimTemplate and emptyDir",
        ),
    ]
}

/// Valid specs, the edges of each rule among them.
fn valid_specs() -> Vec<Value> {
    let web = json!({"matchLabels": {"app": "web"}});
    vec![
        // A rollout group, as rollout-operator's users label theirs.
        zau(
            "rollout-group",
            json!({"selector": {"matchLabels": {"rollout-group": "ingester"}}, "maxUnavailable": "25%"}),
        ),
        // A ZoneDisruptionBudget of 0 is a freeze, not an error.
        zdb(
            "zdb-zero",
            json!({"selector": web.clone(), "maxUnavailable": 0}),
        ),
        zdb(
            "zdb-zero-percent",
            json!({"selector": web.clone(), "maxUnavailable": "0%"}),
        ),
        zdb(
            "zdb-zero-string",
            json!({"selector": web.clone(), "maxUnavailable": "0"}),
        ),
        zdb(
            "zdb-min-available",
            json!({"selector": web.clone(), "minAvailable": "50%", "unhealthyPodEvictionPolicy": "IfHealthyBudget"}),
        ),
        zdb(
            "zdb-always-allow",
            json!({"selector": web.clone(), "minAvailable": 2, "unhealthyPodEvictionPolicy": "AlwaysAllow"}),
        ),
        zdb(
            "zdb-rollouts-proceed",
            json!({"selector": web.clone(), "maxUnavailable": 0, "rolloutsWhenFrozen": "Proceed"}),
        ),
        zdb("zdb-default", json!({"selector": web})),
        zdb(
            "zdb-expressions",
            json!({"selector": {"matchExpressions": [
                {"key": "app", "operator": "In", "values": ["web"]},
                {"key": "canary", "operator": "DoesNotExist"},
            ]}, "maxUnavailable": "100%"}),
        ),
        zau("zau-default", json!({"statefulset": "web"})),
        zau(
            "zau-percent",
            json!({"statefulset": "web", "maxUnavailable": "+25%", "exponentialFactor": "1.5"}),
        ),
        zau(
            "zau-string-int",
            json!({"statefulset": "web", "maxUnavailable": "3", "exponentialFactor": "1"}),
        ),
        zau(
            "zau-no-growth",
            json!({"statefulset": "web", "maxUnavailable": 2147483647, "exponentialFactor": "0.0"}),
        ),
        // Classic sharding ignores topology: nothing there is checked.
        sprom("classic", |s| {
            s["shardingStrategy"] = json!({
                "mode": "Classic",
                "topology": {"values": ["not a zone", "not a zone"], "externalLabelName": "shard"},
            });
            s["externalLabels"] = json!({"zone": "x"});
        }),
        sprom("address", |s| {
            s["shardingStrategy"] = json!({"mode": "Address"})
        }),
        sprom("no-zone-label", |s| {
            s["shardingStrategy"]["topology"]["externalLabelName"] = json!("");
            s["externalLabels"] = json!({"zone": "x", "cluster": "local"});
        }),
        sprom("fewer-shards-than-zones", |s| s["shards"] = json!(1)),
        sprom("agent", |s| {
            s["mode"] = json!("Agent");
            s["remoteWrite"] =
                json!([{"url": "http://central/api/v1/write", "queue_config": {"capacity": 10}}]);
        }),
        sprom("server-options", |s| {
            s["ruleFiles"] =
                json!([{"configMap": "rules"}, {"configMap": "more", "key": "alerts.yaml"}]);
            s["retention"] = json!({"time": "1y2w3d4h5m6s7ms", "size": "1.5TiB"});
            s["shardRetentionPolicy"] =
                json!({"whenScaled": "Retain", "retain": {"retentionPeriod": "0"}});
            s["storage"] = json!({"emptyDir": {"sizeLimit": "1Gi"}});
            s["terminationGracePeriodSeconds"] = json!(0);
        }),
    ]
}

/// Manifests written for the Go zone-aware controllers (their samples, e2e manifests and README
/// examples), and objects as they store them: still accepted. The README's `exponentialFactor:
/// 0` is quoted here: the Go CRD typed the field a string too, so the bare number never applied.
fn go_manifests() -> Vec<Value> {
    let mut manifests = vec![
        zau(
            "go-sample",
            json!({
                "statefulset": "ingester",
                "maxUnavailable": 2,
                "pauseRolloutAlarm": "PauseDeployment.Ingesters",
                "ignoreAlarm": false,
            }),
        ),
        zau(
            "go-e2e",
            json!({"statefulset": "web", "maxUnavailable": "10%", "dryRun": false}),
        ),
        zau(
            "go-readme",
            json!({"statefulset": "web", "maxUnavailable": "33%", "exponentialFactor": "0"}),
        ),
        zdb(
            "go-sample",
            json!({
                "selector": {"matchLabels": {"name": "ingester"}},
                "maxUnavailable": "10%",
                "dryRun": false,
            }),
        ),
        zdb(
            "go-e2e",
            json!({
                "maxUnavailable": "10%",
                "dryRun": false,
                "selector": {"matchLabels": {"app": "e2e"}},
            }),
        ),
    ];
    // The Go-shaped stored objects this repository's unit tests read: their specs.
    for fixture in ["go-zau.yaml", "go-zdb.yaml"] {
        let path = repo_root().join("crates/api/tests/fixtures").join(fixture);
        let object: Value =
            serde_norway::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let kind = object["kind"].as_str().unwrap();
        manifests.push(manifest(kind, "go-stored", object["spec"].clone()));
    }
    manifests
}

fn describe(manifest: &Value) -> String {
    format!(
        "{} {}",
        manifest["kind"].as_str().unwrap_or_default(),
        manifest["metadata"]["name"].as_str().unwrap_or_default()
    )
}

#[tokio::test]
#[ignore = "needs the local zonal cluster (make e2e)"]
async fn crd_validation_refuses_each_invalid_spec_naming_the_field() {
    let cluster = Cluster::get();
    let ns = TestNamespace::create(&cluster, "crd-invalid").await;
    assert_crds_current(&ns.client).await;
    let mut wrong = Vec::new();
    for row in invalid_specs() {
        let Verdict { accepted, output } = dry_run(&cluster, &ns.name, &row.manifest);
        let named = output.contains(&format!("{}:", row.field)) && output.contains(row.says);
        if accepted || !named {
            wrong.push(format!(
                "{}: expected a refusal naming {} and saying {:?}; accepted: {accepted}, \
                 output:\n{output}",
                describe(&row.manifest),
                row.field,
                row.says
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[tokio::test]
#[ignore = "needs the local zonal cluster (make e2e)"]
async fn crd_validation_accepts_valid_specs_and_the_go_controllers_manifests() {
    let cluster = Cluster::get();
    let ns = TestNamespace::create(&cluster, "crd-valid").await;
    assert_crds_current(&ns.client).await;
    let mut wrong = Vec::new();
    for manifest in valid_specs().into_iter().chain(go_manifests()) {
        let verdict = dry_run(&cluster, &ns.name, &manifest);
        if !verdict.accepted {
            wrong.push(format!("{}: {}", describe(&manifest), verdict.output));
        }
    }
    let samples = repo_root().join("config/samples");
    let verdict = dry_run_path(&cluster, &ns.name, &samples);
    if !verdict.accepted {
        wrong.push(format!("config/samples: {}", verdict.output));
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[tokio::test]
#[ignore = "needs the local zonal cluster (make e2e)"]
async fn crd_validation_lists_the_kinds_under_their_category_and_keys_conditions_by_type() {
    let cluster = Cluster::get();
    let ns = TestNamespace::create(&cluster, "crd-category").await;
    assert_crds_current(&ns.client).await;
    let objects = [
        zau("web", json!({"statefulset": "web"})),
        zdb(
            "web",
            json!({"selector": {"matchLabels": {"app": "web"}}, "maxUnavailable": 1}),
        ),
        sprom("shards", |_| {}),
    ];
    for object in &objects {
        let Verdict {
            accepted: created,
            output,
        } = kubectl(
            &cluster,
            &["create", "-n", &ns.name, "-f", "-"],
            Some(object),
        );
        assert!(created, "{}: {output}", describe(object));
    }
    // The category every kind declares: one `kubectl get` lists them all.
    let Verdict {
        accepted: listed,
        output,
    } = kubectl(
        &cluster,
        &["get", "zone-aware", "-n", &ns.name, "-o", "name"],
        None,
    );
    assert!(listed, "kubectl get zone-aware: {output}");
    let mut names: Vec<&str> = output.lines().collect();
    names.sort_unstable();
    assert_eq!(
        names,
        [
            "shardedprometheus.zonecontrol.k8s.aws/shards",
            "zoneawareupdate.zonecontrol.k8s.aws/web",
            "zonedisruptionbudget.zonecontrol.k8s.aws/web",
        ]
    );
    // Conditions are a map keyed by type: one of a type is taken, two are refused.
    let condition = json!({"type": "Ready", "status": "True", "reason": "Checked", "message": "",
                           "lastTransitionTime": "2026-01-01T00:00:00Z"});
    for (resource, name) in [("zau", "web"), ("zdb", "web"), ("sprom", "shards")] {
        let patch = |conditions: Value| json!({"status": {"conditions": conditions}}).to_string();
        let status = |patch: &str| {
            kubectl(
                &cluster,
                &[
                    "patch",
                    resource,
                    name,
                    "-n",
                    &ns.name,
                    "--subresource=status",
                    "--type=merge",
                    "-p",
                    patch,
                ],
                None,
            )
        };
        let Verdict {
            accepted: taken,
            output,
        } = status(&patch(json!([condition])));
        assert!(
            taken,
            "{resource}/{name}: one Ready condition refused: {output}"
        );
        let Verdict {
            accepted: taken,
            output,
        } = status(&patch(json!([condition, condition])));
        assert!(
            !taken && output.contains("Duplicate value"),
            "{resource}/{name}: two Ready conditions: expected a refusal naming the duplicate, got: {output}"
        );
    }
}
