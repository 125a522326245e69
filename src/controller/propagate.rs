//! Propagation (docs/behaviour.md §7): once a source's change has settled, every Deployment, StatefulSet,
//! DaemonSet and CronJob still on an older, unheld pin of it (or on its plain name) gets the
//! `confighistory.io/propagate` trigger, and the webhook re-pins while admitting that update.
//! When no workload is behind any more, the source records the head as propagated.
//!
//! [`due_propagations`] is the decision, a pure function of the watch cache and the clock.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use crate::cache::{SourceInfo, SourceKey, State};
use crate::model::ids::{self, SourceId};
use crate::model::kinds::Kind;
use crate::model::meta::Meta;
use crate::model::names;
use crate::model::policy::{self, Mode, Policy};
use crate::model::selector::Selector;
use crate::model::source::{self, hold_stands};
use crate::model::sourcekinds::Never;

/// (kind, namespace, name) of a workload.
pub type WorkloadKey = crate::cache::ObjectKey;

/// A change of one source that has not been propagated yet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Change {
    pub head: String,
    /// When confighistory saw the change (ms since the epoch).
    pub changed_ms: i64,
    /// `changed_ms` plus the settle window.
    pub due_ms: i64,
    /// False once the source is no longer versioned: its workloads move to the plain name.
    pub versioned: bool,
    /// A full read showed the source mutable. The cache's records are metadata, which does not
    /// say; nothing is written for a change until it is known (docs/behaviour.md §3: an immutable ConfigMap,
    /// even a former source, is never touched).
    pub known_mutable: bool,
}

/// One workload update: the trigger naming every stale source (source → head).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    pub kind: Kind,
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub trigger: BTreeMap<SourceId, String>,
    /// Sources of `trigger` whose pin was held (an undo) and changed after the hold: the move
    /// releases the hold (docs/behaviour.md §2), which the workload's owner is told with an Event.
    pub released: Vec<SourceId>,
    /// Repair only: sources of `trigger` going back to the snapshot whose adoption record lists
    /// the workload's plain template (an undo admitted while the webhook was away), not the head.
    pub undone: Vec<SourceId>,
    /// Repair only: sources of `trigger` whose config the workload's revision ran with cannot be
    /// told (an undo while the webhook was away to a revision from before the install that no
    /// adoption record lists): to the head, with no adoption record and a ConfigUnknown Event.
    pub unknown: Vec<SourceId>,
}

impl Plan {
    pub fn key(&self) -> WorkloadKey {
        (self.kind, self.namespace.as_str().into(), self.name.as_str().into())
    }
    pub fn trigger_value(&self) -> String {
        names::format_trigger(&self.trigger)
    }
}

/// How long a change-cause confighistory writes may be: `kubectl rollout history` prints it on one
/// line.
pub const MAX_CHANGE_CAUSE: usize = 200;

/// One source of a trigger as the change-cause names it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Changed {
    /// `pricing-config`, or `secret/db`.
    pub source: String,
    /// Who wrote the content the workload moves to: the source's `changed-by`.
    pub by: Option<String>,
    /// What changed between the content the workload ran and that one
    /// (`admission::settings::summary`): ConfigMaps only, when both were read.
    pub what: Option<String>,
}

/// The `kubernetes.io/change-cause` a revision confighistory makes carries (docs/behaviour.md
/// §7.9), so `kubectl rollout history` explains it: `config pricing-config changed by alice:
/// settings removed [discount_rules_path], added [rules.discount_path]` (each source of the
/// trigger, `; ` between them, with the author its `changed-by` records and what changed, when
/// known), or, for a repair, `config pricing-config pinned (admitted while confighistory was
/// unreachable)`. `None` when the workload carries a change-cause of its own: one that is not
/// the one confighistory last wrote (`own`, its `confighistory.io/change-cause`), which is never
/// overwritten.
pub fn change_cause(existing: Option<&str>, own: Option<&str>, sources: &[Changed], repair: bool) -> Option<String> {
    if existing.is_some_and(|e| Some(e) != own) {
        return None;
    }
    let parts: Vec<String> = sources
        .iter()
        .map(|c| {
            if repair {
                return c.source.clone();
            }
            // The author is the source's annotation, which anyone could write while the webhook
            // was away: escaped, so `kubectl rollout history` shows no control character raw.
            let mut part = match &c.by {
                // `;` too: it separates the sources, and a forged author must not add one.
                Some(by) => format!("{} changed by {}", c.source, crate::model::text::escape_in_cause(by)),
                None => format!("{} changed", c.source),
            };
            if let Some(what) = &c.what {
                part.push_str(": ");
                part.push_str(what);
            }
            part
        })
        .collect();
    let (tail, separator) = if repair { (" pinned (admitted while confighistory was unreachable)", ", ") } else { ("", "; ") };
    let listed = crate::model::text::fit_list_by(&parts, MAX_CHANGE_CAUSE.saturating_sub(tail.len() + 7), separator);
    let mut cause = format!("config {listed}{tail}");
    if cause.len() > MAX_CHANGE_CAUSE {
        let mut cut = MAX_CHANGE_CAUSE - 1;
        while !cause.is_char_boundary(cut) {
            cut -= 1;
        }
        cause.truncate(cut);
        cause.push('…');
    }
    Some(cause)
}

/// Everything one pass decides.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Propagation {
    /// Workload updates to make now.
    pub plans: Vec<Plan>,
    /// Settled sources that no workload is behind on any more: record `propagated = head`.
    pub done: Vec<(String, SourceId, String)>,
    /// Changes still inside their settle window.
    pub waiting: usize,
    /// Earliest time (ms) something waiting becomes due.
    pub next_due_ms: Option<i64>,
    /// Per namespace: workloads with a pin that is not the head, and held pins.
    pub behind: BTreeMap<String, u64>,
    pub held: BTreeMap<String, u64>,
    /// Sources with a pending change whose immutability the cache does not know: read them,
    /// and the workloads behind on them wait until then.
    pub unknown: Vec<SourceKey>,
    /// Every pending change the loops act on (settled or not, done or not), for the
    /// propagation SLI (`controller::sli`), sorted.
    pub pending: Vec<(SourceKey, Change)>,
}

/// Parses an RFC 3339 time into ms since the epoch.
pub fn parse_time_ms(s: &str) -> Option<i64> {
    s.parse::<k8s_openapi::jiff::Timestamp>().ok().map(|t| t.as_millisecond())
}

