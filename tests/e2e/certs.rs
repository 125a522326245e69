//! Server-managed certificates on a real API server (docs/behaviour.md §10.3, acceptance scenario
//! 16): two servers share one Secret, write the CA bundle into the chart's webhook
//! configurations (rendered without one), and rotate every few seconds while a load of
//! admissions runs through a proxy that spreads the API server's connections over both.

use std::net::{TcpListener, TcpStream};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::confighistory::{
    http_ok, registration, service_account_kubeconfig, wait_until_authorized, ChartRelease, Registration, NAMESPACE,
};
use crate::support::{cluster, free_port, repo_root, run_id, wait_for, wait_for_value, Cluster, TestNamespace, WEBHOOK_IDENTITY};

/// Lifetime of each CA and certificate: a rotation every ~13 s (at a third left).
const VALIDITY_SECONDS: &str = "20";
/// How long the admissions run: several rotations.
const LOAD: Duration = Duration::from_secs(50);

/// A TCP proxy on `host`: each connection goes to the next backend in turn, bytes copied both
/// ways (TLS passes through, so the API server sees each server's own certificate).
fn proxy(host: &str, backends: Vec<String>, stop: Arc<AtomicBool>) -> u16 {
    let listener = TcpListener::bind((host, 0)).expect("bind the proxy");
    let port = listener.local_addr().unwrap().port();
    let next = AtomicUsize::new(0);
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            if stop.load(Ordering::Relaxed) {
                return;
            }
            let Ok(client) = conn else { continue };
            let backend = &backends[next.fetch_add(1, Ordering::Relaxed) % backends.len()];
            let Ok(server) = TcpStream::connect(backend) else { continue };
            for (mut from, mut to) in [(client.try_clone().unwrap(), server.try_clone().unwrap()), (server, client)] {
                std::thread::spawn(move || {
                    let _ = std::io::copy(&mut from, &mut to);
                    let _ = to.shutdown(std::net::Shutdown::Write);
                });
            }
        }
    });
    port
}

/// Accepts any certificate: the probe only wants to see which one a server presents.
#[derive(Debug)]
struct AnyCert(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for AnyCert {
    fn verify_server_cert(
        &self,
        _: &rustls::pki_types::CertificateDer<'_>,
        _: &[rustls::pki_types::CertificateDer<'_>],
        _: &rustls::pki_types::ServerName<'_>,
        _: &[u8],
        _: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        m: &[u8],
        c: &rustls::pki_types::CertificateDer<'_>,
        d: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(m, c, d, &self.0.signature_verification_algorithms)
    }
    fn verify_tls13_signature(
        &self,
        m: &[u8],
        c: &rustls::pki_types::CertificateDer<'_>,
        d: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(m, c, d, &self.0.signature_verification_algorithms)
    }
    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// The leaf certificate `addr` serves (DER), by a TLS handshake.
pub(crate) fn served_certificate(addr: &str) -> Option<Vec<u8>> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .ok()?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyCert(provider)))
        .with_no_client_auth();
    let host = addr.rsplit_once(':')?.0.to_owned();
    let name = rustls::pki_types::ServerName::try_from(host).ok()?;
    let mut conn = rustls::ClientConnection::new(Arc::new(config), name).ok()?;
    let mut sock = TcpStream::connect(addr).ok()?;
    sock.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    while conn.is_handshaking() {
        conn.complete_io(&mut sock).ok()?;
    }
    Some(conn.peer_certificates()?.first()?.to_vec())
}

/// One server process under tests/e2e/run-webhook; stopped when dropped.
struct Server {
    log_file: std::path::PathBuf,
    listen: String,
    lifeline: Option<(Child, ChildStdin)>,
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some((mut child, stdin)) = self.lifeline.take() {
            drop(stdin);
            let _ = child.wait();
        }
        if std::thread::panicking() {
            eprintln!("log {}:\n{}", self.log_file.display(), std::fs::read_to_string(&self.log_file).unwrap_or_default());
        }
    }
}

