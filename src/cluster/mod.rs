//! The API-server side of admission: fresh reads of sources and snapshot writes, behind a small
//! trait so the edge can be exercised without a cluster for fault cases.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, ListParams, PartialObjectMeta, Patch, PatchParams, PostParams, Preconditions,
};
use kube::runtime::events::{self as kube_events, Recorder, Reporter};
use serde_json::Value;

use crate::cache::Watched;
use crate::model::kinds::Registry;
use crate::model::names;
use crate::model::source::{SourceId, SourceKind};
use crate::model::template::Kind;

pub mod clock;
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

impl ApiError {
    pub fn is_conflict(&self) -> bool {
        self.code == Some(409)
    }
    pub fn is_quota(&self) -> bool {
        self.code == Some(403) && self.message.contains("exceeded quota")
    }
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
    /// Merge-patch a source's (or snapshot's) metadata.
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
    /// The namespaces that hold snapshots (one metadata list for the cluster).
    fn namespaces_with_snapshots(&self) -> BoxFuture<'_, Result<Vec<String>>> {
        unsupported("list namespaces")
    }
    /// Records an Event.
    fn publish<'a>(&'a self, event: &'a Event) -> BoxFuture<'a, Result<()>> {
        let _ = event;
        unsupported("publish event")
    }
}

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
}

impl KubeCluster {
    /// A cluster over `client`; `kinds` from [`watch::resolve_kinds`], resolved once by the
    /// caller. Events are reported as `field_manager`, from this pod.
    pub fn new(client: kube::Client, field_manager: &str, kinds: &'static Registry) -> KubeCluster {
        let instance = std::env::var("POD_NAME").or_else(|_| std::env::var("HOSTNAME")).ok().filter(|h| !h.is_empty());
        let reporter = Reporter { controller: field_manager.to_owned(), instance };
        KubeCluster { kinds, recorder: Recorder::new(client.clone(), reporter), field_manager: field_manager.to_owned(), client }
    }

    fn api(&self, ns: &str, what: Watched) -> Api<DynamicObject> {
        Api::namespaced_with(self.client.clone(), ns, &watch::api_resource(what, self.kinds))
    }
}

