//! The discovery role of a monitor, and what follows from it: the names of its kind, the SD
//! role and the label holding the port's name.

use crate::translate::DiscoveryRole;

/// How a monitor's targets are discovered: a ServiceMonitor through Endpoints or
/// EndpointSlices, a PodMonitor through Pods. Everything that differs between the two kinds
/// of monitor, except the endpoint's HTTP client, follows from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    Endpoints,
    EndpointSlice,
    Pod,
}

impl Role {
    /// The role discovering a Service's endpoints (a ServiceMonitor's, an Alertmanager's), as
    /// the Prometheus's `serviceDiscoveryRole` asks.
    pub(crate) fn of_services(role: DiscoveryRole) -> Role {
        match role {
            DiscoveryRole::Endpoints => Role::Endpoints,
            DiscoveryRole::EndpointSlice => Role::EndpointSlice,
        }
    }

    /// The first segment of the job name.
    pub(super) fn kind(self) -> &'static str {
        match self {
            Role::Endpoints | Role::EndpointSlice => "serviceMonitor",
            Role::Pod => "podMonitor",
        }
    }

    /// The resource named in the Prometheus's `excludedFromEnforcement`.
    pub(super) fn resource(self) -> &'static str {
        match self {
            Role::Endpoints | Role::EndpointSlice => "servicemonitors",
            Role::Pod => "podmonitors",
        }
    }

    /// The spec field listing the endpoints, naming them in errors.
    pub(super) fn endpoints_field(self) -> &'static str {
        match self {
            Role::Endpoints | Role::EndpointSlice => "endpoints",
            Role::Pod => "podMetricsEndpoints",
        }
    }

    /// The Kubernetes SD role.
    pub(crate) fn sd_role(self) -> &'static str {
        match self {
            Role::Endpoints => "endpoints",
            Role::EndpointSlice => "endpointslice",
            Role::Pod => "pod",
        }
    }

    /// The object whose labels the `selector` and `jobLabel` read.
    pub(super) fn selected(self) -> &'static str {
        match self {
            Role::Endpoints | Role::EndpointSlice => "service",
            Role::Pod => "pod",
        }
    }

    /// The SD roles the `RoleSelector` mechanism selects on.
    pub(super) fn selector_roles(self) -> Vec<&'static str> {
        match self {
            Role::Endpoints | Role::EndpointSlice => vec![self.sd_role(), "service"],
            Role::Pod => vec!["pod"],
        }
    }

    /// The meta label holding the name of the discovered port.
    pub(crate) fn port_name_label(self) -> &'static str {
        match self {
            Role::Endpoints => "__meta_kubernetes_endpoint_port_name",
            Role::EndpointSlice => "__meta_kubernetes_endpointslice_port_name",
            Role::Pod => "__meta_kubernetes_pod_container_port_name",
        }
    }
}
