//! Merging the answers of many Prometheus servers into one (pure).
//!
//! - **Groups** are keyed by `file` + `name` and come out sorted by them, as Prometheus sorts
//!   its own.
//! - **Rules** are keyed by type, name, labels (without the replica labels), query and `for`
//!   (a rule listed twice in one group is two rules).
//! - **Replicas of one shard deduplicate**: of the copies of a rule, the winner is the one that
//!   is firing, else pending, else inactive, else unknown; then the healthy one; then the one
//!   evaluated last; an exact tie keeps the first source.
//! - **Shards never collapse**: the same rule on two shards stays two rules, told apart by the
//!   shard label the merge adds (and which the alerts of each carry too).
//! - **Order**: rules keep the backends' evaluation order: every backend's own order is kept
//!   (rules only some shards have fall in between); where backends contradict each other, the
//!   rule seen first goes first. The copies of one rule on several shards come next to each
//!   other, in shard order.
//! - **Alert instances** of one rule are merged across the replicas of its shard by label set:
//!   the most severe state wins, then the earliest `activeAt`.
//! - **Group metadata** (interval, limit, evaluation time and last evaluation) comes from the
//!   source whose copies won the most rules of the group; a tie goes to the one evaluated last,
//!   then to the first source.

use std::collections::{BTreeMap, HashMap};
use std::hash::{BuildHasher, Hash, Hasher};

use crate::model::{Alert, Labels, Rule, RuleGroup, Text};
use crate::stamp::Stamp;

/// One backend's answer.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Source {
    /// Answers of one shard are replicas of each other and deduplicate; answers of different
    /// shards never do. Empty: the backend is not sharded (and no shard label is added).
    pub shard: String,
    /// The backend's name, for diagnostics.
    pub name: String,
    pub groups: Vec<RuleGroup>,
}

/// How sources are told apart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MergeOptions {
    /// Labels that differ between the replicas of one shard: removed from rule and alert labels.
    pub replica_labels: Vec<String>,
    /// The label that carries the shard on every rule and alert of a sharded source (None: no
    /// label; shards still never collapse).
    pub shard_label: Option<String>,
}

/// What identifies a rule definition within a group (the shard aside), held once per group:
/// the copies of every source are looked up by [`fingerprint`] and compared field by field
/// against it ([`DefKey::is`]), never cloned into a key of their own.
#[derive(Debug, Clone, PartialEq, Eq)]
struct DefKey {
    alerting: bool,
    /// Kept inline when short (most names, many queries): no allocation per definition.
    name: Text,
    /// Without the replica labels.
    labels: Labels,
    query: Text,
    duration_bits: u64,
    /// The n-th copy of the same definition within one group of one source.
    occurrence: usize,
}

/// A definition's number within its group: definitions are numbered in the order they are
/// first seen, which is the order's tie-break.
type DefId = usize;

/// The fields of `rule` that identify it: (alerting, name, query, `for` as bits).
fn identity(rule: &Rule) -> (bool, &str, &str, u64) {
    match rule {
        Rule::Alerting(r) => (true, &r.name, &r.query, r.duration.to_bits()),
        Rule::Recording(r) => (false, &r.name, &r.query, 0.0f64.to_bits()),
    }
}

impl DefKey {
    /// Whether `rule`'s `occurrence`-th copy in one group of one source is this definition.
    fn is(&self, rule: &Rule, occurrence: usize, options: &MergeOptions) -> bool {
        let (alerting, name, query, duration_bits) = identity(rule);
        self.occurrence == occurrence
            && self.alerting == alerting
            && self.duration_bits == duration_bits
            && self.name == name
            && self.query == query
            && self.labels.iter().eq(kept_labels(rule, options))
    }

    fn of(rule: &Rule, occurrence: usize, options: &MergeOptions) -> Self {
        let (alerting, name, query, duration_bits) = identity(rule);
        Self {
            alerting,
            name: Text::from(name),
            labels: kept_labels(rule, options).collect(),
            query: Text::from(query),
            duration_bits,
            occurrence,
        }
    }
}

/// `rule`'s labels without the replica labels.
fn kept_labels<'a>(
    rule: &'a Rule,
    options: &'a MergeOptions,
) -> impl Iterator<Item = (&'a str, &'a str)> + 'a {
    rule.labels()
        .iter()
        .filter(|(name, _)| !is_replica_label(name, options))
}

fn is_replica_label(name: &str, options: &MergeOptions) -> bool {
    options.replica_labels.iter().any(|replica| replica == name)
}

/// The hash of the definition of `rule`, met for the `occurrence`-th time in one group copy:
/// equal definitions hash equal.
fn fingerprint(
    hasher: &impl BuildHasher,
    rule: &Rule,
    occurrence: usize,
    options: &MergeOptions,
) -> u64 {
    let mut state = hasher.build_hasher();
    let (alerting, name, query, duration_bits) = identity(rule);
    (alerting, name, query, duration_bits, occurrence).hash(&mut state);
    for label in kept_labels(rule, options) {
        label.hash(&mut state);
    }
    state.finish()
}

