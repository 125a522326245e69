//! Admission decisions (docs/behaviour.md §6). Each endpoint is a pure function from a request and a
//! read-only [`View`] of the cluster to a [`Decision`]: the response to send plus the
//! [`Effect`]s (snapshot writes) the edge must carry out first. Dry run is the same decision
//! with the effects checked but not written.

use std::collections::{BTreeMap, HashMap};

use serde_json::{json, Value};

use crate::cache::{NamespaceInfo, State};
use crate::model::ids::{SourceId, SourceKinds};
use crate::model::json::At;
use crate::model::keys::KeyId;
use crate::model::meta::Meta;
use crate::model::policy::{Mode, Policy};
use crate::model::secret::{self as secret_model, SecretContent};
use crate::model::snapshot::{self, Content, Origin};
use crate::model::source as source_model;

pub mod configmap;
pub mod protect;
pub mod review;
pub mod secret;
pub mod settings;
pub mod validate;
pub mod workload;

pub use review::{Request, Response};

/// Fresh reads of sources, and of names shaped like snapshot names that the caches have not
/// seen, by kind and name: `None` when the API server says 404.
pub type Fresh = HashMap<SourceId, Option<Value>>;

/// Sources whose read, or whose snapshot's write, failed for this request, with the denial that
/// explains it. A decision that may be denied denies with it; an undo (or a CronJob's Job) goes
/// through without what failed (docs/behaviour.md §6.2.1: fail open with a warning, repair finishes the job).
pub type Failed = HashMap<SourceId, Failure>;

/// A read or write the API server refused or did not answer.
#[derive(Clone, Debug, PartialEq)]
pub struct Failure {
    /// What confighistory tried, e.g. `read ConfigMap shop/pricing-config`.
    pub what: String,
    /// What the API server said.
    pub cause: String,
    /// The answer to a request that may be denied.
    pub denial: Response,
    /// The API server said confighistory may not make this call (403 Forbidden on a read: its
    /// RBAC), as opposed to a quota or an outage.
    pub forbidden: bool,
}

/// Everything a decision may look at.
pub struct View<'a> {
    pub policy: &'a Policy,
    pub state: &'a State,
    /// Sources read from the API server for this request (empty on the first pass).
    pub fresh: &'a Fresh,
    /// What could not be read or written for this request.
    pub failed: &'a Failed,
    /// Current time, RFC 3339.
    pub now: &'a str,
    /// The request's namespace read fresh from the API server, when the namespace watch has
    /// listed and does not know it (created a moment ago); `None` when not read or not found.
    pub namespace: Option<&'a NamespaceInfo>,
}

impl View<'_> {
    /// The source kinds acted on in namespace `ns` (docs/behaviour.md §4a): the admin's choice,
    /// from the namespace's cache record or fresh read. With Secrets off, ConfigMaps without a
    /// lookup (the hot path of every workload write).
    #[inline]
    pub fn source_kinds(&self, ns: &str) -> SourceKinds {
        if !self.policy.secrets.enabled {
            return SourceKinds::CONFIGMAPS;
        }
        self.policy.source_kinds(self.state.namespace(ns).or(self.namespace))
    }

    /// Whether source `id`, as read (`obj`), is versioned: a ConfigMap by its annotation and the
    /// admin's selector (`Policy::versioned`), a Secret also only when it is no never-source
    /// (docs/behaviour.md §4a: tokens, Helm release records, a certificate issuer's, the admin's
    /// selector) and mutable.
    pub fn versioned(&self, id: &SourceId, obj: &Value) -> bool {
        source_model::is_versioned_object(id.kind, obj, &self.policy.excluded_sources)
    }

    /// Whether source `id`, as read, is a Secret that is never a source: left exactly as it is,
    /// not even warned about.
    pub fn never_source(&self, id: &SourceId, obj: &Value) -> bool {
        source_model::never_source_object(id.kind, obj, &self.policy.excluded_sources).is_some()
    }

    /// (source, hash) when `id` names a snapshot. A name the watch has not delivered is judged
    /// by the fresh read when the decision made one (a source whose own name merely looks like a
    /// snapshot name, created in the same apply as its first workload, is a source), and by the
    /// caches' rules otherwise ([`State::snapshot_of`]: the shape of the name).
    pub fn snapshot_of(&self, ns: &str, id: &SourceId) -> Option<(SourceId, String)> {
        if self.state.source(ns, id).is_none() {
            if let Some(Some(obj)) = self.fresh.get(id) {
                let info = crate::cache::SourceInfo::from_object_keeping(obj, Some(&Default::default()));
                return info.snapshot_of(&id.name).map(|(source, hash)| (id.with_name(source), hash));
            }
        }
        self.state.snapshot_of(ns, id)
    }
}

