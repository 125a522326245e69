//! GitOps controllers for real (docs/behaviour.md §10 "GitOps", §11.15): Flux's
//! source-controller, kustomize-controller and helm-controller, built from their Go modules
//! (`tests/e2e/controllers build flux`), reconcile the incident's manifests from a Git server on
//! loopback (`tests/e2e/controllers git-serve`) into namespaces of this run, with the settings
//! docs/install.md gives, while the suite's confighistory server pins.
//!
//! One set of controllers per test process, started on first use: they watch one namespace of
//! their own (`e2e-flux-<run id>`, where the GitRepository, Kustomization and HelmRelease objects
//! live) and apply into each test's namespace (`targetNamespace`), so several runs can share a
//! cluster. A shell holding a pipe from the test process stops them (and deletes that namespace)
//! when the process exits, however it exits, as `tests/e2e/run-webhook` does for the server. CRDs
//! are created when missing and never deleted (other runs may use them).
//!
//! These need pods that run (current lane) and the built controllers: without them the tests say
//! so and skip; under CI on the current lane a missing build is a failure (tests/run builds them
//! first). `CONFIGHISTORY_E2E_FLUX_ARGS` adds flags to every controller (e.g. `--log-level=debug`:
//! helm-controller then logs each drift's patch); their logs are in
//! `$CONFIGHISTORY_E2E_DIR/run/flux-<run id>/logs/`.

use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::apps::{configmap, workload, KEY_A, KEY_B, SOURCE};
use crate::support::confighistory::webhook;
use crate::support::controllers::WorkTree;
use crate::support::controllers::{self, Running, Start};
use crate::support::{cluster, wait_for, wait_for_value, TestNamespace};

/// The test app's images in the loopback registry (docker.io/library/pricing:...): the app prints
/// `app <version> started` and every file under /etc/pricing, then waits.
pub(crate) const APP_A: &str = "pricing:4.11";
pub(crate) const APP_B: &str = "pricing:4.12";
/// How often the controllers look at Git and reconcile ("every few seconds").
const INTERVAL: &str = "5s";

/// The controllers of this process; the Flux objects live in `namespace`, the only one they watch.
struct Flux(Running);

impl std::ops::Deref for Flux {
    type Target = Running;
    fn deref(&self) -> &Running {
        &self.0
    }
}

static FLUX: OnceLock<Option<Flux>> = OnceLock::new();

/// The cluster, the suite's server and this process's Flux controllers, or `None` (with a
/// message) where they cannot run.
fn flux() -> Option<&'static Flux> {
    let cluster = cluster()?;
    FLUX.get_or_init(|| {
        if !controllers::can_run(cluster, "gitops", "flux") {
            return None;
        }
        webhook(cluster);
        let how = Start {
            set: "flux",
            name: "flux",
            delete_first:
                "helmreleases.helm.toolkit.fluxcd.io,kustomizations.kustomize.toolkit.fluxcd.io,gitrepositories.source.toolkit.fluxcd.io",
            args_variable: "CONFIGHISTORY_E2E_FLUX_ARGS",
            env: &[],
        };
        Some(Flux(Running::start(cluster, how, |_| {})))
    })
    .as_ref()
}

impl Flux {
    fn apply(&self, yaml: &str) {
        self.cluster.kubectl_stdin(&["apply", "-n", &self.namespace, "-f", "-"], yaml).expect_success();
    }

    fn get(&self, kind: &str, name: &str) -> Value {
        self.kubectl(&["get", kind, name, "-o", "json"]).expect_success().json()
    }

    /// A controller's log from byte `from` on.
    fn log_since(&self, controller: &str, from: u64) -> String {
        let text = std::fs::read(self.state.join(format!("logs/{controller}.log"))).unwrap_or_default();
        String::from_utf8_lossy(text.get(from as usize..).unwrap_or_default()).into_owned()
    }

    fn log_len(&self, controller: &str) -> u64 {
        std::fs::metadata(self.state.join(format!("logs/{controller}.log"))).map(|m| m.len()).unwrap_or(0)
    }