/// The definitions of one group, numbered.
#[derive(Debug, Default)]
struct Definitions {
    keys: Vec<DefKey>,
    /// Fingerprint → the first definition with it; the others (a collision) chained in
    /// `same_fingerprint`, so a definition costs no list of its own.
    by_fingerprint: HashMap<u64, DefId, foldhash::fast::RandomState>,
    /// By definition: the next definition with its fingerprint.
    same_fingerprint: Vec<Option<DefId>>,
    /// The group copy ([`Merger::copies`]) that last used each definition: a definition already
    /// used by this copy is met again, so this rule is its next occurrence.
    last_used: Vec<usize>,
}

impl Definitions {
    /// The definition of `rule` in the group copy `copy`, numbered anew when first seen.
    /// `guess` is the definition the previous copy of the group had at this rule's place: the
    /// copies of a group mostly list the same rules in the same order, and a right guess is
    /// checked field by field without hashing the rule. It is taken only for a first occurrence
    /// not yet used by this copy, exactly when the lookup would find it too.
    fn id(
        &mut self,
        rule: &Rule,
        copy: usize,
        guess: Option<DefId>,
        options: &MergeOptions,
    ) -> DefId {
        if let Some(id) = guess
            && let Some(key) = self.keys.get(id)
            && key.occurrence == 0
            && self.last_used[id] != copy
            && key.is(rule, 0, options)
        {
            self.last_used[id] = copy;
            return id;
        }
        let mut occurrence = 0;
        loop {
            let hash = fingerprint(self.by_fingerprint.hasher(), rule, occurrence, options);
            let first = self.by_fingerprint.get(&hash).copied();
            let mut candidate = first;
            let mut last = None;
            while let Some(id) = candidate
                && !self.keys[id].is(rule, occurrence, options)
            {
                last = Some(id);
                candidate = self.same_fingerprint[id];
            }
            let id = match candidate {
                Some(id) if self.last_used[id] == copy => {
                    occurrence += 1;
                    continue;
                }
                Some(id) => id,
                None => {
                    let id = self.keys.len();
                    match last {
                        Some(last) => self.same_fingerprint[last] = Some(id),
                        None => {
                            self.by_fingerprint.insert(hash, id);
                        }
                    }
                    self.keys.push(DefKey::of(rule, occurrence, options));
                    self.same_fingerprint.push(None);
                    self.last_used.push(copy);
                    id
                }
            };
            self.last_used[id] = copy;
            return id;
        }
    }

    fn len(&self) -> usize {
        self.keys.len()
    }
}

/// How good a copy of a rule is, read once when it is added: the winner's is kept, so adding a
/// copy never reads the winner's fields again (scattered over the heap, by then long out of
/// cache). The better copy is the greater: the more severe state (firing, pending, inactive,
/// unknown), then the healthy one, then the one evaluated last.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct CopyRank {
    state: u8,
    healthy: bool,
    evaluated: Option<jiff::Timestamp>,
}

impl CopyRank {
    fn of(rule: &Rule) -> Self {
        Self {
            state: match rule {
                Rule::Alerting(r) => state_rank(&r.state),
                Rule::Recording(_) => 0,
            },
            healthy: rule.health() == "ok",
            evaluated: rule.last_evaluation().instant(),
        }
    }
}

/// The copies of one rule on one shard.
#[derive(Debug)]
struct Copies {
    /// (source index, rule) of the best copy so far.
    winner: (usize, Rule),
    winner_rank: CopyRank,
    /// The best instance of each alert, by label set (replica labels removed).
    alerts: Instances,
    /// Whether every copy had its alerts excluded (`null`).
    alerts_excluded: bool,
}

/// The copies of one definition, by shard (in shard order), in a list: a B-tree of shards cost
/// a cache miss or two per copy added (its nodes, of eleven copies each, are 4 KB), most of the
/// time the merge spent folding a copy in.
type ShardCopies = Vec<(usize, Copies)>;

/// Past this many instances, a rule's alerts are kept in a B-tree rather than a sorted list.
const FEW_INSTANCES: usize = 16;

/// The best instance of each alert of one rule on one shard, by label set. Most rules have a few
/// instances: a sorted list holds them in one allocation of their size, where a B-tree takes a
/// node of eleven (some 2.6 KB for two alerts, on tens of thousands of rules per merge); a rule
/// with many gets the B-tree, so adding stays logarithmic.
#[derive(Debug)]
enum Instances {
    Few(Vec<(Labels, Instance)>),
    Many(BTreeMap<Labels, Instance>),
}

