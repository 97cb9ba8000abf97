// The dashboards: one overview and one per binary. Queries read the binaries' metrics, the
// recording rules of rules.libsonnet, and (marked) the API server's and the shards' own
// Prometheus metrics.
local g = import 'lib.libsonnet';

{
  grafanaDashboards+:: {
    local c = $._config,
    local ns = 'namespace=~"$namespace"',

    'zone-aware-overview.json': g.dashboard(
      c,
      'zone-aware-overview',
      'Zone-aware controllers / Overview',
      'Health of every zone-aware-controllers binary: replicas up, leaders, reconciles, the eviction webhook, rollouts, shards and the rules-federator.',
      [],
      [
        [
          'Health',
          g.stat('Replicas up', [['sum by (job) (up{%(controllersSelector)s})' % c, '{{job}}']], description='Scraped replicas answering, per binary.', thresholds=g.redBelow(1)),
          g.stat('Leaders', [['sum by (controller) (zone_aware_leader{%(electedSelector)s})' % c, '{{controller}}']], description='Replicas leading, per controller: 1 is right, 0 means nothing reconciles.', thresholds=g.redBelow(1)),
          g.stat('Firing alerts', [['count by (alertname) (ALERTS{alertstate="firing", alertname=~"ZoneAware.*"})', '{{alertname}}']], description='Alerts of this mixin firing now.', thresholds=g.redFrom(1)),
        ],
        [
          'Controllers',
          g.timeseries('Reconciles per second', [['sum by (controller) (job_controller:zone_aware_reconciliations:rate5m)', '{{controller}}']], 'ops'),
          g.timeseries('Reconcile failures per second', [['sum by (controller, reason) (job_controller:zone_aware_reconcile_failures:rate5m)', '{{controller}} {{reason}}']], 'ops'),
          g.timeseries('Reconcile p99', [['histogram_quantile(0.99, sum by (controller, le) (rate(zone_aware_reconcile_duration_seconds_bucket{%(controllersSelector)s}[$__rate_interval])))' % c, '{{controller}}']], 's'),
        ],
        [
          'Workloads',
          g.timeseries('Eviction decisions per second', [['sum by (result) (result_reason:zone_aware_zdb_webhook_decisions:rate5m)', '{{result}}']], 'ops', stack=true),
          g.timeseries('Rollouts in progress', [['sum(zone_aware_zau_rollout_in_progress{%(zauSelector)s})' % c, 'in progress'], ['count(max by (namespace, name) (zone_aware_zau_paused{%(zauSelector)s}) == 1)' % c, 'paused']]),
          g.timeseries('Active shards per zone', [['sum by (zone) (zone_aware_sprom_zone_shards{%(shardSelector)s})' % c, '{{zone}}']], stack=true),
          g.timeseries('Federator p99 by handler', [['handler:zone_aware_federator_request_duration_seconds:p99_rate5m', '{{handler}}']], 's'),
        ],
        [
          'Processes',
          g.timeseries('Resident memory', [['sum by (job, pod) (process_resident_memory_bytes{%(controllersSelector)s})' % c, '{{pod}}']], 'bytes'),
          g.timeseries('CPU', [['sum by (job, pod) (rate(process_cpu_seconds_total{%(controllersSelector)s}[$__rate_interval]))' % c, '{{pod}}']], 'percentunit'),
          g.timeseries('Versions', [
            ['count by (job, version, revision) (%s{%s})' % [info, c.controllersSelector], '{{job}} {{version}} {{revision}}']
            for info in ['zdb_controller_build_info', 'zau_controller_build_info', 'shard_controller_build_info', 'rules_federator_build_info']
          ], description='Replicas per running version: two lines for one binary during an upgrade.'),
        ],
      ],
    ),

    'zone-aware-zdb.json': g.dashboard(
      c,
      'zone-aware-zdb',
      'Zone-aware controllers / ZoneDisruptionBudgets',
      'The eviction webhook and the budgets: decisions, latency, disruptions and allowance by zone.',
      [g.variable('namespace', 'namespace', 'zone_aware_zdb_disruptions_allowed', true)],
      [
        [
          'Eviction webhook',
          g.timeseries('Decisions per second by reason', [['sum by (result, reason) (result_reason:zone_aware_zdb_webhook_decisions:rate5m)', '{{result}} {{reason}}']], 'ops', stack=true),
          g.timeseries('Answer time', [
            ['job:zone_aware_zdb_webhook_duration_seconds:p99_rate5m', 'p99 (webhook)'],
            ['histogram_quantile(0.5, sum by (le) (rate(zone_aware_zdb_webhook_duration_seconds_bucket{%(zdbSelector)s}[$__rate_interval])))' % c, 'p50 (webhook)'],
            ['histogram_quantile(0.99, sum by (le) (rate(apiserver_admission_webhook_admission_duration_seconds_bucket{%(apiserverSelector)s, name="%(webhookName)s"}[$__rate_interval])))' % c, 'p99 (API server)'],
          ], 's'),
          g.timeseries('Calls the API server could not make', [
            ['sum by (error_type) (rate(apiserver_admission_webhook_rejection_count{%(apiserverSelector)s, name="%(webhookName)s"}[$__rate_interval]))' % c, 'rejected: {{error_type}}'],
            ['sum(rate(apiserver_admission_webhook_fail_open_count{%(apiserverSelector)s, name="%(webhookName)s"}[$__rate_interval]))' % c, 'failed open'],
          ], 'ops'),
        ],
        [
          g.timeseries('Shed and conflicting writes', [
            ['sum by (why) (rate(zone_aware_zdb_webhook_shed_total{%(zdbSelector)s}[$__rate_interval]))' % c, 'shed: {{why}}'],
            ['sum(rate(zone_aware_zdb_webhook_conflict_retries_total{%(zdbSelector)s}[$__rate_interval]))' % c, 'conflict retries'],
          ], 'ops'),
          g.timeseries('Queued decisions', [['sum by (namespace, name) (zone_aware_zdb_webhook_queue_depth{%(zdbSelector)s, %(ns)s})' % (c { ns: ns }), '{{namespace}}/{{name}}']]),
          g.stat('failurePolicy', [['max by (policy) (zone_aware_zdb_webhook_failure_policy{%(zdbSelector)s})' % c, '{{policy}}']], description='Webhooks of the configuration at each failurePolicy: Ignore above 0 means budgets are skipped when a call fails.'),
        ],
        [
          'Budgets by zone',
          g.timeseries('Unavailable pods by zone', [['sum by (zone) (zone_aware_zdb_unavailable_pods{%(zdbSelector)s, %(ns)s})' % (c { ns: ns }), '{{zone}}']], stack=true),
          g.timeseries('Disruptions allowed by zone', [['sum by (zone) (zone_aware_zdb_disruptions_allowed{%(zdbSelector)s, %(ns)s})' % (c { ns: ns }), '{{zone}}']]),
          g.timeseries('Shadow-mode allowances', [['sum by (namespace, name) (rate(zone_aware_zdb_shadow_denials_total{%(zdbSelector)s, %(ns)s}[$__rate_interval]))' % (c { ns: ns }), '{{namespace}}/{{name}}']], 'ops'),
        ],
      ],
    ),

    'zone-aware-zau.json': g.dashboard(
      c,
      'zone-aware-zau',
      'Zone-aware controllers / ZoneAwareUpdates',
      'Rollouts zone by zone: old pods left and pods removed per zone over time, pauses and their sources.',
      [g.variable('namespace', 'namespace', 'zone_aware_zau_old_replicas', true)],
      [
        [
          'Rollouts by zone',
          g.timeseries('Old-revision pods by zone', [['sum by (zone) (zone_aware_zau_old_replicas{%(zauSelector)s, %(ns)s})' % (c { ns: ns }), '{{zone}}']], stack=true),
          g.timeseries('Pods removed per second by zone', [['sum by (zone) (namespace_name_zone:zone_aware_zau_removed_pods:rate5m{%(ns)s})' % { ns: ns }, '{{zone}}']], 'ops', stack=true),
        ],
        [
          'Progress and pauses',
          g.timeseries('Rollouts in progress', [['zone_aware_zau_rollout_in_progress{%(zauSelector)s, %(ns)s} == 1' % (c { ns: ns }), '{{namespace}}/{{name}}']]),
          g.timeseries('Time since last progress', [['time() - max by (namespace, name) (zone_aware_zau_last_progress_timestamp_seconds{%(zauSelector)s, %(ns)s}) and on (namespace, name) max by (namespace, name) (zone_aware_zau_rollout_in_progress{%(zauSelector)s, %(ns)s}) == 1' % (c { ns: ns }), '{{namespace}}/{{name}}']], 's'),
          g.timeseries('Paused, by source', [['max by (namespace, name, source) (zone_aware_zau_paused{%(zauSelector)s, %(ns)s}) == 1' % (c { ns: ns }), '{{namespace}}/{{name}} {{source}}']]),
        ],
        [
          g.timeseries('Batch step', [['max by (namespace, name) (zone_aware_zau_update_step{%(zauSelector)s, %(ns)s})' % (c { ns: ns }), '{{namespace}}/{{name}}']]),
          g.timeseries('Alert gate polls per second', [['sum by (result) (rate(zone_aware_zau_alert_gate_polls_total{%(zauSelector)s}[$__rate_interval]))' % c, '{{result}}']], 'ops'),
        ],
      ],
    ),

    'zone-aware-sharding.json': g.dashboard(
      c,
      'zone-aware-sharding',
      'Zone-aware controllers / ShardedPrometheus',
      'Shards per zone and their state, configuration loads, and (from the shards\' own metrics, when they are scraped) targets per shard.',
      [g.variable('namespace', 'namespace', 'zone_aware_sprom_shards', true)],
      [
        [
          'Shards',
          g.timeseries('Shards by state', [['sum by (namespace, name, state) (zone_aware_sprom_shards{%(shardSelector)s, %(ns)s})' % (c { ns: ns }), '{{namespace}}/{{name}} {{state}}']]),
          g.timeseries('Active shards per zone', [['sum by (zone) (zone_aware_sprom_zone_shards{%(shardSelector)s, %(ns)s})' % (c { ns: ns }), '{{zone}}']], stack=true),
          g.timeseries('Configuration loaded', [['min by (namespace, name, shard) (zone_aware_sprom_shard_config_loaded{%(shardSelector)s, %(ns)s})' % (c { ns: ns }), '{{namespace}}/{{name}} shard {{shard}}']], description='1: every pod of the shard runs the configuration applied to it.'),
        ],
        [
          'Targets (the shards\' own metrics)',
          g.timeseries('Targets per shard pod', [['sum by (namespace, pod) (prometheus_target_scrape_pool_targets{%(ns)s})' % { ns: ns }, '{{namespace}}/{{pod}}']], description='Needs a scrape job for the shards\' Prometheus pods.'),
          g.timeseries('Next retained-shard deletion', [['max by (namespace, name) (zone_aware_sprom_next_shard_deletion_timestamp_seconds{%(shardSelector)s, %(ns)s}) - time()' % (c { ns: ns }), '{{namespace}}/{{name}}']], 's'),
        ],
        [
          'What the shards cost',
          g.timeseries('Scrape traffic by zone', [['sum by (namespace, name, traffic) (rate(zone_aware_sprom_scrape_bytes_total{%(shardSelector)s, %(ns)s}[$__rate_interval]))' % (c { ns: ns }), '{{namespace}}/{{name}} {{traffic}}']], 'Bps', stack=true, description='Bytes of the targets\' answers the shards scrape, by where the target is from the scraping pod: cross-zone is what a cloud bills (docs/sharding.md, "What the shards cost"). Times 86400: a day\'s bytes.'),
          g.timeseries('Federator fan-out by backend zone', [['sum by (zone) (rate(zone_aware_federator_backend_received_bytes_total{%(federatorSelector)s}[$__rate_interval]))' % c, '{{zone}}']], 'Bps', stack=true, description='Bytes of the shards\' answers the rules-federator receives, by the shard\'s zone.'),
        ],
      ],
    ),

    'zone-aware-federator.json': g.dashboard(
      c,
      'zone-aware-federator',
      'Zone-aware controllers / rules-federator',
      'The federated rules and alerts API: request latency, partial answers and the health of each backend.',
      [],
      [
        [
          'Requests',
          g.timeseries('Requests per second', [['sum by (handler, code) (rate(zone_aware_federator_requests_total{%(federatorSelector)s}[$__rate_interval]))' % c, '{{handler}} {{code}}']], 'ops'),
          g.timeseries('Answer time', [
            ['handler:zone_aware_federator_request_duration_seconds:p99_rate5m', 'p99 {{handler}}'],
            ['histogram_quantile(0.5, sum by (handler, le) (rate(zone_aware_federator_request_duration_seconds_bucket{%(federatorSelector)s}[$__rate_interval])))' % c, 'p50 {{handler}}'],
          ], 's'),
          g.timeseries('Partial answers per second', [['sum by (handler) (rate(zone_aware_federator_partial_responses_total{%(federatorSelector)s}[$__rate_interval]))' % c, '{{handler}}']], 'ops'),
        ],
        [
          'Backends',
          g.timeseries('Backend errors per second', [['sum by (endpoint, reason) (endpoint:zone_aware_federator_endpoint_errors:rate5m)', '{{endpoint}} {{reason}}']], 'ops'),
          g.timeseries('Backend p99', [['histogram_quantile(0.99, sum by (endpoint, le) (rate(zone_aware_federator_endpoint_request_duration_seconds_bucket{%(federatorSelector)s}[$__rate_interval])))' % c, '{{endpoint}}']], 's'),
          g.timeseries('Merge p99', [['histogram_quantile(0.99, sum by (le) (rate(zone_aware_federator_merge_duration_seconds_bucket{%(federatorSelector)s}[$__rate_interval])))' % c, 'merge']], 's'),
          g.timeseries('Served', [['max by (kind) (zone_aware_federator_served{%(federatorSelector)s})' % c, '{{kind}}']]),
        ],
      ],
    ),
  },
}
