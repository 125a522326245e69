//! Helpers for the end-to-end tests: a real API server and controller manager, driven with kubectl
//! the way a person or a pipeline drives a cluster.
//!
//! The cluster is the local control plane from `tests/e2e/cluster up` (admin kubeconfig in
//! `$CONFIGHISTORY_E2E_DIR/admin.kubeconfig`, default `<repo>/.e2e`), or any cluster when
//! `CONFIGHISTORY_E2E_CLUSTER=external` and `KUBECONFIG` are set. When there is none, every test
//! fails with a clear message under `CI=true` and is skipped (with a message) otherwise.
//!
//! Each test makes its own [`TestNamespace`], so tests run in parallel and clean up after
//! themselves.
#![allow(dead_code)] // a toolbox: not every scenario uses every helper

pub mod apps;
pub mod confighistory;
pub mod controllers;
pub mod test_webhook;
pub mod webdriver;

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::Value;

/// The identity the confighistory server runs as (its ServiceAccount).
pub const WEBHOOK_IDENTITY: &str = "system:serviceaccount:confighistory:confighistory";
/// Label carried by every test namespace, with the namespace's own name as its value: webhooks
/// registered by a single test select on it, so they never see another test's objects.
pub const NAMESPACE_LABEL: &str = "e2e.confighistory.io/namespace";
/// Label carried by every namespace a test process creates, with the process's run id
/// ([`run_id`]) as its value. The webhooks and controller loops of that process's confighistory
/// server select on it, so several `cargo test --test e2e` processes can share one cluster without
/// seeing each other's objects.
pub const RUN_LABEL: &str = "e2e.confighistory.io/run";
/// Namespaces with this label are not sent to confighistory's webhooks (their namespaceSelector).
pub const EXCLUDE_LABEL: &str = "confighistory.io/exclude";
/// Annotation that names the source of a snapshot (spec §5).
pub const SOURCE_NAME_ANNOTATION: &str = "confighistory.io/source-name";

/// The cluster under test.
#[derive(Debug)]
pub struct Cluster {
    /// Admin kubeconfig, used by kubectl in the tests.
    pub kubeconfig: PathBuf,
    /// Kubeconfig with the webhook's own identity ([`WEBHOOK_IDENTITY`]).
    pub webhook_kubeconfig: PathBuf,
    pub kubectl: PathBuf,
    /// Where the tests keep certificates and logs (`$CONFIGHISTORY_E2E_DIR`, default `<repo>/.e2e`).
    pub state_dir: PathBuf,
    /// A user's cluster rather than the local control plane.
    pub external: bool,
    /// The address the API server uses to reach webhooks served by the tests (default 127.0.0.1;
    /// an external cluster needs an address of this machine that it can reach).
    pub webhook_host: String,
    server_version: OnceLock<String>,
}

static CLUSTER: OnceLock<Option<Cluster>> = OnceLock::new();
static RUN_ID: OnceLock<String> = OnceLock::new();

/// This test process's run id: `<pid>-<4 random digits>` (a valid label value and name part). It
/// names this process's webhook configurations (`confighistory-<run id>`) and labels its namespaces
/// ([`RUN_LABEL`]).
pub fn run_id() -> &'static str {
    RUN_ID.get_or_init(|| {
        let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.subsec_nanos()).unwrap_or(0);
        format!("{}-{:04}", std::process::id(), nanos % 10_000)
    })
}

/// Whether this is CI (`CI=true`): nothing may be skipped.
pub fn ci() -> bool {
    matches!(std::env::var("CI").as_deref(), Ok("true" | "1" | "yes"))
}

pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn env_path(name: &str) -> Option<PathBuf> {
    std::env::var_os(name).filter(|v| !v.is_empty()).map(PathBuf::from)
}

