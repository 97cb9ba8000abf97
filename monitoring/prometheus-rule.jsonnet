// The mixin's alerts and recording rules as one PrometheusRule object (monitoring.coreos.com/v1),
// which a ShardedPrometheus or a prometheus-operator Prometheus selects by its labels.
// `config` overrides settings of config.libsonnet:
//   jsonnet --tla-code 'config={zauPausedTooLongFor: "30m"}' monitoring/prometheus-rule.jsonnet
function(config={})
  local mixin = (import 'mixin.libsonnet') + { _config+:: config };
  {
    apiVersion: 'monitoring.coreos.com/v1',
    kind: 'PrometheusRule',
    metadata: {
      name: 'zone-aware-controllers',
      labels: {
        'app.kubernetes.io/part-of': 'zone-aware-controllers',
        'app.kubernetes.io/component': 'monitoring',
      },
    },
    spec: {
      groups: mixin.prometheusAlerts.groups + mixin.prometheusRules.groups,
    },
  }
