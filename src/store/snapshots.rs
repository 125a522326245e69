//! The snapshot store (docs/behaviour.md §5): makes sure a valid snapshot of some content exists, through the
//! Kubernetes port. Admission and the controller's adoption both write snapshots here; each maps
//! [`Error`] to its own answer (an HTTP denial, a retried resync).

use std::sync::atomic::Ordering;

use serde_json::{json, Value};

use crate::cluster::{ApiError, Cluster, Created, Event, ObjectRef};
use crate::metrics::METRICS;
use crate::model::ids::{SourceId, SourceKind};
use crate::model::keys::{ClusterKey, KeyId, Keyring};
use crate::model::names;
use crate::model::secret::{self, Frame, SecretContent};
use crate::model::snapshot;

/// Why no snapshot could be made sure of.
#[derive(Clone, Debug, thiserror::Error)]
pub enum Error {
    /// The API server refused or did not answer `what` (e.g. `read ConfigMap shop/pricing-config`).
    #[error("could not {what}: {source}")]
    Api { what: String, source: ApiError },
    /// The namespace's ResourceQuota for ConfigMaps is full.
    #[error("could not create snapshot {name}: {source}")]
    Quota { name: String, source_name: String, source: ApiError },
    /// The name kept being created or changed by someone else between our calls.
    #[error("could not create snapshot {namespace}/{name}: {name} kept changing while being read")]
    Race { namespace: String, name: String },
    /// Every name of the collision sequence is taken by another object.
    #[error("could not find a free snapshot name for {source_name}: every name is taken")]
    Exhausted { source_name: String, hash: String },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A name of the collision sequence held by an object that is not the wanted snapshot (docs/behaviour.md §5).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Collision {
    /// The name taken.
    pub name: String,
    /// What the object under it is instead.
    pub why: String,
    /// The kind of the object under it (the snapshot's, its source's).
    pub kind: SourceKind,
}

impl Collision {
    /// The admission response's warning.
    pub fn warning(&self) -> String {
        format!("{} is taken by a {} that is not this snapshot ({}); using the next name", self.name, self.kind.as_str(), self.why)
    }
}

/// Names an Event lists before it only counts the rest (the sequence has up to 100).
const EVENT_NAMES: usize = 3;

/// The Event on source `source` (uid `uid`, when known) whose snapshot met `collisions` and took
/// the name `taken`: a squatter is the namespace owner's to look at, not only the client's.
pub fn collision_event(ns: &str, source: &SourceId, uid: &str, taken: &str, collisions: &[Collision]) -> Event {
    let mut squatted: Vec<String> = collisions.iter().take(EVENT_NAMES).map(|c| format!("{} ({})", c.name, c.why)).collect();
    if collisions.len() > EVENT_NAMES {
        squatted.push(format!("{} more", collisions.len() - EVENT_NAMES));
    }
    Event {
        regarding: ObjectRef {
            api_version: "v1".into(),
            kind: source.kind_str().into(),
            namespace: ns.to_owned(),
            name: source.name.clone(),
            uid: uid.to_owned(),
        },
        warning: true,
        reason: "SnapshotCollision",
        action: "Snapshot",
        note: format!(
            "Snapshot name taken by a {} that is not this snapshot: {}; the snapshot is {taken}. Delete the squatter if nothing uses it",
            source.kind_str(),
            squatted.join(", ")
        ),
    }
}

/// What a snapshot copies: a ConfigMap's content, or a Secret's, named by its MAC under the
/// namespace's key of one of the cluster keys in a frame (the source's, `secret::source_mac`; the
/// current key when that is no longer kept), docs/behaviour.md §4a.
#[derive(Clone, Copy)]
pub enum Snap<'a> {
    ConfigMap(&'a snapshot::Content),
    Secret(&'a SecretContent, &'a Keyring, KeyId, Frame),
}

impl<'a> Snap<'a> {
    /// The cluster key a Secret snapshot is MAC'd under.
    fn key(keys: &'a Keyring, id: KeyId) -> &'a ClusterKey {
        keys.get(id).unwrap_or_else(|| keys.current())
    }
}

impl Snap<'_> {
    /// The hash its snapshot is named by: a ConfigMap's content hash, a Secret's MAC (as the
    /// content of `source`) under its key's namespace key.
    pub fn hash(&self, ns: &str, source: &str) -> String {
        match self {
            Snap::ConfigMap(c) => c.hash(),
            Snap::Secret(c, keys, id, frame) => c.mac_in(&Snap::key(keys, *id).namespace_key(ns), source, *frame),
        }
    }

