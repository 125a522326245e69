//! The Kubernetes port: the [`Cluster`] trait every API-server read and write of admission and
//! the controller loops goes through, its error and the values it passes. Its implementations:
//! [`super::KubeCluster`] (the real thing) and [`super::MemoryCluster`] (tests).

use futures::future::BoxFuture;
use serde_json::Value;

use crate::cache::Watched;
use crate::model::ids::{SourceId, SourceKind};
use crate::model::kinds::Kind;
use crate::model::kinds::Registry;
use crate::model::trim::LAST_APPLIED;

/// An API-server failure, as much as the caller needs to explain it.
#[derive(Clone, Debug, thiserror::Error)]
#[error("{message}")]
pub struct ApiError {
    pub code: Option<u16>,
    pub reason: String,
    pub message: String,
}

impl From<kube::Error> for ApiError {
    fn from(e: kube::Error) -> ApiError {
        match e {
            kube::Error::Api(s) => ApiError { code: Some(s.code), reason: s.reason.clone(), message: s.message.clone() },
            other => ApiError { code: None, reason: "Unavailable".into(), message: other.to_string() },
        }
    }
}

/// Why kube gave up on a body of an error response that is not a `Status`.
pub(super) const UNPARSED_STATUS: &str = "Failed to parse error data";

impl ApiError {
    /// What a call about an object of source kind `kind` failed with. For a Secret, only what
    /// the API server said in a `Status` (code, reason, message) is kept: an error body that is
    /// not a `Status` (a proxy's, or an echo of what was sent) and a response or object that does
    /// not parse are described, never quoted, since either could hold the Secret's data
    /// (docs/behaviour.md §4a: no value in any error). A ConfigMap's errors are as `From` makes them.
    pub fn from_source(kind: SourceKind, e: kube::Error) -> ApiError {
        if !kind.def().confidential {
            return e.into();
        }
        match e {
            kube::Error::Api(s) if s.reason == UNPARSED_STATUS => ApiError {
                code: Some(s.code),
                reason: "Unknown".into(),
                message: format!("HTTP {} with an error body that is not a Kubernetes Status (not shown)", s.code),
            },
            kube::Error::SerdeError(se) => ApiError {
                code: None,
                reason: "Invalid".into(),
                message: format!("a response about a {} does not parse ({}; not shown)", kind.as_str(), serde_category(&se)),
            },
            e => e.into(),
        }
    }

    pub fn is_conflict(&self) -> bool {
        self.code == Some(409)
    }
    pub fn is_quota(&self) -> bool {
        self.code == Some(403) && self.message.contains("exceeded quota")
    }
}

/// The kind of a serde_json error and where it was, without its message (which can quote the
/// value it choked on).
pub(super) fn serde_category(e: &serde_json::Error) -> String {
    format!("{:?} error at line {}, column {}", e.classify(), e.line(), e.column())
}

pub enum Created {
    Created,
    AlreadyExists,
}

pub type Result<T, E = ApiError> = std::result::Result<T, E>;

/// What an Event is about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectRef {
    pub api_version: String,
    pub kind: String,
    pub namespace: String,
    pub name: String,
    pub uid: String,
}

/// An Event confighistory records (events.k8s.io/v1 through kube's `Recorder`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    pub regarding: ObjectRef,
    pub warning: bool,
    /// Why, in PascalCase: `ConfigPropagated`, `ConfigRepaired`, ...
    pub reason: &'static str,
    /// What confighistory did, in PascalCase: `Propagate`, `Repair`, ...
    pub action: &'static str,
    pub note: String,
}

