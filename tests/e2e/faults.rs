//! Faults and abuse, against the real control plane and the real `confighistory serve`
//! binary. Each test starts its own server processes (never the shared one), talks to them over
//! HTTPS on 127.0.0.1 the way the API server does, and bounds every loop in count and time.
//!
//! - the API server goes away while the webhook serves (through a TCP proxy the test cuts:
//!   refused connections, then a black hole) and comes back: clear denials, then normal answers
//!   without a restart;
//! - two webhook processes race on the same new content: one snapshot, both requests pinned to it;
//! - certificate rotation under continuous load (keep-alive and fresh connections), including a
//!   rotation that writes the key and the certificate seconds apart: no failed request;
//! - slow clients (handshake, headers, body) and oversized headers and bodies: timeouts and limits
//!   hold, an idle keep-alive connection is not cut, and a normal request is still answered meanwhile;
//! - TLS 1.0 and 1.1 refused (openssl s_client), 1.2 and 1.3 served;
//! - a request flood against a low --max-concurrency: every request answered, memory bounded;
//! - logs: no PEM, key material or bearer token, through TLS reloads and API errors.
//!
//! docs/reliability.md lists every fault tried, the behaviour expected, and the test proving it.

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::support::{cluster, free_port, generate_serving_cert, repo_root, Cluster, TestNamespace, WEBHOOK_IDENTITY};

// ---------- a confighistory server process of the test's own ----------

struct Server {
    name: String,
    addr: SocketAddr,
    health: SocketAddr,
    dir: PathBuf,
    log: PathBuf,
    wrapper: Child,
    lifeline: Option<ChildStdin>,
}