    fn object(&self, ns: &str, source: &str, name: &str, adopted: &[String], origin: &snapshot::Origin) -> Value {
        let mut obj = match self {
            Snap::ConfigMap(c) => snapshot::object(ns, source, name, c, adopted),
            Snap::Secret(c, keys, id, frame) => {
                secret::snapshot_object_in(ns, source, name, c, &Snap::key(keys, *id).namespace_key(ns), *frame, adopted)
            }
        };
        origin.annotate(&mut obj);
        obj
    }

    /// The hash of a valid snapshot, or why `obj` is none (for a Secret: labels and key ids only).
    fn validate(&self, ns: &str, obj: &Value) -> Result<String, String> {
        match self {
            Snap::ConfigMap(_) => snapshot::validate(obj).map_err(|e| e.to_string()),
            Snap::Secret(_, keys, _, _) => secret::validate(obj, ns, keys).map_err(|e| e.to_string()),
        }
    }
}

/// A source's content as read from the API server, of either kind: what the controller's re-hash
/// and adoption compare with its head and copy into its snapshot. Its `Debug` is its content's
/// (a Secret's names keys and sizes only).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SourceContent {
    ConfigMap(snapshot::Content),
    Secret(SecretContent),
}

impl SourceContent {
    /// The content of `obj`, a source of `kind` (a Secret whose data is no base64: which key).
    pub fn from_object(kind: SourceKind, obj: &Value) -> Result<SourceContent, secret::Malformed> {
        Ok(match kind {
            SourceKind::ConfigMap => SourceContent::ConfigMap(snapshot::Content::from_object(obj)),
            SourceKind::Secret => SourceContent::Secret(SecretContent::from_object(obj)?),
        })
    }

    /// What its snapshot copies, as source `obj` (the stored object) named `source` in `ns`
    /// names it: a Secret's under the source's key and frame (`secret::source_mac`), which needs
    /// the cluster keys (`None`: not loaded, no snapshot).
    pub fn snap<'a>(&'a self, obj: &Value, ns: &str, source: &str, keys: Option<&'a Keyring>) -> Option<Snap<'a>> {
        match self {
            SourceContent::ConfigMap(c) => Some(Snap::ConfigMap(c)),
            SourceContent::Secret(c) => keys.map(|k| {
                let named = secret::source_mac(obj, c, ns, source, k);
                Snap::Secret(c, k, named.key.id(), named.frame)
            }),
        }
    }

    /// Whether `head` names this content of source `source` in namespace `ns`: a ConfigMap's
    /// content hash; a Secret's MAC under the namespace's key of any key id kept, in either
    /// frame (a head written before a key rotation, or before frame v2, still names the content
    /// it was written for, docs/operations.md, docs/behaviour.md §4a).
    pub fn is_named_by(&self, ns: &str, source: &str, head: &str, keys: Option<&Keyring>) -> bool {
        match self {
            SourceContent::ConfigMap(c) => c.hash() == head,
            SourceContent::Secret(c) => keys.is_some_and(|k| {
                k.kept().any(|key| {
                    let nk = key.namespace_key(ns);
                    [Frame::V2, Frame::V1].into_iter().any(|f| c.mac_in(&nk, source, f) == head)
                })
            }),
        }
    }
}

/// How often [`ensure`] looks at one name again after losing a race.
const MAX_RACES: u32 = 5;

