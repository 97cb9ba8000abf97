//! Backends spoken to over Thanos's gRPC Rules API (`--endpoint grpc://host:port`): Thanos
//! sidecars, Rulers and Queriers, and other federators. Their groups join the same merge as the
//! HTTP backends' (a group read here equals the same group read over HTTP); their failures are
//! named in the warnings the same way.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use std::time::Duration;

use bytes::Bytes;
use tonic::transport::Channel;
use zone_operator::prom_api::ApiError;
use zone_operator::prom_api::tls::ClientTls;
use zone_rules::RuleDiscovery;
use zone_thanos::raw::RawCodec;
use zone_thanos::thanos::rules_request::Type;
use zone_thanos::thanos::{PartialResponseStrategy, RulesRequest};
use zone_thanos::wire::{self, Response};

/// The scheme of a gRPC backend's URL.
pub const SCHEME: &str = "grpc://";
/// The scheme of a gRPC backend dialled over TLS, verified and with the client certificate as
/// `https://` backends are (`--backend-ca-file`, `--backend-server-name`, `--backend-cert-file`).
pub const TLS_SCHEME: &str = "grpcs://";

/// The address of a gRPC backend's URL, `host:port`; `None` when the URL is not a gRPC one.
pub fn address(url: &str) -> Option<&str> {
    url.strip_prefix(SCHEME)
        .or_else(|| url.strip_prefix(TLS_SCHEME))
        .filter(|address| !address.is_empty() && !address.contains('/'))
}

/// What one gRPC backend gave: its groups, and the warnings it streamed (a federating backend's
/// own failed endpoints).
#[derive(Debug, Default, PartialEq)]
pub struct GrpcAnswer {
    pub data: RuleDiscovery,
    pub warnings: Vec<String>,
}

/// The HTTP API's query string (the filters the backends are sent) as a Rules request. A
/// backend that federates others is asked to warn rather than fail: this side decides what a
/// failure makes of the answer.
pub fn request(query: &str) -> RulesRequest {
    let mut request = RulesRequest {
        partial_response_strategy: PartialResponseStrategy::Warn.into(),
        ..RulesRequest::default()
    };
    for (key, value) in form_urlencoded::parse(query.as_bytes()) {
        let value = value.into_owned();
        match key.as_ref() {
            "type" if value == "alert" => request.r#type = Type::Alert.into(),
            "type" if value == "record" => request.r#type = Type::Record.into(),
            "match[]" => request.matcher_string.push(value),
            "rule_name[]" => request.rule_name.push(value),
            "rule_group[]" => request.rule_group.push(value),
            "file[]" => request.file.push(value),
            _ => {}
        }
    }
    request
}

/// One channel per backend, kept between requests (HTTP/2: one connection carries them all).
#[derive(Clone)]
pub struct Channels {
    channels: Arc<Mutex<HashMap<String, Channel>>>,
    tls: ClientTls,
    connect_timeout: Duration,
}

impl Channels {
    /// Channels dialled through `tls` (`grpcs://`; `grpc://` in plain).
    pub fn new(tls: ClientTls, connect_timeout: Duration) -> Self {
        Self {
            channels: Arc::default(),
            tls,
            connect_timeout,
        }
    }

