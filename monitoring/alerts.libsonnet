// The alerts. Every one has a runbook section in docs/runbooks.md (anchor: the alert name in
// lower case) and promtool unit tests in tests/, firing and not firing.
//
// The PodMonitors of config/monitoring/ have every shard of a sharded Prometheus scrape every
// controller pod, so the expressions over all replicas of a binary (absent(), max by
// controller) hold on any one shard. Evaluated on a Prometheus that sees only some of the
// controller pods, they would not.
local alert(c, name, expr, forDuration, severity, summary, description) = {
  alert: name,
  expr: expr,
  [if forDuration != null then 'for']: forDuration,
  labels: { severity: severity },
  annotations: {
    summary: summary,
    description: description,
    runbook_url: '%s#%s' % [c.runbookURL, std.asciiLower(name)],
  },
};

{
  prometheusAlerts+:: {
    local c = $._config,
    groups+: [
      {
        name: 'zone-aware-eviction-webhook',
        rules: [
          alert(
            c,
            'ZoneAwareWebhookDown',
            'absent(up{%(zdbSelector)s} == 1)' % c,
            c.webhookDownFor,
            'critical',
            'No zdb-controller replica is scraped up: the eviction webhook cannot answer.',
            'No target of {%(zdbSelector)s} has been up for %(webhookDownFor)s. The eviction webhook fails closed, so every eviction of a pod in a covered namespace is refused: kubectl drain, the cluster autoscaler and node upgrades stop cluster-wide.' % c,
          ),
          alert(
            c,
            'ZoneAwareWebhookUnreachable',
            |||
              sum by (name) (
                rate(apiserver_admission_webhook_rejection_count{%(apiserverSelector)s, name="%(webhookName)s", error_type="calling_webhook_error"}[5m])
              ) > 0
            ||| % c,
            '5m',
            'critical',
            'The API server cannot call the eviction webhook.',
            'The API server rejected {{ $value | humanize }} evictions per second because calling {{ $labels.name }} failed (no endpoint, TLS or network error, timeout). Those evictions are refused.',
          ),
          alert(
            c,
            'ZoneAwareWebhookFailingOpen',
            |||
              sum by (name) (
                rate(apiserver_admission_webhook_fail_open_count{%(apiserverSelector)s, name="%(webhookName)s"}[5m])
              ) > 0
            ||| % c,
            '5m',
            'warning',
            'Evictions pass unjudged: the eviction webhook failed at failurePolicy Ignore.',
            'The API server let {{ $value | humanize }} evictions per second through without a ZoneDisruptionBudget decision because calling {{ $labels.name }} failed while its failurePolicy is Ignore.',
          ),
          alert(
            c,
            'ZoneAwareWebhookFailing',
            |||
              sum by (job) (
                rate(zone_aware_zdb_webhook_decisions_total{%(zdbSelector)s, result="denied", reason=~"ApiError|DeadlineExceeded|TooManyConflicts|Shed|StatusNotObserved"}[5m])
              )
              /
              sum by (job) (rate(zone_aware_zdb_webhook_decisions_total{%(zdbSelector)s}[5m]))
              > %(webhookFailingRatio)s
            ||| % c,
            '10m',
            'warning',
            'The eviction webhook refuses evictions it could not decide.',
            '{{ $value | humanizePercentage }} of the evictions the webhook answered were refused because it could not decide (API errors, deadlines, conflicts with the other replica, overload), not because of a budget.',
          ),
          alert(
            c,
            'ZoneAwareWebhookSlow',
            |||
              histogram_quantile(0.99,
                sum by (le) (rate(zone_aware_zdb_webhook_duration_seconds_bucket{%(zdbSelector)s}[5m]))
              ) > %(webhookSlowSeconds)s
              or
              histogram_quantile(0.99,
                sum by (le) (rate(apiserver_admission_webhook_admission_duration_seconds_bucket{%(apiserverSelector)s, name="%(webhookName)s"}[5m]))
              ) > %(webhookSlowSeconds)s
            ||| % c,
            '10m',
            'warning',
            'The eviction webhook is slow.',
            'The 99th percentile time to judge an eviction is {{ $value | humanizeDuration }} (above %(webhookSlowSeconds)ss, as the webhook or the API server measures it). The API server gives up after the webhook timeout (5 s) and refuses the eviction.' % c,
          ),
          alert(
            c,
            'ZoneAwareWebhookFailurePolicyIgnore',
            'max by (job) (zone_aware_zdb_webhook_failure_policy{%(zdbSelector)s, policy="Ignore"}) > 0' % c,
            c.webhookIgnoreFor,
            'warning',
            'The eviction webhook is left at failurePolicy Ignore.',
            'The eviction webhook configuration has {{ $value }} webhook(s) at failurePolicy Ignore: whenever a call fails, the eviction goes through without a ZoneDisruptionBudget decision.',
          ),
          alert(
            c,
            'ZoneAwareEvictionWebhookBypassed',
            'min by (job, configuration) (zone_aware_zdb_webhook_covers_evictions{%(zdbSelector)s}) == 0' % c,
            c.webhookBypassedFor,
            'critical',
            'Evictions bypass the ZoneDisruptionBudgets: the webhook configuration no longer sends them to the webhook.',
            'The eviction webhook configuration {{ $labels.configuration }} lets evictions through without calling the webhook (its rules no longer match CREATE of pods/eviction, it calls another path, its objectSelector needs labels, or it is missing): no ZoneDisruptionBudget is consulted. The controller may not change these fields; the EvictionWebhookBypassed event on the configuration says which changed.',
          ),
          alert(
            c,
            'ZoneAwareEvictionDenialsHigh',
            |||
              sum by (job) (rate(zone_aware_zdb_webhook_decisions_total{%(zdbSelector)s, result="denied"}[10m]))
              > %(denialsPerSecond)s
            ||| % c,
            c.denialsFor,
            'warning',
            'Evictions have been refused steadily for %(denialsFor)s.' % c,
            'The eviction webhook refuses {{ $value | humanize }} evictions per second. A drain or a rollout is stuck on a ZoneDisruptionBudget, or a budget is too tight for the pods it selects.',
          ),
          alert(
            c,
            'ZoneAwareEvictionsUnconfirmed',
            |||
              sum by (namespace, name) (increase(zone_aware_zdb_unconfirmed_evictions_total{%(zdbSelector)s}[15m]))
              > %(unconfirmedEvictions)s
            ||| % c,
            null,
            'warning',
            'Evictions a ZoneDisruptionBudget recorded were not carried out.',
            '{{ $value | humanize }} evictions recorded by ZoneDisruptionBudget {{ $labels.namespace }}/{{ $labels.name }} in 15 minutes were never carried out: their pods still ran 10 s later. Either the API server refused them after the webhook (a PodDisruptionBudget over the same pods), or someone posts AdmissionReviews to the webhook directly.',
          ),
        ],
      },
      {
        name: 'zone-aware-controllers',
        rules: [
          alert(
            c,
            'ZoneAwareControllerDown',
            'absent(up{%s} == 1)' % selector,
            '10m',
            'warning',
            'No %s replica is scraped up.' % job,
            'No target of {%s} has been up for 10 minutes.' % selector,
          ) + { labels+: { job: job } }
          for job in ['zau-controller', 'shard-controller', 'rules-federator']
          for selector in [
            { 'zau-controller': c.zauSelector, 'shard-controller': c.shardSelector, 'rules-federator': c.federatorSelector }[job],
          ]
        ] + [
          alert(
            c,
            'ZoneAwareTargetDown',
            'up{%(controllersSelector)s} == 0' % c,
            '5m',
            'warning',
            '{{ $labels.job }} pod {{ $labels.pod }} cannot be scraped.',
            'The metrics endpoint {{ $labels.instance }} of {{ $labels.job }} has not answered for 5 minutes.',
          ),
          alert(
            c,
            'ZoneAwareReconcileErrors',
            |||
              sum by (job, controller) (rate(zone_aware_reconcile_failures_total{%(controllersSelector)s}[10m]))
              /
              sum by (job, controller) (rate(zone_aware_reconciliations_total{%(controllersSelector)s}[10m]))
              > %(reconcileErrorRatio)s
            ||| % c,
            c.reconcileErrorsFor,
            'warning',
            '{{ $labels.controller }} fails {{ $value | humanizePercentage }} of its reconciles.',
            'The {{ $labels.controller }} controller ({{ $labels.job }}) has failed more than %(reconcileErrorRatio)s of its reconciles for %(reconcileErrorsFor)s. The objects it owns are not kept up to date.' % c,
          ),
          alert(
            c,
            'ZoneAwareNoLeader',
            'max by (job, controller) (zone_aware_leader{%(electedSelector)s}) == 0' % c,
            c.noLeaderFor,
            'critical',
            'No replica of {{ $labels.controller }} leads.',
            'Every scraped replica of {{ $labels.controller }} ({{ $labels.job }}) has been a standby for %(noLeaderFor)s: nothing reconciles its objects (budget statuses, rollouts or shards stop changing).' % c,
          ),
          alert(
            c,
            'ZoneAwareLeaderChurn',
            'sum by (job, controller) (increase(zone_aware_leader_transitions_total{%(electedSelector)s}[1h])) > %(leaderChanges)s' % c,
            null,
            'warning',
            'The leadership of {{ $labels.controller }} keeps changing.',
            'The replicas of {{ $labels.controller }} ({{ $labels.job }}) acquired its Lease more than %(leaderChanges)s times in the last hour. Each change restarts the caches and reconciles.' % c,
          ),
        ],
      },
      {
        name: 'zone-aware-zones',
        rules: [
          alert(
            c,
            'ZoneAwareZoneDark',
            // Each controller with a node cache serves the counts: max by zone is one series per
            // zone, so the alert fires once per zone whatever the replicas.
            |||
              max by (zone) (zone_aware_zone_nodes{%(electedSelector)s, ready="true"}) == 0
              and
              max by (zone) (zone_aware_zone_nodes{%(electedSelector)s, ready="false"}) > 0
            ||| % c,
            c.zoneDarkFor,
            'critical',
            'Zone {{ $labels.zone }} is dark: it has nodes and none is Ready.',
            'Every node of zone {{ $labels.zone }} has been NotReady or unreachable for %(zoneDarkFor)s: a zone outage. ZoneAwareUpdates remove no pod in any zone until it is back, ZoneDisruptionBudgets count the zone disrupted and refuse evictions of Ready pods elsewhere, and its shards are down (docs/outages.md).' % c,
          ),
        ],
      },
      {
        name: 'zone-aware-rollouts',
        rules: [
          alert(
            c,
            'ZoneAwareRolloutStuck',
            |||
              (
                max by (namespace, name) (zone_aware_zau_rollout_in_progress{%(zauSelector)s}) == 1
                and on (namespace, name)
                time() - max by (namespace, name) (zone_aware_zau_last_progress_timestamp_seconds{%(zauSelector)s}) > %(zauStuckSeconds)s
              )
              unless on (namespace, name)
              (max by (namespace, name) (zone_aware_zau_paused{%(zauSelector)s}) == 1)
            ||| % c,
            '15m',
            'warning',
            'Rollout {{ $labels.namespace }}/{{ $labels.name }} makes no progress.',
            'The ZoneAwareUpdate {{ $labels.namespace }}/{{ $labels.name }} has old-revision pods left, is not paused, and has removed none for more than %(zauStuckSeconds)ss.' % c,
          ),
          alert(
            c,
            'ZoneAwareRolloutPausedTooLong',
            'max by (namespace, name, source) (zone_aware_zau_paused{%(zauSelector)s, source!="Bake"}) == 1' % c,
            c.zauPausedTooLongFor,
            'warning',
            'Rollout {{ $labels.namespace }}/{{ $labels.name }} has been paused by {{ $labels.source }} for %(zauPausedTooLongFor)s.' % c,
            'The ZoneAwareUpdate {{ $labels.namespace }}/{{ $labels.name }} has been held by {{ $labels.source }} (its CloudWatch alarm, its Prometheus alert gate, or spec.paused) for more than %(zauPausedTooLongFor)s, with pods of two revisions running.' % c,
          ),
          alert(
            c,
            'ZoneAwareBudgetDisruptedTooLong',
            'max by (namespace, name, zone) (zone_aware_zdb_unavailable_pods{%(zdbSelector)s}) > 0' % c,
            c.zdbDisruptedTooLongFor,
            'warning',
            'Zone {{ $labels.zone }} of budget {{ $labels.namespace }}/{{ $labels.name }} has been disrupted for %(zdbDisruptedTooLongFor)s.' % c,
            'The ZoneDisruptionBudget {{ $labels.namespace }}/{{ $labels.name }} has counted {{ $value }} unavailable pod(s) in zone {{ $labels.zone }} for more than %(zdbDisruptedTooLongFor)s. While a zone is disrupted, evictions in every other zone are refused.' % c,
          ),
        ],
      },
      {
        name: 'zone-aware-sharding',
        rules: [
          alert(
            c,
            'ZoneAwareShardNotReady',
            |||
              max by (namespace, name) (zone_aware_sprom_shards{%(shardSelector)s, state="active"})
              - max by (namespace, name) (zone_aware_sprom_shards{%(shardSelector)s, state="ready"})
              > 0
            ||| % c,
            c.shardNotReadyFor,
            'warning',
            '{{ $value }} shard(s) of {{ $labels.namespace }}/{{ $labels.name }} are not ready.',
            'The ShardedPrometheus {{ $labels.namespace }}/{{ $labels.name }} has had {{ $value }} active shard(s) with a replica not ready for %(shardNotReadyFor)s. Targets of those shards may not be scraped and their rules not evaluated.' % c,
          ),
          alert(
            c,
            'ZoneAwareZoneWithoutShard',
            'max by (namespace, name, zone) (zone_aware_sprom_zone_shards{%(shardSelector)s}) == 0' % c,
            c.zoneWithoutShardFor,
            'warning',
            'Zone {{ $labels.zone }} has no shard of {{ $labels.namespace }}/{{ $labels.name }}.',
            'The ShardedPrometheus {{ $labels.namespace }}/{{ $labels.name }} has had no active shard in zone {{ $labels.zone }}, which has nodes, for %(zoneWithoutShardFor)s: that zone\'s targets are not scraped.' % c,
          ),
          alert(
            c,
            'ZoneAwareZoneShardsDown',
            // One series per zone whose shards are all unready, whatever the shard count and
            // the controller's replicas: once per resource and zone.
            'max by (namespace, name, zone) (zone_aware_sprom_zone_unready_since_timestamp_seconds{%(shardSelector)s})' % c,
            c.zoneShardsDownFor,
            'warning',
            'Every shard of zone {{ $labels.zone }} of {{ $labels.namespace }}/{{ $labels.name }} is unready.',
            'No shard of zone {{ $labels.zone }} of the ShardedPrometheus {{ $labels.namespace }}/{{ $labels.name }} has had a ready Prometheus for %(zoneShardsDownFor)s: the zone\'s own targets are not scraped, its shards\' rules are not evaluated, and their zoneless targets fail over to the other zones\' shards after zoneFailoverAfter (docs/outages.md).' % c,
          ),
          alert(
            c,
            'ZoneAwareShardFailoverMissing',
            // The controller serves the grace only where a failover can happen (Topology with
            // Spread zoneless targets): one series per zone still not failed over.
            |||
              (
                time() - max by (namespace, name, zone) (zone_aware_sprom_zone_unready_since_timestamp_seconds{%(shardSelector)s, failed_over="false"})
              )
              > on (namespace, name) group_left ()
              (
                max by (namespace, name) (zone_aware_sprom_zone_failover_after_seconds{%(shardSelector)s}) + %(shardFailoverLateSeconds)s
              )
            ||| % c,
            c.shardFailoverMissingFor,
            'critical',
            'The zoneless targets of zone {{ $labels.zone }} of {{ $labels.namespace }}/{{ $labels.name }} did not fail over.',
            'Every shard of zone {{ $labels.zone }} of the ShardedPrometheus {{ $labels.namespace }}/{{ $labels.name }} has been unready for over %(shardFailoverLateSeconds)s s past its zoneFailoverAfter, and its zoneless targets are still not scraped by the other zones\' shards (no other zone has a ready shard, or the controller cannot act): those targets are not scraped.' % c,
          ),
          alert(
            c,
            'ZoneAwareShardConfigNotLoaded',
            // The shard's index as `sprom_shard`: a sharded Prometheus and the rules-federator
            // set their own `shard` label (the shard that fired) on every alert.
            |||
              min by (namespace, name, sprom_shard) (
                label_replace(zone_aware_sprom_shard_config_loaded{%(shardSelector)s}, "sprom_shard", "$1", "shard", "(.*)")
              ) == 0
            ||| % c,
            c.shardConfigNotLoadedFor,
            'warning',
            'Shard {{ $labels.sprom_shard }} of {{ $labels.namespace }}/{{ $labels.name }} does not run its configuration.',
            'A Prometheus pod of shard {{ $labels.sprom_shard }} of {{ $labels.namespace }}/{{ $labels.name }} refused the configuration applied to it, or still runs another one, for %(shardConfigNotLoadedFor)s. It scrapes and evaluates with its previous configuration.' % c,
          ),
          alert(
            c,
            'ZoneAwareShardUploadStuck',
            'max by (namespace, name) (zone_aware_sprom_shards{%(shardSelector)s, state="uploading"}) > 0' % c,
            c.shardUploadStuckFor,
            'warning',
            '{{ $value }} removed shard(s) of {{ $labels.namespace }}/{{ $labels.name }} wait for their final upload.',
            'The ShardedPrometheus {{ $labels.namespace }}/{{ $labels.name }} has kept {{ $value }} shard(s) removed by a scale-down for %(shardUploadStuckFor)s because their final upload to the object store is not done (condition RemovedShardsUploaded). They keep their pods and volumes until it is.' % c,
          ),
        ],
      },
      {
        name: 'zone-aware-federator',
        rules: [
          alert(
            c,
            'ZoneAwareFederatorBackendErrors',
            'sum by (job, endpoint, reason) (rate(zone_aware_federator_endpoint_errors_total{%(federatorSelector)s}[10m])) > 0' % c,
            c.federatorBackendErrorsFor,
            'warning',
            'The rules-federator gets nothing from {{ $labels.endpoint }}.',
            'Requests of the rules-federator to backend {{ $labels.endpoint }} have failed ({{ $labels.reason }}) for %(federatorBackendErrorsFor)s. Its rules and alerts are missing from the federated answers.' % c,
          ),
          alert(
            c,
            'ZoneAwareFederatorPartialAnswers',
            |||
              sum by (job, handler) (rate(zone_aware_federator_partial_responses_total{%(federatorSelector)s}[10m]))
              /
              sum by (job, handler) (rate(zone_aware_federator_requests_total{%(federatorSelector)s}[10m]))
              > %(federatorPartialRatio)s
            ||| % c,
            '15m',
            'warning',
            'The rules-federator answers {{ $labels.handler }} without every backend.',
            '{{ $value | humanizePercentage }} of the answers to {{ $labels.handler }} missed at least one backend: dashboards and alert lists built on them are incomplete.',
          ),
          alert(
            c,
            'ZoneAwareFederatorSlow',
            |||
              histogram_quantile(0.99,
                sum by (job, handler, le) (rate(zone_aware_federator_request_duration_seconds_bucket{%(federatorSelector)s}[10m]))
              ) > %(federatorSlowSeconds)s
            ||| % c,
            '15m',
            'warning',
            'The rules-federator answers {{ $labels.handler }} slowly.',
            'The 99th percentile time to answer {{ $labels.handler }} is {{ $value | humanizeDuration }}.',
          ),
        ],
      },
    ],
  },
}
