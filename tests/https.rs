//! The admission server over real HTTPS: a real TLS client, certificates from `certs/generate`,
//! hot reload of a rotated certificate, and the limits that protect the server from slow or
//! abusive clients.

use std::path::Path;
use std::process::Command;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::{json, Value};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};

use confighistory::cache::State;
use confighistory::cluster::MemoryCluster;
use confighistory::model::policy::Policy;
use confighistory::webhook::{self, tls, App};

fn generate(dir: &Path, cn: &str) {
    let status = Command::new(concat!(env!("CARGO_MANIFEST_DIR"), "/certs/generate"))
        .args(["--out", dir.to_str().unwrap(), "--ip", "127.0.0.1", "--dns", "localhost", "--cn", cn])
        .status()
        .expect("certs/generate runs (needs openssl)");
    assert!(status.success());
}

struct Server {
    addr: std::net::SocketAddr,
    /// The plain-HTTP health and metrics port, as `serve` runs it beside the admission port.
    health: std::net::SocketAddr,
}

async fn start(dir: &Path) -> Server {
    start_with(dir, None).await
}

async fn start_with(dir: &Path, client_auth: Option<Arc<tls::ClientAuth>>) -> Server {
    let (config, resolver) = tls::server_config(&dir.join("tls.crt"), &dir.join("tls.key"), client_auth.clone()).unwrap();
    if let Some(auth) = client_auth {
        tokio::spawn(tls::watch_client_ca(auth, Duration::from_millis(100)));
    }
    let ready = Arc::new(AtomicBool::new(false));
    tokio::spawn(tls::watch(dir.join("tls.crt"), dir.join("tls.key"), resolver, ready.clone(), Duration::from_millis(100)));
    let mut app =
        App::ready(Policy::default(), Arc::new(confighistory::cache::Lock::new(State::default())), Arc::new(MemoryCluster::default()));
    app.tls_ready = ready;
    let app = Arc::new(app);
    let health = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let health_addr = health.local_addr().unwrap();
    let health_app = app.clone();
    tokio::spawn(async move { axum::serve(health, webhook::health_router(health_app)).await });
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(confighistory::webhook::serve::serve_tls(listener, tokio_rustls::TlsAcceptor::from(config), webhook::router(app)));
    Server { addr, health: health_addr }
}

fn client_config(ca: &Path, versions: &[&'static rustls::SupportedProtocolVersion]) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca).unwrap() {
        roots.add(cert.unwrap()).unwrap();
    }
    Arc::new(
        rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_protocol_versions(versions)
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth(),
    )
}

async fn post(server: &Server, config: Arc<rustls::ClientConfig>, body: Value) -> Result<(u16, Value), String> {
    let tcp = TcpStream::connect(server.addr).await.map_err(|e| e.to_string())?;
    let tls = tokio_rustls::TlsConnector::from(config)
        .connect(ServerName::IpAddress(server.addr.ip().into()), tcp)
        .await
        .map_err(|e| format!("handshake: {e}"))?;
    let (mut send, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tls)).await.map_err(|e| e.to_string())?;
    tokio::spawn(conn);
    let req = hyper::Request::post("/mutate")
        .header("host", "127.0.0.1")
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(serde_json::to_vec(&body).unwrap())))
        .unwrap();
    let resp = send.send_request(req).await.map_err(|e| e.to_string())?;
    let status = resp.status().as_u16();
    let bytes = resp.into_body().collect().await.map_err(|e| e.to_string())?.to_bytes();
    Ok((status, serde_json::from_slice(&bytes).unwrap_or(Value::Null)))
}

fn review() -> Value {
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "tls-1", "kind": {"group": "", "version": "v1", "kind": "ConfigMap"},
        "resource": {"group": "", "version": "v1", "resource": "configmaps"}, "name": "x", "namespace": "shop",
        "operation": "CREATE", "userInfo": {"username": "alice"},
        "object": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "namespace": "shop"}, "data": {"a": "1"}}}})
}

#[tokio::test]
async fn answers_admission_reviews_over_tls_1_2_and_1_3() {
    let dir = tempdir("answers");
    generate(&dir, "first");
    let server = start(&dir).await;
    for versions in [&[&rustls::version::TLS13][..], &[&rustls::version::TLS12][..]] {
        let (status, body) = post(&server, client_config(&dir.join("ca.crt"), versions), review()).await.unwrap();
        assert_eq!(status, 200);
        assert_eq!(body["response"]["uid"], "tls-1");
        assert_eq!(body["response"]["allowed"], true);
    }
}