    /// Drops the channels of backends no longer among `urls` (discovered pods come and go
    /// with new IPs): the map holds at most the current backends.
    pub fn keep_only<'a>(&self, urls: impl IntoIterator<Item = &'a str>) {
        let current: std::collections::HashSet<&str> = urls.into_iter().collect();
        let mut channels = self.channels.lock().unwrap_or_else(PoisonError::into_inner);
        channels.retain(|url, _| current.contains(url.as_str()));
    }

    /// The channel to `url`, made on first use; it connects when a call needs it.
    fn get(&self, url: &str) -> Result<Channel, ApiError> {
        let mut channels = self.channels.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(channel) = channels.get(url) {
            return Ok(channel.clone());
        }
        let address = address(url).ok_or_else(|| ApiError::Url(url.to_string()))?;
        let scheme = if url.starts_with(TLS_SCHEME) {
            "https"
        } else {
            "http"
        };
        let channel = Channel::from_shared(format!("{scheme}://{address}"))
            .map_err(|_| ApiError::Url(url.to_string()))?
            .connect_with_connector_lazy(self.tls.grpc_connector(self.connect_timeout));
        channels.insert(url.to_string(), channel.clone());
        Ok(channel)
    }

    /// The messages `url` streams for `request`, as they came (decoded on a core when merged,
    /// see [`RawAnswer::decode`], as HTTP answers stay compressed until then), read until the
    /// stream ends; cut once they pass `cap` bytes (as an HTTP answer past its uncompressed
    /// cap), so a broken or hostile backend costs at most that.
    pub async fn rules_raw(
        &self,
        url: &str,
        request: RulesRequest,
        cap: u64,
    ) -> Result<RawAnswer, ApiError> {
        let limit = usize::try_from(cap).unwrap_or(usize::MAX);
        let mut grpc = tonic::client::Grpc::new(self.get(url)?).max_decoding_message_size(limit);
        grpc.ready()
            .await
            .map_err(|error| status(tonic::Status::from_error(error.into())))?;
        let path = tonic::codegen::http::uri::PathAndQuery::from_static(RULES_PATH);
        let mut stream = grpc
            .server_streaming(tonic::Request::new(request), path, RawCodec::default())
            .await
            .map_err(status)?
            .into_inner();
        let (mut answer, mut read) = (RawAnswer::default(), 0u64);
        while let Some(message) = stream.message().await.map_err(status)? {
            read += message.len() as u64;
            if read > cap {
                return Err(ApiError::TooLarge {
                    what: "uncompressed",
                    cap,
                });
            }
            answer.messages.push(message);
        }
        Ok(answer)
    }

    /// [`rules_raw`](Self::rules_raw), decoded.
    #[cfg(test)]
    pub async fn rules(
        &self,
        url: &str,
        request: RulesRequest,
        cap: u64,
    ) -> Result<GrpcAnswer, ApiError> {
        self.rules_raw(url, request, cap).await?.decode()
    }
}

/// The Rules method.
const RULES_PATH: &str = "/thanos.Rules/Rules";

/// What one gRPC backend streamed: its messages' bytes.
#[derive(Debug, Default)]
pub struct RawAnswer {
    pub messages: Vec<Bytes>,
}

impl RawAnswer {
    /// The groups and warnings of the messages, decoded straight into the merge's model
    /// ([`zone_thanos::wire`]); a message that does not parse fails the backend's answer.
    pub fn decode(self) -> Result<GrpcAnswer, ApiError> {
        let mut answer = GrpcAnswer::default();
        for message in &self.messages {
            match wire::decode_response(message) {
                Ok(Response::Group(group)) => answer.data.groups.push(group),
                Ok(Response::Warning(warning)) => answer.warnings.push(warning),
                Ok(Response::Empty) => {}
                Err(error) => return Err(ApiError::BadJson(error.to_string())),
            }
        }
        Ok(answer)
    }
}

