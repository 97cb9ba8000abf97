//! The chart's certManager modes with a real cert-manager (v1.21, its controller and CA injector
//! run on the host, e2e/src/cert_manager.rs) on the local zonal cluster: cert-manager issues the
//! eviction webhook's certificate, its CA injector puts the issuer's CA into the webhook
//! configuration, the zdb-controller pods on the real nodes serve that certificate, and a
//! renewal (triggered as `cmctl renew` does) is served by every replica while a steady stream of
//! admission calls sees none fail: the caBundle must trust the old and the new certificate alike,
//! because the API server and the kubelet (which refreshes the mounted Secret up to a minute or
//! more later) see the renewal at different times. The rules-federator's certManager TLS: its
//! certificate issued, served, and its renewal picked up under the same CA.
//!
//! Isolation as in helm.rs: the release in its own namespace, limited to the test's namespace
//! (`watchNamespace`); cert-manager manages the release's namespace only. Its CRDs stay.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use e2e::cert_manager::{self, CertManager};
use e2e::deploy::{apply_samples, dynamic_api, wait_for_sample_budget};
use e2e::helm::{self, Release};
use e2e::installed::{wait_binary_pods, wait_for_fail_policy};
use e2e::real::RealNodes;
use e2e::webhook::{Counters, WEBHOOK_NAME};
use e2e::{Cluster, TestNamespace, nodes, pods, tls, wait_for};
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::{Api, Client};
use serde_json::{Value, json};

/// The webhook's name in the chart: the `name` label of the API server's webhook metrics.
/// The webhook's Certificate and Secret in the chart's certManager mode.
const WEBHOOK_CERTIFICATE: &str = "zdb-webhook";
const WEBHOOK_SECRET: &str = "zdb-webhook-cert";
/// The federator's Certificate and Secret in its certManager TLS mode.
const FEDERATOR_CERTIFICATE: &str = "rules-federator";
const FEDERATOR_SECRET: &str = "rules-federator-cert";
/// The ports the pods serve on: the webhook, the federator's HTTPS API.
const WEBHOOK_PORT: u16 = 9443;
const FEDERATOR_PORT: u16 = 9090;
/// Issuance, CA injection and serving, each: cert-manager issues in seconds, but a pod sees a
/// changed Secret only when the kubelet refreshes its volume (its sync period, a minute, plus
/// jitter and cache).
const TIMEOUT: Duration = Duration::from_secs(180);
/// The pace of the admission calls during a renewal.
const CALL_INTERVAL: Duration = Duration::from_millis(100);

#[tokio::test]
#[ignore = "needs the local zonal cluster with real nodes and cert-manager (make e2e; e2e/cluster/build.sh cert-manager)"]
async fn cert_manager_issues_and_renews_the_webhook_certificate_without_failed_calls() {
    let started = Instant::now();
    let cluster = Cluster::get();
    let real = RealNodes::of(&cluster);
    cert_manager::install_crds(&cluster);
    let victim = TestNamespace::create(&cluster, "certmanager").await;
    let client = victim.client.clone();
    let home = helm::release_namespace(&cluster, &client, "certmanager-release").await;
    let mut cert_manager = CertManager::start(&cluster, &home.name);

    let mut release = Release::new(&cluster, &format!("zac-{}", victim.suffix()), &home.name);
    let chart = helm::chart(&release.dir);
    let values = release.values_file("values.yaml", &values(&real, &victim.name));
    eprintln!("{}", release.install(&chart, &values));
    let config = format!("{}-eviction-webhook", release.name);
    wait_for_fail_policy(&client, &config).await;
    cert_manager.assert_running();
    eprintln!(
        "installed, the webhook serving, after {:?}",
        started.elapsed()
    );

    let webhook = Served::webhook(&client, &home, &config).await;
    let mut issued = webhook.assert_issued_and_served().await;
    apply_samples(&cluster, &victim.name);
    let zdbs = dynamic_api(
        &client,
        "zonecontrol.k8s.aws/v1",
        "ZoneDisruptionBudget",
        Some(&victim.name),
    );
    wait_for_sample_budget(&zdbs.await).await;
    let budgeted = nodes::pod_zones(&victim.api(), "app=web").await;
    let budgeted = budgeted.keys().next().unwrap().clone();

    // Renewals under a steady stream of admission calls: with the CA injector of v1.21, which
    // appends the new CA to the caBundle, and with one that replaces it (before v1.19).
    let mut changed_ca = Vec::new();
    for injector in ["v1.21 (merging)", "replacing (before v1.19)"] {
        if injector.starts_with("replacing") {
            cert_manager.restart_ca_injector(cert_manager::REPLACING_CA_INJECTOR);
            webhook.wait_ca_bundle(&issued).await;
        }
        let renewed = renew_under_calls(&webhook, &victim, &budgeted, &issued, injector).await;
        if renewed.ca != issued.ca {
            changed_ca.push(injector);
        }
        issued = renewed;
    }
    // A renewal that changes the CA is what makes calls fail with a replacing CA injector; with
    // a merging one the caBundle grows by a CA per renewal.
    assert!(
        changed_ca.is_empty(),
        "renewals changed the webhook's CA: {changed_ca:?}"
    );

    // The rules-federator's certManager TLS: issued, served, renewed under the same CA (the
    // ca.crt its clients trust).
    let federator = Served::federator(&client, &home).await;
    let first = federator.assert_issued_and_served().await;
    let (renewed, timeline) = federator.renew(&first).await;
    eprintln!("renewal of the federator's certificate: {timeline}");
    assert!(
        renewed.ca == first.ca,
        "the federator's renewal changed its ca.crt ({timeline})"
    );
    cert_manager.assert_running();

    release.uninstall();
    eprintln!("done after {:?}", started.elapsed());
}

