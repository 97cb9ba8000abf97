//! The controllers of the scenario, deployed as pods from the project's image (config/local: 2
//! replicas of each, spread over the real nodes' zones, as shipped) and running as their
//! ServiceAccounts: the ZoneAwareUpdate's and the ZoneDisruptionBudget's controllers (and the
//! eviction webhook) over the suite's namespace, the shard controller and the rules-federator
//! over the shards'. Before the outage each leader-elected controller's Lease is handed to its
//! replica in the dark zone where it has one: the leader goes dark with the zone, the worst case.
//! Watched through the outage, once a second: the Leases (each controller's time without a
//! leader) and the eviction webhook (a dry-run eviction of a pod no budget selects, in a zone
//! that stays up: any answer but "allowed" is a failed call).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};

use e2e::deploy::{DeployedFederator, Overlay, TestDeploy, lease_holder, reader_token, watch_only};
use e2e::process::http_get_from;
use e2e::real::RealNodes;
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::DeleteParams;

use super::*;

/// The port of the controllers' /metrics (plain HTTP), the federator's being its HTTPS port.
const METRICS_PORT: u16 = 8080;
const FEDERATOR_PORT: u16 = 9090;
/// The last stretch of the outage in which every webhook call must be answered.
const ANSWERED_AT_THE_END: Duration = Duration::from_secs(20);

pub struct Controllers<'a> {
    cluster: &'a Cluster,
    _deployment: TestDeploy<'a>,
    pods: Api<Pod>,
    leases: Api<Lease>,
    client: kube::Client,
    names: Vec<String>,
    /// A token of the federator's reader role, as Grafana holds one.
    pub reader: String,
}

/// A NoSchedule taint on every real node while it lives, which the controllers do not tolerate:
/// a deleted leader's replacement stays pending, and the Lease it released goes to the standby.
struct Hold<'a> {
    cluster: &'a Cluster,
}

const HOLD_TAINT: &str = "zonecontrol.k8s.aws/e2e-hold";

impl<'a> Hold<'a> {
    fn new(cluster: &'a Cluster) -> Hold<'a> {
        let mut taint = e2e::identity::kubectl(cluster);
        taint.args(["taint", "nodes", "-l", "type=real", "--overwrite"]);
        taint.arg(format!("{HOLD_TAINT}=:NoSchedule"));
        e2e::identity::run(taint, None);
        Hold { cluster }
    }
}

impl Drop for Hold<'_> {
    fn drop(&mut self) {
        let mut untaint = e2e::identity::kubectl(self.cluster);
        untaint.args(["taint", "nodes", "-l", "type=real"]);
        untaint.arg(format!("{HOLD_TAINT}:NoSchedule-"));
        let removed = untaint.status().is_ok_and(|status| status.success());
        if !removed {
            eprintln!("the taint {HOLD_TAINT} may be left on the real nodes");
        }
    }
}

/// Waits until the webhook configuration fails closed (a replica serves it).
async fn wait_fail_closed(client: &kube::Client, name: &str) {
    let webhooks: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    wait_for("the webhook at failurePolicy Fail", TIMEOUT, || async {
        let configuration = webhooks.get(name).await.map_err(|e| e.to_string())?;
        let policy = configuration.webhooks.unwrap_or_default()[0]
            .failure_policy
            .clone();
        if policy.as_deref() == Some("Fail") {
            Ok(())
        } else {
            Err(format!("{policy:?}"))
        }
    })
    .await;
}

/// The label selector of `controller`'s replicas.
fn selector_of(controller: &str) -> String {
    format!("app.kubernetes.io/name={controller}")
}

fn pod_ip(pod: &Pod) -> Option<String> {
    pod.status.as_ref()?.pod_ip.clone()
}