    /// The Events about one of the Flux objects: (reason, message).
    fn events_of(&self, kind: &str, name: &str) -> Vec<(String, String)> {
        let events = self.kubectl(&["get", "events", "-o", "json"]).expect_success().json();
        events["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|e| e["involvedObject"]["kind"] == kind && e["involvedObject"]["name"] == name)
            .map(|e| {
                let message = e["message"].as_str().or(e["note"].as_str()).unwrap_or_default();
                (e["reason"].as_str().unwrap_or_default().to_owned(), message.to_owned())
            })
            .collect()
    }

    /// Creates a Git repository for a test and its GitRepository source `name`.
    fn repo(&'static self, name: &str) -> Repo {
        Repo { flux: self, name: name.to_owned(), git: self.repository(name) }
    }
}

/// A test's Git repository (work tree, pushed to git-serve) and its Flux objects, deleted when it
/// drops (before the test's namespace: declare it after).
struct Repo {
    flux: &'static Flux,
    name: String,
    git: WorkTree,
}

/// Its work tree's `write`, `commit` and `revert`.
impl std::ops::Deref for Repo {
    type Target = WorkTree;
    fn deref(&self) -> &WorkTree {
        &self.git
    }
}

impl Repo {
    /// The GitRepository source of this repository (same name).
    fn source(&self) {
        self.flux.apply(&format!(
            "apiVersion: source.toolkit.fluxcd.io/v1
kind: GitRepository
metadata: {{name: {name}}}
spec:
  interval: {INTERVAL}
  url: {url}
  ref: {{branch: main}}
",
            name = self.name,
            url = self.url
        ));
    }

    /// The Kustomization docs/install.md shows, applying the repository's root into `target`.
    fn kustomization(&self, target: &str) {
        self.flux.apply(&format!(
            "apiVersion: kustomize.toolkit.fluxcd.io/v1
kind: Kustomization
metadata: {{name: {name}}}
spec:
  interval: {INTERVAL}
  path: ./
  prune: true
  targetNamespace: {target}
  sourceRef: {{kind: GitRepository, name: {name}}}
",
            name = self.name
        ));
    }

    /// Waits until the Kustomization is Ready with commit `sha` applied.
    fn wait_applied(&self, sha: &str) {
        let flux = self.flux;
        let what = format!("Kustomization {} to apply {sha}", self.name);
        wait_for(&what, Duration::from_secs(120), || {
            let k = flux.get("kustomization", &self.name);
            k["status"]["lastAppliedRevision"].as_str().is_some_and(|r| r.ends_with(sha)) && ready(&k)
        });
    }
}

impl Drop for Repo {
    fn drop(&mut self) {
        if std::env::var_os("CONFIGHISTORY_E2E_KEEP").is_some() {
            return;
        }
        for kind in ["helmrelease", "kustomization", "gitrepository"] {
            self.flux.kubectl(&["delete", kind, &self.name, "--ignore-not-found", "--wait=true", "--timeout=60s"]);
        }
    }
}

/// Whether a Flux object's Ready condition is True.
fn ready(obj: &Value) -> bool {
    condition(obj, "Ready").is_some_and(|c| c["status"] == "True")
}

fn condition<'a>(obj: &'a Value, kind: &str) -> Option<&'a Value> {
    obj["status"]["conditions"].as_array()?.iter().find(|c| c["type"] == kind)
}

/// The incident's release: the pricing ConfigMap (`key`) and the Deployment running `image`.
pub(crate) fn release(image: &str, key: &str) -> String {
    format!("{}---\n{}", configmap(SOURCE, &[(key, "/etc/rules")]), workload("deployment", "pricing", image, SOURCE))
}

/// What the running (not terminating) pods of the pricing Deployment printed, once there is one,
/// Ready, running `image`.
pub(crate) fn running(ns: &TestNamespace, image: &str) -> String {
    wait_for_value(&format!("one Ready pod of pricing running {image} in {}", ns.name), Duration::from_secs(180), || {
        let pods = ns.kubectl(&["get", "pods", "-l", "app=pricing", "-o", "json"]).expect_success().json();
        let live: Vec<&Value> = pods["items"].as_array()?.iter().filter(|p| p["metadata"]["deletionTimestamp"].is_null()).collect();
        let [pod] = live.as_slice() else { return None };
        let is_ready = pod["status"]["conditions"].as_array()?.iter().any(|c| c["type"] == "Ready" && c["status"] == "True");
        if !is_ready || pod["spec"]["containers"][0]["image"] != image {
            return None;
        }
        let out = ns.kubectl(&["logs", pod["metadata"]["name"].as_str()?]);
        (out.success && out.stdout.contains("started")).then_some(out.stdout)
    })
}

