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