impl<'a> Controllers<'a> {
    /// `make deploy` of config/local for the scenario: every controller's two replicas
    /// available, the webhook failing closed.
    pub async fn deploy(
        cluster: &'a Cluster,
        victim: &TestNamespace,
        shards: &str,
    ) -> Controllers<'a> {
        let image = RealNodes::of(cluster).project_image().to_owned();
        let suffix = victim.suffix().to_string();
        let namespace = format!("e2e-deployed-{suffix}");
        let names = e2e::deploy::controllers();
        let (budgets, monitoring): (Vec<String>, Vec<String>) = names
            .iter()
            .cloned()
            .partition(|c| c == "zau-controller" || c == "zdb-controller");
        let patches = watch_only(&budgets, &victim.name) + &watch_only(&monitoring, shards);
        let overlay = Overlay::new("config/local", &suffix, &victim.name, &patches);
        let deployment = TestDeploy::new(cluster, overlay, &namespace, &image);
        deployment.make("deploy");
        let client = victim.client.clone();
        wait_fail_closed(&client, &format!("zone-aware-eviction-webhook-{suffix}")).await;
        let pods: Api<Pod> = Api::namespaced(client.clone(), &namespace);
        for controller in &names {
            pods::wait_available(&pods, &selector_of(controller), 2, TIMEOUT).await;
        }
        let reader = reader_token(
            cluster,
            victim,
            &format!("zone-aware-rules-federator-reader-{suffix}"),
        );
        Controllers {
            cluster,
            _deployment: deployment,
            leases: Api::namespaced(client.clone(), &namespace),
            pods,
            client,
            names,
            reader,
        }
    }

    fn elected(&self) -> impl Iterator<Item = &String> {
        self.names
            .iter()
            .filter(|c| e2e::deploy::is_leader_elected(c))
    }

    async fn replicas(&self, controller: &str) -> Vec<Pod> {
        pods::list(&self.pods, &selector_of(controller)).await
    }

    /// `controller`'s replicas: pod name → zone.
    async fn replica_zones(&self, controller: &str) -> BTreeMap<String, String> {
        e2e::nodes::pod_zones(&self.pods, &selector_of(controller)).await
    }

    /// `controller`'s leader, once its Lease has a holder.
    async fn leader(&self, controller: &str) -> String {
        wait_for(&format!("{controller}'s leader"), TIMEOUT, || {
            lease_holder(&self.leases, controller)
        })
        .await
    }

    /// `ip:port` of every replica of `controller`'s metrics (the federator's over HTTPS).
    pub async fn metrics_targets(&self, controller: &str) -> Vec<String> {
        let port = match controller {
            "rules-federator" => FEDERATOR_PORT,
            _ => METRICS_PORT,
        };
        self.replicas(controller)
            .await
            .iter()
            .filter_map(pod_ip)
            .map(|ip| format!("{ip}:{port}"))
            .collect()
    }

    /// The /metrics of `controller`'s current leader.
    pub async fn leader_metrics(&self, controller: &str) -> Result<String, String> {
        let leader = lease_holder(&self.leases, controller).await?;
        let pod = self.pods.get(&leader).await.map_err(|e| e.to_string())?;
        let ip = pod_ip(&pod).ok_or("the leader has no IP")?;
        let address: SocketAddr = format!("{ip}:{METRICS_PORT}")
            .parse()
            .map_err(|e| format!("{e}"))?;
        match http_get_from(address, "/metrics").await? {
            (200, text) => Ok(text),
            (code, body) => Err(format!("{code}: {body}")),
        }
    }

    /// The federator's API at a replica outside `zone`.
    pub async fn federator_outside(&self, zone: &str) -> DeployedFederator {
        let replicas = self.replicas("rules-federator").await;
        let zones = self.replica_zones("rules-federator").await;
        let pod = replicas
            .iter()
            .find(|pod| zones.get(&pod.name_any()).is_some_and(|z| z != zone))
            .expect("a federator replica outside the dark zone");
        DeployedFederator::of(&self.client, pod).await
    }

    /// Hands each leader-elected controller's Lease to its replica in `zone` where it has one:
    /// the leader elsewhere is deleted, releasing the Lease as it stops, while its replacement
    /// waits to be scheduled ([`Hold`]: else it may win the Lease first). Then every controller
    /// has its two replicas available again. Controller → whether its leader is in `zone`.
    pub async fn leaders_into(&self, zone: &str) -> BTreeMap<String, bool> {
        let mut in_zone = BTreeMap::new();
        for controller in self.elected() {
            in_zone.insert(controller.clone(), self.lease_into(controller, zone).await);
        }
        for controller in &self.names {
            pods::wait_all_available(&self.pods, &selector_of(controller), 2, None, TIMEOUT).await;
        }
        in_zone
    }

    /// [`Controllers::leaders_into`] for one controller: whether its leader is in `zone`.
    async fn lease_into(&self, controller: &str, zone: &str) -> bool {
        let zones = self.replica_zones(controller).await;
        let there: Vec<&String> = zones
            .iter()
            .filter(|(_, z)| *z == zone)
            .map(|(pod, _)| pod)
            .collect();
        let leader = self.leader(controller).await;
        if there.is_empty() || there.contains(&&leader) {
            return !there.is_empty();
        }
        let _held = Hold::new(self.cluster);
        self.pods
            .delete(&leader, &DeleteParams::default())
            .await
            .unwrap();
        wait_for(
            &format!("{controller}'s Lease in {zone}"),
            TIMEOUT,
            || async {
                let holder = lease_holder(&self.leases, controller).await?;
                there
                    .contains(&&holder)
                    .then_some(())
                    .ok_or(format!("held by {holder}"))
            },
        )
        .await;
        true
    }

    /// Starts calling the webhook (a dry-run eviction of `calm` in `victim`) and reading the
    /// Leases, once a second, until [`Watch::stop`].
    pub async fn watch(&self, victim: Api<Pod>, calm: String) -> Watch {
        let mut leaders = BTreeMap::new();
        for controller in self.elected() {
            leaders.insert(controller.clone(), self.leader(controller).await);
        }
        let seen = Arc::new(Mutex::new(Seen {
            leaders: leaders.clone(),
            ..Seen::default()
        }));
        let leases = self.leases.clone();
        let into = seen.clone();
        let task = tokio::spawn(async move {
            // One call a second, however long a call takes (a call to a dark replica times out).
            let mut every_second = tokio::time::interval(Duration::from_secs(1));
            every_second.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                every_second.tick().await;
                let at = Timestamp::now();
                let answer = pods::evict(&victim, &calm, true).await;
                let mut holders = BTreeMap::new();
                for controller in leaders.keys() {
                    holders.insert(controller.clone(), lease_holder(&leases, controller).await);
                }
                let mut seen = into.lock().unwrap_or_else(PoisonError::into_inner);
                seen.calls += 1;
                if let Err((code, message)) = answer {
                    seen.failed.push((at, format!("{code}: {message}")));
                }
                for (controller, holder) in holders {
                    let first = seen.leaders[&controller].clone();
                    if holder.is_ok_and(|h| h != first) {
                        seen.moved.entry(controller).or_insert(at);
                    }
                }
            }
        });
        Watch { task, seen }
    }

    /// After the return: every controller's two replicas available, each elected one with a
    /// single leader; the replicas' container restarts.
    pub async fn wait_whole(&self) -> BTreeMap<String, i32> {
        let mut restarts = BTreeMap::new();
        for controller in &self.names {
            pods::wait_all_available(&self.pods, &selector_of(controller), 2, None, TIMEOUT).await;
            let count = self
                .replicas(controller)
                .await
                .iter()
                .flat_map(|p| {
                    p.status
                        .iter()
                        .flat_map(|s| s.container_statuses.iter().flatten())
                })
                .map(|c| c.restart_count)
                .sum();
            restarts.insert(controller.clone(), count);
        }
        for controller in self.elected() {
            self.leader(controller).await;
        }
        restarts
    }
}

