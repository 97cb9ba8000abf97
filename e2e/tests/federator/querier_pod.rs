//! A Thanos Querier as a pod on the real nodes reads the federator's gRPC port over mutual TLS,
//! as a cluster's Querier would (`--grpc-client-tls-secure`, its client certificate from a
//! Secret); a second Querier pod, trusting the same CA but holding no certificate of its own, is
//! refused at the handshake and gets no rule. The federator runs on the host, on the address the
//! pods reach it at, with `--tls-cert-dir` and `--grpc-client-ca-file` (no `--auth`: holding a
//! certificate is what lets a caller in).

use std::net::SocketAddr;
use std::time::Instant;

use e2e::real::RealNodes;
use e2e::tls::TestCa;
use e2e::{Cluster, TestNamespace, wait_for};
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::Api;
use serde_json::{Value, json};

use super::shards::{Rules, two_shards_of_two_replicas};
use super::{TIMEOUT, rules_of, spawn};

/// The Querier pods' HTTP port.
const QUERY_PORT: u16 = 10902;

#[tokio::test]
#[ignore = "needs the local zonal cluster with its real nodes, Prometheus 3.16 and Thanos (make e2e)"]
async fn a_querier_pod_reads_the_federator_over_mutual_tls_and_one_without_a_certificate_is_refused()
 {
    let cluster = Cluster::get();
    let real = RealNodes::of(&cluster);
    let ns = TestNamespace::create(&cluster, "fed-querier").await;
    let host = e2e::alertmanager::host_address(&ns.client).await;
    let rules = Rules::write("querier-pod");
    let (_backends, endpoints) = two_shards_of_two_replicas(&rules, "fedpod").await;

    let servers = TestCa::new("federator CA");
    let dir = std::env::temp_dir().join(format!("e2e-fed-querier-{}", ns.name));
    let grpc = SocketAddr::new(host, e2e::localstack::free_port());
    let flags = federator_flags_and_secrets(&ns, &servers, &dir, grpc).await;
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let env = [("KUBECONFIG", "/dev/null".to_string())];
    let (_federator, _port) = spawn::federator(&endpoints, &flags, &env);

    let pods: Api<Pod> = ns.api();
    let started = Instant::now();
    for (name, secret, with_certificate) in [
        ("querier", "querier-tls", true),
        ("anonymous", "federator-ca", false),
    ] {
        e2e::fixture::create(
            &pods,
            querier_pod(&real, name, secret, with_certificate, &grpc),
        )
        .await;
    }
    let ready = e2e::pods::wait_available(&pods, "app=querier", 2, TIMEOUT).await;
    let address = |name: &str| -> SocketAddr {
        let pod = ready
            .iter()
            .find(|p| p.metadata.name.as_deref() == Some(name))
            .expect("the Querier pod");
        let ip = pod
            .status
            .as_ref()
            .and_then(|s| s.pod_ip.as_deref())
            .unwrap();
        SocketAddr::new(ip.parse().unwrap(), QUERY_PORT)
    };

    let read = wait_for(
        "the federator's rules at the Querier pod",
        TIMEOUT,
        || async {
            let data = e2e::thanos::api_at(address("querier"), "/api/v1/rules").await?;
            let found = rules_of(&data);
            (found.len() == 11)
                .then_some(found)
                .ok_or(format!("{} rules: {data}", rules_of(&data).len()))
        },
    )
    .await;
    eprintln!(
        "the Querier pod holds the federator's 11 rules {:.1?} after the pods were created",
        started.elapsed()
    );
    assert!(
        read.iter()
            .all(|rule| rule.6.contains(r#""shard":"0""#) || rule.6.contains(r#""shard":"1""#)),
        "{read:?}"
    );

    refused_without_a_certificate(&pods, address("anonymous"), grpc).await;
    std::fs::remove_dir_all(dir).unwrap();
}

/// The serving certificate (for the host's address) and the callers' CA in `dir`, the federator's
/// flags over them (gRPC on `grpc`), and the Querier pods' Secrets in `ns`: `querier-tls` (the
/// federator's CA, a client certificate) and `federator-ca` (the CA alone).
async fn federator_flags_and_secrets(
    ns: &TestNamespace,
    servers: &TestCa,
    dir: &std::path::Path,
    grpc: SocketAddr,
) -> Vec<String> {
    let clients = TestCa::new("queriers CA");
    let serving = servers.issue(vec![grpc.ip().to_string()], Some(1));
    let querier = clients.issue(vec!["thanos-querier".into()], Some(2));
    std::fs::create_dir_all(dir).unwrap();
    for (name, content) in [
        ("tls.crt", &serving.cert),
        ("tls.key", &serving.key),
        ("clients.crt", &clients.pem),
    ] {
        std::fs::write(dir.join(name), content).unwrap();
    }
    let secrets: Api<Secret> = ns.api();
    e2e::fixture::create(
        &secrets,
        json!({"metadata": {"name": "querier-tls"}, "stringData": {
            "ca.crt": servers.pem, "tls.crt": querier.cert, "tls.key": querier.key,
        }}),
    )
    .await;
    e2e::fixture::create(
        &secrets,
        json!({"metadata": {"name": "federator-ca"}, "stringData": {"ca.crt": servers.pem}}),
    )
    .await;
    vec![
        format!("--grpc-listen-address={grpc}"),
        format!("--tls-cert-dir={}", dir.display()),
        format!(
            "--grpc-client-ca-file={}",
            dir.join("clients.crt").display()
        ),
    ]
}

/// The Querier pod without a certificate (its HTTP API at `address`): the handshake with the
/// federator at `grpc` is refused (the Querier says why in its log), the endpoint never joins,
/// no rule.
async fn refused_without_a_certificate(pods: &Api<Pod>, address: SocketAddr, grpc: SocketAddr) {
    let refusal = wait_for(
        "the federator refusing the Querier without a certificate",
        TIMEOUT,
        || async {
            let log = pods
                .logs("anonymous", &Default::default())
                .await
                .map_err(|e| e.to_string())?;
            log.lines()
                .find(|line| line.contains(&grpc.to_string()) && line.contains("certificate"))
                .map(str::to_string)
                .ok_or(format!("not in its log yet: {log}"))
        },
    )
    .await;
    eprintln!("the Querier without a certificate: {refusal}");
    let data = e2e::thanos::api_at(address, "/api/v1/rules").await.unwrap();
    assert!(rules_of(&data).is_empty(), "{data}");
}

/// A Thanos Querier pod `name` on a real node whose only endpoint is the federator's gRPC port
/// at `grpc`, over TLS trusting the `ca.crt` of `secret`, with that Secret's `tls.crt` and
/// `tls.key` as its client certificate when `with_certificate`.
fn querier_pod(
    real: &RealNodes,
    name: &str,
    secret: &str,
    with_certificate: bool,
    grpc: &SocketAddr,
) -> Value {
    let mut args = vec![
        "query".to_string(),
        format!("--http-address=0.0.0.0:{QUERY_PORT}"),
        "--grpc-address=0.0.0.0:10901".to_string(),
        format!("--endpoint={grpc}"),
        "--grpc-client-tls-secure".to_string(),
        "--grpc-client-tls-ca=/etc/federator/ca.crt".to_string(),
        format!("--grpc-client-server-name={}", grpc.ip()),
    ];
    if with_certificate {
        args.push("--grpc-client-tls-cert=/etc/federator/tls.crt".to_string());
        args.push("--grpc-client-tls-key=/etc/federator/tls.key".to_string());
    }
    json!({
        "metadata": {"name": name, "labels": {"app": "querier"}},
        "spec": {
            "nodeSelector": {"type": "real"},
            "tolerations": [{"key": real.taint, "operator": "Exists", "effect": "NoSchedule"}],
            "terminationGracePeriodSeconds": 1,
            "containers": [{
                "name": "query",
                "image": real.thanos_image,
                "imagePullPolicy": "Never",
                "args": args,
                "ports": [{"name": "http", "containerPort": QUERY_PORT}],
                "readinessProbe": {"httpGet": {"path": "/-/ready", "port": "http"}, "periodSeconds": 1},
                "volumeMounts": [{"name": "tls", "mountPath": "/etc/federator", "readOnly": true}],
            }],
            "volumes": [{"name": "tls", "secret": {"secretName": secret}}],
        },
    })
}
