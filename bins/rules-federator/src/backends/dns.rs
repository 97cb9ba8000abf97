//! Backends named in DNS, as Thanos names its endpoints: `dnssrv+<scheme>://<name>` asks for
//! the SRV records of `<name>` and makes a backend of each target's addresses at the record's
//! port (a headless Service's `_<port>._tcp.<service>.<namespace>.svc`);
//! `dns+<scheme>://<host>:<port>` makes one of each address of `<host>`. Thanos's own spellings,
//! `dnssrv+_grpc._tcp.<name>` and `dns+<host>:<port>`, are gRPC backends. The names are looked
//! up again every `--dns-sd-interval`; a name whose lookup fails keeps the backends it had.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use hickory_resolver::TokioResolver;
use hickory_resolver::config::{NameServerConfig, ResolverConfig};
use hickory_resolver::net::runtime::TokioRuntimeProvider;
use hickory_resolver::proto::rr::RData;
use tokio::sync::watch;

use crate::backends::endpoints::{Endpoint, EndpointError};

/// At most this many backends come from one name: a bound on what a DNS answer makes the
/// federator dial.
pub const MAX_BACKENDS_PER_NAME: usize = 1_000;

/// How a name is looked up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lookup {
    /// SRV records, then the addresses of each target.
    Srv,
    /// The addresses of the host, each at this port.
    Host(u16),
}

/// One `--endpoint` named in DNS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DnsEndpoint {
    /// As given, for messages.
    pub text: String,
    /// `grpc://`, `http://`, ...
    scheme: String,
    name: String,
    lookup: Lookup,
    /// The fragment's shard: every backend of the name is a replica of it.
    shard: String,
}

impl DnsEndpoint {
    /// How its backends are asked: `grpc://`, `http://`, ...
    pub fn scheme(&self) -> &str {
        &self.scheme
    }
}

/// The schemes a DNS endpoint may ask in.
const SCHEMES: [&str; 4] = ["http://", "https://", "grpc://", "grpcs://"];

/// `Some` when `text` names its backends in DNS (`dns+`, `dnssrv+`), with what it says or why it
/// cannot be used; `None` for any other endpoint.
pub fn parse(text: &str) -> Option<Result<DnsEndpoint, EndpointError>> {
    let (lookup, rest) = if let Some(rest) = text.strip_prefix("dnssrv+") {
        (Lookup::Srv, rest)
    } else if let Some(rest) = text.strip_prefix("dns+") {
        (Lookup::Host(0), rest)
    } else {
        return None;
    };
    Some(parse_rest(text, lookup, rest))
}

fn parse_rest(text: &str, lookup: Lookup, rest: &str) -> Result<DnsEndpoint, EndpointError> {
    let invalid = |why: &str| EndpointError::Dns(text.to_string(), why.to_string());
    let (rest, fragment) = rest.split_once('#').unwrap_or((rest, ""));
    // Without a scheme, as Thanos writes them: gRPC.
    let (scheme, target) = SCHEMES
        .iter()
        .find_map(|scheme| rest.strip_prefix(scheme).map(|target| (*scheme, target)))
        .unwrap_or(("grpc://", rest));
    if target.contains("://") {
        return Err(invalid("the scheme must be http, https, grpc or grpcs"));
    }
    let target = target.trim_end_matches('/');
    if target.is_empty() || target.contains('/') {
        return Err(invalid("a DNS name is expected, without a path"));
    }
    let (name, lookup) = match lookup {
        Lookup::Srv if target.contains(':') => {
            return Err(invalid("an SRV name takes no port: the records carry it"));
        }
        Lookup::Srv => (target.to_string(), Lookup::Srv),
        Lookup::Host(_) => {
            let (host, port) = target
                .rsplit_once(':')
                .ok_or_else(|| invalid("a port is expected: dns+<scheme>://<host>:<port>"))?;
            let port = port
                .parse::<u16>()
                .ok()
                .filter(|port| *port != 0)
                .ok_or_else(|| invalid("the port must be a number from 1 to 65535"))?;
            (host.to_string(), Lookup::Host(port))
        }
    };
    if name.is_empty() || name.len() > 253 {
        return Err(invalid("a DNS name is 1 to 253 characters"));
    }
    let mut shard = String::new();
    for (key, value) in form_urlencoded::parse(fragment.as_bytes()) {
        match key.as_ref() {
            "shard" => shard = value.into_owned(),
            _ => {
                return Err(invalid(
                    "the only fragment key is shard: each address is a replica of its own",
                ));
            }
        }
    }
    Ok(DnsEndpoint {
        text: text.to_string(),
        scheme: scheme.to_string(),
        name,
        lookup,
        shard,
    })
}

/// How the names are looked up: the resolver and how often.
pub struct DnsSettings {
    /// The DNS server to ask instead of those of `/etc/resolv.conf`.
    pub server: Option<SocketAddr>,
    pub interval: Duration,
}

