//! The records the cache keeps per object: a few strings, references and the labels and
//! annotations the rules read (docs/behaviour.md §10: metadata only, never a source's data), each
//! built from the object as its watch delivers it.

use std::collections::{BTreeMap, BTreeSet};

use compact_str::CompactString;
use serde_json::Value;

use crate::model::ids::SourceId;
use crate::model::json::At;
use crate::model::kinds::Kind;
use crate::model::meta::{self, Meta};
use crate::model::names;
use crate::model::snapshot;

/// (namespace, name)
pub type Key = (CompactString, CompactString);
/// (namespace, source): a source, or a snapshot of one (an object of the source's kind).
pub type SourceKey = (CompactString, SourceId);
/// (kind, namespace, name) of a workload or revision. Names and namespaces of up to 24 bytes are
/// held inline: a key costs no allocation of its own (docs/performance.md, "Scale").
pub type ObjectKey = (Kind, CompactString, CompactString);

#[derive(Clone, Debug, Default)]
pub struct NamespaceInfo {
    /// All labels: the mode label; the controller can be restricted to namespaces matching a selector.
    pub labels: BTreeMap<String, String>,
    pub settle: Option<String>,
    pub deleting: bool,
}

impl NamespaceInfo {
    /// The record of a Namespace object (as the watch delivers it, or as read fresh).
    pub fn from_object(obj: &Value) -> NamespaceInfo {
        let meta = &obj["metadata"];
        NamespaceInfo {
            labels: string_map(&meta["labels"], |_| true),
            settle: meta
                .at(&format!("/annotations/{}", crate::model::json::escape(names::SETTLE)))
                .and_then(Value::as_str)
                .map(str::to_owned),
            deleting: obj.deleting(),
        }
    }
}

/// The cache keeps one namespace annotation, the settle window.
impl Meta for NamespaceInfo {
    fn annotation(&self, key: &str) -> Option<&str> {
        (key == names::SETTLE).then_some(self.settle.as_deref()).flatten()
    }
    fn label(&self, key: &str) -> Option<&str> {
        self.labels.get(key).map(String::as_str)
    }
    fn deleting(&self) -> bool {
        self.deleting
    }
}

/// The record of an object of a source kind (a ConfigMap or a Secret, a source or a snapshot):
/// metadata only, never its data (docs/behaviour.md §10).
#[derive(Clone, Debug, Default)]
pub struct SourceInfo {
    pub uid: CompactString,
    pub resource_version: CompactString,
    pub created: CompactString,
    /// `immutable: true`, which is not metadata: `None` for a record the metadata-only watch made.
    /// Immutability is for good (an immutable ConfigMap never becomes mutable again), so `Some(true)`
    /// holds for the uid's lifetime; `Some(false)` only at `resource_version`. Learnt from full
    /// objects ([`super::Writer::learn_source`]) where a decision needs it; see [`Meta::immutable`].
    pub immutable: Option<bool>,
    pub labels: Pairs,
    /// Only confighistory's own annotations: the rest may hold whole copies of the data
    /// (kubectl's last-applied-configuration).
    pub annotations: Pairs,
}

/// A record's few labels or annotations: sorted by key, each string sized to fit. A `BTreeMap`
/// of `String`s took a 544-byte node for even one entry, and the cache holds one or two per
/// source, snapshot and pinned workload: ~30,000 of them at 100,000 ConfigMaps
/// (docs/performance.md, "Scale").
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Pairs(Box<[(Box<str>, Box<str>)]>);

impl Pairs {
    pub fn get(&self, key: &str) -> Option<&str> {
        self.0.binary_search_by(|(k, _)| k.as_ref().cmp(key)).ok().map(|i| &*self.0[i].1)
    }
    pub fn contains_key(&self, key: &str) -> bool {
        self.get(key).is_some()
    }
    pub fn len(&self) -> usize {
        self.0.len()
    }
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(k, v)| (&**k, &**v))
    }
    /// Sets `key` (rare: the slice is rebuilt).
    pub fn insert(&mut self, key: &str, value: &str) {
        let mut v = std::mem::take(&mut self.0).into_vec();
        match v.binary_search_by(|(k, _)| k.as_ref().cmp(key)) {
            Ok(i) => v[i].1 = value.into(),
            Err(i) => v.insert(i, (key.into(), value.into())),
        }
        self.0 = v.into_boxed_slice();
    }
    /// Heap bytes, about.
    fn approx_bytes(&self) -> usize {
        self.0.len() * std::mem::size_of::<(Box<str>, Box<str>)>() + self.iter().map(|(k, v)| k.len() + v.len()).sum::<usize>()
    }
}