/// Asserts the running pod is `version` of the app reading config key `key` (and not `other`).
#[track_caller]
pub(crate) fn assert_reads(output: &str, version: &str, key: &str, other: &str) {
    assert!(output.contains(&format!("app {version} started")), "{output}");
    assert!(output.contains(&format!("== /etc/pricing/{key}")), "runs {version} with {key}:\n{output}");
    assert!(!output.contains(&format!("== /etc/pricing/{other}")), "{version} reads {other}:\n{output}");
}

/// The parts of an object a write by Flux or confighistory would change: generation, labels,
/// annotations, spec (or data).
pub(crate) fn written_parts(obj: &Value) -> Value {
    serde_json::json!({
        "generation": obj["metadata"]["generation"],
        "labels": obj["metadata"]["labels"],
        "annotations": obj["metadata"]["annotations"],
        "spec": obj["spec"],
        "data": obj["data"],
    })
}

/// docs/behaviour.md §10, §11.15: Flux reconciling unchanged manifests from Git every 5 s for a
/// minute, with the Kustomization docs/install.md shows: no new revision, no new snapshot, no
/// write to the Deployment's or the ConfigMap's spec, data or annotations, the Kustomization Ready
/// all along and every apply reporting the objects unchanged.
#[test]
fn flux_reconciling_unchanged_manifests_every_few_seconds_changes_nothing() {
    let Some(flux) = flux() else { return };
    let ns = TestNamespace::new(flux.cluster, "flux-steady");
    let repo = flux.repo(&ns.name);
    repo.write("release.yaml", &release(APP_A, KEY_A));
    let sha = repo.commit("release A");
    repo.source();
    repo.kustomization(&ns.name);
    repo.wait_applied(&sha);
    let before = ns.history_of("pricing");
    assert_eq!(before.len(), 1, "{before:#?}");
    assert_ne!(before[0].snapshots[SOURCE], SOURCE, "pinned");
    let snapshots = ns.snapshots();
    let deployment = written_parts(&ns.get_json("deployment", "pricing").unwrap());
    let source = written_parts(&ns.get_json("configmap", SOURCE).unwrap());
    let log_from = flux.log_len("kustomize-controller");

    let reconciled = |k: &Value| k["status"]["history"][0]["totalReconciliations"].as_u64().unwrap_or(0);
    let reconciled_before = reconciled(&flux.get("kustomization", &repo.name));
    // Flux marks Ready Unknown while a reconcile runs ("Reconciliation in progress"); never False.
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(60) {
        let k = flux.get("kustomization", &repo.name);
        let status = condition(&k, "Ready").map(|c| c["status"].clone()).unwrap_or_default();
        assert_ne!(status, "False", "the Kustomization failed after {:?}: {:#}", start.elapsed(), k["status"]);
        std::thread::sleep(Duration::from_secs(2));
    }
    wait_for("the Kustomization to be Ready", Duration::from_secs(30), || ready(&flux.get("kustomization", &repo.name)));

    assert_eq!(ns.history_of("pricing"), before, "no new revision");
    assert_eq!(ns.snapshots(), snapshots, "no new snapshot");
    assert_eq!(written_parts(&ns.get_json("deployment", "pricing").unwrap()), deployment, "no write to the Deployment");
    assert_eq!(written_parts(&ns.get_json("configmap", SOURCE).unwrap()), source, "no write to the ConfigMap");
    let log = flux.log_since("kustomize-controller", log_from);
    let ours: Vec<&str> = log.lines().filter(|l| l.contains(&repo.name)).collect();
    let reconciles = ours.iter().filter(|l| l.contains("Reconciliation finished")).count();
    assert!(reconciles >= 6, "a minute at 5 s intervals is many reconciles, saw {reconciles}:\n{}", ours.join("\n"));
    // Flux's own record: one entry per distinct set of applied objects, all successful.
    let k = flux.get("kustomization", &repo.name);
    let history = k["status"]["history"].as_array().cloned().unwrap_or_default();
    assert_eq!(history.len(), 1, "the applied objects never changed: {:#}", k["status"]["history"]);
    assert_eq!(history[0]["lastReconciledStatus"], "ReconciliationSucceeded", "{:#}", k["status"]["history"]);
    assert!(reconciled(&k) >= reconciled_before + 6, "{:#}", k["status"]["history"]);
    let applies: Vec<&str> = ours.iter().copied().filter(|l| l.contains("server-side apply completed")).collect();
    assert!(!applies.is_empty(), "each reconcile applies:\n{}", ours.join("\n"));
    let changed: Vec<&str> = applies.iter().copied().filter(|l| l.contains("configured") || l.contains("created")).collect();
    assert!(changed.is_empty(), "the applies of unchanged manifests changed objects:\n{changed:#?}");
    eprintln!("e2e: gitops: {reconciles} reconciles in a minute, every object unchanged");
}