impl Server {
    /// `confighistory serve --no-controllers` on free loopback ports, with certificates from
    /// `certs/generate` in its own directory, talking to the API server through `kubeconfig`.
    /// Run by tests/e2e/run-webhook, which stops it when this test process goes away.
    fn start(cluster: &Cluster, name: &str, kubeconfig: &Path, extra: &[&str]) -> Server {
        let dir = cluster.state_dir.join(format!("run/faults-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        generate_serving_cert(&dir, "127.0.0.1");
        let addr: SocketAddr = format!("127.0.0.1:{}", free_port("127.0.0.1")).parse().unwrap();
        let health: SocketAddr = format!("127.0.0.1:{}", free_port("127.0.0.1")).parse().unwrap();
        let log = cluster.state_dir.join(format!("logs/faults-{name}-{}.log", std::process::id()));
        let _ = std::fs::remove_file(&log);
        let mut command = Command::new(repo_root().join("tests/e2e/run-webhook"));
        command
            .arg(&log)
            .arg("--")
            .arg(env!("CARGO_BIN_EXE_confighistory"))
            .args(["serve", "--no-controllers", "--listen", &addr.to_string(), "--health-listen", &health.to_string()])
            .arg("--tls-cert")
            .arg(dir.join("tls.crt"))
            .arg("--tls-key")
            .arg(dir.join("tls.key"))
            .args(["--identity", WEBHOOK_IDENTITY, "--namespace", "confighistory", "--shutdown-delay", "0"])
            .args(extra)
            .env("KUBECONFIG", kubeconfig)
            .env("CONFIGHISTORY_E2E_DIR", &cluster.state_dir)
            .env("RUST_LOG", "debug")
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit());
        let mut wrapper = command.spawn().expect("start tests/e2e/run-webhook");
        let lifeline = wrapper.stdin.take();
        let server = Server { name: name.to_owned(), addr, health, dir, log, wrapper, lifeline };
        server.wait_health("/livez", Duration::from_secs(30));
        server
    }

    fn wait_health(&self, path: &str, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        while http_get(self.health, path) != Some(200) {
            assert!(Instant::now() < deadline, "server {} not answering {path} after {timeout:?}; log:\n{}", self.name, self.log_text());
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn ca(&self) -> PathBuf {
        self.dir.join("ca.crt")
    }

    /// Resident memory of the server process (the wrapper's child), in KiB.
    fn rss_kib(&self) -> u64 {
        let children = std::fs::read_to_string(format!("/proc/{0}/task/{0}/children", self.wrapper.id())).unwrap_or_default();
        let pid = children.split_whitespace().next().expect("the server process");
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("server status");
        status.lines().find_map(|l| l.strip_prefix("VmRSS:")).and_then(|v| v.split_whitespace().next()?.parse().ok()).expect("VmRSS")
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // Closing the pipe makes run-webhook stop the server; wait for it (it gives up after 5 s).
        drop(self.lifeline.take());
        let _ = self.wrapper.wait();
    }
}

/// `confighistory_errors_total{what="bad-request"}` from the health port's /metrics.
fn bad_requests(health: SocketAddr) -> u64 {
    let text = http_get_text(health, "/metrics").unwrap_or_default();
    text.lines().find_map(|l| l.strip_prefix("confighistory_errors_total{what=\"bad-request\"} ")?.trim().parse().ok()).unwrap_or(0)
}

/// Plain HTTP GET of the health port; the whole response.
fn http_get_text(addr: SocketAddr, path: &str) -> Option<String> {
    let mut stream = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(stream, "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").ok()?;
    let mut response = String::new();
    let _ = stream.read_to_string(&mut response);
    Some(response)
}

/// Plain HTTP GET of the health port; the status code.
fn http_get(addr: SocketAddr, path: &str) -> Option<u16> {
    http_get_text(addr, path)?.split_whitespace().nth(1)?.parse().ok()
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("tokio runtime")
}

// ---------- an HTTPS client like the API server's ----------

fn tls_client(ca: &Path) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca).expect("CA file") {
        roots.add(cert.expect("CA cert")).expect("add CA");
    }
    tls_client_with(roots, &[&rustls::version::TLS13, &rustls::version::TLS12])
}

/// Like the API server's client (Go, no session cache): every new connection is a full handshake,
/// so it sees the certificate and key the server holds right now.
fn tls_client_with(roots: rustls::RootCertStore, versions: &[&'static rustls::SupportedProtocolVersion]) -> Arc<rustls::ClientConfig> {
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_protocol_versions(versions)
        .expect("versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.resumption = rustls::client::Resumption::disabled();
    Arc::new(config)
}

type Sender = hyper::client::conn::http1::SendRequest<Full<Bytes>>;

async fn connect(addr: SocketAddr, tls: Arc<rustls::ClientConfig>) -> Result<Sender, String> {
    let tcp = TcpStream::connect(addr).await.map_err(|e| format!("connect: {e}"))?;
    let stream = tokio_rustls::TlsConnector::from(tls)
        .connect(ServerName::IpAddress(addr.ip().into()), tcp)
        .await
        .map_err(|e| format!("handshake: {e}"))?;
    let (sender, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await.map_err(|e| e.to_string())?;
    tokio::spawn(conn);
    Ok(sender)
}

async fn post(sender: &mut Sender, path: &str, body: Bytes) -> Result<(u16, Value), String> {
    sender.ready().await.map_err(|e| format!("connection: {e}"))?;
    let req = hyper::Request::post(path)
        .header("host", "127.0.0.1")
        .header("content-type", "application/json")
        .body(Full::new(body))
        .expect("request");
    let resp = sender.send_request(req).await.map_err(|e| format!("send: {e}"))?;
    let status = resp.status().as_u16();
    let bytes = resp.into_body().collect().await.map_err(|e| format!("body: {e}"))?.to_bytes();
    Ok((status, serde_json::from_slice(&bytes).unwrap_or(Value::Null)))
}

async fn post_once(addr: SocketAddr, tls: Arc<rustls::ClientConfig>, path: &str, body: &Value) -> Result<(u16, Value), String> {
    let mut sender = connect(addr, tls).await?;
    post(&mut sender, path, Bytes::from(serde_json::to_vec(body).expect("json"))).await
}

// ---------- AdmissionReviews ----------

fn review(uid: &str, kind: &str, group: &str, ns: &str, op: &str, object: Value) -> Value {
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": uid, "kind": {"group": group, "version": "v1", "kind": kind},
        "resource": {"group": group, "version": "v1", "resource": format!("{}s", kind.to_lowercase())},
        "name": object["metadata"]["name"], "namespace": ns, "operation": op,
        "userInfo": {"username": "alice", "groups": ["system:authenticated"]},
        "object": object, "oldObject": null, "dryRun": false}})
}

/// CREATE of a Deployment `name` mounting ConfigMap `source`.
fn deployment_create(ns: &str, name: &str, source: &str) -> Value {
    let object = json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": ns, "uid": format!("uid-{name}")},
        "spec": {"selector": {"matchLabels": {"app": name}}, "template": {
            "metadata": {"labels": {"app": name}},
            "spec": {"volumes": [{"name": "config", "configMap": {"name": source}}],
                     "containers": [{"name": "app", "image": "registry.example/app:1"}]}}}});
    review(&format!("uid-review-{name}"), "Deployment", "apps", ns, "CREATE", object)
}

/// CREATE of a ConfigMap nothing references: answered from memory, no API call.
fn unrelated_configmap(ns: &str, name: &str, bytes: usize) -> Value {
    let object = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": ns},
        "data": {"blob": "x".repeat(bytes)}});
    review(&format!("uid-{name}"), "ConfigMap", "", ns, "CREATE", object)
}

/// The response of an AdmissionReview answer.
fn response(answer: &(u16, Value)) -> &Value {
    &answer.1["response"]
}

/// The names a mutation pinned references to (the values of its `replace` operations).
fn pinned_names(answer: &(u16, Value)) -> Vec<String> {
    use base64::Engine as _;
    let Some(patch) = response(answer)["patch"].as_str() else { return Vec::new() };
    let ops: Vec<Value> = serde_json::from_slice(&base64::engine::general_purpose::STANDARD.decode(patch).expect("base64")).expect("patch");
    ops.iter().filter(|op| op["op"] == "replace").filter_map(|op| op["value"].as_str().map(str::to_owned)).collect()
}

fn source_configmap(name: &str, value: &str) -> String {
    format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\ndata:\n  mode: {value:?}\n")
}

fn hash_of(data: &[(&str, &str)]) -> String {
    let data: serde_json::Map<String, Value> = data.iter().map(|(k, v)| (k.to_string(), json!(v))).collect();
    confighistory::model::snapshot::Content::from_object(&json!({ "data": data })).hash()
}