/// How good an instance of an alert is: the most severe state, then the earliest `activeAt` (a
/// missing one is the worst). Read once when the instance is added, as [`CopyRank`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct AlertRank {
    state: u8,
    earliest: Option<std::cmp::Reverse<jiff::Timestamp>>,
}

impl AlertRank {
    fn of(alert: &Alert) -> Self {
        Self {
            state: state_rank(&alert.state),
            earliest: alert
                .active_at
                .as_ref()
                .and_then(Stamp::instant)
                .map(std::cmp::Reverse),
        }
    }
}

/// The best instance of one label set so far, and its rank.
#[derive(Debug)]
struct Instance {
    rank: AlertRank,
    alert: Alert,
}

impl Instances {
    /// Adds `alert` (its label set `labels`): it replaces the instance of the same label set only
    /// when it is better ([`AlertRank`]).
    fn add(&mut self, labels: Labels, alert: Alert, expected: usize) {
        let instance = Instance {
            rank: AlertRank::of(&alert),
            alert,
        };
        let keep_best = |best: &mut Instance, instance: Instance| {
            if instance.rank > best.rank {
                *best = instance;
            }
        };
        match self {
            Instances::Few(few) => match few.binary_search_by(|(known, _)| known.cmp(&labels)) {
                Ok(at) => keep_best(&mut few[at].1, instance),
                Err(at) if few.len() < FEW_INSTANCES => {
                    if few.capacity() == 0 {
                        few.reserve_exact(expected.min(FEW_INSTANCES));
                    }
                    few.insert(at, (labels, instance));
                }
                Err(_) => {
                    let mut many: BTreeMap<Labels, Instance> =
                        std::mem::take(few).into_iter().collect();
                    many.insert(labels, instance);
                    *self = Instances::Many(many);
                }
            },
            Instances::Many(many) => match many.entry(labels) {
                std::collections::btree_map::Entry::Vacant(vacant) => {
                    vacant.insert(instance);
                }
                std::collections::btree_map::Entry::Occupied(mut best) => {
                    keep_best(best.get_mut(), instance);
                }
            },
        }
    }

    /// Every instance, sorted by label set.
    fn into_sorted(self) -> impl Iterator<Item = (Labels, Alert)> {
        let sorted = match self {
            Instances::Few(few) => few,
            Instances::Many(many) => many.into_iter().collect(),
        };
        sorted
            .into_iter()
            .map(|(labels, instance)| (labels, instance.alert))
    }
}

#[derive(Debug, Default)]
struct GroupParts {
    definitions: Definitions,
    /// The definitions' evaluation order.
    order: Order,
    /// By definition: shard order → copies.
    rules: Vec<ShardCopies>,
    /// (source index, the source's group) of every source that has the group.
    metadata: Vec<(usize, RuleGroup)>,
    /// The definitions of the group's last copy, in its order: the guesses for the next.
    last_ids: Vec<DefId>,
}

/// The one value every rule of `groups` gives `label` (None: a rule without it, rules that
/// differ, or no rule): the shard of a backend that does not name its own, such as a Thanos
/// sidecar, which puts its Prometheus's external labels on every rule.
pub fn shared_label<'a>(groups: &'a [RuleGroup], label: &str) -> Option<&'a str> {
    let mut values = groups
        .iter()
        .flat_map(|group| &group.rules)
        .map(|rule| rule.labels().get(label));
    let first = values.next()??;
    values.all(|value| value == Some(first)).then_some(first)
}

/// Merges `sources` (in a stable order: it decides exact ties) into one list of groups.
pub fn merge(sources: &[Source], options: &MergeOptions) -> Vec<RuleGroup> {
    let mut merger = Merger::new(options.clone());
    for source in sources {
        merger.add(source.clone());
    }
    merger.finish()
}

/// The merge, one source at a time: each answer is folded in as it arrives and dropped, so at
/// most one backend's answer is held besides the merged state. Sources are numbered in the
/// order they are added (it decides exact ties).
#[derive(Debug)]
pub struct Merger {
    options: MergeOptions,
    /// `options` for the definitions of a sharded source: its shard label names no definition
    /// (the source's shard is put on its rules and alerts when the merge is finished), so the
    /// same rule on two shards is one definition, as over HTTP where the shard is not on the
    /// rules.
    sharded: MergeOptions,
    /// Shards in order of first appearance.
    shard_order: HashMap<String, usize>,
    /// Each added source's shard.
    shards: Vec<String>,
    groups: BTreeMap<(String, String), GroupParts>,
    /// Group copies folded so far (a source listing a group twice gives two).
    copies: usize,
}

impl Merger {
    pub fn new(options: MergeOptions) -> Self {
        let mut sharded = options.clone();
        sharded.replica_labels.extend(options.shard_label.clone());
        Self {
            options,
            sharded,
            shard_order: HashMap::new(),
            shards: Vec::new(),
            groups: BTreeMap::new(),
            copies: 0,
        }
    }

