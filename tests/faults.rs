//! Faults without a cluster: the regressions of the bugs that tests/e2e/faults.rs found
//! on the real control plane, in process and in a second, so they run with every `cargo test`.
//! docs/reliability.md has the whole list.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{Request as HttpRequest, StatusCode};
use futures::future::BoxFuture;
use http_body_util::BodyExt;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tower::ServiceExt;

use confighistory::cache::State;
use confighistory::cache::Writer as _;
use confighistory::cluster::{self, Cluster, Created};
use confighistory::model::ids::{SourceId, SourceKind};
use confighistory::model::policy::Policy;
use confighistory::webhook::{self, tls, App};

fn tempdir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("confighistory-faults-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn generate(dir: &Path) {
    let status = Command::new(concat!(env!("CARGO_MANIFEST_DIR"), "/certs/generate"))
        .args(["--out", dir.to_str().unwrap(), "--ip", "127.0.0.1"])
        .stderr(std::process::Stdio::null())
        .status()
        .expect("certs/generate runs (needs openssl)");
    assert!(status.success());
}

/// An API server that accepts the call and never answers.
struct Stalled;

impl Cluster for Stalled {
    fn get_source<'a>(&'a self, _: &'a str, _: &'a SourceId) -> BoxFuture<'a, cluster::Result<Option<Value>>> {
        Box::pin(futures::future::pending())
    }
    fn create_source<'a>(&'a self, _: &'a str, _: SourceKind, _: &'a Value, _: bool) -> BoxFuture<'a, cluster::Result<Created>> {
        Box::pin(futures::future::pending())
    }
    fn patch_source<'a>(&'a self, _: &'a str, _: &'a SourceId, _: &'a Value) -> BoxFuture<'a, cluster::Result<()>> {
        Box::pin(futures::future::pending())
    }
}

fn app(cluster: Arc<dyn Cluster>) -> Arc<App> {
    Arc::new(App::ready(Policy::default(), Arc::new(confighistory::cache::Lock::new(State::default())), cluster))
}

fn deployment_review() -> Value {
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "stalled-1", "kind": {"group": "apps", "version": "v1", "kind": "Deployment"},
        "resource": {"group": "apps", "version": "v1", "resource": "deployments"}, "name": "web", "namespace": "shop",
        "operation": "CREATE", "userInfo": {"username": "alice"},
        "object": {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "shop"},
            "spec": {"template": {"spec": {"volumes": [{"name": "c", "configMap": {"name": "app-config"}}], "containers": [{"name": "a"}]}}}}}})
}

/// Bug 4: an API server that never answers held the admission past the API server's timeout.
#[tokio::test]
async fn a_stalled_api_server_is_denied_within_the_deadline() {
    let app = app(Arc::new(Stalled));
    let router =
        confighistory::webhook::serve::limited(webhook::router(app.clone()), app, webhook::DEFAULT_MAX_BODY, 4, Duration::from_millis(300));
    let deadlines = || {
        let scrape = confighistory::metrics::METRICS.render();
        scrape
            .lines()
            .find_map(|l| l.strip_prefix("confighistory_errors_total{what=\"deadline\"} ")?.parse::<u64>().ok())
            .expect("declared")
    };
    let counted = deadlines();
    let started = Instant::now();
    let req = HttpRequest::post("/mutate")
        .header("content-type", "application/json")
        .body(Body::from(serde_json::to_vec(&deployment_review()).unwrap()))
        .unwrap();
    let resp = tokio::time::timeout(Duration::from_secs(5), router.oneshot(req)).await.expect("answered").unwrap();
    let took = started.elapsed();
    assert!(deadlines() > counted, "a deadline exceeded is counted");
    let body: Value = serde_json::from_slice(&resp.into_body().collect().await.unwrap().to_bytes()).unwrap();
    assert!(took >= Duration::from_millis(300) && took < Duration::from_secs(2), "{took:?}");
    let r = &body["response"];
    assert_eq!(r["uid"], "stalled-1");
    assert_eq!(r["allowed"], false);
    assert_eq!(r["status"]["code"], 503);
    let message = r["status"]["message"].as_str().unwrap();
    assert!(message.contains("API server") && message.contains("retrying is safe"), "{message}");
}

/// (docs/behaviour.md §9a): a flood that takes every place turns into refused writes for nobody. A
/// request that waited its whole deadline for a place gets an error (failurePolicy decides:
/// Ignore lets it through, repair pins it), not a denial; one that got a place is decided as usual.
#[tokio::test]
async fn waiting_for_a_place_is_never_a_denial() {
    let app = app(Arc::new(Stalled));
    let router =
        confighistory::webhook::serve::limited(webhook::router(app.clone()), app, webhook::DEFAULT_MAX_BODY, 1, Duration::from_millis(300));
    let send = |body: Value| {
        let router = router.clone();
        async move {
            let req = HttpRequest::post("/mutate")
                .header("content-type", "application/json")
                .body(Body::from(serde_json::to_vec(&body).unwrap()))
                .unwrap();
            let resp = tokio::time::timeout(Duration::from_secs(5), router.oneshot(req)).await.expect("answered").unwrap();
            let status = resp.status();
            (status, resp.into_body().collect().await.unwrap().to_bytes())
        }
    };
    // The one place is held by an admission waiting on the stalled API server...
    let holder = tokio::spawn(send(deployment_review()));
    tokio::time::sleep(Duration::from_millis(50)).await;
    // ...so this one waits for a place until its deadline, and is counted as overloaded.
    let overloaded = || {
        let scrape = confighistory::metrics::METRICS.render();
        scrape
            .lines()
            .find_map(|l| l.strip_prefix("confighistory_errors_total{what=\"overloaded\"} ")?.parse::<u64>().ok())
            .expect("declared")
    };
    let counted = overloaded();
    let (status, body) = send(deployment_review()).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{}", String::from_utf8_lossy(&body));
    assert!(String::from_utf8_lossy(&body).contains("overloaded"));
    assert!(overloaded() > counted, "waiting out the deadline for a place is counted");
    let (status, body) = holder.await.unwrap();
    assert_eq!(status, StatusCode::OK);
    assert_eq!(serde_json::from_slice::<Value>(&body).unwrap()["response"]["allowed"], false, "had a place: decided as usual");
}

