//! Garbage collection of snapshots (docs/behaviour.md §8).
//!
//! A snapshot is kept while it is the head of its source; while a workload, ReplicaSet,
//! ControllerRevision or Job references it; while its adoption record names a template that still
//! exists; while it is among the newest N of its source (default 5, `confighistory.io/keep` on the
//! source overrides); and for a grace period after it was last in use. Snapshots of a deleted
//! source expire once unreferenced and past the grace period. Invalid "snapshots" are never
//! deleted.
//!
//! **Last use.** A snapshot's last use is recorded on the snapshot itself, by the sweep:
//! `confighistory.io/last-used` is set to the sweep's time by the first sweep that finds the
//! snapshot not in use (head, referenced, or live adoption record), and removed again by a sweep
//! that finds it in use. The time written is at or after the real last use, so the grace period
//! is never shortened; it survives restarts and leader changes; and it costs one write per
//! transition, not one per snapshot per sweep. Creation time alone would not do: a snapshot
//! referenced for a month would be deleted the moment its last reference went.
//!
//! [`plan`] is the decision, pure; [`sweep_namespace`] reads fresh lists (never the watch cache),
//! plans, and deletes with uid and resourceVersion preconditions.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::cache::Watched;
use crate::cluster::clock::Clock;
use crate::cluster::{ApiError, Cluster};
use crate::metrics::METRICS;
use crate::model::ids::{self, SourceId, SourceKind};
use crate::model::keys::Keyring;
use crate::model::kinds::Kind;
use crate::model::kinds::{History, Registry};
use crate::model::names;
use crate::model::secret::{self, SecretContent};
use crate::model::snapshot;
use crate::model::sourcekinds::{Content, Naming};
use crate::model::template;

/// A snapshot as the sweep sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct SnapshotInfo {
    /// The kind of its source, which it is an object of.
    pub kind: SourceKind,
    pub name: String,
    pub uid: String,
    pub resource_version: String,
    pub source: String,
    pub hash: String,
    pub created_ms: i64,
    pub last_used_ms: Option<i64>,
    pub adopted: Vec<String>,
    /// `Err(why)` when the object is not a valid snapshot (docs/behaviour.md §5).
    pub valid: Result<(), String>,
    pub bytes: usize,
}

impl SnapshotInfo {
    /// The record of `obj`, a listed object of source kind `kind` in namespace `ns`; a Secret
    /// snapshot is valid under one of `keys` (docs/behaviour.md §4a; `None`: not loaded, none is).
    pub fn from_object(kind: SourceKind, obj: &Value, ns: &str, keys: Option<&Keyring>) -> Option<SnapshotInfo> {
        let meta = &obj["metadata"];
        let s = |v: &Value| v.as_str().unwrap_or_default().to_owned();
        let name = s(&meta["name"]);
        let hash = meta["labels"].get(names::HASH_LABEL).and_then(Value::as_str)?.to_owned();
        let ann = |k: &str| meta["annotations"].get(k).and_then(Value::as_str);
        let source = crate::model::snapshot::snapshot_source(&name, obj).unwrap_or_default().to_owned();
        Some(SnapshotInfo {
            kind,
            uid: s(&meta["uid"]),
            resource_version: s(&meta["resourceVersion"]),
            source,
            hash,
            created_ms: meta["creationTimestamp"].as_str().and_then(super::propagate::parse_time_ms).unwrap_or(0),
            last_used_ms: ann(names::LAST_USED).and_then(super::propagate::parse_time_ms),
            adopted: crate::model::source::adopted(obj).map(str::to_owned).collect(),
            valid: match (kind.def().naming, keys) {
                (Naming::Hash, _) => snapshot::validate(obj).map(|_| ()).map_err(|e| e.to_string()),
                (Naming::KeyedMac, Some(keys)) => secret::validate(obj, ns, keys).map(|_| ()).map_err(|e| e.to_string()),
                (Naming::KeyedMac, None) => Err(format!("the cluster keys {} snapshots are checked under are not loaded", kind.as_str())),
            },
            bytes: match kind.def().content {
                Content::Data => snapshot::Content::from_object(obj).bytes(),
                Content::TypedBytes => SecretContent::from_object(obj).map(|c| c.bytes()).unwrap_or(0),
            },
            name,
        })
    }
}

