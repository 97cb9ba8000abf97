//! The gRPC services against in-process backends, called by a real tonic client over TCP.
#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;

use super::*;
use crate::backends::testing::{FakePrometheus, Reply, api, endpoint, serving_rules};
use zone_rules::RuleDiscovery;
use zone_thanos::thanos::info::info_client::InfoClient;
use zone_thanos::thanos::rules_client::RulesClient;

/// A guard of 64 requests at once, letting anyone in.
fn open_guard() -> Arc<Guard> {
    Arc::new(Guard {
        requests: Arc::new(tokio::sync::Semaphore::new(64)),
        auth: None,
    })
}

/// The services over `api` behind `guard` (over TLS from `tls`) on a free port of 127.0.0.1:
/// the address, and the shutdown that ends the server.
async fn serving(
    api: Arc<Api>,
    guard: Arc<Guard>,
    tls: Option<(Arc<CertStore>, Option<ClientCerts>)>,
) -> (SocketAddr, Shutdown) {
    serving_within(api, guard, tls, Limits::default()).await
}

/// [`serving`] within `limits`.
async fn serving_within(
    api: Arc<Api>,
    guard: Arc<Guard>,
    tls: Option<(Arc<CertStore>, Option<ClientCerts>)>,
    limits: Limits,
) -> (SocketAddr, Shutdown) {
    let shutdown = Shutdown::new();
    let (bound, work) = serve(
        "127.0.0.1:0".parse().unwrap(),
        api,
        guard,
        shutdown.clone(),
        tls,
        limits,
    )
    .await
    .unwrap();
    tokio::spawn(work);
    (bound, shutdown)
}

/// The services over `api`, open to anyone: a client, the URL, and the shutdown.
async fn started(api: Arc<Api>) -> (RulesClient<tonic::transport::Channel>, String, Shutdown) {
    let (bound, shutdown) = serving(api, open_guard(), None).await;
    let url = format!("http://{bound}");
    (
        RulesClient::connect(url.clone()).await.unwrap(),
        url,
        shutdown,
    )
}

/// Every message of a Rules call: the warnings and the groups, read back into the model.
async fn call(
    client: &mut RulesClient<tonic::transport::Channel>,
    request: RulesRequest,
) -> Result<(Vec<String>, RuleDiscovery), Status> {
    let mut stream = client.rules(request).await?.into_inner();
    let (mut warnings, mut data) = (Vec::new(), RuleDiscovery::default());
    while let Some(message) = stream.message().await? {
        match message.result {
            Some(rules_response::Result::Warning(warning)) => warnings.push(warning),
            Some(rules_response::Result::Group(group)) => {
                data.groups.push(zone_rules::RuleGroup::from(group));
            }
            None => panic!("an empty message"),
        }
    }
    Ok((warnings, data))
}

