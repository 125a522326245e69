//! Workload kinds an admin registers (docs/behaviour.md §4b), on the current lane's real
//! node: Argo Rollouts with its real controller and kubectl plugin (built from their Go module by
//! `tests/e2e/controllers build argo-rollouts`, CRDs from the same module), and a kind of the test's
//! own (a CRD with its pod template at another path, no controller).
//!
//! The server is one of this file's own (run `<run id>-kinds`), started with the chart's tested
//! Argo Rollouts values (charts/confighistory/tests/values-argo-rollouts.yaml) plus the test's kind,
//! registered through the chart (webhook rules, RBAC) and `--extra-workload-kinds`, as an install
//! with those values is. Pods must run (a node, the test app in the loopback registry), so these
//! tests are ignored in the normal run:
//! `tests/e2e/controllers build argo-rollouts && cargo test --test e2e -- --ignored rollouts::`.

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use confighistory::model::names::{HELD, PROPAGATED};
use serde_json::{json, Value};

use crate::incluster::app_output;
use crate::support::apps::{configmap, pricing_config, workload, KEY_A, KEY_B, SOURCE};
use crate::support::confighistory::{Webhook, NAMESPACE};
use crate::support::{cluster, repo_root, run_id, wait_for, wait_for_value, Cluster, Revision, TestNamespace};

/// The test app's images in the loopback registry (see incluster.rs).
const APP_A: &str = "pricing:4.11";
const APP_B: &str = "pricing:4.12";
const ROLLOUT_REVISION: &str = "rollout.argoproj.io/revision";

/// The Argo Rollouts entry the chart's tested values file holds, as JSON.
fn argo_entry() -> Value {
    let text = std::fs::read_to_string(repo_root().join("charts/confighistory/tests/values-argo-rollouts.yaml")).expect("values file");
    let values: Value = serde_saphyr::from_str(&text).expect("the values file is YAML");
    values["extraWorkloadKinds"][0].clone()
}

/// The group of this run's Widget kind: a CRD of this process's own, so concurrent runs and a
/// CRD left behind by an earlier run never meet it.
fn widget_group() -> String {
    format!("r{}.e2e.confighistory.io", run_id())
}

fn widget_entry() -> Value {
    json!({"group": widget_group(), "versions": ["v1"], "kind": "Widget", "resource": "widgets",
           "templatePath": "spec.runner.template", "propagates": true})
}

/// `tests/e2e/controllers SUBCOMMAND ARGS...`, its stdout; a failure panics with its stderr.
fn controllers(args: &[&str]) -> String {
    let out = Command::new(repo_root().join("tests/e2e/controllers")).args(args).output().expect("run tests/e2e/controllers");
    assert!(
        out.status.success(),
        "tests/e2e/controllers {args:?} failed (build once with `tests/e2e/controllers build argo-rollouts`):\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8")
}

