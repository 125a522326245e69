//! The cache's state and the questions admission, the controller's planners and the webhook
//! ask of it. Its fields are private: the watches change it through [`super::Writer::apply`]
//! only, which keeps the indexes beside the records; everything else reads it through the
//! queries below, each answered from an index without allocating (docs/performance.md, "Scale").

use std::collections::{hash_map, hash_set, BTreeSet, HashMap, HashSet};

use compact_str::CompactString;

use super::readiness::Readiness;
use super::records::{Key, NamespaceInfo, ObjectKey, RefCount, Referenced, RevisionInfo, SourceInfo, SourceKey, WorkloadInfo};
use super::watched::Watched;
use crate::model::ids::{self, SourceId, SourceKind};
use crate::model::kinds::{Kind, Registry};
use crate::model::meta::Meta;
use crate::model::names;
use crate::model::policy;
use crate::model::snapshot;
use crate::model::source;

/// The read-only store: the records of the watched objects and the indexes over them.
#[derive(Debug, Default)]
pub struct State {
    pub(super) namespaces: HashMap<String, NamespaceInfo>,
    /// Objects of the source kinds (sources and their snapshots), by (namespace, kind and name).
    pub(super) sources: HashMap<SourceKey, SourceInfo>,
    /// The sources whose records say a change of theirs waits to be propagated
    /// ([`source::pending_change`]): the few the propagation pass looks at every tick, instead of
    /// every source (100,000 ConfigMaps, 9 ms of the leader's cache read lock 4 times a
    /// second). Kept with `sources`.
    pub(super) pending_changes: HashSet<SourceKey>,
    pub(super) workloads: HashMap<ObjectKey, WorkloadInfo>,
    pub(super) revisions: HashMap<ObjectKey, RevisionInfo>,
    /// References by (namespace, object referenced), counted, with the workloads that make them.
    pub(super) refs: HashMap<SourceKey, Referenced>,
    /// Snapshots by (namespace, source): the names of the objects whose records say they are
    /// snapshots of it ([`SourceInfo::snapshot_of`]). Kept with `sources`, so that a question
    /// about one source's snapshots reads its own and not the whole cluster's.
    pub(super) snapshots: HashMap<SourceKey, Vec<String>>,
    /// Sources referenced through a snapshot name, counted (so a source that is only
    /// referenced through its snapshots still gets its head tracked).
    pub(super) snapshot_sources: HashMap<SourceKey, u32>,
    /// Revisions by (namespace, controlling owner's uid), undo detection: (kind, name) of each.
    /// The namespace in the key, once per owner: a revision counts only in its own namespace.
    pub(super) owner_revisions: HashMap<Key, Vec<(Kind, CompactString)>>,
    /// Template hashes that still exist as a revision, per namespace (live adoption records).
    pub(super) namespace_templates: HashMap<String, HashMap<CompactString, u32>>,
    /// Template hashes each workload has been seen with, by (namespace, uid): a revision counts
    /// for undo only when its template is one of them or it predates this process (docs/behaviour.md §9a: a
    /// ReplicaSet forged with an owner reference to a tenant's Deployment makes no "undo").
    pub(super) seen_templates: HashMap<Key, HashSet<String>>,
    /// Revisions created before this time (RFC 3339, seconds) are history from before this
    /// process and trusted as they are; `None` trusts every revision (tests of other rules).
    pub(super) revisions_trusted_before: Option<String>,
    /// Which watches have delivered their first list.
    pub(super) readiness: Readiness,
    /// Source labels kept besides the rules' own: the keys the admin's selector of excluded
    /// sources mentions. `None` keeps every label (tests that change the selector on the fly).
    pub(super) source_labels: Option<BTreeSet<String>>,
    /// The kinds watched (the built-ins unless set at start).
    pub(super) kinds: &'static Registry,
    /// The source kinds the admin turned on anywhere (`Policy::acted_on`): the references workload
    /// and revision records keep. ConfigMaps alone unless set at start.
    pub(super) source_kinds: ids::SourceKinds,
}

