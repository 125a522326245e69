//! The API-server side of admission: fresh reads of sources and snapshot writes, behind a small
//! trait so the edge can be exercised without a cluster for fault cases.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::events::{self as kube_events, Recorder, Reporter};
use serde_json::Value;

use crate::cache::Watched;
use crate::model::ids::{SourceId, SourceKind};
use crate::model::kinds::Kind;
use crate::model::kinds::Registry;
use crate::model::names;

pub mod calls;
pub mod clock;
pub mod raw;
pub mod watch;

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
const UNPARSED_STATUS: &str = "Failed to parse error data";

impl ApiError {
    /// What a call about an object of source kind `kind` failed with. For a Secret, only what
    /// the API server said in a `Status` (code, reason, message) is kept: an error body that is
    /// not a `Status` (a proxy's, or an echo of what was sent) and a response or object that does
    /// not parse are described, never quoted, since either could hold the Secret's data
    /// (docs/behaviour.md §4a: no value in any error). A ConfigMap's errors are as `From` makes them.
    pub fn from_source(kind: SourceKind, e: kube::Error) -> ApiError {
        match (kind, e) {
            (SourceKind::ConfigMap, e) => e.into(),
            (SourceKind::Secret, kube::Error::Api(s)) if s.reason == UNPARSED_STATUS => ApiError {
                code: Some(s.code),
                reason: "Unknown".into(),
                message: format!("HTTP {} with an error body that is not a Kubernetes Status (not shown)", s.code),
            },
            (SourceKind::Secret, kube::Error::SerdeError(se)) => ApiError {
                code: None,
                reason: "Invalid".into(),
                message: format!("a response about a Secret does not parse ({}; not shown)", serde_category(&se)),
            },
            (SourceKind::Secret, e) => e.into(),
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
fn serde_category(e: &serde_json::Error) -> String {
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

/// Every API-server read and write of admission and the controller loops (the Lease of leader
/// election aside: `controller::leader` keeps it to itself). Sources and their snapshots are
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
    /// written through it too, data and all (`webhook::keys`).
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

/// The real thing.
#[derive(Clone)]
pub struct KubeCluster {
    pub client: kube::Client,
    pub field_manager: String,
    /// The kinds, resolved once at start ([`watch::resolve_kinds`]).
    pub kinds: &'static Registry,
    pub recorder: Recorder,
    /// Its calls are admission's (`confighistory_api_calls_total`); the controller's port
    /// ([`KubeCluster::for_controller`]) is counted by its client instead.
    admission: bool,
}

impl KubeCluster {
    /// A cluster over `client`; `kinds` from [`watch::resolve_kinds`], resolved once by the
    /// caller. Events are reported as `field_manager`, from this pod.
    pub fn new(client: kube::Client, field_manager: &str, kinds: &'static Registry) -> KubeCluster {
        let instance = std::env::var("POD_NAME").or_else(|_| std::env::var("HOSTNAME")).ok().filter(|h| !h.is_empty());
        let reporter = Reporter { controller: field_manager.to_owned(), instance };
        KubeCluster {
            kinds,
            recorder: Recorder::new(client.clone(), reporter),
            field_manager: field_manager.to_owned(),
            client,
            admission: true,
        }
    }

    /// The controller loops' port: over a client that counts every call as the controller's
    /// ([`calls::counted`]), and leaving admission's count alone.
    pub fn for_controller(&self) -> KubeCluster {
        KubeCluster { admission: false, ..KubeCluster::new(calls::counted(self.client.clone()), &self.field_manager, self.kinds) }
    }

    fn admission_call(&self, verb: &'static str) {
        if self.admission {
            crate::metrics::METRICS.api_call(verb);
        }
    }

    fn api(&self, ns: &str, what: Watched) -> Api<DynamicObject> {
        Api::namespaced_with(self.client.clone(), ns, &watch::api_resource(what, self.kinds))
    }
}

/// Every page of a list, each item turned into JSON as its page arrives.
async fn list_all<K>(api: Api<K>, mut lp: ListParams, item: impl Fn(K) -> Value) -> Result<Vec<Value>, kube::Error>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let mut out = Vec::new();
    loop {
        let page = api.list(&lp).await?;
        let next = page.metadata.continue_.clone().filter(|c| !c.is_empty());
        out.extend(page.items.into_iter().map(&item));
        match next {
            Some(c) => lp = lp.continue_token(&c),
            None => return Ok(out),
        }
    }
}

use crate::model::trim::LAST_APPLIED;

/// One item of [`Cluster::list_source_metadata`] from an object's `metadata`: for a Secret,
/// without [`LAST_APPLIED`], so a metadata list of Secrets holds no value of theirs.
pub fn source_metadata(kind: SourceKind, mut metadata: Value) -> Value {
    if kind == SourceKind::Secret {
        if let Some(a) = metadata.get_mut("annotations").and_then(Value::as_object_mut) {
            a.remove(LAST_APPLIED);
        }
    }
    serde_json::json!({"kind": crate::cache::PARTIAL_OBJECT_METADATA, "metadata": metadata})
}

/// An object to send as a source kind's: for a Secret, an object that is none is described,
/// never quoted ([`ApiError::from_source`]).
fn to_dynamic(kind: SourceKind, obj: &Value) -> Result<DynamicObject> {
    serde_json::from_value(obj.clone()).map_err(|e| ApiError {
        code: None,
        reason: "Invalid".into(),
        message: match kind {
            SourceKind::ConfigMap => e.to_string(),
            SourceKind::Secret => format!("not a Secret object ({}; not shown)", serde_category(&e)),
        },
    })
}

/// The API of a source kind's objects in `ns`.
fn sources(client: &kube::Client, ns: &str, kind: SourceKind) -> Api<DynamicObject> {
    let ar = match kind {
        SourceKind::ConfigMap => ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&()),
        SourceKind::Secret => ApiResource::erase::<k8s_openapi::api::core::v1::Secret>(&()),
    };
    Api::namespaced_with(client.clone(), ns, &ar)
}

impl Cluster for KubeCluster {
    fn kinds(&self) -> &'static Registry {
        self.kinds
    }

    fn get_source<'a>(&'a self, ns: &'a str, id: &'a SourceId) -> BoxFuture<'a, Result<Option<Value>>> {
        Box::pin(async move {
            self.admission_call("get");
            let obj = sources(&self.client, ns, id.kind).get_opt(&id.name).await.map_err(|e| ApiError::from_source(id.kind, e))?;
            Ok(obj.map(|o| serde_json::to_value(o).unwrap_or_default()))
        })
    }

    fn get_namespace<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<Option<Value>>> {
        Box::pin(async move {
            self.admission_call("get");
            let api: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(self.client.clone());
            let obj = api.get_opt(name).await?;
            Ok(obj.map(|o| serde_json::to_value(o).unwrap_or_default()))
        })
    }

    fn create_source<'a>(&'a self, ns: &'a str, kind: SourceKind, obj: &'a Value, dry_run: bool) -> BoxFuture<'a, Result<Created>> {
        Box::pin(async move {
            self.admission_call("create");
            let dyn_obj = to_dynamic(kind, obj)?;
            let pp = PostParams { dry_run, field_manager: Some(self.field_manager.clone()) };
            match sources(&self.client, ns, kind).create(&pp, &dyn_obj).await {
                Ok(_) => Ok(Created::Created),
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(Created::AlreadyExists),
                Err(e) => Err(ApiError::from_source(kind, e)),
            }
        })
    }

    fn patch_source<'a>(&'a self, ns: &'a str, id: &'a SourceId, patch: &'a Value) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            self.admission_call("patch");
            let pp = PatchParams { field_manager: Some(self.field_manager.clone()), ..Default::default() };
            sources(&self.client, ns, id.kind)
                .patch(&id.name, &pp, &Patch::Merge(patch))
                .await
                .map_err(|e| ApiError::from_source(id.kind, e))?;
            Ok(())
        })
    }

    fn delete_source<'a>(&'a self, ns: &'a str, id: &'a SourceId, uid: &'a str, resource_version: &'a str) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            let dp = DeleteParams {
                preconditions: Some(Preconditions { uid: Some(uid.to_owned()), resource_version: Some(resource_version.to_owned()) }),
                ..Default::default()
            };
            sources(&self.client, ns, id.kind).delete(&id.name, &dp).await.map_err(|e| ApiError::from_source(id.kind, e))?;
            Ok(())
        })
    }

    fn patch_workload<'a>(&'a self, kind: Kind, ns: &'a str, name: &'a str, patch: &'a Value) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            let pp = PatchParams { field_manager: Some(self.field_manager.clone()), ..Default::default() };
            self.api(ns, Watched::Workload(kind)).patch(name, &pp, &Patch::Merge(patch)).await?;
            Ok(())
        })
    }

    fn list<'a>(&'a self, ns: &'a str, what: Watched) -> BoxFuture<'a, Result<Vec<Value>>> {
        let api: Api<raw::RawObject> = Api::namespaced_with(self.client.clone(), ns, &watch::api_resource(what, self.kinds));
        let all = list_all(api, ListParams::default().limit(500), raw::RawObject::into_value);
        Box::pin(async move {
            all.await.map_err(|e| match what {
                Watched::Sources(kind) => ApiError::from_source(kind, e),
                _ => e.into(),
            })
        })
    }

    fn list_source_metadata<'a>(&'a self, ns: &'a str, kind: SourceKind) -> BoxFuture<'a, Result<Vec<Value>>> {
        // `RawMetadata` asks for metadata only.
        let api: Api<raw::RawMetadata> =
            Api::namespaced_with(self.client.clone(), ns, &watch::api_resource(Watched::Sources(kind), self.kinds));
        let all = list_all(api, ListParams::default().limit(500), move |o: raw::RawMetadata| {
            source_metadata(kind, o.into_value()["metadata"].take())
        });
        Box::pin(async move { all.await.map_err(|e| ApiError::from_source(kind, e)) })
    }

    fn list_snapshots<'a>(&'a self, ns: &'a str, kind: SourceKind, each: &'a mut (dyn FnMut(&Value) + Send)) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            let api = sources(&self.client, ns, kind);
            // Small pages: each is parsed whole, and snapshots can be 1 MiB each (60 of 900 KiB:
            // 118 MiB peak listed at once, 62 MiB in pages of 10, 44 MiB in pages of 5, debug build).
            let mut lp = ListParams::default().labels(names::HASH_LABEL).limit(10);
            loop {
                let page = api.list(&lp).await.map_err(|e| ApiError::from_source(kind, e))?;
                let next = page.metadata.continue_.clone().filter(|c| !c.is_empty());
                for o in page.items {
                    each(&serde_json::to_value(o).unwrap_or(Value::Null));
                }
                match next {
                    Some(c) => lp = lp.continue_token(&c),
                    None => return Ok(()),
                }
            }
        })
    }

    fn namespaces_with_snapshots(&self, kind: SourceKind) -> BoxFuture<'_, Result<Vec<String>>> {
        Box::pin(async move {
            let api: Api<DynamicObject> = Api::all_with(self.client.clone(), &watch::api_resource(Watched::Sources(kind), self.kinds));
            let list =
                api.list_metadata(&ListParams::default().labels(names::HASH_LABEL)).await.map_err(|e| ApiError::from_source(kind, e))?;
            let mut v: Vec<String> = list.items.into_iter().filter_map(|o| o.metadata.namespace).collect();
            v.sort();
            v.dedup();
            Ok(v)
        })
    }

    fn list_configmaps_page<'a>(&'a self, token: Option<&'a str>, limit: u32, max_bytes: usize) -> BoxFuture<'a, Result<SourcePage>> {
        Box::pin(async move {
            use futures::AsyncReadExt as _;
            let kind = SourceKind::ConfigMap;
            self.admission_call("list");
            let (path, api_version, kind_name) = ("/api/v1/configmaps", "v1", "ConfigMap");
            let mut lp = ListParams::default().labels(&format!("!{}", names::HASH_LABEL)).limit(limit);
            if let Some(t) = token {
                lp = lp.continue_token(t);
            }
            let request = kube::core::Request::new(path).list(&lp).map_err(|e| ApiError {
                code: None,
                reason: "BadRequest".into(),
                message: format!("build the list request: {e}"),
            })?;
            let body = self.client.request_stream(request).await.map_err(|e| ApiError::from_source(kind, e))?;
            // Read one byte past the bound: a longer body is cut there and never parsed.
            let mut bytes = Vec::new();
            body.take(max_bytes as u64 + 1).read_to_end(&mut bytes).await.map_err(|e| ApiError {
                code: None,
                reason: "ServiceUnavailable".into(),
                message: format!("read the list of {kind_name}s: {e}"),
            })?;
            if bytes.len() > max_bytes {
                return Err(ApiError {
                    code: None,
                    reason: TOO_LARGE.into(),
                    message: format!("a page of {limit} {kind_name}s is over {max_bytes} bytes"),
                });
            }
            #[derive(serde::Deserialize)]
            struct Meta {
                #[serde(rename = "continue", default)]
                next: Option<String>,
            }
            #[derive(serde::Deserialize)]
            struct Page {
                #[serde(default)]
                metadata: Option<Meta>,
                #[serde(default)]
                items: Vec<raw::RawObject>,
            }
            let page: Page = serde_json::from_slice(&bytes).map_err(|e| ApiError {
                code: None,
                reason: "Invalid".into(),
                message: format!("the list of {kind_name}s does not parse ({})", serde_category(&e)),
            })?;
            drop(bytes);
            let items = page
                .items
                .into_iter()
                .map(|o| {
                    let mut v = o.into_value();
                    v["kind"] = kind_name.into();
                    v["apiVersion"] = api_version.into();
                    v
                })
                .collect();
            Ok(SourcePage { items, next: page.metadata.and_then(|m| m.next).filter(|c| !c.is_empty()) })
        })
    }

    fn publish<'a>(&'a self, event: &'a Event) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            let r = &event.regarding;
            let reference = k8s_openapi::api::core::v1::ObjectReference {
                api_version: Some(r.api_version.clone()),
                kind: Some(r.kind.clone()),
                namespace: Some(r.namespace.clone()),
                name: Some(r.name.clone()),
                uid: Some(r.uid.clone()).filter(|u| !u.is_empty()),
                ..Default::default()
            };
            let ev = kube_events::Event {
                type_: if event.warning { kube_events::EventType::Warning } else { kube_events::EventType::Normal },
                reason: event.reason.to_owned(),
                note: Some(event.note.clone()),
                action: event.action.to_owned(),
                secondary: None,
            };
            self.recorder.publish(&ev, &reference).await?;
            Ok(())
        })
    }
}

