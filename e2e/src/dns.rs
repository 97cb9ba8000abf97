//! A real DNS server for the tests of backends named in DNS: dnsmasq (Debian's `dnsmasq-base`,
//! which `e2e/cluster/real-nodes.sh prereqs` installs) on 127.0.0.1, serving only the records a
//! test gives it, with a TTL of one second. Killed on drop, its log printed if the test failed.

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::wait_for;

/// An SRV record: its name, target host and port.
pub struct Srv<'a> {
    pub name: &'a str,
    pub target: &'a str,
    pub port: u16,
}

/// A dnsmasq process answering for the records it was started with.
pub struct Dnsmasq {
    /// Where it answers (UDP and TCP).
    pub address: SocketAddr,
    log: crate::process::LogFile,
    child: Child,
}

impl Dnsmasq {
    /// Starts dnsmasq on 127.0.0.1:`port` with `srv` records, each target host's address
    /// 127.0.0.1, and no other name (nothing forwarded, no /etc/hosts); waits until it accepts
    /// connections.
    pub async fn start(port: u16, srv: &[Srv<'_>]) -> Dnsmasq {
        let mut args = vec![
            "--keep-in-foreground".to_string(),
            "--log-facility=-".to_string(),
            "--conf-file=/dev/null".to_string(),
            "--pid-file".to_string(),
            "--no-resolv".to_string(),
            "--no-hosts".to_string(),
            "--no-poll".to_string(),
            "--bind-interfaces".to_string(),
            "--listen-address=127.0.0.1".to_string(),
            format!("--port={port}"),
            "--local-ttl=1".to_string(),
            "--log-queries".to_string(),
        ];
        for record in srv {
            args.push(format!(
                "--srv-host={},{},{}",
                record.name, record.target, record.port
            ));
            args.push(format!("--host-record={},127.0.0.1", record.target));
        }
        let (log, out, err) = crate::process::log_file("dnsmasq");
        let child = Command::new("dnsmasq")
            .args(&args)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "starting dnsmasq: {e} (run `bash e2e/cluster/real-nodes.sh prereqs`, which installs dnsmasq-base)"
                )
            });
        let mut dnsmasq = Dnsmasq {
            address: SocketAddr::from(([127, 0, 0, 1], port)),
            log,
            child,
        };
        let address = dnsmasq.address;
        wait_for("dnsmasq listening", Duration::from_secs(10), || async {
            tokio::net::TcpStream::connect(address)
                .await
                .map(drop)
                .map_err(|e| e.to_string())
        })
        .await;
        assert!(
            matches!(dnsmasq.child.try_wait(), Ok(None)),
            "dnsmasq exited: {}",
            crate::process::tail(&dnsmasq.log, 20)
        );
        dnsmasq
    }
}

impl Drop for Dnsmasq {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!(
                "---- dnsmasq log ({}) ----\n{}",
                self.log.display(),
                crate::process::tail(&self.log, 40)
            );
        }
    }
}
