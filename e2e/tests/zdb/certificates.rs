//! The webhook's serving certificate: a mounted one rotated without a restart, one for IPv6,
//! a short-lived self-signed one renewed without a failed call, and a Secret of the wrong name
//! replaced at start.

use e2e::tls::{MountedSecret, TestCa};

use super::*;

impl Fixture {
    /// One zdb-controller process serving the webhook on `webhook_port` with the certificate
    /// mounted at `mounted` (`--cert-dir`), this test's caBundle set to `ca`'s; waits until it
    /// serves `leaf` (`what` says so).
    async fn controller_with_cert_dir(
        &self,
        webhook_port: u16,
        ca: &TestCa,
        mounted: &MountedSecret,
        leaf: &Leaf,
        what: &str,
    ) -> ControllerProcess {
        self.webhook.set_ca_bundle(&self.ns, &ca.pem).await;
        let cert_dir = mounted.dir.display().to_string();
        let (controller, _) =
            self.controller_with(webhook_port, false, &["--cert-dir".to_string(), cert_dir]);
        wait_served(webhook_port, &ca.pem, leaf, what).await;
        controller
    }

    /// `ca.crt` and `tls.crt` of the self-signed Secret.
    async fn secret_certs(&self) -> (String, String) {
        let secrets: Api<k8s_openapi::api::core::v1::Secret> = self.ns.api();
        let data = secrets.get(TLS_SECRET).await.unwrap().data.unwrap();
        let text = |key: &str| String::from_utf8(data[key].0.clone()).unwrap();
        (text("ca.crt"), text("tls.crt"))
    }
}

/// Waits until the controller has seen `pod` unready: its zone is the one disrupted.
/// The budget `web` (maxUnavailable 1) over the fixture's 6 pods, computed, then zone-a
/// disrupted by an unready pod: an eviction in another zone is the webhook's to deny (429).
/// Returns the pods by zone.
async fn budget_with_zone_a_disrupted(fixture: &Fixture) -> BTreeMap<String, Vec<String>> {
    fixture.create_zdb(1, false).await;
    fixture.wait_budget(6, 1).await;
    let zones = fixture.pods_by_zone().await;
    disrupt_zone_by_unready_pod(fixture, "zone-a", &zones["zone-a"][0]).await;
    zones
}

/// `--cert-dir` as a mounted Secret: a rotation (a `..data` symlink swap, as the kubelet does
/// it) is served from the next handshake on, by the same process, and the API server's calls
/// still reach the webhook.
#[tokio::test]
#[ignore = "needs the local zonal cluster (make e2e)"]
async fn zdb_cert_rotation_without_restart() {
    // The API server calls the webhook through a proxy whose connections the test can cut.
    let webhook_port = free_port();
    let backend: SocketAddr = ([127, 0, 0, 1], webhook_port).into();
    let proxy = RoundRobinProxy::start(vec![backend]).await;
    let proxy_port = proxy.addr.port();
    let fixture = Fixture::new("zdb-certs", 6, proxy_port).await;
    let ca = TestCa::new("zdb e2e cert-manager CA");
    let first = ca.leaf(1001);
    let mut mounted = MountedSecret::new(&fixture.ns, &first);
    let mut controller = fixture
        .controller_with_cert_dir(
            webhook_port,
            &ca,
            &mounted,
            &first,
            "the first certificate served",
        )
        .await;
    // zone-a stays disrupted for the whole test, so zone-b's evictions are the webhook's
    // denials (a 429 only it gives).
    let zones = budget_with_zone_a_disrupted(&fixture).await;
    assert_denied(
        evict(&fixture.pods, &zones["zone-b"][0], false).await,
        "an eviction in zone-b, before the rotation",
        &["zone zone-a is disrupted"],
    );

    let second = ca.leaf(1002);
    assert_ne!(first.der(), second.der());
    mounted.rotate(&second);
    wait_served(
        webhook_port,
        &ca.pem,
        &second,
        "the rotated certificate served",
    )
    .await;
    assert!(controller.is_running(), "the controller restarted or died");

    // The API server may still hold connections made with the first certificate: cut them all,
    // so its next call makes a new one and must accept the rotated certificate.
    proxy.stop().await;
    let _proxy = RoundRobinProxy::start_on(proxy_port, vec![backend]).await;
    // A call on a pooled connection the cut closed fails (500, broken pipe or reset) and is not
    // resent; every later call needs a new connection, whose handshake meets the rotated
    // certificate. A refused certificate ends the test at once.
    wait_for(
        "the webhook's denial over a new connection",
        Duration::from_secs(30),
        || async {
            match evict(&fixture.pods, &zones["zone-b"][1], false).await {
                Err((429, message)) if message.contains("zone zone-a is disrupted") => Ok(()),
                Err((500, message))
                    if !message.contains("x509") && !message.contains("certificate") =>
                {
                    Err(message)
                }
                other => panic!("after the rotation: {other:?}"),
            }
        },
    )
    .await;
    assert!(controller.is_running(), "the controller restarted or died");
}