pub(super) fn skey(ns: &str, id: &SourceId) -> SourceKey {
    (ns.into(), id.clone())
}

impl State {
    /// A cache whose source records keep, of all labels, only those the rules and `selector`
    /// read: a tenant's ConfigMap with thousands of labels costs what one with a few does.
    pub fn keeping_labels(selector: &crate::model::selector::Selector) -> State {
        State { source_labels: Some(selector.keys().map(str::to_owned).collect()), ..State::default() }
    }

    // ---- configuration, set before the watches start: it changes no record ----

    /// Watches the kinds of `kinds` (the built-ins and those the admin registered).
    pub fn set_kinds(&mut self, kinds: &'static Registry) {
        self.kinds = kinds;
    }

    /// Keeps the references to objects of the source kinds `kinds` (`Policy::acted_on`).
    pub fn set_source_kinds(&mut self, kinds: ids::SourceKinds) {
        self.source_kinds = kinds;
    }

    /// Trusts, as history from before this process, the revisions created before `at` (RFC
    /// 3339); `None` trusts every revision.
    pub fn set_revisions_trusted_before(&mut self, at: Option<String>) {
        self.revisions_trusted_before = at;
    }

    // ---- queries ----

    /// The kinds watched.
    pub fn kinds(&self) -> &'static Registry {
        self.kinds
    }

    /// The source kinds whose references the records keep.
    pub fn source_kinds(&self) -> ids::SourceKinds {
        self.source_kinds
    }

    /// Which watches have delivered their first list.
    pub fn readiness(&self) -> &Readiness {
        &self.readiness
    }

    /// The record of a source (or snapshot) object, by its key.
    pub fn source_at(&self, key: &SourceKey) -> Option<&SourceInfo> {
        self.sources.get(key)
    }

    /// The record of a workload.
    pub fn workload(&self, key: &ObjectKey) -> Option<&WorkloadInfo> {
        self.workloads.get(key)
    }

    /// Every object of a source kind (sources and snapshots), for passes over the whole cache.
    pub fn sources(&self) -> hash_map::Iter<'_, SourceKey, SourceInfo> {
        self.sources.iter()
    }

    /// Every workload, for passes over the whole cache.
    pub fn workloads(&self) -> hash_map::Iter<'_, ObjectKey, WorkloadInfo> {
        self.workloads.iter()
    }

    /// Every revision, for passes over the whole cache.
    pub fn revisions(&self) -> hash_map::Iter<'_, ObjectKey, RevisionInfo> {
        self.revisions.iter()
    }

    /// The sources whose records say a change of theirs waits to be propagated
    /// ([`source::pending_change`]): a few, where a pass over `sources` reads them all.
    pub fn pending_changes(&self) -> hash_set::Iter<'_, SourceKey> {
        self.pending_changes.iter()
    }

    pub fn namespace(&self, ns: &str) -> Option<&NamespaceInfo> {
        self.namespaces.get(ns)
    }

    /// A namespace the namespace watch has listed and does not know: it does not exist (or was
    /// created a moment ago). `false` before the first list (and for states filled by hand).
    pub fn namespace_unlisted(&self, ns: &str) -> bool {
        self.readiness.has_synced(Watched::Namespaces) && !self.namespaces.contains_key(ns)
    }

    /// A source the watch of its kind has listed and does not know: it does not exist (or was
    /// created a moment ago). `false` before the first list (and for states filled by hand).
    pub fn source_unlisted(&self, ns: &str, id: &SourceId) -> bool {
        self.readiness.has_synced(Watched::Sources(id.kind)) && !self.sources.contains_key(&skey(ns, id))
    }

    /// The record of a source (or snapshot) object.
    pub fn source(&self, ns: &str, id: &SourceId) -> Option<&SourceInfo> {
        self.sources.get(&skey(ns, id))
    }

    pub fn ref_count(&self, ns: &str, id: &SourceId) -> RefCount {
        self.refs.get(&skey(ns, id)).map(|r| r.count).unwrap_or_default()
    }

    /// A source in the sense of docs/behaviour.md §6.1: referenced by some workload, plainly or through a
    /// snapshot. (The `head` annotation, the third way, is on the object itself.)
    pub fn is_referenced_source(&self, ns: &str, id: &SourceId) -> bool {
        let key = skey(ns, id);
        self.refs.get(&key).is_some_and(|r| r.count.workloads > 0) || self.snapshot_sources.get(&key).is_some_and(|c| *c > 0)
    }

    /// The source a referenced object belongs to, when it names a snapshot: (source, hash).
    pub fn snapshot_of(&self, ns: &str, id: &SourceId) -> Option<(SourceId, String)> {
        match self.source(ns, id) {
            Some(cm) => cm.snapshot_of(&id.name).map(|(source, hash)| (id.with_name(source), hash)),
            // Not seen yet (just created, or deleted): trust the shape of the name.
            None => {
                let (prefix, hash, index) = snapshot::parse_name(&id.name)?;
                let source = self.long_source(ns, id.kind, prefix, hash, index, &id.name).unwrap_or(prefix);
                Some((id.with_name(source), hash.to_owned()))
            }
        }
    }

    /// The source of a snapshot name whose source part was shortened (sources over
    /// [`snapshot::MAX_SOURCE_PART`] characters): the cached ConfigMap that gives exactly this
    /// name, preferring the one whose head is `hash`. (Shortening trims trailing `-` and `.` too;
    /// a prefix under 200 characters is taken as a whole source name.)
    /// Without it, a reinvocation that comes before the watch delivers the new snapshot would
    /// take the shortened prefix for the source and drop the pin from the workload's annotations.
    fn long_source<'a>(&'a self, ns: &str, kind: SourceKind, prefix: &str, hash: &str, index: u32, name: &str) -> Option<&'a str> {
        if prefix.len() < 200 {
            return None;
        }
        self.sources
            .iter()
            .map(|((n, id), cm)| (n, id.kind, &id.name, cm))
            .filter(|(n, k, source, _)| n == &ns && *k == kind && source.len() > snapshot::MAX_SOURCE_PART && source.starts_with(prefix))
            .filter(|(_, _, source, _)| snapshot::name(source, hash, index) == name)
            .map(|(_, _, source, cm)| (cm.annotation(names::HEAD) != Some(hash), source.as_str()))
            .min()
            .map(|(_, source)| source)
    }

    /// Whether `template_hash` is one of the revisions of the workload with this uid in `ns`: a
    /// ReplicaSet or ControllerRevision of this namespace controlled by it, whose template the
    /// workload was seen with (or which predates this process).
    pub fn is_revision_of(&self, ns: &str, owner_uid: &str, template_hash: &str) -> bool {
        if owner_uid.is_empty() {
            return false;
        }
        let owner: Key = (ns.into(), owner_uid.into());
        let Some(owned) = self.owner_revisions.get(&owner) else { return false };
        let seen = self.seen_templates.get(&owner).is_some_and(|s| s.contains(template_hash));
        owned.iter().filter_map(|(kind, name)| self.revisions.get(&(*kind, ns.into(), name.clone()))).any(|r| {
            r.owner_uid == owner_uid
                && r.template_hash == template_hash
                && (seen || self.revisions_trusted_before.as_ref().is_none_or(|t| !r.created.is_empty() && r.created.as_str() < t.as_str()))
        })
    }

    /// The snapshot of `source` whose adoption record lists `template_hash`. When several do, the
    /// oldest record wins (then the name): it is the one written first, when the template ran,
    /// and no later object can displace it whatever name it picks.
    pub fn adopted_snapshot(&self, ns: &str, source: &SourceId, template_hash: &str) -> Option<(String, String)> {
        self.snapshots_of(ns, source)
            .filter_map(|(name, cm, hash)| {
                source::adopted(cm).any(|t| t == template_hash).then(|| (cm.created.as_str(), name.to_owned(), hash))
            })
            .min()
            .map(|(_, name, hash)| (name, hash))
    }

    /// The cached snapshots of a source: (name, record, hash), in no particular order.
    pub fn snapshots_of<'a>(&'a self, ns: &str, source: &SourceId) -> impl Iterator<Item = (&'a str, &'a SourceInfo, String)> + 'a {
        let names = self.snapshots.get(&skey(ns, source)).map(Vec::as_slice).unwrap_or_default();
        let ns = ns.to_owned();
        let kind = source.kind;
        names.iter().filter_map(move |name| {
            let id = SourceId::new(kind, name.as_str());
            let cm = self.sources.get(&(ns.as_str().into(), id))?;
            let (_, hash) = cm.snapshot_of(name)?;
            Some((name.as_str(), cm, hash))
        })
    }

    /// The workloads of a namespace whose template names a snapshot of `source` with content
    /// `hash` (any name of its collision sequence).
    pub fn users_of_content<'a>(&'a self, ns: &str, source: &SourceId, hash: &str) -> impl Iterator<Item = &'a WorkloadInfo> + 'a {
        let names: Vec<SourceId> =
            self.snapshots_of(ns, source).filter(|(_, _, h)| h == hash).map(|(name, _, _)| source.with_name(name)).collect();
        let ns = ns.to_owned();
        names.into_iter().flat_map(move |id| self.users(&ns, &id).map(|(_, _, w)| w).collect::<Vec<_>>())
    }

    /// The workloads of a namespace whose template names `id` (as the reference index has them).
    fn users<'a>(&'a self, ns: &str, id: &SourceId) -> impl Iterator<Item = (Kind, &'a str, &'a WorkloadInfo)> + 'a {
        let users = self.refs.get(&skey(ns, id)).map(|r| r.workloads.as_slice()).unwrap_or_default();
        let ns = CompactString::from(ns);
        users.iter().filter_map(move |(kind, name)| Some((*kind, name.as_str(), self.workloads.get(&(*kind, ns.clone(), name.clone()))?)))
    }

    /// Workloads in a namespace that reference `name` plainly, with their template hashes. An
    /// ignored workload is none (only rewrite mode keeps content for plain users, and there it is
    /// left alone): no snapshot or adoption record is kept for it.
    pub fn plain_users(&self, ns: &str, id: &SourceId) -> Vec<String> {
        let mut v: Vec<String> = self
            .users(ns, id)
            .filter(|(_, _, w)| !w.deleting && !policy::ignored(*w))
            .map(|(_, _, w)| w.template_hash.to_string())
            .collect();
        v.sort();
        v.dedup();
        v
    }

    /// Workloads in a namespace whose template names `name`, as `Kind/name`, at most three;
    /// ignored ones only `with_ignored` (they still use what they name, but only enforce mode
    /// checks them).
    pub fn user_names(&self, ns: &str, id: &SourceId, with_ignored: bool) -> Vec<String> {
        let mut v: Vec<String> = self
            .users(ns, id)
            .filter(|(_, _, w)| with_ignored || !policy::ignored(*w))
            .map(|(k, name, _)| format!("{}/{name}", k.as_str()))
            .collect();
        v.sort();
        v.truncate(3);
        v
    }

    pub fn template_exists(&self, ns: &str, template_hash: &str) -> bool {
        self.namespace_templates.get(ns).is_some_and(|m| m.get(template_hash).is_some_and(|c| *c > 0))
    }
}