/// One renewal of the webhook's certificate while a stream of admission calls runs (the CA
/// injector `injector` in the messages): no call may fail, by the stream's answers and by the API
/// server's counters, and the API server counted at least the stream's calls. Returns what the
/// renewal issued.
async fn renew_under_calls(
    webhook: &Served,
    victim: &TestNamespace,
    budgeted: &str,
    issued: &Issued,
    injector: &str,
) -> Issued {
    let before = Counters::read(&victim.client, &[WEBHOOK_NAME]).await;
    let stream = AdmissionStream::start(victim.api(), budgeted.to_string());
    let (renewed, timeline) = webhook.renew(issued).await;
    let calls = stream.stop().await;
    let counters = Counters::read(&victim.client, &[WEBHOOK_NAME])
        .await
        .since(&before);
    eprintln!("renewal with the CA injector {injector}: {timeline}; {calls}");
    eprintln!(
        "the API server's counters of {WEBHOOK_NAME} during the renewal: {} calls, {} failed \
         (not called or no proper answer), {} fail-open",
        counters.calls, counters.failed, counters.fail_open
    );
    assert!(
        calls.total >= 50,
        "too few admission calls to judge: {calls}"
    );
    assert!(
        calls.failed.is_empty(),
        "calls failed during the renewal: {calls}"
    );
    let counted = counters.calls;
    assert!(
        counted >= calls.total as f64,
        "the API server counted {counted} calls of {WEBHOOK_NAME}, the stream made {}",
        calls.total
    );
    // By the webhook's name: the calls of another installation's configuration (the same
    // webhook name) count too. Fail-open calls are only reported: such a configuration at
    // Ignore (as shipped, until a replica serves) counts them for its own replicas.
    assert_eq!(
        counters.failed, 0.0,
        "the API server counted calls of {WEBHOOK_NAME} that failed during the renewal"
    );
    renewed
}

/// The release's values: the project's image on the real nodes, limited to `watched`; the
/// webhook and the federator with cert-manager certificates from the chart's own issuer; the
/// controllers this test does not need off.
fn values(real: &RealNodes, watched: &str) -> Value {
    helm::on_real_nodes(
        real,
        json!({
            "watchNamespace": watched,
            "webhook": {"certificate": {"mode": "certManager"}},
            "zauController": {"enabled": false},
            "shardController": {"enabled": false},
            "rulesFederator": {"discoverNamespace": watched, "tls": {"mode": "certManager"}},
        }),
    )
}

/// What a certificate's Secret holds: the leaf (DER) and the CA certificates of `ca.crt` (DER).
#[derive(Clone, PartialEq)]
struct Issued {
    leaf: Vec<u8>,
    ca: Vec<Vec<u8>>,
    ca_pem: String,
}