    /// Folds one source's answer in.
    pub fn add(&mut self, source: Source) {
        let index = self.shards.len();
        let next = self.shard_order.len();
        let shard = *self.shard_order.entry(source.shard.clone()).or_insert(next);
        let identity = if source.shard.is_empty() {
            &self.options
        } else {
            &self.sharded
        };
        self.shards.push(source.shard);
        let mut ids = Vec::new();
        for mut group in source.groups {
            let rules = std::mem::take(&mut group.rules);
            let parts = self
                .groups
                .entry((group.file.clone(), group.name.clone()))
                .or_default();
            let copy = self.copies;
            self.copies += 1;
            ids.clear();
            ids.extend(rules.iter().enumerate().map(|(i, rule)| {
                let guess = parts.last_ids.get(i).copied();
                parts.definitions.id(rule, copy, guess, identity)
            }));
            parts.last_ids.clone_from(&ids);
            parts.order.add(&ids, parts.definitions.len());
            parts.rules.resize_with(parts.definitions.len(), Vec::new);
            for (&id, rule) in ids.iter().zip(rules) {
                add_copy(&mut parts.rules[id], shard, index, rule, &self.options);
            }
            parts.metadata.push((index, group));
        }
    }

    /// The merged groups, sorted by file and name.
    pub fn finish(self) -> Vec<RuleGroup> {
        let Merger {
            options,
            shards,
            groups,
            ..
        } = self;
        groups
            .into_values()
            .map(|parts| finish_group(parts, &shards, &options))
            .collect()
    }
}

/// The evaluation order of one group's definitions, from every source's own order.
#[derive(Debug, Default)]
struct Order {
    /// By definition: the definitions some source evaluates right after it.
    next: Vec<Successors>,
}

/// The definitions evaluated right after one: mostly one, held inline (a list of its own for
/// each of the group's definitions cost an allocation each, and a group of 50 shards' rules
/// has hundreds).
#[derive(Debug, Default)]
struct Successors {
    first: Option<DefId>,
    more: Vec<DefId>,
}

impl Successors {
    fn iter(&self) -> impl Iterator<Item = DefId> + '_ {
        self.first.into_iter().chain(self.more.iter().copied())
    }

    fn add(&mut self, id: DefId) {
        match self.first {
            None => self.first = Some(id),
            Some(first) if first == id => {}
            Some(_) if self.more.contains(&id) => {}
            Some(_) => self.more.push(id),
        }
    }
}

impl Order {
    /// Adds one source's order, of definitions numbered below `count`.
    fn add(&mut self, ids: &[DefId], count: usize) {
        self.next.resize_with(count, Successors::default);
        for pair in ids.windows(2) {
            self.next[pair[0]].add(pair[1]);
        }
    }

    /// Every definition once, each source's order kept (a topological order of "evaluated right
    /// after"); among the choices, the one seen first (the lowest number). Where sources
    /// disagree (a cycle), the one seen first goes first. The choices are kept sorted, so a
    /// group of n definitions takes n log n steps, not n² (hundreds per group with many shards).
    fn resolve(self) -> Vec<DefId> {
        let count = self.next.len();
        let mut waiting = vec![0usize; count];
        for next in self.next.iter().flat_map(Successors::iter) {
            waiting[next] += 1;
        }
        let mut ready: std::collections::BTreeSet<DefId> =
            (0..count).filter(|&id| waiting[id] == 0).collect();
        let mut placed = vec![false; count];
        let mut lowest_unplaced = 0;
        let mut order = Vec::with_capacity(count);
        while order.len() < count {
            let id = match ready.pop_first() {
                Some(id) => id,
                None => {
                    while placed[lowest_unplaced] {
                        lowest_unplaced += 1;
                    }
                    lowest_unplaced
                }
            };
            // Placed already when a cycle forced it out before its turn.
            if std::mem::replace(&mut placed[id], true) {
                continue;
            }
            order.push(id);
            for next in self.next[id].iter() {
                waiting[next] = waiting[next].saturating_sub(1);
                if waiting[next] == 0 && !placed[next] {
                    ready.insert(next);
                }
            }
        }
        order
    }
}

fn state_rank(state: &str) -> u8 {
    match state {
        "firing" => 3,
        "pending" => 2,
        "inactive" => 1,
        _ => 0,
    }
}