/// Looks every name up now and every `settings.interval`, forever (run it as a task), and
/// sends their backends on `found` after each round. A name whose lookup fails keeps the
/// backends it had.
pub fn keep_resolved(
    names: Vec<DnsEndpoint>,
    settings: &DnsSettings,
    found: watch::Sender<Option<Vec<Endpoint>>>,
) -> Result<impl Future<Output = ()> + Send + 'static, String> {
    let resolver = resolver(settings.server)?;
    let interval = settings.interval;
    Ok(async move {
        let mut resolved = vec![Vec::new(); names.len()];
        loop {
            refresh(&resolver, &names, &mut resolved).await;
            found.send_replace(Some(resolved.iter().flatten().cloned().collect()));
            tokio::time::sleep(interval).await;
        }
    })
}

/// One round: every name looked up (together) into its place in `resolved`.
async fn refresh(resolver: &TokioResolver, names: &[DnsEndpoint], resolved: &mut [Vec<Endpoint>]) {
    let results = futures::future::join_all(names.iter().map(|name| resolve(resolver, name))).await;
    for ((name, result), kept) in names.iter().zip(results).zip(resolved.iter_mut()) {
        match result {
            Ok(endpoints) => {
                if endpoints != *kept {
                    tracing::info!(endpoint = %name.text, backends = endpoints.len(), "DNS endpoint looked up: its backends changed");
                }
                *kept = endpoints;
            }
            Err(error) => {
                tracing::warn!(endpoint = %name.text, error = %error, kept = kept.len(), "DNS lookup failed; the backends found before are kept");
            }
        }
    }
}

/// A resolver asking `server`, or those of the system's configuration.
fn resolver(server: Option<SocketAddr>) -> Result<TokioResolver, String> {
    let provider = TokioRuntimeProvider::default();
    let mut builder = match server {
        Some(server) => {
            let mut name_server = NameServerConfig::udp_and_tcp(server.ip());
            for connection in &mut name_server.connections {
                connection.port = server.port();
            }
            let config = ResolverConfig::from_name_servers(vec![name_server]);
            TokioResolver::builder_with_config(config, provider)
        }
        None => TokioResolver::builder(provider)
            .map_err(|error| format!("reading the system's DNS configuration: {error}"))?,
    };
    // Each round asks anew: the interval is the cache.
    builder.options_mut().cache_size = 0;
    builder
        .build()
        .map_err(|error| format!("building the DNS resolver: {error}"))
}

/// The backends `name` stands for now. A name that does not exist or has no records of the
/// kind asked has none (the Service is gone, or has no ready pod); a lookup that did not get an
/// answer is an error.
async fn resolve(resolver: &TokioResolver, name: &DnsEndpoint) -> Result<Vec<Endpoint>, String> {
    let mut addresses: Vec<SocketAddr> = Vec::new();
    match name.lookup {
        Lookup::Host(port) => {
            let ips = addresses_of(resolver, &name.name).await?;
            addresses.extend(ips.into_iter().map(|ip| SocketAddr::new(ip, port)));
        }
        Lookup::Srv => {
            let records = match resolver.srv_lookup(name.name.as_str()).await {
                Ok(records) => records,
                Err(error) if error.is_no_records_found() || error.is_nx_domain() => {
                    return Ok(Vec::new());
                }
                Err(error) => return Err(error.to_string()),
            };
            let targets: Vec<(String, u16)> = records
                .answers()
                .iter()
                .filter_map(|record| match &record.data {
                    RData::SRV(srv) => Some((srv.target.to_ascii(), srv.port)),
                    _ => None,
                })
                .take(MAX_BACKENDS_PER_NAME)
                .collect();
            for (target, port) in targets {
                let ips = addresses_of(resolver, &target)
                    .await
                    .map_err(|e| format!("{target}: {e}"))?;
                addresses.extend(ips.into_iter().map(|ip| SocketAddr::new(ip, port)));
            }
        }
    }
    addresses.sort_unstable();
    addresses.dedup();
    addresses.truncate(MAX_BACKENDS_PER_NAME);
    Ok(addresses
        .into_iter()
        .map(|address| endpoint(name, address))
        .collect())
}

/// The addresses of `host` (none when it has none).
async fn addresses_of(resolver: &TokioResolver, host: &str) -> Result<Vec<IpAddr>, String> {
    match resolver.lookup_ip(host).await {
        Ok(ips) => Ok(ips.iter().collect()),
        Err(error) if error.is_no_records_found() || error.is_nx_domain() => Ok(Vec::new()),
        Err(error) => Err(error.to_string()),
    }
}

/// The backend at `address` of `name`.
fn endpoint(name: &DnsEndpoint, address: SocketAddr) -> Endpoint {
    let host = match address.ip() {
        IpAddr::V4(ip) => ip.to_string(),
        IpAddr::V6(ip) => format!("[{ip}]"),
    };
    let url = format!("{}{host}:{}", name.scheme, address.port());
    Endpoint {
        shard: name.shard.clone(),
        replica: url.clone(),
        url,
        zone: String::new(),
    }
}

#[cfg(test)]
mod tests;
