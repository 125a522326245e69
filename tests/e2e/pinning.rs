//! confighistory under test: the API server calls the real server, which pins references.

use crate::support::apps::{app, configmap};
use crate::support::confighistory::webhook;
use crate::support::{cluster, TestNamespace};

fn config(rules: &str) -> String {
    configmap("app-config", &[("discount_rules_path", rules)])
}

fn deployment() -> String {
    app("registry.example/app:4.11").yaml()
}

#[test]
fn a_release_pins_the_config_reference_to_a_snapshot() {
    let Some(cluster) = cluster() else { return };
    webhook(cluster);
    let ns = TestNamespace::new(cluster, "pinning");

    ns.accepts(&config("/etc/rules"));
    ns.accepts(&deployment());

    let history = ns.history_of("app");
    assert_eq!(history.len(), 1, "{history:#?}");
    let snapshot = &history[0].snapshots["app-config"];
    assert!(snapshot.starts_with("app-config-"), "the template names a snapshot: {history:#?}");
    assert_eq!(history[0].config("app-config").unwrap()["discount_rules_path"], "/etc/rules");
    let snapshot = ns.get_json("configmap", snapshot).unwrap();
    assert_eq!(snapshot["immutable"], true, "{snapshot:#}");
}

/// A suspended Job (as a batch scheduler queues it) whose ConfigMap has a change
/// waiting for propagation gets a scheduling update (its nodeSelector): the API server refuses any
/// other change of a Job's template, so confighistory keeps the Job's references as they are.
/// Needs 1.23+ (mutable scheduling directives of suspended Jobs); skipped on older control planes.
#[test]
fn a_suspended_jobs_scheduling_update_goes_through_during_a_pending_change() {
    let Some(cluster) = cluster() else { return };
    let minor: u32 = cluster.server_version().split('.').nth(1).and_then(|m| m.trim_end_matches('+').parse().ok()).unwrap_or(0);
    if minor < 23 {
        eprintln!("skipped: suspended Jobs' scheduling directives are mutable from 1.23 on");
        return;
    }
    webhook(cluster);
    let ns = TestNamespace::new(cluster, "suspended-job");
    ns.accepts(&config("/etc/rules"));
    let job = |pool: &str| {
        format!(
            "apiVersion: batch/v1
kind: Job
metadata:
  name: train
spec:
  suspend: true
  template:
    spec:
      restartPolicy: Never
      nodeSelector: {{pool: {pool}}}
      containers:
      - name: app
        image: registry.example/app:4.11
        volumeMounts:
        - {{name: config, mountPath: /etc/app}}
      volumes:
      - name: config
        configMap: {{name: app-config}}
"
        )
    };
    ns.accepts(&job("any"));
    let pinned = ns.get_json("job", "train").unwrap()["spec"]["template"]["spec"]["volumes"][0]["configMap"]["name"].clone();
    assert!(pinned.as_str().is_some_and(|n| n.starts_with("app-config-")), "{pinned}");
    ns.accepts(&config("/etc/rules-v2")); // a change, waiting for propagation
    let out =
        ns.kubectl(&["patch", "job", "train", "--type=merge", "-p", r#"{"spec":{"template":{"spec":{"nodeSelector":{"pool":"gpu"}}}}}"#]);
    assert!(out.success, "the scheduling update goes through:\n{}", out.describe());
    let after = ns.get_json("job", "train").unwrap();
    assert_eq!(after["spec"]["template"]["spec"]["volumes"][0]["configMap"]["name"], pinned, "references kept");
    assert_eq!(after["spec"]["template"]["spec"]["nodeSelector"]["pool"], "gpu");
}

/// The live Deployment `app` of `from` as `kubectl get -o json` gives it, without what the API
/// server sets (uid, resourceVersion, status...): what a team pipes into `kubectl apply -n prod`
/// to promote it, or restores from a backup. It keeps confighistory's annotations and the
/// snapshot name staging pinned.
fn live_copy(from: &TestNamespace) -> String {
    let mut d = from.get_json("deployment", "app").expect("the Deployment");
    let meta = d["metadata"].as_object_mut().unwrap();
    for k in ["uid", "resourceVersion", "creationTimestamp", "generation", "managedFields", "namespace"] {
        meta.remove(k);
    }
    d.as_object_mut().unwrap().remove("status");
    d.to_string()
}

/// Promotion by copy (docs/behaviour.md §6.2.5): a Deployment copied from staging names staging's
/// snapshot, which does not exist in the namespace it is applied to. On the real API server it
/// is admitted naming a ConfigMap that exists and holds what the name promises: the same snapshot
/// made here from an identical source; the head, with a warning, where the source here holds
/// other content; and refused, saying what to do, where the source does not exist here.
#[test]
fn a_deployment_copied_from_another_namespace_names_a_configmap_that_exists() {
    let Some(cluster) = cluster() else { return };
    webhook(cluster);
    let staging = TestNamespace::new(cluster, "promote-staging");
    staging.accepts(&config("/etc/rules"));
    staging.accepts(&deployment());
    let pinned = staging.history_of("app")[0].snapshots["app-config"].clone();
    assert!(pinned.starts_with("app-config-"), "{pinned}");
    let copy = live_copy(&staging);
    assert!(copy.contains(&pinned), "the copy names staging's snapshot: {copy}");

    // Production has the same config: the copy runs with it, under the name it gives.
    let same = TestNamespace::new(cluster, "promote-same");
    same.accepts(&config("/etc/rules"));
    assert!(same.get_json("configmap", &pinned).is_none(), "not made here yet");
    same.accepts(&copy);
    let h = same.history_of("app");
    assert_eq!(h[0].snapshots["app-config"], pinned, "{h:#?}");
    assert_eq!(h[0].config("app-config").map(|c| c["discount_rules_path"].as_str()), Some("/etc/rules"), "the name exists here: {h:#?}");

    // Production's config differs: the content that name promises is not here; the head is.
    let other = TestNamespace::new(cluster, "promote-other");
    other.accepts(&config("/etc/prod-rules"));
    let out = other.accepts(&copy);
    assert!(out.stderr.contains(&format!("{pinned} does not exist in {}", other.name)), "{}", out.describe());
    let h = other.history_of("app");
    assert_ne!(h[0].snapshots["app-config"], pinned, "{h:#?}");
    assert_eq!(h[0].config("app-config").map(|c| c["discount_rules_path"].as_str()), Some("/etc/prod-rules"), "{h:#?}");

    // No such ConfigMap in production: refused, saying what to do; nothing is made.
    let none = TestNamespace::new(cluster, "promote-none");
    none.rejects(&copy, "Create ConfigMap app-config first");
    assert!(none.get_json("deployment", "app").is_none());
    assert!(none.list_json("configmaps").iter().all(|c| c["metadata"]["name"] == "kube-root-ca.crt"), "no snapshot made");
}
