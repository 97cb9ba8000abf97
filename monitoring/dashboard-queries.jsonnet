// Every query of the dashboards (panel targets and variable queries) as recording rules, so
// `promtool check rules` parses each with Prometheus's own parser (`make mixin-check`). Grafana's
// variables are replaced by values of their type first.
local mixin = import 'mixin.libsonnet';

local substitute(expr) =
  std.strReplace(std.strReplace(expr, '$__rate_interval', '5m'), '$namespace', '.*');

// label_values(metric, label) reads `metric`.
local variableQuery(v) =
  local def = v.definition;
  assert std.startsWith(def, 'label_values(') : 'variable %s: only label_values queries are checked' % v.name;
  std.split(def[std.length('label_values('):], ',')[0];

local queries(dashboard) =
  [
    substitute(target.expr)
    for panel in dashboard.panels
    if std.objectHas(panel, 'targets')
    for target in panel.targets
  ] + [
    variableQuery(v)
    for v in dashboard.templating.list
    if v.type == 'query'
  ];

{
  groups: [
    {
      name: 'dashboard ' + name,
      rules: std.mapWithIndex(
        function(i, expr) { record: 'dashboard:%s:query_%d' % [std.strReplace(std.strReplace(name, '.json', ''), '-', '_'), i], expr: expr },
        queries(mixin.grafanaDashboards[name]),
      ),
    }
    for name in std.objectFields(mixin.grafanaDashboards)
  ],
}