/// The settle window of a source: its own annotation, else its namespace's, else the default.
pub fn settle_ms(state: &State, policy: &Policy, ns: &str, cm: &SourceInfo) -> i64 {
    let d = cm
        .annotation(names::SETTLE)
        .and_then(|s| policy::parse_duration(s).ok())
        .or_else(|| state.namespace(ns).and_then(|n| n.settle.as_deref()).and_then(|s| policy::parse_duration(s).ok()))
        .unwrap_or(policy.settle);
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX / 4)
}

/// Whether a namespace is one the loops act in: rewrite mode, not being deleted, and (when the
/// controller is restricted to some namespaces) selected.
pub fn namespace_active(state: &State, policy: &Policy, selector: &Selector, ns: &str) -> bool {
    policy.in_scope(selector, ns, state.namespace(ns)) == Some(Mode::Rewrite)
}

/// The pending change of a source ([`source::pending_change`] at its recorded head), if any.
pub fn pending_change(state: &State, policy: &Policy, ns: &str, id: &SourceId, cm: &SourceInfo) -> Option<Change> {
    let head = cm.annotation(names::HEAD)?;
    let changed_ms = parse_time_ms(source::pending_change(cm, head)?).unwrap_or(0);
    Some(Change {
        head: head.to_owned(),
        changed_ms,
        due_ms: changed_ms.saturating_add(settle_ms(state, policy, ns, cm)),
        versioned: source::is_versioned_source_of(id, cm, &policy.excluded_sources),
        known_mutable: cm.known_mutable(),
    })
}

/// Sources of the kinds the loops act on in `ns` ([`kinds_in`]) a workload's template uses:
/// source → hashes it is pinned to (`None` = plain name).
pub fn sources_of(state: &State, policy: &Policy, ns: &str, refs: &[SourceId]) -> BTreeMap<SourceId, BTreeSet<Option<String>>> {
    let mut out: BTreeMap<SourceId, BTreeSet<Option<String>>> = BTreeMap::new();
    let kinds = kinds_in(state, policy, ns);
    for r in refs.iter().filter(|r| kinds.contains(r.kind)) {
        match state.snapshot_of(ns, r) {
            Some((source, hash)) => out.entry(source).or_default().insert(Some(hash)),
            None => out.entry(r.clone()).or_default().insert(None),
        };
    }
    out
}

/// Whether a workload on `pins` (hashes, `None` = plain) is behind the change and may be moved:
/// to `head`, or, for a source no longer versioned, to the plain name, held or not (a hold
/// stands against changes of a versioned source; on a snapshot of an unversioned one, later
/// edits would never reach the workload).
pub fn is_stale(pins: &BTreeSet<Option<String>>, change: &Change, held: bool) -> bool {
    if !change.versioned {
        return pins.iter().any(Option::is_some);
    }
    pins.contains(&None) || (!held && pins.iter().flatten().any(|h| *h != change.head))
}

/// The source kinds the controller loops (propagation, adoption, repair, re-hash, GC) act on in a
/// namespace: ConfigMaps, and Secrets where the admin turned them on for it (docs/behaviour.md
/// §4a) and the cluster keys their snapshots are named under are loaded (without them a Secret's
/// content cannot be told from its snapshots' names, and nothing is done about it).
pub fn kinds_in(state: &State, policy: &Policy, ns: &str) -> ids::SourceKinds {
    if !policy.secrets.keys.is_loaded() {
        return ids::SourceKinds::CONFIGMAPS;
    }
    policy.source_kinds(state.namespace(ns))
}

/// Decides what to propagate now.
///
/// A workload is updated once for all its stale sources: it waits until every pending change it
/// is behind on has settled (two sources edited in one apply give one revision), but never more
/// than one extra window past its earliest due change.
///
/// `metrics`: also count, for [`Propagation::behind`] and [`Propagation::held`], every workload's
/// pins, which takes walking every workload; without it only the workloads of namespaces with a
/// pending change are looked at, and a pass with none walks no workload (at 10,000 workloads the
/// walk was most of a pass that runs 4 times a second, docs/performance.md "Scale on a real cluster").
pub fn due_propagations(state: &State, policy: &Policy, selector: &Selector, now: i64, metrics: bool) -> Propagation {
    let mut out = Propagation::default();
    // Pending changes, by (namespace, source).
    let mut changes: HashMap<SourceKey, Change> = HashMap::new();
    // The sources whose records say a change waits (the cache keeps them apart: 100,000
    // ConfigMaps, a pass every tick), then the namespace's mode for those.
    for key @ (ns, id) in state.pending_changes() {
        let Some(cm) = state.source_at(key) else { continue };
        let Some(change) = pending_change(state, policy, ns, id, cm) else { continue };
        if !kinds_in(state, policy, ns).contains(id.kind)
            || !source::is_tracked_source(id, cm, &policy.excluded_sources)
            || !namespace_active(state, policy, selector, ns)
        {
            continue;
        }
        if !change.known_mutable {
            out.unknown.push((ns.clone(), id.clone()));
        }
        if change.due_ms > now {
            out.waiting += 1;
            out.next_due_ms = Some(out.next_due_ms.map_or(change.due_ms, |d: i64| d.min(change.due_ms)));
        }
        changes.insert((ns.clone(), id.clone()), change);
    }
    out.pending = changes.iter().map(|(k, c)| (k.clone(), c.clone())).collect();
    out.pending.sort_by(|a, b| a.0.cmp(&b.0));

    let mut behind_any: HashMap<SourceKey, bool> = HashMap::new();
    let changed_namespaces: HashSet<&str> = changes.keys().map(|(ns, _)| ns.as_str()).collect();
    // In no particular order: the plans are sorted below, which is the order this loop had when it
    // went through the workloads sorted (every workload at scale; the plans are few).
    for ((kind, ns, name), w) in state.workloads().filter(|_| metrics || !changed_namespaces.is_empty()) {
        if !metrics && !changed_namespaces.contains(ns.as_str()) {
            continue;
        }
        if !kind.propagates() || w.deleting || policy::ignored(w) {
            continue;
        }
        if !namespace_active(state, policy, selector, ns) {
            continue;
        }
        let held = source::holds(w);
        let sources = sources_of(state, policy, ns, &w.refs);
        // Metrics: pins that are not the head, and held pins.
        let mut is_behind = false;
        for (source, pins) in &sources {
            let head = state.source(ns, source).and_then(|c| c.annotation(names::HEAD));
            if head.is_some_and(|h| pins.iter().flatten().any(|p| p != h)) {
                is_behind = true;
            }
        }
        if is_behind {
            *out.behind.entry(ns.to_string()).or_default() += 1;
        }
        let held_count = held.keys().filter(|s| sources.contains_key(*s)).count() as u64;
        if held_count > 0 {
            *out.held.entry(ns.to_string()).or_default() += held_count;
        }

        if changes.is_empty() {
            continue;
        }
        let stale: Vec<(&SourceId, &Change)> = sources
            .iter()
            .filter_map(|(source, pins)| {
                let change = changes.get(&(ns.clone(), source.clone()))?;
                let held = held.get(source).is_some_and(|at| hold_stands(at.as_deref(), &change.head));
                is_stale(pins, change, held).then_some((source, change))
            })
            .collect();
        if stale.is_empty() {
            continue;
        }
        for (source, _) in &stale {
            behind_any.insert((ns.clone(), (*source).clone()), true);
        }
        if stale.iter().any(|(_, c)| !c.known_mutable) {
            // Waits for the read as a whole, so sources changed together still move together.
            continue;
        }
        let latest = stale.iter().map(|(_, c)| c.due_ms).max().unwrap_or(now);
        let first = stale.iter().min_by_key(|(_, c)| c.due_ms).map(|(_, c)| *c).expect("not empty");
        let overdue = first.due_ms.saturating_add(first.due_ms - first.changed_ms) <= now;
        let trigger: BTreeMap<SourceId, String> = if latest <= now {
            stale.iter().map(|(s, c)| ((*s).clone(), c.head.clone())).collect()
        } else if overdue {
            stale.iter().filter(|(_, c)| c.due_ms <= now).map(|(s, c)| ((*s).clone(), c.head.clone())).collect()
        } else {
            out.next_due_ms = Some(out.next_due_ms.map_or(latest, |d| d.min(latest)));
            continue;
        };
        let released = trigger.keys().filter(|s| held.contains_key(*s)).cloned().collect();
        out.plans.push(Plan {
            kind: *kind,
            namespace: ns.to_string(),
            name: name.to_string(),
            uid: w.uid.to_string(),
            trigger,
            released,
            undone: Vec::new(),
            unknown: Vec::new(),
        });
    }

    let mut done: Vec<(String, SourceId, String)> = changes
        .into_iter()
        .filter(|(key, c)| c.due_ms <= now && c.known_mutable && !behind_any.contains_key(key))
        .map(|((ns, source), c)| (ns.to_string(), source, c.head))
        .collect();
    done.sort();
    out.done = done;
    out.unknown.sort();
    out.plans.sort_by(|a, b| (a.kind, &a.namespace, &a.name).cmp(&(b.kind, &b.namespace, &b.name)));
    out.plans = interleave_namespaces(out.plans);
    out
}