/// Makes sure a valid snapshot of `content` exists, walking the collision sequence past any
/// other object under its name, and records `adopted` templates on it. A snapshot it creates
/// records `origin` (who wrote the content, docs/behaviour.md §5.2); one that exists keeps its
/// own (a snapshot is never rewritten). Returns the name and the names skipped as collisions.
pub async fn ensure(
    cluster: &dyn Cluster,
    ns: &str,
    source_id: &SourceId,
    content: &snapshot::Content,
    adopted: &[String],
    origin: &snapshot::Origin,
    dry_run: bool,
) -> Result<(String, Vec<Collision>)> {
    ensure_snap(cluster, ns, source_id, Snap::ConfigMap(content), adopted, origin, dry_run).await
}

/// [`ensure`] for either kind of content.
pub async fn ensure_snap(
    cluster: &dyn Cluster,
    ns: &str,
    source_id: &SourceId,
    content: Snap<'_>,
    adopted: &[String],
    origin: &snapshot::Origin,
    dry_run: bool,
) -> Result<(String, Vec<Collision>)> {
    let hash = content.hash(ns, &source_id.name);
    let source = source_id.name.as_str();
    let mut collisions = Vec::new();
    let read = |name: String| async move {
        let what = format!("read {} {ns}/{name}", source_id.kind_str());
        cluster.get_source(ns, &source_id.with_name(name)).await.map_err(|e| Error::Api { what, source: e })
    };
    // Races (created or deleted by someone else between two calls, a concurrent adoption record)
    // look at the same name again, a few times.
    let (mut index, mut races) = (0, 0);
    while index <= snapshot::MAX_COLLISION_INDEX {
        let name = snapshot::name(source, &hash, index);
        // Read before create: a snapshot that exists is used, never re-created (docs/behaviour.md §5). A POST
        // first would be refused by a full ConfigMap quota even though the object exists, and a
        // dry run would answer differently from the real request.
        let Some(existing) = read(name.clone()).await? else {
            let obj = content.object(ns, source, &name, adopted, origin);
            match cluster.create_source(ns, source_id.kind, &obj, dry_run).await {
                Ok(Created::Created) => {
                    if !dry_run {
                        METRICS.snapshots_created.fetch_add(1, Ordering::Relaxed);
                        tracing::info!(namespace = ns, snapshot = %name, source, "created snapshot");
                    }
                    return Ok((name, collisions));
                }
                Ok(Created::AlreadyExists) if races < MAX_RACES => {
                    races += 1;
                    continue;
                }
                Ok(Created::AlreadyExists) => return Err(Error::Race { namespace: ns.to_owned(), name }),
                Err(e) if e.is_quota() => return Err(Error::Quota { name, source_name: source.to_owned(), source: e }),
                Err(e) => return Err(Error::Api { what: format!("create snapshot {ns}/{name}"), source: e }),
            }
        };
        // A valid snapshot of this content is reused only when it is this source's: two sources
        // whose names share their first `MAX_SOURCE_PART` characters give one name for one
        // content, and the second would otherwise be pinned to the first's snapshot.
        let owner = crate::model::snapshot::snapshot_source(&name, &existing);
        match content.validate(ns, &existing) {
            Ok(h) if h == hash && owner == Some(source) => {
                let have: Vec<&str> = crate::model::source::adopted(&existing).collect();
                let missing: Vec<&String> = adopted.iter().filter(|a| !have.contains(&a.as_str())).collect();
                let mut annotations = serde_json::Map::new();
                if !missing.is_empty() {
                    let mut all: Vec<String> = have.iter().map(|s| s.to_string()).collect();
                    all.extend(missing.into_iter().cloned());
                    annotations.insert(names::ADOPTED.into(), all.join(",").into());
                }
                // GC recorded this snapshot unused, so a sweep may be about to delete it (with the
                // resourceVersion it listed): this write makes that delete fail, and a sweep
                // that lists it afterwards finds it unrecorded, so the grace period starts again
                // (docs/behaviour.md §8: a snapshot being pinned right now is never swept). A snapshot in use
                // carries no record: re-pinning it writes nothing.
                if crate::model::meta::Meta::annotation(&existing, names::LAST_USED).is_some() {
                    annotations.insert(names::LAST_USED.into(), Value::Null);
                }
                let what = if annotations.contains_key(names::ADOPTED) { "record adoption on" } else { "record use of" };
                if !annotations.is_empty() && !dry_run {
                    // The resourceVersion read is a precondition: a concurrent writer's record is
                    // re-read and kept, never overwritten (docs/behaviour.md §9: each record is history); a
                    // snapshot deleted since the read is made again.
                    let mut patch = json!({"metadata": {"annotations": annotations}});
                    if let Some(rv) = existing.pointer("/metadata/resourceVersion") {
                        patch["metadata"]["resourceVersion"] = rv.clone();
                    }
                    match cluster.patch_source(ns, &source_id.with_name(name.as_str()), &patch).await {
                        Ok(()) => {}
                        Err(e) if (e.is_conflict() || e.code == Some(404)) && races < MAX_RACES => {
                            races += 1;
                            continue;
                        }
                        Err(e) => return Err(Error::Api { what: format!("{what} {ns}/{name}"), source: e }),
                    }
                }
                return Ok((name, collisions));
            }
            other => {
                let why = match other {
                    Ok(h) if h == hash => "it is a snapshot of this content for another source".to_owned(),
                    Ok(h) => format!("it is a snapshot of other content ({h})"),
                    Err(e) => e,
                };
                METRICS.collisions.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(namespace = ns, name = %name, reason = %why, "snapshot name collision");
                collisions.push(Collision { name, why, kind: source_id.kind });
                index += 1;
            }
        }
    }
    Err(Error::Exhausted { source_name: source.to_owned(), hash })
}