impl<K: AsRef<str>, V: AsRef<str>> FromIterator<(K, V)> for Pairs {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Pairs {
        let mut v: Vec<(Box<str>, Box<str>)> = iter.into_iter().map(|(k, v)| (k.as_ref().into(), v.as_ref().into())).collect();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v.dedup_by(|a, b| a.0 == b.0);
        Pairs(v.into_boxed_slice())
    }
}

/// The annotations a source's record keeps (a ConfigMap's or a Secret's): the ones the rules
/// read on sources and snapshots.
pub(super) const SOURCE_ANNOTATIONS: [&str; 12] = [
    names::VERSIONED,
    names::ROLLOUT,
    names::SETTLE,
    names::HEAD,
    names::CHANGED_AT,
    // Read by the change-cause of a propagation (docs/behaviour.md §7.9).
    names::CHANGED_BY,
    names::PROPAGATED,
    names::EXCLUDED,
    names::SOURCE_NAME,
    names::ADOPTED,
    names::LAST_USED,
    names::KEEP,
];
/// The labels every source record keeps (snapshots are told by them); the admin's selector of
/// excluded sources adds its own keys ([`super::State::keeping_labels`]).
pub(super) const SOURCE_LABELS: [&str; 2] = [names::HASH_LABEL, names::MANAGED_BY];
/// The annotations a workload's record keeps.
pub(super) const WORKLOAD_ANNOTATIONS: [&str; 6] =
    [names::IGNORE, names::PINS, names::HELD, names::HELD_HEADS, names::CHANGE_CAUSE, names::CHANGE_CAUSE_OWN];

/// The annotations in `keys`, each bounded ([`meta::bounded`]): a tenant's object costs the cache
/// a bounded number of bytes, however many or large its annotations.
pub(super) fn kept_annotations(v: &Value, keys: &[&str]) -> Pairs {
    let Some(m) = v.as_object() else { return Pairs::default() };
    keys.iter().filter_map(|k| m.get(*k).map(|v| (*k, meta::bounded(k, v.as_str().unwrap_or_default())))).collect()
}

impl SourceInfo {
    /// The record of a source object: a whole object, or its metadata as the API server lists and
    /// watches it (`PartialObjectMetadata`, which does not say whether it is immutable). Labels:
    /// see [`Self::from_object_keeping`]; this keeps every label (tests, one-off reads).
    pub fn from_object(obj: &Value) -> SourceInfo {
        Self::from_object_keeping(obj, None)
    }

    /// As [`Self::from_object`], keeping the labels the rules read and those in `labels` (the
    /// keys the admin's selector mentions); `None`: every label.
    pub fn from_object_keeping(obj: &Value, labels: Option<&BTreeSet<String>>) -> SourceInfo {
        let meta = &obj["metadata"];
        let metadata_only = obj.get("kind").and_then(Value::as_str) == Some(PARTIAL_OBJECT_METADATA);
        SourceInfo {
            uid: str_at(meta, "uid").into(),
            resource_version: str_at(meta, "resourceVersion").into(),
            created: str_at(meta, "creationTimestamp").into(),
            immutable: (!metadata_only).then(|| obj.immutable()),
            labels: meta["labels"]
                .as_object()
                .map(|m| {
                    let keep = |k: &str| labels.is_none_or(|keep| SOURCE_LABELS.contains(&k) || keep.contains(k));
                    m.iter().filter(|(k, _)| keep(k)).map(|(k, v)| (k, v.as_str().unwrap_or_default())).collect()
                })
                .unwrap_or_default(),
            annotations: kept_annotations(&meta["annotations"], &SOURCE_ANNOTATIONS),
        }
    }

    /// Bytes the record takes, about: its strings and, per map entry, two `String`s and a share
    /// of a B-tree node. For tests and measurements of what a tenant's object costs.
    pub fn approx_bytes(&self) -> usize {
        std::mem::size_of::<Self>()
            + self.uid.capacity()
            + self.resource_version.capacity()
            + self.created.capacity()
            + self.labels.approx_bytes()
            + self.annotations.approx_bytes()
    }