/// An undo that reaches the server's own deadline (API server stalled) is let through
/// as sent, never denied (docs/behaviour.md §6.2.1); the same request as a release is denied.
#[tokio::test]
async fn an_undo_past_the_deadline_is_let_through_as_sent() {
    let app = app(Arc::new(Stalled));
    let template = |image: &str, cm: &str| json!({"metadata": {"labels": {"app": "web"}}, "spec": {"volumes": [{"name": "c", "configMap": {"name": cm}}], "containers": [{"name": "a", "image": image}]}});
    let rev1 = template("web:1", "app-config-0123456789ab");
    let rev2 = template("web:2", "app-config-bcdefghjkmnp");
    app.ctx.state.write().apply_revision(
        confighistory::model::kinds::Kind::ReplicaSet,
        &json!({"metadata": {"name": "web-1", "namespace": "shop", "ownerReferences": [{"kind": "Deployment", "uid": "uid-web", "controller": true}]},
            "spec": {"template": rev1}}),
    );
    let deployment = |tpl: &Value| json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "shop", "uid": "uid-web"}, "spec": {"template": tpl}});
    let router =
        confighistory::webhook::serve::limited(webhook::router(app.clone()), app, webhook::DEFAULT_MAX_BODY, 4, Duration::from_millis(300));
    for (endpoint, tpl, allowed) in
        [("/mutate", &rev1, true), ("/validate", &rev1, true), ("/mutate", &template("web:3", "app-config"), false)]
    {
        let mut review = deployment_review();
        review["request"]["operation"] = json!("UPDATE");
        review["request"]["object"] = deployment(tpl);
        review["request"]["oldObject"] = deployment(&rev2);
        let req = HttpRequest::post(endpoint)
            .header("content-type", "application/json")
            .body(Body::from(serde_json::to_vec(&review).unwrap()))
            .unwrap();
        let resp = tokio::time::timeout(Duration::from_secs(5), router.clone().oneshot(req)).await.expect("answered").unwrap();
        let body: Value = serde_json::from_slice(&resp.into_body().collect().await.unwrap().to_bytes()).unwrap();
        let r = &body["response"];
        assert_eq!(r["allowed"], allowed, "{endpoint} {body}");
        if allowed {
            assert!(r["patch"].is_null(), "as sent: {body}");
        }
        if allowed && endpoint == "/mutate" {
            assert!(r["warnings"][0].as_str().is_some_and(|w| w.contains("let through as sent")), "{body}");
        }
    }
}

/// Bug 5: a key that does not belong to the certificate (a rotation half written) was loaded and
/// served, failing every handshake.
#[test]
fn a_key_that_does_not_belong_to_the_certificate_is_refused() {
    let (a, b) = (tempdir("pair-a"), tempdir("pair-b"));
    generate(&a);
    generate(&b);
    assert!(tls::load(&a.join("tls.crt"), &a.join("tls.key")).is_ok());
    let err = tls::load(&a.join("tls.crt"), &b.join("tls.key")).expect_err("a mismatched pair is refused");
    assert!(matches!(err, tls::Error::Mismatch { .. }), "{err}");
    assert!(err.to_string().contains("does not belong"), "{err}");
}

/// Bug 6: clients that send headers and then trickle the body held the concurrency places.
#[tokio::test]
async fn slow_bodies_do_not_hold_concurrency_places() {
    let (addr, client) = https("slow-body", app(Arc::new(cluster::MemoryCluster::default())), 1, Duration::from_secs(4)).await;
    let connect = || connect_raw(addr, client.clone());
    let body = serde_json::to_vec(&json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "ok", "kind": {"group": "", "version": "v1", "kind": "ConfigMap"},
        "resource": {"group": "", "version": "v1", "resource": "configmaps"}, "name": "x", "namespace": "shop",
        "operation": "CREATE", "userInfo": {"username": "alice"},
        "object": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "namespace": "shop"}}}}))
    .unwrap();
    let head = format!("POST /mutate HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n", body.len());

    // Three clients, more than the one place, stall mid-body.
    let mut stalled = Vec::new();
    for _ in 0..3 {
        let mut s = connect().await;
        s.write_all(head.as_bytes()).await.unwrap();
        s.write_all(&body[..10]).await.unwrap();
        s.flush().await.unwrap();
        stalled.push(s);
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    // A whole request is answered at once all the same.
    let mut s = connect().await;
    s.write_all(head.as_bytes()).await.unwrap();
    s.write_all(&body).await.unwrap();
    let mut answer = vec![0u8; 256];
    let n = tokio::time::timeout(Duration::from_secs(2), s.read(&mut answer)).await.expect("answered while others stall").unwrap();
    assert!(answer[..n].starts_with(b"HTTP/1.1 200"), "{}", String::from_utf8_lossy(&answer[..n]));
    drop(stalled);
}