/// Makes sure an existing snapshot that an admission keeps by name (one the request chose) is not
/// swept while it is being pinned (docs/behaviour.md §8): GC's last-use record on it is cleared, with the
/// resourceVersion read as a precondition, so a sweep that listed it unused fails to delete it;
/// one deleted between the read and that write is made again from what was read (same name,
/// same content, same adoption records). `read`: the snapshot as this admission already read it
/// from the API server (never from a cache, which may lag), saving a read. A snapshot without the
/// record (in use, or not looked at by GC yet) costs nothing more; a name that is not a valid
/// snapshot is left to the decision.
pub async fn keep(cluster: &dyn Cluster, ns: &str, snapshot_id: &SourceId, read: Option<&Value>, dry_run: bool) -> Result<()> {
    if dry_run {
        return Ok(());
    }
    let name = snapshot_id.name.as_str();
    let mut read_before: Option<Value> = None;
    let mut first = read.cloned();
    for _ in 0..=MAX_RACES {
        let current = match first.take() {
            Some(obj) => Some(obj),
            None => cluster
                .get_source(ns, snapshot_id)
                .await
                .map_err(|e| Error::Api { what: format!("read snapshot {ns}/{name}"), source: e })?,
        };
        let Some(existing) = current else {
            // Never seen: nothing to keep. Seen and gone since: a sweep took it; make it again.
            let Some(gone) = read_before.take() else { return Ok(()) };
            let source = crate::model::snapshot::snapshot_source(name, &gone).unwrap_or_default().to_owned();
            let adopted: Vec<String> = crate::model::source::adopted(&gone).map(str::to_owned).collect();
            let mut obj = snapshot::object(ns, &source, name, &snapshot::Content::from_object(&gone), &adopted);
            snapshot::Origin::of_snapshot(&gone).annotate(&mut obj);
            match cluster.create_source(ns, snapshot_id.kind, &obj, false).await {
                Ok(_) => continue,
                Err(e) if e.is_quota() => return Err(Error::Quota { name: name.to_owned(), source_name: source, source: e }),
                Err(e) => return Err(Error::Api { what: format!("create snapshot {ns}/{name}"), source: e }),
            }
        };
        if snapshot::validate(&existing).is_err() || crate::model::meta::Meta::annotation(&existing, names::LAST_USED).is_none() {
            return Ok(());
        }
        let mut patch = json!({"metadata": {"annotations": {names::LAST_USED: Value::Null}}});
        if let Some(rv) = existing.pointer("/metadata/resourceVersion") {
            patch["metadata"]["resourceVersion"] = rv.clone();
        }
        match cluster.patch_source(ns, snapshot_id, &patch).await {
            Ok(()) => return Ok(()),
            Err(e) if e.is_conflict() || e.code == Some(404) => read_before = Some(existing),
            Err(e) => return Err(Error::Api { what: format!("record use of {ns}/{name}"), source: e }),
        }
    }
    Err(Error::Race { namespace: ns.to_owned(), name: name.to_owned() })
}