// ---------- a TCP proxy in front of the API server, to cut and restore ----------

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Link {
    Up,
    /// New connections are closed at once; open ones are dropped.
    Refused,
    /// New connections are accepted and never answered; open ones are dropped.
    BlackHole,
}

struct Proxy {
    addr: SocketAddr,
    link: tokio::sync::watch::Sender<Link>,
}

impl Proxy {
    async fn start(upstream: SocketAddr) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let addr = listener.local_addr().expect("proxy addr");
        let (link, watch) = tokio::sync::watch::channel(Link::Up);
        tokio::spawn(async move {
            loop {
                let Ok((mut client, _)) = listener.accept().await else { continue };
                let mut watch = watch.clone();
                let state = *watch.borrow_and_update();
                tokio::spawn(async move {
                    match state {
                        Link::Refused => {}
                        Link::BlackHole => {
                            let _ = watch.changed().await;
                        }
                        Link::Up => {
                            let Ok(mut server) = TcpStream::connect(upstream).await else { return };
                            tokio::select! {
                                _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
                                _ = watch.changed() => {}
                            }
                        }
                    }
                });
            }
        });
        Proxy { addr, link }
    }

    fn set(&self, link: Link) {
        self.link.send_replace(link);
    }
}

/// The API server's address, from the webhook's kubeconfig.
fn api_server(cluster: &Cluster) -> SocketAddr {
    let text = std::fs::read_to_string(&cluster.webhook_kubeconfig).expect("webhook kubeconfig");
    let url = text.lines().find_map(|l| l.trim_start().strip_prefix("server:")).expect("a server line").trim();
    url.trim_start_matches("https://").trim_end_matches('/').parse().expect("an ip:port API server")
}

/// The webhook's kubeconfig, reaching the API server through `proxy` instead, with a bearer token
/// added next to the client certificate (the API server authenticates the certificate; the token
/// is there so the logs can be checked for it).
fn proxied_kubeconfig(cluster: &Cluster, proxy: SocketAddr, token: &str, path: &Path) {
    let original = std::fs::read_to_string(&cluster.webhook_kubeconfig).expect("webhook kubeconfig");
    let text = original.replace(&format!("https://{}", api_server(cluster)), &format!("https://{proxy}")).replacen(
        "  user:\n",
        &format!("  user:\n    token: {token}\n"),
        1,
    );
    assert!(text.contains(&proxy.to_string()) && text.contains(token), "kubeconfig rewritten:\n{text}");
    std::fs::write(path, text).expect("write kubeconfig");
}

/// No certificate, key or token in a log.
fn assert_no_secrets(log: &str, secrets: &[(&str, String)]) {
    for marker in ["BEGIN", "PRIVATE KEY", "-----"] {
        assert!(!log.contains(marker), "the log holds {marker:?}:\n{log}");
    }
    for (what, secret) in secrets {
        assert!(secret.len() >= 16, "{what} is too short to look for");
        assert!(!log.contains(secret.as_str()), "the log holds {what}");
    }
    assert!(!log.to_lowercase().contains("authorization: bearer"), "the log holds an Authorization header");
}

/// A line from the middle of a PEM file (key material, not the markers).
fn pem_body_line(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.lines().filter(|l| !l.starts_with("-----")).nth(1).expect("a PEM body").to_owned()
}

// ---------- the API server goes away and comes back ----------

