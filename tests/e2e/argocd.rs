//! Argo CD for real (docs/behaviour.md §10.11, §11.15): its application controller and
//! repo server, built from the Go module (`tests/e2e/controllers build argo-cd`, redis from Debian),
//! sync the incident's manifests from a Git server on loopback (`tests/e2e/controllers git-serve`)
//! into namespaces of this run, with the Application settings docs/install.md gives
//! (`ServerSideDiff=true,IncludeMutationWebhook=true`), while the suite's confighistory server pins.
//!
//! One set of processes per test process, started on first use, as for Flux (tests/e2e/gitops.rs):
//! the controller keeps its settings (`argocd-cm`, `argocd-secret`), the `default` AppProject and
//! the Applications in a namespace of its own (`e2e-argocd-<run id>`, of no run, so no
//! confighistory server acts in it) and syncs into each test's namespace. A shell holding a pipe
//! from the test process deletes the Applications, stops the processes and deletes that namespace
//! when the process exits. CRDs are created when missing and never deleted.
//!
//! These tests need the current lane's node and Argo CD built, so they are ignored in the suite's
//! run and form a lane of their own, which tests/run runs on every current-lane run (building Argo
//! CD once when it is not cached; its cost in docs/testing.md): `tests/e2e/controllers build
//! argo-cd && cargo test --test e2e -- --ignored argocd:: --test-threads 1`. `CONFIGHISTORY_E2E_ARGOCD_ARGS` adds flags to both processes (e.g.
//! `--loglevel=debug`); their logs are in `$CONFIGHISTORY_E2E_DIR/run/argocd-<run id>/logs/`.

use std::collections::BTreeSet;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::gitops::{assert_reads, release, running, written_parts, APP_A, APP_B};
use crate::support::apps::{KEY_A, KEY_B, SOURCE};
use crate::support::confighistory::webhook;
use crate::support::controllers::{self, Running, Start, WorkTree};
use crate::support::{cluster, repo_root, run_id, wait_for_value, TestNamespace};

/// How often the controller compares every Application with Git and the cluster (its
/// `timeout.reconciliation`, 180 s by default with jitter): short, so a minute holds many.
const RESYNC: &str = "10s";
/// The compare options docs/install.md gives for an Application.
const COMPARE_OPTIONS: &str = "ServerSideDiff=true,IncludeMutationWebhook=true";

/// The Argo CD processes of this test process; its settings and Applications live in `namespace`
/// (the controller's `--namespace`).
struct ArgoCd(Running);

impl std::ops::Deref for ArgoCd {
    type Target = Running;
    fn deref(&self) -> &Running {
        &self.0
    }
}

static ARGOCD: OnceLock<Option<ArgoCd>> = OnceLock::new();

/// The cluster, the suite's server and this process's Argo CD, or `None` (with a message) where
/// they cannot run.
fn argocd() -> Option<&'static ArgoCd> {
    let cluster = cluster()?;
    ARGOCD
        .get_or_init(|| {
            if !controllers::can_run(cluster, "argocd", "argo-cd") {
                return None;
            }
            webhook(cluster);
            // Applications have no finalizer: deleting one leaves its resources, which go with the
            // test's namespace.
            let how = Start {
                set: "argo-cd",
                name: "argocd",
                delete_first: "applications.argoproj.io",
                args_variable: "CONFIGHISTORY_E2E_ARGOCD_ARGS",
                // Read by the application controller (argocd-cm's timeout.reconciliation reaches
                // it through these in a real install).
                env: &[("ARGOCD_RECONCILIATION_TIMEOUT", RESYNC), ("ARGOCD_RECONCILIATION_JITTER", "0s")],
            };
            Some(ArgoCd(Running::start(cluster, how, |namespace| {
                cluster.apply_cluster_scoped(&settings(namespace));
            })))
        })
        .as_ref()
}

/// What the controller reads at start: argocd-cm and argocd-secret (found by their label; the
/// secret needs a server.secretkey), and the `default` project that the API server, not run here,
/// would create.
fn settings(namespace: &str) -> String {
    format!(
        "apiVersion: v1
kind: ConfigMap
metadata:
  name: argocd-cm
  namespace: {namespace}
  labels: {{app.kubernetes.io/part-of: argocd}}
---
apiVersion: v1
kind: Secret
metadata:
  name: argocd-secret
  namespace: {namespace}
  labels: {{app.kubernetes.io/part-of: argocd}}
stringData:
  server.secretkey: e2e-{run}
---
apiVersion: argoproj.io/v1alpha1
kind: AppProject
metadata:
  name: default
  namespace: {namespace}
spec:
  sourceRepos: ['*']
  destinations: [{{server: '*', namespace: '*'}}]
  clusterResourceWhitelist: [{{group: '*', kind: '*'}}]
",
        run = run_id()
    )
}