#[cfg(test)]
mod tests {
    use super::super::Writer;
    use super::*;
    use crate::cache::records::tests::deployment;
    use crate::model::template;
    use serde_json::{json, Value};

    #[test]
    fn reference_counts_follow_updates_and_deletes() {
        let mut s = State::default();
        s.apply_workload(Kind::Deployment, &deployment("a", "cfg"));
        s.apply_workload(Kind::Deployment, &deployment("b", "cfg"));
        assert_eq!(s.ref_count("ns", &SourceId::configmap("cfg")).workloads, 2);
        assert!(s.is_referenced_source("ns", &SourceId::configmap("cfg")));
        s.apply_workload(Kind::Deployment, &deployment("a", "cfg-0123456789ab"));
        assert_eq!(s.ref_count("ns", &SourceId::configmap("cfg")).workloads, 1);
        assert!(s.is_referenced_source("ns", &SourceId::configmap("cfg")), "still referenced by b, and through a's snapshot");
        s.delete_workload(Kind::Deployment, &deployment("b", "cfg"));
        assert_eq!(s.ref_count("ns", &SourceId::configmap("cfg")), RefCount::default());
        assert!(s.is_referenced_source("ns", &SourceId::configmap("cfg")), "a references it through a snapshot");
        s.relisted(Watched::Workload(Kind::Deployment), &HashSet::new());
        assert!(!s.is_referenced_source("ns", &SourceId::configmap("cfg")));
        assert!(s.refs.is_empty() && s.snapshot_sources.is_empty());
    }