#[test]
fn api_server_outage_gets_clear_denials_and_recovers_on_its_own() {
    let Some(cluster) = cluster() else { return };
    let ns = TestNamespace::excluded(cluster, "faults-outage");
    ns.accepts(&source_configmap("app-config", "a"));
    let rt = runtime();
    let token = format!("e2e-fake-bearer-{:016x}", std::process::id() as u64 * 0x9e37_79b9);
    let kubeconfig = cluster.state_dir.join(format!("run/faults-outage-{}.kubeconfig", std::process::id()));
    let proxy = rt.block_on(Proxy::start(api_server(cluster)));
    proxied_kubeconfig(cluster, proxy.addr, &token, &kubeconfig);

    let server = Server::start(cluster, "outage", &kubeconfig, &[]);
    server.wait_health("/readyz", Duration::from_secs(60));
    let tls = tls_client(&server.ca());
    let expected = confighistory::model::snapshot::name("app-config", &hash_of(&[("mode", "a")]), 0);

    rt.block_on(async {
        // Up: pinned.
        let answer = post_once(server.addr, tls.clone(), "/mutate", &deployment_create(&ns.name, "before", "app-config")).await.unwrap();
        assert_eq!(response(&answer)["allowed"], true, "{answer:?}");
        assert_eq!(pinned_names(&answer), std::slice::from_ref(&expected));

        for link in [Link::Refused, Link::BlackHole] {
            proxy.set(link);
            // A workload that needs a fresh read: denied, quickly, saying what failed and that a
            // retry is safe (the API server's webhook timeout is 10 s).
            let started = Instant::now();
            let answer = post_once(
                server.addr,
                tls.clone(),
                "/mutate",
                &deployment_create(&ns.name, &format!("during-{link:?}").to_lowercase(), "app-config"),
            )
            .await
            .unwrap();
            let took = started.elapsed();
            let r = response(&answer);
            assert_eq!(r["allowed"], false, "{link:?}: {answer:?}");
            let message = r["status"]["message"].as_str().unwrap_or_default();
            assert!(message.contains("API server") && message.contains("retrying is safe"), "{link:?}: {message}");
            if link == Link::Refused {
                assert!(message.contains("app-config"), "{link:?}: the denial names what it could not read: {message}");
            }
            // Within the default --admission-deadline (4 s), before the chart's timeoutSeconds (5 s).
            assert!(took < Duration::from_secs(5), "{link:?}: the denial took {took:?}, longer than the API server waits");
            // ConfigMap writes that concern nobody are answered from memory all the same.
            let answer = post_once(server.addr, tls.clone(), "/mutate", &unrelated_configmap(&ns.name, "lock", 10)).await.unwrap();
            assert_eq!(response(&answer)["allowed"], true, "{link:?}: {answer:?}");
        }

        // Back: normal answers again, without restarting the server.
        proxy.set(Link::Up);
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut attempt = 0;
        loop {
            attempt += 1;
            let answer =
                post_once(server.addr, tls.clone(), "/mutate", &deployment_create(&ns.name, &format!("after-{attempt}"), "app-config"))
                    .await
                    .unwrap();
            if response(&answer)["allowed"] == true {
                assert_eq!(pinned_names(&answer), std::slice::from_ref(&expected));
                break;
            }
            assert!(Instant::now() < deadline, "no recovery within 30 s: {answer:?}");
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    });
    server.wait_health("/readyz", Duration::from_secs(30));

    let log = server.log_text();
    assert!(log.contains("API server call failed during admission"), "the outage is logged:\n{log}");
    assert_no_secrets(
        &log,
        &[
            ("the bearer token", token),
            ("the serving key", pem_body_line(&server.dir.join("tls.key"))),
            ("the client key", pem_body_line(&cluster.state_dir.join("pki/webhook.key"))),
        ],
    );
}

// ---------- two webhook processes racing on the same new content ----------

#[test]
fn two_webhook_processes_racing_on_new_content_make_one_snapshot() {
    let Some(cluster) = cluster() else { return };
    let ns = TestNamespace::excluded(cluster, "faults-race");
    let a = Server::start(cluster, "race-a", &cluster.webhook_kubeconfig, &[]);
    let b = Server::start(cluster, "race-b", &cluster.webhook_kubeconfig, &[]);
    a.wait_health("/readyz", Duration::from_secs(60));
    b.wait_health("/readyz", Duration::from_secs(60));
    let (tls_a, tls_b) = (tls_client(&a.ca()), tls_client(&b.ca()));
    let rt = runtime();
    for round in 0..5 {
        let value = format!("round-{round}");
        ns.accepts(&source_configmap("app-config", &value));
        let hash = hash_of(&[("mode", &value)]);
        let answers = rt.block_on(async {
            let mut tasks = Vec::new();
            for i in 0..4 {
                let (addr, tls) = if i % 2 == 0 { (a.addr, tls_a.clone()) } else { (b.addr, tls_b.clone()) };
                let body = deployment_create(&ns.name, &format!("app-{round}-{i}"), "app-config");
                tasks.push(tokio::spawn(async move { post_once(addr, tls, "/mutate", &body).await }));
            }
            let mut answers = Vec::new();
            for t in tasks {
                answers.push(t.await.expect("task").expect("answered"));
            }
            answers
        });
        let mut names = std::collections::BTreeSet::new();
        for answer in &answers {
            assert_eq!(response(answer)["allowed"], true, "round {round}: {answer:?}");
            names.extend(pinned_names(answer));
        }
        assert_eq!(names.len(), 1, "round {round}: every request pinned to the same snapshot: {names:?}");
        let snapshots = ns.kubectl(&["get", "configmaps", "-l", &format!("confighistory.io/hash={hash}"), "-o", "json"]).expect_success();
        let items = snapshots.json()["items"].as_array().cloned().unwrap_or_default();
        assert_eq!(items.len(), 1, "round {round}: exactly one snapshot of the new content");
        assert_eq!(items[0]["metadata"]["name"].as_str(), names.iter().next().map(String::as_str));
    }
}

// ---------- certificate rotation under continuous load ----------

#[test]
fn certificate_rotation_under_continuous_load_fails_no_request() {
    let Some(cluster) = cluster() else { return };
    let server = Server::start(cluster, "rotation", &cluster.webhook_kubeconfig, &[]);
    server.wait_health("/readyz", Duration::from_secs(60));
    // certs/generate reuses the CA: clients keep trusting the rotated leaf.
    let tls = tls_client(&server.ca());
    let first_leaf = std::fs::read(server.dir.join("tls.crt")).unwrap();
    let rt = runtime();
    let stop = Arc::new(AtomicBool::new(false));
    let (ok, failed) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicU64::new(0)));
    let errors = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let body = Bytes::from(serde_json::to_vec(&unrelated_configmap("load", "cm", 100)).unwrap());
    let mut workers = Vec::new();
    for w in 0..4 {
        let (tls, stop, ok, failed, errors, body, addr) =
            (tls.clone(), stop.clone(), ok.clone(), failed.clone(), errors.clone(), body.clone(), server.addr);
        workers.push(rt.spawn(async move {
            let keep_alive = w % 2 == 0;
            let mut sender: Option<Sender> = None;
            // Bounded: stops when told, and never runs more than 20,000 requests.
            for _ in 0..20_000 {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                let result = async {
                    let s = match sender.take() {
                        Some(s) if keep_alive && !s.is_closed() => s,
                        _ => connect(addr, tls.clone()).await?,
                    };
                    let mut s = s;
                    let answer = post(&mut s, "/mutate", body.clone()).await?;
                    if keep_alive {
                        sender = Some(s);
                    }
                    Ok::<_, String>(answer)
                }
                .await;
                match result {
                    Ok((200, v)) if v["response"]["allowed"] == true => {
                        ok.fetch_add(1, Ordering::Relaxed);
                    }
                    other => {
                        failed.fetch_add(1, Ordering::Relaxed);
                        errors.lock().unwrap().push(format!("{other:?}"));
                    }
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }));
    }
    // Three rotations the way a Secret update lands (both files at once), then one by a writer
    // that puts the new key in place seconds before the new certificate (the server polls every
    // 5 s, so it sees the key alone).
    for _ in 0..3 {
        std::thread::sleep(Duration::from_secs(2));
        generate_serving_cert(&server.dir, "127.0.0.1");
    }
    let staging = server.dir.join("staging");
    generate_serving_cert(&staging, "127.0.0.1");
    // Same CA, so clients trust the new leaf.
    for f in ["ca.crt", "ca.key"] {
        std::fs::copy(server.dir.join(f), staging.join(f)).unwrap();
    }
    generate_serving_cert(&staging, "127.0.0.1");
    std::fs::copy(staging.join("tls.key"), server.dir.join("tls.key.new")).unwrap();
    std::fs::rename(server.dir.join("tls.key.new"), server.dir.join("tls.key")).unwrap();
    std::thread::sleep(Duration::from_secs(7));
    std::fs::copy(staging.join("tls.crt"), server.dir.join("tls.crt.new")).unwrap();
    std::fs::rename(server.dir.join("tls.crt.new"), server.dir.join("tls.crt")).unwrap();
    std::thread::sleep(Duration::from_secs(7));
    stop.store(true, Ordering::Relaxed);
    rt.block_on(async {
        for w in workers {
            w.await.expect("worker");
        }
    });
    let (ok, failed) = (ok.load(Ordering::Relaxed), failed.load(Ordering::Relaxed));
    let errors = errors.lock().unwrap();
    assert_eq!(
        failed,
        0,
        "{failed} of {} requests failed during rotation, e.g. {:?}",
        ok as u64 + failed,
        errors.iter().take(3).collect::<Vec<_>>()
    );
    assert!(ok > 100, "only {ok} requests ran");

    // The server now serves the last certificate.
    let served = rt.block_on(async {
        let tcp = TcpStream::connect(server.addr).await.unwrap();
        let stream =
            tokio_rustls::TlsConnector::from(tls.clone()).connect(ServerName::IpAddress(server.addr.ip().into()), tcp).await.unwrap();
        stream.get_ref().1.peer_certificates().unwrap()[0].as_ref().to_vec()
    });
    let last = CertificateDer::from_pem_file(server.dir.join("tls.crt")).unwrap();
    assert_eq!(served, last.as_ref(), "the rotated certificate is served");
    assert_ne!(std::fs::read(server.dir.join("tls.crt")).unwrap(), first_leaf);
    let log = server.log_text();
    assert!(log.contains("reloaded TLS certificate"), "{log}");
    assert_no_secrets(&log, &[("the serving key", pem_body_line(&server.dir.join("tls.key")))]);
}

// ---------- slow clients, oversized headers and bodies ----------

/// Seconds the server gives a client for its handshake or headers (src/serve.rs CLIENT_TIMEOUT),
/// plus a margin for a loaded machine.
const CLIENT_TIMEOUT_BOUND: Duration = Duration::from_secs(16);

/// Waits until the peer closes (or errs); how long that took, or `None` past `bound`.
async fn closed_within<S: tokio::io::AsyncRead + Unpin>(stream: &mut S, bound: Duration) -> Option<Duration> {
    let started = Instant::now();
    let mut buf = [0u8; 4096];
    loop {
        match tokio::time::timeout_at((started + bound).into(), stream.read(&mut buf)).await {
            Err(_) => return None,
            Ok(Ok(0)) | Ok(Err(_)) => return Some(started.elapsed()),
            Ok(Ok(_)) => {}
        }
    }
}

async fn tls_stream(addr: SocketAddr, tls: Arc<rustls::ClientConfig>) -> tokio_rustls::client::TlsStream<TcpStream> {
    let tcp = TcpStream::connect(addr).await.unwrap();
    tokio_rustls::TlsConnector::from(tls).connect(ServerName::IpAddress(addr.ip().into()), tcp).await.unwrap()
}

/// One whole HTTP/1.1 response with a Content-Length (head and body), as text.
async fn read_response(s: &mut (impl tokio::io::AsyncRead + Unpin)) -> String {
    let mut got = Vec::new();
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let text = String::from_utf8_lossy(&got).into_owned();
        if let Some(end) = text.find("\r\n\r\n") {
            let length = text[..end]
                .lines()
                .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().parse::<usize>().unwrap()))
                .unwrap_or(0);
            if got.len() >= end + 4 + length {
                return text;
            }
        }
        let n = s.read(&mut buf).await.unwrap();
        assert!(n > 0, "closed mid-response: {text}");
        got.extend_from_slice(&buf[..n]);
    }
}

