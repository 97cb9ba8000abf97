//! CloudWatch on LocalStack: the environment that points a controller at it, the alarms the tests
//! set, and a LocalStack of a test's own (CloudWatch only), for tests that stop and restart
//! CloudWatch without disturbing the cluster's shared instance. That one uses the interpreter
//! `cluster-up` installed (`E2E_LOCALSTACK_PYTHON`).

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use aws_sdk_cloudwatch::types::{ComparisonOperator, StateValue, Statistic};

use crate::{Cluster, wait_for};

pub struct LocalStack {
    pub port: u16,
    dir: PathBuf,
    python: String,
    child: Option<Child>,
}

/// A port nothing listens on right now.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|address| address.port())
        .expect("a free local port")
}

/// The environment of a controller that reads CloudWatch at `endpoint` with the test
/// credentials.
pub fn aws_env(endpoint: &str) -> Vec<(&'static str, String)> {
    vec![
        ("AWS_ENDPOINT_URL", endpoint.to_string()),
        ("AWS_REGION", "us-east-1".to_string()),
        ("AWS_ACCESS_KEY_ID", "test".to_string()),
        ("AWS_SECRET_ACCESS_KEY", "test".to_string()),
    ]
}

/// Creates (or replaces) the metric alarm `name`: errors >= 1 over a minute.
pub async fn put_alarm(cloudwatch: &aws_sdk_cloudwatch::Client, name: &str) {
    cloudwatch
        .put_metric_alarm()
        .alarm_name(name)
        .namespace("e2e")
        .metric_name("errors")
        .statistic(Statistic::Sum)
        .period(60)
        .evaluation_periods(1)
        .threshold(1.0)
        .comparison_operator(ComparisonOperator::GreaterThanOrEqualToThreshold)
        .send()
        .await
        .expect("PutMetricAlarm");
}

/// Creates (or replaces) the metric alarm `name` like [`put_alarm`], with missing data treated
/// as breaching: LocalStack's own evaluation (once a period, a minute) finds no data and keeps it
/// in ALARM (a plain alarm set to ALARM turns INSUFFICIENT_DATA then), for a test that needs it
/// firing for longer than a minute.
pub async fn put_breaching_alarm(cloudwatch: &aws_sdk_cloudwatch::Client, name: &str) {
    cloudwatch
        .put_metric_alarm()
        .alarm_name(name)
        .namespace("e2e")
        .metric_name("errors")
        .statistic(Statistic::Sum)
        .period(60)
        .evaluation_periods(1)
        .threshold(1.0)
        .comparison_operator(ComparisonOperator::GreaterThanOrEqualToThreshold)
        .treat_missing_data("breaching")
        .send()
        .await
        .expect("PutMetricAlarm");
}

/// Puts the alarm `name` in ALARM for as long as the test needs: it is replaced by a
/// [`put_breaching_alarm`] first, so LocalStack's own evaluation (once a minute) keeps it in
/// ALARM. A plain alarm set to ALARM turns INSUFFICIENT_DATA at that evaluation, and a rollout
/// proceeds on that: a test slower than a minute would then watch a hold that ended.
pub async fn fire_alarm(cloudwatch: &aws_sdk_cloudwatch::Client, name: &str) {
    put_breaching_alarm(cloudwatch, name).await;
    set_alarm(cloudwatch, name, StateValue::Alarm).await;
}

/// Puts the alarm `name` in OK for as long as the test needs: it is replaced by a plain
/// [`put_alarm`] first, which LocalStack's evaluation can only turn INSUFFICIENT_DATA (a rollout
/// proceeds on both), never back to ALARM as it would a breaching one.
pub async fn clear_alarm(cloudwatch: &aws_sdk_cloudwatch::Client, name: &str) {
    put_alarm(cloudwatch, name).await;
    set_alarm(cloudwatch, name, StateValue::Ok).await;
}

