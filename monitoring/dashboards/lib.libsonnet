// A small builder for Grafana dashboard JSON (schemaVersion 39): time series and stat panels
// over one Prometheus data source variable. Panels are laid out left to right, 24 columns wide.
{
  target(expr, legend='', refId='A'):: {
    datasource: { type: 'prometheus', uid: '${datasource}' },
    expr: expr,
    legendFormat: legend,
    refId: refId,
  },

  // targets: a list of [expr, legend] pairs.
  local withTargets(targets) = [
    $.target(t[0], t[1], std.char(std.codepoint('A') + i))
    for i in std.range(0, std.length(targets) - 1)
    for t in [targets[i]]
  ],

  timeseries(title, targets, unit='short', description='', stack=false):: {
    type: 'timeseries',
    title: title,
    description: description,
    datasource: { type: 'prometheus', uid: '${datasource}' },
    targets: withTargets(targets),
    fieldConfig: {
      defaults: {
        unit: unit,
        custom: { fillOpacity: if stack then 40 else 10, stacking: { mode: if stack then 'normal' else 'none' } },
      },
      overrides: [],
    },
    options: { legend: { displayMode: 'table', placement: 'bottom', calcs: ['lastNotNull', 'max'] }, tooltip: { mode: 'multi' } },
  },

  stat(title, targets, unit='short', description='', thresholds=null):: {
    type: 'stat',
    title: title,
    description: description,
    datasource: { type: 'prometheus', uid: '${datasource}' },
    targets: withTargets(targets),
    fieldConfig: {
      defaults: {
        unit: unit,
        thresholds: if thresholds == null then { mode: 'absolute', steps: [{ color: 'green', value: null }] } else thresholds,
      },
      overrides: [],
    },
    options: { reduceOptions: { calcs: ['lastNotNull'] }, colorMode: 'value', graphMode: 'area' },
  },

  // Red from `limit` on: for counts where more is worse.
  redFrom(limit):: { mode: 'absolute', steps: [{ color: 'green', value: null }, { color: 'red', value: limit }] },
  // Red below `limit`: for counts where fewer is worse.
  redBelow(limit):: { mode: 'absolute', steps: [{ color: 'red', value: null }, { color: 'green', value: limit }] },

  row(title):: { type: 'row', title: title, collapsed: false, panels: [] },

  // A query variable over the values of `label` in `metric`.
  variable(name, label, metric, all=true):: {
    type: 'query',
    name: name,
    label: name,
    datasource: { type: 'prometheus', uid: '${datasource}' },
    query: { query: 'label_values(%s, %s)' % [metric, label], refId: 'StandardVariableQuery' },
    definition: 'label_values(%s, %s)' % [metric, label],
    refresh: 2,
    includeAll: all,
    multi: all,
    allValue: '.*',
    current: {},
    sort: 1,
  },

  // Lays `rows` (lists of panels; a row title first when it is a string) out on the grid:
  // each row's panels share its width equally, `height` units tall.
  layout(rows, height=8)::
    local place(acc, row) =
      local titled = std.isString(row[0]);
      local panels = if titled then row[1:] else row;
      local width = std.floor(24 / std.length(panels));
      local header = if titled then [$.row(row[0]) + { gridPos: { x: 0, y: acc.y, w: 24, h: 1 } }] else [];
      local y = acc.y + (if titled then 1 else 0);
      {
        y: y + height,
        panels: acc.panels + header + [
          panels[i] + { gridPos: { x: i * width, y: y, w: width, h: height } }
          for i in std.range(0, std.length(panels) - 1)
        ],
      };
    local placed = std.foldl(place, rows, { y: 0, panels: [] });
    [placed.panels[i] + { id: i + 1 } for i in std.range(0, std.length(placed.panels) - 1)],

  dashboard(config, uid, title, description, variables, rows):: {
    uid: uid,
    title: title,
    description: description,
    tags: config.dashboardTags,
    editable: true,
    timezone: 'utc',
    refresh: config.dashboardRefresh,
    time: { from: 'now-6h', to: 'now' },
    schemaVersion: 39,
    graphTooltip: 1,
    templating: {
      list: [{
        type: 'datasource',
        name: 'datasource',
        label: 'Data source',
        query: 'prometheus',
        current: { text: config.datasource, value: config.datasource },
      }] + variables,
    },
    panels: $.layout(rows),
  },
}
