//! Upgrades that change the webhooks (docs/install.md "Upgrading", docs/behaviour.md §9a.2): Secrets
//! turned on and off, a workload kind of another vendor registered and unregistered, mutual TLS
//! turned on, the failurePolicy changed, and `helm rollback` of each, while a client applies
//! releases in a loop. The webhook configurations and the pods change at different moments; no
//! confighistory webhook may fail open meanwhile (the API server's own count), and every apply is
//! admitted and pinned.

use std::process::{Command, Output};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::load::{apply_deployment, fail_opens, grown, load_deployment, webhook_metrics, Applied, Logs};
use super::{installed, ready, server_pods, APP_A, NAMESPACE, RELEASE};
use crate::support::apps::{configmap, pricing_config, KEY_A, SOURCE};
use crate::support::{find_helm, repo_root, wait_for, Cluster, TestNamespace};

/// The custom workload kind registered and unregistered (a CustomResourceDefinition this test
/// makes: a pod template and nothing else).
const WIDGET_GROUP: &str = "upgrades.e2e.confighistory.io";
const WIDGET_CRD: &str = "widgets.upgrades.e2e.confighistory.io";

/// Deployments the loop applies in turn (each apply changes its template, so each is an admission
/// that must pin it).
const LOAD_DEPLOYMENTS: usize = 12;

/// `helm <args>` against the cluster.
fn helm(cluster: &Cluster, args: &[&str]) -> Output {
    let helm = find_helm().expect("helm (tests/e2e/tools)");
    Command::new(&helm).args(args).env("KUBECONFIG", &cluster.kubeconfig).output().expect("run helm")
}