#[test]
fn slow_clients_and_oversized_requests_hit_timeouts_and_limits() {
    let Some(cluster) = cluster() else { return };
    let server = Server::start(cluster, "slow", &cluster.webhook_kubeconfig, &["--max-concurrency", "4", "--max-body-bytes", "65536"]);
    server.wait_health("/readyz", Duration::from_secs(60));
    let tls = tls_client(&server.ca());
    let rt = runtime();
    rt.block_on(async {
        let addr = server.addr;
        let ok_body = serde_json::to_vec(&unrelated_configmap("slow", "cm", 100)).unwrap();

        // Many slow clients at once, each of one kind, more than the concurrency limit.
        let mut silent = Vec::new(); // TCP only, no handshake
        let mut slow_head = Vec::new(); // handshake, then headers a byte at a time
        let mut slow_body = Vec::new(); // headers, then a body that never completes
        for _ in 0..8 {
            silent.push(TcpStream::connect(addr).await.unwrap());
            let mut s = tls_stream(addr, tls.clone()).await;
            s.write_all(b"POST /mutate HTTP/1.1\r\nhost: x\r\n").await.unwrap();
            slow_head.push(s);
            let mut s = tls_stream(addr, tls.clone()).await;
            s.write_all(
                format!("POST /mutate HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n", ok_body.len())
                    .as_bytes(),
            )
            .await
            .unwrap();
            s.write_all(&ok_body[..10]).await.unwrap();
            s.flush().await.unwrap();
            slow_body.push(s);
        }
        // Meanwhile a normal request is answered promptly.
        let started = Instant::now();
        let answer = tokio::time::timeout(
            Duration::from_secs(5),
            post_once(addr, tls.clone(), "/mutate", &serde_json::from_slice(&ok_body).unwrap()),
        )
        .await
        .expect("a normal request is answered while slow clients hold connections")
        .unwrap();
        assert_eq!(response(&answer)["allowed"], true, "{answer:?}");
        assert!(started.elapsed() < Duration::from_secs(5));

        // An idle keep-alive connection after a request.
        let mut idle = tls_stream(addr, tls.clone()).await;
        idle.write_all(format!("POST /mutate HTTP/1.1\r\nhost: x\r\ncontent-length: {}\r\n\r\n", ok_body.len()).as_bytes()).await.unwrap();
        idle.write_all(&ok_body).await.unwrap();
        let first = read_response(&mut idle).await;
        assert!(first.starts_with("HTTP/1.1 200"), "{first}");

        // Every kind of slow client is cut off within the bound. Trickle a header byte now and then:
        // the timeout is for the whole head, not between bytes.
        let deadline = Instant::now() + CLIENT_TIMEOUT_BOUND;
        for s in &mut slow_head {
            let _ = s.write_all(b"x").await;
        }
        for (what, mut streams) in [
            ("silent TCP", silent.into_iter().map(|s| Box::new(s) as Box<dyn tokio::io::AsyncRead + Unpin + Send>).collect::<Vec<_>>()),
            ("slow headers", slow_head.into_iter().map(|s| Box::new(s) as Box<dyn tokio::io::AsyncRead + Unpin + Send>).collect()),
            ("slow body", slow_body.into_iter().map(|s| Box::new(s) as Box<dyn tokio::io::AsyncRead + Unpin + Send>).collect()),
        ] {
            for s in &mut streams {
                let left = deadline.saturating_duration_since(Instant::now()) + Duration::from_secs(1);
                assert!(closed_within(s, left).await.is_some(), "a {what} connection is still open after {CLIENT_TIMEOUT_BOUND:?}");
            }
        }

        // The idle keep-alive connection was not cut with them: idle between requests is not a slow
        // head (the API server keeps idle connections up to 90 s; a server-side cut races its next
        // POST), and it still serves a request.
        idle.write_all(format!("POST /mutate HTTP/1.1\r\nhost: x\r\ncontent-length: {}\r\n\r\n", ok_body.len()).as_bytes()).await.unwrap();
        idle.write_all(&ok_body).await.unwrap();
        let second = tokio::time::timeout(Duration::from_secs(5), read_response(&mut idle)).await.expect("answered");
        assert!(second.starts_with("HTTP/1.1 200"), "an idle keep-alive connection is served after {CLIENT_TIMEOUT_BOUND:?}: {second}");

        // Oversized headers: 431 or closed, never served.
        let mut s = tls_stream(addr, tls.clone()).await;
        let huge = format!("POST /mutate HTTP/1.1\r\nhost: x\r\nx-big: {}\r\n\r\n", "a".repeat(200 * 1024));
        let _ = s.write_all(huge.as_bytes()).await;
        let mut buf = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut buf)).await;
        let text = String::from_utf8_lossy(&buf);
        assert!(text.is_empty() || text.starts_with("HTTP/1.1 431"), "{text}");

        // A body over --max-body-bytes: 413, the connection usable or closed, never a crash. The
        // server answers from the declared length and closes without reading the body, so a client
        // still writing it may see the close first (its kernel then drops the 413 in flight): either
        // way the refusal is counted, and nothing was admitted.
        let refused = bad_requests(server.health);
        let big = unrelated_configmap("slow", "big", 300 * 1024);
        match post_once(addr, tls.clone(), "/mutate", &big).await {
            Ok(answer) => assert_eq!(answer.0, 413, "{:?}", answer.1),
            Err(e) => assert!(e.contains("writing a body") || e.contains("connection"), "neither a 413 nor a closed connection: {e}"),
        }
        assert_eq!(bad_requests(server.health), refused + 1, "the oversized body was refused as a bad request");

        // And the server still answers.
        let answer = post_once(addr, tls.clone(), "/mutate", &serde_json::from_slice(&ok_body).unwrap()).await.unwrap();
        assert_eq!(response(&answer)["allowed"], true);
    });
}