/// The cluster to test against, or `None` (with a message) when there is none and this is not CI.
/// Under `CI=true` a missing cluster is a failure, not a skip.
pub fn cluster() -> Option<&'static Cluster> {
    CLUSTER
        .get_or_init(|| match Cluster::discover() {
            Ok(cluster) => Some(cluster),
            Err(why) if ci() => panic!("e2e: no cluster to test against (CI=true): {why}"),
            Err(why) => {
                eprintln!("e2e: skipping: {why}");
                None
            }
        })
        .as_ref()
}

impl Cluster {
    fn discover() -> Result<Cluster, String> {
        let external = std::env::var("CONFIGHISTORY_E2E_CLUSTER").as_deref() == Ok("external");
        let state_dir = env_path("CONFIGHISTORY_E2E_DIR").unwrap_or_else(|| repo_root().join(".e2e"));
        let (kubeconfig, webhook_kubeconfig) = if external {
            let kubeconfig =
                env_path("KUBECONFIG").ok_or("CONFIGHISTORY_E2E_CLUSTER=external needs KUBECONFIG to name the cluster's kubeconfig")?;
            let webhook = env_path("CONFIGHISTORY_E2E_WEBHOOK_KUBECONFIG").unwrap_or_else(|| kubeconfig.clone());
            (kubeconfig, webhook)
        } else {
            let kubeconfig = state_dir.join("admin.kubeconfig");
            if !kubeconfig.exists() {
                return Err(format!(
                    "the local control plane is not up ({} is missing): run `tests/e2e/cluster up`, \
                     or set CONFIGHISTORY_E2E_CLUSTER=external and KUBECONFIG",
                    kubeconfig.display()
                ));
            }
            (kubeconfig, state_dir.join("webhook.kubeconfig"))
        };
        let cluster = Cluster {
            kubeconfig,
            webhook_kubeconfig,
            kubectl: find_kubectl(),
            state_dir,
            external,
            webhook_host: std::env::var("CONFIGHISTORY_E2E_WEBHOOK_HOST").unwrap_or_else(|_| "127.0.0.1".into()),
            server_version: OnceLock::new(),
        };
        let ready = cluster.kubectl(&["get", "--raw", "/readyz"]);
        if !ready.success {
            return Err(format!("the API server in {} does not answer /readyz: {}", cluster.kubeconfig.display(), ready.stderr.trim()));
        }
        Ok(cluster)
    }

    /// Runs kubectl with the admin kubeconfig.
    pub fn kubectl(&self, args: &[&str]) -> Kubectl {
        self.run_kubectl(&self.kubeconfig, args, None)
    }

    /// Runs kubectl with `stdin` as its standard input (for `-f -`).
    pub fn kubectl_stdin(&self, args: &[&str], stdin: &str) -> Kubectl {
        self.run_kubectl(&self.kubeconfig, args, Some(stdin))
    }

    /// Runs kubectl as the webhook's own identity ([`WEBHOOK_IDENTITY`]).
    pub fn kubectl_as_webhook(&self, args: &[&str], stdin: Option<&str>) -> Kubectl {
        self.run_kubectl(&self.webhook_kubeconfig, args, stdin)
    }

    fn run_kubectl(&self, kubeconfig: &Path, args: &[&str], stdin: Option<&str>) -> Kubectl {
        let mut command = Command::new(&self.kubectl);
        command
            .args(args)
            .env("KUBECONFIG", kubeconfig)
            .env("KUBECTL_COMMAND_HEADERS", "false")
            .stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = command.spawn().unwrap_or_else(|e| panic!("cannot run {} (run tests/e2e/tools): {e}", self.kubectl.display()));
        if let Some(input) = stdin {
            let mut pipe = child.stdin.take().expect("stdin is piped");
            pipe.write_all(input.as_bytes()).expect("write kubectl stdin");
        }
        let output = child.wait_with_output().expect("wait for kubectl");
        Kubectl {
            args: args.iter().map(|a| a.to_string()).collect(),
            success: output.status.success(),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        }
    }

