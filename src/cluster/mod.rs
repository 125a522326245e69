//! The API-server side of admission: fresh reads of sources and snapshot writes, behind a small
//! trait so the edge can be exercised without a cluster for fault cases.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::Value;

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

/// What admission needs from the API server.
pub trait Cluster: Send + Sync + 'static {
    /// GET a ConfigMap; `None` on 404.
    fn get_configmap<'a>(&'a self, ns: &'a str, name: &'a str) -> BoxFuture<'a, Result<Option<Value>>>;
    /// POST a ConfigMap (dryRun=All when `dry_run`).
    fn create_configmap<'a>(&'a self, ns: &'a str, obj: &'a Value, dry_run: bool) -> BoxFuture<'a, Result<Created>>;
    /// Merge-patch a ConfigMap's metadata.
    fn patch_configmap<'a>(&'a self, ns: &'a str, name: &'a str, patch: &'a Value) -> BoxFuture<'a, Result<()>>;
}

/// The real thing.
#[derive(Clone)]
pub struct KubeCluster {
    pub client: kube::Client,
    pub field_manager: String,
}

fn configmaps(client: &kube::Client, ns: &str) -> Api<DynamicObject> {
    let ar = ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&());
    Api::namespaced_with(client.clone(), ns, &ar)
}

impl Cluster for KubeCluster {
    fn get_configmap<'a>(&'a self, ns: &'a str, name: &'a str) -> BoxFuture<'a, Result<Option<Value>>> {
        Box::pin(async move {
            crate::metrics::METRICS.api_call("get");
            let obj = configmaps(&self.client, ns).get_opt(name).await?;
            Ok(obj.map(|o| serde_json::to_value(o).unwrap_or_default()))
        })
    }

    fn create_configmap<'a>(&'a self, ns: &'a str, obj: &'a Value, dry_run: bool) -> BoxFuture<'a, Result<Created>> {
        Box::pin(async move {
            crate::metrics::METRICS.api_call("create");
            let dyn_obj: DynamicObject = serde_json::from_value(obj.clone()).map_err(|e| ApiError {
                code: None,
                reason: "Invalid".into(),
                message: e.to_string(),
            })?;
            let pp = PostParams { dry_run, field_manager: Some(self.field_manager.clone()) };
            match configmaps(&self.client, ns).create(&pp, &dyn_obj).await {
                Ok(_) => Ok(Created::Created),
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(Created::AlreadyExists),
                Err(e) => Err(e.into()),
            }
        })
    }

    fn patch_configmap<'a>(&'a self, ns: &'a str, name: &'a str, patch: &'a Value) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            crate::metrics::METRICS.api_call("patch");
            let pp = PatchParams { field_manager: Some(self.field_manager.clone()), ..Default::default() };
            configmaps(&self.client, ns).patch(name, &pp, &Patch::Merge(patch)).await?;
            Ok(())
        })
    }
}

/// An in-memory stand-in for unit tests of the edge, with injectable faults.
#[derive(Default, Clone)]
pub struct MemoryCluster {
    pub objects: Arc<Mutex<HashMap<(String, String), Value>>>,
    /// When set, calls whose description starts with the prefix ("" = every call) fail with the error.
    pub fail: Arc<Mutex<Option<(&'static str, ApiError)>>>,
    pub calls: Arc<Mutex<Vec<String>>>,
}

impl MemoryCluster {
    pub fn insert(&self, obj: Value) {
        let ns = obj["metadata"]["namespace"].as_str().unwrap_or_default().to_owned();
        let name = obj["metadata"]["name"].as_str().unwrap_or_default().to_owned();
        self.objects.lock().expect("lock").insert((ns, name), obj);
    }
    pub fn get(&self, ns: &str, name: &str) -> Option<Value> {
        self.objects.lock().expect("lock").get(&(ns.to_owned(), name.to_owned())).cloned()
    }
    fn check(&self, call: String) -> Result<()> {
        self.calls.lock().expect("lock").push(call.clone());
        match self.fail.lock().expect("lock").clone() {
            Some((prefix, e)) if call.starts_with(prefix) => Err(e),
            _ => Ok(()),
        }
    }
}

impl Cluster for MemoryCluster {
    fn get_configmap<'a>(&'a self, ns: &'a str, name: &'a str) -> BoxFuture<'a, Result<Option<Value>>> {
        Box::pin(async move {
            self.check(format!("get {ns}/{name}"))?;
            Ok(self.get(ns, name))
        })
    }
    fn create_configmap<'a>(&'a self, ns: &'a str, obj: &'a Value, dry_run: bool) -> BoxFuture<'a, Result<Created>> {
        Box::pin(async move {
            let name = obj["metadata"]["name"].as_str().unwrap_or_default().to_owned();
            self.check(format!("create {ns}/{name}{}", if dry_run { " (dry run)" } else { "" }))?;
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
    fn patch_configmap<'a>(&'a self, ns: &'a str, name: &'a str, patch: &'a Value) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            self.check(format!("patch {ns}/{name}"))?;
            let mut objects = self.objects.lock().expect("lock");
            let obj = objects.get_mut(&(ns.to_owned(), name.to_owned())).ok_or(ApiError {
                code: Some(404),
                reason: "NotFound".into(),
                message: format!("configmaps \"{name}\" not found"),
            })?;
            // A resourceVersion in a patch is a precondition, as on the API server.
            let want = patch.pointer("/metadata/resourceVersion").and_then(Value::as_str);
            let have = obj.pointer("/metadata/resourceVersion").and_then(Value::as_str).unwrap_or_default().to_owned();
            if want.is_some_and(|w| w != have) {
                return Err(ApiError {
                    code: Some(409),
                    reason: "Conflict".into(),
                    message: format!("Operation cannot be fulfilled on configmaps \"{name}\": the object has been modified"),
                });
            }
            json_patch::merge(obj, patch);
            let next = have.parse::<u64>().unwrap_or(0) + 1;
            obj["metadata"]["resourceVersion"] = Value::String(next.to_string());
            Ok(())
        })
    }
}
