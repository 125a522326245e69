//! What the in-process admission suites (tests/admission/, tests/secret_admission.rs,
//! tests/memory.rs) share: the AdmissionReview they send, the Deployment it carries, the router the
//! binary serves answering it, and the answer read back. Each suite keeps its own other fixtures.

#![allow(dead_code)] // each suite uses its part

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request as HttpRequest, StatusCode};
use base64::Engine as _;
use confighistory::cache::Lock;
use confighistory::cluster::MemoryCluster;
use confighistory::model::policy::Policy;
use confighistory::webhook::{self, App};
use serde_json::{json, Value};
use tower::ServiceExt;

/// The namespace every request is about.
pub const NS: &str = "shop";

/// An AdmissionReview of `op` on `object` (or `old`) of `group/version` `kind` in [`NS`], by user
/// `alice`, request uid `req-1`.
pub fn review(kind: &str, group: &str, version: &str, op: &str, object: Option<&Value>, old: Option<&Value>) -> Value {
    let obj = object.or(old).expect("an object");
    json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "req-1",
            "kind": {"group": group, "version": version, "kind": kind},
            "resource": {"group": group, "version": version, "resource": format!("{}s", kind.to_lowercase())},
            "name": obj["metadata"]["name"], "namespace": NS, "operation": op,
            "userInfo": {"username": "alice"},
            "object": object, "oldObject": old, "dryRun": false
        }
    })
}

/// A Deployment `name` in [`NS`] with only what admission reads: its pod template's spec `pod`.
pub fn bare_deployment(name: &str, pod: Value) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": NS},
           "spec": {"template": {"spec": pod}}})
}

/// A Deployment `name` in [`NS`] as the API server holds one: uid `uid-<name>`, its selector and
/// pod labels `app: <name>`, its pod template's spec `pod`.
pub fn deployment(name: &str, pod: Value) -> Value {
    let mut d = bare_deployment(name, pod);
    d["metadata"]["uid"] = json!(format!("uid-{name}"));
    d["spec"]["selector"] = json!({"matchLabels": {"app": name}});
    d["spec"]["template"]["metadata"] = json!({"labels": {"app": name}});
    d
}

/// The server's answer: HTTP status, the body parsed (`Null` when it is no JSON) and as sent.
pub struct Answer {
    pub status: StatusCode,
    pub body: Value,
    pub text: String,
}

impl Answer {
    pub fn response(&self) -> &Value {
        &self.body["response"]
    }
    pub fn allowed(&self) -> bool {
        self.response()["allowed"] == json!(true)
    }
    pub fn message(&self) -> String {
        self.response()["status"]["message"].as_str().unwrap_or_default().to_owned()
    }
    pub fn warnings(&self) -> Vec<String> {
        self.response()["warnings"].as_array().map(|a| a.iter().map(|w| w.as_str().unwrap().to_owned()).collect()).unwrap_or_default()
    }
    pub fn patch(&self) -> Vec<Value> {
        match self.response()["patch"].as_str() {
            Some(p) => serde_json::from_slice(&base64::engine::general_purpose::STANDARD.decode(p).unwrap()).unwrap(),
            None => vec![],
        }
    }
    /// The object after applying the patch.
    pub fn patched(&self, obj: &Value) -> Value {
        let mut out = obj.clone();
        let patch: json_patch::Patch = serde_json::from_value(Value::Array(self.patch())).unwrap();
        json_patch::patch(&mut out, &patch).expect("patch applies");
        out
    }
}

/// A server over `cluster` and the cache `state`, ready (its cache synced).
pub fn app(policy: &Policy, state: &Arc<Lock>, cluster: &MemoryCluster) -> Arc<App> {
    Arc::new(App::ready(policy.clone(), state.clone(), Arc::new(cluster.clone())))
}

/// POSTs `body` to `path` of the router `app` serves.
pub async fn post(app: &Arc<App>, path: &str, body: Vec<u8>) -> Answer {
    let req = HttpRequest::post(path).header("content-type", "application/json").body(Body::from(body)).unwrap();
    let resp = webhook::router(app.clone()).oneshot(req).await.unwrap();
    let status = resp.status();
    let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX).await.unwrap();
    let text = String::from_utf8_lossy(&bytes).into_owned();
    Answer { status, body: serde_json::from_slice(&bytes).unwrap_or(Value::Null), text }
}

/// Sends `review` to `path`.
pub async fn send(app: &Arc<App>, path: &str, review: &Value) -> Answer {
    post(app, path, serde_json::to_vec(review).unwrap()).await
}

/// Log output captured for the current thread (a `#[tokio::test]` runs on one), as a pod writes it:
/// the binary's subscriber, text without colours, at debug.
#[derive(Clone, Default)]
pub struct Logs(Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Logs {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Logs {
    /// Captures this thread's log lines until the guard drops.
    pub fn capture(&self) -> tracing::subscriber::DefaultGuard {
        let guard = tracing::subscriber::set_default(confighistory::runtime::subscriber("debug", false, false, self.writer()));
        Logs::refresh();
        guard
    }

    /// Recomputes which log lines the capturing subscribers want. A line first logged on another
    /// test's thread while a capture registered its subscriber can be left out for good
    /// (tracing decides once per call site): a test refreshes before the lines it looks for.
    pub fn refresh() {
        tracing::callsite::rebuild_interest_cache();
    }
    pub fn writer(&self) -> impl Fn() -> Logs + Send + Sync + 'static {
        let logs = self.clone();
        move || logs.clone()
    }
    pub fn text(&self) -> String {
        String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
    }
    pub fn lines(&self) -> Vec<String> {
        self.text().lines().map(str::to_owned).collect()
    }
}
