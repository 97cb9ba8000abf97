// Recording rules: the aggregates the dashboards read, precomputed once per evaluation.
{
  prometheusRules+:: {
    local c = $._config,
    groups+: [
      {
        name: 'zone-aware-recording',
        rules: [
          {
            record: 'job_controller:zone_aware_reconciliations:rate5m',
            expr: 'sum by (job, controller) (rate(zone_aware_reconciliations_total{%(controllersSelector)s}[5m]))' % c,
          },
          {
            record: 'job_controller:zone_aware_reconcile_failures:rate5m',
            expr: 'sum by (job, controller, reason) (rate(zone_aware_reconcile_failures_total{%(controllersSelector)s}[5m]))' % c,
          },
          {
            record: 'result_reason:zone_aware_zdb_webhook_decisions:rate5m',
            expr: 'sum by (result, reason) (rate(zone_aware_zdb_webhook_decisions_total{%(zdbSelector)s}[5m]))' % c,
          },
          {
            record: 'job:zone_aware_zdb_webhook_duration_seconds:p99_rate5m',
            expr: 'histogram_quantile(0.99, sum by (job, le) (rate(zone_aware_zdb_webhook_duration_seconds_bucket{%(zdbSelector)s}[5m])))' % c,
          },
          {
            record: 'namespace_name_zone:zone_aware_zau_removed_pods:rate5m',
            expr: 'sum by (namespace, name, zone) (rate(zone_aware_zau_removed_pods_total{%(zauSelector)s}[5m]))' % c,
          },
          {
            record: 'handler:zone_aware_federator_request_duration_seconds:p99_rate5m',
            expr: 'histogram_quantile(0.99, sum by (handler, le) (rate(zone_aware_federator_request_duration_seconds_bucket{%(federatorSelector)s}[5m])))' % c,
          },
          {
            record: 'endpoint:zone_aware_federator_endpoint_errors:rate5m',
            expr: 'sum by (endpoint, reason) (rate(zone_aware_federator_endpoint_errors_total{%(federatorSelector)s}[5m]))' % c,
          },
        ],
      },
    ],
  },
}
