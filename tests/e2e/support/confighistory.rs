//! The confighistory server under test: one process per test binary, serving HTTPS on loopback,
//! registered with the API server by `clientConfig.url` and the generated CA bundle.
//!
//! [`webhook()`] starts it on first use (`confighistory serve ...` with the webhook's own
//! identity) and registers the Mutating- and ValidatingWebhookConfigurations. The process is run
//! by `tests/e2e/run-webhook`, which holds a pipe from this test process: when the test binary
//! exits, however it exits, the wrapper unregisters the webhooks and stops the server.

use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::{ca_bundle, free_port, generate_serving_cert, repo_root, Cluster, WEBHOOK_IDENTITY};

/// Name of both webhook configurations.
pub const CONFIGURATION_NAME: &str = "confighistory";
/// The namespace confighistory itself runs in (excluded from its own webhooks by the server).
pub const NAMESPACE: &str = "confighistory";

/// Namespaces with this label are left to controller processes a test runs itself (leader
/// failover, rate limits); the shared server's loops do not act in them.
pub const CONTROLLER_LABEL: &str = "e2e.confighistory.io/controller";

/// The running server.
pub struct Webhook {
    /// `https://127.0.0.1:<port>`; the webhooks use `/mutate`, `/validate` and `/protect`.
    pub url_base: String,
    pub ca_pem: String,
    pub health_url: String,
    pub log_file: PathBuf,
    // Kept open for the life of the test process: closing it stops the server (run-webhook).
    _lifeline: Mutex<(Child, ChildStdin)>,
}

static WEBHOOK: OnceLock<Webhook> = OnceLock::new();