/// What rule decided an admission: compared by the webhook, and, as [`Reason::as_str`], the
/// label in logs and metrics (the strings dashboards know; do not rename them).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Reason {
    // Requests left alone before any rule.
    UnhandledKind,
    NotIntercepted,
    Deleting,
    Mode,
    NoTemplate,
    ExcludedNamespace,
    UnknownNamespace,
    // Workloads (docs/behaviour.md §6.2, §6.3).
    Unchanged,
    Undo,
    Propagation,
    Pinned,
    Valid,
    Appeared,
    Audit,
    MutableConfig,
    /// Denied: a snapshot named that does not exist, nor its source (6.2.5).
    MissingSnapshot,
    // Sources (6.1).
    NotASource,
    Source,
    SourceChanged,
    // Snapshots (6.4).
    ValidSnapshot,
    ForeignSnapshot,
    InvalidSnapshot,
    OwnUpdate,
    NoMetadataChange,
    SnapshotMetadata,
    NamespaceDeleting,
    NotASnapshot,
    Unreferenced,
    SnapshotInUse,
    // The edge.
    ApiError,
    #[default]
    Internal,
}

impl Reason {
    /// Every reason, for tests and documentation.
    pub const ALL: [Reason; 31] = [
        Reason::UnhandledKind,
        Reason::NotIntercepted,
        Reason::Deleting,
        Reason::Mode,
        Reason::NoTemplate,
        Reason::ExcludedNamespace,
        Reason::UnknownNamespace,
        Reason::Unchanged,
        Reason::Undo,
        Reason::Propagation,
        Reason::Pinned,
        Reason::Valid,
        Reason::Appeared,
        Reason::Audit,
        Reason::MutableConfig,
        Reason::MissingSnapshot,
        Reason::NotASource,
        Reason::Source,
        Reason::SourceChanged,
        Reason::ValidSnapshot,
        Reason::ForeignSnapshot,
        Reason::InvalidSnapshot,
        Reason::OwnUpdate,
        Reason::NoMetadataChange,
        Reason::SnapshotMetadata,
        Reason::NamespaceDeleting,
        Reason::NotASnapshot,
        Reason::Unreferenced,
        Reason::SnapshotInUse,
        Reason::ApiError,
        Reason::Internal,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Reason::UnhandledKind => "unhandled-kind",
            Reason::NotIntercepted => "not-intercepted",
            Reason::Deleting => "deleting",
            Reason::Mode => "mode",
            Reason::NoTemplate => "no-template",
            Reason::ExcludedNamespace => "excluded-namespace",
            Reason::UnknownNamespace => "unknown-namespace",
            Reason::Unchanged => "unchanged",
            Reason::Undo => "undo",
            Reason::Propagation => "propagation",
            Reason::Pinned => "pinned",
            Reason::Valid => "valid",
            Reason::Appeared => "appeared",
            Reason::Audit => "audit",
            Reason::MutableConfig => "mutable-config",
            Reason::MissingSnapshot => "missing-snapshot",
            Reason::NotASource => "not-a-source",
            Reason::Source => "source",
            Reason::SourceChanged => "source-changed",
            Reason::ValidSnapshot => "valid-snapshot",
            Reason::ForeignSnapshot => "foreign-snapshot",
            Reason::InvalidSnapshot => "invalid-snapshot",
            Reason::OwnUpdate => "own-update",
            Reason::NoMetadataChange => "no-metadata-change",
            Reason::SnapshotMetadata => "snapshot-metadata",
            Reason::NamespaceDeleting => "namespace-deleting",
            Reason::NotASnapshot => "not-a-snapshot",
            Reason::Unreferenced => "unreferenced",
            Reason::SnapshotInUse => "snapshot-in-use",
            Reason::ApiError => "api-error",
            Reason::Internal => "internal",
        }
    }
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The mode a request's namespace is admitted in (docs/behaviour.md §3), or why nothing is done there (mode
/// off; or a namespace that does not exist). A namespace the namespace watch has listed and does
/// not know is one created a moment ago (`kubectl create namespace x && kubectl apply`: decided
/// from its fresh read, [`View::namespace`], like any other) or none at all: the API server admits
/// nothing into a namespace that does not exist, so a review naming one is forged, and it is
/// answered without reading anything else (docs/behaviour.md §9a), never taking a fair share of
/// its own.
pub fn acting_mode(req: &Request, view: &View) -> Result<Mode, Reason> {
    let info = match view.state.namespace(&req.namespace) {
        None if view.state.namespace_unlisted(&req.namespace) => Some(view.namespace.ok_or(Reason::UnknownNamespace)?),
        known => known,
    };
    match view.policy.namespace_mode(&req.namespace, info).0 {
        Mode::Off => Err(Reason::Mode),
        mode => Ok(mode),
    }
}