/// `confighistory serve` in managed mode on `listen`, as replica `replica` of release `name`.
fn start_server(
    cluster: &Cluster,
    name: &str,
    replica: &str,
    kubeconfig: &std::path::Path,
    wrapper_args: &[String],
    listen: &str,
) -> Server {
    let host = cluster.webhook_host.as_str();
    let listen = listen.to_owned();
    let health = format!("127.0.0.1:{}", free_port("127.0.0.1"));
    let log_file = cluster.state_dir.join(format!("logs/{name}-{replica}.log"));
    let mut command = Command::new(repo_root().join("tests/e2e/run-webhook"));
    command
        .arg(&log_file)
        .args(wrapper_args)
        .arg("--")
        .arg(env!("CARGO_BIN_EXE_confighistory"))
        .args(["serve", "--listen", &listen, "--health-listen", &health, "--no-controllers", "--effective-config="])
        .args(["--identity", WEBHOOK_IDENTITY, "--namespace", NAMESPACE])
        .args(["--tls-secret", &format!("{name}-certs"), "--tls-names", host, "--webhook-configurations", name])
        .args(["--tls-validity", VALIDITY_SECONDS, "--replica-id", replica])
        .env("KUBECONFIG", kubeconfig)
        .env("CONFIGHISTORY_E2E_DIR", &cluster.state_dir)
        .env("CONFIGHISTORY_E2E_ADMIN_KUBECONFIG", &cluster.kubeconfig)
        .env("CONFIGHISTORY_KUBECTL", &cluster.kubectl)
        .env("RUST_LOG", "info")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit());
    let mut child = command.spawn().expect("start tests/e2e/run-webhook");
    let stdin = child.stdin.take().expect("piped stdin");
    let server = Server { log_file, listen, lifeline: Some((child, stdin)) };
    wait_for(&format!("server {replica} ready (serving a certificate)"), Duration::from_secs(60), || http_ok(&health, "/readyz"));
    server
}

/// Whether `cert` (DER) verifies for `host` against the CA bundle `pem`, now.
pub(crate) fn verifies(cert: &[u8], pem: &str, host: &str) -> bool {
    use rustls::client::danger::ServerCertVerifier as _;
    use rustls::pki_types::pem::PemObject as _;
    let mut roots = rustls::RootCertStore::empty();
    for c in rustls::pki_types::CertificateDer::pem_slice_iter(pem.as_bytes()).flatten() {
        let _ = roots.add(c);
    }
    let Ok(verifier) =
        rustls::client::WebPkiServerVerifier::builder_with_provider(Arc::new(roots), Arc::new(rustls::crypto::ring::default_provider()))
            .build()
    else {
        return false;
    };
    let Ok(name) = rustls::pki_types::ServerName::try_from(host.to_owned()) else { return false };
    let cert = rustls::pki_types::CertificateDer::from(cert.to_vec());
    verifier.verify_server_cert(&cert, &[], &name, &[], rustls::pki_types::UnixTime::now()).is_ok()
}

fn fingerprint(der: &[u8]) -> String {
    use sha2::Digest as _;
    sha2::Sha256::digest(der).iter().take(6).map(|b| format!("{b:02x}")).collect()
}

/// The CA bundle (PEM) each webhook of the run's two configurations carries.
fn bundles(cluster: &Cluster, name: &str) -> Vec<String> {
    use base64::Engine as _;
    let mut out = Vec::new();
    for kind in ["mutatingwebhookconfiguration", "validatingwebhookconfiguration"] {
        let c = cluster.kubectl(&["get", kind, name, "-o", "json"]).expect_success().json();
        for hook in c["webhooks"].as_array().unwrap() {
            let b = hook["clientConfig"]["caBundle"].as_str().unwrap_or_default();
            out.push(String::from_utf8(base64::engine::general_purpose::STANDARD.decode(b).unwrap()).unwrap());
        }
    }
    out
}

fn secret_data(cluster: &Cluster, name: &str) -> Option<Value> {
    let out = cluster.kubectl(&["get", "secret", &format!("{name}-certs"), "-n", NAMESPACE, "-o", "json"]);
    out.success.then(|| out.json()["data"].clone())
}