/// What the watch saw.
#[derive(Debug, Default)]
pub struct Seen {
    /// Controller → its leader when the watch began.
    leaders: BTreeMap<String, String>,
    /// Controller → when another replica was first seen holding its Lease.
    moved: BTreeMap<String, Timestamp>,
    calls: usize,
    /// Webhook calls answered neither allowed nor refused (the API server could not call it).
    failed: Vec<(Timestamp, String)>,
}

pub struct Watch {
    task: tokio::task::JoinHandle<()>,
    seen: Arc<Mutex<Seen>>,
}

impl Watch {
    pub fn stop(self) -> Seen {
        self.task.abort();
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        std::mem::take(&mut *seen)
    }
}

/// The controllers' figures over the outage from `started` to `ended`.
#[derive(Debug)]
pub struct Kept {
    /// Controller → how long it had no leader (None: its leader was not in the dark zone and
    /// kept the Lease).
    pub leaderless: BTreeMap<String, Option<Duration>>,
    pub calls: usize,
    pub failed: Vec<(Timestamp, String)>,
    /// Failed calls in the last [`ANSWERED_AT_THE_END`] of the outage.
    pub late: usize,
}

impl Seen {
    pub fn kept(&self, started: Timestamp, ended: Timestamp) -> Kept {
        let leaderless = self
            .leaders
            .keys()
            .map(|c| (c.clone(), self.moved.get(c).map(|at| since(started, *at))))
            .collect();
        let last = ended - ANSWERED_AT_THE_END;
        Kept {
            leaderless,
            calls: self.calls,
            late: self
                .failed
                .iter()
                .filter(|(at, _)| *at > last && *at < ended)
                .count(),
            failed: self.failed.clone(),
        }
    }
}