impl ArgoCd {
    /// A test's Git repository and its Application (same name), syncing into `target`.
    fn repo(&'static self, name: &str) -> Repo {
        Repo { argocd: self, name: name.to_owned(), git: self.repository(name) }
    }
}

/// A test's Git repository (work tree, pushed to git-serve) and its Application, deleted when it
/// drops (before the test's namespace: declare it after).
struct Repo {
    argocd: &'static ArgoCd,
    name: String,
    git: WorkTree,
}

/// Its work tree's `write` and `commit`.
impl std::ops::Deref for Repo {
    type Target = WorkTree;
    fn deref(&self) -> &WorkTree {
        &self.git
    }
}

impl Repo {
    /// The Application docs/install.md shows: the repository's root (plain manifests) on `main`
    /// into `target`, automated sync with prune and self-heal.
    fn application(&self, target: &str) {
        self.application_with(target, &format!("argocd.argoproj.io/compare-options: {COMPARE_OPTIONS}"), "", true);
    }

    /// The Application with `annotations` (one `key: value` line, or empty), `spec` lines added
    /// (indented by two), and automated sync with prune, self-heal as given.
    fn application_with(&self, target: &str, annotations: &str, spec: &str, self_heal: bool) {
        // Block style: a flow mapping would split the compare options at their comma.
        let annotations = if annotations.is_empty() { "{}".to_owned() } else { format!("\n    {annotations}") };
        let app = format!(
            "apiVersion: argoproj.io/v1alpha1
kind: Application
metadata:
  name: {name}
  annotations: {annotations}
spec:
  project: default
  source: {{repoURL: \"{url}\", targetRevision: main, path: .}}
  destination: {{server: \"https://kubernetes.default.svc\", namespace: {target}}}
  syncPolicy:
    automated: {{prune: true, selfHeal: {self_heal}}}
{spec}",
            name = self.name,
            url = self.url
        );
        self.argocd.cluster.kubectl_stdin(&["apply", "-n", &self.argocd.namespace, "-f", "-"], &app).expect_success();
    }

    fn get(&self) -> Value {
        self.argocd.kubectl(&["get", "application", &self.name, "-o", "json"]).expect_success().json()
    }

    /// Asks for a hard refresh (Git read again, no cached revision), as `argocd app get --hard-refresh`.
    fn hard_refresh(&self) {
        self.argocd.kubectl(&["annotate", "application", &self.name, "argocd.argoproj.io/refresh=hard", "--overwrite"]).expect_success();
    }

    /// Waits until `done` holds for the Application; a timeout shows its status.
    #[track_caller]
    fn wait(&self, what: &str, timeout: Duration, done: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + timeout;
        loop {
            let app = self.get();
            if done(&app) {
                return app;
            }
            assert!(
                Instant::now() < deadline,
                "timed out after {timeout:?} waiting for {what}; Application {}:\n{:#}",
                self.name,
                app["status"]
            );
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    /// Waits until Argo CD has synced commit `sha` (its last operation succeeded) and reports the
    /// Application Synced to it and Healthy.
    #[track_caller]
    fn wait_synced(&self, sha: &str) -> Value {
        self.wait(&format!("Argo CD to sync {sha}, Synced and Healthy"), Duration::from_secs(240), |app| {
            let status = &app["status"];
            status["sync"]["status"] == "Synced"
                && status["sync"]["revision"] == sha
                && status["health"]["status"] == "Healthy"
                && status["operationState"]["phase"] == "Succeeded"
                && status["operationState"]["syncResult"]["revision"] == sha
        })
    }
}

impl Drop for Repo {
    fn drop(&mut self) {
        if std::env::var_os("CONFIGHISTORY_E2E_KEEP").is_some() {
            return;
        }
        self.argocd.kubectl(&["delete", "application", &self.name, "--ignore-not-found", "--wait=true", "--timeout=60s"]);
    }
}

/// Synced and Healthy, nothing else: what the Application must say at every look.
fn synced_and_healthy(app: &Value) -> bool {
    app["status"]["sync"]["status"] == "Synced" && app["status"]["health"]["status"] == "Healthy"
}

/// Looks at the Application every 2 s for a minute: Synced and Healthy at every look. The
/// Application after it (Synced and Healthy) and the comparisons seen (`reconciledAt`).
#[track_caller]
fn synced_for_a_minute(repo: &Repo) -> (Value, BTreeSet<String>) {
    let mut compared = BTreeSet::new();
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(60) {
        let app = repo.get();
        assert!(synced_and_healthy(&app), "after {:?} the Application is not Synced and Healthy:\n{:#}", start.elapsed(), app["status"]);
        compared.extend(app["status"]["reconciledAt"].as_str().map(str::to_owned));
        std::thread::sleep(Duration::from_secs(2));
    }
    let app = repo.get();
    assert!(synced_and_healthy(&app), "{:#}", app["status"]);
    (app, compared)
}

/// docs/behaviour.md §10.11, §11.15; docs/install.md (Argo CD): an Application with
/// `ServerSideDiff=true,IncludeMutationWebhook=true` and automated sync with self-heal, its
/// Deployment pinned by confighistory, compared with Git every 10 s for a minute: Synced and
/// Healthy at every look, no sync started (self-heal would start one on any drift), no new
/// ReplicaSet, no new snapshot, no write to the Deployment or the ConfigMap.
#[test]
#[ignore = "the Argo CD lane: needs the current lane (a node) and Argo CD built: tests/e2e/controllers build argo-cd"]
fn argocd_server_side_diff_with_the_webhook_stays_synced_on_pinned_references() {
    let Some(argocd) = argocd() else { return };
    let ns = TestNamespace::new(argocd.cluster, "argocd-steady");
    let repo = argocd.repo(&ns.name);
    repo.write("release.yaml", &release(APP_A, KEY_A));
    let sha = repo.commit("release A");
    repo.application(&ns.name);
    let app = repo.wait_synced(&sha);
    assert_reads(&running(&ns, APP_A), "4.11", KEY_A, KEY_B);
    let before = ns.history_of("pricing");
    assert_eq!(before.len(), 1, "{before:#?}");
    assert_ne!(before[0].snapshots[SOURCE], SOURCE, "pinned");
    let snapshots = ns.snapshots();
    assert_eq!(snapshots.len(), 1, "{snapshots:?}");
    let deployment = written_parts(&ns.get_json("deployment", "pricing").unwrap());
    let source = written_parts(&ns.get_json("configmap", SOURCE).unwrap());
    let syncs = app["status"]["history"].as_array().map_or(0, Vec::len);
    let operation = app["status"]["operationState"]["startedAt"].clone();

    let (app, compared) = synced_for_a_minute(&repo);
    // reconciledAt has a resolution of a second; a comparison every 10 s gives ~6 in a minute.
    assert!(compared.len() >= 4, "a minute at a 10 s resync is several comparisons, saw {compared:?}");
    assert_eq!(app["status"]["history"].as_array().map_or(0, Vec::len), syncs, "no sync since: {:#}", app["status"]["history"]);
    assert_eq!(app["status"]["operationState"]["startedAt"], operation, "no operation since: {:#}", app["status"]["operationState"]);
    let errors: Vec<&Value> = app["status"]["conditions"].as_array().into_iter().flatten().collect();
    assert!(errors.is_empty(), "{errors:#?}");

    assert_eq!(ns.history_of("pricing"), before, "no new ReplicaSet");
    assert_eq!(ns.snapshots(), snapshots, "no new snapshot");
    assert_eq!(written_parts(&ns.get_json("deployment", "pricing").unwrap()), deployment, "no write to the Deployment");
    assert_eq!(written_parts(&ns.get_json("configmap", SOURCE).unwrap()), source, "no write to the ConfigMap");
    assert_reads(&running(&ns, APP_A), "4.11", KEY_A, KEY_B);
    eprintln!("e2e: argocd: {} comparisons in a minute, Synced and Healthy at each, nothing written", compared.len());
}

/// docs/behaviour.md §11.15 with Argo CD: release A, then release B pushed to Git and synced, then
/// a rollback in Argo CD to A's sync (what `argocd app rollback` does through the API server,
/// done here on the Application: automated sync off, then an operation syncing A's revision and
/// source from the Application's history). The pods end on A's image reading A's config, A's
/// snapshot found again.
#[test]
#[ignore = "the Argo CD lane: run with the other argocd:: tests"]
fn argocd_rollback_to_a_previous_sync_runs_the_old_image_with_the_old_config() {
    let Some(argocd) = argocd() else { return };
    let ns = TestNamespace::new(argocd.cluster, "argocd-rollback");
    let repo = argocd.repo(&ns.name);
    repo.write("release.yaml", &release(APP_A, KEY_A));
    let a = repo.commit("release A");
    repo.application(&ns.name);
    repo.wait_synced(&a);
    assert_reads(&running(&ns, APP_A), "4.11", KEY_A, KEY_B);
    let snapshot_a = ns.current_template("deployment", "pricing").snapshots[SOURCE].clone();
    assert_ne!(snapshot_a, SOURCE, "pinned");

    repo.write("release.yaml", &release(APP_B, KEY_B));
    let b = repo.commit("release B");
    repo.hard_refresh();
    let app = repo.wait_synced(&b);
    assert_reads(&running(&ns, APP_B), "4.12", KEY_B, KEY_A);
    let history = app["status"]["history"].as_array().cloned().unwrap_or_default();
    let entry_a = history.iter().find(|h| h["revision"] == a.as_str()).unwrap_or_else(|| panic!("A's sync in the history: {history:#?}"));

    // `argocd app rollback` refuses while automated sync is on ("rollback cannot be initiated
    // when auto-sync is enabled"): turn it off, as a person does first.
    repo.argocd.kubectl(&["patch", "application", &repo.name, "--type", "merge", "-p", r#"{"spec":{"syncPolicy":null}}"#]).expect_success();
    let operation = json!({"operation": {
        "sync": {"revision": entry_a["revision"], "source": entry_a["source"], "syncStrategy": {"apply": {}}},
        "initiatedBy": {"username": "e2e"},
        "info": [{"name": "Reason", "value": format!("rollback to {}", entry_a["id"])}],
    }});
    repo.argocd.kubectl(&["patch", "application", &repo.name, "--type", "merge", "-p", &operation.to_string()]).expect_success();
    let app = repo.wait(&format!("the rollback to {a} to succeed"), Duration::from_secs(240), |app| {
        let op = &app["status"]["operationState"];
        op["phase"] == "Succeeded" && op["syncResult"]["revision"] == a.as_str() && app["status"]["health"]["status"] == "Healthy"
    });
    assert_eq!(app["status"]["operationState"]["operation"]["initiatedBy"]["username"], "e2e", "{:#}", app["status"]);
    // Git's head is still B: Argo CD says so once it has compared again, and (automated sync off)
    // leaves A running.
    repo.wait("Argo CD to report the rollback OutOfSync with Git's head", Duration::from_secs(60), |app| {
        app["status"]["sync"]["status"] == "OutOfSync" && app["status"]["sync"]["revision"] == b.as_str()
    });

    assert_reads(&running(&ns, APP_A), "4.11", KEY_A, KEY_B);
    ns.wait_observed("deployment", "pricing");
    let now = ns.current_template("deployment", "pricing");
    assert_eq!((now.image.as_str(), now.snapshots[SOURCE].as_str()), (APP_A, snapshot_a.as_str()), "{now:#?}");
    assert!(now.config(SOURCE).is_some_and(|c| c.contains_key(KEY_A)), "{now:#?}");
    let history = ns.history_of("pricing");
    let last = history.last().unwrap();
    assert_eq!(last.image, APP_A, "{history:#?}");
    assert!(last.config(SOURCE).is_some_and(|c| c.contains_key(KEY_A)), "{history:#?}");
    assert!(
        !history.iter().any(|r| r.image == APP_A && r.config(SOURCE).is_some_and(|c| c.contains_key(KEY_B))),
        "no (A, B's config) revision: {history:#?}"
    );
    assert_eq!(ns.snapshots().len(), 2, "the rollback found A's snapshot again: {:?}", ns.snapshots());
}

/// docs/install.md's per-Application `spec.ignoreDifferences` (the YAML block after "The same
/// expressions work per Application"), as JSON.
fn documented_ignore_differences() -> Value {
    let text = std::fs::read_to_string(repo_root().join("docs/install.md")).expect("docs/install.md");
    let start =
        text.find("```yaml\nspec:\n  ignoreDifferences:").expect("the per-Application block in docs/install.md") + "```yaml\n".len();
    let block = &text[start..start + text[start..].find("```").expect("the block's end")];
    let yaml: Value = serde_saphyr::from_str(block).expect("the block is YAML");
    yaml["spec"]["ignoreDifferences"].clone()
}

/// docs/install.md (Argo CD), the other settings against the same pinned release, automated sync
/// without self-heal (a revision is synced once, so a drift is reported, not fought), compared
/// every 10 s for 40 s: with no setting (Argo CD's default client-side diff) the Deployment is
/// OutOfSync at every look (its pinned names differ from Git's plain ones: a setting is needed);
/// with `ServerSideDiff=true` alone, and with docs/install.md's per-Application
/// `ignoreDifferences` (read from the doc), the Application is Synced at every look. None of them
/// adds a ReplicaSet or a snapshot.
#[test]
#[ignore = "the Argo CD lane: run with the other argocd:: tests"]
fn argocd_without_a_setting_pinned_references_are_drift_and_the_other_settings_stay_synced() {
    let Some(argocd) = argocd() else { return };
    let ignore = format!("  ignoreDifferences: {}\n", documented_ignore_differences());
    let variants = [
        ("none", String::new(), String::new(), "OutOfSync [\"Deployment/pricing\"]"),
        ("ssd-only", "argocd.argoproj.io/compare-options: ServerSideDiff=true".to_owned(), String::new(), "Synced []"),
        ("ignore", String::new(), ignore, "Synced []"),
    ];
    let mut apps = Vec::new();
    for (label, annotations, spec, _) in &variants {
        let ns = TestNamespace::new(argocd.cluster, &format!("argocd-diff-{label}"));
        let repo = argocd.repo(&ns.name);
        repo.write("release.yaml", &release(APP_A, KEY_A));
        let sha = repo.commit("release A");
        repo.application_with(&ns.name, annotations, spec, false);
        // The Application goes before its namespace (tuple fields drop in order).
        apps.push((*label, repo, ns, sha));
    }
    let mut before = Vec::new();
    for (label, repo, ns, sha) in &apps {
        repo.wait(&format!("{label}: A synced and Healthy"), Duration::from_secs(240), |app| {
            let op = &app["status"]["operationState"];
            op["phase"] == "Succeeded" && op["syncResult"]["revision"] == sha.as_str() && app["status"]["health"]["status"] == "Healthy"
        });
        let history = ns.history_of("pricing");
        assert_eq!(history.len(), 1, "{label}: {history:#?}");
        assert_ne!(history[0].snapshots[SOURCE], SOURCE, "{label}: pinned");
        before.push((history, ns.snapshots()));
    }
    // What each Application says at each look: its sync status and the resources not Synced.
    let says = |repo: &Repo| {
        let app = repo.get();
        let out: Vec<String> = app["status"]["resources"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|r| r["status"] != "Synced")
            .map(|r| format!("{}/{}", r["kind"].as_str().unwrap_or_default(), r["name"].as_str().unwrap_or_default()))
            .collect();
        format!("{} {out:?}", app["status"]["sync"]["status"].as_str().unwrap_or_default())
    };
    // The first comparison after the sync may still be running: wait for each to say it once.
    for ((label, repo, _, _), (_, _, _, expected)) in apps.iter().zip(&variants) {
        let what = format!("{label}: Argo CD to say {expected}");
        wait_for_value(&what, Duration::from_secs(60), || (says(repo) == *expected).then_some(()));
    }
    let start = Instant::now();
    let mut looks = 0;
    while start.elapsed() < Duration::from_secs(40) {
        for ((label, repo, _, _), (_, _, _, expected)) in apps.iter().zip(&variants) {
            assert_eq!(says(repo), *expected, "{label} after {:?}", start.elapsed());
        }
        looks += 1;
        std::thread::sleep(Duration::from_secs(2));
    }
    for ((label, _, ns, _), (history, snapshots)) in apps.iter().zip(&before) {
        assert_eq!(&ns.history_of("pricing"), history, "{label}: no new ReplicaSet");
        assert_eq!(&ns.snapshots(), snapshots, "{label}: no new snapshot");
    }
    eprintln!("e2e: argocd: {looks} looks: no setting OutOfSync (the Deployment), ServerSideDiff alone and ignoreDifferences Synced");
}

/// docs/install.md's `argocd-cm` block (the one after "For all Applications"): its `data`.
fn documented_argocd_cm() -> serde_json::Map<String, Value> {
    let text = std::fs::read_to_string(repo_root().join("docs/install.md")).expect("docs/install.md");
    let start = text
        .find("```yaml\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: argocd-cm")
        .expect("the argocd-cm block in docs/install.md")
        + "```yaml\n".len();
    let block = &text[start..start + text[start..].find("```").expect("the block's end")];
    let yaml: Value = serde_saphyr::from_str(block).expect("the block is YAML");
    let data = yaml["data"].as_object().cloned().expect("the block has data");
    assert!(data.keys().any(|k| k.ends_with("apps_Deployment")), "{data:?}");
    data
}

/// Takes docs/install.md's `argocd-cm` keys out of the shared settings again when dropped, so the
/// Argo CD tests after this one see the default settings.
struct GlobalSettings {
    argocd: &'static ArgoCd,
    keys: Vec<String>,
}

impl Drop for GlobalSettings {
    fn drop(&mut self) {
        let data: serde_json::Map<String, Value> = self.keys.iter().map(|k| (k.clone(), Value::Null)).collect();
        let patch = json!({"data": data}).to_string();
        self.argocd.kubectl(&["patch", "configmap", "argocd-cm", "--type", "merge", "-p", &patch]);
        // The controller reads its settings through a watch: give it a moment before the next test.
        std::thread::sleep(Duration::from_secs(5));
    }
}

/// docs/install.md's global form: the `argocd-cm` keys merged into the controller's settings, and
/// an Application with no setting of its own (Argo CD's default client-side diff) and automated
/// sync with self-heal, compared with Git every 10 s for a minute: Synced and Healthy at every
/// look, no sync after the first (self-heal would start one on any drift: a write loop), no new
/// ReplicaSet or snapshot, no write to the Deployment or the ConfigMap.
#[test]
#[ignore = "the Argo CD lane: run with the other argocd:: tests"]
fn argocd_the_documented_argocd_cm_settings_keep_every_application_synced() {
    let Some(argocd) = argocd() else { return };
    let data = documented_argocd_cm();
    let settings = GlobalSettings { argocd, keys: data.keys().cloned().collect() };
    argocd.kubectl(&["patch", "configmap", "argocd-cm", "--type", "merge", "-p", &json!({"data": data}).to_string()]).expect_success();
    // The controller reads its settings through a watch.
    std::thread::sleep(Duration::from_secs(5));
    let ns = TestNamespace::new(argocd.cluster, "argocd-global");
    let repo = argocd.repo(&ns.name);
    repo.write("release.yaml", &release(APP_A, KEY_A));
    let sha = repo.commit("release A");
    repo.application_with(&ns.name, "", "", true);
    let app = repo.wait_synced(&sha);
    assert_reads(&running(&ns, APP_A), "4.11", KEY_A, KEY_B);
    let before = ns.history_of("pricing");
    assert_eq!(before.len(), 1, "{before:#?}");
    assert_ne!(before[0].snapshots[SOURCE], SOURCE, "pinned");
    let snapshots = ns.snapshots();
    let deployment = written_parts(&ns.get_json("deployment", "pricing").unwrap());
    let source = written_parts(&ns.get_json("configmap", SOURCE).unwrap());
    let syncs = app["status"]["history"].as_array().map_or(0, Vec::len);

    let (app, compared) = synced_for_a_minute(&repo);
    assert!(compared.len() >= 4, "a minute at a 10 s resync is several comparisons, saw {compared:?}");
    assert_eq!(app["status"]["history"].as_array().map_or(0, Vec::len), syncs, "no sync since: {:#}", app["status"]["history"]);
    assert_eq!(ns.history_of("pricing"), before, "no new ReplicaSet");
    assert_eq!(ns.snapshots(), snapshots, "no new snapshot");
    assert_eq!(written_parts(&ns.get_json("deployment", "pricing").unwrap()), deployment, "no write to the Deployment");
    assert_eq!(written_parts(&ns.get_json("configmap", SOURCE).unwrap()), source, "no write to the ConfigMap");
    drop(repo);
    drop(settings);
    eprintln!("e2e: argocd: the argocd-cm settings: {} comparisons in a minute, Synced at each, nothing written", compared.len());
}