/// Server and client of the HTTPS tests: `limited(router)` served by `serve_tls_until` on a free
/// loopback port, and a client trusting its CA.
async fn https(name: &str, app: Arc<App>, max_concurrency: usize, deadline: Duration) -> (std::net::SocketAddr, Arc<rustls::ClientConfig>) {
    https_with(name, app, webhook::DEFAULT_MAX_BODY, max_concurrency, deadline).await
}

async fn https_with(
    name: &str,
    app: Arc<App>,
    max_body: usize,
    max_concurrency: usize,
    deadline: Duration,
) -> (std::net::SocketAddr, Arc<rustls::ClientConfig>) {
    https_until(name, app, max_body, max_concurrency, deadline, futures::future::pending()).await
}

/// [`https_with`], draining from when `draining` completes.
async fn https_until(
    name: &str,
    app: Arc<App>,
    max_body: usize,
    max_concurrency: usize,
    deadline: Duration,
    draining: impl std::future::Future<Output = ()> + Send + 'static,
) -> (std::net::SocketAddr, Arc<rustls::ClientConfig>) {
    let dir = tempdir(name);
    generate(&dir);
    let (config, _) = tls::server_config(&dir.join("tls.crt"), &dir.join("tls.key"), None).unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let router = webhook::serve::limited(webhook::router(app.clone()), app, max_body, max_concurrency, deadline);
    tokio::spawn(webhook::serve::serve_tls_until(
        listener,
        tokio_rustls::TlsAcceptor::from(config),
        router,
        draining,
        futures::future::pending(),
    ));
    (addr, client_trusting(&dir))
}

/// A client trusting the CA in `dir`; like the API server's, every connection a full handshake.
fn client_trusting(dir: &Path) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(dir.join("ca.crt")).unwrap() {
        roots.add(cert.unwrap()).unwrap();
    }
    let mut client = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    client.resumption = rustls::client::Resumption::disabled();
    Arc::new(client)
}

type Sender = hyper::client::conn::http1::SendRequest<http_body_util::Full<axum::body::Bytes>>;