/// The webhook listens on both stacks (`--webhook-address [::]:<port>`, the shipped default's
/// shape): the API server calls it at `https://[::1]:<port>` and judges an eviction by its answer,
/// and a client of 127.0.0.1 meets the same listener.
#[tokio::test]
#[ignore = "needs the local zonal cluster (make e2e)"]
async fn zdb_webhook_answers_the_api_server_over_ipv6() {
    let port = free_port();
    let mut fixture = Fixture::new_on("zdb-ipv6", 6, "[::1]", port).await;
    fixture.webhook_host = "[::]";
    let ca = TestCa::new("zdb e2e IPv6 CA");
    let leaf = ca.issue(vec!["::1".to_string(), "127.0.0.1".to_string()], Some(2001));
    let mounted = MountedSecret::new(&fixture.ns, &leaf);
    let what = "the certificate served on IPv4 loopback";
    let mut controller = fixture
        .controller_with_cert_dir(port, &ca, &mounted, &leaf, what)
        .await;
    let zones = budget_with_zone_a_disrupted(&fixture).await;
    // Failing closed: without an answer over IPv6 the API server refuses with a 500 naming the
    // call; the 429 and its reason are the webhook's.
    assert_denied(
        evict(&fixture.pods, &zones["zone-b"][0], false).await,
        "an eviction in zone-b, judged over IPv6",
        &["zone zone-a is disrupted"],
    );
    assert!(controller.is_running(), "the controller died");
}

/// A self-signed certificate valid for 60 s, renewed 40 s before its end: in 75 s of dry-run
/// evictions every 250 ms (the webhook is called with failurePolicy Fail, so a failed call
/// would be a 500), the Secret's certificate is renewed at least twice under the same CA, and
/// every call is the webhook's answer. The calls are counted here, not by the API server's
/// `apiserver_admission_webhook_rejection_count`: that counter is per webhook name, which every
/// test's configuration shares, so the zau suite's tests of an unreachable webhook, running at
/// the same time, would count in it.
#[tokio::test]
#[ignore = "needs the local zonal cluster (make e2e)"]
async fn zdb_short_lived_certificate_is_renewed_without_a_failed_call() {
    let port = free_port();
    let fixture = Fixture::new("zdb-renew", 3, port).await;
    let mut tls = fixture.self_signed_args();
    tls.extend(
        [
            "--webhook-cert-validity",
            "60s",
            "--webhook-cert-renew-before",
            "40s",
        ]
        .map(String::from),
    );
    let (_controller, _) = fixture.controller_with(port, false, &tls);
    fixture.wait_ca_bundle().await;
    fixture.freeze().await;
    let (ca, first) = fixture.secret_certs().await;
    let pod = fixture.list_pods().await[0].name_any();

    let mut certificates = BTreeSet::from([first]);
    let (mut answered, mut failures) = (0, Vec::new());
    let started = std::time::Instant::now();
    while started.elapsed() < Duration::from_secs(75) {
        match evict(&fixture.pods, &pod, true).await {
            Err((429, message)) if message.contains("frozen") => answered += 1,
            other => failures.push(other),
        }
        let (now_ca, now_cert) = fixture.secret_certs().await;
        assert_eq!(now_ca, ca, "the CA (and the caBundle) changed");
        certificates.insert(now_cert);
        // Pacing the calls, not waiting for anything.
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    eprintln!(
        "{answered} calls answered by the webhook, {} failed, {} certificates",
        failures.len(),
        certificates.len()
    );
    assert!(failures.is_empty(), "calls not answered: {failures:?}");
    assert!(answered >= 100, "only {answered} calls");
    assert!(
        certificates.len() >= 3,
        "renewed {} time(s) in 75 s",
        certificates.len() - 1
    );
    // What is served is the latest certificate.
    let (_, latest) = fixture.secret_certs().await;
    let leaf = Leaf {
        cert: latest,
        key: String::new(),
    };
    wait_served(port, &ca, &leaf, "the renewed certificate served").await;
}

/// A Secret whose certificate is for another Service (and was made by some other CA, with no
/// key of it) is replaced at start-up: the caBundle follows, the new certificate is served and
/// the API server's call succeeds.
#[tokio::test]
#[ignore = "needs the local zonal cluster (make e2e)"]
async fn zdb_secret_with_a_wrong_name_is_replaced_at_start() {
    let port = free_port();
    let fixture = Fixture::new("zdb-wrong-name", 3, port).await;
    let stranger = TestCa::new("a CA of another service");
    let wrong = stranger.issue(vec!["other.example.svc".to_string()], Some(7));
    let secret: k8s_openapi::api::core::v1::Secret = serde_json::from_value(json!({
        "metadata": {"name": TLS_SECRET},
        "type": "kubernetes.io/tls",
        "stringData": {"ca.crt": stranger.pem, "tls.crt": wrong.cert, "tls.key": wrong.key},
    }))
    .unwrap();
    fixture
        .ns
        .api::<k8s_openapi::api::core::v1::Secret>()
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    let _controller = fixture.controller(port, false);
    let (ca, cert) = wait_for(
        "the Secret's certificate replaced",
        Duration::from_secs(60),
        || async {
            let (ca, cert) = fixture.secret_certs().await;
            if cert != wrong.cert && ca != stranger.pem {
                Ok((ca, cert))
            } else {
                Err("still the wrong certificate".to_string())
            }
        },
    )
    .await;
    fixture.wait_ca_bundle().await;
    let bundles = fixture.webhook.ca_bundles(&fixture.ns).await.unwrap();
    assert_eq!(
        bundles,
        [ca.as_bytes().to_vec()],
        "the caBundle is the new CA"
    );
    let leaf = Leaf {
        cert,
        key: String::new(),
    };
    wait_served(port, &ca, &leaf, "the replaced certificate served").await;
    fixture.freeze().await;
    let pod = fixture.list_pods().await[0].name_any();
    assert_denied(
        evict(&fixture.pods, &pod, false).await,
        "an eviction from the frozen budget",
        &["frozen"],
    );
}