/// Every page of a list, each item turned into JSON as its page arrives.
async fn list_all<K>(api: Api<K>, mut lp: ListParams, item: impl Fn(K) -> Value) -> Result<Vec<Value>>
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
            crate::metrics::METRICS.api_call("get");
            let obj = sources(&self.client, ns, id.kind).get_opt(&id.name).await?;
            Ok(obj.map(|o| serde_json::to_value(o).unwrap_or_default()))
        })
    }

    fn get_namespace<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<Option<Value>>> {
        Box::pin(async move {
            crate::metrics::METRICS.api_call("get");
            let api: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(self.client.clone());
            let obj = api.get_opt(name).await?;
            Ok(obj.map(|o| serde_json::to_value(o).unwrap_or_default()))
        })
    }

    fn create_source<'a>(&'a self, ns: &'a str, kind: SourceKind, obj: &'a Value, dry_run: bool) -> BoxFuture<'a, Result<Created>> {
        Box::pin(async move {
            crate::metrics::METRICS.api_call("create");
            let dyn_obj: DynamicObject = serde_json::from_value(obj.clone()).map_err(|e| ApiError {
                code: None,
                reason: "Invalid".into(),
                message: e.to_string(),
            })?;
            let pp = PostParams { dry_run, field_manager: Some(self.field_manager.clone()) };
            match sources(&self.client, ns, kind).create(&pp, &dyn_obj).await {
                Ok(_) => Ok(Created::Created),
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(Created::AlreadyExists),
                Err(e) => Err(e.into()),
            }
        })
    }

    fn patch_source<'a>(&'a self, ns: &'a str, id: &'a SourceId, patch: &'a Value) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            crate::metrics::METRICS.api_call("patch");
            let pp = PatchParams { field_manager: Some(self.field_manager.clone()), ..Default::default() };
            sources(&self.client, ns, id.kind).patch(&id.name, &pp, &Patch::Merge(patch)).await?;
            Ok(())
        })
    }

    fn delete_source<'a>(&'a self, ns: &'a str, id: &'a SourceId, uid: &'a str, resource_version: &'a str) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            let dp = DeleteParams {
                preconditions: Some(Preconditions { uid: Some(uid.to_owned()), resource_version: Some(resource_version.to_owned()) }),
                ..Default::default()
            };
            sources(&self.client, ns, id.kind).delete(&id.name, &dp).await?;
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
        Box::pin(list_all(self.api(ns, what), ListParams::default().limit(500), |o| serde_json::to_value(o).unwrap_or(Value::Null)))
    }

    fn list_source_metadata<'a>(&'a self, ns: &'a str, kind: SourceKind) -> BoxFuture<'a, Result<Vec<Value>>> {
        // `Api<PartialObjectMeta<_>>` asks for metadata only.
        let api: Api<PartialObjectMeta<DynamicObject>> =
            Api::namespaced_with(self.client.clone(), ns, &watch::api_resource(Watched::Sources(kind), self.kinds));
        Box::pin(list_all(
            api,
            ListParams::default().limit(500),
            |o: PartialObjectMeta<DynamicObject>| serde_json::json!({"kind": crate::cache::PARTIAL_OBJECT_METADATA, "metadata": serde_json::to_value(o.metadata).unwrap_or(Value::Null)}),
        ))
    }

    fn list_snapshots<'a>(&'a self, ns: &'a str, kind: SourceKind, each: &'a mut (dyn FnMut(&Value) + Send)) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            let api = sources(&self.client, ns, kind);
            // Small pages: each is parsed whole, and snapshots can be 1 MiB each (60 of 900 KiB:
            // 118 MiB peak listed at once, 62 MiB in pages of 10, 44 MiB in pages of 5, debug build).
            let mut lp = ListParams::default().labels(names::HASH_LABEL).limit(10);
            loop {
                let page = api.list(&lp).await?;
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

    fn namespaces_with_snapshots(&self) -> BoxFuture<'_, Result<Vec<String>>> {
        Box::pin(async move {
            let api: Api<DynamicObject> =
                Api::all_with(self.client.clone(), &watch::api_resource(Watched::Sources(SourceKind::ConfigMap), self.kinds));
            let list = api.list_metadata(&ListParams::default().labels(names::HASH_LABEL)).await?;
            let mut v: Vec<String> = list.items.into_iter().filter_map(|o| o.metadata.namespace).collect();
            v.sort();
            v.dedup();
            Ok(v)
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
/// faults and pauses (to interleave two callers exactly). It holds ConfigMaps as its sources.
/// Calls are described as `get ns/name`, `get namespace name`,
/// `create ns/name`, `patch ns/name`, `delete ns/name` (sources), `patch Kind ns/name`
/// (workloads), `list what ns`, `list namespaces`, `event Reason ns/name`.
#[derive(Default, Clone)]
pub struct MemoryCluster {
    /// ConfigMaps by (namespace, name).
    pub objects: Arc<Mutex<HashMap<(String, String), Value>>>,
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
    pub fn insert(&self, obj: Value) {
        let ns = obj["metadata"]["namespace"].as_str().unwrap_or_default().to_owned();
        let name = obj["metadata"]["name"].as_str().unwrap_or_default().to_owned();
        self.objects.lock().expect("lock").insert((ns, name), obj);
    }
    pub fn get(&self, ns: &str, name: &str) -> Option<Value> {
        self.objects.lock().expect("lock").get(&(ns.to_owned(), name.to_owned())).cloned()
    }
    /// A source or snapshot, as [`Cluster::get_source`] reads it (without recording a call).
    pub fn source(&self, ns: &str, id: &SourceId) -> Option<Value> {
        memory_name(id).ok().and_then(|name| self.get(ns, name))
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

/// The name a [`MemoryCluster`] keeps a source under: it holds ConfigMaps only (no source kind
/// it does not hold is acted on: `model::source::ACTED_ON`), and a call about another kind fails.
fn memory_name(id: &SourceId) -> Result<&str> {
    match id.kind {
        SourceKind::ConfigMap => Ok(&id.name),
        SourceKind::Secret => {
            Err(ApiError { code: None, reason: "NotSupported".into(), message: format!("MemoryCluster holds no {}s", id.kind_str()) })
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
            let name = memory_name(&id)?.to_owned();
            let mut objects = self.objects.lock().expect("lock");
            if objects.contains_key(&(ns.to_owned(), name.clone())) {
                return Ok(Created::AlreadyExists);
            }
            if !dry_run {
                objects.insert((ns.to_owned(), name), obj.clone());
            }
            Ok(Created::Created)
        })
    }
    fn patch_source<'a>(&'a self, ns: &'a str, id: &'a SourceId, patch: &'a Value) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            self.check(format!("patch {ns}/{id}")).await?;
            let name = memory_name(id)?;
            let mut objects = self.objects.lock().expect("lock");
            let obj = objects.get_mut(&(ns.to_owned(), name.to_owned())).ok_or_else(|| not_found("configmaps", name))?;
            merge_patch(obj, patch, "configmaps", name)
        })
    }
    fn delete_source<'a>(&'a self, ns: &'a str, id: &'a SourceId, uid: &'a str, resource_version: &'a str) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            self.check(format!("delete {ns}/{id}")).await?;
            let name = memory_name(id)?;
            let mut objects = self.objects.lock().expect("lock");
            let key = (ns.to_owned(), name.to_owned());
            let obj = objects.get(&key).ok_or_else(|| not_found("configmaps", name))?;
            let have = |k: &str| obj["metadata"][k].as_str().unwrap_or_default();
            if have("uid") != uid || have("resourceVersion") != resource_version {
                return Err(conflict("configmaps", name, "Precondition failed"));
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
                    memory_name(&SourceId::new(kind, ""))?;
                    self.objects.lock().expect("lock").iter().filter(|((n, _), _)| n == ns).map(|(_, v)| v.clone()).collect()
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
            let objects = self.objects.lock().expect("lock");
            let mut out: Vec<Value> = objects
                .iter()
                .filter(|((n, _), _)| n == ns)
                .map(|(_, o)| serde_json::json!({"kind": crate::cache::PARTIAL_OBJECT_METADATA, "metadata": o["metadata"]}))
                .collect();
            out.sort_by(|a, b| a["metadata"]["name"].as_str().cmp(&b["metadata"]["name"].as_str()));
            Ok(out)
        })
    }
    fn list_snapshots<'a>(&'a self, ns: &'a str, kind: SourceKind, each: &'a mut (dyn FnMut(&Value) + Send)) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            self.check(format!("list snapshots {ns}")).await?;
            memory_name(&SourceId::new(kind, ""))?;
            let mut out: Vec<Value> = {
                let objects = self.objects.lock().expect("lock");
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
    fn namespaces_with_snapshots(&self) -> BoxFuture<'_, Result<Vec<String>>> {
        Box::pin(async move {
            self.check("list namespaces".into()).await?;
            let objects = self.objects.lock().expect("lock");
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