async fn connect(addr: std::net::SocketAddr, client: Arc<rustls::ClientConfig>) -> Sender {
    let tcp = TcpStream::connect(addr).await.unwrap();
    let stream = tokio_rustls::TlsConnector::from(client).connect(ServerName::IpAddress(addr.ip().into()), tcp).await.unwrap();
    let (sender, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await.unwrap();
    tokio::spawn(conn);
    sender
}

/// A TLS connection to write raw HTTP on (a client that sends a head and then stalls).
async fn connect_raw(addr: std::net::SocketAddr, client: Arc<rustls::ClientConfig>) -> tokio_rustls::client::TlsStream<TcpStream> {
    let tcp = TcpStream::connect(addr).await.unwrap();
    tokio_rustls::TlsConnector::from(client).connect(ServerName::IpAddress(addr.ip().into()), tcp).await.unwrap()
}

/// Reads what the server sends until it closes the connection (`None`: still open after `within`).
async fn until_closed(s: &mut tokio_rustls::client::TlsStream<TcpStream>, within: Duration) -> Option<String> {
    let mut got = Vec::new();
    let read = async {
        let mut buf = [0u8; 1024];
        loop {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
    };
    tokio::time::timeout(within, read).await.ok()?;
    Some(String::from_utf8_lossy(&got).into_owned())
}

/// Writes the head of a POST declaring `length` body bytes, then `sent` of them.
async fn stall_after(s: &mut tokio_rustls::client::TlsStream<TcpStream>, length: usize, sent: usize) {
    let head = format!("POST /mutate HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {length}\r\n\r\n");
    s.write_all(head.as_bytes()).await.unwrap();
    s.write_all(&vec![b' '; sent]).await.unwrap();
    s.flush().await.unwrap();
}

/// POSTs `body` to /mutate on a keep-alive connection: the status and the body.
async fn post(sender: &mut Sender, body: Vec<u8>) -> Result<(u16, Value), String> {
    sender.ready().await.map_err(|e| format!("connection: {e}"))?;
    let req = HttpRequest::post("/mutate")
        .header("host", "127.0.0.1")
        .header("content-type", "application/json")
        .body(http_body_util::Full::new(axum::body::Bytes::from(body)))
        .unwrap();
    let resp = sender.send_request(req).await.map_err(|e| format!("send: {e}"))?;
    let status = resp.status().as_u16();
    let bytes = resp.into_body().collect().await.map_err(|e| format!("body: {e}"))?.to_bytes();
    Ok((status, serde_json::from_slice(&bytes).unwrap_or(Value::Null)))
}

/// A ConfigMap CREATE in `ns` that is no source: decided from memory, allowed.
fn configmap_review(ns: &str, name: &str, blob: usize) -> Vec<u8> {
    serde_json::to_vec(&json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": format!("uid-{name}"), "kind": {"group": "", "version": "v1", "kind": "ConfigMap"},
        "resource": {"group": "", "version": "v1", "resource": "configmaps"}, "name": name, "namespace": ns,
        "operation": "CREATE", "userInfo": {"username": "alice"},
        "object": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": ns}, "data": {"blob": "x".repeat(blob)}}}}))
    .unwrap()
}

/// The e2e flood (faults::a_request_flood_is_answered_within_bounded_memory) lost requests as
/// "connection: channel closed": hyper's header-read timeout starts when a connection waits for
/// its next request, so it closed every keep-alive connection idle for CLIENT_TIMEOUT (10 s),
/// under load a slow client's, in a cluster the API server's idle connections. Idle between
/// requests is fine (up to IDLE_TIMEOUT); only a begun head must finish in time (next test).
#[tokio::test]
async fn an_idle_keep_alive_connection_is_not_cut_at_the_head_timeout() {
    let (addr, client) = https("idle", app(Arc::new(cluster::MemoryCluster::default())), 4, Duration::from_secs(4)).await;
    let mut sender = connect(addr, client).await;
    assert_eq!(post(&mut sender, configmap_review("shop", "a", 10)).await.unwrap().0, 200);
    tokio::time::sleep(webhook::serve::CLIENT_TIMEOUT + Duration::from_secs(1)).await;
    let second = post(&mut sender, configmap_review("shop", "b", 10)).await;
    assert_eq!(second.map(|(status, _)| status), Ok(200), "the same connection answers after an idle stretch");
}

/// ... but a client that begins a head and stalls is still cut after CLIENT_TIMEOUT, also on a
/// connection that answered before (slowloris on a kept-alive connection).
#[tokio::test]
async fn a_begun_head_must_finish_within_the_client_timeout() {
    let (addr, client) = https("slow-head", app(Arc::new(cluster::MemoryCluster::default())), 4, Duration::from_secs(4)).await;
    let tcp = TcpStream::connect(addr).await.unwrap();
    let mut s = tokio_rustls::TlsConnector::from(client).connect(ServerName::IpAddress(addr.ip().into()), tcp).await.unwrap();
    let body = configmap_review("shop", "a", 10);
    let head = format!("POST /mutate HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n", body.len());
    s.write_all(head.as_bytes()).await.unwrap();
    s.write_all(&body).await.unwrap();
    let mut answer = vec![0u8; 4096];
    let n = s.read(&mut answer).await.unwrap();
    assert!(answer[..n].starts_with(b"HTTP/1.1 200"), "{}", String::from_utf8_lossy(&answer[..n]));
    // Idle a while (not cut), then half a head, never finished.
    tokio::time::sleep(Duration::from_secs(2)).await;
    s.write_all(b"POST /mutate HTTP/1.1\r\nhost: x\r\n").await.unwrap();
    s.flush().await.unwrap();
    let started = Instant::now();
    let closed = tokio::time::timeout(webhook::serve::CLIENT_TIMEOUT * 2, async {
        loop {
            match s.read(&mut answer).await {
                Ok(0) | Err(_) => break,
                Ok(_) => continue, // hyper answers 408 before closing
            }
        }
    })
    .await;
    let took = started.elapsed();
    assert!(closed.is_ok(), "a stalled head is cut");
    assert!(took >= webhook::serve::CLIENT_TIMEOUT - Duration::from_millis(500), "cut after the head timeout, not before: {took:?}");
}

/// An API server that answers every read after `delay` (nothing stored).
struct Slow(Duration);

impl Cluster for Slow {
    fn get_source<'a>(&'a self, _: &'a str, _: &'a SourceId) -> BoxFuture<'a, cluster::Result<Option<Value>>> {
        Box::pin(async move {
            tokio::time::sleep(self.0).await;
            Ok(None)
        })
    }
    fn create_source<'a>(&'a self, _: &'a str, _: SourceKind, _: &'a Value, _: bool) -> BoxFuture<'a, cluster::Result<Created>> {
        Box::pin(async move {
            tokio::time::sleep(self.0).await;
            Ok(Created::Created)
        })
    }
    fn patch_source<'a>(&'a self, _: &'a str, _: &'a SourceId, _: &'a Value) -> BoxFuture<'a, cluster::Result<()>> {
        Box::pin(async move {
            tokio::time::sleep(self.0).await;
            Ok(())
        })
    }
}

/// A Deployment CREATE in `ns` mounting a ConfigMap: decided only after reading it.
fn deployment_in(ns: &str, name: &str) -> Vec<u8> {
    let mut review = deployment_review();
    review["request"]["namespace"] = json!(ns);
    review["request"]["name"] = json!(name);
    review["request"]["uid"] = json!(format!("uid-{ns}-{name}"));
    review["request"]["object"]["metadata"]["namespace"] = json!(ns);
    review["request"]["object"]["metadata"]["name"] = json!(name);
    serde_json::to_vec(&review).unwrap()
}

async fn send(router: &axum::Router, body: Vec<u8>) -> (StatusCode, Value) {
    let req = HttpRequest::post("/mutate").header("content-type", "application/json").body(Body::from(body)).unwrap();
    let resp = router.clone().oneshot(req).await.unwrap();
    let status = resp.status();
    (status, serde_json::from_slice(&resp.into_body().collect().await.unwrap().to_bytes()).unwrap_or(Value::Null))
}

