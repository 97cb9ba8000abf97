// promtool unit tests of every alert, firing and not firing. `make mixin` renders them to
// generated/tests.yaml; `make mixin-test` runs `promtool test rules` on it. The expected
// annotations are the alert's own, with the labels and the values a case names substituted:
// a template that names a label the alert does not have fails its test.
local mixin = import 'mixin.libsonnet';
local c = mixin._config;
local alerts = [r for g in mixin.prometheusAlerts.groups for r in g.rules];

// The alert `name` (the one whose rule labels agree with `labels`) as promtool expects it
// firing with `labels` (its expression's output labels), `values` substituting `{{ <key> }}`.
local firing(name, labels={}, values={}) =
  local candidates = [
    r
    for r in alerts
    if r.alert == name && std.all([!std.objectHas(r.labels, k) || r.labels[k] == labels[k] for k in std.objectFields(labels)])
  ];
  assert std.length(candidates) == 1 : 'no single alert %s for %s' % [name, std.manifestJsonMinified(labels)];
  local rule = candidates[0];
  local withValues(text) = std.foldl(function(t, k) std.strReplace(t, '{{ %s }}' % k, values[k]), std.objectFields(values), text);
  local withLabels(text) = std.foldl(function(t, k) std.strReplace(t, '{{ $labels.%s }}' % k, labels[k]), std.objectFields(labels), text);
  {
    alertname:: name,
    exp_labels: labels + rule.labels,
    exp_annotations: { [k]: withLabels(withValues(rule.annotations[k])) for k in std.objectFields(rule.annotations) },
  };

// One promtool test: `series` ({series, values} pairs), and `checks`: [eval_time, alertname,
// [firing(...)...]] (an empty list: the alert must not fire then).
local test(name, series, checks) = {
  name: name,
  interval: '1m',
  input_series: [{ series: s[0], values: s[1] } for s in series],
  alert_rule_test: [
    { eval_time: check[0], alertname: check[1], exp_alerts: check[2] }
    for check in checks
  ],
};

local zdb = 'job="zdb-controller"';
local zau = 'job="zau-controller"';
local shard = 'job="shard-controller"';
local fed = 'job="rules-federator"';
local webhook = 'job="apiserver", name="%s"' % c.webhookName;
local budget = 'namespace="apps", name="web"';