/// docs/behaviour.md §11.15: release B pushed to Git, then `git revert` of it pushed: the pods end
/// on A's image reading A's config, A's snapshot found again.
#[test]
fn flux_a_release_then_its_git_revert_runs_the_old_image_with_the_old_config() {
    let Some(flux) = flux() else { return };
    let ns = TestNamespace::new(flux.cluster, "flux-revert");
    let repo = flux.repo(&ns.name);
    repo.write("release.yaml", &release(APP_A, KEY_A));
    let a = repo.commit("release A");
    repo.source();
    repo.kustomization(&ns.name);
    repo.wait_applied(&a);
    assert_reads(&running(&ns, APP_A), "4.11", KEY_A, KEY_B);

    repo.write("release.yaml", &release(APP_B, KEY_B));
    let b = repo.commit("release B");
    repo.wait_applied(&b);
    assert_reads(&running(&ns, APP_B), "4.12", KEY_B, KEY_A);

    let reverted = repo.revert();
    repo.wait_applied(&reverted);
    assert_reads(&running(&ns, APP_A), "4.11", KEY_A, KEY_B);
    let history = ns.history_of("pricing");
    let last = history.last().unwrap();
    assert_eq!(last.image, APP_A, "{history:#?}");
    assert!(last.config(SOURCE).is_some_and(|c| c.contains_key(KEY_A)), "{history:#?}");
    assert_eq!(ns.snapshots().len(), 2, "the revert found A's snapshot again: {:?}", ns.snapshots());
}

/// The pricing chart (a ConfigMap and a Deployment, image and config key from values) in the
/// repository at `charts/pricing`. Its readiness probe needs A's key: B renamed it, so B's pods
/// never become Ready and an upgrade to B fails its health check.
fn write_chart(repo: &Repo) {
    repo.write("charts/pricing/Chart.yaml", "apiVersion: v2\nname: pricing\nversion: 0.1.0\n");
    repo.write("charts/pricing/values.yaml", &format!("image: {APP_A}\nkey: {KEY_A}\n"));
    repo.write("charts/pricing/templates/configmap.yaml", &configmap(SOURCE, &[("{{ .Values.key }}", "/etc/rules")]));
    let probe = format!(
        "        image: {{{{ .Values.image }}}}
        readinessProbe:
          exec: {{command: [/bin/test, -f, /etc/pricing/{KEY_A}]}}
          periodSeconds: 1
"
    );
    let deployment =
        workload("deployment", "pricing", "{{ .Values.image }}", SOURCE).replace("        image: {{ .Values.image }}\n", &probe);
    assert!(deployment.contains("readinessProbe"), "{deployment}");
    repo.write("charts/pricing/templates/deployment.yaml", &deployment);
}

