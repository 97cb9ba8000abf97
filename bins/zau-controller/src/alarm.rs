//! The CloudWatch alarm that pauses a rollout.
//!
//! The Go controller asked only for composite alarms, so a metric alarm never paused anything.
//! Here `DescribeAlarms` asks for both types. Anything but a clear answer (API error, timeout,
//! alarm missing) pauses too: a rollout must not proceed because its safety signal is unreadable.

use std::time::Duration;

use aws_sdk_cloudwatch::types::{AlarmType, StateValue};
use tokio::sync::OnceCell;

/// How long one alarm lookup (with the SDK's own retries) may take before it counts as an error.
const LOOKUP_TIMEOUT: Duration = Duration::from_secs(10);

/// What the alarm says about the rollout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AlarmState {
    /// OK or INSUFFICIENT_DATA: proceed.
    Clear,
    /// In ALARM: pause.
    Firing { reason: String },
    /// No metric or composite alarm has this name: pause until it exists.
    NotFound,
    /// CloudWatch could not be asked: pause (fail safe).
    Unavailable { error: String },
}

#[derive(Debug, thiserror::Error)]
pub enum AlarmError {
    #[error("DescribeAlarms timed out after {0:?}")]
    Timeout(Duration),
    #[error("DescribeAlarms failed: {0}")]
    Describe(String),
}

/// Where a reconcile asks for an alarm's state: CloudWatch ([`AlarmChecker`]) in the binary, a
/// scripted answer in tests.
pub trait AlarmSource: Send + Sync {
    fn alarm_state<'a>(&'a self, name: &'a str) -> futures::future::BoxFuture<'a, AlarmState>;
}

impl AlarmSource for AlarmChecker {
    fn alarm_state<'a>(&'a self, name: &'a str) -> futures::future::BoxFuture<'a, AlarmState> {
        Box::pin(self.state(name))
    }
}

/// Reads alarm states; the AWS client is built on first use, so a controller whose rollouts use
/// no alarm never resolves AWS region or credentials.
pub struct AlarmChecker {
    endpoint: Option<String>,
    client: OnceCell<aws_sdk_cloudwatch::Client>,
}

impl AlarmChecker {
    pub fn new(endpoint: Option<String>) -> Self {
        Self {
            endpoint,
            client: OnceCell::new(),
        }
    }

    async fn client(&self) -> &aws_sdk_cloudwatch::Client {
        self.client
            .get_or_init(|| async {
                let mut loader = aws_config::defaults(aws_config::BehaviorVersion::latest());
                if let Some(endpoint) = &self.endpoint {
                    loader = loader.endpoint_url(endpoint);
                }
                aws_sdk_cloudwatch::Client::new(&loader.load().await)
            })
            .await
    }

    /// The state of `name` (metric or composite alarm).
    pub async fn state(&self, name: &str) -> AlarmState {
        match self.describe(name).await {
            Ok(state) => state,
            Err(error) => AlarmState::Unavailable {
                error: error_chain(&error),
            },
        }
    }

    async fn describe(&self, name: &str) -> Result<AlarmState, AlarmError> {
        let request = self
            .client()
            .await
            .describe_alarms()
            .alarm_names(name)
            .alarm_types(AlarmType::CompositeAlarm)
            .alarm_types(AlarmType::MetricAlarm)
            .send();
        let output = tokio::time::timeout(LOOKUP_TIMEOUT, request)
            .await
            .map_err(|_| AlarmError::Timeout(LOOKUP_TIMEOUT))?
            .map_err(|error| AlarmError::Describe(error_chain(&error)))?;
        let metric = output
            .metric_alarms()
            .iter()
            .filter(|alarm| alarm.alarm_name() == Some(name))
            .map(|alarm| (alarm.state_value(), alarm.state_reason()));
        let composite = output
            .composite_alarms()
            .iter()
            .filter(|alarm| alarm.alarm_name() == Some(name))
            .map(|alarm| (alarm.state_value(), alarm.state_reason()));
        let found: Vec<_> = metric.chain(composite).collect();
        if found.is_empty() {
            return Ok(AlarmState::NotFound);
        }
        Ok(classify(&found))
    }
}

fn classify(found: &[(Option<&StateValue>, Option<&str>)]) -> AlarmState {
    found
        .iter()
        .find(|(state, _)| *state == Some(&StateValue::Alarm))
        .map_or(AlarmState::Clear, |(_, reason)| AlarmState::Firing {
            reason: reason.unwrap_or_default().to_string(),
        })
}

/// An error and its sources on one line (the SDK's top-level messages say little: "dispatch
/// failure").
fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_alarm_state_fires() {
        assert_eq!(
            classify(&[(Some(&StateValue::Ok), None)]),
            AlarmState::Clear
        );
        assert_eq!(
            classify(&[(Some(&StateValue::InsufficientData), None)]),
            AlarmState::Clear
        );
        assert_eq!(
            classify(&[(Some(&StateValue::Alarm), Some("errors > 5"))]),
            AlarmState::Firing {
                reason: "errors > 5".to_string()
            }
        );
    }

    #[tokio::test]
    async fn an_unreachable_endpoint_is_unavailable_not_clear() {
        // Nothing listens on port 9 of localhost: the lookup fails fast. Region and credentials
        // are set on the client, so the machine's AWS settings cannot change the outcome.
        let checker = AlarmChecker {
            endpoint: Some("http://127.0.0.1:9".to_string()),
            client: OnceCell::new(),
        };
        let config = aws_sdk_cloudwatch::Config::builder()
            .behavior_version(aws_sdk_cloudwatch::config::BehaviorVersion::latest())
            .region(aws_sdk_cloudwatch::config::Region::new("us-east-1"))
            .credentials_provider(aws_sdk_cloudwatch::config::Credentials::new(
                "test", "test", None, None, "test",
            ))
            .endpoint_url("http://127.0.0.1:9")
            .build();
        let _ = checker
            .client
            .set(aws_sdk_cloudwatch::Client::from_conf(config));
        assert!(matches!(
            checker.state("any").await,
            AlarmState::Unavailable { .. }
        ));
    }
}
