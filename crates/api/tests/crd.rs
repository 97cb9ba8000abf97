//! The generated CRDs say what the Go controllers' CRDs said, plus our additions.

#![allow(clippy::unwrap_used)]

mod go_fields;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

fn crd(plural: &str) -> CustomResourceDefinition {
    zone_api::crds()
        .into_iter()
        .find(|crd| crd.spec.names.plural == plural)
        .unwrap()
}

fn schema_json(crd: &CustomResourceDefinition) -> serde_json::Value {
    serde_json::to_value(&crd.spec.versions[0].schema).unwrap()["openAPIV3Schema"].clone()
}

#[test]
fn names_group_version_and_subresources() {
    for (plural, short, kind) in [
        ("zoneawareupdates", "zau", "ZoneAwareUpdate"),
        ("zonedisruptionbudgets", "zdb", "ZoneDisruptionBudget"),
        ("shardedprometheuses", "sprom", "ShardedPrometheus"),
    ] {
        let crd = crd(plural);
        assert_eq!(
            crd.metadata.name.as_deref(),
            Some(format!("{plural}.zonecontrol.k8s.aws").as_str())
        );
        assert_eq!(crd.spec.group, "zonecontrol.k8s.aws");
        assert_eq!(crd.spec.scope, "Namespaced");
        assert_eq!(crd.spec.names.kind, kind);
        assert_eq!(crd.spec.names.short_names, Some(vec![short.to_string()]));
        let version = &crd.spec.versions[0];
        assert_eq!(
            (version.name.as_str(), version.served, version.storage),
            ("v1", true, true)
        );
        assert!(version.subresources.as_ref().unwrap().status.is_some());
    }
}

#[test]
fn printer_columns() {
    let columns = |plural| -> Vec<String> {
        crd(plural).spec.versions[0]
            .additional_printer_columns
            .clone()
            .unwrap()
            .into_iter()
            .map(|c| c.name)
            .collect()
    };
    assert_eq!(
        columns("zoneawareupdates"),
        [
            "StatefulSet",
            "Zone",
            "Step",
            "Old",
            "Paused",
            "Paused By",
            "Age"
        ]
    );
    assert_eq!(
        columns("zonedisruptionbudgets"),
        [
            "MaxUnavailable",
            "MinAvailable",
            "Disrupted",
            "DryRun",
            "Age"
        ]
    );
    let sprom = crd("shardedprometheuses").spec.versions[0]
        .additional_printer_columns
        .clone()
        .unwrap();
    let sprom: Vec<_> = sprom
        .iter()
        .map(|c| (c.name.as_str(), c.json_path.as_str()))
        .collect();
    assert_eq!(
        sprom,
        [
            ("Shards", ".status.shards"),
            ("Zones", ".spec.shardingStrategy.topology.values"),
            ("Ready", ".status.readyShards"),
            ("Age", ".metadata.creationTimestamp"),
        ]
    );
}

/// An autoscaler scales `spec.shards` and averages over one pod per active shard.
#[test]
fn sprom_scale_subresource() {
    let crd = crd("shardedprometheuses");
    let scale = crd.spec.versions[0]
        .subresources
        .as_ref()
        .unwrap()
        .scale
        .clone()
        .unwrap();
    assert_eq!(scale.spec_replicas_path, ".spec.shards");
    assert_eq!(scale.status_replicas_path, ".status.shards");
    assert_eq!(
        scale.label_selector_path.as_deref(),
        Some(".status.selector")
    );
}