/// A source as the sweep sees it (present = the source exists).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SourceInfo {
    pub head: Option<String>,
    pub keep: Option<usize>,
}

/// What references snapshots in a namespace, from fresh lists.
#[derive(Clone, Debug, Default)]
pub struct References {
    /// Object referenced → who references it (`Kind/name`).
    pub by_name: HashMap<SourceId, Vec<String>>,
    /// Template hashes of ReplicaSets and ControllerRevisions.
    pub live_templates: HashSet<String>,
}

impl References {
    /// The references of `obj`, of `kind`, to sources of `sources`; a revision's template hash as
    /// its owner's kind computes it (`kinds`: a ReplicaSet's hash label is its owner's).
    pub fn add(&mut self, kinds: &Registry, kind: Kind, obj: &Value, sources: ids::SourceKinds) {
        let Some(tpl) = obj.pointer(kind.template_pointer()) else { return };
        let who = format!("{}/{}", kind.as_str(), obj["metadata"]["name"].as_str().unwrap_or_default());
        for id in template::ref_sources(tpl, sources) {
            self.by_name.entry(id).or_default().push(who.clone());
        }
        if !kind.is_workload() {
            let hash = match kind.history() {
                History::ReplicaSets { .. } => template::template_hash_without(tpl, kinds.replicaset_history(&obj["metadata"]).1),
                _ => kind.template_hash(tpl),
            };
            self.live_templates.insert(hash);
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    Keep(String),
    Delete(String),
}

/// A change to the snapshot's `last-used` record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Stamp {
    /// Not in use and not yet recorded: write now.
    Set,
    /// In use again: remove the stale record.
    Clear,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Item {
    pub name: String,
    pub verdict: Verdict,
    pub stamp: Option<Stamp>,
}

#[derive(Clone, Copy, Debug)]
pub struct Settings {
    pub keep: usize,
    pub grace: Duration,
}

fn ago(now_ms: i64, t_ms: i64) -> String {
    let s = (now_ms - t_ms).max(0) / 1000;
    if s >= 3600 {
        format!("{}h{}m", s / 3600, s % 3600 / 60)
    } else if s >= 60 {
        format!("{}m{}s", s / 60, s % 60)
    } else {
        format!("{s}s")
    }
}

/// Decides, for every snapshot in a namespace, whether to keep it (and why) or delete it.
pub fn plan(
    snapshots: &[SnapshotInfo],
    sources: &HashMap<SourceId, SourceInfo>,
    refs: &References,
    now_ms: i64,
    settings: Settings,
) -> Vec<Item> {
    let grace_ms = i64::try_from(settings.grace.as_millis()).unwrap_or(i64::MAX / 4);
    // Newest N valid snapshots per existing source.
    let mut newest: HashSet<&str> = HashSet::new();
    let mut by_source: BTreeMap<SourceId, Vec<&SnapshotInfo>> = BTreeMap::new();
    for s in snapshots.iter().filter(|s| s.valid.is_ok()) {
        by_source.entry(SourceId::new(s.kind, s.source.as_str())).or_default().push(s);
    }
    for (source, mut list) in by_source {
        let Some(src) = sources.get(&source) else { continue };
        list.sort_by(|a, b| b.created_ms.cmp(&a.created_ms).then_with(|| b.name.cmp(&a.name)));
        newest.extend(list.iter().take(src.keep.unwrap_or(settings.keep)).map(|s| s.name.as_str()));
    }

    let mut items: Vec<Item> = snapshots
        .iter()
        .map(|s| {
            let src = sources.get(&SourceId::new(s.kind, s.source.as_str()));
            let mut in_use = None;
            if src.and_then(|x| x.head.as_deref()) == Some(s.hash.as_str()) {
                in_use = Some(format!("the head of {}", s.source));
            } else if let Some(users) = refs.by_name.get(&SourceId::new(s.kind, s.name.as_str())) {
                let mut users = users.clone();
                users.sort();
                users.dedup();
                let more = if users.len() > 3 { format!(" and {} more", users.len() - 3) } else { String::new() };
                users.truncate(3);
                in_use = Some(format!("referenced by {}{more}", users.join(", ")));
            } else if let Some(t) = s.adopted.iter().find(|t| refs.live_templates.contains(*t)) {
                in_use = Some(format!("its adoption record names template {t}, which a revision still has"));
            }
            let stamp = match (&in_use, s.last_used_ms) {
                (Some(_), Some(_)) => Some(Stamp::Clear),
                (None, None) if s.valid.is_ok() => Some(Stamp::Set),
                _ => None,
            };
            let verdict = if let Err(why) = &s.valid {
                Verdict::Keep(format!("not a valid snapshot ({why}); never deleted"))
            } else if let Some(why) = in_use {
                Verdict::Keep(why)
            } else if newest.contains(s.name.as_str()) {
                let n = src.and_then(|x| x.keep).unwrap_or(settings.keep);
                Verdict::Keep(format!("one of the newest {n} snapshots of {}", s.source))
            } else {
                match s.last_used_ms {
                    None => Verdict::Keep(format!("unused as of now; the grace period of {}s starts", settings.grace.as_secs())),
                    Some(t) if now_ms - t < grace_ms => Verdict::Keep(format!(
                        "unused since {} ago, within the grace period of {}s",
                        ago(now_ms, t),
                        settings.grace.as_secs()
                    )),
                    Some(t) if src.is_none() => {
                        Verdict::Delete(format!("source {} is deleted and nothing has used this for {}", s.source, ago(now_ms, t)))
                    }
                    Some(t) => Verdict::Delete(format!(
                        "unused for {}, not the head, not among the newest {} of {}",
                        ago(now_ms, t),
                        src.and_then(|x| x.keep).unwrap_or(settings.keep),
                        s.source
                    )),
                }
            };
            Item { name: s.name.clone(), verdict, stamp }
        })
        .collect();
    items.sort_by(|a, b| a.name.cmp(&b.name));
    items
}

/// What one namespace's sweep did.
#[derive(Clone, Debug, Default)]
pub struct Report {
    pub namespace: String,
    pub items: Vec<Item>,
    /// Names actually deleted (not in a dry run).
    pub deleted: Vec<String>,
    /// Deletions or record writes that failed, with why.
    pub errors: Vec<String>,
    pub snapshots: usize,
    pub bytes: usize,
    pub elapsed: Duration,
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for item in &self.items {
            match &item.verdict {
                Verdict::Keep(why) => writeln!(f, "keep    {}/{}: {why}", self.namespace, item.name)?,
                Verdict::Delete(why) => {
                    let done = if self.deleted.contains(&item.name) { "deleted" } else { "delete " };
                    writeln!(f, "{done} {}/{}: {why}", self.namespace, item.name)?
                }
            }
        }
        for e in &self.errors {
            writeln!(f, "error   {}: {e}", self.namespace)?;
        }
        Ok(())
    }
}

/// Sweeps one namespace: fresh lists, plan, then (unless `dry_run`) deletes with preconditions
/// and records last use. Last use is recorded and compared in the API server's time (`clock`),
/// so a leader change between replicas whose clocks differ does not shorten the grace period.
pub async fn sweep_namespace(
    cluster: &dyn Cluster,
    clock: &Clock,
    ns: &str,
    settings: Settings,
    dry_run: bool,
    secrets: Option<&Keyring>,
) -> Result<Report, ApiError> {
    sweep_namespace_at(cluster, ns, settings, dry_run, secrets, clock.now_ms()).await
}

/// [`sweep_namespace`] at `now` (milliseconds since the epoch). `secrets`: the cluster keys when
/// the namespace's Secret snapshots are swept too (Secrets on there, docs/behaviour.md §4a).
pub async fn sweep_namespace_at(
    cluster: &dyn Cluster,
    ns: &str,
    settings: Settings,
    dry_run: bool,
    secrets: Option<&Keyring>,
    now: i64,
) -> Result<Report, ApiError> {
    let source_kinds = ids::SourceKinds::new(secrets.is_some());
    let start = Instant::now();
    // Sources as metadata (their head and keep annotations), snapshots whole (validity is
    // checked from content), each reduced to its record as its page arrives: a namespace's other
    // ConfigMaps, however large, are never read whole, nor all its snapshots at once (docs/behaviour.md §10).
    let mut snapshots: Vec<SnapshotInfo> = Vec::new();
    let mut sources: HashMap<SourceId, SourceInfo> = HashMap::new();
    for kind in source_kinds.iter() {
        let objects = cluster.list_source_metadata(ns, kind).await?;
        cluster.list_snapshots(ns, kind, &mut |obj| snapshots.extend(SnapshotInfo::from_object(kind, obj, ns, secrets))).await?;
        for obj in &objects {
            if obj["metadata"]["labels"].get(names::HASH_LABEL).is_some() {
                continue; // a snapshot: listed whole above
            }
            let ann = |k: &str| obj["metadata"]["annotations"].get(k).and_then(Value::as_str);
            sources.insert(
                SourceId::new(kind, obj["metadata"]["name"].as_str().unwrap_or_default()),
                SourceInfo { head: ann(names::HEAD).map(str::to_owned), keep: ann(names::KEEP).and_then(|k| k.trim().parse().ok()) },
            );
        }
    }
    let mut refs = References::default();
    let kinds = cluster.kinds();
    for kind in kinds.workloads() {
        let listed = match cluster.list(ns, Watched::Workload(kind)).await {
            // A registered kind whose API is not served (its CRD not installed) has no objects:
            // nothing of it references a snapshot. The watch reports it; the sweep goes on.
            Err(e) if e.code == Some(404) && !kind.is_builtin() => Vec::new(),
            listed => listed?,
        };
        for obj in listed {
            refs.add(kinds, kind, &obj, source_kinds);
        }
    }
    for kind in kinds.revisions() {
        for obj in cluster.list(ns, Watched::Revision(kind)).await? {
            refs.add(kinds, kind, &obj, source_kinds);
        }
    }
    let mut items = plan(&snapshots, &sources, &refs, now, settings);
    let mut report = Report {
        namespace: ns.to_owned(),
        snapshots: snapshots.iter().filter(|s| s.valid.is_ok()).count(),
        bytes: snapshots.iter().filter(|s| s.valid.is_ok()).map(|s| s.bytes).sum(),
        ..Default::default()
    };
    if !dry_run {
        let by_name: HashMap<&str, &SnapshotInfo> = snapshots.iter().map(|s| (s.name.as_str(), s)).collect();
        let stamp_time = format!("{:.0}", k8s_openapi::jiff::Timestamp::from_millisecond(now).unwrap_or_default());
        for item in &mut items {
            let s = by_name[item.name.as_str()];
            if let Verdict::Delete(why) = &item.verdict {
                match cluster.delete_source(ns, &SourceId::new(s.kind, s.name.as_str()), &s.uid, &s.resource_version).await {
                    Ok(_) => {
                        tracing::info!(namespace = ns, snapshot = %s.name, reason = %why, "deleted snapshot");
                        METRICS.gc_deleted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        report.deleted.push(s.name.clone());
                    }
                    Err(e) if e.code == Some(404) => {}
                    // Written since the list: an admission pinning it clears the last-use record
                    // (store::ensure), which is what makes this delete fail. Kept.
                    Err(e) if e.is_conflict() => {
                        tracing::info!(namespace = ns, snapshot = %s.name, "snapshot changed since the sweep listed it (pinned again); kept");
                        item.verdict = Verdict::Keep("changed since this sweep listed it (pinned again); kept".into());
                    }
                    // In use since the list in a way the snapshot itself does not show: its
                    // source's content went back to it (it is the head again), or a reference
                    // appeared. Snapshot protection refused, as it should. Kept.
                    Err(e) if e.code == Some(403) && e.reason == names::REASON_SNAPSHOT_IN_USE => {
                        tracing::info!(namespace = ns, snapshot = %s.name, refusal = %e.message, "snapshot in use again since the sweep listed it; kept");
                        item.verdict = Verdict::Keep(format!("in use again since this sweep listed it; kept ({})", e.message));
                    }
                    Err(e) => report.errors.push(format!("delete {}: {e}", s.name)),
                }
                continue;
            }
            let value = match item.stamp {
                Some(Stamp::Set) => Value::String(stamp_time.clone()),
                Some(Stamp::Clear) => Value::Null,
                None => continue,
            };
            let patch = json!({"metadata": {"uid": s.uid, "annotations": {names::LAST_USED: value}}});
            match cluster.patch_source(ns, &SourceId::new(s.kind, s.name.as_str()), &patch).await {
                Ok(()) => {}
                // Gone since the list (another sweep, a person, the namespace), or another
                // object under its name now (the uid precondition): nothing to record on it.
                Err(e) if e.code == Some(404) || e.is_conflict() => {}
                // Snapshot protection lets only confighistory's own identity change snapshot
                // metadata: a `gc` run by a person is refused here.
                Err(e) if e.code == Some(403) => report.errors.push(format!(
                    "record last use on {}: {}; run `confighistory gc` as confighistory's ServiceAccount \
                     (kubectl exec -n <its namespace> deploy/confighistory -- confighistory gc), or with --dry-run",
                    s.name, e.message
                )),
                Err(e) => report.errors.push(format!("record last use on {}: {e}", s.name)),
            }
        }
    }
    report.items = items;
    report.elapsed = start.elapsed();
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: i64 = 60_000;

    fn snap(name: &str, source: &str, hash: &str, created_min: i64, last_used_min: Option<i64>) -> SnapshotInfo {
        SnapshotInfo {
            kind: SourceKind::ConfigMap,
            name: name.into(),
            uid: format!("uid-{name}"),
            resource_version: "1".into(),
            source: source.into(),
            hash: hash.into(),
            created_ms: created_min * MIN,
            last_used_ms: last_used_min.map(|m| m * MIN),
            adopted: vec![],
            valid: Ok(()),
            bytes: 10,
        }
    }

    fn settings() -> Settings {
        Settings { keep: 2, grace: Duration::from_secs(600) }
    }

    fn verdicts(items: &[Item]) -> Vec<(&str, bool, &str)> {
        items
            .iter()
            .map(|i| match &i.verdict {
                Verdict::Keep(w) => (i.name.as_str(), false, w.as_str()),
                Verdict::Delete(w) => (i.name.as_str(), true, w.as_str()),
            })
            .collect()
    }

    #[test]
    fn keeps_heads_references_adoptions_newest_and_recent_use() {
        let snaps = vec![
            snap("s-1", "s", "h1", 1, Some(100)), // old, unused long ago → delete
            snap("s-2", "s", "h2", 2, Some(100)), // referenced by a ReplicaSet
            snap("s-3", "s", "h3", 3, Some(195)), // unused 5 minutes: grace
            snap("s-4", "s", "h4", 4, Some(100)), // adoption record of a live template
            snap("s-5", "s", "h5", 5, None),      // newest two
            snap("s-6", "s", "h6", 6, None),      // head
            snap("s-7", "s", "h7", 0, None),      // unused, never recorded: record, keep
        ];
        let mut snaps = snaps;
        snaps[3].adopted = vec!["tpl".into()];
        let sources = HashMap::from([(SourceId::configmap("s"), SourceInfo { head: Some("h6".into()), keep: None })]);
        let mut refs = References::default();
        refs.by_name.insert(SourceId::configmap("s-2"), vec!["ReplicaSet/app-1".into()]);
        refs.live_templates.insert("tpl".into());
        let items = plan(&snaps, &sources, &refs, 200 * MIN, settings());
        let v = verdicts(&items);
        assert_eq!(v[0].0, "s-1");
        assert!(v[0].1, "{v:?}");
        assert!(v[0].2.contains("unused for 1h40m"), "{}", v[0].2);
        assert!(!v[1].1 && v[1].2.contains("ReplicaSet/app-1"));
        assert!(!v[2].1 && v[2].2.contains("grace"));
        assert!(!v[3].1 && v[3].2.contains("adoption record"));
        assert!(!v[4].1 && v[4].2.contains("newest 2"));
        assert!(!v[5].1 && v[5].2.contains("head"));
        assert!(!v[6].1 && v[6].2.contains("grace period of 600s starts"));
        assert_eq!(items[6].stamp, Some(Stamp::Set));
        assert_eq!(items[1].stamp, Some(Stamp::Clear), "in use again: the old record goes");
        assert_eq!(items[0].stamp, None);
    }

    #[test]
    fn per_source_keep_and_deleted_sources() {
        let snaps = vec![snap("a-1", "a", "h1", 1, Some(0)), snap("a-2", "a", "h2", 2, Some(0)), snap("gone-1", "gone", "g", 9, Some(0))];
        let sources = HashMap::from([(SourceId::configmap("a"), SourceInfo { head: None, keep: Some(1) })]);
        let items = plan(&snaps, &sources, &References::default(), 100 * MIN, settings());
        let v = verdicts(&items);
        assert!(v[0].1, "a-1 is not among the newest 1: {v:?}");
        assert!(!v[1].1);
        assert!(v[2].1 && v[2].2.contains("source gone is deleted"), "newest-N does not protect a deleted source's snapshots");
    }

    #[test]
    fn invalid_snapshots_are_never_deleted() {
        let mut s = snap("x-1", "x", "h", 0, Some(0));
        s.valid = Err("it is not immutable".into());
        let items = plan(&[s], &HashMap::new(), &References::default(), 1000 * MIN, settings());
        assert!(matches!(&items[0].verdict, Verdict::Keep(w) if w.contains("not a valid snapshot")));
        assert_eq!(items[0].stamp, None);
    }

    #[test]
    fn references_come_from_every_kind() {
        let mut refs = References::default();
        let tpl = json!({"spec": {"volumes": [{"name": "v", "configMap": {"name": "cfg-aaaaaaaaaaaa"}}]}});
        refs.add(
            Registry::builtin(),
            Kind::Job,
            &json!({"metadata": {"name": "j"}, "spec": {"template": tpl}}),
            ids::SourceKinds::CONFIGMAPS,
        );
        refs.add(
            Registry::builtin(),
            Kind::CronJob,
            &json!({"metadata": {"name": "c"}, "spec": {"jobTemplate": {"spec": {"template": tpl}}}}),
            ids::SourceKinds::CONFIGMAPS,
        );
        refs.add(
            Registry::builtin(),
            Kind::ControllerRevision,
            &json!({"metadata": {"name": "r"}, "data": {"spec": {"template": tpl}}}),
            ids::SourceKinds::CONFIGMAPS,
        );
        assert_eq!(refs.by_name[&SourceId::configmap("cfg-aaaaaaaaaaaa")], ["Job/j", "CronJob/c", "ControllerRevision/r"]);
        assert!(refs.live_templates.contains(&template::template_hash(&tpl)));
    }

    /// A registered kind's objects and ReplicaSets (its own hash label) keep snapshots as a
    /// Deployment's do: referenced, and adoption records of a template still in its history.
    #[test]
    fn a_registered_workload_kind_keeps_snapshots_as_a_deployment() {
        use crate::model::kinds::tests::with_rollout;
        let kinds = with_rollout();
        let rollout = kinds.find("example.io", "Rollout").unwrap();
        let tpl = json!({"metadata": {"labels": {"app": "a"}}, "spec": {"volumes": [{"name": "v", "configMap": {"name": "s-1"}}]}});
        let revision = |owner: Value, label: &str| {
            let mut t = tpl.clone();
            t["metadata"]["labels"][label] = json!("5d8f");
            json!({"metadata": {"name": "app-5d8f", "ownerReferences": [owner]}, "spec": {"template": t}})
        };
        let cases = [
            (
                Kind::Deployment,
                json!({"metadata": {"name": "app"}, "spec": {"template": tpl}}),
                revision(json!({"apiVersion": "apps/v1", "kind": "Deployment", "controller": true}), "pod-template-hash"),
            ),
            (
                rollout,
                json!({"metadata": {"name": "app"}, "spec": {"workload": {"template": tpl}}}),
                revision(json!({"apiVersion": "example.io/v1alpha1", "kind": "Rollout", "controller": true}), "rollouts-pod-template-hash"),
            ),
        ];
        let mut verdicts_by_kind = Vec::new();
        for (kind, workload, rs) in cases {
            let mut refs = References::default();
            refs.add(kinds, kind, &workload, ids::SourceKinds::CONFIGMAPS);
            refs.add(kinds, Kind::ReplicaSet, &rs, ids::SourceKinds::CONFIGMAPS);
            assert_eq!(refs.by_name[&SourceId::configmap("s-1")], [format!("{}/app", kind.as_str()), "ReplicaSet/app-5d8f".to_owned()]);
            let mut adopted = snap("s-2", "s", "h2", 2, Some(100));
            adopted.adopted = vec![kind.template_hash(&tpl)];
            let snaps = [snap("s-1", "s", "h1", 1, Some(100)), adopted, snap("s-3", "s", "h3", 3, Some(100))];
            let sources = HashMap::from([(SourceId::configmap("s"), SourceInfo { head: Some("h3".into()), keep: None })]);
            let items = plan(&snaps, &sources, &refs, 200 * MIN, settings());
            let v: Vec<(String, bool, String)> =
                verdicts(&items).into_iter().map(|(n, d, why)| (n.to_owned(), d, why.to_owned())).collect();
            let referenced_by = format!("{}/app", kind.as_str());
            assert!(v[0].2.contains(&referenced_by) && v[0].2.contains("ReplicaSet/app-5d8f"), "{kind:?}: {v:?}");
            assert!(v[1].2.contains("adoption record"), "{kind:?}: {v:?}");
            let v: Vec<(String, bool, String)> =
                v.into_iter().map(|(n, d, why)| (n, d, if why.contains("referenced by") { String::new() } else { why })).collect();
            verdicts_by_kind.push(v);
        }
        assert_eq!(verdicts_by_kind[0], verdicts_by_kind[1]);
    }

    #[test]
    fn a_thousand_snapshots_plan_quickly() {
        let snaps: Vec<SnapshotInfo> =
            (0..1000).map(|i| snap(&format!("s{}-{i}", i % 50), &format!("s{}", i % 50), &format!("h{i}"), i, Some(0))).collect();
        let sources: HashMap<SourceId, SourceInfo> =
            (0..50).map(|i| (SourceId::configmap(format!("s{i}")), SourceInfo::default())).collect();
        let start = Instant::now();
        let items = plan(&snaps, &sources, &References::default(), 10_000 * MIN, settings());
        assert_eq!(items.iter().filter(|i| matches!(i.verdict, Verdict::Delete(_))).count(), 900);
        assert!(start.elapsed() < Duration::from_secs(1), "{:?}", start.elapsed());
    }
}
