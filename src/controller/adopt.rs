//! Adoption and repair (docs/behaviour.md §9), decided together because they split the same workloads: those
//! that still name a source plainly.
//!
//! - **Adoption**: a plain-name workload that existed before confighistory (or was seen by it
//!   before) runs with the source's current content; the snapshot of that content gets the
//!   workload's template hash in its adoption record, so an undo to that revision finds it. No
//!   pod template is touched.
//! - **Repair**: a plain-name workload whose template the controller never saw before and that has
//!   no adoption record, or that confighistory had pinned before (it carries `pins`), was admitted
//!   while the webhook was unreachable: it gets the propagation trigger, like a propagation.
//!
//! - **Undo repaired**: a workload confighistory had pinned (a revision of it, or its `pins`,
//!   names a snapshot of the source) that now names the source plainly with a template an
//!   adoption record lists was undone (or rolled back) to a revision from before the install
//!   while the webhook was away: its trigger names that snapshot, not the head, and the webhook
//!   admits it as the undo it is (docs/behaviour.md §6.2.1): the config that revision ran with, held.
//! - **Undo unknown**: the same undo to a template no adoption record lists (from before the
//!   workload was pinned: its `pins`, or a revision older than the first that pins the source) is
//!   never adopted on the current content, which it did not run with: it is repaired to the head
//!   with a ConfigUnknown Event, as docs/behaviour.md §6.2.1 takes such an undo when the webhook is up.
//!
//! Sources with a pending change are left to propagation (the current content is not what the
//! workload ran with, and the settle window must be honoured).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use compact_str::CompactString;

use super::propagate::{self, Plan};
use crate::cache::{SourceKey, State};
use crate::model::ids::SourceId;
use crate::model::meta::Meta;
use crate::model::names;
use crate::model::policy::{self, Policy};
use crate::model::selector::Selector;
use crate::model::source;

/// Record `templates` in the adoption record of the snapshot of `source`'s current content.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Adoption {
    pub namespace: String,
    pub source: SourceId,
    pub templates: Vec<String>,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Decisions {
    pub adoptions: Vec<Adoption>,
    pub repairs: Vec<Plan>,
    /// Plainly referenced sources whose immutability the cache does not know (its records are
    /// metadata): read them, then decide again. A workload that names an immutable ConfigMap is
    /// neither adopted nor repaired (docs/behaviour.md §3).
    pub unknown: Vec<SourceKey>,
    /// Templates of the workloads left undecided until those reads: not seen yet, or an
    /// outage's would be adopted at the next pass instead of repaired.
    pub deferred: Vec<(String, String)>,
}

/// Templates seen before, as (namespace, template hash): per namespace, because the same
/// manifest deployed elsewhere (another team's namespace, one the loops do not act in) says
/// nothing about whether this namespace's workload was admitted during an outage.
///
/// Kept by namespace, so a pair is looked up and found there from borrowed strings: the
/// propagation pass ([`note_seen`]) asks about every workload every tick, and a pair already
/// there costs no allocation.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Seen(HashMap<String, HashSet<CompactString>>);

impl Seen {
    pub fn new() -> Seen {
        Seen::default()
    }

    pub fn contains(&self, ns: &str, template: &str) -> bool {
        self.0.get(ns).is_some_and(|t| t.contains(template))
    }

    /// Adds (`ns`, `template`); allocates only when it is not there yet. Returns whether it was new.
    pub fn insert(&mut self, ns: &str, template: &str) -> bool {
        if self.contains(ns, template) {
            return false;
        }
        match self.0.get_mut(ns) {
            Some(t) => t.insert(template.into()),
            None => self.0.entry(ns.to_owned()).or_default().insert(template.into()),
        }
    }

