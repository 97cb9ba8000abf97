#![allow(clippy::unwrap_used)]
use super::*;

fn parsed(text: &str) -> DnsEndpoint {
    parse(text).expect("a DNS endpoint").unwrap()
}

fn refused(text: &str) -> String {
    parse(text)
        .expect("a DNS endpoint")
        .unwrap_err()
        .to_string()
}

#[test]
fn thanos_spellings_are_grpc_and_schemes_are_kept() {
    let srv = parsed("dnssrv+_grpc._tcp.rulers.monitoring.svc");
    assert_eq!(
        (srv.scheme(), srv.name.as_str(), srv.lookup),
        ("grpc://", "_grpc._tcp.rulers.monitoring.svc", Lookup::Srv)
    );
    let https = parsed("dnssrv+https://_web._tcp.prometheus.monitoring.svc/#shard=2");
    assert_eq!(
        (https.scheme(), https.name.as_str(), https.shard.as_str()),
        ("https://", "_web._tcp.prometheus.monitoring.svc", "2")
    );
    let host = parsed("dns+sidecar.monitoring.svc:10901");
    assert_eq!(
        (host.scheme(), host.name.as_str(), host.lookup),
        ("grpc://", "sidecar.monitoring.svc", Lookup::Host(10901))
    );
    let tls = parsed("dns+grpcs://sidecar:10901");
    assert_eq!(tls.scheme(), "grpcs://");
    assert!(parse("grpc://sidecar:10901").is_none(), "not named in DNS");
}

#[test]
fn malformed_names_are_refused_with_the_reason() {
    assert!(refused("dnssrv+grpc://_grpc._tcp.rulers:10901").contains("takes no port"));
    assert!(refused("dns+grpc://sidecar").contains("a port is expected"));
    assert!(refused("dns+grpc://sidecar:0").contains("from 1 to 65535"));
    assert!(refused("dns+grpc://sidecar:http").contains("from 1 to 65535"));
    assert!(refused("dnssrv+ftp://_x._tcp.y").contains("the scheme"));
    assert!(refused("dnssrv+grpc://").contains("a DNS name"));
    assert!(refused("dnssrv+grpc://a/b").contains("without a path"));
    assert!(refused("dnssrv+_grpc._tcp.x#replica=a").contains("only fragment key is shard"));
    assert!(refused(&format!("dnssrv+{}", "a".repeat(254))).contains("1 to 253"));
}

mod lookups {
    use std::net::{Ipv4Addr, SocketAddr};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use hickory_resolver::proto::op::{Message, OpCode, ResponseCode};
    use hickory_resolver::proto::rr::rdata::{A, SRV};
    use hickory_resolver::proto::rr::{Name, RData, Record};
    use tokio::sync::watch;

    use super::super::*;
    use super::parsed;