/// The server of this file, with Argo Rollouts' CRDs installed before it starts (the Widget CRD
/// is installed by its test, so the server starts without it).
fn server(cluster: &'static Cluster) -> &'static Webhook {
    static SERVER: OnceLock<Webhook> = OnceLock::new();
    SERVER.get_or_init(|| {
        for crd in controllers(&["crds", "argo-rollouts"]).lines() {
            // Server-side: the CRDs are too large for kubectl's last-applied annotation.
            cluster.kubectl(&["apply", "--server-side", "--force-conflicts", "-f", crd]).expect_success();
        }
        // (`kubectl wait` fails on a CRD without conditions yet.)
        wait_for("Argo Rollouts' CRD to be established", Duration::from_secs(60), || {
            let jsonpath = "jsonpath={.status.conditions[?(@.type==\"Established\")].status}";
            cluster.kubectl(&["get", "crd", "rollouts.argoproj.io", "-o", jsonpath]).stdout.trim() == "True"
        });
        let kinds = json!([argo_entry(), widget_entry()]).to_string();
        let run = format!("{}-kinds", run_id());
        // The default settle window (10 s), not the suite's 2 s: kubectl applies a release's
        // ConfigMap, then fetches the Rollout's schema before applying the Rollout, which can take
        // seconds on a loaded machine; with 2 s, propagation moved release A to B's config first
        // (a revision 4.11 + B that an undo then went back to: flaky, and not the incident).
        Webhook::start_with_kinds(cluster, &run, &["--resync-interval", "5"], &kinds)
    })
}

/// Argo Rollouts' controller watching one namespace, stopped when dropped.
struct ArgoController {
    state_dir: PathBuf,
    plugin: PathBuf,
}

impl ArgoController {
    fn start(cluster: &Cluster, ns: &TestNamespace) -> ArgoController {
        let state_dir = cluster.state_dir.join(format!("run/argo-rollouts-{}", ns.name));
        let kubeconfig = cluster.kubeconfig.to_string_lossy().into_owned();
        let out = controllers(&[
            "start",
            "argo-rollouts",
            "--kubeconfig",
            &kubeconfig,
            "--state-dir",
            &state_dir.to_string_lossy(),
            "--namespace",
            &ns.name,
        ]);
        let plugin = out.lines().find_map(|l| l.strip_prefix("KUBECTL_ARGO_ROLLOUTS=")).expect("the plugin's path").into();
        ArgoController { state_dir, plugin }
    }

    /// `kubectl argo rollouts ARGS... -n NS` with the admin's kubeconfig.
    fn plugin(&self, cluster: &Cluster, ns: &TestNamespace, args: &[&str]) -> String {
        let out = Command::new(&self.plugin)
            .args(args)
            .args(["-n", &ns.name])
            .env("KUBECONFIG", &cluster.kubeconfig)
            .output()
            .expect("run kubectl-argo-rollouts");
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success(), "kubectl argo rollouts {args:?}:\n{text}\ncontroller log:\n{}", self.log());
        text
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.state_dir.join("logs/rollouts-controller.log")).unwrap_or_default()
    }
}

impl Drop for ArgoController {
    fn drop(&mut self) {
        let _ = Command::new(repo_root().join("tests/e2e/controllers"))
            .args(["stop", "argo-rollouts", "--state-dir"])
            .arg(&self.state_dir)
            .output();
        if std::thread::panicking() {
            eprintln!("rollouts-controller log:\n{}", self.log());
        }
    }
}

/// The pricing service as a Rollout: the Deployment's template, and `strategy`.
fn rollout(image: &str, strategy: &str) -> String {
    let manifest = workload("deployment", "pricing", image, SOURCE)
        .replace("apiVersion: apps/v1\nkind: Deployment", "apiVersion: argoproj.io/v1alpha1\nkind: Rollout");
    format!("{manifest}  strategy:\n{strategy}")
}

const NO_STEPS: &str = "    canary: {}\n";

/// The Rollout's history: the ReplicaSets it owns, by `rollout.argoproj.io/revision`.
fn rollout_history(ns: &TestNamespace) -> Vec<Revision> {
    let uid = ns.get_json("rollout", "pricing").expect("the Rollout")["metadata"]["uid"].as_str().unwrap_or_default().to_owned();
    let mut revisions: Vec<Revision> = ns
        .list_json("replicasets")
        .iter()
        .filter(|rs| rs["metadata"]["ownerReferences"].as_array().is_some_and(|o| o.iter().any(|r| r["uid"] == uid.as_str())))
        .map(|rs| {
            let revision = rs["metadata"]["annotations"][ROLLOUT_REVISION].as_str().and_then(|r| r.parse().ok()).unwrap_or(0);
            ns.revision_from_template(revision, rs["metadata"]["name"].as_str().unwrap_or_default(), &rs["spec"]["template"])
        })
        .collect();
    revisions.sort_by_key(|r| r.revision);
    revisions
}

/// Waits until the Rollout is Healthy at its current template (Argo's own status).
fn healthy(ns: &TestNamespace) {
    wait_for("the Rollout to be Healthy", Duration::from_secs(120), || {
        let r = ns.get_json("rollout", "pricing").unwrap_or_default();
        // Argo writes observedGeneration as a string.
        let observed = &r["status"]["observedGeneration"];
        let observed = observed.as_str().map(str::to_owned).or_else(|| observed.as_i64().map(|g| g.to_string()));
        r["status"]["phase"] == "Healthy" && observed == Some(r["metadata"]["generation"].to_string())
    });
}