/// (docs/behaviour.md §9a, one tenant starves every other): a namespace that floods the webhook with
/// API-bound admissions takes every place and queues far past the deadline; another namespace's
/// admissions are still decided within it (a freed place goes first to a namespace under its
/// share), not answered "overloaded" after waiting behind the whole flood.
#[tokio::test]
async fn a_flood_from_one_namespace_does_not_starve_another() {
    let app = app(Arc::new(Slow(Duration::from_millis(100))));
    let deadline = Duration::from_secs(2);
    let router = webhook::serve::limited(webhook::router(app.clone()), app, webhook::DEFAULT_MAX_BODY, 4, deadline);
    // 200 admissions of 100 ms each on 4 places: 5 s of work, far past the deadline.
    let flood: Vec<_> = (0..200)
        .map(|i| {
            let router = router.clone();
            tokio::spawn(async move { send(&router, deployment_in("tenant-a", &format!("web-{i}"))).await.0 })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(100)).await;
    for i in 0..3 {
        let started = Instant::now();
        let (status, body) = send(&router, deployment_in("tenant-b", &format!("api-{i}"))).await;
        let took = started.elapsed();
        assert_eq!(status, StatusCode::OK, "tenant-b's admission {i} after {took:?}: {body}");
        assert!(body["response"]["allowed"].is_boolean(), "decided: {body}");
        assert!(took < deadline / 2, "tenant-b's admission {i} took {took:?} during tenant-a's flood");
    }
    let mut statuses = std::collections::BTreeMap::new();
    for f in flood {
        *statuses.entry(f.await.unwrap()).or_insert(0) += 1;
    }
    // The flood itself is answered: decided, or "overloaded" (503, failurePolicy decides).
    assert_eq!(statuses.keys().filter(|s| ![StatusCode::OK, StatusCode::SERVICE_UNAVAILABLE].contains(s)).count(), 0, "{statuses:?}");
}

/// (docs/behaviour.md §9a): a decision that needs no API call never waits behind those that do. With
/// every place held by admissions stuck on an API server that does not answer, a ConfigMap that
/// is no source is still answered at once.
#[tokio::test]
async fn decisions_from_memory_never_wait_for_a_place() {
    let app = app(Arc::new(Stalled));
    let router = webhook::serve::limited(webhook::router(app.clone()), app, webhook::DEFAULT_MAX_BODY, 2, Duration::from_secs(3));
    let stuck: Vec<_> = (0..4)
        .map(|i| {
            let router = router.clone();
            tokio::spawn(async move { send(&router, deployment_in("shop", &format!("web-{i}"))).await })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let started = Instant::now();
    let (status, body) = send(&router, configmap_review("shop", "plain", 100)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["response"]["allowed"], true, "{body}");
    assert!(started.elapsed() < Duration::from_secs(1), "answered at once: {:?}", started.elapsed());
    for s in stuck {
        s.await.unwrap();
    }
}

/// A request whose body arrives in pieces sent through the returned sender, recording when the
/// server first reads it.
fn streamed(length: usize) -> (HttpRequest<Body>, tokio::sync::mpsc::UnboundedSender<axum::body::Bytes>, Arc<AtomicBool>) {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<axum::body::Bytes>();
    let read = Arc::new(AtomicBool::new(false));
    let flag = read.clone();
    let stream = futures::stream::unfold(rx, move |mut rx| {
        flag.store(true, std::sync::atomic::Ordering::SeqCst);
        async move { rx.recv().await.map(|b| (Ok::<_, std::io::Error>(b), rx)) }
    });
    let req = HttpRequest::post("/mutate")
        .header("content-type", "application/json")
        .header("content-length", length)
        .body(Body::from_stream(stream))
        .unwrap();
    (req, tx, read)
}

/// (docs/behaviour.md §9a): bodies were buffered before anything bounded them, so N parallel
/// large applies could take N x 8 MiB (both replicas OOM at the chart's limit). Bytes are now
/// charged to a budget as they arrive (4 x the largest body) and one body at a time may go past
/// it (the reserve): with four 1 MiB bodies received all but their end, a fifth arrives in full
/// and is answered, while a sixth, finished meanwhile, waits until the fifth gives the reserve
/// back.
#[tokio::test]
async fn bodies_are_buffered_only_within_the_byte_budget() {
    const MIB: usize = 1024 * 1024;
    let app = app(Arc::new(cluster::MemoryCluster::default()));
    let router = webhook::serve::limited(webhook::router(app.clone()), app, MIB, 8, Duration::from_secs(4));
    let body = configmap_review("shop", "big", MIB - 1024);
    let cut = body.len() - 100;
    let mut senders = Vec::new();
    let mut answers = Vec::new();
    for _ in 0..webhook::limits::BODY_BUDGET_BODIES + 2 {
        let (req, tx, _) = streamed(body.len());
        tx.send(axum::body::Bytes::copy_from_slice(&body[..cut])).unwrap();
        answers.push(tokio::spawn(router.clone().oneshot(req)));
        senders.push(tx);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let sixth = senders.pop().unwrap();
    let fifth = senders.pop().unwrap();
    let sixth_answer = answers.pop().unwrap();
    let fifth_answer = answers.pop().unwrap();
    // The sixth's body ends while the fifth holds the reserve: it is not charged, not answered.
    sixth.send(axum::body::Bytes::copy_from_slice(&body[cut..])).unwrap();
    drop(sixth);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!sixth_answer.is_finished(), "a body past the budget and the reserve waits");
    fifth.send(axum::body::Bytes::copy_from_slice(&body[cut..])).unwrap();
    drop(fifth);
    for a in [fifth_answer, sixth_answer] {
        let answered = tokio::time::timeout(Duration::from_secs(2), a).await.expect("answered").unwrap().unwrap();
        assert_eq!(answered.status(), StatusCode::OK);
    }
    for tx in senders {
        tx.send(axum::body::Bytes::copy_from_slice(&body[cut..])).unwrap();
    }
    for a in answers {
        assert_eq!(tokio::time::timeout(Duration::from_secs(5), a).await.expect("answered").unwrap().unwrap().status(), StatusCode::OK);
    }
}

/// (docs/behaviour.md §9a): the body budget was taken by the declared Content-Length
/// when a request started, so a few connections declaring the largest body and sending nothing
/// held all of it for the body timeout, and real reviews queued behind them (503 after 10 s).
/// Only bytes that arrived count once a body's promise (PROMISE_TIMEOUT) ends: a body that never
/// starts soon holds nothing.
#[tokio::test]
async fn declared_bodies_that_never_arrive_hold_no_budget() {
    let (addr, client) = https("declared", app(Arc::new(cluster::MemoryCluster::default())), 4, Duration::from_secs(4)).await;
    let mut stalled = Vec::new();
    for _ in 0..2 * webhook::limits::BODY_BUDGET_BODIES {
        let mut s = connect_raw(addr, client.clone()).await;
        stall_after(&mut s, webhook::DEFAULT_MAX_BODY, 0).await;
        stalled.push(s);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut sender = connect(addr, client.clone()).await;
    let started = Instant::now();
    let answered = tokio::time::timeout(Duration::from_secs(5), post(&mut sender, configmap_review("shop", "real", 10))).await;
    let (status, body) = answered.expect("a real review is answered while declared bodies stall").unwrap();
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["response"]["allowed"], true, "{body}");
    let took = started.elapsed();
    assert!(took < webhook::limits::PROMISE_TIMEOUT + Duration::from_secs(1), "answered once their promises ended: {took:?}");
    drop(stalled);
}

/// Charged as they arrive, bodies that each arrived in part could wait for each other's budget
/// until they all time out. One body at a time may go past the shared budget (the reserve), so
/// one always finishes; a holder of the reserve that stops sending loses it (and its connection)
/// within RESERVE_TIMEOUT, well before the body timeout, and the next body goes ahead.
#[tokio::test]
async fn a_stalled_body_cannot_hold_the_reserve() {
    const MIB: usize = 1024 * 1024;
    let (addr, client) = https_with("reserve", app(Arc::new(cluster::MemoryCluster::default())), MIB, 8, Duration::from_secs(4)).await;
    // The shared budget taken in full by bodies that arrived all but their last bytes (1 MiB
    // charged each), then one more holding the reserve the same way.
    let mut stalled = Vec::new();
    for _ in 0..=webhook::limits::BODY_BUDGET_BODIES {
        let mut s = connect_raw(addr, client.clone()).await;
        stall_after(&mut s, MIB, MIB - 10).await;
        stalled.push(s);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut sender = connect(addr, client.clone()).await;
    let started = Instant::now();
    let answered = tokio::time::timeout(webhook::serve::CLIENT_TIMEOUT, post(&mut sender, configmap_review("shop", "real", 10))).await;
    let (status, body) = answered.expect("answered before the body timeout").unwrap();
    assert_eq!(status, 200, "{body}");
    let took = started.elapsed();
    let bound = webhook::limits::PROMISE_TIMEOUT + webhook::limits::RESERVE_TIMEOUT + Duration::from_secs(1);
    assert!(took <= bound, "answered once the reserve's holder lost it: {took:?}");
    // The reserve's holder was refused and cut off; the four within the shared budget wait on.
    let mut closed = 0;
    for s in &mut stalled {
        if let Some(out) = until_closed(s, Duration::from_millis(200)).await {
            assert!(out.is_empty() || out.starts_with("HTTP/1.1 408"), "{out}");
            closed += 1;
        }
    }
    assert_eq!(closed, 1, "only the reserve's holder is cut off before the body timeout");
}

/// An API server that answers reads after `delay` and counts them: in all, and at most at once.
#[derive(Default)]
struct Counting {
    delay: Duration,
    reads: std::sync::atomic::AtomicUsize,
    now: std::sync::atomic::AtomicUsize,
    most: std::sync::atomic::AtomicUsize,
}

impl Cluster for Counting {
    fn get_source<'a>(&'a self, _: &'a str, _: &'a SourceId) -> BoxFuture<'a, cluster::Result<Option<Value>>> {
        use std::sync::atomic::Ordering::SeqCst;
        Box::pin(async move {
            self.reads.fetch_add(1, SeqCst);
            let now = self.now.fetch_add(1, SeqCst) + 1;
            self.most.fetch_max(now, SeqCst);
            tokio::time::sleep(self.delay).await;
            self.now.fetch_sub(1, SeqCst);
            Ok(None)
        })
    }
    fn create_source<'a>(&'a self, _: &'a str, _: SourceKind, _: &'a Value, _: bool) -> BoxFuture<'a, cluster::Result<Created>> {
        Box::pin(async { Ok(Created::Created) })
    }
    fn patch_source<'a>(&'a self, _: &'a str, _: &'a SourceId, _: &'a Value) -> BoxFuture<'a, cluster::Result<()>> {
        Box::pin(async { Ok(()) })
    }
}