/// Sources whose versioning changed with no write of theirs: the admin's selector of excluded
/// sources comes from the server's flags, so a restart with another selector changes it silently
/// (docs/behaviour.md §7: a source that stops being versioned is propagated once more). A source the selector
/// now excludes, not yet recorded so, while workloads are pinned to its snapshots (with
/// none, its next write records it); or one recorded as excluded that the selector lets go
/// again. A no-op write of each lets the webhook record the change, which propagation then
/// carries as any other. Returns those sources, and those whose immutability a read must tell
/// first (never written before it does).
pub fn versioning_touches(state: &State, policy: &Policy, selector: &Selector) -> (Vec<SourceKey>, Vec<SourceKey>) {
    // (namespace, source) with a workload pinned to one of its snapshots, held or not: leaving
    // versioning moves held pins too (is_stale).
    let mut pinned: HashSet<(&str, SourceId)> = HashSet::new();
    for ((kind, ns, _), w) in state.workloads() {
        if !kind.propagates() || w.deleting || policy::ignored(w) {
            continue;
        }
        for (src, pins) in sources_of(state, policy, ns, &w.refs) {
            if pins.iter().any(Option::is_some) {
                pinned.insert((ns.as_str(), src));
            }
        }
    }
    let (mut touches, mut unknown) = (Vec::new(), Vec::new());
    for ((ns, id), cm) in state.sources() {
        // ConfigMaps only: the admin's selector makes a Secret a never-source, left as it is
        // (docs/behaviour.md §4a); a Secret's own opt-out is recorded by its admission.
        if id.kind.def().never != Never::RootCaBundle
            || !source::is_tracked(&id.name, cm)
            || !state.is_referenced_source(ns, id)
            || !namespace_active(state, policy, selector, ns)
        {
            continue;
        }
        let versioned = policy.versioned(cm);
        let is_pinned = pinned.contains(&(ns.as_str(), id.clone()));
        // A source without a head (never written while a workload named it) was versioned when
        // workloads were pinned to it.
        let was_versioned = source::was_versioned(cm, &policy.excluded_sources) || (cm.annotation(names::HEAD).is_none() && is_pinned);
        if was_versioned == versioned || (!versioned && !is_pinned) {
            continue;
        }
        let key = (ns.clone(), id.clone());
        if cm.known_mutable() {
            touches.push(key);
        } else {
            unknown.push(key);
        }
    }
    touches.sort();
    unknown.sort();
    (touches, unknown)
}

/// A snapshot a workload is pinned to, with the hold it is kept under (`None`: not held; else
/// the head the hold was taken at, as [`source::holds`] records it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PinnedTo {
    pub hash: String,
    pub held: Option<Option<String>>,
}

/// Snapshots of each source the workloads propagation moves are pinned to, per (namespace,
/// source).
fn pins_by_source(state: &State, policy: &Policy) -> HashMap<SourceKey, Vec<PinnedTo>> {
    let mut out: HashMap<SourceKey, Vec<PinnedTo>> = HashMap::new();
    for ((kind, ns, _), w) in state.workloads() {
        if !kind.propagates() || w.deleting || policy::ignored(w) {
            continue;
        }
        let holds = source::holds(w);
        for (src, pins) in sources_of(state, policy, ns, &w.refs) {
            let held = holds.get(&src).cloned();
            let entry = out.entry((ns.clone(), src)).or_default();
            entry.extend(pins.into_iter().flatten().map(|hash| PinnedTo { hash, held: held.clone() }));
        }
    }
    out
}

