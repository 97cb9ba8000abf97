//! What a controller watches and how it names itself when it writes: the zone label, the
//! namespace it is limited to, and its server-side-apply field manager. One flattened set of
//! flags, so every binary spells them the same way.

use kube::{Api, Client, Resource};

/// `#[command(flatten)]` into a binary's args.
#[derive(Clone, Debug, clap::Args)]
pub struct ScopeArgs {
    /// Node label whose value is the node's zone.
    #[arg(
        long,
        env = "ZAC_ZONE_LABEL",
        default_value = zone_topology::ZONE_LABEL,
        value_name = "KEY"
    )]
    pub zone_label: String,

    /// Watch and act in this namespace only (default: every namespace).
    #[arg(long, env = "ZAC_WATCH_NAMESPACE", value_name = "NAMESPACE")]
    pub watch_namespace: Option<String>,

    /// Field manager of this controller's writes (default: the binary's name).
    #[arg(long, env = "ZAC_FIELD_MANAGER", value_name = "NAME")]
    pub field_manager: Option<String>,
}

impl ScopeArgs {
    /// The watched namespace, `None` for all of them.
    pub fn namespace(&self) -> Option<&str> {
        self.watch_namespace.as_deref()
    }

    /// An `Api` over the watched namespace (or all namespaces).
    pub fn api<K>(&self, client: &Client) -> Api<K>
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope>,
        K::DynamicType: Default,
    {
        namespaced_or_all(client, self.namespace())
    }

    /// `--field-manager`, else `controller` (the binary's name).
    pub fn field_manager(&self, controller: &str) -> String {
        self.field_manager
            .clone()
            .filter(|manager| !manager.is_empty())
            .unwrap_or_else(|| controller.to_owned())
    }
}

/// `Api::namespaced` for `Some(namespace)`, `Api::all` for `None`.
pub fn namespaced_or_all<K>(client: &Client, namespace: Option<&str>) -> Api<K>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope>,
    K::DynamicType: Default,
{
    match namespace {
        Some(namespace) => Api::namespaced(client.clone(), namespace),
        None => Api::all(client.clone()),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Args {
        #[command(flatten)]
        scope: ScopeArgs,
    }

    #[test]
    fn flags_and_defaults() {
        let args = Args::try_parse_from([
            "bin",
            "--zone-label",
            "example.com/rack",
            "--watch-namespace",
            "apps",
        ])
        .unwrap()
        .scope;
        assert_eq!(args.zone_label, "example.com/rack");
        assert_eq!(args.namespace(), Some("apps"));
        if std::env::var_os("ZAC_FIELD_MANAGER").is_none() {
            assert_eq!(args.field_manager("zau-controller"), "zau-controller");
        }
        let named = Args::try_parse_from(["bin", "--field-manager", "mine"])
            .unwrap()
            .scope;
        assert_eq!(named.field_manager("zau-controller"), "mine");
        if std::env::var_os("ZAC_ZONE_LABEL").is_none() {
            assert_eq!(named.zone_label, "topology.kubernetes.io/zone");
        }
    }
}
