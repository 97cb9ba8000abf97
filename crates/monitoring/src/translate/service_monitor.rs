//! ServiceMonitor → one job per endpoint, discovered through Endpoints or EndpointSlices. The
//! job is built by [`super::monitor`]; a ServiceMonitor endpoint brings its own HTTP client
//! settings (TLS files and `bearerTokenFile`, denied by `arbitraryFSAccessThroughSMs`).

use serde_json::Value;

use super::auth::{self, Ctx};
use super::common::set;
use super::monitor::{
    self, Credentials, Monitor, MonitorEndpoint, Role, ScrapeEndpoint, monitor_spec,
    scrape_endpoint,
};
use super::{Job, Settings};
use crate::Object;
use crate::monitors::{Endpoint, SafeTlsConfig, ServiceMonitorSpec};
use crate::resolve::{KeyRef, Resolver};

pub(super) fn jobs(
    obj: &Object<ServiceMonitorSpec>,
    settings: &Settings,
    values: &dyn Resolver,
) -> Result<Vec<Job>, String> {
    let monitor = Monitor {
        target_labels: &obj.spec.target_labels,
        ..Monitor::of(
            obj,
            monitor_spec!(&obj.spec),
            Role::of_services(settings.service_discovery_role),
        )
    };
    monitor::jobs(&monitor, &obj.spec.endpoints, settings, values)
}

pub(super) fn references(obj: &Object<ServiceMonitorSpec>) -> Vec<KeyRef> {
    monitor::references(&obj.namespace, &obj.spec.endpoints)
}

impl MonitorEndpoint for Endpoint {
    fn scrape(&self) -> ScrapeEndpoint<'_> {
        scrape_endpoint!(self)
    }

    fn safe_tls(&self) -> Option<&SafeTlsConfig> {
        self.tls_config.as_ref().map(|tls| &tls.safe)
    }

    fn client(&self, job: &mut Job, settings: &Settings, ctx: Ctx<'_>) -> Result<(), String> {
        auth::proxy(ctx, "proxyConfig", &self.proxy, job)?;
        let credentials = Credentials::of(&self.scrape(), self.bearer_token_file.as_deref());
        if settings.deny_arbitrary_fs_access {
            self.check_no_files(credentials.bearer_file.is_some())?;
        }
        credentials.check_exclusive()?;
        credentials.add_oauth2(ctx, job)?;
        if let Some(tls) = &self.tls_config {
            set(
                job,
                "tls_config",
                Value::Object(auth::tls(ctx, "tlsConfig", tls)?),
            );
        }
        if let Some(file) = credentials.bearer_file {
            set(job, "bearer_token_file", file);
        }
        credentials.add_bearer_and_basic(ctx, job)?;
        credentials.add_authorization(ctx, job)
    }
}

impl Endpoint {
    /// Refuses paths inside the Prometheus container (`arbitraryFSAccessThroughSMs.deny`).
    fn check_no_files(&self, bearer_file: bool) -> Result<(), String> {
        let tls_files = self.tls_config.as_ref().is_some_and(|tls| {
            [&tls.ca_file, &tls.cert_file, &tls.key_file]
                .iter()
                .any(|path| path.as_deref().is_some_and(|p| !p.is_empty()))
        });
        if bearer_file || tls_files {
            return Err(
                "tlsConfig/bearerTokenFile: file system access is denied by the Prometheus \
                 arbitraryFSAccessThroughSMs setting"
                    .into(),
            );
        }
        Ok(())
    }
}