    /// The number of (namespace, template) pairs.
    pub fn len(&self) -> usize {
        self.0.values().map(HashSet::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.0.values().all(HashSet::is_empty)
    }

    pub fn clear(&mut self) {
        self.0.clear();
    }

    /// Keeps the pairs `keep` says yes to.
    pub fn retain(&mut self, mut keep: impl FnMut(&str, &str) -> bool) {
        self.0.retain(|ns, templates| {
            templates.retain(|t| keep(ns, t));
            !templates.is_empty()
        });
    }

    /// Every pair of `other` that `skip` says no to.
    pub fn extend_except(&mut self, other: Seen, skip: &Seen) {
        for (ns, templates) in other.0 {
            let kept: Vec<CompactString> = templates.into_iter().filter(|t| !skip.contains(&ns, t)).collect();
            if !kept.is_empty() {
                self.0.entry(ns).or_default().extend(kept);
            }
        }
    }
}

impl<T: AsRef<str>> FromIterator<(String, T)> for Seen {
    fn from_iter<I: IntoIterator<Item = (String, T)>>(pairs: I) -> Seen {
        let mut seen = Seen::new();
        seen.extend(pairs);
        seen
    }
}

impl<T: AsRef<str>> Extend<(String, T)> for Seen {
    fn extend<I: IntoIterator<Item = (String, T)>>(&mut self, pairs: I) {
        for (ns, template) in pairs {
            self.0.entry(ns).or_default().insert(template.as_ref().into());
        }
    }
}

impl<T: AsRef<str>, const N: usize> From<[(String, T); N]> for Seen {
    fn from(pairs: [(String, T); N]) -> Seen {
        pairs.into_iter().collect()
    }
}

/// What the propagation pass notes about every workload, every tick (docs/behaviour.md §9, §4a):
/// templates in namespaces the loops do not act in were admitted unpinned on purpose (audit,
/// enforce, off), so they go to `seen`, to be adopted, not repaired, if the namespace later
/// switches to rewrite; with Secrets on for some namespaces only (`without_secrets`: `Some` when
/// the admin turned Secrets on), a template's Secret references in the others are plain on
/// purpose until Secrets are turned on there. A pair already noted costs a lookup only, and each
/// namespace's mode and Secrets are decided once a pass, not once per workload.
pub fn note_seen(state: &State, policy: &Policy, selector: &Selector, seen: &mut Seen, mut without_secrets: Option<&mut Seen>) {
    // Namespace → (the loops act in it, Secrets are on in it), for this pass.
    let mut namespaces: HashMap<&str, (bool, bool)> = HashMap::new();
    for ((_, ns, _), w) in state.workloads() {
        let (active, secrets) = *namespaces.entry(ns.as_str()).or_insert_with(|| {
            let active = propagate::namespace_active(state, policy, selector, ns);
            (active, active && without_secrets.is_some() && propagate::kinds_in(state, policy, ns).has_opt_in())
        });
        if !active {
            seen.insert(ns, &w.template_hash);
        } else if let (Some(set), false) = (without_secrets.as_deref_mut(), secrets) {
            set.insert(ns, &w.template_hash);
        }
    }
}

/// Every template the cache holds now (workloads and revisions): what "seen before" starts from
/// when this replica becomes leader.
pub fn current_templates(state: &State) -> Seen {
    let workloads = state.workloads().map(|((_, ns, _), w)| (ns.to_string(), w.template_hash.clone()));
    workloads.chain(state.revisions().map(|((_, ns, _), r)| (ns.to_string(), r.template_hash.clone()))).collect()
}

/// Decides adoptions and repairs. `seen`: templates this controller saw before;
/// `seen_without_secrets`: templates it saw where Secrets were off for their namespace (their
/// Secret references were admitted plain on purpose: when the admin turns Secrets on there, a
/// template whose only plain references are Secrets is adopted, not repaired, docs/behaviour.md
/// §4a); `done`: (namespace, source, template) adoptions already made by this process.
pub fn decide(
    state: &State,
    policy: &Policy,
    selector: &Selector,
    seen: &Seen,
    seen_without_secrets: &Seen,
    done: &HashSet<(String, SourceId, String)>,
) -> Decisions {
    // Whether an adoption record of one of the source's snapshots lists the template: the
    // cache's index of its snapshots, not a map of every adoption record built each pass (issue
    // 29: 12 MiB of working maps at 100,000 ConfigMaps).
    let adopted = |ns: &str, source: &SourceId, template: &str| {
        state.snapshots_of(ns, source).any(|(_, cm, _)| source::adopted(cm).any(|t| t == template))
    };
    let mut adoptions: BTreeMap<SourceKey, BTreeSet<String>> = BTreeMap::new();
    let mut repairs = Vec::new();
    let mut unknown = BTreeSet::new();
    let mut deferred = Vec::new();
    // (owner uid, source) pairs some revision pins, with the earliest such revision's creation:
    // confighistory pinned that workload before, from then on.
    let mut revision_pins: HashMap<(&str, SourceId), &str> = HashMap::new();
    // (owner uid, template hash) → the earliest revision with that template.
    let mut revision_of: HashMap<(&str, &str), &str> = HashMap::new();
    for ((_, ns, _), r) in state.revisions() {
        let first = revision_of.entry((r.owner_uid.as_str(), r.template_hash.as_str())).or_insert(r.created.as_str());
        *first = (*first).min(r.created.as_str());
        let kinds = propagate::kinds_in(state, policy, ns);
        for id in r.refs.iter().filter(|id| kinds.contains(id.kind)) {
            if let Some((source, _)) = state.snapshot_of(ns, id) {
                let first = revision_pins.entry((r.owner_uid.as_str(), source)).or_insert(r.created.as_str());
                *first = (*first).min(r.created.as_str());
            }
        }
    }
    let mut workloads: Vec<_> = state.workloads().collect();
    workloads.sort_by(|a, b| a.0.cmp(b.0));
    for ((kind, ns, name), w) in workloads {
        if !kind.is_workload() || !kind.template_mutable() || w.deleting || policy::ignored(w) {
            continue;
        }
        if !propagate::namespace_active(state, policy, selector, ns) {
            continue;
        }
        let sources = propagate::sources_of(state, policy, ns, &w.refs);
        let only_secrets_plain = sources.iter().filter(|(_, pins)| pins.contains(&None)).all(|(s, _)| s.kind.def().opt_in);
        let seen_before =
            seen.contains(ns, &w.template_hash) || (only_secrets_plain && seen_without_secrets.contains(ns, &w.template_hash));
        let new_template = !seen_before;
        let pinned_before = w.annotations.contains_key(names::PINS);
        let mut plain: Vec<(SourceId, String)> = Vec::new(); // (source, hash to go to)
        let mut undone = Vec::new();
        let mut unknown_config = Vec::new();
        let mut read_first = false;
        for (source, pins) in sources {
            if !pins.contains(&None) {
                continue;
            }
            let Some(cm) = state.source(ns, &source) else { continue };
            if !source::is_versioned_source_of(&source, cm, &policy.excluded_sources)
                || propagate::pending_change(state, policy, ns, &source, cm).is_some()
            {
                continue;
            }
            // Adopted: an undo target, never restarted. A template never seen before is an
            // outage's even when adopted (repair records its content before the trigger).
            if !new_template && adopted(ns, &source, &w.template_hash) {
                // ...unless confighistory had pinned it: back on an adopted plain template, it
                // was undone to that revision while the webhook was away.
                let was_pinned = pinned_before || revision_pins.contains_key(&(w.uid.as_str(), source.clone()));
                if let Some((_, hash)) = state.adopted_snapshot(ns, &source, &w.template_hash).filter(|_| was_pinned) {
                    // A trigger is acted on: the source is read first, as below (docs/behaviour.md §3).
                    if !cm.known_mutable() {
                        unknown.insert((ns.clone(), source));
                        read_first = true;
                        continue;
                    }
                    undone.push(source.clone());
                    plain.push((source, hash));
                }
                continue;
            }
            // Only what would be acted on is read (a new leader reads no adopted source again).
            if !cm.known_mutable() {
                unknown.insert((ns.clone(), source));
                read_first = true;
                continue;
            }
            // A template from before confighistory pinned this workload, in no adoption record:
            // undone to it while the webhook was away. The config it ran with is unknown, so it
            // goes to the head as docs/behaviour.md §6.2.1 does, and is never recorded as the current content's.
            let pinned_since = revision_pins.get(&(w.uid.as_str(), source.clone()));
            let from_before = revision_of.get(&(w.uid.as_str(), w.template_hash.as_str())).zip(pinned_since).is_some_and(|(t, p)| t < p);
            if !new_template && (pinned_before || from_before) {
                unknown_config.push(source.clone());
            }
            plain.push((source, cm.annotation(names::HEAD).unwrap_or_default().to_owned()));
        }
        if read_first {
            // One decision for the whole template, once every source it names plainly is known.
            deferred.push((ns.to_string(), w.template_hash.to_string()));
            continue;
        }
        if plain.is_empty() {
            continue;
        }
        if (pinned_before || new_template || !undone.is_empty() || !unknown_config.is_empty()) && kind.propagates() {
            repairs.push(Plan {
                kind: *kind,
                namespace: ns.to_string(),
                name: name.to_string(),
                uid: w.uid.to_string(),
                trigger: plain.into_iter().collect(),
                released: Vec::new(),
                undone,
                unknown: unknown_config,
            });
        } else if !pinned_before && unknown_config.is_empty() && kind.has_history() {
            for (source, _) in plain {
                if !done.contains(&(ns.to_string(), source.clone(), w.template_hash.to_string())) {
                    adoptions.entry((ns.clone(), source)).or_default().insert(w.template_hash.to_string());
                }
            }
        }
    }
    Decisions {
        adoptions: adoptions
            .into_iter()
            .map(|((namespace, source), t)| Adoption { namespace: namespace.to_string(), source, templates: t.into_iter().collect() })
            .collect(),
        repairs,
        unknown: unknown.into_iter().collect(),
        deferred,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::Writer;
    use crate::controller::propagate::tests::{h, snap, source, workload, T0};
    use crate::model::kinds::Kind;
    use crate::model::snapshot;
    use crate::model::template;
    use serde_json::json;

    fn tpl_hash(s: &State, name: &str) -> String {
        s.workload(&(Kind::Deployment, "ns".into(), name.into())).unwrap().template_hash.to_string()
    }

    /// The propagation pass's bookkeeping (docs/behaviour.md §4a, §9): templates of namespaces
    /// the loops do not act in go to `seen`; where Secrets are on for some namespaces only, those
    /// of the others to `without_secrets`; a later pass finds them noted and changes nothing.
    #[test]
    fn the_pass_notes_each_template_once_where_it_was_admitted_unpinned_on_purpose() {
        let policy = crate::controller::propagate::tests::secrets_on("secrets=on");
        let mut s = State::default();
        s.apply_namespace(&json!({"metadata": {"name": "on", "labels": {"secrets": "on"}}}));
        s.apply_namespace(&json!({"metadata": {"name": "off"}}));
        s.apply_namespace(&json!({"metadata": {"name": "audited", "labels": {names::MODE_LABEL: "audit"}}}));
        for ns in ["on", "off", "audited"] {
            for name in ["a", "b"] {
                s.apply_workload(Kind::Deployment, &workload(ns, name, &[name], &[]));
            }
        }
        let template = |ns: &str, name: &str| s.workload(&(Kind::Deployment, ns.into(), name.into())).unwrap().template_hash.clone();
        let (mut seen, mut without) = (Seen::new(), Seen::new());
        note_seen(&s, &policy, &Selector::default(), &mut seen, Some(&mut without));
        let expected = |ns: &str| Seen::from([(ns.to_owned(), template(ns, "a")), (ns.to_owned(), template(ns, "b"))]);
        assert_eq!(seen, expected("audited"), "the loops do not act in audit mode");
        assert_eq!(without, expected("off"), "Secrets are off there");
        let (seen_before, without_before) = (seen.clone(), without.clone());
        note_seen(&s, &policy, &Selector::default(), &mut seen, Some(&mut without));
        assert_eq!((seen.len(), without.len()), (2, 2));
        assert!(seen == seen_before && without == without_before, "a steady pass changes nothing");
        assert!(!without.insert("off", &template("off", "a")), "already there: not inserted again");
        // Secrets off for the whole server: nothing is noted without them.
        note_seen(&s, &Policy::default(), &Selector::default(), &mut Seen::new(), None);
        let mut retained = without.clone();
        retained.retain(|_, t| t == template("off", "a"));
        assert_eq!(retained, Seen::from([("off".to_owned(), template("off", "a"))]));
        retained.retain(|_, _| false);
        assert!(retained.is_empty() && retained == Seen::new(), "an emptied namespace is dropped");
    }

    #[test]
    fn existing_plain_workloads_are_adopted_not_restarted() {
        let mut s = State::default();
        s.apply_configmap(&source("ns", "cfg", &h('a'), &[]));
        s.apply_workload(Kind::Deployment, &workload("ns", "old", &["cfg"], &[]));
        s.apply_workload(Kind::Job, &workload("ns", "job", &["cfg"], &[]));
        let seen = current_templates(&s);
        let d = decide(&s, &Policy::default(), &Selector::default(), &seen, &Seen::new(), &HashSet::new());
        assert!(d.repairs.is_empty());
        assert_eq!(
            d.adoptions,
            [Adoption { namespace: "ns".into(), source: SourceId::configmap("cfg"), templates: vec![tpl_hash(&s, "old")] }]
        );

        // Once recorded, nothing more to do.
        let mut rec = snap("ns", "cfg", &h('a'));
        rec["metadata"]["annotations"][names::ADOPTED] = json!(tpl_hash(&s, "old"));
        s.apply_configmap(&rec);
        assert_eq!(decide(&s, &Policy::default(), &Selector::default(), &seen, &Seen::new(), &HashSet::new()), Decisions::default());
    }

    #[test]
    fn plain_templates_admitted_while_the_webhook_was_down_are_repaired() {
        let mut s = State::default();
        s.apply_configmap(&source("ns", "cfg", &h('a'), &[]));
        let seen = current_templates(&s);
        // A new workload, never seen, no adoption record.
        s.apply_workload(Kind::Deployment, &workload("ns", "new", &["cfg"], &[]));
        // A workload confighistory had pinned, re-applied plain during the outage.
        s.apply_workload(Kind::StatefulSet, &workload("ns", "was-pinned", &["cfg"], &[(names::PINS, "{\"cfg\":\"x\"}")]));
        // Pinned workloads need nothing.
        s.apply_workload(Kind::Deployment, &workload("ns", "pinned", &[&snapshot::name("cfg", &h('a'), 0)], &[]));
        // Repair records the outage template's content before its trigger: still repaired after.
        let mut rec = snap("ns", "cfg", &h('a'));
        rec["metadata"]["annotations"][names::ADOPTED] = json!(tpl_hash(&s, "new"));
        s.apply_configmap(&rec);
        let d = decide(&s, &Policy::default(), &Selector::default(), &seen, &Seen::new(), &HashSet::new());
        assert!(d.adoptions.is_empty(), "{d:?}");
        let names: Vec<&str> = d.repairs.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["new", "was-pinned"]);
        assert_eq!(d.repairs[0].trigger_value(), format!("cfg={}", h('a')));
    }

    #[test]
    fn a_source_the_cache_knows_by_metadata_only_is_read_before_adoption_or_repair() {
        let mut s = State::default();
        let partial = |name: &str| {
            let mut o = source("ns", name, &h('a'), &[]);
            o.as_object_mut().unwrap().remove("data");
            o["kind"] = json!(crate::cache::PARTIAL_OBJECT_METADATA);
            o["metadata"]["resourceVersion"] = json!("5");
            o
        };
        s.apply_configmap(&partial("cfg"));
        s.apply_configmap(&partial("imm"));
        s.apply_workload(Kind::Deployment, &workload("ns", "old", &["cfg"], &[]));
        s.apply_workload(Kind::Deployment, &workload("ns", "both", &["cfg", "imm"], &[]));
        let seen = current_templates(&s);
        let run = |s: &State| decide(s, &Policy::default(), &Selector::default(), &seen, &Seen::new(), &HashSet::new());
        let d = run(&s);
        assert_eq!((d.adoptions.len(), d.repairs.len()), (0, 0));
        assert_eq!(d.unknown, [("ns".into(), SourceId::configmap("cfg")), ("ns".into(), SourceId::configmap("imm"))]);
        let deferred: Vec<&str> = d.deferred.iter().map(|(_, t)| t.as_str()).collect();
        assert_eq!(deferred, [tpl_hash(&s, "both"), tpl_hash(&s, "old")], "not decided, so not seen yet");

        let read = |name: &str, immutable: bool| {
            let mut o = source("ns", name, &h('a'), &[]);
            o["metadata"]["resourceVersion"] = json!("5");
            o["immutable"] = json!(immutable);
            o
        };
        s.learn_source("ns", &SourceId::configmap("cfg"), &read("cfg", false));
        s.learn_source("ns", &SourceId::configmap("imm"), &read("imm", true));
        let d = run(&s);
        assert!(d.unknown.is_empty() && d.repairs.is_empty());
        let adopted: Vec<(&str, usize)> = d.adoptions.iter().map(|a| (a.source.name.as_str(), a.templates.len())).collect();
        assert_eq!(adopted, [("cfg", 2)], "the immutable source is left alone");
    }

    #[test]
    fn adopted_templates_need_no_read_of_their_sources() {
        let mut s = State::default();
        let mut src = source("ns", "cfg", &h('a'), &[]);
        src.as_object_mut().unwrap().remove("data");
        src["kind"] = json!(crate::cache::PARTIAL_OBJECT_METADATA);
        s.apply_configmap(&src);
        s.apply_workload(Kind::Deployment, &workload("ns", "old", &["cfg"], &[]));
        let mut rec = snap("ns", "cfg", &h('a'));
        rec["metadata"]["annotations"][names::ADOPTED] = json!(tpl_hash(&s, "old"));
        s.apply_configmap(&rec);
        let seen = current_templates(&s);
        assert_eq!(decide(&s, &Policy::default(), &Selector::default(), &seen, &Seen::new(), &HashSet::new()), Decisions::default());
    }

    /// A seen plain template in no adoption record, on a workload that still carries `pins` (an
    /// undo that kept the workload's annotations): its config is unknown, so it is repaired to
    /// the head, marked so, and never adopted.
    #[test]
    fn a_pinned_workload_back_on_a_seen_template_no_record_lists_is_repaired_as_unknown() {
        let mut s = State::default();
        s.apply_configmap(&source("ns", "cfg", &h('a'), &[]));
        s.apply_workload(Kind::Deployment, &workload("ns", "app", &["cfg"], &[(names::PINS, "{\"cfg\":\"x\"}")]));
        let seen = current_templates(&s);
        let d = decide(&s, &Policy::default(), &Selector::default(), &seen, &Seen::new(), &HashSet::new());
        assert!(d.adoptions.is_empty(), "{d:?}");
        let repairs: Vec<(&str, String, &[SourceId])> =
            d.repairs.iter().map(|p| (p.name.as_str(), p.trigger_value(), &p.unknown[..])).collect();
        assert_eq!(repairs, [("app", format!("cfg={}", h('a')), &[SourceId::configmap("cfg")][..])]);
    }

    #[test]
    fn pending_changes_missing_or_unversioned_sources_are_left_alone() {
        let mut s = State::default();
        s.apply_configmap(&source("ns", "pending", &h('a'), &[(names::CHANGED_AT, T0)]));
        s.apply_configmap(&source("ns", "hot", &h('a'), &[(names::VERSIONED, "false")]));
        let mut imm = source("ns", "imm", &h('a'), &[]);
        imm["immutable"] = json!(true);
        s.apply_configmap(&imm);
        s.apply_workload(Kind::Deployment, &workload("ns", "d", &["pending", "hot", "imm", "missing", names::ROOT_CA], &[]));
        let d = decide(&s, &Policy::default(), &Selector::default(), &Seen::new(), &Seen::new(), &HashSet::new());
        assert_eq!(d, Decisions::default());
        let _ = template::template_hash(&json!({}));
    }
}
