// The mixin's settings. Override any of them when importing the mixin:
//   (import 'mixin.libsonnet') + { _config+:: { zauPausedTooLongFor: '2h' } }
// or, for the rendered PrometheusRule, `jsonnet --tla-code 'config={...}' prometheus-rule.jsonnet`.
{
  _config+:: {
    // Selectors of each binary's scrape job. The PodMonitors of config/monitoring/ name the job
    // after the pods' app.kubernetes.io/name label.
    zdbSelector: 'job="zdb-controller"',
    zauSelector: 'job="zau-controller"',
    shardSelector: 'job="shard-controller"',
    federatorSelector: 'job="rules-federator"',
    // Every job above, for the rules that span the binaries.
    controllersSelector: 'job=~"zdb-controller|zau-controller|shard-controller|rules-federator"',
    // The binaries that elect a leader (the federator does not).
    electedSelector: 'job=~"zdb-controller|zau-controller|shard-controller"',
    // The API server's scrape job, for its admission webhook metrics.
    apiserverSelector: 'job="apiserver"',
    // The eviction webhook's name in the ValidatingWebhookConfiguration.
    webhookName: 'eviction.zdb.zonecontrol.k8s.aws',

    // The eviction webhook fails closed: with no replica answering, every drain in the
    // cluster stops. Page quickly.
    webhookDownFor: '2m',
    // p99 time to answer an eviction above which the webhook is "slow" (the API server gives
    // it timeoutSeconds: 5).
    webhookSlowSeconds: 2,
    // Share of evictions refused because the webhook could not decide (API errors,
    // deadlines, conflicts, overload) rather than because of a budget.
    webhookFailingRatio: 0.1,
    // failurePolicy Ignore this long means budgets are skipped whenever a call fails.
    webhookIgnoreFor: '15m',
    // The webhook configuration letting evictions bypass the webhook this long (its rules, path or
    // objectSelector changed, or it is gone): read every 10 s by each replica.
    webhookBypassedFor: '2m',
    // Denied evictions per second, held this long: drains are stuck on budgets.
    denialsPerSecond: 0.5,
    denialsFor: '30m',
    // Unconfirmed evictions (records dropped because their pod still ran 10 s later) a budget
    // may have in 15 minutes before ZoneAwareEvictionsUnconfirmed fires: an eviction refused
    // now and then by a PodDisruptionBudget after the webhook allowed it is one.
    unconfirmedEvictions: 3,
    // Reconciles that fail, as a share of those started.
    reconcileErrorRatio: 0.1,
    reconcileErrorsFor: '15m',
    noLeaderFor: '5m',
    // More leadership acquisitions than this in an hour, per controller.
    leaderChanges: 3,
    // A rollout with old pods left and no progress for this long, while not paused.
    zauStuckSeconds: 3600,
    // A rollout held by an alarm, an alert or by hand (not a bake) for this long.
    // A zone with nodes and none Ready (docs/outages.md): the node lifecycle controller has
    // already waited its grace period (50 s) before marking them.
    zoneDarkFor: '1m',
    zauPausedTooLongFor: '1h',
    // A zone of a ZoneDisruptionBudget with unavailable pods for this long.
    zdbDisruptedTooLongFor: '1h',
    shardNotReadyFor: '15m',
    zoneWithoutShardFor: '10m',
    // A zone's shards all unready past the ShardedPrometheus's zoneFailoverAfter by this many
    // seconds, its zoneless targets still not failed over.
    shardFailoverLateSeconds: 120,
    // Every shard of a zone unready: once per ShardedPrometheus and zone.
    zoneShardsDownFor: '1m',
    shardFailoverMissingFor: '1m',
    shardConfigNotLoadedFor: '10m',
    shardUploadStuckFor: '30m',
    federatorBackendErrorsFor: '15m',
    // Share of the federator's answers that missed at least one backend.
    federatorPartialRatio: 0.05,
    federatorSlowSeconds: 5,

    // Where each alert's runbook section is; the anchor is the alert name in lower case.
    runbookURL: 'https://github.com/zone-aware-controllers/zone-aware-controllers/blob/main/docs/runbooks.md',

    // Dashboards.
    dashboardTags: ['zone-aware-controllers'],
    dashboardRefresh: '30s',
    // The data source variable's default, and the label telling the zones apart.
    datasource: 'prometheus',
    zoneLabel: 'zone',
  },
}