/// The incident on a Rollout (scenario 14): release A, release B (renamed key), `kubectl argo
/// rollouts undo` → the running pod is A's image and reads A's config; the undo is held. Then a
/// config-only edit reaches the Rollout's pods through an ordinary Argo update that runs its canary
/// steps, and GC keeps the snapshot of every ReplicaSet in the Rollout's history.
#[test]
#[ignore = "needs the current lane (a node) and Argo Rollouts built: tests/e2e/controllers build argo-rollouts"]
fn rollouts_an_argo_undo_restores_image_and_config_in_the_running_pod() {
    let Some(cluster) = cluster() else { return };
    let server = server(cluster);
    let ns = server.namespace("argo-incident", &[]);
    let argo = ArgoController::start(cluster, &ns);

    ns.accepts(&format!("{}---\n{}", pricing_config(KEY_A), rollout(APP_A, NO_STEPS)));
    healthy(&ns);
    let out = app_output(&ns, "pricing", 1);
    assert!(out[0].contains("app 4.11 started") && out[0].contains(&format!("/etc/pricing/{KEY_A}")), "{out:?}");
    let a = rollout_history(&ns);
    assert_eq!(a.len(), 1, "{a:#?}");
    assert!(a[0].snapshots[SOURCE].starts_with(&format!("{SOURCE}-")), "release A is pinned to a snapshot: {a:#?}");

    ns.accepts(&format!("{}---\n{}", pricing_config(KEY_B), rollout(APP_B, NO_STEPS)));
    healthy(&ns);
    let out = app_output(&ns, "pricing", 1);
    assert!(out[0].contains("app 4.12 started") && out[0].contains(&format!("/etc/pricing/{KEY_B}")), "{out:?}");

    // kubectl confighistory reads the Rollout as the server does (its published configuration
    // registers the kind): its pins, and what an undo would restore, asked of the API server.
    let status = confighistory_plugin(server, &ns, &["status", "rollout/pricing", "-o", "json"]);
    assert_eq!(status["workload"]["kind"], "Rollout.argoproj.io", "{status:#}");
    assert_eq!((&status["undo"]["revision"], &status["undo"]["images"][0]["image"]), (&json!(1), &json!(APP_A)), "{status:#}");
    let dry = confighistory_plugin(server, &ns, &["undo", "rollouts.argoproj.io/pricing", "--dry-run=server", "-o", "json"]);
    assert_eq!(dry["after"]["images"][0]["image"], APP_A, "{dry:#}");
    assert_eq!(dry["after"]["config"][0]["reference"], json!(a[0].snapshots[SOURCE]), "the undo would run A's snapshot: {dry:#}");
    let preview = &dry["preview"]["sources"][0]["diff"];
    assert_eq!((&preview["added"], &preview["removed"]), (&json!([KEY_A]), &json!([KEY_B])), "the undo brings A's key back: {dry:#}");
    // Its timeline (docs/plugin.md, "Timeline") and the difference between its revisions.
    let t = confighistory_plugin(server, &ns, &["history", "rollout/pricing", "-o", "json"]);
    assert_eq!(t["workload"]["kind"], "Rollout.argoproj.io", "{t:#}");
    let revs = t["revisions"].as_array().expect("revisions");
    let images: Vec<(&Value, &Value, &Value)> =
        revs.iter().map(|r| (&r["images"][0]["image"], &r["images"][0]["changed"], &r["running"])).collect();
    assert_eq!(images, [(&json!(APP_A), &json!(false), &json!(false)), (&json!(APP_B), &json!(true), &json!(true))], "{t:#}");
    assert_eq!(revs[0]["config"][0]["snapshot"], json!(a[0].snapshots[SOURCE]), "{t:#}");
    assert_eq!((&revs[1]["config"][0]["added"], &revs[1]["config"][0]["removed"]), (&json!([KEY_B]), &json!([KEY_A])), "{t:#}");
    let d =
        confighistory_plugin_exit(server, &ns, &["diff", "rollout/pricing", "--from-revision", "1", "--to-revision", "2", "-o", "json"], 1);
    assert_eq!((&d["images"][0]["from"], &d["images"][0]["to"]), (&json!(APP_A), &json!(APP_B)), "{d:#}");
    assert_eq!(d["sources"][0]["diff"]["added"], json!([KEY_B]), "{d:#}");

    let said = argo.plugin(cluster, &ns, &["undo", "pricing"]);
    healthy(&ns);
    let out = app_output(&ns, "pricing", 1);
    assert!(out[0].contains("app 4.11 started"), "{said}\n{out:?}");
    assert!(out[0].contains(&format!("== /etc/pricing/{KEY_A}\n/etc/rules")), "the undone pod reads 4.11's config: {out:?}");
    assert!(!out[0].contains(KEY_B), "the undone pod must not see 4.12's key: {out:?}");
    assert_eq!(ns.annotation_of("rollout", "pricing", HELD).as_deref(), Some(SOURCE), "the undo holds A's config");
    let now = ns.revision_from_template(0, "pricing", &ns.get_json("rollout", "pricing").unwrap()["spec"]["template"]);
    assert_eq!((now.image.as_str(), &now.snapshots[SOURCE]), (APP_A, &a[0].snapshots[SOURCE]), "back on A's snapshot");

    // A config-only edit after the undo (the fix, written under the new key): propagation moves
    // the held pin (a change after the hold), through a normal Argo update with canary steps.
    ns.kubectl(&[
        "patch",
        "rollout",
        "pricing",
        "--type",
        "merge",
        "-p",
        &json!({"spec": {"strategy": {"canary": {"steps": [{"setWeight": 50}, {"pause": {"duration": "2s"}}]}}}}).to_string(),
    ])
    .expect_success();
    healthy(&ns);
    let before = rollout_history(&ns).last().map(|r| r.revision).unwrap_or(0);
    ns.accepts(&configmap(SOURCE, &[(KEY_A, "/etc/rules-v2")]));
    let out = wait_for_value("the edit to reach the Rollout's pod", Duration::from_secs(120), || {
        let out = app_output(&ns, "pricing", 1);
        out[0].contains(&format!("== /etc/pricing/{KEY_A}\n/etc/rules-v2")).then_some(out)
    });
    assert!(out[0].contains("app 4.11 started"), "{out:?}");
    healthy(&ns);
    let r = ns.get_json("rollout", "pricing").unwrap();
    assert_eq!(r["status"]["currentStepIndex"], 2, "Argo ran both canary steps for the propagation: {:#}", r["status"]);
    let history = rollout_history(&ns);
    assert!(history.last().unwrap().revision > before, "a new revision: {history:#?}");
    let cm = ns.get_json("configmap", SOURCE).unwrap();
    assert_eq!(cm["metadata"]["annotations"][PROPAGATED], cm["metadata"]["annotations"]["confighistory.io/head"], "{cm:#}");
    // The revision the propagation made explains itself (docs/behaviour.md §7.9): the Rollout's
    // change-cause names the source, who changed it and what changed, and its timeline shows it
    // on that revision (kubectl-argo-rollouts has no history command).
    let cause = r["metadata"]["annotations"]["kubernetes.io/change-cause"].as_str().unwrap_or_default().to_owned();
    assert!(
        cause.starts_with(&format!("config {SOURCE} changed by ")) && cause.ends_with(&format!(": values changed [{KEY_A}]")),
        "{cause:?}: {:#}",
        r["metadata"]
    );
    let t = confighistory_plugin(server, &ns, &["history", "rollout/pricing", "-o", "json"]);
    let last = t["revisions"].as_array().and_then(|r| r.last()).cloned().unwrap_or_default();
    assert_eq!((&last["cause"], &last["causeByConfighistory"], &last["running"]), (&json!(cause), &json!(true), &json!(true)), "{t:#}");

    // GC keeps what every ReplicaSet of the Rollout's history references, with no grace and no
    // newest kept: the references alone keep them.
    let out = Command::new(env!("CARGO_BIN_EXE_confighistory"))
        .args(["gc", "--only-namespace", &ns.name, "--gc-keep", "0", "--gc-grace", "0"])
        .arg(format!("--extra-workload-kinds={}", json!([argo_entry()])))
        .env("KUBECONFIG", &server.kubeconfig)
        .output()
        .expect("run confighistory gc");
    let printed = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{printed}");
    for revision in rollout_history(&ns) {
        let snapshot = &revision.snapshots[SOURCE];
        assert!(ns.get_json("configmap", snapshot).is_some(), "{snapshot} of ReplicaSet {} was deleted:\n{printed}", revision.owner);
        // The reason printed is the first that keeps it: the source's head, or the ReplicaSet.
        let line = printed.lines().find(|l| l.contains(&format!("/{snapshot}:"))).unwrap_or_default();
        let why = [format!("referenced by ReplicaSet/{}", revision.owner), format!("the head of {SOURCE}")];
        assert!(line.starts_with("keep") && why.iter().any(|w| line.contains(w)), "kept for ReplicaSet {}:\n{printed}", revision.owner);
    }
}

