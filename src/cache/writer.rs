//! The writer: how a watch's events change the cache's state and its indexes.

use std::collections::{BTreeSet, HashSet};

use compact_str::CompactString;
use serde_json::Value;

use super::records::{
    controller_owner, kept_annotations, str_at, Key, NamespaceInfo, RefCount, RevisionInfo, SourceInfo, SourceKey, WorkloadInfo,
    WORKLOAD_ANNOTATIONS,
};
use super::state::{skey, State};
use super::watched::Watched;
use crate::model::ids::{SourceId, SourceKind};
use crate::model::json::At;
use crate::model::kinds::Kind;
use crate::model::meta::{self, Meta};
use crate::model::names;
use crate::model::rollout;
use crate::model::snapshot;
use crate::model::source;
use crate::model::template;

/// Gives a short index list back the room a push reserved beyond it (a `Vec` grows to four at
/// once): most lists hold one or two entries, and there is one per referenced object.
fn tight<T>(v: &mut Vec<T>) {
    if v.len() <= 8 {
        v.shrink_to_fit();
    }
}

/// What a record still knows about immutability at a new version of the same object.
fn known_still(old: &SourceInfo, uid: &str, resource_version: &str) -> Option<bool> {
    match old.immutable {
        Some(true) if old.uid == uid => Some(true),
        Some(false) if old.uid == uid && old.resource_version == resource_version && !resource_version.is_empty() => Some(false),
        _ => None,
    }
}

fn key_of(obj: &Value) -> Key {
    (str_at(&obj["metadata"], "namespace").into(), str_at(&obj["metadata"], "name").into())
}

fn source_key(kind: SourceKind, obj: &Value) -> SourceKey {
    (str_at(&obj["metadata"], "namespace").into(), SourceId::new(kind, str_at(&obj["metadata"], "name")))
}