    /// (source name, hash) when this object is labelled as a snapshot.
    pub fn snapshot_of(&self, name: &str) -> Option<(String, String)> {
        let hash = self.labels.get(names::HASH_LABEL)?;
        if self.labels.get(names::MANAGED_BY) != Some(names::MANAGER) {
            return None;
        }
        Some((snapshot::snapshot_source(name, self)?.to_owned(), hash.to_owned()))
    }

    /// Whether the record knows the ConfigMap is mutable. The controller's planners act on a
    /// source only then: one whose immutability is unknown is read first (docs/behaviour.md §3: an immutable
    /// ConfigMap is never touched).
    pub fn known_mutable(&self) -> bool {
        self.immutable == Some(false)
    }
}

/// The kind of the objects a metadata-only list or watch returns.
pub const PARTIAL_OBJECT_METADATA: &str = "PartialObjectMetadata";

/// A record's immutability is what it knows: an unknown one reads as mutable in the rules over
/// [`Meta`] (`is_tracked`), so a caller that would write to the ConfigMap or act on its change
/// checks [`SourceInfo::known_mutable`] too. Admission decides from the request's object and
/// fresh reads, never from this.
impl Meta for SourceInfo {
    fn annotation(&self, key: &str) -> Option<&str> {
        self.annotations.get(key)
    }
    fn label(&self, key: &str) -> Option<&str> {
        self.labels.get(key)
    }
    fn immutable(&self) -> bool {
        self.immutable == Some(true)
    }
}

/// A workload (Deployment, StatefulSet, DaemonSet, Job, CronJob).
#[derive(Clone, Debug, Default)]
pub struct WorkloadInfo {
    pub uid: CompactString,
    pub template_hash: CompactString,
    pub refs: Vec<SourceId>,
    pub annotations: Pairs,
    /// Kind of the controlling owner (a Job made by a CronJob).
    pub owner_kind: Option<String>,
    pub deleting: bool,
    /// Whether its status says its pods run its current template (`model::rollout`); `None`
    /// when its kind's status is not read.
    pub rolled_out: Option<bool>,
}

/// The cache keeps no workload labels.
impl Meta for WorkloadInfo {
    fn annotation(&self, key: &str) -> Option<&str> {
        self.annotations.get(key)
    }
    fn label(&self, _: &str) -> Option<&str> {
        None
    }
    fn deleting(&self) -> bool {
        self.deleting
    }
}

/// A revision: ReplicaSet or ControllerRevision.
#[derive(Clone, Debug, Default)]
pub struct RevisionInfo {
    pub owner_uid: CompactString,
    /// creationTimestamp (RFC 3339): history older than this process is trusted as it is.
    pub created: CompactString,
    pub template_hash: CompactString,
    pub refs: Vec<SourceId>,
    pub revision: i64,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RefCount {
    /// Workloads (the objects admission writes).
    pub workloads: u32,
    /// ReplicaSets and ControllerRevisions (rollout history).
    pub revisions: u32,
}

/// What the cache knows of one referenced object: the counts, and which workloads reference it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Referenced {
    pub count: RefCount,
    /// (kind, name) of each workload of the namespace whose template names it: what
    /// [`super::State::plain_users`] and [`super::State::user_names`] read instead of every workload.
    pub workloads: Vec<(Kind, CompactString)>,
}

/// (kind, uid) of the controlling owner reference.
pub fn controller_owner(meta: &Value) -> Option<(String, String)> {
    meta.get("ownerReferences")?
        .as_array()?
        .iter()
        .find(|o| o.get("controller").and_then(Value::as_bool) == Some(true))
        .map(|o| (str_at(o, "kind"), str_at(o, "uid")))
}

pub(super) fn str_at(v: &Value, k: &str) -> String {
    v.get(k).and_then(Value::as_str).unwrap_or_default().to_owned()
}