fn decoded(data: &Value, key: &str) -> String {
    use base64::Engine as _;
    String::from_utf8(base64::engine::general_purpose::STANDARD.decode(data[key].as_str().unwrap_or_default()).unwrap()).unwrap()
}

fn workloads(i: usize) -> String {
    let mut items = Vec::new();
    for j in 0..5 {
        items.push(serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": format!("load-{i}-{j}")}, "data": {"n": format!("{j}")}}));
        items.push(serde_json::json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": format!("load-{i}-{j}")},
            "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "load"}},
                "template": {"metadata": {"labels": {"app": "load"}}, "spec": {
                    "containers": [{"name": "c", "image": "load", "envFrom": [{"configMapRef": {"name": "app-config"}}]}]}}}}));
    }
    serde_json::json!({"apiVersion": "v1", "kind": "List", "items": items}).to_string()
}

#[test]
fn servers_rotate_their_own_certificates_under_load_without_a_failed_admission() {
    let Some(cluster) = cluster() else { return };
    if registration() != Registration::Chart {
        eprintln!("e2e: the chart's RBAC is needed (helm): skipped");
        return;
    }
    let run = format!("{}c", run_id());
    let name = format!("confighistory-{run}");
    let host = cluster.webhook_host.clone();
    let run_dir = cluster.state_dir.join(format!("run/{name}"));
    std::fs::create_dir_all(&run_dir).unwrap();
    cluster.apply_cluster_scoped(&format!("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {NAMESPACE}\n"));

    // Two servers behind one URL, through the proxy.
    let stop = Arc::new(AtomicBool::new(false));
    let backends: Arc<Mutex<Vec<String>>> = Arc::default();
    let proxy_listen = {
        // Ports chosen first, so the proxy knows its backends before the servers start.
        let a = format!("{host}:{}", free_port(&host));
        let b = format!("{host}:{}", free_port(&host));
        backends.lock().unwrap().extend([a, b]);
        proxy(&host, backends.lock().unwrap().clone(), stop.clone())
    };
    let url_base = format!("https://{host}:{proxy_listen}");
    let chart = ChartRelease { cluster, name: &name, run: &run, url_base: &url_base, ca_pem: "" };
    cluster.kubectl_stdin(&["apply", "-f", "-"], &chart.render(&["templates/rbac.yaml"], &[])).expect_success();
    let kubeconfig = service_account_kubeconfig(cluster, &run_dir.join("serviceaccount.kubeconfig"));
    wait_until_authorized(cluster, &kubeconfig, &name);
    let configurations = chart.render(
        &["templates/mutatingwebhookconfiguration.yaml", "templates/validatingwebhookconfiguration.yaml"],
        &["--set", "webhook.failurePolicy=Fail"],
    );
    // A `caBundle` field, not the word (the chart's comments say why it renders none).
    let fields = configurations.lines().filter(|l| !l.trim_start().starts_with('#'));
    assert!(fields.clone().all(|l| !l.contains("caBundle")), "rendered without a caBundle:\n{configurations}");

    let mut cleanup: Vec<String> = ["mutatingwebhookconfiguration", "validatingwebhookconfiguration"]
        .iter()
        .flat_map(|k| ["--unregister".to_owned(), format!("{k}/{name}")])
        .collect();
    cleanup.extend([
        "--cleanup".into(),
        format!("clusterrole/{name} clusterrolebinding/{name} clusterrole/{name}-certs clusterrolebinding/{name}-certs"),
        "--cleanup".into(),
        format!("-n {NAMESPACE} role/{name}-leader-election rolebinding/{name}-leader-election role/{name}-certs rolebinding/{name}-certs secret/{name}-certs"),
    ]);
    // The servers listen where the proxy sends: start each on its chosen address.
    let chosen = backends.lock().unwrap().clone();
    let a = start_server(cluster, &name, "a", &kubeconfig, &cleanup, &chosen[0]);
    let b = start_server(cluster, &name, "b", &kubeconfig, &[], &chosen[1]);

    // The Secret is made by the servers; the chart's configurations get its bundle.
    cluster.kubectl_stdin(&["apply", "-f", "-"], &configurations).expect_success();
    let data = wait_for_value("the servers to create their Secret", Duration::from_secs(30), || secret_data(cluster, &name));
    for key in ["ca.crt", "ca.key", "tls.crt", "tls.key"] {
        assert!(data[key].as_str().is_some_and(|v| !v.is_empty()), "Secret lacks {key}");
    }
    wait_for("the servers to write the caBundle", Duration::from_secs(30), || {
        let bundle = secret_data(cluster, &name).map(|d| decoded(&d, "ca.crt")).unwrap_or_default();
        bundles(cluster, &name).iter().all(|b| !b.is_empty() && *b == bundle)
    });
    // Read raw: managedFields whatever kubectl's version hides by default.
    let path = format!("/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/{name}");
    let mwc = cluster.kubectl(&["get", "--raw", &path]).expect_success().json();
    let managers: Vec<&str> = mwc["metadata"]["managedFields"].as_array().unwrap().iter().filter_map(|m| m["manager"].as_str()).collect();
    assert!(managers.contains(&"confighistory-certs"), "caBundle written under its own field manager: {managers:?}");

    // A re-apply of the rendered configurations (what Helm, Argo CD or Flux do) leaves it.
    cluster.kubectl_stdin(&["apply", "--server-side", "--field-manager=gitops", "-f", "-"], &configurations).expect_success();
    assert!(bundles(cluster, &name).iter().all(|b| b.contains("BEGIN CERTIFICATE")), "a re-apply removed the caBundle");

    let ns = TestNamespace::in_run(cluster, Some(&run), "certs", &[]);
    ns.accepts("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: app-config\ndata:\n  a: b\n");
    // Called: a forged snapshot is refused by snapshot protection.
    let forged =
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: forged\n  labels:\n    confighistory.io/hash: forged\ndata:\n  a: b\n";
    wait_for("the API server to call the servers", Duration::from_secs(30), || {
        let out = cluster.kubectl_stdin(&["create", "--dry-run=server", "-n", &ns.name, "-f", "-"], forged);
        !out.success && out.stderr.contains("admission webhook")
    });

    // The load, and a probe of what each server serves.
    let done = Arc::new(AtomicBool::new(false));
    let (ok, failed) = (Arc::new(AtomicUsize::new(0)), Arc::new(Mutex::new(Vec::<String>::new())));
    let mut threads = Vec::new();
    for i in 0..4 {
        let (done, ok, failed, nsname) = (done.clone(), ok.clone(), failed.clone(), ns.name.clone());
        let list = workloads(i);
        threads.push(std::thread::spawn(move || {
            let cluster = crate::support::cluster().unwrap();
            while !done.load(Ordering::Relaxed) {
                let out = cluster.kubectl_stdin(&["create", "--dry-run=server", "-n", &nsname, "-f", "-", "-o", "json"], &list);
                let pinned = out.success && out.stdout.contains("app-config-");
                if pinned {
                    ok.fetch_add(1, Ordering::Relaxed);
                } else {
                    failed.lock().unwrap().push(out.describe());
                }
            }
        }));
    }
    let started = Instant::now();
    let mut samples = Vec::new();
    let mut untrusted = Vec::new();
    while started.elapsed() < LOAD {
        let t = started.elapsed().as_millis();
        // What each serves must verify against the webhooks' bundle, as the API server checks it:
        // the bundle read before or after the handshakes (it may change in between).
        let before = bundles(cluster, &name);
        let served = [served_certificate(&a.listen), served_certificate(&b.listen)];
        let after = bundles(cluster, &name);
        for (server, cert) in ["a", "b"].iter().zip(&served) {
            let cert = cert.as_ref().unwrap_or_else(|| panic!("server {server} served no certificate at {t} ms"));
            let trusted = |bundles: &[String]| bundles.iter().all(|b| verifies(cert, b, &host));
            if !trusted(&before) && !trusted(&after) {
                untrusted.push(format!("{t} ms: server {server} serves {} that the webhooks' bundle does not verify", fingerprint(cert)));
            }
        }
        samples.push((t, served[0].as_deref().map(fingerprint), served[1].as_deref().map(fingerprint)));
    }
    done.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().unwrap();
    }

    let leaves: std::collections::BTreeSet<&String> = samples.iter().flat_map(|(_, a, b)| [a.as_ref(), b.as_ref()]).flatten().collect();
    let (mut longest, mut since) = (0u128, None);
    for (t, x, y) in &samples {
        if x != y {
            let s = *since.get_or_insert(*t);
            longest = longest.max(t - s);
        } else {
            since = None;
        }
    }
    let failures = failed.lock().unwrap().clone();
    eprintln!("certs: {} samples, {} with an untrusted certificate", samples.len(), untrusted.len());
    eprintln!(
        "certs: {} kubectl calls of 10 objects admitted, {} failed; {} certificates served in {} s; the servers differed for at most {longest} ms",
        ok.load(Ordering::Relaxed),
        failures.len(),
        leaves.len(),
        LOAD.as_secs()
    );
    assert!(untrusted.is_empty(), "{} samples served an untrusted certificate:\n{}", untrusted.len(), untrusted.join("\n"));
    assert!(failures.is_empty(), "{} failed admissions, first:\n{}", failures.len(), failures[0]);
    assert!(ok.load(Ordering::Relaxed) > 20, "too little load ran");
    assert!(leaves.len() >= 3, "rotated at least twice in {} s: {leaves:?}", LOAD.as_secs());
    assert!(longest <= 5_000, "the two servers served different certificates for {longest} ms");
    let bundle = decoded(&secret_data(cluster, &name).unwrap(), "ca.crt");
    assert!(bundle.matches("BEGIN CERTIFICATE").count() <= 2, "old CAs leave the bundle:\n{bundle}");

    // The start-over runbook (docs/operations.md): the Secret deleted. The servers make a new one
    // whose bundle generation is above the one the webhooks carry, so its CA reaches them within
    // seconds and admissions go on. (Counted from the new Secret alone, its generation re-used
    // one the webhooks carried, and the new CA was never written into them.)
    let generation = || -> u64 {
        let c = cluster.kubectl(&["get", "mutatingwebhookconfiguration", &name, "-o", "json"]).expect_success().json();
        c["metadata"]["annotations"]["confighistory.io/ca-bundle-generation"].as_str().and_then(|g| g.parse().ok()).unwrap_or(0)
    };
    let carried = generation();
    assert!(carried > 1, "rotations counted generations: {carried}");
    cluster.kubectl(&["delete", "secret", &format!("{name}-certs"), "-n", NAMESPACE]).expect_success();
    let started_over = Instant::now();
    let fresh = wait_for_value("the servers to make a new Secret", Duration::from_secs(30), || {
        secret_data(cluster, &name).map(|d| decoded(&d, "ca.crt")).filter(|b| !b.is_empty() && *b != bundle)
    });
    wait_for("the new CA to reach the webhooks", Duration::from_secs(30), || {
        bundles(cluster, &name).iter().all(|b| b.contains(fresh.trim()))
    });
    assert!(generation() > carried, "the new bundle's generation {} is above the {carried} the webhooks carried", generation());
    wait_for("the API server to call the servers again", Duration::from_secs(30), || {
        let out = cluster.kubectl_stdin(&["create", "--dry-run=server", "-n", &ns.name, "-f", "-"], forged);
        !out.success && out.stderr.contains("admission webhook")
    });
    eprintln!("certs: start-over converged in {:?}", started_over.elapsed());
    stop.store(true, Ordering::Relaxed);
    drop(b);
    drop(a);
}

