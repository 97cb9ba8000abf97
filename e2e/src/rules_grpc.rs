//! Fake Thanos Rules endpoints for measurements (`make perf`): each answers every
//! `thanos.Rules/Rules` call with the same stream of messages, encoded once when it starts, so
//! the side measured pays for decoding them and this process does not pay for encoding them on
//! the cores it shares; and `thanos.info.Info/Info` says it serves rules, as a sidecar does, so
//! a Thanos Querier takes it as an endpoint too. The request's filters are ignored.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use tonic::codegen::{Body, BoxFuture, Service, StdError, http};
use tonic::server::{NamedService, ServerStreamingService};
use tonic::{Request, Response, Status};
use zone_rules::RuleGroup;
use zone_thanos::prost::Message;
use zone_thanos::raw::RawCodec;
use zone_thanos::thanos::info::info_server::{Info, InfoServer};
use zone_thanos::thanos::info::{InfoRequest, InfoResponse, RulesInfo};
use zone_thanos::thanos::{LabelSet, RulesResponse, rules_response};

/// `groups` as the `RulesResponse` messages of one Rules stream (one group each, as Thanos
/// streams them), encoded.
pub fn encode(groups: &[RuleGroup]) -> Vec<Bytes> {
    groups
        .iter()
        .map(|group| {
            let message = RulesResponse {
                result: Some(rules_response::Result::Group(group.into())),
            };
            Bytes::from(message.encode_to_vec())
        })
        .collect()
}

/// Starts an endpoint on 127.0.0.1 that streams `messages` (see [`encode`]) to every Rules
/// call and advertises `labels` (its external labels) in Info; its address.
pub async fn serve(messages: Arc<Vec<Bytes>>, labels: LabelSet) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("binding a port on 127.0.0.1");
    let address = listener.local_addr().expect("a bound listener's address");
    let router = tonic::transport::Server::builder()
        .add_service(PreEncoded(messages))
        .add_service(InfoServer::new(Advertised(labels)));
    let incoming = tonic::transport::server::TcpIncoming::from(listener);
    tokio::spawn(async move {
        let _ = router.serve_with_incoming(incoming).await;
    });
    address
}

/// A channel to the gRPC server at `address`, over TLS with `config` (its roots) for
/// `server_name`, HTTP/2 negotiated by ALPN; connected now.
pub async fn tls_channel(
    address: SocketAddr,
    server_name: &str,
    mut config: rustls::ClientConfig,
) -> Result<tonic::transport::Channel, String> {
    config.alpn_protocols = vec![b"h2".to_vec()];
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let name = rustls::pki_types::ServerName::try_from(server_name.to_string())
        .map_err(|e| format!("{server_name}: {e}"))?;
    let connect = tower::service_fn(move |_: tonic::transport::Uri| {
        let (connector, name) = (connector.clone(), name.clone());
        async move {
            let tcp = tokio::net::TcpStream::connect(address).await?;
            let tls = connector.connect(name, tcp).await?;
            Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(tls))
        }
    });
    tonic::transport::Endpoint::from_static("http://deployed.invalid")
        .connect_with_connector(connect)
        .await
        .map_err(|e| {
            format!(
                "connecting to {address}: {e} ({:?})",
                std::error::Error::source(&e)
            )
        })
}

/// The Rules service: every call gets the same messages.
#[derive(Clone)]
struct PreEncoded(Arc<Vec<Bytes>>);

impl NamedService for PreEncoded {
    const NAME: &'static str = "thanos.Rules";
}

impl ServerStreamingService<Bytes> for PreEncoded {
    type Response = Bytes;
    type ResponseStream = futures::stream::Iter<std::vec::IntoIter<Result<Bytes, Status>>>;
    type Future = std::future::Ready<Result<Response<Self::ResponseStream>, Status>>;

    fn call(&mut self, _: Request<Bytes>) -> Self::Future {
        let messages: Vec<_> = self.0.iter().cloned().map(Ok).collect();
        std::future::ready(Ok(Response::new(futures::stream::iter(messages))))
    }
}

impl<B> Service<http::Request<B>> for PreEncoded
where
    B: Body + Send + 'static,
    B::Error: Into<StdError> + Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFuture<Self::Response, Infallible>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let service = self.clone();
        Box::pin(async move {
            Ok(tonic::server::Grpc::new(RawCodec::<Bytes>::default())
                .server_streaming(service, request)
                .await)
        })
    }
}

/// The Info service of a sidecar with `labels` as its external labels.
struct Advertised(LabelSet);

#[tonic::async_trait]
impl Info for Advertised {
    async fn info(&self, _: Request<InfoRequest>) -> Result<Response<InfoResponse>, Status> {
        Ok(Response::new(InfoResponse {
            component_type: "sidecar".to_string(),
            label_sets: vec![self.0.clone()],
            rules: Some(RulesInfo {}),
            ..InfoResponse::default()
        }))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use zone_thanos::thanos::rules_client::RulesClient;
    use zone_thanos::thanos::{Label, RulesRequest};

    /// The fake streams the groups it was given, as the generated client reads them, and says in
    /// Info that it serves rules with its labels.
    #[tokio::test]
    async fn the_fake_streams_its_groups_and_advertises_rules() {
        let groups: Vec<RuleGroup> = serde_json::from_str(
            r#"[{"name": "a", "file": "f.yaml", "rules": [], "interval": 30},
                {"name": "b", "file": "f.yaml", "rules": [], "interval": 60}]"#,
        )
        .unwrap();
        let label = Label {
            name: "shard".into(),
            value: "3".into(),
        };
        let labels = LabelSet {
            labels: vec![label],
        };
        let address = serve(Arc::new(encode(&groups)), labels.clone()).await;
        let url = format!("http://{address}");
        let mut client = RulesClient::connect(url.clone()).await.unwrap();
        let mut stream = client
            .rules(RulesRequest::default())
            .await
            .unwrap()
            .into_inner();
        let mut names = Vec::new();
        while let Some(message) = stream.message().await.unwrap() {
            if let Some(rules_response::Result::Group(group)) = message.result {
                names.push(group.name);
            }
        }
        assert_eq!(names, ["a", "b"]);
        let mut info = zone_thanos::thanos::info::info_client::InfoClient::connect(url)
            .await
            .unwrap();
        let answer = info
            .info(InfoRequest::default())
            .await
            .unwrap()
            .into_inner();
        assert!(answer.rules.is_some());
        assert_eq!(answer.label_sets, [labels]);
    }
}