/// (docs/behaviour.md §9a): the distinct names one request makes the webhook read were unbounded and
/// read one after another (a template with 200 ConfigMap volumes: 200 sequential API calls, each
/// request). Now at most MAX_SOURCES_READ are read, a few at a time.
#[tokio::test]
async fn a_request_naming_many_sources_reads_a_bounded_number_concurrently() {
    use std::sync::atomic::Ordering::SeqCst;
    let cluster = Arc::new(Counting { delay: Duration::from_millis(20), ..Counting::default() });
    let app = app(cluster.clone());
    let router = webhook::router(app);
    let mut review: Value = serde_json::from_slice(&deployment_in("shop", "web")).unwrap();
    let volumes: Vec<Value> = (0..200).map(|i| json!({"name": format!("c{i}"), "configMap": {"name": format!("config-{i}")}})).collect();
    review["request"]["object"]["spec"]["template"]["spec"]["volumes"] = json!(volumes);
    let started = Instant::now();
    let (status, body) = send(&router, serde_json::to_vec(&review).unwrap()).await;
    let took = started.elapsed();
    assert_eq!(status, StatusCode::OK, "{body}");
    let reads = cluster.reads.load(SeqCst);
    assert!(reads <= webhook::MAX_SOURCES_READ, "{reads} reads for one request");
    assert!(cluster.most.load(SeqCst) > 1, "read one after another");
    assert!(took < Duration::from_millis(20) * webhook::MAX_SOURCES_READ as u32 / 2, "took {took:?}");
    assert_eq!(body["response"]["allowed"], false, "decided as if the rest could not be read: {body}");
    let message = body["response"]["status"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("more than"), "{message}");
}