/// Deletes a cluster-scoped object when dropped (a failed test leaves no webhook behind).
struct Delete(&'static Cluster, String);

impl Drop for Delete {
    fn drop(&mut self) {
        self.0.kubectl(&["delete", "--ignore-not-found", &self.1]);
    }
}

/// docs/operations.md "The rotation's timings": what the settle time waits for, measured. A
/// webhook configuration of the test's own (snapshot protection of the shared server, on
/// ConfigMaps labelled `probe` in one namespace, failurePolicy Fail: it answers with a refusal)
/// has its `caBundle` switched
/// between one that trusts the server and one that does not (the cluster's own CA); after each
/// write, dry-run creates show when the API server calls with the new bundle. That lag must stay
/// well inside the settle time at the shortest validity (4 s at 60 s).
#[test]
fn the_api_server_calls_with_a_changed_ca_bundle_within_a_second() {
    use base64::Engine as _;
    let Some(cluster) = cluster() else { return };
    let server = crate::support::confighistory::webhook(cluster);
    let ns = TestNamespace::excluded(cluster, "cabundle");
    let b64 = |pem: &str| base64::engine::general_purpose::STANDARD.encode(pem);
    let good = b64(&server.ca_pem);
    let bad = cluster
        .kubectl(&["config", "view", "--raw", "--minify", "--flatten", "-o", "jsonpath={.clusters[0].cluster.certificate-authority-data}"])
        .expect_success()
        .stdout
        .trim()
        .to_owned();
    assert!(!bad.is_empty() && bad != good, "the cluster's CA differs from the webhook's");
    let name = format!("confighistory-probe-{}", run_id());
    let _cleanup = Delete(cluster, format!("validatingwebhookconfiguration/{name}"));
    cluster.apply_cluster_scoped(&format!(
        "apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata:
  name: {name}
webhooks:
- name: probe.confighistory.io
  clientConfig:
    url: {url}/protect
    caBundle: {bad}
  rules:
  - {{operations: [CREATE], apiGroups: [\"\"], apiVersions: [v1], resources: [configmaps]}}
  namespaceSelector: {{matchLabels: {{kubernetes.io/metadata.name: {ns}}}}}
  objectSelector: {{matchLabels: {{probe: \"1\"}}}}
  failurePolicy: Fail
  sideEffects: None
  admissionReviewVersions: [v1]
  timeoutSeconds: 5
",
        url = server.url_base,
        ns = ns.name
    ));
    let probe = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: probe\n  labels: {probe: \"1\"}\ndata: {a: b}\n";
    // Whether the API server's call got through (Some(true)), failed its TLS check (Some(false)),
    // or neither (None: something else went wrong).
    let call = || {
        let out = cluster.kubectl_stdin(&["create", "--dry-run=server", "-n", &ns.name, "-f", "-"], probe);
        // Snapshot protection answers (it refuses the object: /protect is registered for
        // snapshot-labelled ConfigMaps only): the call got through.
        if out.success || out.stderr.contains("\"probe.confighistory.io\" denied the request") {
            Ok(true)
        } else if out.stderr.contains("failed calling webhook") && out.stderr.contains("x509") {
            Ok(false)
        } else {
            Err(out.describe())
        }
    };
    let set = |bundle: &str| {
        let patch = format!("[{{\"op\": \"replace\", \"path\": \"/webhooks/0/clientConfig/caBundle\", \"value\": \"{bundle}\"}}]");
        cluster.kubectl(&["patch", "validatingwebhookconfiguration", &name, "--type=json", "-p", &patch]).expect_success();
        Instant::now()
    };
    wait_for("the untrusting bundle to fail the call", Duration::from_secs(30), || call() == Ok(false));
    let (mut lags, mut calls) = (Vec::new(), 0);
    for round in 0..8 {
        let (bundle, want) = if round % 2 == 0 { (&good, true) } else { (&bad, false) };
        let written = set(bundle);
        loop {
            calls += 1;
            match call() {
                Ok(got) if got == want => break,
                Ok(_) => {}
                Err(out) => panic!("round {round}: a call neither got through nor failed its TLS check: {out}"),
            }
            assert!(written.elapsed() < Duration::from_secs(30), "round {round}: the API server kept the old bundle for 30 s");
        }
        lags.push(written.elapsed());
    }
    lags.sort();
    let (median, max) = (lags[lags.len() / 2], lags[lags.len() - 1]);
    eprintln!(
        "MEASURE caBundle change to the API server calling with it: median {median:?}, max {max:?} over {} writes, {calls} dry runs \
         (each ~0.1 s of kubectl; as many as writes: the first call after each write already used the new bundle)",
        lags.len()
    );
    assert!(max < Duration::from_secs(4), "the API server took {max:?} to use a changed caBundle: the settle time at 60 s is 4 s");
}