/// A write the edge must carry out before answering.
#[derive(Clone, Debug, PartialEq)]
pub enum Effect {
    /// Make sure a valid snapshot of `content` exists (creating it, or taking the next name of
    /// the collision sequence) and that its adoption record lists `adopted`; one created records
    /// `origin`, who wrote the content as the stored source says (docs/behaviour.md §5.2).
    EnsureSnapshot { namespace: String, source: SourceId, content: Content, adopted: Vec<String>, origin: Origin },
    /// The same for a Secret (docs/behaviour.md §4a): an immutable Secret of the same type and
    /// data, named by its MAC under the namespace's key of cluster key `key` in `frame` (the
    /// source's, `secret_model::source_mac`).
    EnsureSecretSnapshot {
        namespace: String,
        source: SourceId,
        content: SecretContent,
        key: KeyId,
        frame: secret_model::Frame,
        adopted: Vec<String>,
        origin: Origin,
    },
    /// The request chose an existing snapshot of `source` by name (6.2 rule 3): make sure a GC
    /// sweep does not delete it while it is being pinned (docs/behaviour.md §8), by clearing GC's last-use
    /// record on it.
    UseSnapshot { namespace: String, source: SourceId, name: String },
    /// A source without a `head` (created before any workload named it, so §6.1 never annotated
    /// it) that a workload is now pinned to its current content: record `hash` as its head, after
    /// the answer and never for a dry run. Otherwise the next apply of the unchanged source (a
    /// GitOps controller's, every interval) would be the one to add it: a write, and a drift
    /// report from tools that diff a dry run against the stored object (docs/behaviour.md §10.11).
    RecordHead { namespace: String, source: SourceId, hash: String },
    /// A source Secret was written (docs/behaviour.md §4a): after the answer, and never for a dry
    /// run, read it fresh (once its resourceVersion moved past `after`, the request's oldObject's
    /// when its content changed; once it exists, for a CREATE) and record the head and key id of
    /// the content stored, when they differ from the recorded ones. The answer never carries a
    /// MAC of the request's content (§9a: a review forged to the port holds content the forger
    /// chose).
    RecordSecretHead { namespace: String, source: SourceId, after: Option<String> },
}

impl Effect {
    /// Whether the edge runs it after the answer (no API call before answering, so no place).
    pub fn after_answer(&self) -> bool {
        matches!(self, Effect::RecordHead { .. } | Effect::RecordSecretHead { .. })
    }
}

/// Where a rewritten reference points once effects have run.
#[derive(Clone, Debug, PartialEq)]
pub enum Target {
    /// The snapshot of (source, hash), whatever name the collision sequence gave it.
    Snapshot { source: SourceId, hash: String },
    /// An existing object of the reference's kind, by name.
    Name(String),
}

/// JSONPatch `replace` of a reference whose final name depends on effects.
#[derive(Clone, Debug, PartialEq)]
pub struct Rewrite {
    pub pointer: String,
    pub target: Target,
    /// The reference's name as sent: no operation when the target resolves to it.
    pub current: String,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Decision {
    pub response: Response,
    pub rewrites: Vec<Rewrite>,
    pub effects: Vec<Effect>,
    /// What rule decided.
    pub reason: Reason,
    /// Never denied (an undo, a CronJob's Job): an effect that fails is left out, not refused.
    pub fail_open: bool,
}

/// The first pass may ask for sources to be read fresh before deciding.
#[derive(Debug, PartialEq)]
pub enum Outcome {
    Done(Decision),
    Fetch(Vec<SourceId>),
}

impl Decision {
    pub fn allow(reason: Reason) -> Decision {
        Decision { response: Response::allow(), reason, ..Default::default() }
    }