/// Deletes the alarm `name` from `Drop` (which cannot be async): on a thread of its own with
/// its own runtime and client. Errors are ignored, as in any clean-up.
pub fn delete_alarm_blocking(endpoint: &str, name: &str) {
    let (endpoint, name) = (endpoint.to_string(), name.to_string());
    let handle = std::thread::spawn(move || {
        let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        else {
            return;
        };
        runtime.block_on(async move {
            let cloudwatch = crate::cluster::cloudwatch_at(&endpoint).await;
            let _ = cloudwatch.delete_alarms().alarm_names(name).send().await;
        });
    });
    let _ = handle.join();
}

/// Sets the state of the alarm `name`.
pub async fn set_alarm(cloudwatch: &aws_sdk_cloudwatch::Client, name: &str, state: StateValue) {
    cloudwatch
        .set_alarm_state()
        .alarm_name(name)
        .state_value(state)
        .state_reason("set by the e2e test")
        .send()
        .await
        .expect("SetAlarmState");
}

impl LocalStack {
    /// Starts LocalStack on a free port and waits until CloudWatch answers.
    pub async fn start(cluster: &Cluster) -> LocalStack {
        let python = cluster
            .var("E2E_LOCALSTACK_PYTHON")
            .expect("E2E_LOCALSTACK_PYTHON: run `make cluster-up` (it installs LocalStack)");
        let port = free_port();
        let dir =
            std::env::temp_dir().join(format!("e2e-localstack-{}-{port}", std::process::id()));
        let mut localstack = LocalStack {
            port,
            dir,
            python,
            child: None,
        };
        localstack.restart().await;
        localstack
    }

    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Kills the process: CloudWatch on this port stops answering (state is lost, as on a real
    /// LocalStack restart).
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the process again on the same port and waits for CloudWatch.
    pub async fn restart(&mut self) {
        self.stop();
        std::fs::create_dir_all(&self.dir).expect("LocalStack state dir");
        let log = std::fs::File::create(self.dir.join("localstack.log")).expect("LocalStack log");
        let child = Command::new(&self.python)
            .args(["-m", "localstack.runtime.main"])
            .env("GATEWAY_LISTEN", format!("127.0.0.1:{}", self.port))
            .env("SERVICES", "cloudwatch")
            .env("RUNTIME_COMPONENTS", "aws")
            .env("LOCALSTACK_VOLUME_DIR", self.dir.join("volume"))
            // Host mode, every directory under ours (else /etc/localstack, /var/lib/localstack).
            .env("OVERRIDE_IN_DOCKER", "0")
            .env("FILESYSTEM_ROOT", self.dir.join("filesystem"))
            .env("DISABLE_EVENTS", "1")
            .env("SKIP_SSL_CERT_DOWNLOAD", "1")
            .stdout(Stdio::from(log.try_clone().expect("LocalStack log")))
            .stderr(Stdio::from(log))
            .spawn()
            .expect("starting LocalStack");
        self.child = Some(child);
        let url = format!("{}/_localstack/health", self.endpoint());
        wait_for("LocalStack CloudWatch", Duration::from_secs(120), || {
            let url = url.clone();
            async move {
                let health = health(&url).await;
                if health.contains("\"cloudwatch\": \"available\"")
                    || health.contains("\"cloudwatch\":\"available\"")
                    || health.contains("\"cloudwatch\": \"running\"")
                    || health.contains("\"cloudwatch\":\"running\"")
                {
                    Ok(())
                } else {
                    Err(health)
                }
            }
        })
        .await;
    }
}

/// GET over plain HTTP/1.1 (no client dependency for one health check).
async fn health(url: &str) -> String {
    let Some(rest) = url.strip_prefix("http://") else {
        return String::new();
    };
    let (host, path) = rest.split_once('/').unwrap_or((rest, ""));
    let Ok(mut stream) = tokio::net::TcpStream::connect(host).await else {
        return "not listening".to_string();
    };
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let request = format!("GET /{path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    if stream.write_all(request.as_bytes()).await.is_err() {
        return String::new();
    }
    let mut body = String::new();
    let _ = stream.read_to_string(&mut body).await;
    body
}

impl Drop for LocalStack {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