#[test]
fn sprom_schema_keeps_raw_prometheus_config_and_bounds_shards() {
    let schema = schema_json(&crd("shardedprometheuses"));
    let spec = &schema["properties"]["spec"]["properties"];
    // Free-form objects kept as written; only the key a rule reads is declared.
    for (raw, key) in [("scrapeConfigs", "job_name"), ("remoteWrite", "url")] {
        let items = &spec[raw]["items"];
        assert_eq!(items["type"], "object", "{raw}");
        assert_eq!(items["x-kubernetes-preserve-unknown-fields"], true, "{raw}");
        let declared = items["properties"].as_object().unwrap();
        assert_eq!(declared.keys().collect::<Vec<_>>(), [key], "{raw}");
        assert_eq!(declared[key]["type"], "string", "{raw}");
    }
    assert_eq!(
        spec["shardingStrategy"]["properties"]["mode"]["enum"],
        serde_json::json!(["Classic", "Address", "Topology"])
    );
    assert_eq!(spec["shards"]["minimum"], 1.0);
    assert_eq!(spec["shards"]["maximum"], 1024.0);
    assert_eq!(spec["shards"]["default"], 1);
    assert_eq!(spec["replicas"]["minimum"], 1.0);
    assert_eq!(
        spec["storage"]["properties"]["volumeClaimTemplate"]["properties"]["spec"]["properties"]["storageClassName"]
            ["type"],
        "string"
    );
    let status = &schema["properties"]["status"]["properties"];
    for field in [
        "observedGeneration",
        "shards",
        "readyShards",
        "selector",
        "shardStatuses",
        "retainedShards",
        "conditions",
    ] {
        assert!(status.get(field).is_some(), "sprom status.{field}");
    }
}

#[test]
fn schemas_carry_the_go_field_names_and_types() {
    let zau = schema_json(&crd("zoneawareupdates"));
    let spec = &zau["properties"]["spec"]["properties"];
    assert_eq!(spec["statefulset"]["type"], "string");
    assert_eq!(spec["exponentialFactor"]["type"], "string");
    assert_eq!(spec["exponentialFactor"]["default"], "2.0");
    assert_eq!(spec["maxUnavailable"]["x-kubernetes-int-or-string"], true);
    assert_eq!(spec["ignoreAlarm"]["type"], "boolean");
    let status = &zau["properties"]["status"]["properties"];
    assert_eq!(
        status["oldReplicas"]["additionalProperties"]["type"],
        "integer"
    );
    for field in [
        "currentRevision",
        "updateRevision",
        "updateStep",
        "deletedReplicas",
        "pausedRollout",
        "pausedBy",
        "nextZoneNotBefore",
        "conditions",
        "observedGeneration",
    ] {
        assert!(status.get(field).is_some(), "zau status.{field}");
    }

    let zdb = schema_json(&crd("zonedisruptionbudgets"));
    let spec = &zdb["properties"]["spec"]["properties"];
    assert!(spec["selector"]["properties"].get("matchLabels").is_some());
    assert_eq!(spec["maxUnavailable"]["x-kubernetes-int-or-string"], true);
    let status = &zdb["properties"]["status"]["properties"];
    assert_eq!(
        status["disruptedPods"]["additionalProperties"]["format"],
        "date-time"
    );
    for field in go_fields::ZDB_STATUS.into_iter().chain(["conditions"]) {
        assert!(status.get(field).is_some(), "zdb status.{field}");
    }
}

/// The committed YAML is what the types generate: `make test`'s drift check of config/crd/ (the
/// same `crdgen --check` as `make crds-check`, with the test build's crdgen).
#[test]
fn committed_yaml_is_current() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../config/crd");
    let status = std::process::Command::new(env!("CARGO_BIN_EXE_crdgen"))
        .args(["--out", dir, "--check"])
        .status()
        .unwrap();
    assert!(status.success(), "config/crd drifted: run `make crds`");
}

/// Paths of the properties under `node` that have no description (`kubectl explain` shows
/// nothing for them).
fn undescribed(node: &serde_json::Value, path: &str, found: &mut Vec<String>) {
    if let Some(properties) = node["properties"].as_object() {
        for (name, child) in properties {
            let here = format!("{path}.{name}");
            if child.get("description").is_none() {
                found.push(here.clone());
            }
            undescribed(child, &here, found);
        }
    }
    for (key, suffix) in [("items", "[]"), ("additionalProperties", "{}")] {
        if node[key].is_object() {
            undescribed(&node[key], &format!("{path}{suffix}"), found);
        }
    }
}

#[test]
fn every_field_is_described() {
    let mut found = Vec::new();
    for plural in [
        "zoneawareupdates",
        "zonedisruptionbudgets",
        "shardedprometheuses",
    ] {
        let schema = schema_json(&crd(plural));
        undescribed(&schema, plural, &mut found);
    }
    assert!(found.is_empty(), "fields without a description: {found:#?}");
}