/// The same backends over gRPC and over HTTP: the same groups, the same warning for the
/// backend that does not answer, which gRPC sends first.
#[tokio::test]
async fn rules_over_grpc_are_the_http_answer() {
    let a = serving_rules(true).await;
    let b = serving_rules(false).await;
    let other_shard = serving_rules(true).await;
    let gone = FakePrometheus::gone();
    let (api, registry) = api(
        vec![
            endpoint(&a.url, "0", "a"),
            endpoint(&b.url, "0", "b"),
            endpoint(&other_shard.url, "1", "a"),
            endpoint(&gone, "1", "b"),
        ],
        PartialResponse::Abort,
    );
    let (mut client, _, shutdown) = started(api.clone()).await;
    let (warnings, grpc) = call(&mut client, RulesRequest::default()).await.unwrap();
    // The HTTP route's own strategy is Abort: its data is compared without the gone backend.
    let (http, http_warnings) = api.all_rules().await;
    assert_eq!(grpc, http);
    assert_eq!(grpc.groups[0].rules.len(), 8, "four rules of each shard");
    assert_eq!(warnings, http_warnings);
    assert_eq!(warnings.len(), 1);
    assert!(warnings[0].contains(&gone), "{warnings:?}");
    let text = zone_operator::metrics::exposition(&registry);
    assert!(
        text.contains(r#"zone_aware_federator_partial_responses_total{handler="grpc_rules"} 1"#),
        "{text}"
    );
    shutdown.trigger();
}

/// The request's type and matchers filter as the HTTP API's parameters do; a matcher that does
/// not parse is the caller's error; ABORT fails the call on a failed backend, naming it.
#[tokio::test]
async fn filters_and_the_partial_response_strategy_are_the_requests() {
    let a = serving_rules(true).await;
    let gone = FakePrometheus::gone();
    let (api, _) = api(
        vec![endpoint(&a.url, "0", "a"), endpoint(&gone, "1", "a")],
        PartialResponse::Warn,
    );
    let (mut client, _, shutdown) = started(api).await;
    let alerts_only = RulesRequest {
        r#type: Type::Alert.into(),
        ..RulesRequest::default()
    };
    let (_, data) = call(&mut client, alerts_only).await.unwrap();
    let rules: Vec<_> = data.groups.iter().flat_map(|g| &g.rules).collect();
    assert_eq!(rules.len(), 3, "the three alerting rules: {rules:?}");
    assert!(
        rules
            .iter()
            .all(|r| matches!(r, zone_rules::Rule::Alerting(_)))
    );

    let team_a = RulesRequest {
        matcher_string: vec![r#"{team="a"}"#.to_string()],
        r#type: Type::Alert.into(),
        ..RulesRequest::default()
    };
    let (_, data) = call(&mut client, team_a).await.unwrap();
    let names: Vec<_> = data
        .groups
        .iter()
        .flat_map(|g| &g.rules)
        .map(zone_rules::Rule::name)
        .collect();
    assert_eq!(names, ["AlwaysFiring", "NeverFires"]);

    let bad = RulesRequest {
        matcher_string: vec!["{".to_string()],
        ..RulesRequest::default()
    };
    let refused = call(&mut client, bad).await.unwrap_err();
    assert_eq!(refused.code(), tonic::Code::InvalidArgument, "{refused:?}");

    let abort = RulesRequest {
        partial_response_strategy: PartialResponseStrategy::Abort.into(),
        ..RulesRequest::default()
    };
    let failed = call(&mut client, abort).await.unwrap_err();
    assert_eq!(failed.code(), tonic::Code::Unavailable, "{failed:?}");
    assert!(failed.message().contains(&gone), "{failed:?}");
    shutdown.trigger();
}

/// Info says rules are served, as the component a Querier federates.
#[tokio::test]
async fn info_advertises_the_rules_api() {
    let a = FakePrometheus::start(Reply::Hang).await;
    let (api, _) = api(vec![endpoint(&a.url, "0", "a")], PartialResponse::Warn);
    let (_, url, shutdown) = started(api).await;
    let mut info = InfoClient::connect(url).await.unwrap();
    let answer = info.info(InfoRequest {}).await.unwrap().into_inner();
    assert_eq!(answer.component_type, "query");
    assert!(answer.rules.is_some());
    assert!(
        answer.store.is_none(),
        "no StoreAPI: the Querier must not ask for series"
    );
    shutdown.trigger();
}

/// With the HTTPS port's certificate store, the port speaks TLS only: a client trusting the CA
/// (the federator's own gRPC backend client, `grpcs://`) reads the rules; a plain one gets no
/// answer; a certificate renewed into the store is served at the next handshake.
#[tokio::test]
async fn over_tls_the_port_serves_the_certificate_of_the_store() {
    use crate::backends::connector::{BackendTls, TlsFiles};
    use crate::backends::grpc::{Channels, request};
    use crate::backends::testing::{TestCa, temp_dir};
    use zone_operator::tls::PemPair;

    let backend = serving_rules(true).await;
    let (api, _) = api(
        vec![endpoint(&backend.url, "0", "a")],
        PartialResponse::Warn,
    );
    let certified = |ca: &TestCa| {
        let issued = ca.serving(&["127.0.0.1"]);
        let pair = PemPair {
            cert: issued.cert.into_bytes(),
            key: issued.key.into_bytes(),
        };
        pair.certified_key().unwrap()
    };
    let (first, second) = (TestCa::new("first CA"), TestCa::new("second CA"));
    let store = Arc::new(CertStore::new(certified(&first)));
    let (bound, shutdown) = serving(api, open_guard(), Some((store.clone(), None))).await;
    let dir = temp_dir("grpc-tls");
    let trusting = |ca: &TestCa, name: &str| {
        let file = dir.join(name);
        std::fs::write(&file, &ca.pem).unwrap();
        let tls = BackendTls::load(&TlsFiles {
            ca: Some(file),
            ..TlsFiles::default()
        })
        .unwrap();
        Channels::new(tls.client().clone(), std::time::Duration::from_secs(5))
    };
    let url = format!("grpcs://{bound}");
    let answer = trusting(&first, "first.crt")
        .rules(&url, request(""), 1 << 20)
        .await
        .unwrap();
    assert_eq!(answer.data.groups[0].name, "common");

    let plain = RulesClient::connect(format!("http://{bound}"))
        .await
        .unwrap()
        .rules(RulesRequest::default())
        .await;
    assert!(plain.is_err(), "plain gRPC on the TLS port: {plain:?}");

    store.swap(certified(&second));
    let renewed = trusting(&second, "second.crt")
        .rules(&url, request(""), 1 << 20)
        .await;
    assert!(renewed.is_ok(), "{renewed:?}");
    std::fs::remove_dir_all(dir).unwrap();
    shutdown.trigger();
}

/// With `--auth=kubernetes` a Rules call is reviewed as an HTTP request is: no token is
/// Unauthenticated, a token without the permission PermissionDenied, a permitted one answered;
/// past `--max-concurrent-requests` a call is refused at once.
#[tokio::test]
async fn rules_calls_pass_the_http_routes_guard() {
    use crate::backends::testing::{authenticating, fake_api};
    let backend = serving_rules(true).await;
    let (api, _) = api(
        vec![endpoint(&backend.url, "0", "a")],
        PartialResponse::Warn,
    );
    let (_fake, client) = fake_api();
    let (bound, shutdown) = serving(api.clone(), Arc::new(authenticating(client)), None).await;
    let mut client = RulesClient::connect(format!("http://{bound}"))
        .await
        .unwrap();
    let with = |token: Option<&str>| {
        let mut request = tonic::Request::new(RulesRequest::default());
        if let Some(token) = token {
            request
                .metadata_mut()
                .insert("authorization", format!("Bearer {token}").parse().unwrap());
        }
        request
    };
    let anonymous = client.rules(with(None)).await.unwrap_err();
    assert_eq!(
        anonymous.code(),
        tonic::Code::Unauthenticated,
        "{anonymous:?}"
    );
    let pod = client.rules(with(Some("pod-token"))).await.unwrap_err();
    assert_eq!(pod.code(), tonic::Code::PermissionDenied, "{pod:?}");
    assert!(
        pod.message().contains("system:serviceaccount:apps:web"),
        "{pod:?}"
    );
    let mut grafana = client
        .rules(with(Some("grafana-token")))
        .await
        .unwrap()
        .into_inner();
    assert!(grafana.message().await.unwrap().is_some());
    shutdown.trigger();

    let full = Arc::new(Guard {
        requests: Arc::new(tokio::sync::Semaphore::new(0)),
        auth: None,
    });
    let (bound, shutdown) = serving(api, full, None).await;
    let mut client = RulesClient::connect(format!("http://{bound}"))
        .await
        .unwrap();
    let busy = client.rules(RulesRequest::default()).await.unwrap_err();
    assert_eq!(busy.code(), tonic::Code::Unavailable, "{busy:?}");
    assert!(
        busy.message().contains("too many concurrent requests"),
        "{busy:?}"
    );
    shutdown.trigger();
}

/// gRPC channels trusting `ca_file`, presenting `issued` (written into `dir` as `name`) when
/// given.
fn presenting(
    dir: &std::path::Path,
    ca_file: &std::path::Path,
    name: &str,
    issued: Option<&zone_operator::testing::Issued>,
) -> crate::backends::grpc::Channels {
    use crate::backends::connector::{BackendTls, TlsFiles};
    let client = issued.map(|issued| {
        let (cert, key) = (
            dir.join(format!("{name}.crt")),
            dir.join(format!("{name}.key")),
        );
        std::fs::write(&cert, &issued.cert).unwrap();
        std::fs::write(&key, &issued.key).unwrap();
        (cert, key)
    });
    let files = TlsFiles {
        ca: Some(ca_file.to_path_buf()),
        client,
        server_name: None,
    };
    let tls = BackendTls::load(&files).unwrap();
    crate::backends::grpc::Channels::new(tls.client().clone(), std::time::Duration::from_secs(5))
}

/// `--grpc-client-ca-file`: with `--auth=kubernetes`, a caller presenting a client certificate
/// of the client CA is the user its common name names (its organization the group), and only
/// its permission is reviewed; a caller without one is asked for a bearer token; a certificate
/// of another CA is refused at the handshake. Without auth the certificate is required.
#[tokio::test]
async fn a_client_certificate_names_the_caller() {
    use crate::backends::grpc::request;
    use crate::backends::testing::{TestCa, authenticating, fake_api, temp_dir};
    use zone_operator::testing::Issued;
    use zone_operator::tls::PemPair;

    let backend = serving_rules(true).await;
    let (api, _) = api(
        vec![endpoint(&backend.url, "0", "a")],
        PartialResponse::Warn,
    );
    let (servers, clients, strangers) = (
        TestCa::new("serving CA"),
        TestCa::new("clients CA"),
        TestCa::new("another CA"),
    );
    let serving_pair = servers.serving(&["127.0.0.1"]);
    let pair = PemPair {
        cert: serving_pair.cert.into_bytes(),
        key: serving_pair.key.into_bytes(),
    };
    let store = Arc::new(CertStore::new(pair.certified_key().unwrap()));
    let dir = temp_dir("grpc-client-certs");
    let ca_file = dir.join("ca.crt");
    std::fs::write(&ca_file, &servers.pem).unwrap();
    let presenting = |name: &str, issued: Option<&Issued>| presenting(&dir, &ca_file, name, issued);
    let grafana = clients.client_in(
        "system:serviceaccount:monitoring:grafana",
        Some("system:serviceaccounts"),
    );
    let querier = clients.client_in("thanos-querier", None);
    let forged = strangers.client_in(
        "system:serviceaccount:monitoring:grafana",
        Some("system:serviceaccounts"),
    );

    let (_fake, kube) = fake_api();
    let optional = ClientCerts::new(clients.pem.as_bytes(), false).unwrap();
    let guard = Arc::new(authenticating(kube));
    let (bound, shutdown) =
        serving(api.clone(), guard, Some((store.clone(), Some(optional)))).await;
    let url = format!("grpcs://{bound}");
    let call = |name: &'static str, issued: Option<&Issued>| {
        let channels = presenting(name, issued);
        let url = url.clone();
        async move { channels.rules(&url, request(""), 1 << 20).await }
    };
    let allowed = call("grafana", Some(&grafana)).await.unwrap();
    assert_eq!(allowed.data.groups[0].name, "common");
    let denied = call("querier", Some(&querier))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        denied.contains("PermissionDenied") && denied.contains("\"thanos-querier\""),
        "{denied}"
    );
    let anonymous = call("anonymous", None).await.unwrap_err().to_string();
    assert!(anonymous.contains("no bearer token"), "{anonymous}");
    let refused = call("forged", Some(&forged)).await.unwrap_err().to_string();
    assert!(refused.contains("cannot connect"), "{refused}");
    shutdown.trigger();

    let required = ClientCerts::new(clients.pem.as_bytes(), true).unwrap();
    let (bound, shutdown) = serving(api, open_guard(), Some((store, Some(required)))).await;
    let url = format!("grpcs://{bound}");
    let without = presenting("without", None)
        .rules(&url, request(""), 1 << 20)
        .await
        .unwrap_err()
        .to_string();
    assert!(without.contains("cannot connect"), "{without}");
    let with = presenting("with", Some(&querier))
        .rules(&url, request(""), 1 << 20)
        .await;
    assert!(with.is_ok(), "{with:?}");
    shutdown.trigger();
    std::fs::remove_dir_all(dir).unwrap();
    assert!(ClientCerts::new(b"not a certificate", true).is_err());
}