#[tokio::test]
async fn picks_up_a_rotated_certificate_without_restart() {
    let dir = tempdir("rotate");
    generate(&dir, "first");
    let server = start(&dir).await;
    let old_ca = dir.join("ca-old.crt");
    std::fs::copy(dir.join("ca.crt"), &old_ca).unwrap();
    assert!(post(&server, client_config(&old_ca, &[&rustls::version::TLS13]), review()).await.is_ok());

    // A new CA and serving pair, written in place like a Secret update.
    for f in ["ca.crt", "ca.key"] {
        std::fs::remove_file(dir.join(f)).unwrap();
    }
    generate(&dir, "second");
    let new = client_config(&dir.join("ca.crt"), &[&rustls::version::TLS13]);
    let mut ok = false;
    for _ in 0..50 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        if post(&server, new.clone(), review()).await.is_ok() {
            ok = true;
            break;
        }
    }
    assert!(ok, "the server serves the new certificate");
    let err = post(&server, client_config(&old_ca, &[&rustls::version::TLS13]), review()).await.unwrap_err();
    assert!(err.contains("handshake"), "{err}");
}

#[tokio::test]
async fn oversized_headers_are_refused() {
    let dir = tempdir("headers");
    generate(&dir, "first");
    let server = start(&dir).await;
    let tcp = TcpStream::connect(server.addr).await.unwrap();
    let mut tls = tokio_rustls::TlsConnector::from(client_config(&dir.join("ca.crt"), &[&rustls::version::TLS13]))
        .connect(ServerName::IpAddress(server.addr.ip().into()), tcp)
        .await
        .unwrap();
    let huge = format!("POST /mutate HTTP/1.1\r\nhost: x\r\nx-big: {}\r\n\r\n", "a".repeat(200 * 1024));
    let _ = tls.write_all(huge.as_bytes()).await;
    let mut buf = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), tokio::io::AsyncReadExt::read_to_end(&mut tls, &mut buf)).await;
    let text = String::from_utf8_lossy(&buf);
    assert!(text.is_empty() || text.starts_with("HTTP/1.1 431"), "{text}");
}

/// A client certificate (clientAuth) signed by `dir`'s CA, named `cn`, with `dns` as SAN DNS
/// names, as the API server's would be.
fn client_certificate(dir: &Path, cn: &str, dns: &[&str]) -> (Vec<CertificateDer<'static>>, rustls::pki_types::PrivateKeyDer<'static>) {
    let run = |args: &[&str]| assert!(Command::new("openssl").args(args).current_dir(dir).status().expect("openssl").success(), "{args:?}");
    let subject = format!("/CN={cn}");
    run(&[
        "req",
        "-new",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
        "-keyout",
        "client.key",
        "-subj",
        &subject,
        "-out",
        "client.csr",
    ]);
    let mut ext = "extendedKeyUsage=clientAuth\n".to_owned();
    if !dns.is_empty() {
        ext += &format!("subjectAltName={}\n", dns.iter().map(|d| format!("DNS:{d}")).collect::<Vec<_>>().join(","));
    }
    std::fs::write(dir.join("client.ext"), ext).unwrap();
    run(&[
        "x509",
        "-req",
        "-in",
        "client.csr",
        "-CA",
        "ca.crt",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-days",
        "1",
        "-extfile",
        "client.ext",
        "-out",
        "client.crt",
    ]);
    let certs = CertificateDer::pem_file_iter(dir.join("client.crt")).unwrap().map(Result::unwrap).collect();
    (certs, rustls::pki_types::PrivateKeyDer::from_pem_file(dir.join("client.key")).unwrap())
}

/// A TLS 1.3 client trusting `server_ca` and presenting `cert`.
fn with_cert(
    server_ca: &Path,
    (certs, key): (Vec<CertificateDer<'static>>, rustls::pki_types::PrivateKeyDer<'static>),
) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(CertificateDer::pem_file_iter(server_ca).unwrap().next().unwrap().unwrap()).unwrap();
    Arc::new(
        rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_protocol_versions(&[&rustls::version::TLS13])
            .unwrap()
            .with_root_certificates(roots)
            .with_client_auth_cert(certs, key)
            .unwrap(),
    )
}

/// The plain-HTTP health port's answer to `path`: probes and scrapers present no certificate.
async fn health_get(server: &Server, path: &str) -> u16 {
    let tcp = TcpStream::connect(server.health).await.unwrap();
    let (mut send, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tcp)).await.unwrap();
    tokio::spawn(conn);
    let req = hyper::Request::get(path).header("host", "127.0.0.1").body(Full::new(Bytes::new())).unwrap();
    send.send_request(req).await.unwrap().status().as_u16()
}