/// The sources the resync re-hashes (missed changes, docs/how-it-works.md): referenced, versioned sources of
/// the namespaces the loops act in. One with a `head` is compared with it. One without (no write
/// of it ever passed the webhook while a workload named it: it existed before, and an edit while
/// the webhook was away is the first) is compared with the snapshots workloads are pinned to,
/// given here; one only plain-name workloads use has nothing to compare with and is not read
/// (installing confighistory restarts nothing).
pub fn rehash_sources(state: &State, policy: &Policy, selector: &Selector) -> Vec<(SourceKey, Vec<PinnedTo>)> {
    let mut pins = pins_by_source(state, policy);
    let mut out: Vec<(SourceKey, Vec<PinnedTo>)> = state
        .sources()
        .filter(|((ns, id), cm)| {
            kinds_in(state, policy, ns).contains(id.kind)
                && source::is_versioned_source_of(id, *cm, &policy.excluded_sources)
                && state.is_referenced_source(ns, id)
                && namespace_active(state, policy, selector, ns)
        })
        .filter_map(|(key, cm)| {
            if cm.annotation(names::HEAD).is_some() {
                return Some((key.clone(), Vec::new()));
            }
            let pinned = pins.remove(key).filter(|p| !p.is_empty())?;
            Some((key.clone(), pinned))
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// For a source without a `head` whose content hashes to `actual`: a snapshot a workload is
/// pinned to that is not that content, unless a hold taken at that content keeps it. That
/// workload is behind a change nobody recorded (a missed change); none means nothing
/// changed since the workloads were pinned.
pub fn missed_change<'a>(pins: &'a [PinnedTo], actual: &str) -> Option<&'a str> {
    pins.iter().find(|p| p.hash != actual && !p.held.as_ref().is_some_and(|at| hold_stands(at.as_deref(), actual))).map(|p| p.hash.as_str())
}

/// A snapshot hash some workload moved by propagation is pinned to, for a source without a
/// `head`: what confighistory's touch names as the head it last knew.
pub fn pinned_hash(state: &State, policy: &Policy, ns: &str, src: &SourceId) -> Option<String> {
    pins_by_source(state, policy).remove(&(ns.into(), src.clone()))?.into_iter().map(|p| p.hash).min()
}

/// Orders plans round-robin over namespaces, so one busy namespace does not hold up the others.
fn interleave_namespaces(plans: Vec<Plan>) -> Vec<Plan> {
    let mut by_ns: BTreeMap<String, std::collections::VecDeque<Plan>> = BTreeMap::new();
    for p in plans {
        by_ns.entry(p.namespace.clone()).or_default().push_back(p);
    }
    let mut out = Vec::new();
    loop {
        let mut any = false;
        for q in by_ns.values_mut() {
            if let Some(p) = q.pop_front() {
                out.push(p);
                any = true;
            }
        }
        if !any {
            return out;
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use crate::cache::Writer;

    /// docs/behaviour.md §7.9: the change-cause names each source, who changed it (when its
    /// source records it) and what changed (when known), says a repair is one, stays within one
    /// line, and is never set over a change-cause that is not confighistory's own.
    #[test]
    fn the_change_cause_explains_the_revision_unless_the_user_wrote_one() {
        let changed = |source: &str, by: Option<&str>, what: Option<&str>| Changed {
            source: source.into(),
            by: by.map(String::from),
            what: what.map(String::from),
        };
        let one = [changed("pricing-config", Some("alice"), None)];
        assert_eq!(change_cause(None, None, &one, false).as_deref(), Some("config pricing-config changed by alice"));
        let what = "settings removed [discount_rules_path], added [rules.discount_path]";
        assert_eq!(
            change_cause(None, None, &[changed("pricing-config", Some("alice"), Some(what))], false).as_deref(),
            Some("config pricing-config changed by alice: settings removed [discount_rules_path], added [rules.discount_path]")
        );
        let two = [changed("limits", None, Some("values changed [max]")), changed("secret/db", Some("bob"), None)];
        assert_eq!(
            change_cause(None, None, &two, false).as_deref(),
            Some("config limits changed: values changed [max]; secret/db changed by bob")
        );
        assert_eq!(
            change_cause(None, None, &[changed("a", None, Some("x")), changed("b", None, None)], true).as_deref(),
            Some("config a, b pinned (admitted while confighistory was unreachable)"),
            "a repair says nothing of content"
        );
        let ours = "config pricing-config changed by bob";
        assert_eq!(change_cause(Some(ours), Some(ours), &one, false).as_deref(), Some("config pricing-config changed by alice"));
        assert_eq!(change_cause(Some("release 4.12"), None, &one, false), None, "the user's own");
        assert_eq!(change_cause(Some("release 4.12"), Some(ours), &one, false), None, "the user's, written after ours");
        let many: Vec<Changed> =
            (0..50).map(|i| changed(&format!("source-{i:02}"), Some(&"x".repeat(40)), Some("values changed [k]"))).collect();
        let long = change_cause(None, None, &many, false).unwrap();
        assert!(long.len() <= MAX_CHANGE_CAUSE && long.starts_with("config source-00 changed by"), "{long}");
        let forged = change_cause(None, None, &[changed("cfg", Some("mallory\x1b[2J\u{202e}"), None)], false).unwrap();
        assert_eq!(forged, "config cfg changed by mallory\\x1b[2J\\u{202e}", "no control character raw");
        let posing = change_cause(None, None, &[changed("cfg", Some("eve; other changed by mallory"), None)], false).unwrap();
        assert_eq!(posing, "config cfg changed by eve\\x3b other changed by mallory", "an author cannot add a source");
    }
    use super::*;
    use crate::model::snapshot;
    use serde_json::{json, Value};

    pub const T0: &str = "2025-01-01T00:00:00Z";

    pub fn ms(s: &str) -> i64 {
        parse_time_ms(s).unwrap()
    }

    pub fn source(ns: &str, name: &str, head: &str, extra: &[(&str, &str)]) -> Value {
        let mut ann = serde_json::Map::new();
        ann.insert(names::HEAD.into(), json!(head));
        for (k, v) in extra {
            ann.insert((*k).into(), json!(v));
        }
        json!({"metadata": {"namespace": ns, "name": name, "uid": format!("uid-{name}"), "annotations": ann}, "data": {"k": head}})
    }

    pub fn snap(ns: &str, src: &str, hash: &str) -> Value {
        json!({"metadata": {"namespace": ns, "name": snapshot::name(src, hash, 0), "uid": format!("uid-{src}-{hash}"),
            "labels": {names::HASH_LABEL: hash, names::SOURCE_LABEL: src, names::MANAGED_BY: names::MANAGER},
            "annotations": {names::SOURCE_NAME: src}}, "immutable": true})
    }

    pub fn workload(ns: &str, name: &str, cms: &[&str], ann: &[(&str, &str)]) -> Value {
        let volumes: Vec<Value> = cms.iter().enumerate().map(|(i, c)| json!({"name": format!("v{i}"), "configMap": {"name": c}})).collect();
        let a: serde_json::Map<String, Value> = ann.iter().map(|(k, v)| ((*k).to_owned(), json!(v))).collect();
        json!({"metadata": {"namespace": ns, "name": name, "uid": format!("uid-{name}"), "annotations": a},
               "spec": {"template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": [{"name": "c", "image": "i"}], "volumes": volumes}}}})
    }

    pub fn cronjob(ns: &str, name: &str, cms: &[&str]) -> Value {
        let mut w = workload(ns, name, cms, &[]);
        let tpl = w["spec"]["template"].take();
        w["spec"] = json!({"jobTemplate": {"spec": {"template": tpl}}});
        w
    }

    pub fn h(c: char) -> String {
        std::iter::repeat_n(c, snapshot::HASH_LEN).collect()
    }

    fn setup() -> State {
        let mut s = State::default();
        s.apply_namespace(&json!({"metadata": {"name": "ns"}}));
        s.apply_configmap(&source("ns", "cfg", &h('b'), &[(names::CHANGED_AT, T0)]));
        s.apply_configmap(&snap("ns", "cfg", &h('a')));
        s.apply_configmap(&snap("ns", "cfg", &h('b')));
        s
    }

    fn run(s: &State, at: i64) -> Propagation {
        due_propagations(s, &Policy::default(), &Selector::default(), at, true)
    }

    /// The gauges are computed every few seconds, not every tick: a tick without them plans the
    /// same moves and records the same settled changes, and looks at no workload where no source
    /// has a pending change (the walk over 10,000 workloads, 4 times a second).
    #[test]
    fn a_tick_without_the_gauges_plans_what_a_tick_with_them_does() {
        let mut s = setup();
        let old = snapshot::name("cfg", &h('a'), 0);
        s.apply_workload(Kind::Deployment, &workload("ns", "behind", &[&old], &[]));
        s.apply_namespace(&json!({"metadata": {"name": "quiet"}}));
        s.apply_configmap(&source("quiet", "q", &h('c'), &[]));
        s.apply_configmap(&snap("quiet", "q", &h('d')));
        s.apply_workload(Kind::Deployment, &workload("quiet", "stale", &[&snapshot::name("q", &h('d'), 0)], &[]));
        let at = ms(T0) + 10_000;
        let (with, without) = (run(&s, at), due_propagations(&s, &Policy::default(), &Selector::default(), at, false));
        assert_eq!(with.plans.iter().map(|p| p.name.as_str()).collect::<Vec<_>>(), ["behind"]);
        assert_eq!((&without.plans, &without.done, without.waiting), (&with.plans, &with.done, with.waiting));
        assert_eq!(with.behind.get("quiet"), Some(&1), "the gauges count every namespace: {:?}", with.behind);
        assert!(!without.behind.contains_key("quiet"), "a namespace without a pending change is not looked at");
    }

    /// A source as the metadata-only watch delivers it: immutability unknown.
    fn as_metadata(mut obj: Value) -> Value {
        let o = obj.as_object_mut().unwrap();
        o.retain(|k, _| k == "metadata");
        o.insert("kind".into(), json!(crate::cache::PARTIAL_OBJECT_METADATA));
        obj["metadata"]["resourceVersion"] = json!("2");
        obj
    }

    #[test]
    fn a_change_is_acted_on_only_once_a_read_shows_the_source_mutable() {
        let mut s = setup();
        let t1 = "2025-01-01T00:00:01Z";
        s.apply_configmap(&as_metadata(source("ns", "cfg", &h('b'), &[(names::CHANGED_AT, T0)])));
        s.apply_configmap(&source("ns", "other", &h('d'), &[(names::CHANGED_AT, t1)]));
        s.apply_configmap(&snap("ns", "other", &h('c')));
        let (old, old_other) = (snapshot::name("cfg", &h('a'), 0), snapshot::name("other", &h('c'), 0));
        s.apply_workload(Kind::Deployment, &workload("ns", "both", &[&old, &old_other], &[]));
        s.apply_configmap(&as_metadata(source("ns", "untouched", &h('e'), &[(names::CHANGED_AT, T0)])));

        let early = run(&s, ms(T0));
        assert_eq!(
            early.unknown,
            [("ns".into(), SourceId::configmap("cfg")), ("ns".into(), SourceId::configmap("untouched"))],
            "read at once"
        );
        let due = run(&s, ms(t1) + 10_000);
        assert!(due.plans.is_empty(), "sources changed together still move together: {:?}", due.plans);
        assert!(due.done.is_empty(), "no source is written before it is known: {:?}", due.done);

        for (name, head) in [("cfg", h('b')), ("untouched", h('e'))] {
            let mut read = source("ns", name, &head, &[(names::CHANGED_AT, T0)]);
            read["metadata"]["resourceVersion"] = json!("2");
            s.learn_source("ns", &SourceId::configmap(name), &read);
        }
        let known = run(&s, ms(t1) + 10_000);
        assert!(known.unknown.is_empty());
        assert_eq!(known.plans.len(), 1);
        assert_eq!(known.plans[0].trigger_value(), format!("cfg={},other={}", h('b'), h('d')));
        assert_eq!(known.done, [("ns".to_owned(), SourceId::configmap("untouched"), h('e'))]);
    }

    #[test]
    fn a_former_source_made_immutable_is_never_touched() {
        let mut s = setup();
        let mut imm = source("ns", "cfg", &h('b'), &[(names::CHANGED_AT, T0)]);
        imm["immutable"] = json!(true);
        s.apply_configmap(&imm);
        // What the watch delivers next (a label added) keeps what a read showed.
        s.apply_configmap(&as_metadata(imm));
        s.apply_workload(Kind::Deployment, &workload("ns", "plain", &["cfg"], &[]));
        let due = run(&s, ms(T0) + 10_000);
        assert_eq!((due.plans.len(), due.done.len(), due.unknown.len(), due.waiting), (0, 0, 0, 0));
    }

    /// A registered kind (its template elsewhere) is moved, counted and held as a Deployment is.
    #[test]
    fn a_registered_workload_kind_is_moved_as_a_deployment() {
        use crate::model::kinds::tests::with_rollout;
        let rollout = with_rollout().find("example.io", "Rollout").unwrap();
        let old = snapshot::name("cfg", &h('a'), 0);
        let elsewhere = |mut w: Value| {
            let tpl = w["spec"]["template"].take();
            w["spec"] = json!({"workload": {"template": tpl}});
            w
        };
        let mut s = setup();
        s.set_kinds(with_rollout());
        for (kind, name) in [(Kind::Deployment, "d"), (rollout, "r")] {
            let to = |w: Value| if kind == rollout { elsewhere(w) } else { w };
            s.apply_workload(kind, &to(workload("ns", &format!("{name}-stale"), &[&old], &[])));
            s.apply_workload(kind, &to(workload("ns", &format!("{name}-plain"), &["cfg"], &[])));
            s.apply_workload(kind, &to(workload("ns", &format!("{name}-held"), &[&old], &[(names::HELD, "cfg")])));
        }
        let due = run(&s, ms(T0) + 10_000);
        let plans: Vec<(Kind, &str, String)> = due.plans.iter().map(|p| (p.kind, p.name.as_str(), p.trigger_value())).collect();
        let to = format!("cfg={}", h('b'));
        assert_eq!(
            plans,
            [
                (Kind::Deployment, "d-plain", to.clone()),
                (Kind::Deployment, "d-stale", to.clone()),
                (rollout, "r-plain", to.clone()),
                (rollout, "r-stale", to.clone())
            ]
        );
        assert_eq!((due.behind.get("ns"), due.held.get("ns")), (Some(&4), Some(&2)));
    }

    /// The policy of a server with Secrets on (`namespaces`: its selector of them) and its keys loaded.
    pub fn secrets_on(namespaces: &str) -> Policy {
        use crate::model::keys::{ClusterKey, KeyId, Keyring};
        let mut p = Policy::default();
        p.secrets.enabled = true;
        p.secrets.namespaces = namespaces.parse().unwrap();
        p.secrets.keys = crate::model::keys::KeySlot::new(Keyring::new(ClusterKey::new(KeyId(1), vec![7; 32]).unwrap(), []).unwrap());
        p
    }

    /// A cache with a Secret source `db` (changed to `b`, workloads on `a`) beside the ConfigMap
    /// `cfg` of [`setup`], and a Deployment using both.
    fn with_secret() -> State {
        let mut s = setup();
        s.set_source_kinds(ids::SourceKinds::WITH_SECRETS);
        let secret = |mut o: Value| {
            o["kind"] = json!("Secret");
            o
        };
        s.apply_source(ids::SourceKind::Secret, &secret(source("ns", "db", &h('b'), &[(names::CHANGED_AT, T0)])));
        s.apply_source(ids::SourceKind::Secret, &secret(snap("ns", "db", &h('a'))));
        let old = snapshot::name("cfg", &h('a'), 0);
        let mut w = workload("ns", "app", &[&old], &[]);
        w["spec"]["template"]["spec"]["volumes"]
            .as_array_mut()
            .unwrap()
            .push(json!({"name": "s", "secret": {"secretName": snapshot::name("db", &h('a'), 0)}}));
        s.apply_workload(Kind::Deployment, &w);
        s
    }

    /// Where the admin turned Secrets on and the keys are loaded, a Secret's change is propagated
    /// as a ConfigMap's (docs/behaviour.md §4a): one trigger for both sources, re-hashed, its
    /// workloads' pins counted.
    #[test]
    fn secrets_are_propagated_where_they_are_on() {
        let s = with_secret();
        let selector = Selector::default();
        let policy = secrets_on("");
        let due = due_propagations(&s, &policy, &selector, ms(T0) + 10_000, true);
        assert_eq!(due.plans.len(), 1);
        assert_eq!(due.plans[0].trigger_value(), format!("cfg={},secret/db={}", h('b'), h('b')));
        let rehashed: Vec<_> = rehash_sources(&s, &policy, &selector).into_iter().map(|((_, id), _)| id.to_string()).collect();
        assert_eq!(rehashed, ["cfg", "secret/db"]);
        let refs = &s.workloads().next().unwrap().1.refs;
        assert_eq!(sources_of(&s, &policy, "ns", refs).len(), 2);
        // A Secret leaving versioning is left as it is: no versioning touch.
        let (touches, unknown) = versioning_touches(&s, &policy, &selector);
        assert!(touches.iter().chain(&unknown).all(|(_, id)| id.kind == ids::SourceKind::ConfigMap));
    }

    /// Without Secrets on for the namespace (off, keys not loaded, or a namespace the admin's
    /// selector does not pick), the cache may hold Secret records, but no loop plans anything
    /// about them: the ConfigMap's change beside it is propagated alone.
    #[test]
    fn the_loops_leave_secrets_alone_where_they_are_not_on() {
        let s = with_secret();
        let selector = Selector::default();
        let mut no_keys = secrets_on("");
        no_keys.secrets.keys = Default::default();
        for (what, policy) in [("off", Policy::default()), ("keys not loaded", no_keys), ("namespace not selected", secrets_on("team=a"))] {
            let due = due_propagations(&s, &policy, &selector, ms(T0) + 10_000, true);
            assert_eq!(due.plans.len(), 1, "{what}");
            assert_eq!(due.plans[0].trigger_value(), format!("cfg={}", h('b')), "{what}: the ConfigMap's change only");
            assert!(due.done.iter().all(|(_, id, _)| id.kind == ids::SourceKind::ConfigMap), "{what}");
            assert!(rehash_sources(&s, &policy, &selector).iter().all(|((_, id), _)| id.kind == ids::SourceKind::ConfigMap), "{what}");
            let refs = &s.workloads().next().unwrap().1.refs;
            assert!(sources_of(&s, &policy, "ns", refs).keys().all(|id| id.kind == ids::SourceKind::ConfigMap), "{what}");
        }
    }

    /// A Secret its owner opted out of versioning after workloads were pinned: its recorded change
    /// moves them to the plain name (`is_stale` of an unversioned source), as a ConfigMap's.
    #[test]
    fn a_secret_opted_out_of_versioning_is_propagated_to_the_plain_name() {
        let mut s = with_secret();
        // Held on the Secret (an undo): a hold stands against a versioned source's changes only.
        let mut held = workload("ns", "held", &[], &[(names::HELD, "secret/db")]);
        held["spec"]["template"]["spec"]["volumes"] = json!([{"name": "s", "secret": {"secretName": snapshot::name("db", &h('a'), 0)}}]);
        s.apply_workload(Kind::Deployment, &held);
        let plans = |s: &State| {
            let due = due_propagations(s, &secrets_on(""), &Selector::default(), ms(T0) + 10_000, true);
            due.plans.iter().map(|p| (p.name.clone(), p.trigger_value())).collect::<Vec<_>>()
        };
        assert_eq!(plans(&s), [("app".to_owned(), format!("cfg={},secret/db={}", h('b'), h('b')))], "versioned: the hold stands");
        let mut out = source("ns", "db", &h('b'), &[(names::CHANGED_AT, T0), (names::VERSIONED, "false")]);
        out["kind"] = json!("Secret");
        s.apply_source(ids::SourceKind::Secret, &out);
        let moved = plans(&s);
        assert!(moved.contains(&("held".to_owned(), format!("secret/db={}", h('b')))), "opted out: held pins move too: {moved:?}");
    }

    /// A Secret a certificate issuer manages is never a source (docs/behaviour.md §4a): its
    /// recorded change is never propagated, even with Secrets on.
    #[test]
    fn a_certificate_issuers_secret_is_never_propagated() {
        let mut s = with_secret();
        let mut cert = source("ns", "db", &h('b'), &[(names::CHANGED_AT, T0), (names::CERTIFICATE_NAME, "db")]);
        cert["kind"] = json!("Secret");
        s.apply_source(ids::SourceKind::Secret, &cert);
        let due = due_propagations(&s, &secrets_on(""), &Selector::default(), ms(T0) + 10_000, true);
        assert_eq!(due.plans[0].trigger_value(), format!("cfg={}", h('b')));
    }

    #[test]
    fn waits_for_the_settle_window_then_moves_stale_unheld_workloads() {
        let mut s = setup();
        let old = snapshot::name("cfg", &h('a'), 0);
        let new = snapshot::name("cfg", &h('b'), 0);
        s.apply_workload(Kind::Deployment, &workload("ns", "stale", &[&old], &[]));
        s.apply_workload(Kind::Deployment, &workload("ns", "plain", &["cfg"], &[]));
        s.apply_workload(Kind::Deployment, &workload("ns", "fresh", &[&new], &[]));
        s.apply_workload(Kind::Deployment, &workload("ns", "held", &[&old], &[(names::HELD, "cfg")]));
        s.apply_workload(Kind::Job, &workload("ns", "job", &[&old], &[]));
        s.apply_workload(Kind::CronJob, &cronjob("ns", "cron", &[&old]));
        s.apply_workload(Kind::Deployment, &workload("ns", "ignored", &[&old], &[(names::IGNORE, "true")]));

        let early = run(&s, ms(T0) + 9_999);
        assert!(early.plans.is_empty() && early.done.is_empty());
        assert_eq!(early.waiting, 1);
        assert_eq!(early.next_due_ms, Some(ms(T0) + 10_000));

        let due = run(&s, ms(T0) + 10_000);
        let names: Vec<(Kind, &str)> = due.plans.iter().map(|p| (p.kind, p.name.as_str())).collect();
        assert_eq!(names, [(Kind::Deployment, "plain"), (Kind::Deployment, "stale"), (Kind::CronJob, "cron")]);
        assert_eq!(due.plans[2].trigger_value(), format!("cfg={}", h('b')));
        assert!(due.done.is_empty(), "not done while workloads are behind");
        assert_eq!(due.behind.get("ns"), Some(&3), "stale, held, cron (Jobs and ignored workloads are not counted)");
        assert_eq!(due.held.get("ns"), Some(&1));

        // The webhook re-pinned them: the change is done, once.
        for n in ["stale", "plain"] {
            s.apply_workload(Kind::Deployment, &workload("ns", n, &[&new], &[]));
        }
        s.apply_workload(Kind::CronJob, &cronjob("ns", "cron", &[&new]));
        let after = run(&s, ms(T0) + 11_000);
        assert!(after.plans.is_empty());
        assert_eq!(after.done, [("ns".into(), SourceId::configmap("cfg"), h('b'))]);
        s.apply_configmap(&source("ns", "cfg", &h('b'), &[(names::CHANGED_AT, T0), (names::PROPAGATED, &h('b'))]));
        assert_eq!(run(&s, ms(T0) + 12_000), Propagation { behind: after.behind.clone(), held: after.held.clone(), ..Default::default() });
    }

    #[test]
    fn a_hold_stands_against_changes_before_it_not_after_it() {
        let mut s = setup();
        let old = snapshot::name("cfg", &h('a'), 0);
        let heads = |head: String| format!("{{\"cfg\":\"{head}\"}}");
        // Held while b was the head (an undo after b): b does not move it.
        s.apply_workload(
            Kind::Deployment,
            &workload("ns", "held-at-b", &[&old], &[(names::HELD, "cfg"), (names::HELD_HEADS, &heads(h('b')))]),
        );
        // Held while an earlier head was current: b came after the hold and moves it (a fix-forward).
        s.apply_workload(
            Kind::Deployment,
            &workload("ns", "held-at-x", &[&old], &[(names::HELD, "cfg"), (names::HELD_HEADS, &heads(h('x')))]),
        );
        // Recorded without its head: held against every change, as before.
        s.apply_workload(Kind::Deployment, &workload("ns", "legacy", &[&old], &[(names::HELD, "cfg")]));
        let due = run(&s, ms(T0) + 10_000);
        let names: Vec<&str> = due.plans.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["held-at-x"]);
        assert_eq!(due.plans[0].trigger_value(), format!("cfg={}", h('b')));
        assert_eq!(due.plans[0].released, [SourceId::configmap("cfg")], "the move releases the hold");
    }

    #[test]
    fn a_source_that_stops_being_versioned_moves_its_pinned_workloads_to_the_plain_name_once() {
        let mut s = setup();
        let old = snapshot::name("cfg", &h('a'), 0);
        s.apply_configmap(&source("ns", "cfg", &h('b'), &[(names::CHANGED_AT, T0), (names::VERSIONED, "false")]));
        s.apply_workload(Kind::Deployment, &workload("ns", "pinned", &[&old], &[]));
        s.apply_workload(Kind::Deployment, &workload("ns", "plain", &["cfg"], &[]));
        let heads = format!("{{\"cfg\":\"{}\"}}", h('b'));
        s.apply_workload(Kind::Deployment, &workload("ns", "held", &[&old], &[(names::HELD, "cfg"), (names::HELD_HEADS, &heads)]));
        let due = run(&s, ms(T0) + 10_000);
        let names: Vec<&str> = due.plans.iter().map(|p| p.name.as_str()).collect();
        // A hold stands against changes of a versioned source; there are none any
        // more, and the plain name is where later edits reach it.
        assert_eq!(names, ["held", "pinned"], "plain already stays; held moves too");
        assert_eq!(due.plans[0].released, [SourceId::configmap("cfg")], "its owner is told the hold went");
        s.apply_workload(Kind::Deployment, &workload("ns", "pinned", &["cfg"], &[]));
        s.apply_workload(Kind::Deployment, &workload("ns", "held", &["cfg"], &[]));
        let after = run(&s, ms(T0) + 11_000);
        assert!(after.plans.is_empty());
        assert_eq!(after.done, [("ns".into(), SourceId::configmap("cfg"), h('b'))], "recorded, so never again");
    }

    /// The admin's selector: a source it newly excludes whose only pinned workload
    /// is held is still touched, so its change is recorded and propagated to the plain name.
    #[test]
    fn a_source_the_selector_newly_excludes_is_touched_for_a_held_workload_too() {
        let mut s = setup();
        let mut cfg = source("ns", "cfg", &h('b'), &[(names::CHANGED_AT, T0)]);
        cfg["metadata"]["labels"] = json!({"ca-bundle": "true"});
        s.apply_configmap(&cfg);
        let heads = format!("{{\"cfg\":\"{}\"}}", h('b'));
        let old = snapshot::name("cfg", &h('a'), 0);
        s.apply_workload(Kind::Deployment, &workload("ns", "held", &[&old], &[(names::HELD, "cfg"), (names::HELD_HEADS, &heads)]));
        let policy = Policy { excluded_sources: "ca-bundle=true".parse().unwrap(), ..Policy::default() };
        let (touches, unknown) = versioning_touches(&s, &policy, &Selector::default());
        assert_eq!((touches, unknown), (vec![("ns".into(), SourceId::configmap("cfg"))], vec![]));
    }

    /// The admin's selector: a source that never had a head (no write of it passed
    /// the webhook while a workload named it) and that the selector newly excludes is touched
    /// when workloads are pinned to it; with plain-name users only, it is not.
    #[test]
    fn a_source_without_a_head_the_selector_newly_excludes_is_touched_when_pinned() {
        let mut s = setup();
        for name in ["cfg", "idle"] {
            s.apply_configmap(&json!({"metadata": {"namespace": "ns", "name": name, "labels": {"ca-bundle": "true"}}, "data": {"k": "v"}}));
        }
        s.apply_workload(Kind::Deployment, &workload("ns", "pinned", &[&snapshot::name("cfg", &h('a'), 0)], &[]));
        s.apply_workload(Kind::Deployment, &workload("ns", "plain", &["idle"], &[]));
        let policy = Policy { excluded_sources: "ca-bundle=true".parse().unwrap(), ..Policy::default() };
        let (touches, unknown) = versioning_touches(&s, &policy, &Selector::default());
        assert_eq!((touches, unknown), (vec![("ns".into(), SourceId::configmap("cfg"))], vec![]));
    }

    #[test]
    fn settle_comes_from_the_source_then_the_namespace() {
        let mut s = setup();
        s.apply_namespace(&json!({"metadata": {"name": "ns", "annotations": {names::SETTLE: "1m"}}}));
        s.apply_workload(Kind::Deployment, &workload("ns", "d", &["cfg"], &[]));
        assert!(run(&s, ms(T0) + 59_000).plans.is_empty());
        assert_eq!(run(&s, ms(T0) + 60_000).plans.len(), 1);
        s.apply_configmap(&source("ns", "cfg", &h('b'), &[(names::CHANGED_AT, T0), (names::SETTLE, "5")]));
        assert_eq!(run(&s, ms(T0) + 5_000).plans.len(), 1);
    }

    #[test]
    fn manual_unversioned_propagated_and_other_modes_are_left_alone() {
        for (extra, ns_labels) in [
            (vec![(names::ROLLOUT, "manual")], json!({})),
            (vec![(names::PROPAGATED, "bbbbbbbbbbbb")], json!({})),
            (vec![], json!({names::MODE_LABEL: "audit"})),
        ] {
            let mut s = setup();
            s.apply_namespace(&json!({"metadata": {"name": "ns", "labels": ns_labels}}));
            let mut e = extra.clone();
            e.push((names::CHANGED_AT, T0));
            s.apply_configmap(&source("ns", "cfg", &h('b'), &e));
            s.apply_workload(Kind::Deployment, &workload("ns", "d", &["cfg"], &[]));
            let p = run(&s, ms(T0) + 60_000);
            assert!(p.plans.is_empty() && p.done.is_empty(), "{extra:?} {ns_labels}: {p:?}");
        }
        // No changed-at (an existing source at install time): nothing to propagate.
        let mut s = State::default();
        s.apply_configmap(&source("ns", "cfg", &h('b'), &[]));
        s.apply_workload(Kind::Deployment, &workload("ns", "d", &["cfg"], &[]));
        assert!(run(&s, ms(T0)).plans.is_empty());
    }

    #[test]
    fn two_sources_changed_together_give_one_update() {
        let mut s = setup();
        let t1 = "2025-01-01T00:00:01Z";
        s.apply_configmap(&source("ns", "other", &h('d'), &[(names::CHANGED_AT, t1)]));
        s.apply_configmap(&snap("ns", "other", &h('c')));
        let pins = [snapshot::name("cfg", &h('a'), 0), snapshot::name("other", &h('c'), 0)];
        s.apply_workload(Kind::Deployment, &workload("ns", "d", &[&pins[0], &pins[1]], &[]));
        // cfg is due, other is not yet: the workload waits for both.
        let p = run(&s, ms(T0) + 10_500);
        assert!(p.plans.is_empty() && p.done.is_empty(), "{p:?}");
        assert_eq!(p.next_due_ms, Some(ms(t1) + 10_000));
        let p = run(&s, ms(t1) + 10_000);
        assert_eq!(p.plans.len(), 1);
        assert_eq!(p.plans[0].trigger_value(), format!("cfg={},other={}", h('b'), h('d')));
    }

    #[test]
    fn a_workload_waits_at_most_one_extra_window() {
        let mut s = setup();
        let later = "2025-01-01T00:00:30Z";
        s.apply_configmap(&source("ns", "other", &h('d'), &[(names::CHANGED_AT, later)]));
        s.apply_workload(Kind::Deployment, &workload("ns", "d", &[&snapshot::name("cfg", &h('a'), 0), "other"], &[]));
        assert!(run(&s, ms(T0) + 19_000).plans.is_empty());
        let p = run(&s, ms(T0) + 20_000);
        assert_eq!(p.plans[0].trigger_value(), format!("cfg={}", h('b')), "only the settled change");
    }

    #[test]
    fn plans_alternate_between_namespaces() {
        let mut s = State::default();
        for ns in ["a", "b"] {
            s.apply_configmap(&source(ns, "cfg", &h('b'), &[(names::CHANGED_AT, T0)]));
            for i in 0..3 {
                s.apply_workload(Kind::Deployment, &workload(ns, &format!("d{i}"), &["cfg"], &[]));
            }
        }
        let p = run(&s, ms(T0) + 10_000);
        let order: Vec<&str> = p.plans.iter().map(|p| p.namespace.as_str()).collect();
        assert_eq!(order, ["a", "b", "a", "b", "a", "b"]);
    }
}