/// The confighistory server for this test binary, started and registered on first use.
pub fn webhook(cluster: &'static Cluster) -> &'static Webhook {
    WEBHOOK.get_or_init(|| start(cluster))
}

fn start(cluster: &'static Cluster) -> Webhook {
    let host = cluster.webhook_host.as_str();
    let run_dir = cluster.state_dir.join(format!("run/confighistory-{}", std::process::id()));
    std::fs::create_dir_all(&run_dir).expect("create the webhook's run dir");
    let ca_pem = generate_serving_cert(&run_dir, host);
    let port = free_port(host);
    let health_port = free_port("127.0.0.1");
    let log_file = cluster.state_dir.join(format!("logs/confighistory-{}.log", std::process::id()));
    let url_base = format!("https://{host}:{port}");
    let listen = format!("{host}:{port}");
    let health_listen = format!("127.0.0.1:{health_port}");

    // The namespace of the leader-election Lease.
    cluster.apply_cluster_scoped(&format!("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {NAMESPACE}\n"));

    let mut command = Command::new(repo_root().join("tests/e2e/run-webhook"));
    command.arg(&log_file);
    for kind in ["mutatingwebhookconfiguration", "validatingwebhookconfiguration"] {
        command.args(["--unregister", &format!("{kind}/{CONFIGURATION_NAME}")]);
    }
    command
        .arg("--")
        .arg(env!("CARGO_BIN_EXE_confighistory"))
        .args(["serve", "--listen", &listen, "--health-listen", &health_listen])
        .arg("--tls-cert")
        .arg(run_dir.join("tls.crt"))
        .arg("--tls-key")
        .arg(run_dir.join("tls.key"))
        .args(["--identity", WEBHOOK_IDENTITY, "--namespace", NAMESPACE])
        // Controller loops (tests/e2e/controller.rs): a short settle window and resync so the
        // scenarios finish fast; namespaces labelled CONTROLLER_LABEL get controllers of their own.
        .args(["--settle", "2", "--resync-interval", "5", "--shutdown-delay", "0"])
        .arg(format!("--controller-namespace-selector=!{CONTROLLER_LABEL}"))
        .env("KUBECONFIG", &cluster.webhook_kubeconfig)
        .env("CONFIGHISTORY_E2E_DIR", &cluster.state_dir)
        .env("CONFIGHISTORY_E2E_ADMIN_KUBECONFIG", &cluster.kubeconfig)
        .env("CONFIGHISTORY_KUBECTL", &cluster.kubectl)
        .env("RUST_LOG", std::env::var("RUST_LOG").unwrap_or_else(|_| "info".into()))
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit());
    let mut child = command.spawn().expect("start tests/e2e/run-webhook");
    let stdin = child.stdin.take().expect("piped stdin");

    let health_url = format!("http://{health_listen}/readyz");
    let deadline = Instant::now() + Duration::from_secs(60);
    while !http_ok(&health_listen, "/readyz") {
        if let Ok(Some(status)) = child.try_wait() {
            panic!(
                "confighistory exited ({status}) before it was ready; log {}:\n{}",
                log_file.display(),
                std::fs::read_to_string(&log_file).unwrap_or_default()
            );
        }
        if Instant::now() > deadline {
            panic!(
                "confighistory not ready at {health_url} after 60 s; log {}:\n{}",
                log_file.display(),
                std::fs::read_to_string(&log_file).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }

    register_confighistory_webhooks(cluster, &url_base, &ca_pem);
    Webhook { url_base, ca_pem, health_url, log_file, _lifeline: Mutex::new((child, stdin)) }
}

/// A plain HTTP GET that reports whether the answer was 200.
fn http_ok(addr: &str, path: &str) -> bool {
    use std::io::{Read, Write};
    let Ok(mut stream) = std::net::TcpStream::connect(addr) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    if write!(stream, "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").is_err() {
        return false;
    }
    let mut response = String::new();
    let _ = stream.read_to_string(&mut response);
    response.starts_with("HTTP/1.1 200") || response.starts_with("HTTP/1.0 200")
}

/// Registers confighistory's webhooks at `url_base` and waits (up to 10 s) until the API server
/// calls them: a server-side dry run of a forged snapshot is denied by snapshot protection.
///
/// The configurations come from [`webhook_configurations`] (the shape the product needs), or,
/// with `CONFIGHISTORY_E2E_WEBHOOKS=chart`, from the Helm chart in url mode
/// ([`chart_webhook_configurations`]), so the suite can prove the chart's rendering too.
pub fn register_confighistory_webhooks(cluster: &Cluster, url_base: &str, ca_pem: &str) {
    let manifests = match std::env::var("CONFIGHISTORY_E2E_WEBHOOKS").as_deref() {
        Ok("chart") => chart_webhook_configurations(url_base, ca_pem),
        _ => webhook_configurations(url_base, ca_pem, "Fail").iter().map(Value::to_string).collect::<Vec<_>>().join("\n---\n"),
    };
    cluster.kubectl_stdin(&["apply", "-f", "-"], &manifests).expect_success();

    let forged = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: e2e-registration-probe\n  \
                  namespace: default\n  labels:\n    confighistory.io/hash: forged\ndata:\n  a: b\n";
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        let probe = cluster.kubectl_stdin(&["create", "--dry-run=server", "-f", "-"], forged);
        if !probe.success && probe.stderr.contains("admission webhook") {
            return;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    eprintln!("e2e: the forged-snapshot probe was not denied within 10 s; going on");
}

/// The Mutating- and ValidatingWebhookConfiguration `confighistory`, calling `url_base` +
/// `/mutate`, `/validate`, `/protect`. `failure_policy` applies to the main webhooks (the tests
/// use `Fail`, so a broken server shows); snapshot protection is Fail for CREATE/UPDATE and
/// Ignore for DELETE (spec §6.4).
pub fn webhook_configurations(url_base: &str, ca_pem: &str, failure_policy: &str) -> [Value; 2] {
    let bundle = ca_bundle(ca_pem);
    let client = |path: &str| json!({"url": format!("{}{path}", url_base.trim_end_matches('/')), "caBundle": bundle});
    // The server excludes kube-system, kube-public, kube-node-lease and its own namespace by
    // name (clusters before 1.21 have no kubernetes.io/metadata.name label to select on).
    let namespace_selector = json!({
        "matchExpressions": [{"key": super::EXCLUDE_LABEL, "operator": "DoesNotExist"}]
    });
    let configmap_rules = |operations: &[&str]| {
        json!([{
            "apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps"],
            "operations": operations, "scope": "Namespaced",
        }])
    };
    let workload_rules = json!([
        {
            "apiGroups": ["apps"], "apiVersions": ["v1"],
            "resources": ["deployments", "statefulsets", "daemonsets"],
            "operations": ["CREATE", "UPDATE"], "scope": "Namespaced",
        },
        {
            "apiGroups": ["batch"], "apiVersions": ["v1", "v1beta1"],
            "resources": ["jobs", "cronjobs"],
            "operations": ["CREATE", "UPDATE"], "scope": "Namespaced",
        },
    ]);
    let snapshot_selector = |operator: &str| json!({"matchExpressions": [{"key": "confighistory.io/hash", "operator": operator}]});
    let common = |name: &str, path: &str, policy: &str| {
        json!({
            "name": name,
            "admissionReviewVersions": ["v1"],
            "clientConfig": client(path),
            "namespaceSelector": namespace_selector,
            "matchPolicy": "Equivalent",
            "failurePolicy": policy,
            "timeoutSeconds": 10,
        })
    };
    let with = |mut base: Value, extra: Value| {
        for (k, v) in extra.as_object().expect("object").clone() {
            base[k] = v;
        }
        base
    };

    let mutating = json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": CONFIGURATION_NAME},
        "webhooks": [
            with(common("configmaps.confighistory.io", "/mutate", failure_policy), json!({
                "rules": configmap_rules(&["CREATE", "UPDATE"]),
                "objectSelector": snapshot_selector("DoesNotExist"),
                "sideEffects": "NoneOnDryRun",
                "reinvocationPolicy": "IfNeeded",
            })),
            with(common("workloads.confighistory.io", "/mutate", failure_policy), json!({
                "rules": workload_rules,
                "sideEffects": "NoneOnDryRun",
                "reinvocationPolicy": "IfNeeded",
            })),
        ],
    });
    let validating = json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": CONFIGURATION_NAME},
        "webhooks": [
            with(common("workloads.confighistory.io", "/validate", "Fail"), json!({
                "rules": workload_rules,
                "sideEffects": "NoneOnDryRun",
            })),
            with(common("snapshots.confighistory.io", "/protect", "Fail"), json!({
                "rules": configmap_rules(&["CREATE", "UPDATE"]),
                "objectSelector": snapshot_selector("Exists"),
                "sideEffects": "NoneOnDryRun",
            })),
            with(common("snapshot-deletes.confighistory.io", "/protect", "Ignore"), json!({
                "rules": configmap_rules(&["DELETE"]),
                "objectSelector": snapshot_selector("Exists"),
                "sideEffects": "NoneOnDryRun",
            })),
        ],
    });
    [mutating, validating]
}