/// A cert-manager Certificate and the pods that serve it at `<pod IP>:<port>` for the name of
/// their Service; for a webhook, the configuration whose caBundle the API server trusts.
struct Served {
    what: &'static str,
    certificate: &'static str,
    secret: &'static str,
    server_name: String,
    addresses: Vec<SocketAddr>,
    certificates: Api<kube::api::DynamicObject>,
    secrets: Api<Secret>,
    configs: Api<ValidatingWebhookConfiguration>,
    config: Option<String>,
}

impl Served {
    async fn webhook(client: &Client, home: &TestNamespace, config: &str) -> Served {
        let pods = wait_binary_pods(&home.api(), "zdb-controller", 2).await;
        let mut served = Served::new(
            client,
            home,
            "the webhook",
            WEBHOOK_CERTIFICATE,
            WEBHOOK_SECRET,
        );
        served.config = Some(config.to_string());
        served.with_pods(&pods, "zdb-webhook", WEBHOOK_PORT, &home.name)
    }

    async fn federator(client: &Client, home: &TestNamespace) -> Served {
        let pods = wait_binary_pods(&home.api(), "rules-federator", 2).await;
        let served = Served::new(
            client,
            home,
            "the federator",
            FEDERATOR_CERTIFICATE,
            FEDERATOR_SECRET,
        );
        served.with_pods(&pods, "rules-federator", FEDERATOR_PORT, &home.name)
    }

    fn new(
        client: &Client,
        home: &TestNamespace,
        what: &'static str,
        certificate: &'static str,
        secret: &'static str,
    ) -> Served {
        Served {
            what,
            certificate,
            secret,
            server_name: String::new(),
            addresses: Vec::new(),
            certificates: cert_manager::api(client, &home.name, "Certificate"),
            secrets: home.api(),
            configs: Api::all(client.clone()),
            config: None,
        }
    }

    fn with_pods(mut self, pods: &[Pod], service: &str, port: u16, namespace: &str) -> Served {
        self.server_name = format!("{service}.{namespace}.svc");
        self.addresses = pods
            .iter()
            .map(|pod| {
                let ip = pod.status.as_ref().unwrap().pod_ip.as_ref().unwrap();
                SocketAddr::new(ip.parse().unwrap(), port)
            })
            .collect();
        self
    }

    /// The Secret's certificate now, or why there is none.
    async fn issued(&self) -> Result<Issued, String> {
        let leaf = cert_manager::secret_pem(&self.secrets, self.secret, "tls.crt").await?;
        let ca_pem = cert_manager::secret_pem(&self.secrets, self.secret, "ca.crt").await?;
        let leaf = tls::pem_certificates(&leaf)?.into_iter().next();
        Ok(Issued {
            leaf: leaf.ok_or_else(|| format!("no certificate in {}", self.secret))?,
            ca: tls::pem_certificates(&ca_pem)?,
            ca_pem,
        })
    }

    /// What a caller trusts (PEM): the webhook configuration's caBundle (the API server), else
    /// the Secret's ca.crt (the federator's clients).
    async fn trusted(&self, issued: &Issued) -> Result<String, String> {
        let Some(config) = &self.config else {
            return Ok(issued.ca_pem.clone());
        };
        let found = self.configs.get(config).await.map_err(|e| e.to_string())?;
        let webhook = &found.webhooks.unwrap_or_default()[0];
        let bundle = webhook
            .client_config
            .ca_bundle
            .as_ref()
            .map(|b| b.0.clone());
        String::from_utf8(bundle.unwrap_or_default()).map_err(|e| e.to_string())
    }

    /// (1) The Certificate is Ready, with a CA in its Secret; (2) for a webhook, the caBundle
    /// holds that CA (the issuer's: cert-manager's CA injector copies it from the Secret);
    /// (3) every pod serves the Secret's leaf, verified against what callers trust for the
    /// Service's name. Returns what was issued.
    async fn assert_issued_and_served(&self) -> Issued {
        cert_manager::wait_ready(&self.certificates, self.certificate, TIMEOUT).await;
        let issued = self.issued().await.unwrap();
        assert!(
            !issued.ca.is_empty(),
            "{}: no CA in {}",
            self.what,
            self.secret
        );
        self.wait_ca_bundle(&issued).await;
        self.wait_served(&issued).await;
        issued
    }