fn string_map(v: &Value, keep: impl Fn(&str) -> bool) -> BTreeMap<String, String> {
    v.as_object()
        .map(|m| m.iter().filter(|(k, _)| keep(k)).map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned())).collect())
        .unwrap_or_default()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::cache::{State, Writer};
    use crate::model::ids::SourceId;
    use crate::model::source;
    use serde_json::json;

    /// A Deployment `name` in namespace `ns` mounting ConfigMap `cm` (the cache tests' fixture).
    pub(crate) fn deployment(name: &str, cm: &str) -> Value {
        json!({"metadata": {"namespace": "ns", "name": name, "uid": format!("uid-{name}")},
               "spec": {"template": {"spec": {"volumes": [{"name": "c", "configMap": {"name": cm}}]}}}})
    }

    #[test]
    fn pairs_answer_as_a_btree_map_of_the_same_entries() {
        let entries = [("b", "2"), ("a", "1"), ("c", "3"), ("a", "first wins")];
        let mut pairs: Pairs = entries.iter().copied().collect();
        let mut map: BTreeMap<&str, &str> = BTreeMap::new();
        for (k, v) in entries {
            map.entry(k).or_insert(v);
        }
        assert_eq!(pairs.iter().collect::<Vec<_>>(), map.iter().map(|(k, v)| (*k, *v)).collect::<Vec<_>>());
        pairs.insert("b", "two");
        pairs.insert("0", "zero");
        map.insert("b", "two");
        map.insert("0", "zero");
        assert_eq!(pairs.iter().collect::<Vec<_>>(), map.iter().map(|(k, v)| (*k, *v)).collect::<Vec<_>>());
        for k in ["0", "a", "b", "c", "d", ""] {
            assert_eq!(pairs.get(k), map.get(k).copied(), "{k}");
            assert_eq!(pairs.contains_key(k), map.contains_key(k));
        }
        assert_eq!((pairs.len(), Pairs::default().is_empty()), (4, true));
    }

    #[test]
    fn configmap_cache_keeps_no_data() {
        let info = SourceInfo::from_object(&json!({"metadata": {"name": "x", "annotations": {
            "kubectl.kubernetes.io/last-applied-configuration": "{\"data\": \"big\"}", "confighistory.io/head": "h"}},
            "data": {"k": "v"}}));
        assert_eq!(info.annotations.len(), 1);
        assert_eq!(info.annotation(names::HEAD), Some("h"));
    }

    // Each rule of model::source and model::policy is written once over `Meta`; these check
    // that a raw object and the cache's record of it give the same answer.

    fn configmap(labels: Value, annotations: Value, immutable: bool) -> Value {
        json!({"metadata": {"namespace": "ns", "name": "cfg", "labels": labels, "annotations": annotations}, "immutable": immutable})
    }

    #[test]
    fn source_rules_agree_on_raw_objects_and_cache_records() {
        use crate::model::selector::Selector;
        let excluded: Selector = "ca-bundle=true".parse().unwrap();
        let snapshot_label = json!({names::HASH_LABEL: "0123456789ab"});
        let off = json!({names::VERSIONED: "false"});
        // (name, object, tracked, versioned source)
        let cases = [
            ("cfg", configmap(json!({}), json!({}), false), true, true),
            (names::ROOT_CA, configmap(json!({}), json!({}), false), false, false),
            ("cfg", configmap(json!({}), json!({}), true), false, false),
            ("cfg", configmap(snapshot_label, json!({}), false), false, false),
            ("cfg", configmap(json!({}), off, false), true, false),
            ("cfg", configmap(json!({"ca-bundle": "true"}), json!({}), false), true, false),
        ];
        for (i, (name, obj, tracked, versioned)) in cases.into_iter().enumerate() {
            let info = SourceInfo::from_object(&obj);
            assert_eq!((source::is_tracked(name, &obj), source::is_tracked(name, &info)), (tracked, tracked), "case {i}");
            assert_eq!(
                (source::is_versioned_source(name, &obj, &excluded), source::is_versioned_source(name, &info, &excluded)),
                (versioned, versioned),
                "case {i}"
            );
            assert_eq!(source::is_versioned(&obj, &excluded), source::is_versioned(&info, &excluded), "case {i}");
        }
    }

    #[test]
    fn pending_change_agrees_on_raw_objects_and_cache_records() {
        let at = "2024-01-01T00:00:00Z";
        // (annotations, pending at head "h")
        let cases = [
            (json!({names::CHANGED_AT: at}), Some(at)),
            (json!({names::CHANGED_AT: at, names::PROPAGATED: "old"}), Some(at)),
            (json!({names::CHANGED_AT: at, names::PROPAGATED: "h"}), None),
            (json!({names::CHANGED_AT: at, names::ROLLOUT: "manual"}), None),
            (json!({names::PROPAGATED: "old"}), None),
        ];
        for (i, (annotations, pending)) in cases.into_iter().enumerate() {
            let obj = configmap(json!({}), annotations, false);
            let info = SourceInfo::from_object(&obj);
            assert_eq!((source::pending_change(&obj, "h"), source::pending_change(&info, "h")), (pending, pending), "case {i}");
        }
    }

    #[test]
    fn holds_agree_on_raw_objects_and_cache_records() {
        let mut obj = deployment("a", "cfg");
        obj["metadata"]["annotations"] = json!({names::HELD: "cfg, other,", names::HELD_HEADS: r#"{"cfg":"h1"}"#, "kubectl.kubernetes.io/last-applied-configuration": "{}"});
        let mut s = State::default();
        s.apply_workload(Kind::Deployment, &obj);
        let info = &s.workloads[&(Kind::Deployment, "ns".into(), "a".into())];
        let want: source::Holds = [(SourceId::configmap("cfg"), Some("h1".to_owned())), (SourceId::configmap("other"), None)].into();
        assert_eq!(source::holds(&obj), want);
        assert_eq!(source::holds(info), want);
        obj["metadata"]["annotations"] = json!({});
        assert!(source::holds(&obj).is_empty());
    }

    #[test]
    fn adoption_records_agree_on_raw_objects_and_cache_records() {
        let obj = configmap(json!({names::HASH_LABEL: "h"}), json!({names::ADOPTED: "t1,,t2"}), true);
        let info = SourceInfo::from_object(&obj);
        assert_eq!(source::adopted(&obj).collect::<Vec<_>>(), ["t1", "t2"]);
        assert_eq!(source::adopted(&info).collect::<Vec<_>>(), ["t1", "t2"]);
    }

    /// What a tenant's ConfigMap costs the cache: 10,000 labels and 200 KiB
    /// confighistory annotations cost about 440 KiB before, all kept; now the labels no rule reads
    /// and the annotations no rule reads are dropped, and an over-long value is kept as malformed.
    #[test]
    fn a_tenants_labels_and_annotations_cost_the_cache_a_bounded_number_of_bytes() {
        let labels: serde_json::Map<String, Value> =
            (0..10_000).map(|i| (format!("l{i}"), json!("v"))).chain([("ca-bundle".to_owned(), json!("true"))]).collect();
        let big = "h".repeat(200 * 1024);
        let annotations = json!({names::HEAD: big, "confighistory.io/anything": big, names::ADOPTED: big});
        let obj = configmap(Value::Object(labels), annotations, false);
        let mut s = State::keeping_labels(&"ca-bundle=true".parse().unwrap());
        s.apply_configmap(&obj);
        let cm = s.source("ns", &SourceId::configmap("cfg")).unwrap();
        assert!(cm.approx_bytes() < 4 * 1024, "{} bytes", cm.approx_bytes());
        assert_eq!(cm.labels.iter().map(|(k, _)| k).collect::<Vec<_>>(), ["ca-bundle"], "only what the selector reads");
        // Malformed, not shortened, on the raw object and in the record alike.
        for key in [names::HEAD, names::ADOPTED] {
            assert_eq!((obj.annotation(key), cm.annotation(key)), (Some(meta::TOO_LONG), Some(meta::TOO_LONG)), "{key}");
        }
        assert_eq!(source::adopted(cm).collect::<Vec<_>>(), [meta::TOO_LONG]);
        let excluded: crate::model::selector::Selector = "ca-bundle=true".parse().unwrap();
        assert_eq!(source::is_versioned(&obj, &excluded), source::is_versioned(cm, &excluded));
        // At the bounds: the longest value kept whole is kept whole.
        let at = |key: &str| json!({key: "a".repeat(meta::max_len(key))});
        for key in [names::HEAD, names::SOURCE_NAME, names::ADOPTED] {
            let info = SourceInfo::from_object(&configmap(json!({}), at(key), false));
            assert_eq!(info.annotation(key).map(str::len), Some(meta::max_len(key)), "{key}");
        }
        // A workload's record keeps its holds (bounded) and nothing else.
        let mut w = deployment("a", "cfg");
        w["metadata"]["annotations"] = json!({names::HELD: big, "confighistory.io/other": big, names::IGNORE: "true"});
        s.apply_workload(Kind::Deployment, &w);
        let info = &s.workloads[&(Kind::Deployment, "ns".into(), "a".into())];
        assert_eq!(info.annotations.len(), 2);
        assert_eq!((source::holds(&w), source::holds(info)), (source::holds(info), [(SourceId::configmap(meta::TOO_LONG), None)].into()));
    }

    /// The worst a tenant's ConfigMap can cost a record, with the API server's own limits: a
    /// request of at most 3 MiB (etcd's 1.5 MiB object limit is the tighter one for a create),
    /// annotations at most 256 KiB in all. `cargo test --lib worst_configmap_record -- --ignored --nocapture`.
    #[test]
    #[ignore = "measurement"]
    fn worst_configmap_record() {
        // Short unique label keys: about 12 bytes of JSON each within 1.5 MiB.
        let n = 1_500 * 1024 / 12;
        let labels: serde_json::Map<String, Value> = (0..n).map(|i| (format!("{i:x}"), json!(""))).collect();
        let annotations: serde_json::Map<String, Value> =
            SOURCE_ANNOTATIONS.iter().map(|k| (k.to_string(), json!("a".repeat(250 * 1024 / SOURCE_ANNOTATIONS.len())))).collect();
        let obj = configmap(Value::Object(labels), Value::Object(annotations), false);
        println!("object: {} bytes of JSON, {n} labels", serde_json::to_vec(&obj).unwrap().len());
        let before = SourceInfo::from_object(&obj).approx_bytes();
        let mut s = State::keeping_labels(&"ca-bundle=true".parse().unwrap());
        s.apply_configmap(&obj);
        println!(
            "record keeping every label: {before} bytes; keeping what the rules read: {}",
            s.source("ns", &SourceId::configmap("cfg")).unwrap().approx_bytes()
        );
        let at: serde_json::Map<String, Value> =
            SOURCE_ANNOTATIONS.iter().map(|k| (k.to_string(), json!("a".repeat(meta::max_len(k))))).collect();
        let labels = json!({names::HASH_LABEL: "h".repeat(63), names::MANAGED_BY: "m".repeat(63), "ca-bundle": "c".repeat(63)});
        let worst = SourceInfo::from_object_keeping(&configmap(labels, Value::Object(at), false), Some(&["ca-bundle".to_owned()].into()));
        println!("worst record now: {} bytes", worst.approx_bytes());
    }

    #[test]
    fn snapshot_source_agrees_on_raw_objects_and_cache_records() {
        let name = snapshot::name("cfg", "0123456789ab", 0);
        let long = "a".repeat(253);
        // (annotations, source)
        let cases = [(json!({}), "cfg"), (json!({names::SOURCE_NAME: long}), long.as_str())];
        for (i, (annotations, want)) in cases.into_iter().enumerate() {
            let obj = configmap(json!({names::HASH_LABEL: "0123456789ab"}), annotations, true);
            let info = SourceInfo::from_object(&obj);
            assert_eq!(snapshot::snapshot_source(&name, &obj), Some(want), "case {i}");
            assert_eq!(snapshot::snapshot_source(&name, &info), Some(want), "case {i}");
        }
        assert_eq!(snapshot::snapshot_source("not-a-snapshot-name", &json!({})), None);
    }

    #[test]
    fn namespace_mode_and_scope_agree_on_raw_objects_and_cache_records() {
        use crate::model::policy::{Mode, Policy};
        use crate::model::selector::Selector;
        let policy = Policy::default();
        let selector: Selector = "team=a".parse().unwrap();
        let ns = |labels: Value, deleting: bool| {
            let mut o = json!({"metadata": {"name": "ns", "labels": labels}});
            if deleting {
                o["metadata"]["deletionTimestamp"] = json!("2024-01-01T00:00:00Z");
            }
            o
        };
        // (object, mode, in scope of `selector`)
        let cases = [
            (ns(json!({"team": "a"}), false), Mode::Rewrite, Some(Mode::Rewrite)),
            (ns(json!({"team": "a", names::MODE_LABEL: "audit"}), false), Mode::Audit, Some(Mode::Audit)),
            (ns(json!({names::MODE_LABEL: "enforce"}), false), Mode::Enforce, None),
            (ns(json!({"team": "a"}), true), Mode::Rewrite, None),
        ];
        for (i, (obj, mode, scope)) in cases.into_iter().enumerate() {
            let mut s = State::default();
            s.apply_namespace(&obj);
            let info = s.namespace("ns");
            assert_eq!(policy.namespace_mode("ns", Some(&obj)).0, mode, "case {i}");
            assert_eq!(policy.namespace_mode("ns", info).0, mode, "case {i}");
            assert_eq!(policy.in_scope(&selector, "ns", Some(&obj)), scope, "case {i}");
            assert_eq!(policy.in_scope(&selector, "ns", info), scope, "case {i}");
        }
        assert_eq!(policy.in_scope::<Value>(&Selector::default(), "unseen", None), Some(Mode::Rewrite));
        assert_eq!(policy.in_scope::<Value>(&selector, "unseen", None), None, "not seen, so not selected");
    }
}
