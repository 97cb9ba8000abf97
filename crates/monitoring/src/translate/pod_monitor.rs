//! PodMonitor → one job per endpoint, discovered through the `pod` role. The job is built by
//! [`super::monitor`]; a pod endpoint brings its own HTTP client settings (TLS from Secrets
//! and ConfigMaps only).

use serde_json::Value;

use super::auth::{self, Ctx};
use super::common::set;
use super::monitor::{
    self, Credentials, Monitor, MonitorEndpoint, Role, ScrapeEndpoint, monitor_spec,
    scrape_endpoint,
};
use super::{Job, Settings};
use crate::Object;
use crate::monitors::{PodMetricsEndpoint, PodMonitorSpec, SafeTlsConfig};
use crate::resolve::{KeyRef, Resolver};

pub(super) fn jobs(
    obj: &Object<PodMonitorSpec>,
    settings: &Settings,
    values: &dyn Resolver,
) -> Result<Vec<Job>, String> {
    let monitor = Monitor::of(obj, monitor_spec!(&obj.spec), Role::Pod);
    monitor::jobs(&monitor, &obj.spec.pod_metrics_endpoints, settings, values)
}

pub(super) fn references(obj: &Object<PodMonitorSpec>) -> Vec<KeyRef> {
    monitor::references(&obj.namespace, &obj.spec.pod_metrics_endpoints)
}

impl MonitorEndpoint for PodMetricsEndpoint {
    fn scrape(&self) -> ScrapeEndpoint<'_> {
        scrape_endpoint!(self)
    }

    fn port_number(&self) -> Option<i32> {
        self.port_number
    }

    fn safe_tls(&self) -> Option<&SafeTlsConfig> {
        self.tls_config.as_ref()
    }

    fn client(&self, job: &mut Job, _settings: &Settings, ctx: Ctx<'_>) -> Result<(), String> {
        let credentials = Credentials::of(&self.scrape(), None);
        // An empty `tlsConfig: {}` is absent, as upstream reads it.
        let tls = self.tls_config.as_ref().filter(|tls| !tls.is_empty());
        credentials.check_exclusive()?;
        if let Some(tls) = tls {
            set(
                job,
                "tls_config",
                Value::Object(auth::safe_tls(ctx, "tlsConfig", tls)?),
            );
        }
        credentials.add_bearer_and_basic(ctx, job)?;
        credentials.add_oauth2(ctx, job)?;
        auth::proxy(ctx, "proxyConfig", &self.proxy, job)?;
        credentials.add_authorization(ctx, job)
    }
}