local tests = [
  test('every zdb-controller replica down', [
    ['up{%s, pod="zdb-0"}' % zdb, '1 1 1 0 0 0 0 0 0'],
    ['up{%s, pod="zdb-1"}' % zdb, '1 1 1 0 0 0 0 0 0'],
  ], [
    ['4m', 'ZoneAwareWebhookDown', []],
    ['6m', 'ZoneAwareWebhookDown', [firing('ZoneAwareWebhookDown')]],
  ]),
  test('one zdb-controller replica down, one up', [
    ['up{%s, pod="zdb-0"}' % zdb, '1 1 1 0 0 0 0 0 0'],
    ['up{%s, pod="zdb-1"}' % zdb, '1 1 1 1 1 1 1 1 1'],
  ], [['8m', 'ZoneAwareWebhookDown', []]]),
  test('zdb-controller pods gone from discovery', [
    ['up{%s, pod="zau-0"}' % zau, '1x10'],
  ], [['5m', 'ZoneAwareWebhookDown', [firing('ZoneAwareWebhookDown')]]]),

  test('the API server cannot call the webhook', [
    ['apiserver_admission_webhook_rejection_count{%s, type="validating", operation="CREATE", error_type="calling_webhook_error", rejection_code="500"}' % webhook, '0+6x20'],
  ], [
    ['3m', 'ZoneAwareWebhookUnreachable', []],
    ['15m', 'ZoneAwareWebhookUnreachable', [firing('ZoneAwareWebhookUnreachable', { name: c.webhookName }, { '$value | humanize': '100m' })]],
  ]),
  test('the webhook denies evictions (a budget, not a failure)', [
    ['apiserver_admission_webhook_rejection_count{%s, type="validating", operation="CREATE", error_type="admission_error", rejection_code="429"}' % webhook, '0+6x20'],
  ], [['15m', 'ZoneAwareWebhookUnreachable', []]]),

  test('evictions pass unjudged at failurePolicy Ignore', [
    ['apiserver_admission_webhook_fail_open_count{%s, type="validating"}' % webhook, '0+6x20'],
  ], [
    ['15m', 'ZoneAwareWebhookFailingOpen', [firing('ZoneAwareWebhookFailingOpen', { name: c.webhookName }, { '$value | humanize': '100m' })]],
  ]),
  test('failed-open count not growing', [
    ['apiserver_admission_webhook_fail_open_count{%s, type="validating"}' % webhook, '5x20'],
  ], [['15m', 'ZoneAwareWebhookFailingOpen', []]]),

  test('half the evictions refused for API errors', [
    ['zone_aware_zdb_webhook_decisions_total{%s, result="denied", reason="ApiError"}' % zdb, '0+30x30'],
    ['zone_aware_zdb_webhook_decisions_total{%s, result="allowed", reason="Recorded"}' % zdb, '0+30x30'],
  ], [
    ['8m', 'ZoneAwareWebhookFailing', []],
    ['20m', 'ZoneAwareWebhookFailing', [firing('ZoneAwareWebhookFailing', { job: 'zdb-controller' }, { '$value | humanizePercentage': '50%' })]],
  ]),
  test('half the evictions refused by budgets', [
    ['zone_aware_zdb_webhook_decisions_total{%s, result="denied", reason="ZoneBudgetExhausted"}' % zdb, '0+30x30'],
    ['zone_aware_zdb_webhook_decisions_total{%s, result="allowed", reason="Recorded"}' % zdb, '0+30x30'],
  ], [['20m', 'ZoneAwareWebhookFailing', []]]),

  test('webhook answers take 2 to 3 s', [
    ['zone_aware_zdb_webhook_duration_seconds_bucket{%s, le="2"}' % zdb, '0x30'],
    ['zone_aware_zdb_webhook_duration_seconds_bucket{%s, le="3"}' % zdb, '0+60x30'],
    ['zone_aware_zdb_webhook_duration_seconds_bucket{%s, le="+Inf"}' % zdb, '0+60x30'],
  ], [
    ['8m', 'ZoneAwareWebhookSlow', []],
    ['20m', 'ZoneAwareWebhookSlow', [firing('ZoneAwareWebhookSlow', {}, { '$value | humanizeDuration': '2.99s' })]],
  ]),
  test('the API server waits 2 to 3 s for the webhook', [
    ['apiserver_admission_webhook_admission_duration_seconds_bucket{%s, le="2"}' % webhook, '0x30'],
    ['apiserver_admission_webhook_admission_duration_seconds_bucket{%s, le="3"}' % webhook, '0+60x30'],
    ['apiserver_admission_webhook_admission_duration_seconds_bucket{%s, le="+Inf"}' % webhook, '0+60x30'],
  ], [['20m', 'ZoneAwareWebhookSlow', [firing('ZoneAwareWebhookSlow', {}, { '$value | humanizeDuration': '2.99s' })]]]),
  test('webhook answers within 10 ms', [
    ['zone_aware_zdb_webhook_duration_seconds_bucket{%s, le="0.01"}' % zdb, '0+60x30'],
    ['zone_aware_zdb_webhook_duration_seconds_bucket{%s, le="+Inf"}' % zdb, '0+60x30'],
  ], [['20m', 'ZoneAwareWebhookSlow', []]]),

  test('webhook left at Ignore', [
    ['zone_aware_zdb_webhook_failure_policy{%s, pod="zdb-0", policy="Ignore"}' % zdb, '1x30'],
    ['zone_aware_zdb_webhook_failure_policy{%s, pod="zdb-0", policy="Fail"}' % zdb, '0x30'],
  ], [
    ['10m', 'ZoneAwareWebhookFailurePolicyIgnore', []],
    ['20m', 'ZoneAwareWebhookFailurePolicyIgnore', [firing('ZoneAwareWebhookFailurePolicyIgnore', { job: 'zdb-controller' }, { '$value': '1' })]],
  ]),
  test('webhook at Fail', [
    ['zone_aware_zdb_webhook_failure_policy{%s, pod="zdb-0", policy="Ignore"}' % zdb, '0x30'],
    ['zone_aware_zdb_webhook_failure_policy{%s, pod="zdb-0", policy="Fail"}' % zdb, '1x30'],
  ], [['20m', 'ZoneAwareWebhookFailurePolicyIgnore', []]]),

  test('the webhook configuration no longer matches evictions', [
    ['zone_aware_zdb_webhook_covers_evictions{%s, pod="zdb-0", configuration="zone-aware-eviction-webhook"}' % zdb, '1x2 0x10'],
  ], [
    ['3m', 'ZoneAwareEvictionWebhookBypassed', []],
    ['6m', 'ZoneAwareEvictionWebhookBypassed', [firing('ZoneAwareEvictionWebhookBypassed', { job: 'zdb-controller', configuration: 'zone-aware-eviction-webhook' })]],
  ]),
  test('the webhook configuration sends every eviction to the webhook', [
    ['zone_aware_zdb_webhook_covers_evictions{%s, pod="zdb-0", configuration="zone-aware-eviction-webhook"}' % zdb, '1x10'],
    ['zone_aware_zdb_webhook_covers_evictions{%s, pod="zdb-1", configuration="zone-aware-eviction-webhook"}' % zdb, '1x10'],
  ], [['8m', 'ZoneAwareEvictionWebhookBypassed', []]]),

  test('one denial a second for 45 minutes', [
    ['zone_aware_zdb_webhook_decisions_total{%s, result="denied", reason="OtherZoneDisrupted"}' % zdb, '0+60x60'],
  ], [
    ['30m', 'ZoneAwareEvictionDenialsHigh', []],
    ['45m', 'ZoneAwareEvictionDenialsHigh', [firing('ZoneAwareEvictionDenialsHigh', { job: 'zdb-controller' }, { '$value | humanize': '1' })]],
  ]),
  test('a denial every ten seconds', [
    ['zone_aware_zdb_webhook_decisions_total{%s, result="denied", reason="OtherZoneDisrupted"}' % zdb, '0+6x60'],
  ], [['45m', 'ZoneAwareEvictionDenialsHigh', []]]),

  test('a forged review every minute', [
    ['zone_aware_zdb_unconfirmed_evictions_total{%s, pod="zdb-0", namespace="apps", name="web"}' % zdb, '0+1x30'],
  ], [
    ['20m', 'ZoneAwareEvictionsUnconfirmed', [firing('ZoneAwareEvictionsUnconfirmed', { namespace: 'apps', name: 'web' }, { '$value | humanize': '15' })]],
  ]),
  test('an eviction refused by a PodDisruptionBudget now and then', [
    ['zone_aware_zdb_unconfirmed_evictions_total{%s, pod="zdb-0", namespace="apps", name="web"}' % zdb, '0+0.1x30'],
  ], [['30m', 'ZoneAwareEvictionsUnconfirmed', []]]),

  test('zau-controller down, rules-federator never scraped, shard-controller up', [
    ['up{%s, pod="zau-0"}' % zau, '0x20'],
    ['up{%s, pod="shard-0"}' % shard, '1x20'],
  ], [
    ['5m', 'ZoneAwareControllerDown', []],
    ['15m', 'ZoneAwareControllerDown', [
      firing('ZoneAwareControllerDown', { job: 'zau-controller' }),
      firing('ZoneAwareControllerDown', { job: 'rules-federator' }),
    ]],
  ]),
  test('every controller up', [
    ['up{%s, pod="zau-0"}' % zau, '1x20'],
    ['up{%s, pod="shard-0"}' % shard, '1x20'],
    ['up{%s, pod="fed-0"}' % fed, '1x20'],
  ], [['15m', 'ZoneAwareControllerDown', []]]),

  test('one zau-controller pod cannot be scraped', [
    ['up{%s, instance="10.0.0.1:8080", pod="zau-0"}' % zau, '0x20'],
    ['up{%s, instance="10.0.0.2:8080", pod="zau-1"}' % zau, '1x20'],
  ], [
    ['3m', 'ZoneAwareTargetDown', []],
    ['10m', 'ZoneAwareTargetDown', [firing('ZoneAwareTargetDown', { job: 'zau-controller', instance: '10.0.0.1:8080', pod: 'zau-0' })]],
  ]),
  test('every target scraped', [
    ['up{%s, instance="10.0.0.1:8080", pod="zau-0"}' % zau, '1x20'],
  ], [['10m', 'ZoneAwareTargetDown', []]]),

  test('half the reconciles fail', [
    ['zone_aware_reconcile_failures_total{%s, pod="zdb-0", controller="zdb-controller", reason="Api"}' % zdb, '0+30x40'],
    ['zone_aware_reconciliations_total{%s, pod="zdb-0", controller="zdb-controller"}' % zdb, '0+60x40'],
  ], [
    ['10m', 'ZoneAwareReconcileErrors', []],
    ['30m', 'ZoneAwareReconcileErrors', [firing('ZoneAwareReconcileErrors', { job: 'zdb-controller', controller: 'zdb-controller' }, { '$value | humanizePercentage': '50%' })]],
  ]),
  test('one reconcile in twenty fails', [
    ['zone_aware_reconcile_failures_total{%s, pod="zdb-0", controller="zdb-controller", reason="Api"}' % zdb, '0+3x40'],
    ['zone_aware_reconciliations_total{%s, pod="zdb-0", controller="zdb-controller"}' % zdb, '0+60x40'],
  ], [['30m', 'ZoneAwareReconcileErrors', []]]),

  test('both zau-controller replicas standby', [
    ['zone_aware_leader{%s, pod="zau-0", controller="zau-controller"}' % zau, '1 1 0x20'],
    ['zone_aware_leader{%s, pod="zau-1", controller="zau-controller"}' % zau, '0x22'],
  ], [
    ['4m', 'ZoneAwareNoLeader', []],
    ['10m', 'ZoneAwareNoLeader', [firing('ZoneAwareNoLeader', { job: 'zau-controller', controller: 'zau-controller' })]],
  ]),
  test('one leader, one standby', [
    ['zone_aware_leader{%s, pod="zau-0", controller="zau-controller"}' % zau, '0x20'],
    ['zone_aware_leader{%s, pod="zau-1", controller="zau-controller"}' % zau, '1x20'],
  ], [['10m', 'ZoneAwareNoLeader', []]]),

  test('the lease changes hands every two minutes', [
    ['zone_aware_leader_transitions_total{%s, pod="zdb-0", controller="zdb-controller"}' % zdb, '0 1 1 2 2 3 3 4 4 5 5'],
  ], [
    ['10m', 'ZoneAwareLeaderChurn', [firing('ZoneAwareLeaderChurn', { job: 'zdb-controller', controller: 'zdb-controller' })]],
  ]),
  test('one acquisition', [
    ['zone_aware_leader_transitions_total{%s, pod="zdb-0", controller="zdb-controller"}' % zdb, '0 1 1 1 1 1 1 1 1 1 1'],
  ], [['10m', 'ZoneAwareLeaderChurn', []]]),

  test('a rollout without progress for over an hour', [
    ['zone_aware_zau_rollout_in_progress{%s, %s}' % [zau, budget], '1x120'],
    ['zone_aware_zau_last_progress_timestamp_seconds{%s, %s}' % [zau, budget], '0x120'],
    ['zone_aware_zau_paused{%s, %s, source="Alarm"}' % [zau, budget], '0x120'],
  ], [
    ['70m', 'ZoneAwareRolloutStuck', []],
    ['80m', 'ZoneAwareRolloutStuck', [firing('ZoneAwareRolloutStuck', { namespace: 'apps', name: 'web' })]],
  ]),
  test('a rollout held by its alarm makes no progress', [
    ['zone_aware_zau_rollout_in_progress{%s, %s}' % [zau, budget], '1x120'],
    ['zone_aware_zau_last_progress_timestamp_seconds{%s, %s}' % [zau, budget], '0x120'],
    ['zone_aware_zau_paused{%s, %s, source="Alarm"}' % [zau, budget], '1x120'],
  ], [['80m', 'ZoneAwareRolloutStuck', []]]),
  test('a finished rollout', [
    ['zone_aware_zau_rollout_in_progress{%s, %s}' % [zau, budget], '0x120'],
    ['zone_aware_zau_last_progress_timestamp_seconds{%s, %s}' % [zau, budget], '0x120'],
  ], [['80m', 'ZoneAwareRolloutStuck', []]]),

  test('a rollout paused by its alarm for over an hour', [
    ['zone_aware_zau_paused{%s, %s, source="Alarm"}' % [zau, budget], '1x90'],
  ], [
    ['50m', 'ZoneAwareRolloutPausedTooLong', []],
    ['70m', 'ZoneAwareRolloutPausedTooLong', [firing('ZoneAwareRolloutPausedTooLong', { namespace: 'apps', name: 'web', source: 'Alarm' })]],
  ]),
  test('zone-b dark, seen by two controllers', [
    ['zone_aware_zone_nodes{%s, pod="zau-0", zone="zone-b", ready="true"}' % zau, '3 3 0x10'],
    ['zone_aware_zone_nodes{%s, pod="zau-0", zone="zone-b", ready="false"}' % zau, '0 0 3x10'],
    ['zone_aware_zone_nodes{%s, pod="zdb-0", zone="zone-b", ready="true"}' % zdb, '3 3 0x10'],
    ['zone_aware_zone_nodes{%s, pod="zdb-0", zone="zone-b", ready="false"}' % zdb, '0 0 3x10'],
    ['zone_aware_zone_nodes{%s, pod="zau-0", zone="zone-a", ready="true"}' % zau, '3x12'],
    ['zone_aware_zone_nodes{%s, pod="zau-0", zone="zone-a", ready="false"}' % zau, '0x12'],
  ], [
    ['2m', 'ZoneAwareZoneDark', []],
    ['5m', 'ZoneAwareZoneDark', [firing('ZoneAwareZoneDark', { zone: 'zone-b' })]],
  ]),
  test('one node of zone-b down', [
    ['zone_aware_zone_nodes{%s, pod="zau-0", zone="zone-b", ready="true"}' % zau, '2x12'],
    ['zone_aware_zone_nodes{%s, pod="zau-0", zone="zone-b", ready="false"}' % zau, '1x12'],
  ], [['10m', 'ZoneAwareZoneDark', []]]),
  test('a rollout baking for over an hour', [
    ['zone_aware_zau_paused{%s, %s, source="Bake"}' % [zau, budget], '1x90'],
  ], [['70m', 'ZoneAwareRolloutPausedTooLong', []]]),

  test('a zone disrupted for over an hour', [
    ['zone_aware_zdb_unavailable_pods{%s, %s, zone="zone-a"}' % [zdb, budget], '1x90'],
    ['zone_aware_zdb_unavailable_pods{%s, %s, zone="zone-b"}' % [zdb, budget], '0x90'],
  ], [
    ['50m', 'ZoneAwareBudgetDisruptedTooLong', []],
    ['70m', 'ZoneAwareBudgetDisruptedTooLong', [firing('ZoneAwareBudgetDisruptedTooLong', { namespace: 'apps', name: 'web', zone: 'zone-a' }, { '$value': '1' })]],
  ]),
  test('a zone disrupted for half an hour', [
    ['zone_aware_zdb_unavailable_pods{%s, %s, zone="zone-a"}' % [zdb, budget], '1x30 0x60'],
  ], [['70m', 'ZoneAwareBudgetDisruptedTooLong', []]]),

  test('one of three shards not ready', [
    ['zone_aware_sprom_shards{%s, namespace="monitoring", name="k8s", state="active"}' % shard, '3x30'],
    ['zone_aware_sprom_shards{%s, namespace="monitoring", name="k8s", state="ready"}' % shard, '2x30'],
  ], [
    ['10m', 'ZoneAwareShardNotReady', []],
    ['20m', 'ZoneAwareShardNotReady', [firing('ZoneAwareShardNotReady', { namespace: 'monitoring', name: 'k8s' }, { '$value': '1' })]],
  ]),
  test('every shard ready', [
    ['zone_aware_sprom_shards{%s, namespace="monitoring", name="k8s", state="active"}' % shard, '3x30'],
    ['zone_aware_sprom_shards{%s, namespace="monitoring", name="k8s", state="ready"}' % shard, '3x30'],
  ], [['20m', 'ZoneAwareShardNotReady', []]]),

  test('zone-c without a shard', [
    ['zone_aware_sprom_zone_shards{%s, namespace="monitoring", name="k8s", zone="zone-c"}' % shard, '0x30'],
    ['zone_aware_sprom_zone_shards{%s, namespace="monitoring", name="k8s", zone="zone-a"}' % shard, '1x30'],
  ], [
    ['5m', 'ZoneAwareZoneWithoutShard', []],
    ['15m', 'ZoneAwareZoneWithoutShard', [firing('ZoneAwareZoneWithoutShard', { namespace: 'monitoring', name: 'k8s', zone: 'zone-c' })]],
  ]),
  test('a shard in every zone', [
    ['zone_aware_sprom_zone_shards{%s, namespace="monitoring", name="k8s", zone="zone-c"}' % shard, '1x30'],
  ], [['15m', 'ZoneAwareZoneWithoutShard', []]]),

  test('zone-b\'s shards down, seen by both controller replicas', [
    ['zone_aware_sprom_zone_unready_since_timestamp_seconds{%s, pod="shard-0", namespace="monitoring", name="k8s", zone="zone-b", failed_over="false"}' % shard, '0x3 _x10'],
    ['zone_aware_sprom_zone_unready_since_timestamp_seconds{%s, pod="shard-1", namespace="monitoring", name="k8s", zone="zone-b", failed_over="false"}' % shard, '_x3 0x10'],
  ], [
    ['30s', 'ZoneAwareZoneShardsDown', []],
    ['5m', 'ZoneAwareZoneShardsDown', [firing('ZoneAwareZoneShardsDown', { namespace: 'monitoring', name: 'k8s', zone: 'zone-b' })]],
  ]),
  test('zone-b\'s shards down past the failover grace, not failed over', [
    ['zone_aware_sprom_zone_unready_since_timestamp_seconds{%s, namespace="monitoring", name="k8s", zone="zone-b", failed_over="false"}' % shard, '0x20'],
    ['zone_aware_sprom_zone_failover_after_seconds{%s, namespace="monitoring", name="k8s"}' % shard, '300x20'],
  ], [
    ['6m', 'ZoneAwareShardFailoverMissing', []],
    ['9m', 'ZoneAwareShardFailoverMissing', [firing('ZoneAwareShardFailoverMissing', { namespace: 'monitoring', name: 'k8s', zone: 'zone-b' })]],
  ]),
  test('zone-b\'s shards down and failed over', [
    ['zone_aware_sprom_zone_unready_since_timestamp_seconds{%s, namespace="monitoring", name="k8s", zone="zone-b", failed_over="false"}' % shard, '0x5'],
    ['zone_aware_sprom_zone_unready_since_timestamp_seconds{%s, namespace="monitoring", name="k8s", zone="zone-b", failed_over="true"}' % shard, '_x5 0x15'],
    ['zone_aware_sprom_zone_failover_after_seconds{%s, namespace="monitoring", name="k8s"}' % shard, '300x20'],
  ], [['15m', 'ZoneAwareShardFailoverMissing', []]]),

  test('shard 1 refuses its configuration', [
    ['zone_aware_sprom_shard_config_loaded{%s, namespace="monitoring", name="k8s", shard="1"}' % shard, '0x30'],
    ['zone_aware_sprom_shard_config_loaded{%s, namespace="monitoring", name="k8s", shard="0"}' % shard, '1x30'],
  ], [
    ['5m', 'ZoneAwareShardConfigNotLoaded', []],
    ['15m', 'ZoneAwareShardConfigNotLoaded', [firing('ZoneAwareShardConfigNotLoaded', { namespace: 'monitoring', name: 'k8s', sprom_shard: '1' })]],
  ]),
  test('a removed shard cannot upload', [
    ['zone_aware_sprom_shards{%s, namespace="monitoring", name="k8s", state="uploading"}' % shard, '1x60'],
  ], [
    ['20m', 'ZoneAwareShardUploadStuck', []],
    ['40m', 'ZoneAwareShardUploadStuck', [firing('ZoneAwareShardUploadStuck', { namespace: 'monitoring', name: 'k8s' }, { '$value': '1' })]],
  ]),
  test('removed shards upload and go', [
    ['zone_aware_sprom_shards{%s, namespace="monitoring", name="k8s", state="uploading"}' % shard, '1x10 0x50'],
  ], [['40m', 'ZoneAwareShardUploadStuck', []]]),

  test('every shard runs its configuration', [
    ['zone_aware_sprom_shard_config_loaded{%s, namespace="monitoring", name="k8s", shard="1"}' % shard, '1x30'],
  ], [['15m', 'ZoneAwareShardConfigNotLoaded', []]]),

  test('a backend times out', [
    ['zone_aware_federator_endpoint_errors_total{%s, pod="fed-0", endpoint="http://k8s-shard-1:9090", reason="timeout"}' % fed, '0+1x30'],
  ], [
    ['10m', 'ZoneAwareFederatorBackendErrors', []],
    ['20m', 'ZoneAwareFederatorBackendErrors', [firing('ZoneAwareFederatorBackendErrors', { job: 'rules-federator', endpoint: 'http://k8s-shard-1:9090', reason: 'timeout' })]],
  ]),
  test('a backend failed once, long ago', [
    ['zone_aware_federator_endpoint_errors_total{%s, pod="fed-0", endpoint="http://k8s-shard-1:9090", reason="timeout"}' % fed, '0 1x30'],
  ], [['25m', 'ZoneAwareFederatorBackendErrors', []]]),

  test('one answer in ten misses a backend', [
    ['zone_aware_federator_partial_responses_total{%s, pod="fed-0", handler="alerts"}' % fed, '0+6x30'],
    ['zone_aware_federator_requests_total{%s, pod="fed-0", handler="alerts", code="200"}' % fed, '0+60x30'],
  ], [
    ['10m', 'ZoneAwareFederatorPartialAnswers', []],
    ['20m', 'ZoneAwareFederatorPartialAnswers', [firing('ZoneAwareFederatorPartialAnswers', { job: 'rules-federator', handler: 'alerts' }, { '$value | humanizePercentage': '10%' })]],
  ]),
  test('complete answers', [
    ['zone_aware_federator_partial_responses_total{%s, pod="fed-0", handler="alerts"}' % fed, '0x30'],
    ['zone_aware_federator_requests_total{%s, pod="fed-0", handler="alerts", code="200"}' % fed, '0+60x30'],
  ], [['20m', 'ZoneAwareFederatorPartialAnswers', []]]),

  test('rules answers take 5 to 10 s', [
    ['zone_aware_federator_request_duration_seconds_bucket{%s, pod="fed-0", handler="rules", le="5"}' % fed, '0x30'],
    ['zone_aware_federator_request_duration_seconds_bucket{%s, pod="fed-0", handler="rules", le="10"}' % fed, '0+60x30'],
    ['zone_aware_federator_request_duration_seconds_bucket{%s, pod="fed-0", handler="rules", le="+Inf"}' % fed, '0+60x30'],
  ], [
    ['10m', 'ZoneAwareFederatorSlow', []],
    ['20m', 'ZoneAwareFederatorSlow', [firing('ZoneAwareFederatorSlow', { job: 'rules-federator', handler: 'rules' }, { '$value | humanizeDuration': '9.95s' })]],
  ]),
  test('rules answers within 100 ms', [
    ['zone_aware_federator_request_duration_seconds_bucket{%s, pod="fed-0", handler="rules", le="0.1"}' % fed, '0+60x30'],
    ['zone_aware_federator_request_duration_seconds_bucket{%s, pod="fed-0", handler="rules", le="+Inf"}' % fed, '0+60x30'],
  ], [['20m', 'ZoneAwareFederatorSlow', []]]),
];

// Every alert is tested firing and not firing.
local checks = [check for t in tests for check in t.alert_rule_test];
local names = std.set([r.alert for r in alerts]);
local firingTested = std.set([check.alertname for check in checks if check.exp_alerts != []]);
local quietTested = std.set([check.alertname for check in checks if check.exp_alerts == []]);
assert std.setDiff(names, firingTested) == [] : 'alerts never tested firing: %s' % std.join(', ', std.setDiff(names, firingTested));
assert std.setDiff(names, quietTested) == [] : 'alerts never tested quiet: %s' % std.join(', ', std.setDiff(names, quietTested));
assert std.setDiff(firingTested, names) == [] : 'tests of unknown alerts: %s' % std.join(', ', std.setDiff(firingTested, names));

{
  rule_files: ['alerts.yaml', 'rules.yaml'],
  evaluation_interval: '1m',
  tests: tests,
}