fn rss_kib(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with(field)).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// Measurement for docs/reliability.md (run alone, it reads this process's peak RSS):
/// `cargo test --release --test faults measure_peak_memory -- --ignored --nocapture`.
/// 64 clients at once, each sending 4 applies of a 1 MiB ConfigMap (object, oldObject and
/// kubectl's last-applied annotation in each: a 4 MiB review) over HTTPS. MEASURE_MAX_BODY_MIB
/// (default 8, the server's default) sets the largest body, and so the byte budget (4 x).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "measurement: run alone, it reads the process's peak memory"]
async fn measure_peak_memory_under_parallel_large_applies() {
    const MIB: usize = 1024 * 1024;
    let max_body = std::env::var("MEASURE_MAX_BODY_MIB").ok().map_or(webhook::DEFAULT_MAX_BODY, |m| m.parse::<usize>().unwrap() * MIB);
    let app = Arc::new(App { max_body, ..Arc::into_inner(app(Arc::new(cluster::MemoryCluster::default()))).unwrap() });
    let (addr, client) = https_with("measure", app, max_body, 256, Duration::from_secs(10)).await;
    let data = "x".repeat(MIB - 4096);
    let object = |v: &str| {
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "big", "namespace": "shop",
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": format!("{{\"data\":{{\"blob\":\"{data}{v}\"}}}}")}},
            "data": {"blob": format!("{data}{v}")}})
    };
    let review = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "u", "kind": {"group": "", "version": "v1", "kind": "ConfigMap"},
        "resource": {"group": "", "version": "v1", "resource": "configmaps"}, "name": "big", "namespace": "shop",
        "operation": "UPDATE", "userInfo": {"username": "alice"}, "object": object("2"), "oldObject": object("1")}});
    // One buffer shared by every client: the client side adds little to the process's memory.
    let body = axum::body::Bytes::from(serde_json::to_vec(&review).unwrap());
    let mut warm = connect(addr, client.clone()).await;
    assert_eq!(post(&mut warm, body.to_vec()).await.unwrap().0, 200);
    let before = rss_kib("VmRSS:");
    let started = Instant::now();
    let tasks: Vec<_> = (0..64)
        .map(|_| {
            let (client, body) = (client.clone(), body.clone());
            tokio::spawn(async move {
                let mut sender = connect(addr, client.clone()).await;
                let mut statuses = Vec::new();
                for _ in 0..4 {
                    let sent = async {
                        sender.ready().await?;
                        let req = HttpRequest::post("/mutate")
                            .header("host", "127.0.0.1")
                            .header("content-type", "application/json")
                            .body(http_body_util::Full::new(body.clone()))
                            .unwrap();
                        let resp = sender.send_request(req).await?;
                        let status = resp.status().as_u16();
                        resp.into_body().collect().await?;
                        Ok::<_, hyper::Error>(status)
                    };
                    match sent.await {
                        Ok(status) => statuses.push(status),
                        Err(_) => {
                            // Counted as 0; a new connection for the next one.
                            statuses.push(0);
                            sender = connect(addr, client.clone()).await;
                        }
                    }
                }
                statuses
            })
        })
        .collect();
    let mut statuses = std::collections::BTreeMap::new();
    for t in tasks {
        for s in t.await.unwrap() {
            *statuses.entry(s).or_insert(0) += 1;
        }
    }
    let peak = rss_kib("VmHWM:");
    eprintln!(
        "measure: review {} KiB, max body {} MiB (budget {} MiB): RSS {} MiB before, peak {} MiB (+{} MiB) in {:?}; answers (0: connection failed) {statuses:?}",
        body.len() / 1024,
        max_body / MIB,
        max_body * webhook::limits::BODY_BUDGET_BODIES / MIB,
        before / 1024,
        peak / 1024,
        (peak - before) / 1024,
        started.elapsed()
    );
}