    /// The API server's version without the leading `v` (`1.20.2`), for `helm template --kube-version`.
    pub fn server_version(&self) -> &str {
        self.server_version.get_or_init(|| {
            let out = self.kubectl(&["version", "-o", "json"]).expect_success();
            let version = out.json()["serverVersion"]["gitVersion"].as_str().unwrap_or_default().trim_start_matches('v').to_owned();
            assert!(!version.is_empty(), "kubectl version printed no server version:\n{}", out.describe());
            version
        })
    }

    /// The API version this cluster serves CronJobs under: `batch/v1` from 1.21 on; 1.20 only
    /// serves `batch/v1beta1`.
    pub fn cronjob_api_version(&self) -> &'static str {
        let minor: u32 = self.server_version().split('.').nth(1).and_then(|m| m.trim_end_matches('+').parse().ok()).unwrap_or(0);
        if minor >= 21 {
            "batch/v1"
        } else {
            "batch/v1beta1"
        }
    }

    /// `kubectl apply -f -` of cluster-scoped objects (webhook configurations, namespaces).
    pub fn apply_cluster_scoped(&self, yaml: &str) -> Kubectl {
        self.kubectl_stdin(&["apply", "-f", "-"], yaml).expect_success()
    }
}

/// helm: `$CONFIGHISTORY_HELM`, else the one next to the cached kubectl (`tests/e2e/tools`), else
/// `helm` on PATH; `None` when there is none.
pub fn find_helm() -> Option<PathBuf> {
    if let Some(path) = env_path("CONFIGHISTORY_HELM") {
        return Some(path);
    }
    let cached = find_kubectl().with_file_name("helm");
    if cached.is_file() {
        return Some(cached);
    }
    let on_path = Command::new("helm").arg("version").stdout(Stdio::null()).stderr(Stdio::null()).status();
    on_path.is_ok_and(|s| s.success()).then(|| PathBuf::from("helm"))
}

pub(crate) fn find_kubectl() -> PathBuf {
    if let Some(path) = env_path("CONFIGHISTORY_KUBECTL") {
        return path;
    }
    let cache = env_path("CONFIGHISTORY_CACHE")
        .or_else(|| env_path("HOME").map(|home| home.join(".cache/confighistory")))
        .unwrap_or_else(|| PathBuf::from(".cache/confighistory"));
    let cached = cache.join("bin/kubectl");
    if cached.exists() {
        cached
    } else {
        PathBuf::from("kubectl")
    }
}

/// The outcome of one kubectl run.
#[derive(Debug, Clone)]
pub struct Kubectl {
    pub args: Vec<String>,
    pub success: bool,
    pub stdout: String,
    pub stderr: String,
}

impl Kubectl {
    /// Panics with the full output unless kubectl succeeded.
    #[track_caller]
    pub fn expect_success(self) -> Kubectl {
        assert!(self.success, "kubectl {} failed:\n{}", self.args.join(" "), self.describe());
        self
    }

    /// `Warning: ...` lines, which kubectl prints on stderr for the warnings of an admission
    /// response (without the `Warning: ` prefix).
    pub fn warnings(&self) -> Vec<String> {
        self.stderr.lines().filter_map(|line| line.strip_prefix("Warning: ")).map(str::to_owned).collect()
    }

    pub fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("kubectl {} printed no JSON ({e}):\n{}", self.args.join(" "), self.describe()))
    }

    pub fn describe(&self) -> String {
        format!("--- stdout\n{}--- stderr\n{}", self.stdout, self.stderr)
    }

    fn into_result(self) -> Result<Kubectl, Kubectl> {
        if self.success {
            Ok(self)
        } else {
            Err(self)
        }
    }
}

/// A namespace of its own for one test, deleted when the guard drops (set
/// `CONFIGHISTORY_E2E_KEEP=1` to keep it for a look after a failure).
pub struct TestNamespace {
    pub name: String,
    pub cluster: &'static Cluster,
}

static NAMESPACE_COUNTER: AtomicU32 = AtomicU32::new(0);

