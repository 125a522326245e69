//! [`MemoryCluster`]: the [`Cluster`] port in memory, for tests.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;
use serde_json::Value;

use super::port::{source_metadata, ApiError, Cluster, Created, Event, Result, SourcePage, TOO_LARGE};
use crate::cache::Watched;
use crate::model::ids::{SourceId, SourceKind};
use crate::model::kinds::Kind;
use crate::model::kinds::Registry;
use crate::model::names;

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
        let kind = obj["kind"].as_str().and_then(|k| SourceKind::known("", k)).unwrap_or_default();
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
            // The first kind's calls keep the descriptions they had before there were others.
            let what = kind.entry_prefix().map(|_| format!("{} ", kind.as_str())).unwrap_or_default();
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
