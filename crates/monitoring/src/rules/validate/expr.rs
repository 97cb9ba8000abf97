//! PromQL as Prometheus parses a rule's `expr`, with Prometheus's default feature flags (the
//! ones prometheus-operator validates with): experimental functions and the experimental
//! `limitk`/`limit_ratio` aggregations are refused, as Prometheus refuses them unless started
//! with `--enable-feature=promql-experimental-functions`.

use promql_parser::parser::{self, Expr};
use promql_parser::util::{ExprVisitor, walk_expr};

/// Ok, or why Prometheus would refuse `text` as a rule expression.
pub(super) fn check(text: &str) -> Result<(), String> {
    if text.is_empty() {
        return Err("must be set".to_string());
    }
    zone_topology::promql_depth::check(text, zone_topology::promql_depth::MAX_DEPTH)?;
    let expr = parser::parse(text)?;
    walk_expr(&mut Experimental, &expr).map(|_| ())
}

/// Stops at the first experimental function or aggregation.
struct Experimental;

impl ExprVisitor for Experimental {
    type Error = String;

    fn pre_visit(&mut self, expr: &Expr) -> Result<bool, String> {
        let experimental = match expr {
            Expr::Call(call) if call.func.experimental => Some(call.func.name.to_string()),
            Expr::Aggregate(aggregate)
                if matches!(aggregate.op.to_string().as_str(), "limitk" | "limit_ratio") =>
            {
                Some(aggregate.op.to_string())
            }
            _ => None,
        };
        match experimental {
            Some(name) => Err(format!(
                "{name}() is experimental and not enabled (Prometheus needs \
                 --enable-feature=promql-experimental-functions)"
            )),
            None => Ok(true),
        }
    }
}