impl TestNamespace {
    /// Creates `e2e-<prefix>-<unique>`, labelled [`NAMESPACE_LABEL`]=`<its name>` and
    /// [`RUN_LABEL`]=[`run_id`] (so this process's confighistory server acts in it).
    pub fn new(cluster: &'static Cluster, prefix: &str) -> TestNamespace {
        TestNamespace::with_labels(cluster, prefix, &[])
    }

    /// A namespace that confighistory's webhooks leave alone (label `confighistory.io/exclude`),
    /// for tests of the cluster or the harness that must not be mutated by a server another test
    /// of the same run has registered.
    pub fn excluded(cluster: &'static Cluster, prefix: &str) -> TestNamespace {
        TestNamespace::with_labels(cluster, prefix, &[(EXCLUDE_LABEL, "true")])
    }

    /// Like [`TestNamespace::new`], with more labels (e.g. `confighistory.io/mode`).
    pub fn with_labels(cluster: &'static Cluster, prefix: &str, labels: &[(&str, &str)]) -> TestNamespace {
        TestNamespace::in_run(cluster, Some(run_id()), prefix, labels)
    }

    /// A namespace of the run `run` ([`RUN_LABEL`]; `None`: of no run, so no confighistory
    /// server of any test process acts in it until it is labelled, see [`TestNamespace::join_run`]).
    pub fn in_run(cluster: &'static Cluster, run: Option<&str>, prefix: &str, labels: &[(&str, &str)]) -> TestNamespace {
        let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.subsec_nanos()).unwrap_or(0);
        let unique = format!("{}{}{}", std::process::id() % 100_000, NAMESPACE_COUNTER.fetch_add(1, Ordering::Relaxed), nanos % 1000);
        let prefix: String = prefix.to_lowercase().chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '-' }).take(40).collect();
        let name = format!("e2e-{}-{unique}", prefix.trim_matches('-'));
        let mut manifest =
            format!("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {name}\n  labels:\n    {NAMESPACE_LABEL}: {name}\n");
        if let Some(run) = run {
            manifest.push_str(&format!("    {RUN_LABEL}: {run:?}\n"));
        }
        for (key, value) in labels {
            manifest.push_str(&format!("    {key}: {value:?}\n"));
        }
        cluster.apply_cluster_scoped(&manifest);
        TestNamespace { name, cluster }
    }

    /// Labels this namespace [`RUN_LABEL`]=`run`: from now on that run's confighistory server
    /// sees it (as if confighistory had just been installed).
    pub fn join_run(&self, run: &str) {
        self.cluster.kubectl(&["label", "namespace", &self.name, &format!("{RUN_LABEL}={run}"), "--overwrite"]).expect_success();
    }

    /// kubectl with `-n <this namespace>` appended.
    pub fn kubectl(&self, args: &[&str]) -> Kubectl {
        let mut all = args.to_vec();
        all.extend(["-n", &self.name]);
        self.cluster.kubectl(&all)
    }

    /// `kubectl apply -f -` into this namespace. Both outcomes carry stdout and stderr (warnings
    /// are on stderr).
    pub fn apply(&self, yaml: &str) -> Result<Kubectl, Kubectl> {
        self.apply_with(yaml, &[])
    }

    /// `kubectl apply -f - <extra>`, e.g. `&["--server-side"]` or `&["--dry-run=server"]`.
    pub fn apply_with(&self, yaml: &str, extra: &[&str]) -> Result<Kubectl, Kubectl> {
        let mut args = vec!["apply", "-n", &self.name, "-f", "-"];
        args.extend_from_slice(extra);
        self.cluster.kubectl_stdin(&args, yaml).into_result()
    }

    /// Applies `yaml` and panics if the cluster refused it.
    #[track_caller]
    pub fn accepts(&self, yaml: &str) -> Kubectl {
        match self.apply(yaml) {
            Ok(out) => out,
            Err(out) => panic!("expected the cluster to accept the manifest, it refused:\n{}", out.describe()),
        }
    }

    /// Applies `yaml` and panics unless the cluster refused it with a message containing `expected`.
    #[track_caller]
    pub fn rejects(&self, yaml: &str, expected: &str) -> Kubectl {
        match self.apply(yaml) {
            Ok(out) => panic!("expected the cluster to refuse the manifest, it accepted:\n{}", out.describe()),
            Err(out) => {
                assert!(out.stderr.contains(expected), "the cluster refused the manifest, but not with {expected:?}:\n{}", out.describe());
                out
            }
        }
    }

    /// `kubectl get <kind> <name> -o json`, or `None` when it does not exist.
    pub fn get_json(&self, kind: &str, name: &str) -> Option<Value> {
        let out = self.kubectl(&["get", kind, name, "-o", "json"]);
        if out.success {
            Some(out.json())
        } else if out.stderr.contains("NotFound") || out.stderr.contains("not found") {
            None
        } else {
            panic!("kubectl get {kind} {name} failed:\n{}", out.describe())
        }
    }

    /// The items of `kubectl get <kind> -o json` in this namespace.
    pub fn list_json(&self, kind: &str) -> Vec<Value> {
        let out = self.kubectl(&["get", kind, "-o", "json"]).expect_success();
        out.json()["items"].as_array().cloned().unwrap_or_default()
    }

    /// A ConfigMap's `data`, or `None` when it does not exist.
    pub fn configmap_data(&self, name: &str) -> Option<BTreeMap<String, String>> {
        self.get_json("configmap", name).map(|cm| string_map(&cm["data"]))
    }

    /// `kubectl rollout undo deployment/<name> [--to-revision=N]`; an undo must always go through.
    #[track_caller]
    pub fn rollout_undo(&self, deployment: &str, to_revision: Option<u32>) -> Kubectl {
        self.rollout_undo_of("deployment", deployment, to_revision)
    }

    /// `kubectl rollout undo <kind>/<name> [--to-revision=N]` once the workload's controller has
    /// recorded its latest revision (so the undo goes to the revision before it).
    #[track_caller]
    pub fn rollout_undo_of(&self, kind: &str, name: &str, to_revision: Option<u32>) -> Kubectl {
        self.wait_observed(kind, name);
        let target = format!("{kind}/{name}");
        let revision = to_revision.map(|r| format!("--to-revision={r}"));
        let mut args = vec!["rollout", "undo", target.as_str()];
        args.extend(revision.as_deref());
        self.kubectl(&args).expect_success()
    }

    /// Sets an annotation on this namespace, e.g. `confighistory.io/settle`.
    pub fn annotate(&self, key: &str, value: &str) {
        self.cluster.kubectl(&["annotate", "namespace", &self.name, &format!("{key}={value}"), "--overwrite"]).expect_success();
    }

    /// Names of the snapshots in this namespace (ConfigMaps labelled `confighistory.io/hash`), sorted.
    pub fn snapshots(&self) -> Vec<String> {
        let out = self
            .kubectl(&["get", "configmaps", "-l", "confighistory.io/hash", "-o", "jsonpath={.items[*].metadata.name}"])
            .expect_success();
        let mut names: Vec<String> = out.stdout.split_whitespace().map(str::to_owned).collect();
        names.sort();
        names
    }

    /// A workload's annotation, or `None`.
    pub fn annotation_of(&self, kind: &str, name: &str, key: &str) -> Option<String> {
        self.get_json(kind, name).and_then(|o| o["metadata"]["annotations"][key].as_str().map(str::to_owned))
    }

    /// Waits until the workload's controller has seen its latest spec (for a Deployment: its
    /// ReplicaSets and their revision annotations are in place).
    pub fn wait_observed(&self, kind: &str, name: &str) {
        wait_for(&format!("{kind}/{name} in {} to be observed", self.name), Duration::from_secs(30), || {
            self.get_json(kind, name).is_some_and(|obj| {
                let generation = obj["metadata"]["generation"].as_i64().unwrap_or(0);
                obj["status"]["observedGeneration"].as_i64().unwrap_or(-1) >= generation
            })
        });
    }

    /// A Deployment's rollout history, oldest revision first, read from its ReplicaSets:
    /// revision, first container's image, the ConfigMaps its pod template references by source,
    /// and the data of each referenced ConfigMap.
    pub fn history_of(&self, deployment: &str) -> Vec<Revision> {
        self.wait_observed("deployment", deployment);
        let owner = self.get_json("deployment", deployment).unwrap_or_else(|| panic!("deployment {deployment} not found in {}", self.name));
        let uid = owner["metadata"]["uid"].as_str().unwrap_or_default().to_owned();
        let mut revisions: Vec<Revision> = self
            .list_json("replicasets")
            .iter()
            .filter(|rs| rs["metadata"]["ownerReferences"].as_array().is_some_and(|refs| refs.iter().any(|r| r["uid"] == uid.as_str())))
            .map(|rs| {
                let revision =
                    rs["metadata"]["annotations"]["deployment.kubernetes.io/revision"].as_str().and_then(|r| r.parse().ok()).unwrap_or(0);
                self.revision_from_template(revision, rs["metadata"]["name"].as_str().unwrap_or_default(), &rs["spec"]["template"])
            })
            .collect();
        revisions.sort_by_key(|r| r.revision);
        revisions
    }

    /// The rollout history of a Deployment (its ReplicaSets), StatefulSet or DaemonSet (its
    /// ControllerRevisions), oldest revision first; see [`TestNamespace::history_of`].
    pub fn history_of_kind(&self, kind: &str, name: &str) -> Vec<Revision> {
        if kind == "deployment" {
            return self.history_of(name);
        }
        self.wait_observed(kind, name);
        let owner = self.get_json(kind, name).unwrap_or_else(|| panic!("{kind} {name} not found in {}", self.name));
        let uid = owner["metadata"]["uid"].as_str().unwrap_or_default().to_owned();
        let mut revisions: Vec<Revision> = self
            .list_json("controllerrevisions")
            .iter()
            .filter(|cr| cr["metadata"]["ownerReferences"].as_array().is_some_and(|refs| refs.iter().any(|r| r["uid"] == uid.as_str())))
            .map(|cr| {
                let revision = cr["revision"].as_u64().unwrap_or(0) as u32;
                self.revision_from_template(revision, cr["metadata"]["name"].as_str().unwrap_or_default(), &cr["data"]["spec"]["template"])
            })
            .collect();
        revisions.sort_by_key(|r| r.revision);
        revisions
    }

    /// What the live workload's pod template names, as a [`Revision`] (revision 0).
    pub fn current_template(&self, kind: &str, name: &str) -> Revision {
        let obj = self.get_json(kind, name).unwrap_or_else(|| panic!("{kind} {name} not found in {}", self.name));
        self.revision_from_template(0, name, &obj["spec"]["template"])
    }

    /// What a pod template names: image, sources → referenced ConfigMaps, their data.
    pub fn revision_from_template(&self, revision: u32, owner: &str, template: &Value) -> Revision {
        let pod_spec = &template["spec"];
        let mut snapshots = BTreeMap::new();
        let mut data = BTreeMap::new();
        for name in configmap_refs(pod_spec) {
            let configmap = self.get_json("configmap", &name);
            let source = configmap
                .as_ref()
                .and_then(|cm| cm["metadata"]["annotations"][SOURCE_NAME_ANNOTATION].as_str())
                .unwrap_or(&name)
                .to_owned();
            if let Some(cm) = &configmap {
                data.insert(name.clone(), string_map(&cm["data"]));
            }
            snapshots.insert(source, name);
        }
        Revision {
            revision,
            owner: owner.to_owned(),
            image: pod_spec["containers"][0]["image"].as_str().unwrap_or_default().to_owned(),
            snapshots,
            data,
        }
    }
}