// ---------- TLS versions ----------

fn s_client(addr: SocketAddr, version_flag: &str) -> (bool, String) {
    let output = Command::new("openssl")
        .args(["s_client", "-connect", &addr.to_string(), version_flag, "-cipher", "DEFAULT:@SECLEVEL=0"])
        .stdin(Stdio::null())
        .output()
        .expect("openssl s_client");
    let text = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    // "New, TLSv1.2, Cipher is ..." after a handshake; "New, (NONE), Cipher is (NONE)" without one.
    let negotiated = text.lines().any(|l| l.starts_with("New, ") && !l.contains("(NONE)"));
    (negotiated, text)
}

#[test]
fn tls_1_0_and_1_1_are_refused() {
    let Some(cluster) = cluster() else { return };
    let server = Server::start(cluster, "tls", &cluster.webhook_kubeconfig, &[]);
    for old in ["-tls1", "-tls1_1"] {
        let (negotiated, text) = s_client(server.addr, old);
        assert!(!negotiated, "{old} was served:\n{text}");
        // Refused by the server with an alert (rustls sends handshake_failure), not merely
        // unsupported by this openssl (which then sends nothing).
        assert!(text.contains("alert handshake failure") || text.contains("alert protocol version"), "{old}:\n{text}");
    }
    for new in ["-tls1_2", "-tls1_3"] {
        let (negotiated, text) = s_client(server.addr, new);
        assert!(negotiated, "{new} was not served:\n{text}");
    }
}