/// A HelmRelease of the chart in `repo` into `target`, with `values` and `extra` spec lines.
fn helm_release(repo: &Repo, target: &str, image: &str, key: &str, extra: &str) {
    repo.flux.apply(&format!(
        "apiVersion: helm.toolkit.fluxcd.io/v2
kind: HelmRelease
metadata: {{name: {name}}}
spec:
  interval: {INTERVAL}
  releaseName: pricing
  targetNamespace: {target}
  storageNamespace: {target}
  timeout: 45s
  chart:
    spec:
      chart: ./charts/pricing
      reconcileStrategy: Revision
      interval: {INTERVAL}
      sourceRef: {{kind: GitRepository, name: {name}}}
  values: {{image: \"{image}\", key: \"{key}\"}}
{extra}",
        name = repo.name
    ));
}

/// The chart's release history as helm-controller reports it: (version, status), newest first.
fn helm_history(flux: &Flux, name: &str) -> Vec<(u64, String)> {
    let hr = flux.get("helmrelease", name);
    hr["status"]["history"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|s| (s["version"].as_u64().unwrap_or(0), s["status"].as_str().unwrap_or_default().to_owned()))
        .collect()
}

/// docs/behaviour.md §10, §11.9: a HelmRelease whose upgrade to B fails its health check (B's pods
/// never Ready) with rollback remediation: helm-controller rolls back, and the rollback brings A's
/// config back with A's image, in the running pods.
#[test]
fn flux_helm_release_rolled_back_after_a_failed_upgrade_gets_its_old_config_back() {
    let Some(flux) = flux() else { return };
    let ns = TestNamespace::new(flux.cluster, "flux-helm-rollback");
    let repo = flux.repo(&ns.name);
    write_chart(&repo);
    repo.commit("chart");
    repo.source();
    let remediation = "  upgrade:\n    remediation: {retries: 0, remediateLastFailure: true, strategy: rollback}\n";
    helm_release(&repo, &ns.name, APP_A, KEY_A, remediation);
    wait_for("the HelmRelease to install A", Duration::from_secs(180), || ready(&flux.get("helmrelease", &repo.name)));
    assert_reads(&running(&ns, APP_A), "4.11", KEY_A, KEY_B);
    let snapshot_a = ns.current_template("deployment", "pricing").snapshots[SOURCE].clone();
    assert_ne!(snapshot_a, SOURCE, "pinned");

    helm_release(&repo, &ns.name, APP_B, KEY_B, remediation);
    let history = wait_for_value("helm-controller to roll the failed upgrade back", Duration::from_secs(240), || {
        let h = helm_history(flux, &repo.name);
        (h.len() >= 3).then_some(h)
    });
    // Newest first: the rollback (a release of A's chart and values), the failed upgrade, A.
    assert_eq!(history.iter().map(|(_, s)| s.as_str()).take(2).collect::<Vec<_>>(), ["deployed", "failed"], "{history:?}");
    ns.wait_observed("deployment", "pricing");
    let now = ns.current_template("deployment", "pricing");
    assert_eq!((now.image.as_str(), now.snapshots[SOURCE].as_str()), (APP_A, snapshot_a.as_str()), "{now:#?}");
    assert!(now.config(SOURCE).is_some_and(|c| c.contains_key(KEY_A)), "{now:#?}");
    assert_reads(&running(&ns, APP_A), "4.11", KEY_A, KEY_B);
    let events = flux.events_of("HelmRelease", &repo.name);
    assert!(events.iter().any(|(reason, _)| reason == "RollbackSucceeded"), "{events:#?}");
}

/// docs/behaviour.md §10: helm-controller's drift detection (mode enabled) diffs the release with a
/// server-side dry-run apply, which confighistory's webhook answers as it answers the apply:
/// the pinned references are what it expects, so it reports no drift and corrects nothing, over
/// many intervals.
#[test]
fn flux_helm_drift_detection_reports_no_drift_for_pinned_references() {
    let Some(flux) = flux() else { return };
    let ns = TestNamespace::new(flux.cluster, "flux-helm-drift");
    let repo = flux.repo(&ns.name);
    write_chart(&repo);
    repo.commit("chart");
    repo.source();
    helm_release(&repo, &ns.name, APP_A, KEY_A, "  driftDetection: {mode: enabled}\n");
    wait_for("the HelmRelease to install A", Duration::from_secs(180), || ready(&flux.get("helmrelease", &repo.name)));
    let before = ns.history_of("pricing");
    assert_ne!(before[0].snapshots[SOURCE], SOURCE, "pinned");
    let deployment = written_parts(&ns.get_json("deployment", "pricing").unwrap());
    let log_from = flux.log_len("helm-controller");

    // Drift detection runs at each reconcile once the release is in sync.
    let drifted = wait_for_value("helm-controller to report on drift", Duration::from_secs(60), || {
        condition(&flux.get("helmrelease", &repo.name), "Drifted").cloned()
    });
    std::thread::sleep(Duration::from_secs(30));
    let hr = flux.get("helmrelease", &repo.name);
    let drifted_now = condition(&hr, "Drifted").cloned().unwrap_or(drifted);
    let events = flux.events_of("HelmRelease", &repo.name);
    let log = flux.log_since("helm-controller", log_from);
    let reports: Vec<&str> = log.lines().filter(|l| l.contains(&repo.name) && l.contains("detected changes")).collect();
    assert_eq!(drifted_now["status"], "False", "drift reported: {drifted_now:#}\n{events:#?}\n{reports:#?}");
    assert!(!events.iter().any(|(reason, _)| reason == "DriftDetected"), "{events:#?}");
    assert!(reports.is_empty(), "{reports:#?}");
    assert!(ready(&hr), "{:#}", hr["status"]);
    assert_eq!(ns.history_of("pricing"), before, "no new revision");
    assert_eq!(written_parts(&ns.get_json("deployment", "pricing").unwrap()), deployment, "no correction written");
}

/// `confighistory gc --dry-run` for one namespace: its report line for `snapshot`.
fn gc_verdict(ns: &TestNamespace, snapshot: &str) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_confighistory"))
        .args(["gc", "--dry-run", "--only-namespace", &ns.name, "--gc-keep", "0", "--gc-grace", "0"])
        .env("KUBECONFIG", &ns.cluster.kubeconfig)
        .output()
        .expect("run confighistory gc");
    let report = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "confighistory gc failed:\n{report}\n{}", String::from_utf8_lossy(&out.stderr));
    let needle = format!(" {}/{snapshot}:", ns.name);
    report.lines().find(|l| l.contains(&needle)).map(str::to_owned).unwrap_or_else(|| panic!("{snapshot} not in the report:\n{report}"))
}