impl Drop for TestNamespace {
    fn drop(&mut self) {
        if std::env::var_os("CONFIGHISTORY_E2E_KEEP").is_some() {
            eprintln!("e2e: keeping namespace {}", self.name);
            return;
        }
        let out = self.cluster.kubectl(&["delete", "namespace", &self.name, "--wait=false", "--ignore-not-found"]);
        if !out.success {
            eprintln!("e2e: could not delete namespace {}:\n{}", self.name, out.describe());
        }
    }
}

/// One revision of a workload's rollout history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Revision {
    pub revision: u32,
    /// The ReplicaSet (or ControllerRevision) that holds it.
    pub owner: String,
    /// The first container's image.
    pub image: String,
    /// Source name → the ConfigMap the template references for it (a snapshot name, or the
    /// source's own name for a plain reference).
    pub snapshots: BTreeMap<String, String>,
    /// Referenced ConfigMap name → its data (absent when the ConfigMap does not exist).
    pub data: BTreeMap<String, BTreeMap<String, String>>,
}

impl Revision {
    /// The data the pods of this revision read for `source`.
    pub fn config(&self, source: &str) -> Option<&BTreeMap<String, String>> {
        self.snapshots.get(source).and_then(|name| self.data.get(name))
    }
}

/// Every ConfigMap a pod spec references (spec §4), in every container list.
pub fn configmap_refs(pod_spec: &Value) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut add = |v: &Value| {
        if let Some(name) = v.as_str() {
            names.insert(name.to_owned());
        }
    };
    for volume in pod_spec["volumes"].as_array().into_iter().flatten() {
        add(&volume["configMap"]["name"]);
        for source in volume["projected"]["sources"].as_array().into_iter().flatten() {
            add(&source["configMap"]["name"]);
        }
    }
    for list in ["initContainers", "containers", "ephemeralContainers"] {
        for container in pod_spec[list].as_array().into_iter().flatten() {
            for env in container["env"].as_array().into_iter().flatten() {
                add(&env["valueFrom"]["configMapKeyRef"]["name"]);
            }
            for env_from in container["envFrom"].as_array().into_iter().flatten() {
                add(&env_from["configMapRef"]["name"]);
            }
        }
    }
    names
}