    /// Records by name (no trailing dot).
    type Zone = Arc<Mutex<Vec<(&'static str, RData)>>>;

    /// A DNS server on 127.0.0.1 (UDP) answering from `zone` (`empty`, e.g. NXDOMAIN, for a
    /// name without records of the type asked); counts the questions it answered.
    async fn dns_server(zone: Zone, asked: Arc<AtomicUsize>, empty: ResponseCode) -> SocketAddr {
        let socket = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let address = socket.local_addr().unwrap();
        tokio::spawn(async move {
            let mut buffer = vec![0; 4096];
            while let Ok((len, from)) = socket.recv_from(&mut buffer).await {
                let Ok(query) = Message::from_vec(&buffer[..len]) else {
                    continue;
                };
                let mut answer = Message::response(query.metadata.id, OpCode::Query);
                answer.metadata.recursion_available = true;
                answer.queries = query.queries.clone();
                for question in &query.queries {
                    let name = question.name.to_ascii();
                    let name = name.trim_end_matches('.');
                    let zone = zone.lock().unwrap();
                    answer.answers.extend(
                        zone.iter()
                            .filter(|(owner, data)| {
                                *owner == name && data.record_type() == question.query_type
                            })
                            .map(|(owner, data)| {
                                Record::from_rdata(
                                    Name::from_ascii(owner).unwrap(),
                                    1,
                                    data.clone(),
                                )
                            }),
                    );
                }
                if answer.answers.is_empty() {
                    answer.metadata.response_code = empty;
                }
                asked.fetch_add(1, Ordering::SeqCst);
                let _ = socket.send_to(&answer.to_vec().unwrap(), from).await;
            }
        });
        address
    }

    fn srv(port: u16, target: &str) -> RData {
        RData::SRV(SRV::new(0, 0, port, Name::from_ascii(target).unwrap()))
    }

    fn a(last: u8) -> RData {
        RData::A(A(Ipv4Addr::new(127, 0, 0, last)))
    }

    fn urls(found: &watch::Receiver<Option<Vec<Endpoint>>>) -> Vec<(String, String)> {
        let found = found.borrow();
        let endpoints = found.as_deref().unwrap_or_default();
        endpoints
            .iter()
            .map(|e| (e.url.clone(), e.shard.clone()))
            .collect()
    }

    /// Waits (up to 10 s) until the backends sent on `seen` number `count`.
    async fn wait_for_count(seen: &mut watch::Receiver<Option<Vec<Endpoint>>>, count: usize) {
        let counted = seen.wait_for(|found| found.as_ref().is_some_and(|f| f.len() == count));
        tokio::time::timeout(Duration::from_secs(10), counted)
            .await
            .unwrap_or_else(|_| panic!("timed out waiting for {count} backends"))
            .unwrap();
    }

    #[tokio::test]
    async fn srv_targets_and_host_addresses_become_backends_and_follow_the_records() {
        let zone: Zone = Arc::new(Mutex::new(vec![
            ("_grpc._tcp.rulers.test", srv(10901, "ruler-0.rulers.test.")),
            ("_grpc._tcp.rulers.test", srv(10902, "ruler-1.rulers.test.")),
            ("ruler-0.rulers.test", a(1)),
            ("ruler-1.rulers.test", a(2)),
            ("prom.test", a(3)),
            ("prom.test", a(4)),
        ]));
        let asked = Arc::new(AtomicUsize::new(0));
        let server = dns_server(zone.clone(), asked.clone(), ResponseCode::NXDomain).await;
        let names = vec![
            parsed("dnssrv+_grpc._tcp.rulers.test#shard=1"),
            parsed("dns+http://prom.test:9090"),
        ];
        let settings = DnsSettings {
            server: Some(server),
            interval: Duration::from_millis(50),
        };
        let (found, mut seen) = watch::channel(None);
        tokio::spawn(keep_resolved(names, &settings, found).unwrap());
        seen.wait_for(Option::is_some).await.unwrap();
        let one = |url: &str| (url.to_string(), "1".to_string());
        let unsharded = |url: &str| (url.to_string(), String::new());
        assert_eq!(
            urls(&seen),
            vec![
                one("grpc://127.0.0.1:10901"),
                one("grpc://127.0.0.2:10902"),
                unsharded("http://127.0.0.3:9090"),
                unsharded("http://127.0.0.4:9090"),
            ]
        );
        // ruler-1 goes away: the next round drops it.
        zone.lock().unwrap().retain(|(owner, data)| {
            *owner != "ruler-1.rulers.test" && !matches!(data, RData::SRV(srv) if srv.port == 10902)
        });
        wait_for_count(&mut seen, 3).await;
        assert_eq!(urls(&seen)[0], one("grpc://127.0.0.1:10901"));
        // The Service is gone (NXDOMAIN): its name has no backends.
        zone.lock()
            .unwrap()
            .retain(|(owner, _)| !owner.contains("rulers"));
        wait_for_count(&mut seen, 2).await;
    }

    #[tokio::test]
    async fn a_lookup_without_an_answer_keeps_the_backends_found_before() {
        let zone: Zone = Arc::new(Mutex::new(vec![("prom.test", a(3))]));
        let asked = Arc::new(AtomicUsize::new(0));
        let server = dns_server(zone, asked.clone(), ResponseCode::NXDomain).await;
        let names = vec![parsed("dns+http://prom.test:9090")];
        let (found, mut seen) = watch::channel(None);
        let settings = DnsSettings {
            server: Some(server),
            interval: Duration::from_secs(3600),
        };
        tokio::spawn(keep_resolved(names.clone(), &settings, found).unwrap());
        seen.wait_for(Option::is_some).await.unwrap();
        // A round against a server that fails every question (SERVFAIL).
        let failing = dns_server(Arc::default(), asked.clone(), ResponseCode::ServFail).await;
        let resolver = resolver(Some(failing)).unwrap();
        let before = vec![seen.borrow().clone().unwrap()];
        let mut kept = before.clone();
        let answered = asked.load(Ordering::SeqCst);
        refresh(&resolver, &names, &mut kept).await;
        assert!(
            asked.load(Ordering::SeqCst) > answered,
            "the failing server was asked"
        );
        assert_eq!(kept, before, "the backends found before are kept");
        assert_eq!(kept[0].len(), 1);
    }
}