// ---------- a request flood ----------

#[test]
fn a_request_flood_is_answered_within_bounded_memory() {
    let Some(cluster) = cluster() else { return };
    let server = Server::start(cluster, "flood", &cluster.webhook_kubeconfig, &["--max-concurrency", "8"]);
    server.wait_health("/readyz", Duration::from_secs(60));
    let tls = tls_client(&server.ca());
    let rt = runtime();
    const CONNECTIONS: usize = 200;
    const PER_CONNECTION: usize = 25; // 5,000 requests
    let baseline = server.rss_kib();
    let (answered, refused, failed, peak) = rt.block_on(async {
        let started = Instant::now();
        let mut pending = Vec::new();
        for c in 0..CONNECTIONS {
            let (tls, addr) = (tls.clone(), server.addr);
            pending.push(tokio::spawn(async move {
                let (mut answered, mut refused, mut failed) = (0usize, 0usize, Vec::new());
                let mut sender = match connect(addr, tls.clone()).await {
                    Ok(s) => s,
                    Err(e) => return (0, 0, vec![e]),
                };
                for i in 0..PER_CONNECTION {
                    // Mostly small reviews, every tenth one of 256 KiB.
                    let size = if i % 10 == 0 { 256 * 1024 } else { 2 * 1024 };
                    let body = Bytes::from(serde_json::to_vec(&unrelated_configmap("flood", &format!("cm-{c}-{i}"), size)).unwrap());
                    match tokio::time::timeout(Duration::from_secs(60), post(&mut sender, "/mutate", body)).await {
                        Ok(Ok((200, v))) if v["response"]["allowed"] == true => answered += 1,
                        Ok(Ok((429 | 503, _))) => refused += 1,
                        other => {
                            failed.push(format!("{other:?}"));
                            match connect(addr, tls.clone()).await {
                                Ok(s) => sender = s,
                                Err(e) => {
                                    failed.push(e);
                                    break;
                                }
                            }
                        }
                    }
                }
                (answered, refused, failed)
            }));
        }
        // Sample the server's memory every 100 ms until every connection is done.
        let (mut answered, mut refused, mut failed, mut peak) = (0, 0, Vec::new(), baseline);
        while !pending.is_empty() {
            assert!(started.elapsed() < Duration::from_secs(180), "the flood did not finish in 180 s");
            peak = peak.max(server.rss_kib());
            tokio::time::sleep(Duration::from_millis(100)).await;
            let mut still = Vec::new();
            for t in pending {
                if t.is_finished() {
                    let (a, r, mut f) = t.await.expect("task");
                    answered += a;
                    refused += r;
                    failed.append(&mut f);
                } else {
                    still.push(t);
                }
            }
            pending = still;
        }
        (answered, refused, failed, peak)
    });
    eprintln!("flood: {answered} answered, {refused} refused, {} failed; RSS {baseline} KiB before, peak {peak} KiB", failed.len());
    assert!(failed.is_empty(), "{} requests failed, e.g. {:?}", failed.len(), &failed[..failed.len().min(3)]);
    assert_eq!(answered + refused, CONNECTIONS * PER_CONNECTION);
    assert!(peak < 160 * 1024, "the server's memory peaked at {peak} KiB under the flood");
    // Still healthy afterwards.
    assert_eq!(http_get(server.health, "/readyz"), Some(200));
}