fn add_copy(
    copies: &mut ShardCopies,
    shard: usize,
    source: usize,
    mut rule: Rule,
    options: &MergeOptions,
) {
    let alerts = match &mut rule {
        Rule::Alerting(r) => r.alerts.take(),
        Rule::Recording(_) => Some(Vec::new()),
    };
    let rank = CopyRank::of(&rule);
    // Answers mostly come shard after shard: the copy of another replica is the last one, or
    // this is the first copy of a new last shard; anything else is searched for.
    let at = match copies.last() {
        Some((last, _)) if *last == shard => Ok(copies.len() - 1),
        Some((last, _)) if *last > shard => {
            copies.binary_search_by_key(&shard, |(known, _)| *known)
        }
        _ => Err(copies.len()),
    };
    let entry = match at {
        Err(at) => {
            copies.insert(
                at,
                (
                    shard,
                    Copies {
                        winner: (source, rule),
                        winner_rank: rank,
                        alerts: Instances::Few(Vec::new()),
                        alerts_excluded: true,
                    },
                ),
            );
            &mut copies[at].1
        }
        Ok(at) => {
            let entry = &mut copies[at].1;
            // An exact tie keeps the first source.
            if rank > entry.winner_rank {
                entry.winner = (source, rule);
                entry.winner_rank = rank;
            }
            entry
        }
    };
    if let Some(alerts) = alerts {
        entry.alerts_excluded = false;
        let expected = alerts.len();
        for mut alert in alerts {
            // The label set moves into the key (given back when the group is finished).
            let mut labels = std::mem::take(&mut alert.labels);
            labels.remove_all(&options.replica_labels);
            entry.alerts.add(labels, alert, expected);
        }
    }
}