/// The deployed controllers' promises: a leader back within the Lease's reach (every leader in
/// the dark zone moved, each in under a minute), the webhook answering again well before the
/// zone returns, and no container restarted but a returning leader's (it finds its Lease taken,
/// exits and comes back as a standby, by design).
pub fn check(kept: &Kept, dark_leaders: &BTreeMap<String, bool>, restarts: &BTreeMap<String, i32>) {
    for (controller, gap) in &kept.leaderless {
        assert_eq!(
            gap.is_some(),
            dark_leaders[controller],
            "{controller}'s leader moved exactly when it was in the dark zone: {kept:?}"
        );
        assert!(
            gap.is_none_or(|gap| gap < Duration::from_secs(60)),
            "{controller} had no leader for {gap:?}"
        );
    }
    for (controller, restarted) in restarts {
        let returning_leader = kept.leaderless.get(controller).is_some_and(Option::is_some);
        assert!(
            *restarted <= i32::from(returning_leader),
            "{controller}'s containers restarted {restarted} times"
        );
    }
    assert_eq!(
        kept.late, 0,
        "the webhook still failing at the end of the outage: {:?}",
        kept.failed
    );
}

/// The deployed controllers' rows of the table.
pub fn rows(kept: &Kept, restarts: &BTreeMap<String, i32>) -> Vec<Row> {
    let mut rows: Vec<Row> = kept
        .leaderless
        .iter()
        .map(|(controller, gap)| Row {
            component: format!("{controller} (2 pods)"),
            detected: None,
            action: match gap {
                Some(_) => format!("leader moved out of {DARK} (gap: without a leader)"),
                None => format!("its leader was not in {DARK} and kept the Lease"),
            },
            recovered: None,
            gap: gap.map(|gap| gap.as_secs_f64()),
            lost: None,
            wrong: 0,
        })
        .collect();
    rows.push(Row {
        component: "eviction webhook (2 zdb pods)".into(),
        detected: None,
        action: format!(
            "{} of {} calls failed {:?}; container restarts {restarts:?} (a returning leader \
             exits, its Lease taken, and restarts as a standby)",
            kept.failed.len(),
            kept.calls,
            kept.failed
        ),
        recovered: None,
        gap: None,
        lost: None,
        wrong: kept.late,
    });
    rows
}
