//! The confighistory server under test: a process serving HTTPS on loopback, registered with the
//! API server by `clientConfig.url` and the generated CA bundle.
//!
//! [`webhook()`] starts the one shared by every test of this process on first use. By default
//! its webhook configurations and RBAC come from the Helm chart in url mode (`helm template
//! --set webhook.url=...`), so the chart's configurations are the ones the API server really
//! calls, and the server runs with the token of the chart's ServiceAccount
//! (`system:serviceaccount:confighistory:confighistory`), so the chart's RBAC is proven
//! sufficient by every scenario.
//!
//! Isolation: each test process has a run id ([`run_id`]). Its namespaces carry
//! [`RUN_LABEL`]`=<run id>`; its chart release, webhook configurations, ClusterRole and Lease are
//! named `confighistory-<run id>`, the webhooks select only namespaces of the run
//! (`webhook.namespaceSelector`) and the controller loops only those too
//! (`--controller-namespace-selector`). Several processes can therefore test against one cluster
//! at the same time. A test that needs a server with another policy starts its own
//! ([`Webhook::start`]) under a run id of its own.
//!
//! The process is run by `tests/e2e/run-webhook`, which holds a pipe from the test process:
//! when the test binary exits (or a dedicated [`Webhook`] drops), however it exits, the wrapper
//! unregisters the webhooks, stops the server and deletes the run's RBAC and Lease.

use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::{
    ca_bundle, ci, find_helm, free_port, generate_serving_cert, repo_root, run_id, wait_for, Cluster, Kubectl, TestNamespace, RUN_LABEL,
    WEBHOOK_IDENTITY,
};

/// Name of the webhook configurations [`webhook_configurations`] renders (used to check they
/// are valid; the servers of the tests register `confighistory-<run id>`).
pub const CONFIGURATION_NAME: &str = "confighistory";
/// The namespace confighistory itself runs in (excluded from its own webhooks by the server).
pub const NAMESPACE: &str = "confighistory";
/// The chart's ServiceAccount (release `confighistory`), whose token the servers run with.
pub const SERVICE_ACCOUNT: &str = "confighistory";

/// Namespaces with this label are left to controller processes a test runs itself (leader
/// failover, rate limits); the shared server's loops do not act in them.
pub const CONTROLLER_LABEL: &str = "e2e.confighistory.io/controller";

/// How the webhooks are registered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Registration {
    /// `helm template charts/confighistory` in url mode: webhook configurations and RBAC; the
    /// server runs with the chart ServiceAccount's token.
    Chart,
    /// [`webhook_configurations`], the server with `Cluster::webhook_kubeconfig` (a client
    /// certificate): the fallback when helm is missing outside CI, or
    /// `CONFIGHISTORY_E2E_WEBHOOKS=builtin`.
    BuiltIn,
}

/// What an install adds to a dedicated server ([`Webhook::start_with`]).
#[derive(Clone, Copy, Debug, Default)]
pub struct Install<'a> {
    /// The chart's `extraWorkloadKinds` as JSON (empty: none).
    pub kinds: &'a str,
    /// More `helm template` arguments, e.g. `["--set", "secrets.enabled=true"]`.
    pub values: &'a [&'a str],
    /// The server's RUST_LOG (default: this process's RUST_LOG, else `info`).
    pub rust_log: Option<&'a str>,
}

impl Install<'_> {
    /// Whether the values turn Secrets on (docs/behaviour.md §4a).
    fn secrets(&self) -> bool {
        self.values.windows(2).any(|w| w[0] == "--set" && w[1] == "secrets.enabled=true")
    }
}