fn finish_group(parts: GroupParts, shards: &[String], options: &MergeOptions) -> RuleGroup {
    let GroupParts {
        order,
        mut rules,
        metadata,
        ..
    } = parts;
    let mut wins: HashMap<usize, usize> = HashMap::new();
    // One rule per definition and shard.
    let mut merged = Vec::with_capacity(rules.iter().map(Vec::len).sum());
    for id in order.resolve() {
        let Some(copies) = rules.get_mut(id).map(std::mem::take) else {
            continue;
        };
        for (_, copies) in copies {
            let (source, mut rule) = copies.winner;
            *wins.entry(source).or_default() += 1;
            let shard = &shards[source];
            let label = |mut labels: Labels| {
                if let Some(name) = &options.shard_label
                    && !shard.is_empty()
                {
                    labels.set(name, shard);
                }
                labels
            };
            // The alerts' label sets lost their replica labels when they were added.
            let mut labels = std::mem::take(rule.labels_mut());
            labels.remove_all(&options.replica_labels);
            *rule.labels_mut() = label(labels);
            if let Rule::Alerting(alerting) = &mut rule {
                alerting.alerts = (!copies.alerts_excluded).then(|| {
                    copies
                        .alerts
                        .into_sorted()
                        .map(|(labels, mut alert)| {
                            alert.labels = label(labels);
                            alert
                        })
                        .collect()
                });
            }
            merged.push(rule);
        }
    }
    // The group's metadata from the source that won the most rules, then the latest evaluated.
    let best = metadata.iter().max_by(|(a, ga), (b, gb)| {
        let won = |i: &usize| wins.get(i).copied().unwrap_or(0);
        won(a)
            .cmp(&won(b))
            .then_with(|| {
                ga.last_evaluation
                    .instant()
                    .cmp(&gb.last_evaluation.instant())
            })
            // max_by keeps the last of equals: prefer the earlier source.
            .then_with(|| b.cmp(a))
    });
    let mut group = best.map(|(_, group)| group.clone()).unwrap_or_default();
    group.rules = merged;
    group
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::model::{AlertingRule, RecordingRule};

    /// The order as first written: of the definitions not yet placed, the lowest whose
    /// predecessors are all placed, else the lowest (n² steps).
    fn resolved_plainly(next: &[Vec<DefId>]) -> Vec<DefId> {
        let mut waiting = vec![0usize; next.len()];
        for &id in next.iter().flatten() {
            waiting[id] += 1;
        }
        let mut remaining: std::collections::BTreeSet<DefId> = (0..next.len()).collect();
        let mut order = Vec::new();
        while let Some(id) = remaining
            .iter()
            .find(|&&id| waiting[id] == 0)
            .or_else(|| remaining.iter().next())
            .copied()
        {
            remaining.remove(&id);
            for &after in &next[id] {
                waiting[after] = waiting[after].saturating_sub(1);
            }
            order.push(id);
        }
        order
    }

    /// The sorted choices give the very order of the plain way, cycles (sources that disagree)
    /// included, on random graphs of up to 40 definitions.
    #[test]
    fn the_order_is_the_plain_ways() {
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut random = |below: usize| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % below as u64) as usize
        };
        for _ in 0..2_000 {
            let count = 1 + random(40);
            let mut order = Order::default();
            let mut plain = vec![Vec::new(); count];
            for _ in 0..random(4) + 1 {
                let ids: Vec<DefId> = (0..random(count) + 1).map(|_| random(count)).collect();
                order.add(&ids, count);
                for pair in ids.windows(2) {
                    if !plain[pair[0]].contains(&pair[1]) {
                        plain[pair[0]].push(pair[1]);
                    }
                }
            }
            assert_eq!(order.resolve(), resolved_plainly(&plain), "{plain:?}");
        }
    }

    /// A shard is read off the rules only when every rule carries the one same value.
    #[test]
    fn a_shard_shared_by_every_rule_is_read_back() {
        let with = |shard: Option<&str>| {
            let mut rule = recording("r");
            if let Some(shard) = shard {
                rule.labels_mut().insert("shard", shard);
            }
            rule
        };
        let groups = |rules: Vec<Rule>| vec![group("f", "g", "", rules)];
        let both = groups(vec![with(Some("1")), with(Some("1"))]);
        assert_eq!(shared_label(&both, "shard"), Some("1"));
        for (groups, why) in [
            (groups(vec![with(Some("1")), with(Some("2"))]), "two shards"),
            (groups(vec![with(Some("1")), with(None)]), "a rule without"),
            (groups(Vec::new()), "no rule"),
        ] {
            assert_eq!(shared_label(&groups, "shard"), None, "{why}");
        }
    }

    /// The sources of these tests: shards told apart by `shard`, replicas by
    /// `prometheus_replica` or `replica`.
    fn sharded() -> MergeOptions {
        MergeOptions {
            replica_labels: vec!["prometheus_replica".to_string(), "replica".to_string()],
            shard_label: Some("shard".to_string()),
        }
    }

    fn alerting(name: &str, state: &str, last: &str, alerts: Vec<Alert>) -> Rule {
        Rule::Alerting(AlertingRule {
            state: state.into(),
            name: name.into(),
            query: format!("{name}_expr"),
            health: "ok".into(),
            last_evaluation: last.into(),
            alerts: Some(alerts),
            ..AlertingRule::default()
        })
    }

    fn recording(name: &str) -> Rule {
        Rule::Recording(RecordingRule {
            name: name.into(),
            query: format!("{name}_expr"),
            health: "ok".into(),
            ..RecordingRule::default()
        })
    }

    fn alert(labels: &[(&str, &str)], state: &str, at: &str) -> Alert {
        Alert {
            labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            state: state.into(),
            active_at: Some(at.into()),
            value: "1e+00".into(),
            ..Alert::default()
        }
    }

    fn group(file: &str, name: &str, last: &str, rules: Vec<Rule>) -> RuleGroup {
        RuleGroup {
            name: name.into(),
            file: file.into(),
            rules,
            interval: 15.0,
            last_evaluation: last.into(),
            ..RuleGroup::default()
        }
    }

    fn source(shard: &str, name: &str, groups: Vec<RuleGroup>) -> Source {
        Source {
            shard: shard.into(),
            name: name.into(),
            groups,
        }
    }

    const T1: &str = "2026-11-25T12:00:01Z";
    const T2: &str = "2026-11-25T12:00:02Z";

    #[test]
    fn replicas_deduplicate_firing_first_and_alerts_merge_by_labels() {
        let a = source(
            "0",
            "a",
            vec![group(
                "f",
                "g",
                T2,
                vec![
                    alerting(
                        "X",
                        "pending",
                        T2,
                        vec![alert(
                            &[("alertname", "X"), ("pod", "p1")],
                            "pending",
                            "2026-11-25T11:00:00Z",
                        )],
                    ),
                    recording("r"),
                ],
            )],
        );
        let b = source(
            "0",
            "b",
            vec![group(
                "f",
                "g",
                T1,
                vec![
                    alerting(
                        "X",
                        "firing",
                        T1,
                        vec![
                            alert(
                                &[
                                    ("alertname", "X"),
                                    ("pod", "p1"),
                                    ("prometheus_replica", "b"),
                                ],
                                "firing",
                                "2026-11-25T11:30:00Z",
                            ),
                            alert(
                                &[("alertname", "X"), ("pod", "p2")],
                                "pending",
                                "2026-11-25T11:40:00Z",
                            ),
                        ],
                    ),
                    recording("r"),
                ],
            )],
        );
        let merged = merge(&[a, b], &sharded());
        assert_eq!(merged.len(), 1);
        let group = &merged[0];
        assert_eq!(group.rules.len(), 2, "one copy of each rule");
        let Rule::Alerting(x) = &group.rules[0] else {
            panic!()
        };
        assert_eq!(x.state, "firing", "the firing replica wins");
        assert_eq!(x.last_evaluation, T1);
        let alerts = x.alerts.as_ref().unwrap();
        assert_eq!(alerts.len(), 2, "{alerts:?}");
        assert_eq!(alerts[0].state, "firing", "most severe state");
        assert!(!alerts[0].labels.contains_key("prometheus_replica"));
        assert_eq!(&alerts[0].labels["shard"], "0");
        // Metadata from the replica whose rules won (b won X; r tied, the first source a kept it).
        assert_eq!(
            group.last_evaluation, T2,
            "a and b won one each: the latest evaluated"
        );
    }

    #[test]
    fn shards_never_collapse_and_keep_evaluation_order() {
        let rules = || vec![recording("z_first"), recording("a_second")];
        let merged = merge(
            &[
                source("0", "a", vec![group("f", "g", T1, rules())]),
                source("1", "b", vec![group("f", "g", T1, rules())]),
            ],
            &sharded(),
        );
        let names: Vec<(String, String)> = merged[0]
            .rules
            .iter()
            .map(|r| (r.name().to_string(), r.labels()["shard"].to_string()))
            .collect();
        assert_eq!(
            names,
            [
                ("z_first", "0"),
                ("z_first", "1"),
                ("a_second", "0"),
                ("a_second", "1")
            ]
            .map(|(a, b)| (a.to_string(), b.to_string()))
        );
    }

    /// The ranks order copies and instances as the module says, each rule checked on its own:
    /// state first, then health, then the later evaluation (a missing one the oldest); for
    /// instances, state first, then the earlier `activeAt` (a missing one the worst).
    #[test]
    fn ranks_order_copies_and_instances_as_documented() {
        let copy = |state: &str, health: &str, last: &str| {
            let mut rule = alerting("X", state, last, vec![]);
            if let Rule::Alerting(r) = &mut rule {
                r.health = health.into();
            }
            CopyRank::of(&rule)
        };
        // (state, health, last evaluation) of the better copy, of the worse one, and why.
        let better = [
            (
                ("firing", "err", T1),
                ("pending", "ok", T2),
                "state before health",
            ),
            (
                ("pending", "err", T2),
                ("inactive", "ok", T2),
                "pending over inactive",
            ),
            (
                ("inactive", "ok", T1),
                ("unknown", "ok", T2),
                "inactive over unknown",
            ),
            (
                ("firing", "ok", T1),
                ("firing", "err", T2),
                "health before evaluation",
            ),
            (
                ("firing", "ok", T2),
                ("firing", "ok", T1),
                "evaluated later",
            ),
            (
                ("firing", "ok", T1),
                ("firing", "ok", ""),
                "evaluated at all",
            ),
        ];
        for ((s1, h1, t1), (s2, h2, t2), why) in better {
            let (a, b) = (copy(s1, h1, t1), copy(s2, h2, t2));
            assert!(a > b, "{why}: {a:?} > {b:?}");
        }
        let instance = |state: &str, at: Option<&str>| {
            let mut alert = alert(&[], state, at.unwrap_or_default());
            alert.active_at = at.map(Stamp::from);
            AlertRank::of(&alert)
        };
        let early = Some("2026-11-25T11:00:00Z");
        let late = Some("2026-11-25T12:00:00Z");
        let better = [
            (
                instance("firing", late),
                instance("pending", early),
                "state first",
            ),
            (
                instance("firing", early),
                instance("firing", late),
                "active earlier",
            ),
            (
                instance("firing", late),
                instance("firing", None),
                "active at all",
            ),
        ];
        for (a, b, why) in better {
            assert!(a > b, "{why}: {a:?} > {b:?}");
        }
        assert_eq!(copy("firing", "ok", T1), copy("firing", "ok", T1), "a tie");
    }

    /// A shard's copy that comes after a later shard's (answers interleaved, and only the
    /// shard's second replica has the rule) still takes its shard's place.
    #[test]
    fn a_copy_of_an_earlier_shard_coming_late_takes_its_place() {
        let merged = merge(
            &[
                source("0", "a", vec![group("f", "g", T1, vec![])]),
                source("1", "a", vec![group("f", "g", T1, vec![recording("r")])]),
                source("2", "a", vec![group("f", "g", T1, vec![recording("r")])]),
                source("0", "b", vec![group("f", "g", T1, vec![recording("r")])]),
                source("1", "b", vec![group("f", "g", T1, vec![recording("r")])]),
            ],
            &sharded(),
        );
        let shards: Vec<&str> = merged[0]
            .rules
            .iter()
            .map(|r| &r.labels()["shard"])
            .collect();
        assert_eq!(shards, ["0", "1", "2"]);
    }

    #[test]
    fn a_rule_only_one_shard_has_keeps_its_place() {
        let merged = merge(
            &[
                source(
                    "0",
                    "a",
                    vec![group("f", "g", T1, vec![recording("a"), recording("c")])],
                ),
                source(
                    "1",
                    "b",
                    vec![group(
                        "f",
                        "g",
                        T1,
                        vec![recording("a"), recording("b"), recording("c")],
                    )],
                ),
            ],
            &MergeOptions {
                shard_label: None,
                ..sharded()
            },
        );
        let names: Vec<&str> = merged[0].rules.iter().map(Rule::name).collect();
        assert_eq!(names, ["a", "a", "b", "c", "c"]);
        assert!(
            merged[0].rules[0].labels().is_empty(),
            "no shard label asked for"
        );
    }

    #[test]
    fn groups_sort_by_file_then_name_and_excluded_alerts_stay_null() {
        let mut rule = alerting("X", "inactive", T1, Vec::new());
        if let Rule::Alerting(r) = &mut rule {
            r.alerts = None;
        }
        let merged = merge(
            &[source(
                "",
                "a",
                vec![
                    group("b.yaml", "g", T1, vec![rule.clone()]),
                    group("a.yaml", "z", T1, vec![rule.clone()]),
                    group("a.yaml", "g", T1, vec![rule]),
                ],
            )],
            &sharded(),
        );
        let keys: Vec<(&str, &str)> = merged
            .iter()
            .map(|g| (g.file.as_str(), g.name.as_str()))
            .collect();
        assert_eq!(keys, [("a.yaml", "g"), ("a.yaml", "z"), ("b.yaml", "g")]);
        let Rule::Alerting(x) = &merged[0].rules[0] else {
            panic!()
        };
        assert_eq!(x.alerts, None);
        assert!(
            !x.labels.contains_key("shard"),
            "an unsharded source gets no shard label"
        );
    }

    /// The names of the merged rules of two replicas of one shard, each listing one group's
    /// recording rules as given.
    fn merged_names(a: &[&str], b: &[&str]) -> Vec<String> {
        let replica = |name: &str, rules: &[&str]| {
            let rules = rules.iter().map(|rule| recording(rule)).collect();
            source("0", name, vec![group("f", "g", T1, rules)])
        };
        let merged = merge(&[replica("a", a), replica("b", b)], &sharded());
        merged[0]
            .rules
            .iter()
            .map(|r| r.name().to_string())
            .collect()
    }

    #[test]
    fn the_same_rule_twice_in_a_group_is_two_rules() {
        assert_eq!(merged_names(&["r", "r"], &["r", "r"]), ["r", "r"]);
    }

    /// A rule listed twice by a copy of a group whose previous copy listed it once, elsewhere:
    /// the second is a second rule, not the first again (the previous copy's definition at that
    /// place is taken only when this copy has not used it yet).
    #[test]
    fn a_rule_twice_after_a_copy_that_listed_it_once_is_two_rules() {
        assert_eq!(merged_names(&["x", "r"], &["r", "r"]), ["x", "r", "r"]);
    }

    /// A rule's instances are kept sorted and the best of each label set wins, as in a B-tree,
    /// whether they are few or many (past [`FEW_INSTANCES`] they move into one).
    #[test]
    fn instances_few_or_many_keep_the_best_of_each_label_set() {
        for count in [1, 3, FEW_INSTANCES, FEW_INSTANCES + 1, 100] {
            let mut instances = Instances::Few(Vec::new());
            let mut expected: BTreeMap<Labels, Alert> = BTreeMap::new();
            // Each label set three times, in a scrambled order: pending, firing later, then
            // firing earlier (the best); then a pending one again, which does not replace it.
            let states = [
                ("pending", "2026-11-25T11:00:00Z"),
                ("firing", "2026-11-25T11:30:00Z"),
                ("firing", "2026-11-25T11:10:00Z"),
                ("pending", "2026-11-25T10:00:00Z"),
            ];
            for (state, at) in states {
                for n in (0..count).map(|i| (i * 37) % count) {
                    let labels: Labels = [("pod", format!("p{n:03}"))].into_iter().collect();
                    let instance = alert(&[], state, at);
                    instances.add(labels.clone(), instance.clone(), count);
                    match expected.entry(labels) {
                        std::collections::btree_map::Entry::Vacant(vacant) => {
                            vacant.insert(instance);
                        }
                        std::collections::btree_map::Entry::Occupied(mut best) => {
                            if AlertRank::of(&instance) > AlertRank::of(best.get()) {
                                *best.get_mut() = instance;
                            }
                        }
                    }
                }
            }
            assert_eq!(
                matches!(instances, Instances::Many(_)),
                count > FEW_INSTANCES,
                "{count} instances"
            );
            let kept: Vec<_> = instances.into_sorted().collect();
            assert_eq!(kept, expected.into_iter().collect::<Vec<_>>(), "{count}");
            assert!(
                kept.iter().all(|(_, a)| a
                    .active_at
                    .as_ref()
                    .is_some_and(|at| at == "2026-11-25T11:10:00Z")),
                "the earliest firing one of each"
            );
        }
    }

    /// A source that lists one group twice gives two copies of it: the rule of each is the
    /// first of its copy, the same definition (not the rule twice in one group).
    #[test]
    fn a_group_listed_twice_is_two_copies_of_it() {
        let twice = vec![
            group("f", "g", T1, vec![recording("r")]),
            group("f", "g", T2, vec![recording("r")]),
        ];
        let merged = merge(&[source("0", "a", twice)], &sharded());
        assert_eq!(merged.len(), 1);
        assert_eq!(merged[0].rules.len(), 1);
    }
}