/// The values the admin set on the release (`helm get values`), as JSON.
fn user_values(cluster: &Cluster) -> Value {
    let out = helm(cluster, &["get", "values", RELEASE, "-n", NAMESPACE, "-o", "json"]);
    assert!(out.status.success(), "helm get values: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("helm get values JSON")
}

/// Puts the release back to the values the test started from (the chart of this tree), and
/// deletes the test's CustomResourceDefinition, passed or failed, so the other in-cluster tests
/// find the install as `tests/e2e/cluster install` left it.
struct Restore {
    cluster: &'static Cluster,
    values: Value,
}

impl Drop for Restore {
    fn drop(&mut self) {
        if user_values(self.cluster) != self.values {
            let file = std::env::temp_dir().join(format!("confighistory-values-{}.json", crate::support::run_id()));
            std::fs::write(&file, self.values.to_string()).expect("write the values");
            let chart = repo_root().join("charts/confighistory");
            let (chart, file) = (chart.to_string_lossy(), file.to_string_lossy());
            let args = ["upgrade", RELEASE, &chart, "-n", NAMESPACE, "--reset-values", "-f", &file, "--wait", "--timeout", "5m"];
            let out = helm(self.cluster, &args);
            if !out.status.success() {
                eprintln!("helm upgrade back to the values the test started from failed: {}", String::from_utf8_lossy(&out.stderr));
            }
        }
        self.cluster.kubectl(&["delete", "crd", WIDGET_CRD, "--ignore-not-found", "--wait=false"]);
    }
}

/// A Widget `name` whose pod template mounts `source` (the registered kind's objects).
fn widget(name: &str, round: usize) -> String {
    format!(
        "apiVersion: {WIDGET_GROUP}/v1
kind: Widget
metadata:
  name: {name}
spec:
  template:
    metadata:
      annotations: {{round: \"{round}\"}}
    spec:
      containers:
      - name: app
        image: {APP_A}
      volumes:
      - name: config
        configMap: {{name: {SOURCE}}}
"
    )
}

/// A Secret `name` holding `round` (no real secret value).
fn secret(name: &str, round: usize) -> String {
    format!("apiVersion: v1\nkind: Secret\nmetadata:\n  name: {name}\nstringData:\n  round: \"{round}\"\n")
}

/// One apply of the loop.
struct Apply {
    step: usize,
    what: String,
    ok: bool,
    /// The ConfigMap the admitted Deployment's template mounts (Deployments only).
    pinned: Option<String>,
    output: String,
}

/// One change of the release. With `--force-conflicts`: the certs tests re-create the webhook
/// configurations with kubectl, and under Helm 4 an upgrade that changes their rules then
/// conflicts with `kubectl-create` until it forces the chart's values (docs/install.md "Upgrading
/// with Helm 4"), which is not what this test is about.
struct Step {
    what: &'static str,
    helm: Vec<String>,
}

fn upgrade(what: &'static str, sets: &[&str]) -> Step {
    let mut args: Vec<String> = vec!["upgrade".into(), RELEASE.into()];
    args.push(repo_root().join("charts/confighistory").to_string_lossy().into_owned());
    args.extend(["--reset-then-reuse-values", "--force-conflicts", "--wait", "--timeout", "5m"].map(String::from));
    for s in sets {
        let (flag, value) = s.split_once(' ').unwrap_or(("--set", s));
        args.extend([flag.to_owned(), value.to_owned()]);
    }
    Step { what, helm: args }
}

fn rollback(what: &'static str) -> Step {
    Step { what, helm: ["rollback", RELEASE, "--force-conflicts", "--wait", "--timeout", "5m"].map(String::from).to_vec() }
}

/// Every change of the webhooks an admin makes with the chart, and `helm rollback` of each, under a
/// write loop of at least 2 Deployment applies a second (each checked pinned at once) with Secret,
/// Widget and ConfigMap writes beside it: the API server's fail-open count of confighistory's
/// webhooks stays where it was, every apply is admitted, and every Deployment is pinned.
#[test]
#[ignore = "needs confighistory installed in the cluster (tests/run: after `tests/e2e/cluster install`)"]
fn incluster_upgrades_that_change_webhooks_never_fail_open() {
    let cluster = installed();
    let mtls = cluster.state_dir.join("pki/admission.yaml").exists();
    let _restore = Restore { cluster, values: user_values(cluster) };
    cluster.apply_cluster_scoped(&format!(
        "apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: {WIDGET_CRD}
spec:
  group: {WIDGET_GROUP}
  scope: Namespaced
  names: {{plural: widgets, singular: widget, kind: Widget, listKind: WidgetList}}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema: {{type: object, x-kubernetes-preserve-unknown-fields: true}}
"
    ));
    cluster.kubectl(&["wait", "--for", "condition=Established", &format!("crd/{WIDGET_CRD}"), "--timeout", "60s"]).expect_success();
    let ns = TestNamespace::new(cluster, "incluster-webhook-upgrades");
    ns.accepts(&pricing_config(KEY_A));
    ns.accepts(&secret("upgrade-db", 0));

    let widget_kind = serde_json::json!([{"group": WIDGET_GROUP, "versions": ["v1"], "kind": "Widget", "resource": "widgets",
        "templatePath": "spec.template", "propagates": false}]);
    let widget_kind = format!("--set-json extraWorkloadKinds={widget_kind}");
    let mut steps = vec![
        upgrade("Secrets on", &["secrets.enabled=true"]),
        upgrade("Secrets off", &["secrets.enabled=false"]),
        rollback("rollback: Secrets on"),
        rollback("rollback: Secrets off"),
        upgrade("extraWorkloadKinds + Widget", &[&widget_kind]),
        rollback("rollback: Widget removed"),
        upgrade("failurePolicy Fail", &["webhook.failurePolicy=Fail"]),
        rollback("rollback: failurePolicy Ignore"),
    ];
    if mtls {
        steps.push(upgrade("mTLS on", &["clientAuth.enabled=true", "clientAuth.existingConfigMap=kube-root-ca.crt"]));
        steps.push(rollback("rollback: mTLS off"));
    } else {
        eprintln!("this cluster's API server presents no client certificate (pki/admission.yaml): the mTLS step is left out");
    }

    let start_metrics = webhook_metrics(cluster);
    let step = AtomicUsize::new(0);
    let done = AtomicBool::new(false);
    let applies = Mutex::new(Vec::<Apply>::new());
    let mut figures = Vec::new();
    let mut failed_step = None;
    let mut logs = Logs { children: Vec::new(), lines: Default::default() };
    logs.follow_new(cluster);
    let t0 = Instant::now();
    std::thread::scope(|s| {
        // Deployments, as fast as kubectl goes: each apply changes the template of one of a few
        // Deployments (replicas 0), so each is an admission that must pin it, checked in the
        // object the API server stored and returned.
        s.spawn(|| {
            let mut i = 0;
            let mut after = 0;
            while after < 10 {
                if done.load(Ordering::SeqCst) {
                    after += 1;
                }
                i += 1;
                let name = format!("load-{}", i % LOAD_DEPLOYMENTS);
                let manifest = load_deployment(&name, i).replace(
                    "        - configMapRef: {name: pricing-config}\n",
                    "        - configMapRef: {name: pricing-config}\n        - secretRef: {name: upgrade-db}\n",
                );
                assert!(manifest.contains("secretRef"), "{manifest}");
                let at = step.load(Ordering::SeqCst);
                let Applied { ok, pinned, output } = apply_deployment(&ns, &manifest);
                applies.lock().unwrap().push(Apply { step: at, what: format!("deployment/{name} round {i}"), ok, pinned, output });
            }
        });
        // Beside them, a write for every other webhook: a Secret (Secrets' webhook), a Widget
        // (the registered kind's), a ConfigMap no workload uses (the ConfigMaps' webhook).
        s.spawn(|| {
            let mut i = 0;
            while !done.load(Ordering::SeqCst) {
                i += 1;
                let at = step.load(Ordering::SeqCst);
                let cm = configmap("upgrade-unused", &[("round", &i.to_string())]);
                let mut writes = vec![("secret", secret("upgrade-secret", i)), ("configmap", cm)];
                // The Secret the Deployments use changes now and then: a Deployment admitted
                // with Secrets on then needs a fresh read of it (and a snapshot).
                if i % 5 == 0 {
                    writes.push(("secret", secret("upgrade-db", i / 5)));
                }
                if cluster.kubectl(&["get", "crd", WIDGET_CRD]).success {
                    writes.push(("widget", widget("upgrade-widget", i)));
                }
                for (what, manifest) in writes {
                    let result = ns.apply(&manifest);
                    let (ok, output) = match result {
                        Ok(o) => (true, o.stderr),
                        Err(e) => (false, e.describe()),
                    };
                    applies.lock().unwrap().push(Apply { step: at, what: format!("{what} round {i}"), ok, pinned: None, output });
                }
                std::thread::sleep(Duration::from_millis(200));
            }
        });
        // Let the loop run a moment before the first change.
        std::thread::sleep(Duration::from_secs(3));
        for (n, st) in steps.iter().enumerate() {
            step.store(n + 1, Ordering::SeqCst);
            let before = webhook_metrics(cluster);
            let started = Instant::now();
            let args: Vec<&str> = st.helm.iter().map(String::as_str).chain(["-n", NAMESPACE]).collect();
            let helm_done = AtomicBool::new(false);
            let out = std::thread::scope(|h| {
                let run = h.spawn(|| {
                    let out = helm(cluster, &args);
                    helm_done.store(true, Ordering::SeqCst);
                    out
                });
                while !helm_done.load(Ordering::SeqCst) {
                    logs.follow_new(cluster);
                    std::thread::sleep(Duration::from_millis(500));
                }
                run.join().expect("helm thread")
            });
            let took = started.elapsed();
            // Old pods stop after the rollout is Ready: the loop runs on until they are gone.
            wait_for("the old confighistory pods to stop", Duration::from_secs(120), || {
                logs.follow_new(cluster);
                let pods = server_pods(cluster);
                let all = cluster.kubectl(&[
                    "get",
                    "pods",
                    "-n",
                    NAMESPACE,
                    "-l",
                    &format!("app.kubernetes.io/instance={RELEASE}"),
                    "-o",
                    "name",
                ]);
                pods.iter().filter(|p| ready(p)).count() >= 2 && all.stdout.lines().filter(|l| l.contains("pod/")).count() == pods.len()
            });
            std::thread::sleep(Duration::from_secs(3));
            let after = webhook_metrics(cluster);
            figures.push((st.what, took, grown(&before, &after)));
            if !out.status.success() {
                failed_step = Some(format!("{} (helm {}) failed: {}", st.what, st.helm.join(" "), String::from_utf8_lossy(&out.stderr)));
                break;
            }
        }
        done.store(true, Ordering::SeqCst);
    });
    let total = t0.elapsed();
    let end_metrics = webhook_metrics(cluster);
    // The followers end with their pods; the last ones now.
    for (_, mut c) in std::mem::take(&mut logs.children) {
        let _ = (c.kill(), c.wait());
    }
    let server_warnings = logs.lines.lock().unwrap().clone();
    let applies = applies.into_inner().unwrap();
    let deployments = applies.iter().filter(|a| a.what.starts_with("deployment")).count();
    let mut report = format!(
        "{} applies in {:.0} s ({deployments} Deployments, {:.1}/s); API server metrics grown over the run: {:#?}\n",
        applies.len(),
        total.as_secs_f64(),
        deployments as f64 / total.as_secs_f64(),
        grown(&start_metrics, &end_metrics)
    );
    for (n, (what, took, grew)) in figures.iter().enumerate() {
        let here: Vec<&Apply> = applies.iter().filter(|a| a.step == n + 1).collect();
        report.push_str(&format!(
            "  {what}: helm {:.1} s, {} applies, {} failed, {} unpinned, fail-open +{}, {grew:?}\n",
            took.as_secs_f64(),
            here.len(),
            here.iter().filter(|a| !a.ok).count(),
            here.iter().filter(|a| a.pinned.as_deref().is_some_and(|p| !p.starts_with(&format!("{SOURCE}-")))).count(),
            fail_opens(grew)
        ));
        for a in here.iter().filter(|a| !a.ok).take(3) {
            let why = a.output.lines().find(|l| l.contains("denied the request") || l.contains("rror")).unwrap_or_default();
            report.push_str(&format!("    {} failed: {}\n", a.what, why.rsplit("STDIN\": ").next().unwrap_or(why)));
        }
    }
    report.push_str(&format!("server WARN/ERROR lines ({}):\n", server_warnings.len()));
    for line in server_warnings.iter().take(40) {
        report.push_str(&format!("  {line}\n"));
    }
    eprintln!("{report}");
    if let Some(failed) = failed_step {
        panic!("{failed}\n{report}");
    }
    let steps_names: Vec<&str> = steps.iter().map(|s| s.what).collect();
    let name_of = |a: &Apply| if a.step == 0 { "before the first change" } else { steps_names[a.step - 1] };
    for a in &applies {
        assert!(a.ok, "{} during {:?} failed:\n{}\n{report}", a.what, name_of(a), a.output);
    }
    for a in &applies {
        if let Some(pinned) = &a.pinned {
            assert!(
                pinned.starts_with(&format!("{SOURCE}-")),
                "{} during {:?} was admitted unpinned ({pinned}):\n{}\n{report}",
                a.what,
                name_of(a),
                a.output
            );
        }
    }
    assert_eq!(fail_opens(&grown(&start_metrics, &end_metrics)), 0.0, "confighistory's webhooks failed open:\n{report}");
    assert!(deployments as f64 / total.as_secs_f64() >= 2.0, "the loop applied at least 2 Deployments a second:\n{report}");
}