    /// The indexes the questions about one source or one owner read answer as a scan
    /// of the whole cache does, through applies, updates, relabels, deletes and relists.
    #[test]
    fn indexes_answer_as_a_scan_of_the_whole_cache() {
        // The answers as every record gives them, the way they were computed before the indexes.
        fn plain_users(s: &State, ns: &str, id: &SourceId) -> Vec<String> {
            let mut v: Vec<String> = s
                .workloads
                .iter()
                .filter(|((_, n, _), w)| n == ns && !w.deleting && !policy::ignored(*w) && w.refs.contains(id))
                .map(|(_, w)| w.template_hash.to_string())
                .collect();
            v.sort();
            v.dedup();
            v
        }
        fn user_names(s: &State, ns: &str, id: &SourceId, with_ignored: bool) -> Vec<String> {
            let mut v: Vec<String> = s
                .workloads
                .iter()
                .filter(|((_, n, _), w)| n == ns && (with_ignored || !policy::ignored(*w)) && w.refs.contains(id))
                .map(|((k, _, w), _)| format!("{}/{w}", k.as_str()))
                .collect();
            v.sort();
            v.truncate(3);
            v
        }
        fn adopted_snapshot(s: &State, ns: &str, source: &SourceId, template_hash: &str) -> Option<(String, String)> {
            s.sources
                .iter()
                .filter(|((n, id), _)| n == ns && id.kind == source.kind)
                .filter_map(|((_, id), cm)| {
                    let (src, hash) = cm.snapshot_of(&id.name)?;
                    (src == source.name && source::adopted(cm).any(|t| t == template_hash))
                        .then(|| (cm.created.as_str(), id.name.clone(), hash))
                })
                .min()
                .map(|(_, name, hash)| (name, hash))
        }
        fn is_revision_of(s: &State, ns: &str, owner_uid: &str, template_hash: &str) -> bool {
            let seen = s.seen_templates.get(&(ns.into(), owner_uid.into())).is_some_and(|t| t.contains(template_hash));
            !owner_uid.is_empty()
                && s.revisions.iter().any(|((_, n, _), r)| {
                    n == ns
                        && r.owner_uid == owner_uid
                        && r.template_hash == template_hash
                        && (seen
                            || s.revisions_trusted_before.as_ref().is_none_or(|t| !r.created.is_empty() && r.created.as_str() < t.as_str()))
                })
        }

        let mut rng = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = |n: u64| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            (rng % n) as usize
        };
        let namespaces = ["a", "b"];
        let sources = ["c0", "c1"];
        let hashes = ["0123456789ab", "ba9876543210"];
        let snapshot_name = |src: &str, h: usize| snapshot::name(src, hashes[h], 0);
        let images = ["app:1", "app:2", "app:3"];
        let template = |refs: &[String], image: &str| {
            let volumes: Vec<Value> = refs.iter().map(|r| json!({"name": r, "configMap": {"name": r}})).collect();
            json!({"metadata": {"labels": {"app": "x"}}, "spec": {"volumes": volumes, "containers": [{"name": "c", "image": image}]}})
        };
        let mut s = State { revisions_trusted_before: Some("2026-12-01T00:00:00Z".to_owned()), ..State::default() };
        let mut templates: HashSet<String> = HashSet::new();
        for step in 0..800 {
            let ns = namespaces[next(2)];
            let name = format!("w{}", next(4));
            let refs: Vec<String> = (0..next(3))
                .map(|_| if next(2) == 0 { sources[next(2)].to_owned() } else { snapshot_name(sources[next(2)], next(2)) })
                .collect();
            let tpl = template(&refs, images[next(3)]);
            templates.insert(template::template_hash(&tpl));
            match next(10) {
                0..=2 => {
                    let mut annotations = json!({});
                    if next(5) == 0 {
                        annotations[names::IGNORE] = json!("true");
                    }
                    let mut w = json!({"metadata": {"namespace": ns, "name": name, "uid": format!("uid-{}", next(5)), "annotations": annotations},
                        "spec": {"template": tpl}});
                    if next(8) == 0 {
                        w["metadata"]["deletionTimestamp"] = json!("2026-12-05T00:00:00Z");
                    }
                    s.apply_workload([Kind::Deployment, Kind::StatefulSet][next(2)], &w);
                }
                3 => {
                    s.delete_workload([Kind::Deployment, Kind::StatefulSet][next(2)], &json!({"metadata": {"namespace": ns, "name": name}}))
                }
                4..=5 if next(4) == 0 => {
                    // A source, its change propagated or not (or made by hand: `rollout: manual`).
                    let mut annotations = json!({});
                    for (key, values) in [
                        (names::HEAD, &["", "h1", "h2"][..]),
                        (names::CHANGED_AT, &["", "2026-12-05T00:00:00Z"][..]),
                        (names::PROPAGATED, &["", "h1", "h2"][..]),
                        (names::ROLLOUT, &["", "", "manual"][..]),
                    ] {
                        let v = values[next(values.len() as u64)];
                        if !v.is_empty() {
                            annotations[key] = json!(v);
                        }
                    }
                    s.apply_configmap(&json!({"metadata": {"namespace": ns, "name": sources[next(2)], "annotations": annotations}}));
                }
                4..=5 => {
                    // A snapshot, labelled as one or not (a relabel takes it out of its source's snapshots).
                    let src = sources[next(2)];
                    let h = next(2);
                    let labels =
                        if next(4) == 0 { json!({}) } else { json!({names::HASH_LABEL: hashes[h], names::MANAGED_BY: names::MANAGER}) };
                    let adopted: Vec<&String> = templates.iter().filter(|_| next(3) == 0).collect();
                    let adopted = adopted.iter().map(|t| t.as_str()).collect::<Vec<_>>().join(",");
                    let obj = json!({"metadata": {"namespace": ns, "name": snapshot_name(src, h), "labels": labels,
                        "creationTimestamp": format!("2026-12-0{}T00:00:00Z", 1 + next(3)), "annotations": {names::ADOPTED: adopted}}});
                    s.apply_configmap(&obj);
                }
                6 => s.delete_source(
                    SourceKind::ConfigMap,
                    &json!({"metadata": {"namespace": ns, "name": snapshot_name(sources[next(2)], next(2))}}),
                ),
                7 => {
                    let owner = format!("uid-{}", next(5));
                    let created = ["2026-11-01T00:00:00Z", "2026-12-03T00:00:00Z"][next(2)];
                    let rs = json!({"metadata": {"namespace": ns, "name": format!("r{}", next(6)),
                        "creationTimestamp": created,
                        "ownerReferences": [{"kind": "Deployment", "uid": owner, "controller": next(6) != 0}]},
                        "spec": {"template": tpl}});
                    s.apply_revision(Kind::ReplicaSet, &rs);
                }
                8 => s.delete_revision(Kind::ReplicaSet, &json!({"metadata": {"namespace": ns, "name": format!("r{}", next(6))}})),
                _ => {
                    // A relist that no longer has some of one watch's objects.
                    let what =
                        [Watched::Sources(SourceKind::ConfigMap), Watched::Workload(Kind::Deployment), Watched::Revision(Kind::ReplicaSet)]
                            [next(3)];
                    let keys: Vec<Key> = match what {
                        Watched::Sources(_) => s.sources.keys().map(|(n, id)| (n.clone(), id.name.as_str().into())).collect(),
                        Watched::Workload(_) => s.workloads.keys().map(|(_, n, m)| (n.clone(), m.clone())).collect(),
                        _ => s.revisions.keys().map(|(_, n, m)| (n.clone(), m.clone())).collect(),
                    };
                    let seen: HashSet<Key> = keys.into_iter().filter(|_| next(3) != 0).collect();
                    s.relisted(what, &seen);
                }
            }
            let pending: HashSet<SourceKey> = s
                .sources
                .iter()
                .filter(|(_, cm)| cm.annotation(names::HEAD).is_some_and(|h| source::pending_change(*cm, h).is_some()))
                .map(|(k, _)| k.clone())
                .collect();
            assert_eq!(s.pending_changes, pending, "step {step}: pending changes");
            for ns in namespaces {
                for src in sources {
                    let ids =
                        [SourceId::configmap(src), SourceId::configmap(snapshot_name(src, 0)), SourceId::configmap(snapshot_name(src, 1))];
                    for id in &ids {
                        assert_eq!(s.plain_users(ns, id), plain_users(&s, ns, id), "step {step}: plain users of {ns}/{id}");
                        for with_ignored in [false, true] {
                            assert_eq!(
                                s.user_names(ns, id, with_ignored),
                                user_names(&s, ns, id, with_ignored),
                                "step {step}: users of {ns}/{id}"
                            );
                        }
                    }
                    for t in &templates {
                        assert_eq!(s.adopted_snapshot(ns, &ids[0], t), adopted_snapshot(&s, ns, &ids[0], t), "step {step}: {ns}/{src} {t}");
                    }
                }
                for owner in (0..5).map(|i| format!("uid-{i}")) {
                    for t in &templates {
                        assert_eq!(s.is_revision_of(ns, &owner, t), is_revision_of(&s, ns, &owner, t), "step {step}: {ns} {owner} {t}");
                    }
                }
            }
        }
        // Nothing is left in an index once its objects are gone.
        for what in [
            Watched::Sources(SourceKind::ConfigMap),
            Watched::Workload(Kind::Deployment),
            Watched::Workload(Kind::StatefulSet),
            Watched::Revision(Kind::ReplicaSet),
        ] {
            s.relisted(what, &HashSet::new());
        }
        assert!(s.refs.is_empty() && s.snapshots.is_empty() && s.owner_revisions.is_empty() && s.snapshot_sources.is_empty());
        assert!(s.pending_changes.is_empty());
    }

    #[test]
    fn revisions_index_templates_by_owner() {
        let mut s = State::default();
        let mut rs = json!({"metadata": {"namespace": "ns", "name": "a-1",
            "ownerReferences": [{"kind": "Deployment", "uid": "uid-a", "controller": true}]},
            "spec": {"template": {"metadata": {"labels": {"app": "a", "pod-template-hash": "x"}}}}});
        s.apply_revision(Kind::ReplicaSet, &rs);
        let h = template::template_hash(&json!({"metadata": {"labels": {"app": "a"}}}));
        assert!(s.is_revision_of("ns", "uid-a", &h));
        assert!(!s.is_revision_of("other-ns", "uid-a", &h), "an owner reference from another namespace");
        assert!(s.template_exists("ns", &h));
        rs["metadata"]["name"] = json!("a-2");
        s.apply_revision(Kind::ReplicaSet, &rs);
        s.delete_revision(Kind::ReplicaSet, &json!({"metadata": {"namespace": "ns", "name": "a-1"}}));
        assert!(s.is_revision_of("ns", "uid-a", &h), "a-2 has the same template");
        s.delete_revision(Kind::ReplicaSet, &rs);
        assert!(!s.is_revision_of("ns", "uid-a", &h));
        assert!(!s.template_exists("ns", &h));
    }

    /// A ConfigMap as the metadata-only list and watch deliver it (`Accept:
    /// application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1`): no data, no `immutable`.
    fn partial(name: &str, uid: &str, rv: &str, labels: Value) -> Value {
        json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
               "metadata": {"namespace": "ns", "name": name, "uid": uid, "resourceVersion": rv,
                            "creationTimestamp": "2026-12-03T15:00:00Z", "labels": labels,
                            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{\"data\": \"big\"}",
                                            names::HEAD: "0123456789ab"}}})
    }

    #[test]
    fn configmap_record_builds_from_partial_object_metadata() {
        let mut s = State::default();
        s.apply_configmap(&partial("cfg", "u1", "7", json!({"app": "a"})));
        let cm = s.source("ns", &SourceId::configmap("cfg")).expect("cached");
        assert_eq!((cm.uid.as_str(), cm.resource_version.as_str(), cm.created.as_str()), ("u1", "7", "2026-12-03T15:00:00Z"));
        assert_eq!(cm.label("app"), Some("a"));
        assert_eq!(cm.annotations.len(), 1, "only confighistory's annotations");
        assert_eq!(cm.annotation(names::HEAD), Some("0123456789ab"));
        assert_eq!(cm.immutable, None, "metadata does not say");
        assert!(!cm.known_mutable() && !cm.immutable());
        assert!(source::is_tracked("cfg", cm), "an unknown record reads as mutable in the rules");
        let name = snapshot::name("cfg", "0123456789ab", 0);
        let labels = json!({names::HASH_LABEL: "0123456789ab", names::MANAGED_BY: names::MANAGER});
        s.apply_configmap(&partial(&name, "u2", "8", labels));
        assert_eq!(
            s.snapshot_of("ns", &SourceId::configmap(&name)),
            Some((SourceId::configmap("cfg"), "0123456789ab".to_owned())),
            "snapshots are told by labels"
        );
        assert!(!source::is_tracked(&name, s.source("ns", &SourceId::configmap(&name)).unwrap()));
    }

    #[test]
    fn immutability_is_learnt_from_full_reads_and_kept_while_it_holds() {
        let mut s = State::default();
        let full = |uid: &str, rv: &str, immutable: bool| json!({"metadata": {"namespace": "ns", "name": "cfg", "uid": uid, "resourceVersion": rv}, "data": {"k": "v"}, "immutable": immutable});
        s.apply_configmap(&partial("cfg", "u1", "7", json!({})));
        s.learn_source("ns", &SourceId::configmap("cfg"), &full("u1", "6", false));
        assert_eq!(
            s.source("ns", &SourceId::configmap("cfg")).unwrap().immutable,
            None,
            "mutable at another version says nothing of this one"
        );
        s.learn_source("ns", &SourceId::configmap("cfg"), &full("u0", "7", false));
        assert_eq!(s.source("ns", &SourceId::configmap("cfg")).unwrap().immutable, None, "another object of the same name");
        s.learn_source("ns", &SourceId::configmap("cfg"), &full("u1", "7", false));
        assert!(s.source("ns", &SourceId::configmap("cfg")).unwrap().known_mutable());
        s.apply_configmap(&partial("cfg", "u1", "7", json!({})));
        assert!(s.source("ns", &SourceId::configmap("cfg")).unwrap().known_mutable(), "a relist of the same version");
        s.apply_configmap(&partial("cfg", "u1", "9", json!({})));
        assert_eq!(s.source("ns", &SourceId::configmap("cfg")).unwrap().immutable, None, "an update may have made it immutable");
        s.learn_source("ns", &SourceId::configmap("cfg"), &full("u1", "10", true));
        assert!(s.source("ns", &SourceId::configmap("cfg")).unwrap().immutable(), "immutable at any version: for good");
        s.apply_configmap(&partial("cfg", "u1", "11", json!({})));
        assert!(s.source("ns", &SourceId::configmap("cfg")).unwrap().immutable(), "a metadata update keeps it");
        s.apply_configmap(&partial("cfg", "u2", "12", json!({})));
        assert_eq!(s.source("ns", &SourceId::configmap("cfg")).unwrap().immutable, None, "re-created under the same name");
        s.apply_configmap(&full("u3", "13", true));
        assert!(s.source("ns", &SourceId::configmap("cfg")).unwrap().immutable(), "a whole object says");
    }
}