    pub fn deny(reason: Reason, code: u16, message: impl Into<String>) -> Decision {
        Decision { response: Response::deny(code, message), reason, ..Default::default() }
    }

    /// The response, with every rewrite resolved to the snapshot names the effects produced
    /// (`names`: (source, hash) → name). Unresolved snapshots take their first-choice name.
    pub fn finish(self, names: &HashMap<(SourceId, String), String>) -> Response {
        let mut response = self.response;
        let mut ops: Vec<Value> = self
            .rewrites
            .into_iter()
            .filter_map(|rw| {
                let name = match rw.target {
                    Target::Name(n) => n,
                    Target::Snapshot { source, hash } => {
                        names.get(&(source.clone(), hash.clone())).cloned().unwrap_or_else(|| snapshot::name(&source.name, &hash, 0))
                    }
                };
                (name != rw.current).then(|| json!({"op": "replace", "path": rw.pointer, "value": name}))
            })
            .collect();
        ops.append(&mut response.patch);
        response.patch = ops;
        // Warnings were written with first-choice names; a collision moved some.
        for ((source, hash), name) in names {
            let first = snapshot::name(&source.name, hash, 0);
            if &first != name {
                for w in &mut response.warnings {
                    *w = w.replace(&first, name);
                }
            }
        }
        response
    }
}

/// JSONPatch operations that make `obj`'s annotations hold `want` (None = absent).
/// Writes nothing for keys that already have the wanted value.
pub fn annotation_ops(obj: &Value, want: &[(&str, Option<String>)]) -> Vec<Value> {
    let current = obj.at("/metadata/annotations").and_then(Value::as_object);
    let mut ops = Vec::new();
    let mut fresh = BTreeMap::new();
    for (key, value) in want {
        let have = current.and_then(|m| m.get(*key)).and_then(Value::as_str);
        match (have, value) {
            (Some(h), Some(v)) if h == v => {}
            (None, None) => {}
            (Some(_), None) => ops.push(json!({"op": "remove", "path": format!("/metadata/annotations/{}", review::escape(key))})),
            (_, Some(v)) if current.is_some() => {
                ops.push(json!({"op": "add", "path": format!("/metadata/annotations/{}", review::escape(key)), "value": v}))
            }
            (_, Some(v)) => {
                fresh.insert(key.to_string(), v.clone());
            }
        }
    }
    if !fresh.is_empty() {
        ops.push(json!({"op": "add", "path": "/metadata/annotations", "value": fresh}));
    }
    ops
}

pub fn annotation<'a>(obj: &'a Value, key: &str) -> Option<&'a str> {
    Meta::annotation(obj, key)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_are_distinct_and_documented() {
        let docs = include_str!("../../docs/operations.md");
        let mut seen = std::collections::HashSet::new();
        for r in Reason::ALL {
            assert!(seen.insert(r.as_str()), "{r:?} repeats {}", r.as_str());
            assert!(docs.contains(&format!("`{}`", r.as_str())), "docs/operations.md does not list reason {}", r.as_str());
        }
    }

    #[test]
    fn annotation_ops_write_only_changes() {
        let obj = json!({"metadata": {"annotations": {"a": "1", "b": "2"}}});
        let ops = annotation_ops(&obj, &[("a", Some("1".into())), ("b", None), ("c/d", Some("3".into()))]);
        assert_eq!(
            ops,
            vec![
                json!({"op": "remove", "path": "/metadata/annotations/b"}),
                json!({"op": "add", "path": "/metadata/annotations/c~1d", "value": "3"}),
            ]
        );
        let bare = json!({"metadata": {}});
        assert_eq!(
            annotation_ops(&bare, &[("a", Some("1".into()))]),
            vec![json!({"op": "add", "path": "/metadata/annotations", "value": {"a": "1"}})]
        );
        assert!(annotation_ops(&bare, &[("a", None)]).is_empty());
    }
}