/// Reads `tcp` until the server closes it (or resets it), within `at_most`: the time it took.
async fn closed_within(
    tcp: &mut tokio::net::TcpStream,
    at_most: std::time::Duration,
) -> std::time::Duration {
    use tokio::io::AsyncReadExt;
    let started = std::time::Instant::now();
    let mut buf = [0u8; 256];
    tokio::time::timeout(at_most, async {
        loop {
            match tcp.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await
    .expect("the server closed the connection");
    started.elapsed()
}

/// As on the HTTP servers: a connection that says nothing is closed after the idle time (the
/// header timeout), and past the cap a new connection is closed at once and counted, while a
/// client within the cap is served.
#[tokio::test]
async fn silent_and_past_cap_connections_are_closed_as_on_http() {
    let a = serving_rules(true).await;
    let (api, _) = api(vec![endpoint(&a.url, "0", "a")], PartialResponse::Warn);
    let idle = std::time::Duration::from_secs(2);
    let limits = Limits {
        header_read: idle,
        max_connections: 2,
        ..Limits::default()
    };
    let refused = limits.refused.clone();
    let (bound, shutdown) = serving_within(api, open_guard(), None, limits).await;

    let mut silent = tokio::net::TcpStream::connect(bound).await.unwrap();
    let took = closed_within(&mut silent, idle * 3).await;
    assert!(took >= idle - idle / 4, "closed after {took:?}");

    // Two slots: one silent connection and one client, served; a third is closed at once.
    let _holding = tokio::net::TcpStream::connect(bound).await.unwrap();
    let mut client = RulesClient::connect(format!("http://{bound}"))
        .await
        .unwrap();
    call(&mut client, RulesRequest::default()).await.unwrap();
    let mut third = tokio::net::TcpStream::connect(bound).await.unwrap();
    let took = closed_within(&mut third, idle * 3).await;
    assert!(took < idle / 2, "closed after {took:?}");
    assert_eq!(refused.get(), 1);
    shutdown.trigger();
}