/// The API error a lost race reads as, for callers that explain failures as API errors.
pub fn race_error(name: &str) -> ApiError {
    ApiError { code: Some(409), reason: "Conflict".into(), message: format!("{name} kept changing while being read") }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::MemoryCluster;
    use crate::model::snapshot::snapshot_source;

    /// Names at the length limits: two 253-character sources sharing the first
    /// `MAX_SOURCE_PART` (236) characters give one snapshot name for one content. Before, the
    /// second source was pinned to the first's snapshot on the hash alone.
    #[tokio::test]
    async fn sources_sharing_a_shortened_name_get_snapshots_of_their_own() {
        let cluster = MemoryCluster::default();
        let content = snapshot::Content { data: [("k".to_owned(), "v".to_owned())].into(), ..Default::default() };
        let hash = content.hash();
        let prefix = "a".repeat(snapshot::MAX_SOURCE_PART);
        let (one, two) = (format!("{prefix}{}", "b".repeat(17)), format!("{prefix}{}", "c".repeat(17)));
        assert_eq!((one.len(), two.len()), (253, 253));
        assert_eq!(snapshot::name(&one, &hash, 0), snapshot::name(&two, &hash, 0), "the shortened names agree");

        let (first, none) = ensure(&cluster, "ns", &SourceId::configmap(&one), &content, &[], &Default::default(), false).await.unwrap();
        assert!(none.is_empty());
        let (second, collisions) =
            ensure(&cluster, "ns", &SourceId::configmap(&two), &content, &[], &Default::default(), false).await.unwrap();
        assert_eq!(second, snapshot::name(&two, &hash, 1), "the next name of the sequence");
        assert_eq!(collisions.len(), 1);
        assert!(collisions[0].why.contains("another source"), "{}", collisions[0].why);
        for (name, source) in [(&first, &one), (&second, &two)] {
            let obj = cluster.get("ns", name).expect("written");
            assert!(name.len() <= 253, "{name}");
            assert_eq!(snapshot_source(name, &obj), Some(source.as_str()), "{name}");
            assert_eq!(snapshot::validate(&obj), Ok(hash.clone()));
            let label = obj["metadata"]["labels"][names::SOURCE_LABEL].as_str().unwrap();
            assert!(label.len() <= 63, "{label}");
        }
        assert_ne!(snapshot::source_label(&one), snapshot::source_label(&two), "labels keep the full names apart");
        // Each source finds its own snapshot again.
        assert_eq!(
            ensure(&cluster, "ns", &SourceId::configmap(&one), &content, &[], &Default::default(), false).await.unwrap(),
            (first.clone(), vec![])
        );
        assert_eq!(ensure(&cluster, "ns", &SourceId::configmap(&two), &content, &[], &Default::default(), false).await.unwrap().0, second);
        // A source of exactly `MAX_SOURCE_PART` characters is not shortened, and one more is.
        let (at, over) = (prefix.clone(), format!("{prefix}d"));
        assert_eq!(snapshot::parse_name(&snapshot::name(&at, &hash, 0)), Some((at.as_str(), hash.as_str(), 0)));
        let (reused, _) = ensure(&cluster, "ns", &SourceId::configmap(&over), &content, &[], &Default::default(), false).await.unwrap();
        assert_eq!(reused, snapshot::name(&over, &hash, 2), "past both others' names");
    }
}