    /// For a webhook: waits until its caBundle holds the CA of `issued` (the CA injector of
    /// v1.19 and later appends it to the CAs already there, which stay until they expire).
    async fn wait_ca_bundle(&self, issued: &Issued) {
        if self.config.is_none() {
            return;
        }
        wait_for(
            "the issuer's CA injected into the caBundle",
            TIMEOUT,
            || async {
                let bundle = tls::pem_certificates(&self.trusted(issued).await?)?;
                if issued.ca.iter().all(|ca| bundle.contains(ca)) {
                    Ok(())
                } else {
                    Err(format!(
                        "{} certificates, not the issuer's CA",
                        bundle.len()
                    ))
                }
            },
        )
        .await;
    }

    /// Waits until every pod serves the leaf of `issued`, verified against what callers trust.
    async fn wait_served(&self, issued: &Issued) {
        let what = format!(
            "{} serving its Secret's certificate on every pod",
            self.what
        );
        wait_for(&what, TIMEOUT, || async {
            let trusted = self.trusted(issued).await?;
            for address in &self.addresses {
                let served = tls::served_leaf(*address, &self.server_name, &trusted).await;
                match served {
                    Ok(der) if der == issued.leaf => {}
                    Ok(_) => return Err(format!("{address} serves another certificate")),
                    Err(error) => return Err(format!("{address}: {error}")),
                }
            }
            Ok(())
        })
        .await;
    }

    /// (4) Triggers a renewal and waits until the Secret holds a new certificate, the
    /// Certificate is Ready again, the caBundle (for a webhook) holds the Secret's CA and every
    /// pod serves the new leaf. Returns what was issued and the timeline.
    async fn renew(&self, first: &Issued) -> (Issued, String) {
        let started = Instant::now();
        cert_manager::trigger_renewal(&self.certificates, self.certificate).await;
        let what = format!("a new certificate in {}", self.secret);
        let renewed = wait_for(&what, TIMEOUT, || async {
            let now = self.issued().await?;
            if now.leaf == first.leaf {
                Err("the first one".to_string())
            } else {
                Ok(now)
            }
        })
        .await;
        let in_secret = started.elapsed();
        cert_manager::wait_ready(&self.certificates, self.certificate, TIMEOUT).await;
        self.wait_ca_bundle(&renewed).await;
        let injected = started.elapsed();
        self.wait_served(&renewed).await;
        let bundle = self.trusted(&renewed).await.unwrap();
        let timeline = format!(
            "new certificate in the Secret after {in_secret:?}, its CA trusted after \
             {injected:?}, served by every pod after {:?}; {} CA certificates trusted",
            started.elapsed(),
            tls::pem_certificates(&bundle).unwrap().len()
        );
        (renewed, timeline)
    }
}

/// The admission calls of a stream and their answers.
#[derive(Default)]
struct Calls {
    total: usize,
    allowed: usize,
    refused: usize,
    /// When (since the start), the code and the message of every call that was not judged.
    failed: Vec<(Duration, u16, String)>,
}

impl std::fmt::Display for Calls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} admission calls: {} allowed, {} refused by the budget, {} failed",
            self.total,
            self.allowed,
            self.refused,
            self.failed.len()
        )?;
        if let (Some(first), Some(last)) = (self.failed.first(), self.failed.last()) {
            write!(
                f,
                " (from {:?} to {:?}; first: {} {})",
                first.0, last.0, first.1, first.2
            )?;
        }
        Ok(())
    }
}

/// Dry-run evictions of one budgeted pod every CALL_INTERVAL, each judged by the webhook (a dry
/// run records nothing, so each is allowed), until stopped.
struct AdmissionStream {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<Calls>,
}

impl AdmissionStream {
    fn start(pods_api: Api<Pod>, pod: String) -> AdmissionStream {
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let task = tokio::spawn(async move {
            let started = Instant::now();
            let mut calls = Calls::default();
            let mut ticks = tokio::time::interval(CALL_INTERVAL);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            while !stopped.load(Ordering::Relaxed) {
                ticks.tick().await;
                calls.total += 1;
                match pods::evict(&pods_api, &pod, true).await {
                    Ok(()) => calls.allowed += 1,
                    Err((429, message)) if message.contains("admission webhook") => {
                        calls.refused += 1;
                    }
                    Err((code, message)) => calls.failed.push((started.elapsed(), code, message)),
                }
            }
            calls
        });
        AdmissionStream { stop, task }
    }

    async fn stop(self) -> Calls {
        self.stop.store(true, Ordering::Relaxed);
        self.task.await.unwrap()
    }
}