/// A request refused because bodies hold the whole byte budget (503: failurePolicy decides) has
/// its body read and dropped, so its keep-alive connection serves the client's next request (the
/// e2e flood counts a closed connection as a failure).
#[tokio::test]
async fn a_request_over_the_byte_budget_keeps_its_connection() {
    const MIB: usize = 1024 * 1024;
    let (addr, client) =
        https_with("budget", app(Arc::new(Slow(webhook::serve::CLIENT_TIMEOUT + Duration::from_secs(2)))), MIB, 8, Duration::from_secs(30))
            .await;
    // Five API-bound admissions of 1 MiB (padded with whitespace) hold the budget and the reserve
    // until answered.
    let mut holders = Vec::new();
    for i in 0..=webhook::limits::BODY_BUDGET_BODIES {
        let mut body = deployment_in("shop", &format!("web-{i}"));
        body.resize(MIB, b' ');
        let mut sender = connect(addr, client.clone()).await;
        holders.push(tokio::spawn(async move { post(&mut sender, body).await }));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut sender = connect(addr, client.clone()).await;
    let (status, _) = post(&mut sender, configmap_review("shop", "a", 10)).await.unwrap();
    assert_eq!(status, 503, "no budget within the client timeout");
    let second = post(&mut sender, configmap_review("shop", "b", 10)).await;
    assert_eq!(second.map(|(status, _)| status), Ok(200), "the same connection, once the budget is free");
    for h in holders {
        assert_eq!(h.await.unwrap().unwrap().0, 200);
    }
}

/// In a rolling restart at 100,000 ConfigMaps one admission failed open with
/// "write: broken pipe". The API server keeps its keep-alive connections to a replica that is
/// shutting down (the Service's endpoints only steer new ones) and went on sending on them until
/// the process exited under a request; closing idle ones when the drain starts still met a
/// request being written (an in-cluster upgrade run). From the start of the drain every answer
/// says `connection: close` and its connection closes after it: an idle one stays open for its
/// next request, a begun request is answered, and one opened during the drain after one answer.
#[tokio::test]
async fn draining_closes_every_connection_after_its_answer_and_cuts_none() {
    let (drain, draining) = tokio::sync::oneshot::channel::<()>();
    let draining = async move {
        let _ = draining.await;
    };
    let app = app(Arc::new(cluster::MemoryCluster::default()));
    let (addr, client) = https_until("drain", app, webhook::DEFAULT_MAX_BODY, 8, Duration::from_secs(4), draining).await;

    let mut idle = connect(addr, client.clone()).await;
    assert_eq!(post(&mut idle, configmap_review("shop", "a", 10)).await.unwrap().0, 200);
    let body = configmap_review("shop", "b", 10);
    let mut begun = connect_raw(addr, client.clone()).await;
    stall_after(&mut begun, body.len(), 0).await;
    tokio::time::sleep(Duration::from_millis(100)).await;

    drain.send(()).unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!idle.is_closed(), "an idle keep-alive connection is not closed under the client when the drain starts");

    begun.write_all(&body).await.unwrap();
    let answer = until_closed(&mut begun, Duration::from_secs(2)).await.expect("closed after its answer");
    assert!(answer.starts_with("HTTP/1.1 200"), "the request begun before the drain is answered: {answer}");
    assert!(answer.to_ascii_lowercase().contains("connection: close"), "and says the connection closes: {answer}");

    // The idle connection's next request is answered, saying the connection closes, and it does.
    idle.ready().await.expect("the idle connection is still usable");
    let req = HttpRequest::post("/mutate")
        .header("host", "127.0.0.1")
        .header("content-type", "application/json")
        .body(http_body_util::Full::new(axum::body::Bytes::from(configmap_review("shop", "d", 10))))
        .unwrap();
    let resp = idle.send_request(req).await.expect("answered");
    assert_eq!(resp.status().as_u16(), 200);
    assert_eq!(resp.headers().get("connection").and_then(|v| v.to_str().ok()), Some("close"), "{:?}", resp.headers());
    let _ = resp.into_body().collect().await;
    let closed = tokio::time::timeout(Duration::from_secs(2), async {
        while !idle.is_closed() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    assert!(closed.is_ok(), "closed after that answer");

    let mut late = connect_raw(addr, client).await;
    let body = configmap_review("shop", "c", 10);
    stall_after(&mut late, body.len(), 0).await;
    late.write_all(&body).await.unwrap();
    let answer = until_closed(&mut late, Duration::from_secs(2)).await.expect("one answer, then closed");
    assert!(answer.starts_with("HTTP/1.1 200") && answer.to_ascii_lowercase().contains("connection: close"), "{answer}");
}