/// A kind of the test's own, its pod template at `spec.runner.template`, no controller: registered
/// before its CRD exists, the server is ready all the same and reports it (metric, Event); once
/// the CRD is installed it is watched, a Widget is pinned on create and moved by propagation.
#[test]
#[ignore = "needs the current lane: run with the other rollouts:: tests"]
fn rollouts_a_kind_of_the_tests_own_is_registered_through_the_values() {
    let Some(cluster) = cluster() else { return };
    let server = server(cluster); // ready: the missing CRD held nothing back
    let group = widget_group();
    let kind = format!("Widget.{group}");
    let served = |value: u8| server.metrics().contains(&format!("confighistory_workload_kind_served{{kind=\"{kind}\"}} {value}\n"));
    assert!(served(0), "reported as not served:\n{}", server.metrics());
    wait_for("the WorkloadKindNotServed Event", Duration::from_secs(30), || {
        let events = cluster
            .kubectl(&["get", "events.events.k8s.io", "-n", NAMESPACE, "--field-selector", "reason=WorkloadKindNotServed", "-o", "json"])
            .json();
        events["items"].as_array().is_some_and(|items| {
            items.iter().any(|e| {
                e["note"].as_str().is_some_and(|n| n.contains(&kind))
                    && e["regarding"]["name"] == format!("{}-effective-config", server.name)
            })
        })
    });

    let crd = format!(
        "apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.{group}
spec:
  group: {group}
  scope: Namespaced
  names: {{plural: widgets, singular: widget, kind: Widget, listKind: WidgetList}}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema: {{type: object, x-kubernetes-preserve-unknown-fields: true}}
"
    );
    cluster.apply_cluster_scoped(&crd);
    let _remove = Remove(cluster, format!("crd/widgets.{group}"));
    wait_for("the server to watch the new kind", Duration::from_secs(40), || served(1));

    let ns = server.namespace("widget", &[]);
    let widget = format!(
        "apiVersion: {group}/v1
kind: Widget
metadata:
  name: w
spec:
  runner:
    template:
      metadata:
        labels: {{app: w}}
      spec:
        containers:
        - name: app
          image: {APP_A}
          volumeMounts:
          - {{name: config, mountPath: /etc/pricing}}
        volumes:
        - name: config
          configMap: {{name: {SOURCE}}}
"
    );
    ns.accepts(&format!("{}---\n{widget}", pricing_config(KEY_A)));
    let pinned = |ns: &TestNamespace| {
        let w = ns.get_json(&format!("widgets.{group}"), "w").expect("the Widget");
        w["spec"]["runner"]["template"]["spec"]["volumes"][0]["configMap"]["name"].as_str().unwrap_or_default().to_owned()
    };
    let first = pinned(&ns);
    assert!(first.starts_with(&format!("{SOURCE}-")), "pinned at spec.runner.template: {first}");
    ns.accepts(&pricing_config(KEY_B));
    let moved = wait_for_value("propagation to move the Widget", Duration::from_secs(40), || {
        let now = pinned(&ns);
        (now != first).then_some(now)
    });
    assert!(moved.starts_with(&format!("{SOURCE}-")), "{moved}");
    assert!(ns.get_json("configmap", &moved).unwrap()["data"].get(KEY_B).is_some(), "moved to the new content");
}

/// `kubectl confighistory ARGS... -n NS --server-config=<server's>` as the admin, its JSON output.
fn confighistory_plugin(server: &Webhook, ns: &TestNamespace, args: &[&str]) -> Value {
    confighistory_plugin_exit(server, ns, args, 0)
}

/// [`confighistory_plugin`] exiting with `code` (`diff`: 1 for differences).
fn confighistory_plugin_exit(server: &Webhook, ns: &TestNamespace, args: &[&str], code: i32) -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_kubectl-confighistory"))
        .args(args)
        .args(["-n", &ns.name, &format!("--server-config={}", server.server_config())])
        .env("KUBECONFIG", &ns.cluster.kubeconfig)
        .output()
        .expect("run kubectl-confighistory");
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(code), "kubectl confighistory {args:?}:\n{text}{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

/// Deletes a cluster-scoped object when dropped.
struct Remove(&'static Cluster, String);

impl Drop for Remove {
    fn drop(&mut self) {
        let _ = self.0.kubectl(&["delete", &self.1, "--ignore-not-found", "--wait=false"]);
    }
}
