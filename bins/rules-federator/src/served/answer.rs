//! An answer written once, as bytes, and sent to every request that shares it (see
//! [`crate::served::flight`]). The merged groups are written on every core, each part dropping its
//! groups as it writes them, so the merged groups and their JSON are never both held whole.

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use serde_json::json;
use tokio::sync::OwnedSemaphorePermit;
use zone_rules::{Alert, RuleDiscovery, RuleGroup, WriteJson};

use crate::merge::{Cores, PoolError};

/// Bytes of JSON per piece of a written answer: small enough that no buffer is copied much as
/// it grows, large enough that a client takes few.
const PIECE: usize = 1 << 20;

/// A status and its JSON body, in pieces.
pub struct Answer {
    pub status: StatusCode,
    /// A success without some backend's rules (its warning says which).
    pub partial: bool,
    pieces: Vec<Bytes>,
    /// The merge turn, given back when the last request sharing the answer has sent it: until
    /// then the answer is memory of this merge.
    _turn: Option<OwnedSemaphorePermit>,
}

impl Answer {
    /// Prometheus's error envelope.
    pub fn error(status: StatusCode, error_type: &str, message: &str) -> Self {
        let body = json!({"status": "error", "errorType": error_type, "error": message});
        Self {
            status,
            partial: false,
            pieces: vec![Bytes::from(body.to_string())],
            _turn: None,
        }
    }

    /// A failed write or pool: 500.
    fn internal(why: &dyn std::fmt::Display) -> Self {
        Self::error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            &why.to_string(),
        )
    }

    /// Prometheus's success envelope of `/api/v1/rules`, written on `cores`.
    pub async fn rules(
        data: RuleDiscovery,
        warnings: &[String],
        cores: &Cores,
        turn: OwnedSemaphorePermit,
    ) -> Self {
        let RuleDiscovery {
            groups,
            group_next_token,
        } = data;
        let mut tail = b"]".to_vec();
        if !group_next_token.is_empty() {
            tail.extend_from_slice(br#","groupNextToken":"#);
            tail.extend_from_slice(json!(group_next_token).to_string().as_bytes());
        }
        tail.push(b'}');
        let head = br#"{"status":"success","data":{"groups":["#;
        let weight = |group: &RuleGroup| group.rules.len() + 1;
        Self::success(head, groups, weight, tail, warnings, cores, turn).await
    }

    /// Prometheus's success envelope of `/api/v1/alerts`, written on `cores`.
    pub async fn alerts(
        alerts: Vec<Alert>,
        warnings: &[String],
        cores: &Cores,
        turn: OwnedSemaphorePermit,
    ) -> Self {
        let head = br#"{"status":"success","data":{"alerts":["#;
        Self::success(head, alerts, |_| 1, b"]}".to_vec(), warnings, cores, turn).await
    }

    /// `head`, `items` as the elements of a JSON list, `tail`, the warnings and the closing
    /// brace.
    async fn success<T: WriteJson + Send + 'static>(
        head: &'static [u8],
        items: Vec<T>,
        weight: impl Fn(&T) -> usize,
        mut tail: Vec<u8>,
        warnings: &[String],
        cores: &Cores,
        turn: OwnedSemaphorePermit,
    ) -> Self {
        if !warnings.is_empty() {
            tail.extend_from_slice(br#","warnings":"#);
            tail.extend_from_slice(json!(warnings).to_string().as_bytes());
        }
        tail.push(b'}');
        let parts = split(items, cores.count(), weight);
        let written =
            futures::future::join_all(parts.into_iter().map(|part| cores.run(move || write(part))))
                .await;
        let mut pieces = vec![Bytes::from_static(head)];
        let mut any = false;
        for part in written {
            let part = match part {
                Ok(part) => part,
                Err(e) => return Self::internal(&e),
            };
            if part.is_empty() {
                continue;
            }
            if any {
                pieces.push(Bytes::from_static(b","));
            }
            any = true;
            pieces.extend(part);
        }
        pieces.push(Bytes::from(tail));
        Self {
            status: StatusCode::OK,
            partial: !warnings.is_empty(),
            pieces,
            _turn: Some(turn),
        }
    }

    /// The whole body (for the tests).
    #[cfg(test)]
    pub fn body(&self) -> Vec<u8> {
        self.pieces.concat()
    }
}

/// The response of `answer`, which it holds until the last piece is sent.
pub fn response(answer: Arc<Answer>) -> Response {
    let status = answer.status;
    let count = answer.pieces.len();
    let pieces = futures::stream::iter(0..count)
        .map(move |i| Ok::<_, std::convert::Infallible>(answer.pieces[i].clone()));
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        Body::from_stream(pieces),
    )
        .into_response()
}

