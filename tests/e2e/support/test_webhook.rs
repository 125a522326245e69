//! A tiny HTTPS admission webhook served from inside the test process, so a test can prove what
//! the API server does with a webhook's answer without depending on confighistory's server.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use axum::Json;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use serde_json::{json, Value};
use tokio::sync::oneshot;

use super::{ca_bundle, generate_serving_cert, Cluster, Kubectl, TestNamespace, NAMESPACE_LABEL};

/// What the handler decides for one AdmissionReview request.
pub enum Decision {
    Allow { warnings: Vec<String> },
    Deny { message: String },
}

pub fn allow() -> Decision {
    Decision::Allow { warnings: Vec::new() }
}

pub fn deny(message: impl Into<String>) -> Decision {
    Decision::Deny { message: message.into() }
}

static WEBHOOKS: AtomicUsize = AtomicUsize::new(0);

type Handler = dyn Fn(&Value) -> Decision + Send + Sync;

/// A running in-process webhook; stops when dropped.
pub struct TestWebhook {
    /// `https://<host>:<port>` (the path is free: every path gets the same handler).
    pub url: String,
    pub ca_pem: String,
    calls: Arc<AtomicUsize>,
    shutdown: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl TestWebhook {
    /// Serves `handler` over HTTPS on a free port of `cluster.webhook_host`. The handler gets the
    /// AdmissionReview's `request` object.
    pub fn start(cluster: &Cluster, handler: impl Fn(&Value) -> Decision + Send + Sync + 'static) -> TestWebhook {
        let host = cluster.webhook_host.clone();
        let dir = cluster.state_dir.join(format!("run/test-webhook-{}-{}", std::process::id(), WEBHOOKS.fetch_add(1, Ordering::Relaxed)));
        let ca_pem = generate_serving_cert(&dir, &host);
        let tls = tls_config(&dir);
        let listener = std::net::TcpListener::bind((host.as_str(), 0)).expect("bind the test webhook");
        listener.set_nonblocking(true).expect("nonblocking listener");
        let port = listener.local_addr().expect("local addr").port();
        let calls = Arc::new(AtomicUsize::new(0));
        let handler: Arc<Handler> = Arc::new(handler);
        let (shutdown, stop) = oneshot::channel();
        let counter = calls.clone();
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("tokio runtime");
            runtime.block_on(serve(listener, tls, handler, counter, stop));
        });
        TestWebhook { url: format!("https://{host}:{port}"), ca_pem, calls, shutdown: Some(shutdown), thread: Some(thread) }
    }

    /// How many AdmissionReviews the webhook has answered.
    pub fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }

    /// Registers a ValidatingWebhookConfiguration that sends `operations` on `resources`
    /// (core group, v1) in `namespace` only to this webhook, with failurePolicy Fail. Deleted when
    /// the returned guard drops.
    pub fn register_validating(&self, namespace: &TestNamespace, operations: &[&str], resources: &[&str]) -> Registration {
        self.register("ValidatingWebhookConfiguration", namespace, "", operations, resources)
    }

    /// Registers a MutatingWebhookConfiguration like [`TestWebhook::register_validating`], for
    /// `resources` of API group `group`. Its name (`e2e-...`) sorts after confighistory's, so the
    /// API server calls it after confighistory's mutating webhook.
    pub fn register_mutating(&self, namespace: &TestNamespace, group: &str, operations: &[&str], resources: &[&str]) -> Registration {
        self.register("MutatingWebhookConfiguration", namespace, group, operations, resources)
    }

    fn register(
        &self,
        kind: &'static str,
        namespace: &TestNamespace,
        group: &str,
        operations: &[&str],
        resources: &[&str],
    ) -> Registration {
        let name = format!("{}.e2e.confighistory.io", namespace.name);
        let configuration = json!({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": kind,
            "metadata": {"name": name},
            "webhooks": [{
                "name": name,
                "admissionReviewVersions": ["v1"],
                "sideEffects": "None",
                "failurePolicy": "Fail",
                "timeoutSeconds": 10,
                "clientConfig": {"url": format!("{}/validate", self.url), "caBundle": ca_bundle(&self.ca_pem)},
                "namespaceSelector": {"matchLabels": {NAMESPACE_LABEL: namespace.name}},
                "rules": [{
                    "apiGroups": [group],
                    "apiVersions": ["v1"],
                    "operations": operations,
                    "resources": resources,
                    "scope": "Namespaced",
                }],
            }],
        });
        namespace.cluster.apply_cluster_scoped(&configuration.to_string());
        Registration {
            cluster: namespace.cluster,
            kind: if kind.starts_with("Mutating") { "mutatingwebhookconfiguration" } else { "validatingwebhookconfiguration" },
            name,
        }
    }
}

impl Drop for TestWebhook {
    fn drop(&mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// A webhook configuration that is deleted when the guard drops.
pub struct Registration {
    cluster: &'static Cluster,
    kind: &'static str,
    pub name: String,
}

impl Drop for Registration {
    fn drop(&mut self) {
        let out: Kubectl = self.cluster.kubectl(&["delete", self.kind, &self.name, "--ignore-not-found"]);
        if !out.success {
            eprintln!("e2e: could not delete {} {}:\n{}", self.kind, self.name, out.describe());
        }
    }
}

fn tls_config(dir: &std::path::Path) -> Arc<rustls::ServerConfig> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let certs =
        CertificateDer::pem_file_iter(dir.join("tls.crt")).and_then(|certs| certs.collect::<Result<Vec<_>, _>>()).expect("parse tls.crt");
    let key = PrivateKeyDer::from_pem_file(dir.join("tls.key")).expect("parse tls.key");
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .expect("serving certificate");
    Arc::new(config)
}

async fn serve(
    listener: std::net::TcpListener,
    tls: Arc<rustls::ServerConfig>,
    handler: Arc<Handler>,
    calls: Arc<AtomicUsize>,
    mut stop: oneshot::Receiver<()>,
) {
    let listener = tokio::net::TcpListener::from_std(listener).expect("tokio listener");
    let acceptor = tokio_rustls::TlsAcceptor::from(tls);
    let app = axum::Router::new().fallback(move |Json(review): Json<Value>| {
        let handler = handler.clone();
        let calls = calls.clone();
        async move {
            calls.fetch_add(1, Ordering::SeqCst);
            Json(answer(&review, &*handler))
        }
    });
    loop {
        let (stream, _) = tokio::select! {
            _ = &mut stop => return,
            accepted = listener.accept() => match accepted {
                Ok(conn) => conn,
                Err(_) => continue,
            },
        };
        let acceptor = acceptor.clone();
        let service = TowerToHyperService::new(app.clone());
        tokio::spawn(async move {
            let Ok(tls_stream) = acceptor.accept(stream).await else {
                return;
            };
            let _ = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(tls_stream), service).await;
        });
    }
}

fn answer(review: &Value, handler: &Handler) -> Value {
    let request = &review["request"];
    let mut response = json!({"uid": request["uid"], "allowed": true});
    match handler(request) {
        Decision::Allow { warnings } => {
            if !warnings.is_empty() {
                response["warnings"] = json!(warnings);
            }
        }
        Decision::Deny { message } => {
            response["allowed"] = json!(false);
            response["status"] = json!({"code": 403, "message": message});
        }
    }
    json!({
        "apiVersion": review["apiVersion"].as_str().unwrap_or("admission.k8s.io/v1"),
        "kind": "AdmissionReview",
        "response": response,
    })
}
