// The zone-aware-controllers monitoring mixin: `prometheusAlerts` and `prometheusRules`
// (Prometheus rule groups) and `grafanaDashboards` (file name -> dashboard JSON).
// `make mixin` renders it (render.jsonnet); docs/monitoring.md explains its use.
(import 'config.libsonnet') +
(import 'alerts.libsonnet') +
(import 'rules.libsonnet') +
(import 'dashboards/dashboards.libsonnet')