/// docs/behaviour.md §8.1, §10: Flux prunes a ConfigMap removed from Git while an old revision
/// still pins its snapshot. The snapshot is not Flux's (not in its inventory) and stays while the
/// history reaches it, so an undo to that revision still has its config; once the history no
/// longer reaches it, GC may take it.
#[test]
fn flux_prune_of_a_configmap_removed_from_git_keeps_the_snapshot_history_reaches() {
    let Some(flux) = flux() else { return };
    let ns = TestNamespace::new(flux.cluster, "flux-prune");
    let repo = flux.repo(&ns.name);
    let limit = |n: u32| format!("  revisionHistoryLimit: {n}\n  replicas: 1\n");
    repo.write("release.yaml", &release(APP_A, KEY_A).replace("  replicas: 1\n", &limit(5)));
    let a = repo.commit("release A");
    repo.source();
    repo.kustomization(&ns.name);
    repo.wait_applied(&a);
    let snapshot_a = ns.current_template("deployment", "pricing").snapshots[SOURCE].clone();
    assert_ne!(snapshot_a, SOURCE, "pinned");

    // Release B reads a ConfigMap of another name; pricing-config leaves Git.
    let rules = "pricing-rules";
    let b = format!("{}---\n{}", configmap(rules, &[(KEY_B, "/etc/rules")]), workload("deployment", "pricing", APP_B, rules));
    repo.write("release.yaml", &b.replace("  replicas: 1\n", &limit(5)));
    let b_sha = repo.commit("release B: pricing-rules replaces pricing-config");
    repo.wait_applied(&b_sha);
    wait_for("Flux to prune pricing-config", Duration::from_secs(60), || ns.get_json("configmap", SOURCE).is_none());
    assert_reads(&running(&ns, APP_B), "4.12", KEY_B, KEY_A);

    let history = ns.history_of("pricing");
    assert_eq!(history[0].snapshots[SOURCE], snapshot_a, "{history:#?}");
    assert!(history[0].config(SOURCE).is_some_and(|c| c.contains_key(KEY_A)), "revision 1 still has its config: {history:#?}");
    let verdict = gc_verdict(&ns, &snapshot_a);
    assert!(verdict.contains("referenced by ReplicaSet/"), "the snapshot an old revision pins is kept: {verdict}");
    // A resync or two of the suite's server (5 s): its GC keeps it too.
    std::thread::sleep(Duration::from_secs(12));
    assert!(ns.get_json("configmap", &snapshot_a).is_some(), "the snapshot revision 1 pins is gone");

    // History lets go: no old ReplicaSets kept.
    repo.write("release.yaml", &b.replace("  replicas: 1\n", &limit(0)));
    let trimmed = repo.commit("keep no old revisions");
    repo.wait_applied(&trimmed);
    wait_for("the old ReplicaSet to go", Duration::from_secs(120), || ns.history_of("pricing").len() == 1);
    let verdict = gc_verdict(&ns, &snapshot_a);
    assert!(!verdict.contains("referenced"), "nothing reaches the snapshot any more: {verdict}");
}