/// A failed call as the HTTP backends' failures are named: no connection (the channel's own
/// failure, with its causes: a refused handshake says why), or the status the backend answered.
fn status(status: tonic::Status) -> ApiError {
    // A status the backend sent has no cause; one the channel made of its own failure has.
    let transport = std::error::Error::source(&status).is_some()
        || ["connect", "transport"]
            .iter()
            .any(|word| status.message().contains(word));
    if !transport {
        return ApiError::ErrorAnswer(format!("gRPC {:?}: {}", status.code(), status.message()));
    }
    let mut message = status.message().to_string();
    let mut cause = std::error::Error::source(&status);
    // A few levels: the causes' own messages repeat past them.
    for _ in 0..6 {
        let Some(error) = cause else { break };
        message.push_str(&format!(": {error}"));
        cause = error.source();
    }
    ApiError::Connect(message)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use zone_rules::Source;

    use super::*;
    use crate::backends::testing::{
        FakePrometheus, api, endpoint, options, rules_data, serving_rules, sidecar,
    };
    use crate::cli::PartialResponse;

    /// gRPC and HTTP backends in one merge: a replica read over gRPC collapses with its twin
    /// read over HTTP, a shard read only over gRPC is there; a gRPC backend that is gone is
    /// named in a warning, and one that warns of its own is quoted.
    #[tokio::test]
    async fn grpc_backends_merge_with_http_ones() {
        let http = serving_rules(true).await;
        let twin = sidecar(&[], None).await;
        let other_shard = sidecar(&["endpoint x: it is down"], None).await;
        let gone = format!("{SCHEME}{}", FakePrometheus::gone_address());
        let (api, _) = api(
            vec![
                endpoint(&http.url, "0", "a"),
                endpoint(&twin, "0", "b"),
                endpoint(&other_shard, "1", "a"),
                endpoint(&gone, "1", "b"),
            ],
            PartialResponse::Warn,
        );
        let (data, warnings) = api.all_rules().await;
        let expected = zone_rules::merge(
            &[("0", &http.url), ("1", &other_shard)].map(|(shard, name)| Source {
                shard: shard.to_string(),
                name: name.to_string(),
                groups: rules_data().groups,
            }),
            &options(),
        );
        assert_eq!(data.groups, expected);
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        assert!(
            warnings[0].starts_with(&format!("endpoint {gone}: cannot connect")),
            "{warnings:?}"
        );
        assert_eq!(
            warnings[1],
            format!("endpoint {other_shard}: endpoint x: it is down")
        );
    }

    /// A status the backend answered is its answer (named with its code); the channel's own
    /// failure is a connection that failed.
    #[test]
    fn statuses_are_named_as_http_failures_are() {
        assert_eq!(
            status(tonic::Status::invalid_argument("bad matcher")),
            ApiError::ErrorAnswer("gRPC InvalidArgument: bad matcher".to_string())
        );
        assert_eq!(
            status(tonic::Status::unavailable("2 of 3 backends failed")),
            ApiError::ErrorAnswer("gRPC Unavailable: 2 of 3 backends failed".to_string())
        );
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        let failed = status(tonic::Status::from_error(Box::new(io)));
        assert!(
            matches!(&failed, ApiError::Connect(message) if message.contains("refused")),
            "{failed:?}"
        );
    }

    /// The channel map follows the endpoints: a backend gone is dropped, the others kept.
    #[tokio::test]
    async fn channels_of_gone_backends_are_dropped() {
        let tls = crate::backends::connector::BackendTls::load(&Default::default()).unwrap();
        let channels = Channels::new(tls.client().clone(), Duration::from_secs(1));
        let (a, b) = ("grpc://127.0.0.1:1", "grpc://127.0.0.1:2");
        channels.get(a).unwrap();
        channels.get(b).unwrap();
        channels.keep_only([endpoint(a, "0", "a").url.as_str()]);
        let kept: Vec<String> = channels.channels.lock().unwrap().keys().cloned().collect();
        assert_eq!(kept, [a]);
    }

    /// `grpc://host:port` is an endpoint; a path or nothing after the scheme is not.
    #[test]
    fn grpc_urls_are_endpoints() {
        use crate::backends::endpoints::parse_static;
        let parsed = parse_static("grpc://ruler:10901#shard=0&replica=r0").unwrap();
        assert_eq!(
            (parsed.url.as_str(), parsed.shard.as_str()),
            ("grpc://ruler:10901", "0")
        );
        assert!(parse_static("grpcs://ruler:10901").is_ok());
        assert!(parse_static("grpc://").is_err());
        assert!(parse_static("grpc://ruler:10901/api").is_err());
    }

    /// Every filter the backends are sent becomes the request's field; the page and
    /// `exclude_alerts` (which the wire has no field for) stay here.
    #[test]
    fn the_backend_query_is_the_request() {
        let request = request(
            "type=alert&match%5B%5D=%7Bteam%3D%22a%22%7D&rule_name%5B%5D=A&rule_group%5B%5D=g&file%5B%5D=f&exclude_alerts=true",
        );
        assert_eq!(request.r#type(), Type::Alert);
        assert_eq!(request.matcher_string, [r#"{team="a"}"#]);
        assert_eq!(request.rule_name, ["A"]);
        assert_eq!(request.rule_group, ["g"]);
        assert_eq!(request.file, ["f"]);
        assert_eq!(
            request.partial_response_strategy(),
            PartialResponseStrategy::Warn
        );
        assert_eq!(super::request("").r#type(), Type::All);
    }
}