/// A change to the cache, as a watch (or a fresh read) delivers it.
#[derive(Clone, Copy, Debug)]
pub enum Event<'a> {
    /// An object of `what` added or changed (each object of a relist too).
    Apply(Watched, &'a Value),
    /// An object of `what` deleted.
    Delete(Watched, &'a Value),
    /// A list of `what` (the first, or a relist after the watch restarted) ended, having
    /// delivered the objects whose (namespace, name) are in `seen`: the others are gone, and the
    /// watch has synced ([`super::Readiness`]).
    Relisted(Watched, &'a HashSet<Key>),
    /// A source (namespace, id) read whole from the API server: what it says about immutability,
    /// which the metadata-only watch does not carry, when it is the object the cache holds.
    Read(&'a str, &'a SourceId, &'a Value),
}

/// The write side of the cache: every change to a [`State`] is one [`Writer::apply`]. The
/// watches apply their events (`cluster::watch`), the controller what it learnt from a fresh
/// read. A trait rather than inherent methods so that a reader's `&State` shows the queries
/// alone, and code that writes says so with `use cache::Writer`; the other methods are
/// shorthands of one event each, for fixtures that fill a state by hand.
pub trait Writer {
    /// Applies `event`, keeping every index beside the records. Returns whether it made the
    /// cache ready (the last watch readiness waits for delivered its first list).
    fn apply(&mut self, event: Event<'_>) -> bool;

    fn apply_namespace(&mut self, obj: &Value) {
        self.apply(Event::Apply(Watched::Namespaces, obj));
    }
    fn delete_namespace(&mut self, obj: &Value) {
        self.apply(Event::Delete(Watched::Namespaces, obj));
    }
    /// A ConfigMap as its watch delivers it.
    fn apply_configmap(&mut self, obj: &Value) {
        self.apply(Event::Apply(Watched::Sources(SourceKind::ConfigMap), obj));
    }
    /// An object of a source kind as its watch delivers it.
    fn apply_source(&mut self, kind: SourceKind, obj: &Value) {
        self.apply(Event::Apply(Watched::Sources(kind), obj));
    }
    fn delete_source(&mut self, kind: SourceKind, obj: &Value) {
        self.apply(Event::Delete(Watched::Sources(kind), obj));
    }
    fn apply_workload(&mut self, kind: Kind, obj: &Value) {
        self.apply(Event::Apply(Watched::Workload(kind), obj));
    }
    fn delete_workload(&mut self, kind: Kind, obj: &Value) {
        self.apply(Event::Delete(Watched::Workload(kind), obj));
    }
    fn apply_revision(&mut self, kind: Kind, obj: &Value) {
        self.apply(Event::Apply(Watched::Revision(kind), obj));
    }
    fn delete_revision(&mut self, kind: Kind, obj: &Value) {
        self.apply(Event::Delete(Watched::Revision(kind), obj));
    }
    /// Records what a full object read from the API server says about immutability
    /// ([`Event::Read`]).
    fn learn_source(&mut self, ns: &str, id: &SourceId, obj: &Value) {
        self.apply(Event::Read(ns, id, obj));
    }
    /// Replaces every object of one watch after a relist ([`Event::Relisted`]).
    fn relisted(&mut self, what: Watched, seen: &HashSet<Key>) -> bool {
        self.apply(Event::Relisted(what, seen))
    }
    /// A list of `what` that delivered what the state holds of it: the watch counts as synced,
    /// and no record goes ([`Event::Relisted`]; for fixtures filled by hand).
    fn listed(&mut self, what: Watched) -> bool;
}

impl Writer for State {
    fn listed(&mut self, what: Watched) -> bool {
        let seen = self.keys_of(what);
        self.apply(Event::Relisted(what, &seen))
    }

    fn apply(&mut self, event: Event<'_>) -> bool {
        match event {
            Event::Apply(what, obj) => self.apply_object(what, obj),
            Event::Delete(what, obj) => self.delete_object(what, obj),
            Event::Read(ns, id, obj) => self.learn_read(ns, id, obj),
            Event::Relisted(what, seen) => {
                self.retain_seen(what, seen);
                // Readiness waits for every watch but those of kinds the admin registered, which
                // start once their API is served (`cluster::watch::start`).
                let awaited = Watched::all(self.kinds, self.source_kinds);
                let awaited = awaited.into_iter().filter(|w| !matches!(w, Watched::Workload(k) if !k.is_builtin()));
                return self.readiness.synced(what, awaited);
            }
        }
        false
    }
}

impl State {
    fn insert_namespace(&mut self, obj: &Value) {
        self.namespaces.insert(str_at(&obj["metadata"], "name"), NamespaceInfo::from_object(obj));
    }

    fn drop_namespace(&mut self, obj: &Value) {
        self.namespaces.remove(&str_at(&obj["metadata"], "name"));
    }

    /// An object of a source kind as its watch delivers it.
    fn insert_source(&mut self, kind: SourceKind, obj: &Value) {
        let key = source_key(kind, obj);
        let mut info = SourceInfo::from_object_keeping(obj, self.source_labels.as_ref());
        if kind.def().never == crate::model::sourcekinds::Never::SecretRules {
            // What never_source reads besides the type (docs/behaviour.md §4a): a certificate
            // issuer's annotation. A Secret's record keeps no value: its metadata only (the
            // annotations above are confighistory's own, heads are MACs).
            let cert = obj["metadata"]["annotations"].get(names::CERTIFICATE_NAME).and_then(Value::as_str);
            if let Some(c) = cert {
                info.annotations.insert(names::CERTIFICATE_NAME, meta::bounded(names::CERTIFICATE_NAME, c));
            }
        }
        if let (None, Some(old)) = (info.immutable, self.sources.get(&key)) {
            info.immutable = known_still(old, &info.uid, &info.resource_version);
        }
        self.remove_source(&key);
        self.index_snapshot(&key, &info, true);
        if info.annotation(names::HEAD).is_some_and(|head| source::pending_change(&info, head).is_some()) {
            self.pending_changes.insert(key.clone());
        }
        self.sources.insert(key, info);
    }

    /// Adds (or removes) `info`, the record of `key`, to the snapshots of its source.
    fn index_snapshot(&mut self, key: &SourceKey, info: &SourceInfo, add: bool) {
        let Some((source, _)) = info.snapshot_of(&key.1.name) else { return };
        let source = (key.0.clone(), key.1.with_name(source));
        let names = self.snapshots.entry(source.clone()).or_default();
        let at = names.iter().position(|n| *n == key.1.name);
        match (add, at) {
            (true, None) => names.push(key.1.name.clone()),
            (false, Some(i)) => {
                names.swap_remove(i);
            }
            _ => {}
        }
        if names.is_empty() {
            self.snapshots.remove(&source);
        } else {
            tight(names);
        }
    }

    fn remove_source(&mut self, key: &SourceKey) {
        if let Some(old) = self.sources.remove(key) {
            self.index_snapshot(key, &old, false);
            self.pending_changes.remove(key);
        }
    }

    /// Records what a full object read from the API server says about immutability, when it is
    /// the object the cache holds: immutable for good, or mutable at the cached version.
    fn learn_read(&mut self, ns: &str, id: &SourceId, obj: &Value) {
        let Some(cm) = self.sources.get_mut(&skey(ns, id)) else { return };
        let fresh = SourceInfo::from_object_keeping(obj, Some(&BTreeSet::new()));
        if fresh.uid == cm.uid && (fresh.immutable == Some(true) || fresh.resource_version == cm.resource_version) {
            cm.immutable = fresh.immutable;
        }
    }

    fn drop_source(&mut self, kind: SourceKind, obj: &Value) {
        self.remove_source(&source_key(kind, obj));
    }

    fn insert_workload(&mut self, kind: Kind, obj: &Value) {
        let (ns, name) = key_of(obj);
        let tpl = obj.at(kind.template_pointer()).unwrap_or(&Value::Null);
        let meta = &obj["metadata"];
        let info = WorkloadInfo {
            uid: str_at(meta, "uid").into(),
            template_hash: kind.template_hash(tpl).into(),
            refs: template::ref_sources(tpl, self.source_kinds).into_iter().collect(),
            annotations: kept_annotations(&meta["annotations"], &WORKLOAD_ANNOTATIONS),
            owner_kind: controller_owner(meta).map(|(k, _)| k),
            deleting: obj.deleting(),
            rolled_out: rollout::rolled_out(kind.def().rollout, obj),
        };
        self.remove_workload(kind, &ns, &name);
        self.count_refs(&ns, &info.refs, 1, Some((kind, &name)));
        if !info.uid.is_empty() {
            self.seen_templates.entry((ns.clone(), info.uid.clone())).or_default().insert(info.template_hash.to_string());
        }
        self.workloads.insert((kind, ns, name), info);
    }

    fn drop_workload(&mut self, kind: Kind, obj: &Value) {
        let (ns, name) = key_of(obj);
        self.forget_workload(kind, &ns, &name);
    }

    /// A workload that is gone: its references and the templates it was seen with.
    fn forget_workload(&mut self, kind: Kind, ns: &str, name: &str) {
        if let Some(uid) = self.workloads.get(&(kind, ns.into(), name.into())).map(|w| w.uid.clone()) {
            self.seen_templates.remove(&(ns.into(), uid));
        }
        self.remove_workload(kind, ns, name);
    }

    fn remove_workload(&mut self, kind: Kind, ns: &str, name: &str) {
        if let Some(old) = self.workloads.remove(&(kind, ns.into(), name.into())) {
            self.count_refs(ns, &old.refs, -1, Some((kind, name)));
        }
    }

    fn insert_revision(&mut self, kind: Kind, obj: &Value) {
        let (ns, name) = key_of(obj);
        let meta = &obj["metadata"];
        let tpl = obj.at(kind.template_pointer()).unwrap_or(&Value::Null);
        let (revision, template_hash) = self.kinds.revision_of(kind, obj);
        let info = RevisionInfo {
            owner_uid: controller_owner(meta).map(|(_, uid)| uid.into()).unwrap_or_default(),
            created: str_at(meta, "creationTimestamp").into(),
            template_hash: template_hash.into(),
            refs: template::ref_sources(tpl, self.source_kinds).into_iter().collect(),
            revision,
        };
        self.remove_revision(kind, &ns, &name);
        self.count_refs(&ns, &info.refs, 1, None);
        if !info.owner_uid.is_empty() {
            let owned = self.owner_revisions.entry((ns.clone(), info.owner_uid.clone())).or_default();
            owned.push((kind, name.clone()));
            tight(owned);
        }
        *self.namespace_templates.entry(ns.to_string()).or_default().entry(info.template_hash.clone()).or_default() += 1;
        self.revisions.insert((kind, ns, name), info);
    }

    fn drop_revision(&mut self, kind: Kind, obj: &Value) {
        let (ns, name) = key_of(obj);
        self.remove_revision(kind, &ns, &name);
    }

    fn remove_revision(&mut self, kind: Kind, ns: &str, name: &str) {
        let Some(old) = self.revisions.remove(&(kind, ns.into(), name.into())) else { return };
        self.count_refs(ns, &old.refs, -1, None);
        let owner: Key = (ns.into(), old.owner_uid.clone());
        if let Some(owned) = self.owner_revisions.get_mut(&owner) {
            owned.retain(|(k, n)| !(*k == kind && n == name));
            if owned.is_empty() {
                self.owner_revisions.remove(&owner);
            }
        }
        if let Some(m) = self.namespace_templates.get_mut(ns) {
            if let Some(c) = m.get_mut(&old.template_hash) {
                *c = c.saturating_sub(1);
                if *c == 0 {
                    m.remove(&old.template_hash);
                }
            }
        }
    }

    /// Counts `refs` in (`delta` 1) or out (-1): a workload's (`workload`: its kind and name,
    /// kept with the count) or a revision's.
    fn count_refs(&mut self, ns: &str, refs: &[SourceId], delta: i32, workload: Option<(Kind, &str)>) {
        for id in refs {
            let key = skey(ns, id);
            let r = self.refs.entry(key.clone()).or_default();
            let slot = if workload.is_some() { &mut r.count.workloads } else { &mut r.count.revisions };
            *slot = slot.saturating_add_signed(delta);
            if let Some((kind, name)) = workload {
                let at = r.workloads.iter().position(|(k, n)| *k == kind && n == name);
                match (delta > 0, at) {
                    (true, None) => r.workloads.push((kind, name.into())),
                    (false, Some(i)) => {
                        r.workloads.swap_remove(i);
                    }
                    _ => {}
                }
                tight(&mut r.workloads);
            }
            if r.count == RefCount::default() {
                self.refs.remove(&key);
            }
            if workload.is_some() {
                if let Some((source, _, _)) = snapshot::parse_name(&id.name) {
                    let key: SourceKey = (ns.into(), id.with_name(source));
                    let c = self.snapshot_sources.entry(key.clone()).or_default();
                    *c = c.saturating_add_signed(delta);
                    if *c == 0 {
                        self.snapshot_sources.remove(&key);
                    }
                }
            }
        }
    }

    /// The (namespace, name) of every object of `what` the state holds.
    fn keys_of(&self, what: Watched) -> HashSet<Key> {
        match what {
            Watched::Namespaces => self.namespaces.keys().map(|n| (CompactString::default(), n.as_str().into())).collect(),
            Watched::Sources(kind) => {
                self.sources.keys().filter(|(_, id)| id.kind == kind).map(|(ns, id)| (ns.clone(), id.name.as_str().into())).collect()
            }
            Watched::Workload(kind) => {
                self.workloads.keys().filter(|(k, _, _)| *k == kind).map(|(_, ns, n)| (ns.clone(), n.clone())).collect()
            }
            Watched::Revision(kind) => {
                self.revisions.keys().filter(|(k, _, _)| *k == kind).map(|(_, ns, n)| (ns.clone(), n.clone())).collect()
            }
        }
    }

    /// Replaces every object of one watch after a relist: entries not in `seen` are dropped.
    fn retain_seen(&mut self, what: Watched, seen: &HashSet<Key>) {
        match what {
            Watched::Namespaces => self.namespaces.retain(|n, _| seen.contains(&(CompactString::default(), n.as_str().into()))),
            // Each watch relists its own kind: a ConfigMap relist leaves other kinds' objects be.
            Watched::Sources(kind) => {
                let gone: Vec<SourceKey> = self
                    .sources
                    .keys()
                    .filter(|(ns, id)| id.kind == kind && !seen.contains(&(ns.clone(), id.name.as_str().into())))
                    .cloned()
                    .collect();
                for key in gone {
                    self.remove_source(&key);
                }
            }
            Watched::Workload(kind) => {
                let gone: Vec<_> =
                    self.workloads.keys().filter(|(k, n, m)| *k == kind && !seen.contains(&(n.clone(), m.clone()))).cloned().collect();
                for (k, n, m) in gone {
                    self.forget_workload(k, &n, &m);
                }
            }
            Watched::Revision(kind) => {
                let gone: Vec<_> =
                    self.revisions.keys().filter(|(k, n, m)| *k == kind && !seen.contains(&(n.clone(), m.clone()))).cloned().collect();
                for (k, n, m) in gone {
                    self.remove_revision(k, &n, &m);
                }
            }
        }
    }

    fn apply_object(&mut self, what: Watched, obj: &Value) {
        match what {
            Watched::Namespaces => self.insert_namespace(obj),
            Watched::Sources(k) => self.insert_source(k, obj),
            Watched::Workload(k) => self.insert_workload(k, obj),
            Watched::Revision(k) => self.insert_revision(k, obj),
        }
    }

    fn delete_object(&mut self, what: Watched, obj: &Value) {
        match what {
            Watched::Namespaces => self.drop_namespace(obj),
            Watched::Sources(k) => self.drop_source(k, obj),
            Watched::Workload(k) => self.drop_workload(k, obj),
            Watched::Revision(k) => self.drop_revision(k, obj),
        }
    }
}

#[cfg(test)]
mod tests {
    //! Each event leaves the queries as a state built from the objects the cluster then holds
    //! would answer them; readiness turns once, when the last watch it waits for has listed.
    use super::*;
    use crate::model::kinds::tests::with_rollout;
    use serde_json::json;

    fn configmap(ns: &str, name: &str, uid: &str) -> Value {
        json!({"metadata": {"namespace": ns, "name": name, "uid": uid, "resourceVersion": "1"}})
    }

    fn deployment(name: &str, cm: &str) -> Value {
        json!({"metadata": {"namespace": "ns", "name": name, "uid": format!("uid-{name}")},
               "spec": {"template": {"spec": {"volumes": [{"name": "c", "configMap": {"name": cm}}]}}}})
    }

    fn key(ns: &str, name: &str) -> Key {
        (ns.into(), name.into())
    }

    const CONFIGMAPS: Watched = Watched::Sources(SourceKind::ConfigMap);
    const DEPLOYMENTS: Watched = Watched::Workload(Kind::Deployment);

    #[test]
    fn apply_add_modify_and_delete_events_leave_the_queries_right() {
        let mut s = State::default();
        let cfg = SourceId::configmap("cfg");
        let other = SourceId::configmap("other");
        // Add.
        assert!(!s.apply(Event::Apply(CONFIGMAPS, &configmap("ns", "cfg", "u1"))));
        s.apply(Event::Apply(DEPLOYMENTS, &deployment("a", "cfg")));
        assert_eq!(s.source("ns", &cfg).map(|c| c.uid.as_str()), Some("u1"));
        assert_eq!(s.ref_count("ns", &cfg).workloads, 1);
        assert_eq!(s.user_names("ns", &cfg, false), ["Deployment/a"]);
        assert_eq!(s.plain_users("ns", &cfg).len(), 1);
        // Modify: the workload now names another source; the source is re-created.
        s.apply(Event::Apply(DEPLOYMENTS, &deployment("a", "other")));
        s.apply(Event::Apply(CONFIGMAPS, &configmap("ns", "cfg", "u2")));
        assert_eq!(s.ref_count("ns", &cfg), RefCount::default());
        assert!(s.user_names("ns", &cfg, true).is_empty() && !s.is_referenced_source("ns", &cfg));
        assert_eq!(s.user_names("ns", &other, false), ["Deployment/a"]);
        assert_eq!(s.source("ns", &cfg).map(|c| c.uid.as_str()), Some("u2"));
        assert_eq!(s.sources().count(), 1);
        // Delete.
        s.apply(Event::Delete(DEPLOYMENTS, &deployment("a", "other")));
        s.apply(Event::Delete(CONFIGMAPS, &configmap("ns", "cfg", "u2")));
        assert!(s.source("ns", &cfg).is_none() && s.workloads().next().is_none());
        assert_eq!(s.ref_count("ns", &other), RefCount::default());
        // The indexes hold nothing of what is gone.
        assert!(s.refs.is_empty() && s.snapshot_sources.is_empty() && s.seen_templates.is_empty());
    }

    #[test]
    fn a_relist_after_a_restart_leaves_what_it_delivered_and_drops_the_rest() {
        let mut s = State::default();
        for name in ["a", "b", "c"] {
            s.apply(Event::Apply(CONFIGMAPS, &configmap("ns", name, name)));
        }
        s.apply(Event::Apply(DEPLOYMENTS, &deployment("d", "a")));
        s.apply(Event::Apply(Watched::Namespaces, &json!({"metadata": {"name": "ns"}})));
        // The ConfigMap watch restarts: its relist delivers `a` again (changed) and a new `d`;
        // `b` and `c` were deleted while it was away.
        s.apply(Event::Apply(CONFIGMAPS, &configmap("ns", "a", "a2")));
        s.apply(Event::Apply(CONFIGMAPS, &configmap("ns", "d", "d")));
        let seen: HashSet<Key> = [key("ns", "a"), key("ns", "d")].into();
        s.apply(Event::Relisted(CONFIGMAPS, &seen));
        let mut names: Vec<&str> = s.sources().map(|((_, id), _)| id.name.as_str()).collect();
        names.sort();
        assert_eq!(names, ["a", "d"]);
        assert_eq!(s.source("ns", &SourceId::configmap("a")).map(|c| c.uid.as_str()), Some("a2"));
        assert!(s.source_unlisted("ns", &SourceId::configmap("b")), "listed, and not there");
        assert!(!s.source_unlisted("ns", &SourceId::configmap("a")));
        // Other watches' objects stay: a relist replaces its own kind only.
        assert_eq!(s.ref_count("ns", &SourceId::configmap("a")).workloads, 1);
        assert!(s.namespace("ns").is_some() && !s.namespace_unlisted("other"), "the namespace watch has not listed");
        // A relist of the workloads that no longer has `d` takes its references with it.
        s.apply(Event::Relisted(DEPLOYMENTS, &HashSet::new()));
        assert_eq!(s.ref_count("ns", &SourceId::configmap("a")), RefCount::default());
        assert!(s.refs.is_empty());
    }

    #[test]
    fn a_read_teaches_immutability_of_the_object_held_only() {
        let mut s = State::default();
        let cfg = SourceId::configmap("cfg");
        s.apply(Event::Apply(
            CONFIGMAPS,
            &json!({"kind": "PartialObjectMetadata", "metadata": {"namespace": "ns", "name": "cfg", "uid": "u1", "resourceVersion": "3"}}),
        ));
        assert_eq!(s.source("ns", &cfg).unwrap().immutable, None);
        let whole =
            |uid: &str| json!({"metadata": {"namespace": "ns", "name": "cfg", "uid": uid, "resourceVersion": "3"}, "immutable": true});
        s.apply(Event::Read("ns", &cfg, &whole("u0")));
        assert_eq!(s.source("ns", &cfg).unwrap().immutable, None, "another object of that name");
        s.apply(Event::Read("ns", &cfg, &whole("u1")));
        assert_eq!(s.source("ns", &cfg).unwrap().immutable, Some(true));
        s.apply(Event::Read("ns", &SourceId::configmap("unknown"), &whole("u1")));
        assert!(s.source("ns", &SourceId::configmap("unknown")).is_none(), "a read adds no record");
    }

    #[test]
    fn readiness_turns_once_every_watch_it_waits_for_has_listed() {
        let mut s = State::default();
        s.set_kinds(with_rollout());
        let ready = s.readiness().ready();
        let rollout = with_rollout().workloads().find(|k| !k.is_builtin()).expect("a registered kind");
        let awaited: Vec<Watched> =
            Watched::all(with_rollout(), s.source_kinds()).into_iter().filter(|w| *w != Watched::Workload(rollout)).collect();
        assert!(awaited.len() > 3 && awaited.contains(&Watched::Namespaces) && awaited.contains(&CONFIGMAPS));
        let none = HashSet::new();
        // A registered kind's watch listing first counts for its own queries, not for readiness.
        assert!(!s.apply(Event::Relisted(Watched::Workload(rollout), &none)));
        let (last, first) = awaited.split_last().unwrap();
        for what in first {
            assert!(!s.apply(Event::Relisted(*what, &none)), "{} listed: not all yet", what.name());
            assert!(s.readiness().has_synced(*what) && !ready.is_ready() && !s.readiness().is_ready());
            // A relist of a watch that listed already changes nothing.
            assert!(!s.apply(Event::Relisted(*what, &none)));
        }
        assert!(s.apply(Event::Relisted(*last, &none)), "the last one makes the cache ready");
        assert!(ready.is_ready() && s.readiness().is_ready(), "the handle taken before says so too");
        assert!(!s.apply(Event::Relisted(*last, &none)), "ready once");
        assert!(!s.apply(Event::Apply(Watched::Namespaces, &json!({"metadata": {"name": "ns"}}))));
        assert!(ready.is_ready(), "and stays ready through later events");
    }

    #[test]
    fn a_fixture_listed_by_hand_keeps_its_records() {
        let mut s = State::default();
        s.apply_configmap(&configmap("ns", "cfg", "u1"));
        s.apply_workload(Kind::Deployment, &deployment("a", "cfg"));
        assert!(!s.listed(CONFIGMAPS));
        assert!(!s.listed(DEPLOYMENTS));
        assert!(s.source("ns", &SourceId::configmap("cfg")).is_some() && s.workloads().count() == 1);
        assert!(s.source_unlisted("ns", &SourceId::configmap("missing")) && !s.source_unlisted("ns", &SourceId::configmap("cfg")));
    }
}