/// The webhook configurations as the Helm chart renders them in url mode
/// (`helm template --set webhook.url=... --set webhook.caBundle=...`), with failurePolicy Fail.
pub fn chart_webhook_configurations(url_base: &str, ca_pem: &str) -> String {
    let helm = std::env::var_os("CONFIGHISTORY_HELM").map(PathBuf::from).unwrap_or_else(|| {
        let kubectl = super::find_kubectl();
        kubectl.with_file_name("helm")
    });
    let output = Command::new(&helm)
        .args(["template", CONFIGURATION_NAME])
        .arg(repo_root().join("charts/confighistory"))
        .args(["--namespace", NAMESPACE, "--kube-version", "1.20.2"])
        .args(["--set", "deployment.enabled=false"])
        .args(["--set", &format!("webhook.url={url_base}")])
        .args(["--set", &format!("webhook.caBundle={}", ca_bundle(ca_pem))])
        .args(["--set", "webhook.failurePolicy=Fail"])
        .args(["--show-only", "templates/mutatingwebhookconfiguration.yaml"])
        .args(["--show-only", "templates/validatingwebhookconfiguration.yaml"])
        .output()
        .unwrap_or_else(|e| panic!("run {}: {e}", helm.display()));
    assert!(output.status.success(), "helm template failed:\n{}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8(output.stdout).expect("helm prints UTF-8")
}