/// A running server.
pub struct Webhook {
    /// The run id whose namespaces it acts in ([`RUN_LABEL`]).
    pub run: String,
    /// `confighistory-<run>`: the chart release, the webhook configurations, ClusterRole and Lease.
    pub name: String,
    /// `https://127.0.0.1:<port>`; the webhooks use `/mutate`, `/validate` and `/protect`.
    pub url_base: String,
    pub ca_pem: String,
    pub health_url: String,
    pub log_file: PathBuf,
    /// The kubeconfig the server runs with (the ServiceAccount token with [`Registration::Chart`]).
    pub kubeconfig: PathBuf,
    pub registration: Registration,
    cluster: &'static Cluster,
    // Kept open for the life of the server: closing it stops the server (run-webhook).
    lifeline: Mutex<Option<(Child, ChildStdin)>>,
}

static WEBHOOK: OnceLock<Webhook> = OnceLock::new();

/// The confighistory server shared by the tests of this process (run [`run_id`]), started and
/// registered on first use. Controller loops with a short settle window (2 s) and resync (5 s),
/// so the controller scenarios finish fast; namespaces labelled [`CONTROLLER_LABEL`] are left to
/// controllers the tests run themselves.
pub fn webhook(cluster: &'static Cluster) -> &'static Webhook {
    WEBHOOK.get_or_init(|| {
        let selector = format!("--controller-namespace-selector={RUN_LABEL}={},!{CONTROLLER_LABEL}", run_id());
        Webhook::start(cluster, run_id(), &["--settle", "2", "--resync-interval", "5", &selector])
    })
}

/// How this process registers webhooks: `CONFIGHISTORY_E2E_WEBHOOKS=chart|builtin`, default the
/// chart; without helm, the built-in configurations (a failure under CI).
pub fn registration() -> Registration {
    match std::env::var("CONFIGHISTORY_E2E_WEBHOOKS").as_deref() {
        Ok("builtin") => Registration::BuiltIn,
        Ok("chart") => Registration::Chart,
        _ if find_helm().is_some() => Registration::Chart,
        _ if ci() => panic!("e2e: helm is missing (CI=true): run tests/e2e/tools"),
        _ => {
            eprintln!("e2e: helm not found: registering the built-in webhook configurations instead of the chart's");
            Registration::BuiltIn
        }
    }
}

impl Webhook {
    /// Starts `confighistory serve <extra_args>` for the namespaces of run `run` and registers its
    /// webhooks as `confighistory-<run>`. Unless `extra_args` says otherwise, its controller loops
    /// act in the run's namespaces. Stopped and unregistered when dropped (or when the test process
    /// exits).
    pub fn start(cluster: &'static Cluster, run: &str, extra_args: &[&str]) -> Webhook {
        Webhook::start_with_kinds(cluster, run, extra_args, "")
    }

    /// [`Webhook::start`] with workload kinds registered: `kinds` is the chart's
    /// `extraWorkloadKinds` as JSON (empty: none). The chart renders their webhook rules and RBAC
    /// (the built-in configurations get their rules too), and the server is given them
    /// (`--extra-workload-kinds`), as an install with those values would be.
    pub fn start_with_kinds(cluster: &'static Cluster, run: &str, extra_args: &[&str], kinds: &str) -> Webhook {
        Webhook::start_with(cluster, run, extra_args, &Install { kinds, ..Install::default() })
    }

    /// [`Webhook::start`] as an install with more chart values (`install`): the chart renders
    /// the webhook configurations and RBAC with them, and the server gets the flags such an
    /// install gives it (`--extra-workload-kinds`; with `secrets.enabled=true`, `--secrets` and a
    /// keys Secret of the run's own, `confighistory-<run>-keys`, deleted with the server).
    /// Secrets need [`Registration::Chart`] (the built-in configurations have no Secret rules).
    pub fn start_with(cluster: &'static Cluster, run: &str, extra_args: &[&str], install: &Install) -> Webhook {
        let registration = registration();
        let kinds = install.kinds;
        let secrets = install.secrets();
        assert!(
            !secrets || registration == Registration::Chart,
            "secrets.enabled needs the chart's webhook configurations (CONFIGHISTORY_E2E_WEBHOOKS=chart and helm)"
        );
        let mut kind_values: Vec<String> =
            if kinds.is_empty() { Vec::new() } else { vec!["--set-json".into(), format!("extraWorkloadKinds={kinds}")] };
        kind_values.extend(install.values.iter().map(|v| v.to_string()));
        let kind_values: Vec<&str> = kind_values.iter().map(String::as_str).collect();
        let name = format!("confighistory-{run}");
        let host = cluster.webhook_host.as_str();
        let run_dir = cluster.state_dir.join(format!("run/{name}"));
        std::fs::create_dir_all(&run_dir).expect("create the webhook's run dir");
        let ca_pem = generate_serving_cert(&run_dir, host);
        let port = free_port(host);
        let health_port = free_port("127.0.0.1");
        let log_file = cluster.state_dir.join(format!("logs/{name}.log"));
        let url_base = format!("https://{host}:{port}");
        let listen = format!("{host}:{port}");
        let health_listen = format!("127.0.0.1:{health_port}");

        // The namespace of the ServiceAccount and of the leader-election Lease.
        cluster.apply_cluster_scoped(&format!("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {NAMESPACE}\n"));

        let mut command = Command::new(repo_root().join("tests/e2e/run-webhook"));
        command.arg(&log_file);
        for kind in ["mutatingwebhookconfiguration", "validatingwebhookconfiguration"] {
            command.args(["--unregister", &format!("{kind}/{name}")]);
        }
        let (kubeconfig, configurations) = match registration {
            Registration::Chart => {
                let chart = ChartRelease { cluster, name: &name, run, url_base: &url_base, ca_pem: &ca_pem };
                // Cluster-scoped RBAC and the Lease go when the server has stopped.
                command.args(["--cleanup", &format!("clusterrole/{name} clusterrolebinding/{name}")]);
                command.args([
                    "--cleanup",
                    &format!("-n {NAMESPACE} role/{name}-leader-election rolebinding/{name}-leader-election lease/{name}"),
                ]);
                // The ConfigMap the server publishes its configuration in, readable by everyone.
                command.args([
                    "--cleanup",
                    &format!("-n {NAMESPACE} configmap/{name}-effective-config role/{name}-effective-config-reader rolebinding/{name}-effective-config-reader"),
                ]);
                if secrets {
                    // The Secrets role, and the cluster keys the server makes at its start.
                    command.args(["--cleanup", &format!("clusterrole/{name}-secrets clusterrolebinding/{name}-secrets")]);
                    command.args(["--cleanup", &format!("-n {NAMESPACE} secret/{name}-keys")]);
                }
                cluster
                    .kubectl_stdin(
                        &["apply", "-f", "-"],
                        &chart.render(&["templates/rbac.yaml", "templates/effective-config.yaml"], &kind_values),
                    )
                    .expect_success();
                let kubeconfig = match std::env::var_os("CONFIGHISTORY_E2E_WEBHOOK_KUBECONFIG").filter(|v| !v.is_empty()) {
                    Some(path) => PathBuf::from(path),
                    None => service_account_kubeconfig(cluster, &run_dir.join("serviceaccount.kubeconfig")),
                };
                wait_until_authorized(cluster, &kubeconfig, &name);
                if secrets {
                    wait_for("the chart's Secrets RBAC to take effect", Duration::from_secs(30), || {
                        let out = cluster.run_kubectl(&kubeconfig, &["auth", "can-i", "create", "secrets", "-n", NAMESPACE], None);
                        out.stdout.trim() == "yes"
                    });
                }
                let configurations = chart.render(
                    &["templates/mutatingwebhookconfiguration.yaml", "templates/validatingwebhookconfiguration.yaml"],
                    &[&["--set", "webhook.failurePolicy=Fail"], kind_values.as_slice()].concat(),
                );
                (kubeconfig, configurations)
            }
            Registration::BuiltIn => {
                command.args(["--cleanup", &format!("-n {NAMESPACE} configmap/{name}-effective-config")]);
                let cm = format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}-effective-config\n  namespace: {NAMESPACE}\n");
                cluster.kubectl_stdin(&["apply", "-f", "-"], &cm).expect_success();
                let mut configurations = run_webhook_configurations(&name, run, &url_base, &ca_pem);
                add_kind_rules(&mut configurations, kinds);
                (cluster.webhook_kubeconfig.clone(), configurations.iter().map(Value::to_string).collect::<Vec<_>>().join("\n---\n"))
            }
        };
        let selects = extra_args.iter().any(|a| a.starts_with("--controller-namespace-selector"));
        let default_selector = (!selects).then(|| format!("--controller-namespace-selector={RUN_LABEL}={run}"));
        command
            .arg("--")
            .arg(env!("CARGO_BIN_EXE_confighistory"))
            .args(["serve", "--listen", &listen, "--health-listen", &health_listen])
            .arg("--tls-cert")
            .arg(run_dir.join("tls.crt"))
            .arg("--tls-key")
            .arg(run_dir.join("tls.key"))
            .args(["--identity", WEBHOOK_IDENTITY, "--namespace", NAMESPACE])
            .args(["--leader-election-namespace", NAMESPACE, "--lease-name", &name])
            .arg(format!("--effective-config={name}-effective-config"))
            .args(default_selector)
            .args((!kinds.is_empty()).then(|| format!("--extra-workload-kinds={kinds}")))
            .args(if secrets { vec!["--secrets".to_owned(), format!("--keys-secret={name}-keys")] } else { Vec::new() })
            .args(extra_args)
            .env("KUBECONFIG", &kubeconfig)
            .env("CONFIGHISTORY_E2E_DIR", &cluster.state_dir)
            .env("CONFIGHISTORY_E2E_ADMIN_KUBECONFIG", &cluster.kubeconfig)
            .env("CONFIGHISTORY_KUBECTL", &cluster.kubectl)
            .env(
                "RUST_LOG",
                install.rust_log.map(str::to_owned).or_else(|| std::env::var("RUST_LOG").ok()).unwrap_or_else(|| "info".into()),
            )
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit());
        let mut child = command.spawn().expect("start tests/e2e/run-webhook");
        let stdin = child.stdin.take().expect("piped stdin");
        let webhook = Webhook {
            run: run.to_owned(),
            name,
            url_base,
            ca_pem,
            health_url: format!("http://{health_listen}/readyz"),
            log_file,
            kubeconfig,
            registration,
            cluster,
            lifeline: Mutex::new(Some((child, stdin))),
        };
        webhook.wait_ready(&health_listen);
        cluster.kubectl_stdin(&["apply", "-f", "-"], &configurations).expect_success();
        webhook.wait_called();
        webhook
    }

    fn wait_ready(&self, health_listen: &str) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !http_ok(health_listen, "/readyz") {
            let exited = self.lifeline.lock().unwrap().as_mut().and_then(|(child, _)| child.try_wait().ok().flatten());
            if let Some(status) = exited {
                panic!("confighistory exited ({status}) before it was ready; log {}:\n{}", self.log_file.display(), self.log());
            }
            if Instant::now() > deadline {
                panic!("confighistory not ready at {} after 60 s; log {}:\n{}", self.health_url, self.log_file.display(), self.log());
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Waits (up to 20 s) until the API server calls the new webhooks: a server-side dry run of a
    /// forged snapshot in a namespace of the run is denied by snapshot protection.
    fn wait_called(&self) {
        let probe = self.namespace("probe", &[]);
        let forged = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: e2e-registration-probe\n  \
                      labels:\n    confighistory.io/hash: forged\ndata:\n  a: b\n";
        wait_for(&format!("the API server to call {} (forged-snapshot probe)", self.name), Duration::from_secs(20), || {
            let out = probe.cluster.kubectl_stdin(&["create", "--dry-run=server", "-n", &probe.name, "-f", "-"], forged);
            !out.success && out.stderr.contains("admission webhook")
        });
    }

    /// `NAMESPACE/NAME` of the ConfigMap this server publishes its configuration in (the
    /// plugin's `--server-config`).
    pub fn server_config(&self) -> String {
        format!("{NAMESPACE}/{}-effective-config", self.name)
    }

    /// A new test namespace of this server's run.
    pub fn namespace(&self, prefix: &str, labels: &[(&str, &str)]) -> TestNamespace {
        TestNamespace::in_run(self.cluster, Some(&self.run), prefix, labels)
    }

    /// kubectl with the credentials the server runs with (its ServiceAccount token).
    pub fn kubectl(&self, args: &[&str]) -> Kubectl {
        self.cluster.run_kubectl(&self.kubeconfig, args, None)
    }

    /// The server process's peak resident memory (VmHWM) in KiB, read from /proc: run-webhook
    /// records its pid in the state dir, and its command line has this server's listen address.
    pub fn peak_rss_kib(&self) -> u64 {
        let listen = self.url_base.trim_start_matches("https://");
        let pids = std::fs::read_dir(self.cluster.state_dir.join("pids")).expect("the e2e pids dir");
        let pid = pids
            .filter_map(|e| std::fs::read_to_string(e.ok()?.path()).ok())
            .map(|p| p.trim().to_owned())
            .find(|pid| {
                std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c.split(|b| *b == 0).any(|arg| arg == listen.as_bytes()))
            })
            .unwrap_or_else(|| panic!("no running server listens on {listen}"));
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("the server's /proc status");
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("VmHWM in /proc status")
    }

    /// The server's /metrics (Prometheus text), from its health port.
    pub fn metrics(&self) -> String {
        use std::io::{Read, Write};
        let addr = self.health_url.trim_start_matches("http://").trim_end_matches("/readyz");
        let mut stream = std::net::TcpStream::connect(addr).expect("the server's health port");
        let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
        write!(stream, "GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").expect("ask for /metrics");
        let mut response = String::new();
        let _ = stream.read_to_string(&mut response);
        response
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log_file).unwrap_or_default()
    }
}