/// An in-memory stand-in for unit tests of the edge and of the controller loops, with injectable
/// faults and pauses (to interleave two callers exactly). It holds ConfigMaps and Secrets as its
/// sources, each kind apart, and gives a created object a resourceVersion as the API server does.
/// Calls are described as `get ns/name`, `get namespace name`,
/// `create ns/name`, `patch ns/name`, `delete ns/name` (sources, named by their annotation
/// entry: `ns/secret/name` for a Secret), `patch Kind ns/name` (workloads), `list what ns`,
/// `list namespaces`, `event Reason ns/name`. Its errors name objects, never their content.
#[derive(Default, Clone)]
pub struct MemoryCluster {
    /// ConfigMaps by (namespace, name).
    pub objects: Arc<Mutex<HashMap<(String, String), Value>>>,
    /// Secrets by (namespace, name).
    pub secrets: Arc<Mutex<HashMap<(String, String), Value>>>,
    /// Workloads and revisions by (kind, namespace, name).
    pub workloads: Arc<Mutex<HashMap<WorkloadKey, Value>>>,
    /// Namespaces by name.
    pub namespaces: Arc<Mutex<HashMap<String, Value>>>,
    /// Events published, in order.
    pub events: Arc<Mutex<Vec<Event>>>,
    /// When set, calls whose description starts with the prefix ("" = every call) fail with the error.
    pub fail: Arc<Mutex<Option<(&'static str, ApiError)>>>,
    pub calls: Arc<Mutex<Vec<String>>>,
    pauses: Arc<Mutex<Vec<Pause>>>,
    /// The kinds it lists and writes (the built-ins when `None`).
    pub kinds: Option<&'static Registry>,
}

/// A call held until the test lets it go ([`MemoryCluster::pause`]).
struct Pause {
    prefix: String,
    after: bool,
    reached: tokio::sync::oneshot::Sender<()>,
    resume: tokio::sync::oneshot::Receiver<()>,
}

/// (kind, namespace, name).
pub type WorkloadKey = (Kind, String, String);

fn not_found(resource: &str, name: &str) -> ApiError {
    ApiError { code: Some(404), reason: "NotFound".into(), message: format!("{resource} \"{name}\" not found") }
}

fn conflict(resource: &str, name: &str, why: &str) -> ApiError {
    ApiError {
        code: Some(409),
        reason: "Conflict".into(),
        message: format!("Operation cannot be fulfilled on {resource} \"{name}\": {why}"),
    }
}

/// Merge-patches `obj` as the API server would: a uid or resourceVersion in the patch is a
/// precondition; the resourceVersion goes up.
fn merge_patch(obj: &mut Value, patch: &Value, resource: &str, name: &str) -> Result<()> {
    let have = |k: &str| obj["metadata"][k].as_str().unwrap_or_default().to_owned();
    if patch.pointer("/metadata/uid").and_then(Value::as_str).is_some_and(|u| u != have("uid")) {
        return Err(conflict(resource, name, "Precondition failed: UID in precondition does not match"));
    }
    let rv = have("resourceVersion");
    if patch.pointer("/metadata/resourceVersion").and_then(Value::as_str).is_some_and(|w| w != rv) {
        return Err(conflict(resource, name, "the object has been modified"));
    }
    json_patch::merge(obj, patch);
    obj["metadata"]["resourceVersion"] = Value::String((rv.parse::<u64>().unwrap_or(0) + 1).to_string());
    Ok(())
}

impl MemoryCluster {
    /// Adds or replaces a workload or revision (`kind` says which).
    pub fn insert_workload(&self, kind: Kind, obj: Value) {
        let ns = obj["metadata"]["namespace"].as_str().unwrap_or_default().to_owned();
        let name = obj["metadata"]["name"].as_str().unwrap_or_default().to_owned();
        self.workloads.lock().expect("lock").insert((kind, ns, name), obj);
    }
    pub fn workload(&self, kind: Kind, ns: &str, name: &str) -> Option<Value> {
        self.workloads.lock().expect("lock").get(&(kind, ns.to_owned(), name.to_owned())).cloned()
    }
    /// Adds or replaces a Namespace.
    pub fn insert_namespace(&self, obj: Value) {
        let name = obj["metadata"]["name"].as_str().unwrap_or_default().to_owned();
        self.namespaces.lock().expect("lock").insert(name, obj);
    }
    pub fn events(&self) -> Vec<Event> {
        self.events.lock().expect("lock").clone()
    }
    /// Adds or replaces a source or snapshot: a Secret when its `kind` says so, else a ConfigMap.
    pub fn insert(&self, obj: Value) {
        let ns = obj["metadata"]["namespace"].as_str().unwrap_or_default().to_owned();
        let name = obj["metadata"]["name"].as_str().unwrap_or_default().to_owned();
        let kind = if obj["kind"] == crate::model::ids::SECRET { SourceKind::Secret } else { SourceKind::ConfigMap };
        self.store(kind).lock().expect("lock").insert((ns, name), obj);
    }
    /// A ConfigMap.
    pub fn get(&self, ns: &str, name: &str) -> Option<Value> {
        self.source(ns, &SourceId::configmap(name))
    }
    /// A source or snapshot, as [`Cluster::get_source`] reads it (without recording a call).
    pub fn source(&self, ns: &str, id: &SourceId) -> Option<Value> {
        self.store(id.kind).lock().expect("lock").get(&(ns.to_owned(), id.name.clone())).cloned()
    }
    /// The objects of a source kind, by (namespace, name).
    fn store(&self, kind: SourceKind) -> &Arc<Mutex<HashMap<(String, String), Value>>> {
        match kind {
            SourceKind::ConfigMap => &self.objects,
            SourceKind::Secret => &self.secrets,
        }
    }
    /// Holds the next call whose description starts with `prefix` before it runs (or, with
    /// `after`, once it has run: reads only): `reached` fires when it is held, and it goes on
    /// when `resume` is sent (or dropped). Lets a test interleave two callers exactly.
    pub fn pause(&self, prefix: &str, after: bool) -> (tokio::sync::oneshot::Receiver<()>, tokio::sync::oneshot::Sender<()>) {
        let (reached, reached_rx) = tokio::sync::oneshot::channel();
        let (resume_tx, resume) = tokio::sync::oneshot::channel();
        self.pauses.lock().expect("lock").push(Pause { prefix: prefix.to_owned(), after, reached, resume });
        (reached_rx, resume_tx)
    }
    async fn hold(&self, call: &str, after: bool) {
        let pause = {
            let mut pauses = self.pauses.lock().expect("lock");
            let at = pauses.iter().position(|p| p.after == after && call.starts_with(&p.prefix));
            at.map(|i| pauses.remove(i))
        };
        if let Some(p) = pause {
            let _ = p.reached.send(());
            let _ = p.resume.await;
        }
    }
    async fn check(&self, call: String) -> Result<()> {
        self.calls.lock().expect("lock").push(call.clone());
        self.hold(&call, false).await;
        match self.fail.lock().expect("lock").clone() {
            Some((prefix, e)) if call.starts_with(prefix) => Err(e),
            _ => Ok(()),
        }
    }
}

impl Cluster for MemoryCluster {
    fn kinds(&self) -> &'static Registry {
        self.kinds.unwrap_or_else(Registry::builtin)
    }
    fn get_source<'a>(&'a self, ns: &'a str, id: &'a SourceId) -> BoxFuture<'a, Result<Option<Value>>> {
        Box::pin(async move {
            let call = format!("get {ns}/{id}");
            self.check(call.clone()).await?;
            let obj = self.source(ns, id);
            self.hold(&call, true).await;
            Ok(obj)
        })
    }
    fn get_namespace<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<Option<Value>>> {
        Box::pin(async move {
            let call = format!("get namespace {name}");
            self.check(call.clone()).await?;
            let obj = self.namespaces.lock().expect("lock").get(name).cloned();
            self.hold(&call, true).await;
            Ok(obj)
        })
    }
    fn create_source<'a>(&'a self, ns: &'a str, kind: SourceKind, obj: &'a Value, dry_run: bool) -> BoxFuture<'a, Result<Created>> {
        Box::pin(async move {
            let id = SourceId::new(kind, obj["metadata"]["name"].as_str().unwrap_or_default());
            self.check(format!("create {ns}/{id}{}", if dry_run { " (dry run)" } else { "" })).await?;
            let mut objects = self.store(kind).lock().expect("lock");
            let key = (ns.to_owned(), id.name);
            if objects.contains_key(&key) {
                return Ok(Created::AlreadyExists);
            }
            if !dry_run {
                let mut obj = obj.clone();
                if obj["metadata"]["resourceVersion"].as_str().is_none_or(str::is_empty) {
                    obj["metadata"]["resourceVersion"] = Value::String("1".into());
                }
                objects.insert(key, obj);
            }
            Ok(Created::Created)
        })
    }
    fn patch_source<'a>(&'a self, ns: &'a str, id: &'a SourceId, patch: &'a Value) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            self.check(format!("patch {ns}/{id}")).await?;
            let (resource, name) = (id.kind.resource(), id.name.as_str());
            let mut objects = self.store(id.kind).lock().expect("lock");
            let obj = objects.get_mut(&(ns.to_owned(), name.to_owned())).ok_or_else(|| not_found(resource, name))?;
            merge_patch(obj, patch, resource, name)
        })
    }
    fn delete_source<'a>(&'a self, ns: &'a str, id: &'a SourceId, uid: &'a str, resource_version: &'a str) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            self.check(format!("delete {ns}/{id}")).await?;
            let (resource, name) = (id.kind.resource(), id.name.as_str());
            let mut objects = self.store(id.kind).lock().expect("lock");
            let key = (ns.to_owned(), name.to_owned());
            let obj = objects.get(&key).ok_or_else(|| not_found(resource, name))?;
            let have = |k: &str| obj["metadata"][k].as_str().unwrap_or_default();
            if have("uid") != uid || have("resourceVersion") != resource_version {
                return Err(conflict(resource, name, "Precondition failed"));
            }
            objects.remove(&key);
            Ok(())
        })
    }
    fn patch_workload<'a>(&'a self, kind: Kind, ns: &'a str, name: &'a str, patch: &'a Value) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            self.check(format!("patch {} {ns}/{name}", kind.as_str())).await?;
            let mut workloads = self.workloads.lock().expect("lock");
            let obj = workloads.get_mut(&(kind, ns.to_owned(), name.to_owned())).ok_or_else(|| not_found(kind.as_str(), name))?;
            merge_patch(obj, patch, kind.as_str(), name)
        })
    }
    fn list<'a>(&'a self, ns: &'a str, what: Watched) -> BoxFuture<'a, Result<Vec<Value>>> {
        Box::pin(async move {
            self.check(format!("list {} {ns}", what.name())).await?;
            let mut out: Vec<Value> = match what {
                Watched::Sources(kind) => {
                    self.store(kind).lock().expect("lock").iter().filter(|((n, _), _)| n == ns).map(|(_, v)| v.clone()).collect()
                }
                Watched::Workload(kind) | Watched::Revision(kind) => self
                    .workloads
                    .lock()
                    .expect("lock")
                    .iter()
                    .filter(|((k, n, _), _)| *k == kind && n == ns)
                    .map(|(_, v)| v.clone())
                    .collect(),
                Watched::Namespaces => Vec::new(),
            };
            out.sort_by(|a, b| a["metadata"]["name"].as_str().cmp(&b["metadata"]["name"].as_str()));
            Ok(out)
        })
    }
    fn list_source_metadata<'a>(&'a self, ns: &'a str, kind: SourceKind) -> BoxFuture<'a, Result<Vec<Value>>> {
        Box::pin(async move {
            self.check(format!("list {} metadata {ns}", kind.as_str())).await?;
            let objects = self.store(kind).lock().expect("lock");
            let mut out: Vec<Value> =
                objects.iter().filter(|((n, _), _)| n == ns).map(|(_, o)| source_metadata(kind, o["metadata"].clone())).collect();
            out.sort_by(|a, b| a["metadata"]["name"].as_str().cmp(&b["metadata"]["name"].as_str()));
            Ok(out)
        })
    }
    fn list_snapshots<'a>(&'a self, ns: &'a str, kind: SourceKind, each: &'a mut (dyn FnMut(&Value) + Send)) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            let what = match kind {
                SourceKind::ConfigMap => String::new(),
                SourceKind::Secret => format!("{} ", kind.as_str()),
            };
            self.check(format!("list {what}snapshots {ns}")).await?;
            let mut out: Vec<Value> = {
                let objects = self.store(kind).lock().expect("lock");
                objects
                    .iter()
                    .filter(|((n, _), o)| n == ns && o["metadata"]["labels"].get(names::HASH_LABEL).is_some())
                    .map(|(_, o)| o.clone())
                    .collect()
            };
            out.sort_by(|a, b| a["metadata"]["name"].as_str().cmp(&b["metadata"]["name"].as_str()));
            out.iter().for_each(each);
            Ok(())
        })
    }
    fn list_configmaps_page<'a>(&'a self, token: Option<&'a str>, limit: u32, max_bytes: usize) -> BoxFuture<'a, Result<SourcePage>> {
        Box::pin(async move {
            let kind = SourceKind::ConfigMap;
            self.check(format!("list {} page", kind.as_str())).await?;
            let mut all: Vec<((String, String), Value)> = {
                let objects = self.store(kind).lock().expect("lock");
                objects
                    .iter()
                    .filter(|(_, o)| o["metadata"]["labels"].get(names::HASH_LABEL).is_none())
                    .map(|(k, o)| (k.clone(), o.clone()))
                    .collect()
            };
            all.sort_by(|a, b| a.0.cmp(&b.0));
            // The token is the index of the page's first object, as opaque to callers as the API
            // server's.
            let from: usize = token.map_or(Ok(0), str::parse).map_err(|_| ApiError {
                code: Some(400),
                reason: "BadRequest".into(),
                message: "a continue token this cluster never gave".into(),
            })?;
            let to = (from + limit.max(1) as usize).min(all.len());
            let items: Vec<Value> = all[from.min(to)..to].iter().map(|(_, o)| o.clone()).collect();
            let bytes = serde_json::to_vec(&items).map(|b| b.len()).unwrap_or(usize::MAX);
            if bytes > max_bytes {
                return Err(ApiError {
                    code: None,
                    reason: TOO_LARGE.into(),
                    message: format!("a page of {limit} is over {max_bytes} bytes"),
                });
            }
            Ok(SourcePage { items, next: (to < all.len()).then(|| to.to_string()) })
        })
    }
    fn namespaces_with_snapshots(&self, kind: SourceKind) -> BoxFuture<'_, Result<Vec<String>>> {
        Box::pin(async move {
            self.check("list namespaces".into()).await?;
            let objects = self.store(kind).lock().expect("lock");
            let mut v: Vec<String> = objects
                .iter()
                .filter(|(_, o)| o["metadata"]["labels"].get(names::HASH_LABEL).is_some())
                .map(|((ns, _), _)| ns.clone())
                .collect();
            v.sort();
            v.dedup();
            Ok(v)
        })
    }
    fn publish<'a>(&'a self, event: &'a Event) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            self.check(format!("event {} {}/{}", event.reason, event.regarding.namespace, event.regarding.name)).await?;
            self.events.lock().expect("lock").push(event.clone());
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CANARY: &str = "canary-s3cr3t-value";

    /// Whether `text` shows the canary, or its base64.
    fn shows_canary(text: &str) -> bool {
        use base64::Engine as _;
        let b64 = base64::engine::general_purpose::STANDARD.encode(CANARY);
        text.contains(CANARY) || text.contains(b64.trim_end_matches('='))
    }

    /// An error body that is not a Status (a proxy's, or one echoing the Secret sent), and a
    /// response or an object that does not parse: for a Secret each is described, not quoted;
    /// a ConfigMap's are as before (which shows the test would see a quote).
    #[test]
    fn a_secret_calls_errors_quote_nothing_but_the_api_servers_status() {
        let body = format!(r#"{{"kind":"Secret","data":{{"password":"{CANARY}"}}}}"#);
        let unparsed = || kube::Error::Api(kube::core::Status::failure(&body, UNPARSED_STATUS).with_code(502).boxed());
        let serde = || kube::Error::SerdeError(serde_json::from_str::<u32>(&format!("\"{CANARY}\"")).unwrap_err());
        let not_object = serde_json::json!({"kind": "Secret", "metadata": CANARY});
        for (what, e) in [
            ("unparsed body", ApiError::from_source(SourceKind::Secret, unparsed())),
            ("response that does not parse", ApiError::from_source(SourceKind::Secret, serde())),
            ("object that does not parse", to_dynamic(SourceKind::Secret, &not_object).unwrap_err()),
        ] {
            let shown = format!("{e} {e:?}");
            assert!(!shows_canary(&shown), "{what}: the error shows the canary");
            assert!(shown.contains("not shown"), "{what}: {shown}");
        }
        let e = ApiError::from_source(SourceKind::Secret, unparsed());
        assert_eq!((e.code, e.reason.as_str()), (Some(502), "Unknown"));
        // ConfigMaps' errors are unchanged, and would show it.
        assert!(shows_canary(&ApiError::from_source(SourceKind::ConfigMap, unparsed()).message));
        assert!(shows_canary(&ApiError::from_source(SourceKind::ConfigMap, serde()).message));
        assert!(shows_canary(&to_dynamic(SourceKind::ConfigMap, &not_object).unwrap_err().message));
        // The API server's own Status is kept whole, for either kind.
        let status = kube::core::Status::failure("secrets \"db\" already exists", "AlreadyExists").with_code(409);
        for kind in SourceKind::ALL {
            let e = ApiError::from_source(kind, kube::Error::Api(status.clone().boxed()));
            assert_eq!((e.code, e.reason.as_str(), e.message.as_str()), (Some(409), "AlreadyExists", "secrets \"db\" already exists"));
        }
    }

    /// kubectl's last-applied annotation holds a Secret's data: a metadata list of Secrets drops
    /// it, and keeps it on ConfigMaps (as before).
    #[test]
    fn a_secrets_metadata_comes_without_the_last_applied_annotation() {
        let metadata =
            serde_json::json!({"name": "db", "annotations": {LAST_APPLIED: format!("{{\"data\":{{\"p\":\"{CANARY}\"}}}}"), "a": "b"}});
        let item = source_metadata(SourceKind::Secret, metadata.clone());
        assert_eq!(item["metadata"]["annotations"], serde_json::json!({"a": "b"}));
        assert_eq!(item["kind"], crate::cache::PARTIAL_OBJECT_METADATA);
        assert!(!shows_canary(&item.to_string()));
        assert_eq!(source_metadata(SourceKind::ConfigMap, metadata.clone())["metadata"], metadata);
    }
}