/// docs/behaviour.md 9a.3: with `--client-ca`, only a client holding a certificate that CA signed
/// (the API server, through its AdmissionConfiguration kubeConfig) gets an answer; any other pod
/// that can open the port gets nothing, not even a refusal of its forged review. The health port
/// stays open to probes, which present no certificate.
#[tokio::test]
async fn with_a_client_ca_only_the_api_servers_certificate_is_answered() {
    let dir = tempdir("mtls");
    generate(&dir, "mtls");
    let server = start_with(&dir, Some(tls::ClientAuth::load(&dir.join("ca.crt"), vec![]).unwrap())).await;
    let anonymous = post(&server, client_config(&dir.join("ca.crt"), &[&rustls::version::TLS13]), review()).await;
    assert!(anonymous.is_err(), "a client without a certificate was answered: {anonymous:?}");
    let anonymous12 = post(&server, client_config(&dir.join("ca.crt"), &[&rustls::version::TLS12]), review()).await;
    assert!(anonymous12.is_err(), "{anonymous12:?}");

    // Signed by another CA: refused too.
    let other = tempdir("mtls-other");
    generate(&other, "other");
    assert!(post(&server, with_cert(&dir.join("ca.crt"), client_certificate(&other, "kube-apiserver", &[])), review()).await.is_err());

    let (status, body) =
        post(&server, with_cert(&dir.join("ca.crt"), client_certificate(&dir, "kube-apiserver", &[])), review()).await.unwrap();
    assert_eq!((status, &body["response"]["uid"]), (200, &json!("tls-1")), "{body}");

    for path in ["/livez", "/readyz", "/metrics"] {
        assert_eq!(health_get(&server, path).await, 200, "{path} on the health port");
    }
}

/// docs/behaviour.md 9a.3: the client certificate's name is pinned. A cluster CA also signs the
/// kubelets' and users' certificates: one of those, signed by the trusted CA but named otherwise,
/// is refused during the handshake. The name may be the subject CN or a SAN DNS name.
#[tokio::test]
async fn a_client_certificate_the_ca_signed_with_another_name_is_refused() {
    let dir = tempdir("mtls-names");
    generate(&dir, "names");
    let auth =
        tls::ClientAuth::load(&dir.join("ca.crt"), vec!["kube-apiserver-kubelet-client".into(), "webhook-client.example".into()]).unwrap();
    let server = start_with(&dir, Some(auth)).await;
    let ca = dir.join("ca.crt");
    for (cn, dns) in
        [("system:node:worker-1", &[][..]), ("alice", &["kube-apiserver.example"][..]), ("kube-apiserver-kubelet-client-x", &[][..])]
    {
        let refused = post(&server, with_cert(&ca, client_certificate(&dir, cn, dns)), review()).await;
        assert!(refused.as_ref().is_err_and(|e| e.contains("handshake") || e.contains("connection")), "{cn} {dns:?}: {refused:?}");
    }
    for (cn, dns) in [("kube-apiserver-kubelet-client", &[][..]), ("other", &["x.example", "webhook-client.example"][..])] {
        let (status, body) = post(&server, with_cert(&ca, client_certificate(&dir, cn, dns)), review()).await.unwrap();
        assert_eq!((status, &body["response"]["uid"]), (200, &json!("tls-1")), "{cn} {dns:?}: {body}");
    }
}

/// docs/behaviour.md 9a.3: the client CA is reloaded without a restart. The file is replaced the
/// way the kubelet updates a mounted ConfigMap (a new file renamed over the old): a client of the
/// old CA is then refused and one of the new CA answered, by the same running server.
#[tokio::test]
async fn a_replaced_client_ca_is_used_without_a_restart() {
    let dir = tempdir("mtls-reload");
    generate(&dir, "reload");
    let (ca1, ca2) = (tempdir("mtls-reload-ca1"), tempdir("mtls-reload-ca2"));
    generate(&ca1, "client-ca-1");
    generate(&ca2, "client-ca-2");
    let bundle = dir.join("client-ca.crt");
    std::fs::copy(ca1.join("ca.crt"), &bundle).unwrap();
    let server = start_with(&dir, Some(tls::ClientAuth::load(&bundle, vec!["kube-apiserver".into()]).unwrap())).await;
    let server_ca = dir.join("ca.crt");
    let client1 = with_cert(&server_ca, client_certificate(&ca1, "kube-apiserver", &[]));
    let client2 = with_cert(&server_ca, client_certificate(&ca2, "kube-apiserver", &[]));
    assert_eq!(post(&server, client1.clone(), review()).await.unwrap().0, 200);
    assert!(post(&server, client2.clone(), review()).await.is_err(), "CA2's client before CA2 is trusted");

    let next = dir.join("client-ca.crt.new");
    std::fs::copy(ca2.join("ca.crt"), &next).unwrap();
    std::fs::rename(&next, &bundle).unwrap();
    let mut answered = false;
    for _ in 0..50 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        if post(&server, client2.clone(), review()).await.is_ok() {
            answered = true;
            break;
        }
    }
    assert!(answered, "a client of the new CA is answered once the file is replaced");
    let refused = post(&server, client1, review()).await;
    assert!(refused.is_err(), "a client of the replaced CA: {refused:?}");

    // A broken file keeps the bundle in use.
    std::fs::write(&bundle, "not a certificate").unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(post(&server, client2, review()).await.unwrap().0, 200);
}