impl Drop for Webhook {
    /// Only dedicated servers drop (the shared one lives in a static): closing the pipe makes
    /// run-webhook unregister the webhooks, stop the server and clean up; wait for all of it.
    fn drop(&mut self) {
        if let Some((mut child, stdin)) = self.lifeline.lock().unwrap().take() {
            drop(stdin);
            let _ = child.wait();
        }
        if std::thread::panicking() {
            eprintln!("confighistory log {}:\n{}", self.log_file.display(), self.log());
        }
    }
}

/// `helm template <name> charts/confighistory` in url mode for one run.
pub struct ChartRelease<'a> {
    pub cluster: &'a Cluster,
    pub name: &'a str,
    pub run: &'a str,
    pub url_base: &'a str,
    /// Empty: no webhook.caBundle (a server in tls.mode=server writes it).
    pub ca_pem: &'a str,
}

impl ChartRelease<'_> {
    pub fn render(&self, templates: &[&str], extra: &[&str]) -> String {
        // The suite's own, admin-chosen exclusion (TestNamespace::excluded): the chart itself
        // selects on no label a namespace owner can set, where names can be selected (>= 1.21).
        let selector = json!({"matchLabels": {RUN_LABEL: self.run},
            "matchExpressions": [{"key": super::EXCLUDE_LABEL, "operator": "DoesNotExist"}]})
        .to_string();
        let mut args = vec![
            "--set".to_owned(),
            "deployment.enabled=false".into(),
            "--set".into(),
            format!("webhook.url={}", self.url_base),
            "--set".into(),
            format!("webhook.caBundle={}", ca_bundle(self.ca_pem)),
            // The chart's ServiceAccount is shared by every run (release `confighistory`); each
            // run binds it to RBAC of its own, with a Lease of its own.
            "--set".into(),
            "serviceAccount.create=false".into(),
            "--set".into(),
            format!("serviceAccount.name={SERVICE_ACCOUNT}"),
            "--set-json".into(),
            format!("webhook.namespaceSelector={selector}"),
            // A loaded 2-core machine can take seconds to answer; Fail would turn a slow answer
            // into a refused write.
            "--set".into(),
            "webhook.timeoutSeconds=20".into(),
            "--set".into(),
            "webhook.protectionTimeoutSeconds=10".into(),
        ];
        args.extend(extra.iter().map(|s| s.to_string()));
        helm_template(self.cluster, self.name, templates, &args)
    }
}