// ---------- mutual TLS with the API server's client certificate ----------

/// A MutatingWebhookConfiguration `name` sending ConfigMap CREATEs in `ns` to `server`'s /mutate,
/// failurePolicy Fail, so a call that fails (a refused handshake) refuses the write.
fn register_configmap_webhook(cluster: &Cluster, name: &str, ns: &TestNamespace, server: &Server) {
    let ca = std::fs::read_to_string(server.ca()).expect("server CA");
    let config = json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": [{
            "name": "mtls.e2e.confighistory.io",
            "clientConfig": {"url": format!("https://{}/mutate", server.addr), "caBundle": crate::support::ca_bundle(&ca)},
            "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps"], "operations": ["CREATE"], "scope": "Namespaced"}],
            // The harness's label: before 1.21 the API server sets no kubernetes.io/metadata.name.
            "namespaceSelector": {"matchLabels": {crate::support::NAMESPACE_LABEL: ns.name}},
            "failurePolicy": "Fail", "sideEffects": "None", "admissionReviewVersions": ["v1"], "timeoutSeconds": 10,
        }],
    });
    cluster.apply_cluster_scoped(&config.to_string());
}

/// docs/behaviour.md 9a.3 on a real API server. tests/e2e/cluster gives the API server an
/// AdmissionConfiguration whose kubeconfig presents its kubelet client certificate
/// (CN=kube-apiserver-kubelet-client, signed by the cluster CA) to webhooks, as docs/install.md
/// "Mutual TLS" sets it up. A server requiring the cluster CA (read from kube-root-ca.crt, as the
/// chart's `clientAuth.existingConfigMap` would) and that name answers the API server; one pinned
/// to another name refuses the handshake, so with failurePolicy Fail the write is refused, and
/// its log names the certificate it refused.
#[test]
fn the_api_servers_client_certificate_is_accepted_and_its_name_pinned() {
    let Some(cluster) = cluster() else { return };
    if cluster.external {
        eprintln!("skipped: a user's cluster presents no client certificate unless its admin set it up (docs/install.md)");
        return;
    }
    assert!(
        cluster.state_dir.join("pki/admission.yaml").exists(),
        "this cluster's API server was started without the AdmissionConfiguration that presents its client certificate: restart it with tests/e2e/cluster down && up"
    );
    let accepted = TestNamespace::in_run(cluster, None, "mtls-accepted", &[]);
    let refused = TestNamespace::in_run(cluster, None, "mtls-refused", &[]);
    let dir = cluster.state_dir.join(format!("run/faults-mtls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let root = accepted.kubectl(&["get", "configmap", "kube-root-ca.crt", "-o", "jsonpath={.data.ca\\.crt}"]).expect_success();
    let client_ca = dir.join("client-ca.crt");
    std::fs::write(&client_ca, &root.stdout).unwrap();
    let ca = client_ca.to_str().unwrap();
    let pinned = Server::start(
        cluster,
        "mtls-apiserver",
        &cluster.webhook_kubeconfig,
        &["--client-ca", ca, "--client-names", "kube-apiserver-kubelet-client"],
    );
    let other = Server::start(
        cluster,
        "mtls-other",
        &cluster.webhook_kubeconfig,
        &["--client-ca", ca, "--client-names", "kube-apiserver-webhook-client"],
    );
    pinned.wait_health("/readyz", Duration::from_secs(60));
    other.wait_health("/readyz", Duration::from_secs(60));
    let names = [format!("{}-webhook", accepted.name), format!("{}-webhook", refused.name)];
    register_configmap_webhook(cluster, &names[0], &accepted, &pinned);
    register_configmap_webhook(cluster, &names[1], &refused, &other);

    // The API server takes a moment to see new configurations: write until the server has
    // answered a request of the namespace (its admission span names it); every write passes.
    let deadline = Instant::now() + Duration::from_secs(60);
    for i in 0.. {
        accepted.accepts(&format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: app-{i}}}\ndata: {{a: \"1\"}}\n"));
        if pinned.log_text().contains(&accepted.name) {
            break;
        }
        assert!(Instant::now() < deadline, "the API server never called the mTLS server; log:\n{}", pinned.log_text());
        std::thread::sleep(Duration::from_millis(500));
    }

    let deadline = Instant::now() + Duration::from_secs(60);
    for i in 0.. {
        let out = refused.apply(&format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: app-{i}}}\ndata: {{a: \"1\"}}\n"));
        match out {
            Err(out) => {
                assert!(out.stderr.contains("failed calling webhook"), "{}", out.describe());
                break;
            }
            Ok(_) => assert!(Instant::now() < deadline, "a server pinned to another name was never called"),
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    let log = other.log_text();
    assert!(log.contains("refused a client certificate named [\"kube-apiserver-kubelet-client\""), "{log}");
    assert!(!log.contains(&refused.name), "the refused server answered a request of the namespace:\n{log}");
    for name in &names {
        cluster.kubectl(&["delete", "mutatingwebhookconfiguration", name, "--ignore-not-found"]);
    }
}