/// Every API-server read and write of admission and the controller loops. The leader's Lease,
/// the webhook's certificate and the published effective configuration stay direct kube calls
/// of their owners (docs/architecture.md, "The port"). Sources and their snapshots are
/// objects of a source kind, named by [`SourceId`]. The methods past the first source ones
/// default to an error, so a test double for admission implements only what admission calls.
pub trait Cluster: Send + Sync + 'static {
    /// The kinds this cluster's objects are listed and written as (the built-ins by default).
    fn kinds(&self) -> &'static Registry {
        Registry::builtin()
    }
    /// GET a source (or snapshot); `None` on 404.
    fn get_source<'a>(&'a self, ns: &'a str, id: &'a SourceId) -> BoxFuture<'a, Result<Option<Value>>>;
    /// GET a Namespace; `None` on 404. Admission confirms a namespace the namespace watch does
    /// not know yet with it.
    fn get_namespace<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<Option<Value>>> {
        let _ = name;
        unsupported("get namespace")
    }
    /// POST an object of a source kind (a snapshot; dryRun=All when `dry_run`).
    fn create_source<'a>(&'a self, ns: &'a str, kind: SourceKind, obj: &'a Value, dry_run: bool) -> BoxFuture<'a, Result<Created>>;
    /// Merge-patch a source's (or snapshot's) metadata; a `metadata.resourceVersion` in the
    /// patch is a precondition (409 when the object changed). The cluster keys' Secret is
    /// written through it too, data and all (`store::keys`).
    fn patch_source<'a>(&'a self, ns: &'a str, id: &'a SourceId, patch: &'a Value) -> BoxFuture<'a, Result<()>>;
    /// DELETE a source (a snapshot) with uid and resourceVersion preconditions.
    fn delete_source<'a>(&'a self, ns: &'a str, id: &'a SourceId, uid: &'a str, resource_version: &'a str) -> BoxFuture<'a, Result<()>> {
        let _ = (ns, id, uid, resource_version);
        unsupported("delete")
    }
    /// Merge-patch a workload's metadata (the propagation trigger).
    fn patch_workload<'a>(&'a self, kind: Kind, ns: &'a str, name: &'a str, patch: &'a Value) -> BoxFuture<'a, Result<()>> {
        let _ = (kind, ns, name, patch);
        unsupported("patch workload")
    }
    /// Every object of `what` in `ns`, fresh from the API server (paged).
    fn list<'a>(&'a self, ns: &'a str, what: Watched) -> BoxFuture<'a, Result<Vec<Value>>> {
        let _ = (ns, what);
        unsupported("list")
    }
    /// Every object of source kind `kind` in `ns` as metadata only (`PartialObjectMetadata`: no
    /// data), paged: the sources of a namespace, whatever the size of its other objects (docs/behaviour.md §10).
    /// A Secret's comes without kubectl's last-applied annotation, which holds its data
    /// ([`source_metadata`]).
    fn list_source_metadata<'a>(&'a self, ns: &'a str, kind: SourceKind) -> BoxFuture<'a, Result<Vec<Value>>> {
        let _ = (ns, kind);
        unsupported("list source metadata")
    }
    /// The objects of source kind `kind` in `ns` labelled as snapshots, whole (their content is
    /// checked), handed to `each` one at a time as their page arrives: memory is one page, not
    /// every snapshot of the namespace.
    fn list_snapshots<'a>(&'a self, ns: &'a str, kind: SourceKind, each: &'a mut (dyn FnMut(&Value) + Send)) -> BoxFuture<'a, Result<()>> {
        let _ = (ns, kind, each);
        unsupported("list snapshots")
    }
    /// The namespaces that hold snapshots of `kind` (one metadata list for the cluster).
    fn namespaces_with_snapshots(&self, kind: SourceKind) -> BoxFuture<'_, Result<Vec<String>>> {
        let _ = kind;
        unsupported("list namespaces")
    }
    /// One page of the cluster's ConfigMaps that are not snapshots (label selector
    /// `!confighistory.io/hash`), whole: what the re-hash of a first pass reads instead of one GET
    /// per source (docs/behaviour.md §7.8). ConfigMaps only: Secrets are never listed whole, so no
    /// value of a Secret that is no source is ever read. At most `limit` objects, from `token` (the
    /// previous page's [`SourcePage::next`]). A page whose body is over `max_bytes` is neither kept
    /// nor parsed: `Err` with reason [`TOO_LARGE`], to ask again with a smaller limit, so a page of
    /// large ConfigMaps costs at most `max_bytes` and its parse.
    fn list_configmaps_page<'a>(&'a self, token: Option<&'a str>, limit: u32, max_bytes: usize) -> BoxFuture<'a, Result<SourcePage>> {
        let _ = (token, limit, max_bytes);
        unsupported("list configmaps")
    }
    /// Records an Event.
    fn publish<'a>(&'a self, event: &'a Event) -> BoxFuture<'a, Result<()>> {
        let _ = event;
        unsupported("publish event")
    }
}

/// A page of [`Cluster::list_configmaps_page`].
#[derive(Default)]
pub struct SourcePage {
    /// The objects, each with its `kind` and `apiVersion` as a GET returns them.
    pub items: Vec<Value>,
    /// The continue token of the next page; `None` on the last.
    pub next: Option<String>,
}

/// The reason of [`Cluster::list_configmaps_page`]'s error for a page over its byte bound.
pub const TOO_LARGE: &str = "PageTooLarge";

fn unsupported<'a, T: Send + 'a>(what: &str) -> BoxFuture<'a, Result<T>> {
    let e = ApiError { code: None, reason: "NotImplemented".into(), message: format!("this cluster does not {what}") };
    Box::pin(async move { Err(e) })
}

/// The API resource a source kind's objects are served as (its entry in
/// [`crate::model::sourcekinds`]).
pub fn source_resource(kind: SourceKind) -> kube::api::ApiResource {
    let def = kind.def();
    kube::api::ApiResource {
        group: def.group.into(),
        version: def.version.into(),
        api_version: def.api_version(),
        kind: def.kind.into(),
        plural: def.resource.into(),
    }
}

/// One item of [`Cluster::list_source_metadata`] from an object's `metadata`: for a Secret,
/// without [`LAST_APPLIED`], so a metadata list of Secrets holds no value of theirs.
pub fn source_metadata(kind: SourceKind, mut metadata: Value) -> Value {
    if kind.def().confidential {
        if let Some(a) = metadata.get_mut("annotations").and_then(Value::as_object_mut) {
            a.remove(LAST_APPLIED);
        }
    }
    serde_json::json!({"kind": crate::cache::PARTIAL_OBJECT_METADATA, "metadata": metadata})
}
