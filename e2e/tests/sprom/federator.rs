//! The rules-federator discovering the shards of a ShardedPrometheus and following a scale
//! without a restart.

use super::*;

/// The shards whose rules the federator on `port` serves: shard label → rule names (deduplicated
/// per shard), or why not yet.
async fn federated_shards(port: u16) -> Result<BTreeMap<String, Vec<String>>, String> {
    let address = format!("127.0.0.1:{port}")
        .parse()
        .map_err(|e| format!("{e}"))?;
    let (code, body) = e2e::process::http_get_from(address, "/api/v1/rules").await?;
    let value: Value = serde_json::from_str(&body).map_err(|e| format!("{e}: {body}"))?;
    if code != 200 || value.get("warnings").is_some() {
        return Err(format!("{code}: {body}"));
    }
    let mut shards: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for group in value["data"]["groups"].as_array().into_iter().flatten() {
        for rule in group["rules"].as_array().into_iter().flatten() {
            let shard = rule["labels"]["shard"].as_str().unwrap_or("").to_string();
            let name = rule["name"].as_str().unwrap_or("").to_string();
            let names = shards.entry(shard).or_default();
            if !names.contains(&name) {
                names.push(name);
            }
        }
    }
    Ok(shards)
}

#[tokio::test]
#[ignore = "needs the local zonal cluster with its real nodes (make e2e)"]
async fn sprom_federator_discovers_the_shards_and_follows_a_scale_without_restart() {
    let cluster = Cluster::get();
    let real = e2e::real::RealNodes::of(&cluster);
    let fx = new_fixture("sprom-fed").await;
    fx.prometheus_service_account().await;
    let rules: Api<ConfigMap> = fx.ns.api();
    let rule_file = json!({
        "metadata": {"name": "alerts"},
        "data": {"alerts.yaml": "groups:\n- name: alerts\n  interval: 2s\n  rules:\n  - alert: Always\n    expr: vector(1)\n  - record: one\n    expr: vector(1)\n"},
    });
    fixture::create(&rules, rule_file).await;
    let spec = |shards: u32| {
        fixture::on_real_nodes(
            &real,
            json!({
                "shards": shards,
                "replicas": 2,
                "ruleFiles": [{"configMap": "alerts"}],
                "scrapeConfigs": [],
            }),
        )
    };
    fx.apply(spec(2)).await;
    let (mut federator, port) = fixture::federator_of(NAME, &fx.ns.name);
    let pid = federator.pid();
    let expect = |shards: u32| -> BTreeMap<String, Vec<String>> {
        (0..shards)
            .map(|s| (s.to_string(), vec!["Always".to_string(), "one".to_string()]))
            .collect()
    };
    for shards in [2u32, 3, 1] {
        if shards != 2 {
            fx.apply(spec(shards)).await;
        }
        wait_for(
            &format!("the federator serving the rules of {shards} shards"),
            Duration::from_secs(180),
            || async {
                let served = federated_shards(port).await?;
                (served == expect(shards))
                    .then_some(())
                    .ok_or(format!("{served:?}"))
            },
        )
        .await;
        assert!(federator.is_running(), "the federator kept running");
        assert_eq!(federator.pid(), pid);
    }
}