fn tempdir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("confighistory-https-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Every metric the chart's Grafana dashboard and PrometheusRule query is in a real scrape of
/// /metrics after real traffic, and the certificate-expiry gauge holds the served
/// certificate's notAfter.
#[tokio::test]
async fn dashboards_and_alerts_query_only_metrics_the_server_exports() {
    use tower::ServiceExt as _;
    let dir = tempdir("metrics");
    generate(&dir, "metrics");
    let server = start(&dir).await;
    let config = client_config(&dir.join("ca.crt"), &[&rustls::version::TLS13]);
    assert_eq!(post(&server, config.clone(), review()).await.unwrap().0, 200);
    assert_eq!(post(&server, config, json!("not a review")).await.unwrap().0, 400);

    let app = Arc::new(App::ready(
        Policy::default(),
        Arc::new(confighistory::cache::Lock::new(State::default())),
        Arc::new(MemoryCluster::default()),
    ));
    let req = hyper::Request::get("/metrics").body(axum::body::Body::empty()).unwrap();
    let resp = webhook::health_router(app).oneshot(req).await.unwrap();
    let scrape = String::from_utf8(resp.into_body().collect().await.unwrap().to_bytes().to_vec()).unwrap();

    let chart = Path::new(env!("CARGO_MANIFEST_DIR")).join("charts/confighistory");
    let queries = std::fs::read_to_string(chart.join("dashboards/confighistory.json")).unwrap()
        + &std::fs::read_to_string(chart.join("templates/prometheusrule.yaml")).unwrap();
    // The standard process_* families too (metrics::process).
    let mut names: Vec<&str> = ["confighistory_", "process_"]
        .iter()
        .flat_map(|prefix| queries.match_indices(prefix))
        .map(|(i, _)| {
            let rest = &queries[i..];
            &rest[..rest.find(|c: char| !(c.is_ascii_lowercase() || c == '_')).unwrap_or(rest.len())]
        })
        .collect();
    names.sort();
    names.dedup();
    assert!(names.len() >= 10 && names.contains(&"process_resident_memory_bytes"), "{names:?}");
    for name in &names {
        let family = ["_bucket", "_sum", "_count"].iter().find_map(|s| name.strip_suffix(s)).unwrap_or(name);
        assert!(scrape.contains(&format!("# TYPE {family} ")), "{name} is queried by the chart but not exported:\n{scrape}");
    }
    assert!(scrape.contains("confighistory_errors_total{what=\"bad-request\"} "), "{scrape}");
    // The names and labels as exposed by prometheus-client: counters end in `_total` once, the
    // review above is counted with its decision's reason, and every family has its HELP.
    assert!(!scrape.contains("_total_total"), "{scrape}");
    assert!(scrape.contains("# TYPE confighistory_admission_requests_total counter\n"), "{scrape}");
    assert!(scrape.contains("kind=\"ConfigMap\",operation=\"CREATE\",decision=\"allowed\",reason=\""), "{scrape}");
    assert!(scrape.contains("confighistory_cache_synced 1\n"), "{scrape}");
    assert!(scrape.contains(&format!("confighistory_build_info{{version=\"{}\"}} 1\n", env!("CARGO_PKG_VERSION"))), "{scrape}");
    for family in scrape.lines().filter_map(|l| l.strip_prefix("# TYPE ")).map(|l| l.split(' ').next().unwrap()) {
        assert!(scrape.contains(&format!("# HELP {family} ")), "{family} has no HELP");
    }
    let not_after: i64 = scrape
        .lines()
        .find_map(|l| l.strip_prefix("confighistory_tls_certificate_not_after_seconds "))
        .and_then(|v| v.parse().ok())
        .expect("expiry gauge");
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() as i64;
    assert!(not_after > now + 86_400, "the generated certificate is valid for more than a day: {not_after} vs {now}");
    // The same, read by openssl.
    let out = Command::new("openssl").args(["x509", "-noout", "-enddate", "-in"]).arg(dir.join("tls.crt")).output().unwrap();
    let end = String::from_utf8_lossy(&out.stdout);
    let out = Command::new("date").args(["-u", "+%s", "-d"]).arg(end.trim().trim_start_matches("notAfter=")).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim().parse::<i64>().unwrap(), not_after);
}
