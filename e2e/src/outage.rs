//! A whole zone of the local cluster going dark for as long as a [`ZoneOutage`] lives:
//! `e2e/cluster/outage.sh` freezes the zone's real node and cuts its network, and has kwok stop
//! managing the zone's fake nodes. The node lifecycle controller then marks the nodes NotReady
//! and their pods not Ready, as on any cluster. Ended by [`ZoneOutage::end`], or when dropped (a
//! failed test), and by `make cluster-down` if all else fails.

use std::process::Command;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::jiff::Timestamp;
use kube::api::ListParams;
use kube::{Api, Client};

use crate::cluster::e2e_dir;
use crate::nodes::is_ready;
use crate::wait_for;
use crate::workload::ZONE_LABEL;

/// How long the node lifecycle controller takes at most to see a zone's nodes stop reporting
/// (its grace period, 50 s, plus its 5 s monitor period), with slack.
pub const DETECTION_TIMEOUT: Duration = Duration::from_secs(120);

/// One outage at a time in a test process: two tests of a suite would take zones down at once.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// A zone that is dark until ended.
pub struct ZoneOutage {
    pub zone: String,
    /// When the zone went dark.
    pub started: Timestamp,
    ended: Option<Timestamp>,
    _turn: std::sync::MutexGuard<'static, ()>,
}

fn outage(args: &[&str]) {
    let script = e2e_dir().join("cluster/outage.sh");
    let output = Command::new("bash")
        .arg(&script)
        .args(args)
        .output()
        .expect("run e2e/cluster/outage.sh");
    assert!(
        output.status.success(),
        "outage.sh {args:?} failed: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

impl ZoneOutage {
    /// Takes every node of `zone` down at once, once no other outage of this process is under
    /// way (the thread blocks until then).
    pub fn start(zone: &str) -> ZoneOutage {
        let turn = ONE_AT_A_TIME
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let started = Timestamp::now();
        outage(&["down", zone]);
        ZoneOutage {
            zone: zone.to_string(),
            started,
            ended: None,
            _turn: turn,
        }
    }

    /// Waits until the control plane has every node of the zone NotReady; returns when.
    pub async fn wait_detected(&self, client: &Client) -> Timestamp {
        wait_zone_nodes(client, &self.zone, false).await;
        Timestamp::now()
    }

    /// Brings the zone back; returns when.
    pub fn end(&mut self) -> Timestamp {
        let now = Timestamp::now();
        if self.ended.is_none() {
            outage(&["up", &self.zone]);
            self.ended = Some(now);
        }
        now
    }

    /// Waits until every node of the zone is Ready again.
    pub async fn wait_recovered(&self, client: &Client) -> Timestamp {
        wait_zone_nodes(client, &self.zone, true).await;
        Timestamp::now()
    }
}

impl Drop for ZoneOutage {
    fn drop(&mut self) {
        if self.ended.is_none() {
            self.ended = Some(Timestamp::now());
            let script = e2e_dir().join("cluster/outage.sh");
            let _ = Command::new("bash")
                .arg(script)
                .args(["up", &self.zone])
                .status();
        }
    }
}

/// Waits until every node of `zone` is Ready (`ready`) or none is.
async fn wait_zone_nodes(client: &Client, zone: &str, ready: bool) {
    let nodes: Api<Node> = Api::all(client.clone());
    let selector = format!("{ZONE_LABEL}={zone}");
    let what = format!(
        "every node of {zone} {}",
        if ready { "Ready" } else { "NotReady" }
    );
    wait_for(&what, DETECTION_TIMEOUT, || async {
        let list = nodes
            .list(&ListParams::default().labels(&selector))
            .await
            .map_err(|e| e.to_string())?;
        let wrong: Vec<String> = list
            .items
            .iter()
            .filter(|n| is_ready(n) != ready)
            .filter_map(|n| n.metadata.name.clone())
            .collect();
        if list.items.is_empty() || !wrong.is_empty() {
            return Err(format!("not yet: {wrong:?}"));
        }
        Ok(())
    })
    .await;
}