fn string_map(v: &Value) -> BTreeMap<String, String> {
    v.as_object().map(|m| m.iter().map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned())).collect()).unwrap_or_default()
}

/// Polls `condition` every 200 ms until it holds; panics after `timeout`.
#[track_caller]
pub fn wait_for(what: &str, timeout: Duration, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !condition() {
        assert!(Instant::now() < deadline, "timed out after {timeout:?} waiting for {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Polls `f` every 200 ms until it returns `Some`; panics after `timeout`.
#[track_caller]
pub fn wait_for_value<T>(what: &str, timeout: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(value) = f() {
            return value;
        }
        assert!(Instant::now() < deadline, "timed out after {timeout:?} waiting for {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// A free TCP port on `host` (bound and released: the caller binds it again right away).
pub fn free_port(host: &str) -> u16 {
    std::net::TcpListener::bind((host, 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or_else(|e| panic!("no free port on {host}: {e}"))
}

/// Runs `certs/generate` into `dir` for `host` (+ localhost) and returns the CA certificate (PEM).
pub fn generate_serving_cert(dir: &Path, host: &str) -> String {
    let is_ip = host.parse::<std::net::IpAddr>().is_ok();
    let (dns, ips) = match (is_ip, host) {
        (true, "127.0.0.1") => ("localhost".to_owned(), "127.0.0.1".to_owned()),
        (true, ip) => ("localhost".to_owned(), format!("127.0.0.1,{ip}")),
        (false, name) => (format!("localhost,{name}"), "127.0.0.1".to_owned()),
    };
    let mut command = Command::new(repo_root().join("certs/generate"));
    command.arg("--out").arg(dir).args(["--dns", &dns, "--ip", &ips]);
    let output = command.output().expect("run certs/generate");
    assert!(output.status.success(), "certs/generate failed: {}", String::from_utf8_lossy(&output.stderr));
    std::fs::read_to_string(dir.join("ca.crt")).expect("read ca.crt")
}

/// base64 of a PEM bundle, as `caBundle` wants it.
pub fn ca_bundle(ca_pem: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(ca_pem)
}