/// `items` in at most `parts` runs of about equal weight, in order.
fn split<T>(items: Vec<T>, parts: usize, weight: impl Fn(&T) -> usize) -> Vec<Vec<T>> {
    let total: usize = items.iter().map(&weight).sum();
    let per_part = total.div_ceil(parts.max(1)).max(1);
    let mut runs = Vec::with_capacity(parts);
    let mut run = Vec::new();
    let mut in_run = 0;
    for item in items {
        in_run += weight(&item);
        run.push(item);
        if in_run >= per_part && runs.len() + 1 < parts {
            runs.push(std::mem::take(&mut run));
            in_run = 0;
        }
    }
    runs.push(run);
    runs
}

/// `items` as comma-separated JSON, in pieces of about [`PIECE`] bytes; each item is dropped
/// once written.
fn write<T: WriteJson>(items: Vec<T>) -> Vec<Bytes> {
    let mut pieces = Vec::new();
    let mut piece = Vec::with_capacity(PIECE);
    for (i, item) in items.into_iter().enumerate() {
        if i > 0 {
            piece.push(b',');
        }
        item.write_json(&mut piece);
        if piece.len() >= PIECE {
            pieces.push(Bytes::from(std::mem::replace(
                &mut piece,
                Vec::with_capacity(PIECE),
            )));
        }
    }
    if !piece.is_empty() {
        pieces.push(Bytes::from(piece));
    }
    pieces
}

impl From<PoolError> for Answer {
    fn from(error: PoolError) -> Self {
        Self::internal(&error)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::Value;

    async fn turn() -> OwnedSemaphorePermit {
        Arc::new(tokio::sync::Semaphore::new(1))
            .acquire_owned()
            .await
            .unwrap()
    }

    /// Written in parts on any number of cores, the envelope is the one serde writes whole.
    #[tokio::test]
    async fn the_envelopes_written_in_parts_are_prometheus_s() {
        let recorded = crate::backends::testing::rules_data();
        let mut groups = Vec::new();
        for copy in 0..7 {
            for group in &recorded.groups {
                let mut group = group.clone();
                group.name = format!("{}-{copy}", group.name);
                groups.push(group);
            }
        }
        let data = RuleDiscovery {
            groups,
            group_next_token: "t".into(),
        };
        for cores in [1, 2, 3, 16] {
            let cores = Cores::new(cores);
            for warnings in [vec![], vec!["endpoint x: down".to_string()]] {
                let answer = Answer::rules(data.clone(), &warnings, &cores, turn().await).await;
                let written: Value = serde_json::from_slice(&answer.body()).unwrap();
                let mut expected =
                    json!({"status": "success", "data": serde_json::to_value(&data).unwrap()});
                if !warnings.is_empty() {
                    expected["warnings"] = json!(warnings);
                }
                assert_eq!(written, expected);
            }
            let empty = Answer::rules(RuleDiscovery::default(), &[], &cores, turn().await).await;
            assert_eq!(
                empty.body(),
                br#"{"status":"success","data":{"groups":[]}}"#
            );
            let none = Answer::alerts(Vec::new(), &[], &cores, turn().await).await;
            assert_eq!(none.body(), br#"{"status":"success","data":{"alerts":[]}}"#);
            let alerts: Vec<Alert> = (0..5)
                .map(|i| Alert {
                    state: "firing".into(),
                    value: i.to_string().into(),
                    ..Alert::default()
                })
                .collect();
            let answer = Answer::alerts(alerts.clone(), &[], &cores, turn().await).await;
            let written: Value = serde_json::from_slice(&answer.body()).unwrap();
            assert_eq!(
                written,
                json!({"status": "success", "data": {"alerts": serde_json::to_value(&alerts).unwrap()}})
            );
        }
        // Large items: many pieces, joined in order.
        let big: Vec<Alert> = (0..40)
            .map(|i| Alert {
                labels: [("i", i.to_string())].into_iter().collect(),
                annotations: [("pad", "p".repeat(100_000))].into_iter().collect(),
                state: "firing".into(),
                ..Alert::default()
            })
            .collect();
        let pieces = write(big.clone());
        assert!(pieces.len() > 2, "{} pieces", pieces.len());
        let joined: Vec<Alert> =
            serde_json::from_slice(&[b"[".as_slice(), &pieces.concat(), b"]"].concat()).unwrap();
        assert_eq!(joined, big);
    }

    #[test]
    fn runs_are_balanced_by_weight_and_keep_the_order() {
        let items: Vec<usize> = (0..10).collect();
        let runs = split(items.clone(), 3, |_| 1);
        assert_eq!(runs.len(), 3);
        assert_eq!(runs.concat(), items);
        let heavy_first = split(vec![100, 1, 1, 1], 2, |w| *w);
        assert_eq!(heavy_first, [vec![100], vec![1, 1, 1]]);
        assert_eq!(split(Vec::<usize>::new(), 4, |_| 1), [Vec::<usize>::new()]);
    }
}