/// `helm template RELEASE charts/confighistory -n confighistory --kube-version <cluster's>
/// --show-only TEMPLATE... ARGS...`.
fn helm_template(cluster: &Cluster, release: &str, templates: &[&str], args: &[String]) -> String {
    let helm = find_helm().expect("helm (run tests/e2e/tools)");
    let mut command = Command::new(&helm);
    command.args(["template", release]).arg(repo_root().join("charts/confighistory")).args([
        "--namespace",
        NAMESPACE,
        "--kube-version",
        cluster.server_version(),
    ]);
    for template in templates {
        command.args(["--show-only", template]);
    }
    let output = command.args(args).output().unwrap_or_else(|e| panic!("run {}: {e}", helm.display()));
    assert!(output.status.success(), "helm template failed:\n{}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8(output.stdout).expect("helm prints UTF-8")
}

/// Applies the chart's ServiceAccount (release `confighistory`, shared by every run and never
/// deleted), waits for its token and writes a kubeconfig with it to `path`. Kubernetes < 1.24
/// creates the token Secret by itself; newer clusters get a TokenRequest token.
pub fn service_account_kubeconfig(cluster: &Cluster, path: &Path) -> PathBuf {
    let sa = helm_template(cluster, "confighistory", &["templates/serviceaccount.yaml"], &[]);
    cluster.kubectl_stdin(&["apply", "-f", "-"], &sa).expect_success();
    let secret_name = |c: &Cluster| {
        let out = c.kubectl(&["get", "serviceaccount", SERVICE_ACCOUNT, "-n", NAMESPACE, "-o", "jsonpath={.secrets[*].name}"]);
        out.stdout.split_whitespace().find(|s| s.starts_with(&format!("{SERVICE_ACCOUNT}-token-"))).map(str::to_owned)
    };
    // From 1.24 on no token Secret ever comes: ask for a token at once rather than wait 20 s for
    // one (every dedicated server of the suite paid that wait).
    let minor: u32 = cluster.server_version().split('.').nth(1).and_then(|m| m.trim_end_matches('+').parse().ok()).unwrap_or(0);
    let wait = if minor >= 24 { Duration::ZERO } else { Duration::from_secs(20) };
    let deadline = Instant::now() + wait;
    let token = loop {
        if let Some(secret) = secret_name(cluster) {
            let out = cluster.kubectl(&["get", "secret", &secret, "-n", NAMESPACE, "-o", "jsonpath={.data.token}"]).expect_success();
            use base64::Engine as _;
            if let Ok(token) = base64::engine::general_purpose::STANDARD.decode(out.stdout.trim()) {
                if !token.is_empty() {
                    break String::from_utf8(token).expect("token is UTF-8");
                }
            }
        }
        if Instant::now() > deadline {
            // No token controller Secrets (Kubernetes >= 1.24): ask for a token.
            let out = cluster.kubectl(&["create", "token", SERVICE_ACCOUNT, "-n", NAMESPACE, "--duration=24h"]).expect_success();
            break out.stdout.trim().to_owned();
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let view = cluster.kubectl(&["config", "view", "--raw", "--minify", "--flatten", "-o", "json"]).expect_success().json();
    let server = view["clusters"][0]["cluster"]["server"].as_str().expect("the admin kubeconfig names a server");
    let ca = view["clusters"][0]["cluster"]["certificate-authority-data"].as_str().unwrap_or_default();
    let tls =
        if ca.is_empty() { "    insecure-skip-tls-verify: true\n".to_owned() } else { format!("    certificate-authority-data: {ca}\n") };
    let kubeconfig = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: e2e\n  cluster:\n    server: {server}\n{tls}\
         users:\n- name: {WEBHOOK_IDENTITY}\n  user:\n    token: {token}\n\
         contexts:\n- name: e2e\n  context: {{cluster: e2e, user: \"{WEBHOOK_IDENTITY}\"}}\ncurrent-context: e2e\n"
    );
    std::fs::write(path, kubeconfig).expect("write the ServiceAccount kubeconfig");
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).expect("chmod the kubeconfig");
    path.to_owned()
}

/// Waits until the RBAC just applied for release `name` reaches the authorizer: the ServiceAccount
/// may list ConfigMaps everywhere and renew its Lease.
pub fn wait_until_authorized(cluster: &Cluster, kubeconfig: &Path, name: &str) {
    let lease = format!("leases.coordination.k8s.io/{name}");
    wait_for("the chart's RBAC to take effect", Duration::from_secs(30), || {
        let ask = |args: &[&str]| cluster.run_kubectl(kubeconfig, args, None).stdout.trim() == "yes";
        ask(&["auth", "can-i", "list", "configmaps", "--all-namespaces"]) && ask(&["auth", "can-i", "update", &lease, "-n", NAMESPACE])
    });
}

/// A plain HTTP GET that reports whether the answer was 200.
pub fn http_ok(addr: &str, path: &str) -> bool {
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

/// Adds a rule per registered kind (`kinds`: JSON entries, empty for none) to the workload
/// webhooks, as the chart does from `extraWorkloadKinds`.
fn add_kind_rules(configurations: &mut [Value; 2], kinds: &str) {
    let entries: Vec<Value> = if kinds.is_empty() { Vec::new() } else { serde_json::from_str(kinds).expect("kinds are a JSON array") };
    for configuration in configurations.iter_mut() {
        for webhook in configuration["webhooks"].as_array_mut().expect("webhooks") {
            if webhook["name"] != "workloads.confighistory.io" {
                continue;
            }
            for e in &entries {
                let rule = json!({"apiGroups": [e["group"]], "apiVersions": e["versions"], "resources": [e["resource"]],
                    "operations": ["CREATE", "UPDATE"], "scope": "Namespaced"});
                webhook["rules"].as_array_mut().expect("rules").push(rule);
            }
        }
    }
}

/// [`webhook_configurations`] for one run: named `name`, selecting only the run's namespaces.
fn run_webhook_configurations(name: &str, run: &str, url_base: &str, ca_pem: &str) -> [Value; 2] {
    let mut configurations = webhook_configurations(url_base, ca_pem, "Fail");
    for configuration in &mut configurations {
        configuration["metadata"]["name"] = json!(name);
        for webhook in configuration["webhooks"].as_array_mut().expect("webhooks") {
            webhook["namespaceSelector"]["matchLabels"] = json!({RUN_LABEL: run});
        }
    }
    configurations
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
            "timeoutSeconds": 20,
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
    let cluster = super::cluster().expect("a cluster");
    let args: Vec<String> = [
        "--set",
        "deployment.enabled=false",
        "--set",
        &format!("webhook.url={url_base}"),
        "--set",
        &format!("webhook.caBundle={}", ca_bundle(ca_pem)),
        "--set",
        "webhook.failurePolicy=Fail",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    helm_template(
        cluster,
        CONFIGURATION_NAME,
        &["templates/mutatingwebhookconfiguration.yaml", "templates/validatingwebhookconfiguration.yaml"],
        &args,
    )
}
